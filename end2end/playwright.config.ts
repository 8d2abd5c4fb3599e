import { defineConfig } from "@playwright/test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// The suite starts its own `idem serve` on a fresh embedded database, so that it never
// depends on (or disturbs) a console someone is running on port 3000.
const port = Number(process.env.IDEM_E2E_PORT ?? 3100);
const dataDir = mkdtempSync(join(tmpdir(), "idem-e2e-"));
// IDEM_E2E_BINARY=../target/release/idem checks a release build the same way.
const binary = process.env.IDEM_E2E_BINARY ?? "../target/debug/idem";

export default defineConfig({
  testDir: "./tests",
  timeout: 30_000,
  fullyParallel: false,
  workers: 1,
  forbidOnly: !!process.env.CI,
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
  webServer: {
    command: `${binary} serve --listen 127.0.0.1:${port} --data-dir ${dataDir} --site-root ../target/site`,
    url: `http://127.0.0.1:${port}/readyz`,
    reuseExistingServer: false,
    timeout: 60_000,
    stdout: "ignore",
    stderr: "pipe",
    env: { DATABASE_URL: "", IDEM_LOG: "warn" },
  },
});
