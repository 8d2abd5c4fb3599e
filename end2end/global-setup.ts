import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync } from "node:fs";
import type { FullConfig } from "@playwright/test";
import { binary, servedBy } from "./tests/servers";

/**
 * Starts a provider simulator and an `idem serve` on an embedded database of its own for each
 * worker (tests/servers.ts says where), so that workers run side by side without seeing each
 * other's records, operators or injected faults; stops them when the run ends.
 */
export default async function startServers(config: FullConfig): Promise<() => Promise<void>> {
  const started: ChildProcess[] = [];
  const stop = async () => {
    const running = started.filter(isRunning);
    for (const child of running) child.kill("SIGTERM");
    await Promise.all(running.map((child) => new Promise((done) => child.once("exit", done))));
  };
  try {
    for (let worker = 0; worker < config.workers; worker++) {
      const { port, simPort, dataDir } = servedBy(worker);
      mkdirSync(dataDir, { recursive: true });
      started.push(launch([binary, "provider-sim", "--listen", `127.0.0.1:${simPort}`]));
      await ready(`http://127.0.0.1:${simPort}/_sim/charges`, started);
      started.push(
        launch([
          binary, "serve", "--listen", `127.0.0.1:${port}`, "--metrics-listen", "127.0.0.1:0",
          "--data-dir", dataDir, "--site-root", "../target/site",
          "--provider-url", `http://127.0.0.1:${simPort}`, "--provider-timeout-ms", "1000", "--lease-secs", "5",
          "--metrics-flush-ms", "200", "--recovery-max-attempts", "0", "--settlement-interval-ms", "500",
        ]),
      );
      await ready(`http://127.0.0.1:${port}/readyz`, started);
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return stop;
}

function launch([command, ...args]: string[]): ChildProcess {
  const child = spawn(command, args, {
    env: { ...process.env, DATABASE_URL: "", IDEM_LOG: "warn" },
    stdio: ["ignore", "ignore", "inherit"],
  });
  child.once("error", (error) => console.error(`${command} ${args[0]}: ${error.message}`));
  return child;
}

/** Not yet exited: a child killed by a signal has a `signalCode` and no `exitCode`. */
function isRunning(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/** Polls `url` until it answers 200; fails at once if one of `children` exited, else after 60 s. */
async function ready(url: string, children: ChildProcess[]): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const exited = children.find((child) => !isRunning(child));
    if (exited) throw new Error(`${exited.spawnargs.slice(0, 2).join(" ")} exited (${exited.exitCode ?? exited.signalCode})`);
    try {
      if ((await fetch(url)).status === 200) return;
    } catch {
      // Not listening yet.
    }
    await new Promise((next) => setTimeout(next, 100));
  }
  throw new Error(`${url} did not answer 200 within 60 s`);
}
