import { defineConfig } from "@playwright/test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// The suite starts its own `idem serve` on a fresh embedded database, so that it never
// depends on (or disturbs) a console someone is running on port 3000.
const port = Number(process.env.IDEM_E2E_PORT ?? 3100);
const simPort = port + 1;
// The config is read again in every worker: they inherit the main process's choice.
process.env.IDEM_E2E_DATA_DIR ??= mkdtempSync(join(tmpdir(), "idem-e2e-"));
const dataDir = process.env.IDEM_E2E_DATA_DIR;
// IDEM_E2E_BINARY=../target/release/idem checks a release build the same way.
process.env.IDEM_E2E_BINARY ??= "../target/debug/idem";
const binary = process.env.IDEM_E2E_BINARY;
process.env.IDEM_E2E_SIM_URL = `http://127.0.0.1:${simPort}`;

export default defineConfig({
  testDir: "./tests",
  timeout: 30_000,
  fullyParallel: false,
  workers: 1,
  // A stray `.only` would quietly skip every other test, on any machine.
  forbidOnly: true,
  reporter: [["list"]],
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    trace: "off",
    launchOptions: {
      // Debian's Chromium: Playwright's own browser download cannot work offline.
      executablePath: process.env.IDEM_CHROMIUM ?? "/usr/bin/chromium",
      args: [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    },
  },
  webServer: [
    {
      // The provider simulator in its own process, so that tests can inject its faults.
      command: `${binary} provider-sim --listen 127.0.0.1:${simPort}`,
      url: `http://127.0.0.1:${simPort}/_sim/charges`,
      reuseExistingServer: false,
      timeout: 30_000,
      stdout: "ignore",
      stderr: "pipe",
      env: { IDEM_LOG: "warn" },
    },
    {
      command:
        `${binary} serve --listen 127.0.0.1:${port} --metrics-listen 127.0.0.1:0 --data-dir ${dataDir} --site-root ../target/site ` +
        `--provider-url http://127.0.0.1:${simPort} --provider-timeout-ms 1000 --lease-secs 5 ` +
        `--metrics-flush-ms 200 --recovery-max-attempts 0 --settlement-interval-ms 500`,
      url: `http://127.0.0.1:${port}/readyz`,
      reuseExistingServer: false,
      timeout: 60_000,
      stdout: "ignore",
      stderr: "pipe",
      env: { DATABASE_URL: "", IDEM_LOG: "warn" },
    },
  ],
});
