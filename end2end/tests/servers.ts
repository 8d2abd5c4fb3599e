import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// The suite starts its own servers on fresh embedded databases (global-setup.ts), so that it
// never depends on (or disturbs) a console someone is running on port 3000. Worker w's
// `idem serve` listens on IDEM_E2E_PORT + 10w (3100 unless set) and its provider simulator on
// the port after it. Read in the main process and again in every worker: the workers inherit
// the main process's data directory through the environment.
process.env.IDEM_E2E_DATA_DIR ??= mkdtempSync(join(tmpdir(), "idem-e2e-"));
// IDEM_E2E_BINARY=../target/release/idem checks a release build the same way.
export const binary = process.env.IDEM_E2E_BINARY ?? "../target/debug/idem";

export function servedBy(worker: number): { port: number; simPort: number; dataDir: string } {
  const port = Number(process.env.IDEM_E2E_PORT ?? 3100) + 10 * worker;
  return { port, simPort: port + 1, dataDir: join(process.env.IDEM_E2E_DATA_DIR ?? "", `worker-${worker}`) };
}
