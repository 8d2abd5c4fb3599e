"""The workloads of scripts/bench: each runs for a fixed time in several interleaved rounds
against a release `idem serve`, with the database work per request read from PostgreSQL's
own counters; the medians (with min-max) go to docs/benchmarks.md and docs/benchmarks.json.

Load is closed-loop (wrk, 2 threads, 16 connections): latencies are at saturation and not
corrected for coordinated omission.
"""

import argparse
import base64
import json
import os
import platform
import re
import secrets
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

THREADS, CONNECTIONS = 2, 16
REPLAY_KEYS = 1000
BODY = '{{"accountId":"acc_1","amount":"1.00","currency":"EUR","merchantReference":"{ref}"}}'

# The statement a replay runs (RecordStatements::LOOK_UP_RECORD for PostgreSQL), for its
# pgbench ceiling.
LOOK_UP = (
    "select r.status, r.progress_step, cast(r.fingerprint_version as integer), r.request_fingerprint, "
    "r.lease_version, r.locked_until, r.expires_at, r.resource_id, r.response_schema_version, "
    "r.next_recovery_at, now(), r.response_status_code, s.headers, s.body from idempotency_records r "
    "left join idempotency_responses s on s.tenant_id = r.tenant_id and s.operation_name = "
    "r.operation_name and s.idempotency_key = r.idempotency_key where r.tenant_id = '{tenant}' and "
    "r.operation_name = 'create_payment' and r.idempotency_key = 'r-' || :k;"
)

LUA_COMMON = """
done = function(summary, latency, requests)
  local out = io.open(os.getenv("IDEM_BENCH_RESULT"), "w")
  out:write(string.format('{"requests":%d,"seconds":%f,"non2xx":%d,"errors":%d,'
    .. '"p50":%f,"p90":%f,"p99":%f,"p999":%f}',
    summary.requests, summary.duration / 1e6, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency:percentile(99.9) / 1000))
  out:close()
end
"""

LUA = {
    "healthz": "",
    "get_payment": """
wrk.headers["Authorization"] = "Bearer " .. os.getenv("IDEM_BENCH_KEY")
wrk.path = "/payments/" .. os.getenv("IDEM_BENCH_PAYMENT")
""",
    "replay": """
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("IDEM_BENCH_KEY")
wrk.headers["Content-Type"] = "application/json"
request = function()
  local n = math.random(0, %d)
  wrk.headers["Idempotency-Key"] = "r-" .. n
  return wrk.format(nil, "/payments", nil,
    '{"accountId":"acc_1","amount":"1.00","currency":"EUR","merchantReference":"r-' .. n .. '"}')
end
""" % (REPLAY_KEYS - 1),
    "fresh_create": """
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("IDEM_BENCH_KEY")
wrk.headers["Content-Type"] = "application/json"
local counter = 0
local prefix
setup = function(thread) thread:set("id", math.random(1, 1000000000)) end
init = function() prefix = os.getenv("IDEM_BENCH_PREFIX") .. "-" .. id .. "-" end
request = function()
  counter = counter + 1
  local key = prefix .. counter
  wrk.headers["Idempotency-Key"] = key
  return wrk.format(nil, "/payments", nil,
    '{"accountId":"acc_1","amount":"1.00","currency":"EUR","merchantReference":"' .. key .. '"}')
end
""",
}


def run(command, env=None, check=True):
    return subprocess.run(command, env=env, check=check, capture_output=True, text=True)


def http(method, url, body=None, headers=None):
    request = urllib.request.Request(url, data=body.encode() if body else None, method=method)
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class Postgres:
    def __init__(self, admin_url):
        self.admin_url = admin_url

    def url(self, database):
        return re.sub(r"/[^/]*$", "/" + database, self.admin_url)

    def sql(self, sql, database="postgres"):
        return run(["psql", self.url(database), "-Atqc", sql]).stdout.strip()

    def create(self, database):
        self.sql(f"drop database if exists {database}")
        self.sql(f"create database {database}")

    def counters(self, database):
        """Commits, statements (pg_stat_statements, BEGIN/COMMIT excluded), WAL bytes."""
        commits = int(self.sql(f"select xact_commit from pg_stat_database where datname = '{database}'"))
        statements = int(self.sql(
            "select coalesce(sum(calls), 0) from pg_stat_statements s join pg_database d on d.oid = s.dbid "
            f"where d.datname = '{database}' and s.query !~* '^(begin|commit|rollback)'"
        ))
        explicit_commits = int(self.sql(
            "select coalesce(sum(calls), 0) from pg_stat_statements s join pg_database d on d.oid = s.dbid "
            f"where d.datname = '{database}' and s.query ~* '^commit'"
        ))
        wal = int(self.sql("select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"))
        return {"commits": commits, "statements": statements, "explicit_commits": explicit_commits, "wal": wal}


class Idem:
    """A release `idem serve` with its tenant, key and account."""

    def __init__(self, binary, data_dir, database_url, provider_url):
        self.binary, self.data_dir = binary, data_dir
        self.env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("IDEM_")}
        self.env.update({
            "IDEM_DATA_DIR": data_dir,
            "IDEM_LOG": "warn",
            "IDEM_RESPONSE_KEYS": "b1:" + base64.b64encode(secrets.token_bytes(32)).decode(),
        })
        if database_url:
            self.env["DATABASE_URL"] = database_url
        run([binary, "migrate"], env=self.env)
        run([binary, "tenant", "create", "bench"], env=self.env)
        self.key = run([binary, "api-key", "create", "--tenant", "bench"], env=self.env).stdout.strip()
        run([binary, "account", "create", "--tenant", "bench", "--id", "acc_1", "--currency", "EUR",
             "--balance", "100000000.00"], env=self.env)
        self.process = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--provider-url", provider_url, "--rate-limit-per-sec", "0"],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = re.search(r"http://[^/]+", self.process.stdout.readline()).group(0)
        self.process.stdout.readline()  # the metrics listener
        for _ in range(300):
            if http("GET", self.url + "/readyz")[0] == 200:
                break
            time.sleep(0.1)

    def pay(self, key, ref):
        return http("POST", self.url + "/payments", BODY.format(ref=ref), {
            "Authorization": "Bearer " + self.key, "Idempotency-Key": key, "Content-Type": "application/json"})

    def cpu_seconds(self):
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self):
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)


def wrk(url, workload, seconds, env):
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch, "workload.lua")
        script.write_text(LUA[workload] + LUA_COMMON)
        result = Path(scratch, "result.json")
        env = dict(os.environ, IDEM_BENCH_RESULT=str(result), **env)
        run(["wrk", f"-t{THREADS}", f"-c{CONNECTIONS}", f"-d{seconds}s", "-s", str(script), url], env=env)
        return json.loads(result.read_text())


def pgbench(postgres, args, seconds, database="pgbench_bench"):
    output = run(["pgbench", "-n", f"-c{CONNECTIONS}", f"-j{THREADS}", f"-T{seconds}",
                  *args, postgres.url(database)]).stdout
    tps = float(re.search(r"tps = ([\d.]+) \(without", output).group(1))
    latency = float(re.search(r"latency average = ([\d.]+) ms", output).group(1))
    return {"throughput": tps, "p50": latency}


def measure(idem, postgres, database, workload, seconds, env):
    """One run: throughput, latency, and the database work and server CPU per request."""
    before = postgres.counters(database) if postgres else None
    cpu = idem.cpu_seconds()
    result = wrk(idem.url if workload != "healthz" else idem.url + "/healthz", workload, seconds, env)
    cpu = idem.cpu_seconds() - cpu
    requests = max(result["requests"], 1)
    row = {
        "throughput": result["requests"] / result["seconds"],
        "p50": result["p50"], "p90": result["p90"], "p99": result["p99"], "p999": result["p999"],
        "non2xx": result["non2xx"], "errors": result["errors"],
        "cpu_ms_per_request": 1000 * cpu / requests, "rss_mb": idem.rss_mb(),
    }
    if postgres:
        # Idle connections report their transactions after 10 s (PGSTAT_IDLE_INTERVAL).
        time.sleep(11)
        after = postgres.counters(database)
        for name in ("commits", "statements", "explicit_commits", "wal"):
            row[f"{name}_per_request"] = (after[name] - before[name]) / requests
    return row


def summarise(samples):
    keys = samples[0].keys()
    return {key: {"median": statistics.median(s[key] for s in samples),
                  "min": min(s[key] for s in samples), "max": max(s[key] for s in samples)} for key in keys}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--postgres", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    postgres = Postgres(args.postgres)
    postgres.sql("create extension if not exists pg_stat_statements")
    postgres.create("idem_bench")
    postgres.create("pgbench_bench")
    run(["pgbench", "-i", "-q", "-s", "10", postgres.url("pgbench_bench")])
    work = Path(tempfile.mkdtemp(prefix="idem-bench-"))
    sim = subprocess.Popen([args.binary, "provider-sim", "--listen", "127.0.0.1:0"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           env=dict(os.environ, IDEM_LOG="warn"))
    sim_url = re.search(r"http://[^/]+", sim.stdout.readline()).group(0)
    servers = {
        "postgres": Idem(args.binary, str(work / "pg"), postgres.url("idem_bench"), sim_url),
        "sqlite": Idem(args.binary, str(work / "sqlite"), None, sim_url),
    }
    tenant = postgres.sql("select id from tenants where name = 'bench'", "idem_bench")
    env = {}
    for name, idem in servers.items():
        status, body = idem.pay("seed", "seed")
        assert status == 201, body
        env[name] = {"IDEM_BENCH_KEY": idem.key, "IDEM_BENCH_PAYMENT": json.loads(body)["paymentId"]}
        for n in range(REPLAY_KEYS):
            assert idem.pay(f"r-{n}", f"r-{n}")[0] == 201

    lookup = Path(work, "lookup.sql")
    lookup.write_text(f"\\set k random(0, {REPLAY_KEYS - 1})\n" + LOOK_UP.format(tenant=tenant) + "\n")
    workloads = [("postgres", w) for w in ("healthz", "get_payment", "replay", "fresh_create")] + \
                [("sqlite", w) for w in ("get_payment", "replay", "fresh_create")]
    samples = {}
    for round_number in range(args.rounds):
        print(f"round {round_number + 1} of {args.rounds}", flush=True)
        for server, workload in workloads:
            idem = servers[server]
            run_env = dict(env[server], IDEM_BENCH_PREFIX=f"f{round_number}")
            database = "idem_bench" if server == "postgres" else None
            row = measure(idem, postgres if database else None, database, workload, args.seconds, run_env)
            samples.setdefault(f"{server} {workload}", []).append(row)
            print(f"  {server} {workload}: {row['throughput']:.0f}/s p99 {row['p99']:.1f} ms", flush=True)
        for name, pg_args in (("pgbench select-only", ["-S"]), ("pgbench TPC-B", []),
                              ("pgbench replay statement", ["-f", str(lookup)])):
            database = "idem_bench" if "replay" in name else "pgbench_bench"
            samples.setdefault(name, []).append(pgbench(postgres, pg_args, args.seconds, database))

    duplicates = int(postgres.sql(
        "select count(*) from (select 1 from payments group by tenant_id, account_id, merchant_reference "
        "having count(*) > 1) d", "idem_bench"))
    charges = json.loads(http("GET", sim_url + "/_sim/charges")[1])["charges"]
    charged_twice = sum(1 for charge in charges if charge["createCalls"] > 1)
    payments = int(postgres.sql("select count(*) from payments", "idem_bench")) + int(run(
        ["sqlite3", str(work / "sqlite" / "idem.db"), "select count(*) from payments"]).stdout)
    for idem in servers.values():
        idem.stop()
    sim.terminate()

    summary = {name: summarise(rows) for name, rows in samples.items()}
    commit = run(["git", "rev-parse", "--short", "HEAD"]).stdout.strip()
    report = {
        "commit": commit,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "postgres": postgres.sql("show server_version")},
        "settings": {"rounds": args.rounds, "seconds": args.seconds, "threads": THREADS,
                     "connections": CONNECTIONS, "replay_keys": REPLAY_KEYS},
        "correctness": {"duplicate_payments": duplicates, "duplicate_charges": charged_twice,
                        "payments": payments, "charges": len(charges)},
        "results": summary,
    }
    out = Path(args.out)
    (out / "benchmarks.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "benchmarks.md").write_text(markdown(report))
    print(f"wrote {out / 'benchmarks.md'}")


def markdown(report):
    def cell(result, key, digits=0):
        if key not in result:
            return "-"
        value = result[key]
        return f"{value['median']:.{digits}f} ({value['min']:.{digits}f}-{value['max']:.{digits}f})"

    rows = []
    for name, result in report["results"].items():
        rows.append("| " + " | ".join([
            name, cell(result, "throughput"), cell(result, "p50", 2), cell(result, "p99", 2),
            cell(result, "p999", 2), cell(result, "commits_per_request", 2),
            cell(result, "statements_per_request", 2), cell(result, "wal_per_request"),
            cell(result, "cpu_ms_per_request", 3), cell(result, "rss_mb")]) + " |")
    results = report["results"]

    def ratio(a, b):
        return results[a]["throughput"]["median"] / results[b]["throughput"]["median"]

    ratios = [
        f"- replay / `GET /payments/{{id}}` (PostgreSQL): {ratio('postgres replay', 'postgres get_payment'):.2f} (target >= 0.9)",
        f"- replay / the pgbench ceiling of its statement: {ratio('postgres replay', 'pgbench replay statement'):.2f}",
        f"- replay / `GET /payments/{{id}}` (SQLite): {ratio('sqlite replay', 'sqlite get_payment'):.2f} (target >= 0.9)",
        f"- SQLite replay p99 / p50: {results['sqlite replay']['p99']['median'] / results['sqlite replay']['p50']['median']:.1f} (target <= 10)",
        f"- SQLite fresh create p99 / p50: {results['sqlite fresh_create']['p99']['median'] / results['sqlite fresh_create']['p50']['median']:.1f} (target <= 10)",
    ]
    settings = report["settings"]
    return "\n".join([
        "# Benchmarks",
        "",
        f"Written by `scripts/bench` at commit `{report['commit']}` on {report['machine']['cpus']} CPUs "
        f"({report['machine']['platform']}), PostgreSQL {report['machine']['postgres']} (fsync on). "
        f"{settings['rounds']} interleaved rounds of {settings['seconds']} s per workload, wrk with "
        f"{settings['threads']} threads and {settings['connections']} connections (closed loop: "
        "latencies at saturation, not corrected for coordinated omission); replays over "
        f"{settings['replay_keys']} keys, uniform. Medians, with min-max over the rounds. Database work per "
        "request from `pg_stat_database` (transactions committed, a statement outside a transaction "
        "counting as one) and `pg_stat_statements` (statements, BEGIN/COMMIT excluded); WAL bytes "
        "from the WAL position; CPU from the server process.",
        "",
        "| workload | requests/s | p50 ms | p99 ms | p99.9 ms | commits/req | statements/req | WAL bytes/req | server CPU ms/req | RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Ratios (same run):",
        "",
        *ratios,
        "",
        "Not measured yet (issue 13): the baseline route without the idempotency layer (a `bench` "
        "cargo feature), the pgbench ceiling of a fresh create's own statements, open-loop latency "
        "at 50% and 80% of the baseline (corrected for coordinated omission), conflicts, duplicate "
        "storms over two instances, the 80/15/4/1 mix, growth to 10^6 records, and the mix with "
        "the cleanup worker purging a backlog.",
        "",
        f"Correctness after the run: {report['correctness']['duplicate_payments']} duplicate payments, "
        f"{report['correctness']['duplicate_charges']} provider keys charged twice, "
        f"{report['correctness']['payments']} payments and {report['correctness']['charges']} charges.",
        "",
    ])


if __name__ == "__main__":
    main()
