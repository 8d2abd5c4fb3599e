import { defineConfig } from "@playwright/test";

// Each worker has its own `idem serve` and provider simulator (global-setup.ts, started before
// any test; tests/servers.ts says where), and takes whole files in order: two workers run
// side by side on two cores.
export default defineConfig({
  testDir: "./tests",
  timeout: 30_000,
  globalSetup: "./global-setup.ts",
  fullyParallel: false,
  workers: 2,
  // A stray `.only` would quietly skip every other test, on any machine.
  forbidOnly: true,
  reporter: [["list"]],
  use: {
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
});
