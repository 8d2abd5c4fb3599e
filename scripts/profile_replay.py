"""Where a replay's cost goes, next to `GET /payments/{id}`'s (scripts/profile-replay): the
same release `idem serve` answers both workloads of scripts/bench in interleaved rounds; for
each it reports throughput, the CPU milliseconds per request of the server and of PostgreSQL
(every postgres process, from /proc), and the server's context switches per request
(`perf stat`). `--journal-off` runs a second server whose request journal is never flushed
during the runs, to show what the journal's inserts cost the database. `--perf-record DIR`
keeps a `perf record` of the server during the last round of each workload (flat: the release
build has no debug information; `perf report -i DIR/<workload>.data --sort dso,symbol`).
`--callgrind DIR` also runs a server under valgrind's callgrind and reports the instructions it
executes per request of each workload (its own and its background's, less an idle window's;
user space only): a count that, unlike time, does not depend on what else the machine is doing.
Its dumps stay in DIR (`callgrind_annotate --inclusive=yes DIR/callgrind.out.<pid>.3` for the
replay). Valgrind has no SHA-NI, so SHA-256 runs its portable code there and the fingerprint's
share is overstated.
"""

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import bench


def postgres_cpu_seconds():
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if text[text.index("(") + 1:text.rindex(")")].startswith("postgres"):
            total += bench.cpu_seconds(text)
    return total


def profile(idem, workload, seconds, env, record=None):
    scratch = tempfile.TemporaryDirectory()
    stat_file = Path(scratch.name, "perf-stat")
    counters = subprocess.Popen(["perf", "stat", "-e", "context-switches", "-p", str(idem.process.pid),
                                 "-o", str(stat_file)])
    recorder = subprocess.Popen(["perf", "record", "-F", "2000", "-o", record, "-p", str(idem.process.pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if record else None
    time.sleep(0.3)
    database_cpu = postgres_cpu_seconds()
    row = bench.measure(idem, None, None, workload, seconds, env)
    database_cpu = postgres_cpu_seconds() - database_cpu
    for process in filter(None, (counters, recorder)):
        process.send_signal(2)
        process.wait()
    requests = max(row["throughput"] * seconds, 1)
    switches = int(re.search(r"([\d,]+)\s+context-switches", stat_file.read_text()).group(1).replace(",", ""))
    scratch.cleanup()
    return {"throughput": row["throughput"], "server_cpu_ms": row["cpu_ms_per_request"],
            "postgres_cpu_ms": 1000 * database_cpu / requests, "switches": switches / requests}


def instructions_per_request(args, postgres, sim_url, work):
    """The server's instructions per request of each workload, counted by callgrind (only while
    the workloads run, over a few connections: valgrind runs one thread at a time)."""
    out = Path(args.callgrind).resolve()
    out.mkdir(parents=True, exist_ok=True)
    postgres.create("idem_profile_callgrind")
    idem = bench.Idem(args.binary, str(work / "callgrind"), postgres.url("idem_profile_callgrind"), sim_url,
                      under=("valgrind", "--tool=callgrind", "--instr-atstart=no",
                             f"--callgrind-out-file={out}/callgrind.out.%p"))
    env = idem.seed_replays()
    pid = str(idem.process.pid)
    requests = {}
    try:
        subprocess.run(["callgrind_control", "--instr=on", pid], check=True, stdout=subprocess.DEVNULL)
        # A window of the same length without requests: the background's own instructions
        # (heartbeats, idle polls), subtracted from each workload's window.
        time.sleep(args.seconds + 1)
        subprocess.run(["callgrind_control", "--dump=idle", pid], check=True, stdout=subprocess.DEVNULL)
        for workload in ("get_payment", "replay"):
            requests[workload] = bench.wrk(idem.url, workload, args.seconds,
                                           dict(env, IDEM_BENCH_PREFIX="callgrind"), connections=4)["requests"]
            time.sleep(1)  # the journal's flush of the last requests
            subprocess.run(["callgrind_control", f"--dump={workload}", pid], check=True, stdout=subprocess.DEVNULL)
    finally:
        idem.stop()

    def instructions(part):
        dump = (out / f"callgrind.out.{pid}.{part}").read_text(errors="replace")
        return int(re.search(r"^totals: (\d+)", dump, re.MULTILINE).group(1))

    idle = instructions(1)
    per_request = {workload: (instructions(part) - idle) / max(count, 1)
                   for part, (workload, count) in enumerate(requests.items(), start=2)}
    lines = [f"  {workload}: {per_request[workload]:,.0f} ({count} requests)" for workload, count in requests.items()]
    lines.append(f"  replay / GET: {per_request['replay'] / per_request['get_payment']:.2f}; dumps in {out}")
    return "\ninstructions a request (callgrind):\n" + "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--postgres", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--journal-off", action="store_true")
    parser.add_argument("--perf-record")
    parser.add_argument("--callgrind")
    args = parser.parse_args()

    postgres = bench.Postgres(args.postgres)
    work = Path(tempfile.mkdtemp(prefix="idem-profile-"))
    sim = subprocess.Popen([args.binary, "provider-sim", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, IDEM_LOG="warn"))
    sim_url = re.search(r"http://[^/]+", sim.stdout.readline()).group(0)
    variants = {"journal on": ()}
    if args.journal_off:
        variants["journal off"] = ("--journal-flush-ms", str(24 * 3600 * 1000))
    servers, env = {}, {}
    for name, extra in variants.items():
        database = "idem_profile_" + name.replace(" ", "_")
        postgres.create(database)
        servers[name] = bench.Idem(args.binary, str(work / database), postgres.url(database), sim_url, extra=extra)
        env[name] = servers[name].seed_replays()
    samples = {}
    try:
        for round_number in range(args.rounds):
            for name, idem in servers.items():
                for workload in ("get_payment", "replay"):
                    last = round_number == args.rounds - 1
                    record = (f"{args.perf_record}/{workload}-{name.replace(' ', '-')}.data"
                              if args.perf_record and last else None)
                    run_env = dict(env[name], IDEM_BENCH_PREFIX=f"p{round_number}{workload}")
                    row = profile(idem, workload, args.seconds, run_env, record)
                    samples.setdefault((name, workload), []).append(row)
                    print(f"round {round_number + 1}, {name}, {workload}: {row['throughput']:.0f}/s, server "
                          f"{row['server_cpu_ms']:.3f} ms, postgres {row['postgres_cpu_ms']:.3f} ms, "
                          f"{row['switches']:.2f} context switches a request", flush=True)
    finally:
        for idem in servers.values():
            idem.stop()
    try:
        counted = instructions_per_request(args, postgres, sim_url, work) if args.callgrind else ""
    finally:
        sim.terminate()
    print("\nmedians (min-max):")
    for (name, workload), rows in samples.items():
        cells = []
        for key, unit in (("throughput", "/s"), ("server_cpu_ms", " ms server"), ("postgres_cpu_ms", " ms postgres")):
            values = [row[key] for row in rows]
            digits = 0 if key == "throughput" else 3
            cells.append(f"{statistics.median(values):.{digits}f}{unit} ({min(values):.{digits}f}-{max(values):.{digits}f})")
        print(f"  {name}, {workload}: " + ", ".join(cells))
    for name in servers:
        ratios = [replay["throughput"] / get["throughput"]
                  for get, replay in zip(samples[(name, "get_payment")], samples[(name, "replay")])]
        print(f"  {name}: replay / GET per round {', '.join(f'{r:.2f}' for r in ratios)}; "
              f"median {statistics.median(ratios):.2f}")
    if counted:
        print(counted)


if __name__ == "__main__":
    main()
