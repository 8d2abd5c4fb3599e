"""The workloads of scripts/bench: each runs for a fixed time in several interleaved rounds
against a release `idem serve`, with the database work per request read from PostgreSQL's
own counters; the medians (with min-max) go to docs/benchmarks.md and docs/benchmarks.json.

Load is closed-loop (wrk, 2 threads, 16 connections): latencies are at saturation and not
corrected for coordinated omission.
"""

import argparse
import base64
import concurrent.futures
import json
import os
import platform
import re
import secrets
import sqlite3
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

THREADS, CONNECTIONS = 2, 16
REPLAY_KEYS = 1000
# Payments are spread over this many accounts: each payment locks its account's balance row
# for its local transaction, so one account is a queue of its own (measured apart, below).
ACCOUNTS = 64
BODY = '{{"accountId":"acc_{account}","amount":"{amount}","currency":"EUR","merchantReference":"{ref}"}}'
GROWTH = (10_000, 100_000, 1_000_000)
CLEANUP_BACKLOG = 200_000

# The statement a replay runs (RecordStatements::LOOK_UP_RECORD for PostgreSQL), for its
# pgbench ceiling.
LOOK_UP = (
    "select r.status, r.progress_step, cast(r.fingerprint_version as integer), r.request_fingerprint, "
    "r.lease_version, r.locked_until, r.expires_at, r.resource_id, r.response_schema_version, "
    "r.next_recovery_at, r.created_at, now(), r.response_status_code, s.headers, s.body from idempotency_records r "
    "left join idempotency_responses s on s.tenant_id = r.tenant_id and s.operation_name = "
    "r.operation_name and s.idempotency_key = r.idempotency_key where r.tenant_id = '{tenant}' and "
    "r.operation_name = 'create_payment' and r.idempotency_key = 'r-' || :k;"
)

# The request path of a fresh create on PostgreSQL, statement for statement and commit for
# commit: the look-up, the claim's one statement (RecordStatements::CLAIM_PAYMENT_AT_ONCE) and
# the completion's (COMPLETE_PAYMENT_AT_ONCE), each in its transaction, on the same tables,
# indexes and triggers: the ceiling of what Idem's own statements allow.
FRESH_CREATE = """\\set k random(1, 1000000000000)
\\set a random(0, {last_account})
{look_up}
begin;
with claimed as (insert into idempotency_records (tenant_id, operation_name, idempotency_key, fingerprint_version, request_fingerprint, canonical_command, status, progress_step, resource_type, resource_id, response_schema_version, lease_owner, lease_version, locked_until, created_by, expires_at) values ('{tenant}', 'create_payment', 'pgb-' || :k, 1, repeat('f', 64), repeat('c', 120), 'IN_PROGRESS', 'PROVIDER_REQUEST_SENT', 'payment', 'pay_pgb' || :k, '2025-01-01', 'bench', 1, now() + interval '30 seconds', 'key_bench', now() + interval '1 day') on conflict (tenant_id, operation_name, idempotency_key) do nothing returning lease_version, expires_at, claimed_as), renewed as (delete from idempotency_responses where tenant_id = '{tenant}' and operation_name = 'create_payment' and idempotency_key = 'pgb-' || :k and exists (select 1 from claimed where claimed_as <> 'new')), held as (update accounts set balance_minor = balance_minor - 100, updated_at = now() where tenant_id = '{tenant}' and id = 'acc_' || :a and currency = 'EUR' and balance_minor >= 100 and exists (select 1 from claimed) returning 1), payment as (insert into payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference, channel, status, idempotency_key) select 'pay_pgb' || :k, '{tenant}', 'acc_' || :a, 100, 'EUR', 'pgb-' || :k, 'web', 'PROCESSING', 'pgb-' || :k from held returning created_at), event as (insert into outbox_events (id, payment_id, event_type, payload) select 'evt_pgb_c' || :k, 'pay_pgb' || :k, 'PaymentCreated', repeat('p', 200) from payment) select c.lease_version, c.expires_at, c.claimed_as, p.created_at from claimed c left join payment p on true;
commit;
begin;
with settled as (update idempotency_records set status = 'COMPLETED', progress_step = 'COMPLETED', response_status_code = 201, provider_reference = 'ch_pgb' || :k, locked_until = null, completed_at = now(), updated_at = now() where tenant_id = '{tenant}' and operation_name = 'create_payment' and idempotency_key = 'pgb-' || :k and lease_version = 1 and status = 'IN_PROGRESS' returning 1), response as (insert into idempotency_responses (tenant_id, operation_name, idempotency_key, headers, body) select '{tenant}', 'create_payment', 'pgb-' || :k, repeat('h', 120), decode(repeat('ab', 400), 'hex') from settled), payment as (update payments set status = 'PENDING', provider_charge_id = 'ch_pgb' || :k, updated_at = now() where id = 'pay_pgb' || :k and status = 'PROCESSING' and exists (select 1 from settled) returning tenant_id, account_id, amount_minor), released as (update accounts a set balance_minor = a.balance_minor + p.amount_minor, updated_at = now() from payment p where false and a.tenant_id = p.tenant_id and a.id = p.account_id), event as (insert into outbox_events (id, payment_id, event_type, payload) select 'evt_pgb_a' || :k, 'pay_pgb' || :k, 'PaymentAuthorized', repeat('p', 200) from payment) select (select count(*) from settled), (select count(*) from payment);
commit;
"""

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

LUA_POST = """
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("IDEM_BENCH_KEY")
wrk.headers["Content-Type"] = "application/json"
local accounts = %d
local replay_keys = %d
local counter = 0
local prefix
math.randomseed(os.time())
setup = function(thread) thread:set("id", math.random(1, 1000000000)) end
init = function() prefix = os.getenv("IDEM_BENCH_PREFIX") .. "-" .. (id or 0) .. "-" end
local function body(account, amount, reference)
  return '{"accountId":"acc_' .. account .. '","amount":"' .. amount
    .. '","currency":"EUR","merchantReference":"' .. reference .. '"}'
end
local function keyed(key, payload)
  wrk.headers["Idempotency-Key"] = key
  return wrk.format(nil, "/payments", nil, payload)
end
local function fresh()
  counter = counter + 1
  local key = prefix .. counter
  return keyed(key, body(counter %% accounts, "1.00", key))
end
local function replay(amount)
  local n = math.random(0, replay_keys - 1)
  return keyed("r-" .. n, body(n %% accounts, amount, "r-" .. n))
end
""" % (ACCOUNTS, REPLAY_KEYS)

LUA = {
    "healthz": "",
    "get_payment": """
wrk.headers["Authorization"] = "Bearer " .. os.getenv("IDEM_BENCH_KEY")
wrk.path = "/payments/" .. os.getenv("IDEM_BENCH_PAYMENT")
""",
    "replay": LUA_POST + 'request = function() return replay("1.00") end\n',
    "conflict": LUA_POST + 'request = function() return replay("2.00") end\n',
    "fresh_create": LUA_POST + "request = fresh\n",
    "baseline": LUA_POST + """
request = function()
  counter = counter + 1
  local reference = prefix .. counter
  wrk.headers["Idempotency-Key"] = nil
  return wrk.format(nil, "/payments", nil, body(counter % accounts, "1.00", reference))
end
""",
    "mix": LUA_POST + """
request = function()
  local roll = math.random(1, 100)
  if roll <= 80 then return fresh() end
  if roll <= 95 then return replay("1.00") end
  if roll <= 99 then return replay("2.00") end
  counter = counter + 1
  return keyed(prefix .. counter, '{"accountId":"acc_1","amount":1.00}')
end
""",
    # Every thread of every client walks the same keys, four requests per key: each key
    # gets concurrent duplicates from both instances.
    "storm": LUA_POST + """
request = function()
  counter = counter + 1
  local key = os.getenv("IDEM_BENCH_PREFIX") .. "-" .. math.floor(counter / 4)
  return keyed(key, body(0, "1.00", key))
end
""",
    "one_account": LUA_POST + """
request = function()
  counter = counter + 1
  local key = prefix .. counter
  return keyed(key, body(0, "1.00", key))
end
""",
}

# The sections of benchmarks.md that scripts/bench-incident and scripts/bench-floods write; a
# run of this script keeps them.
INCIDENT_SECTION = ("<!-- incident-day -->", "<!-- /incident-day -->")
FLOODS_SECTION = ("<!-- floods -->", "<!-- /floods -->")


def kept_sections(page):
    """The other scripts' sections of `page` as they stand (each after a blank line), or ""."""
    text = page.read_text() if page.exists() else ""
    kept = ""
    for start, end in (INCIDENT_SECTION, FLOODS_SECTION):
        if start in text:
            kept += "\n" + start + text.split(start, 1)[1].split(end, 1)[0] + end + "\n"
    return kept


def with_section(path, section, markdown_text):
    """`path`'s text with `section` (its start and end markers) replaced by `markdown_text`,
    or `markdown_text` added at the end."""
    start, end = section
    text = path.read_text() if path.exists() else ""
    if start in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1].lstrip("\n")
        return before + markdown_text + after
    return text.rstrip("\n") + "\n\n" + markdown_text


def publish(out, name, report, section, markdown_text):
    """Writes `report` to `<out>/<name>.json` and `markdown_text` as `section` of
    `<out>/benchmarks.md`."""
    out = Path(out)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    page = out / "benchmarks.md"
    page.write_text(with_section(page, section, markdown_text))
    print(f"wrote {page}")


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

    def next_transaction_id(self):
        """The id the cluster's next writing transaction takes. A transaction gets an id only
        when it writes, so the difference between two readings counts the transactions that
        wrote, in every database, and none that only read."""
        return int(self.sql("select pg_snapshot_xmax(pg_current_snapshot())::text::bigint"))

    def pause_autovacuum(self, paused):
        """Autovacuum's ANALYZE writes statistics in a transaction that takes an id of its own:
        paused, with its workers done, only clients take ids."""
        self.sql(f"alter system set autovacuum = {'off' if paused else 'on'}")
        self.sql("select pg_reload_conf()")
        if not paused:
            return
        for _ in range(600):
            if self.sql("select count(*) from pg_stat_activity where backend_type = 'autovacuum worker'") == "0":
                return
            time.sleep(0.1)
        raise RuntimeError("autovacuum workers still running after 60 s")

    def counters(self, database):
        """Commits, statements Idem sent (pg_stat_statements' top-level ones, BEGIN/COMMIT
        excluded: not the foreign-key checks and trigger statements they cause), WAL bytes."""
        commits = int(self.sql(f"select xact_commit from pg_stat_database where datname = '{database}'"))
        statements = int(self.sql(
            "select coalesce(sum(calls), 0) from pg_stat_statements s join pg_database d on d.oid = s.dbid "
            f"where d.datname = '{database}' and s.toplevel and s.query !~* '^(begin|commit|rollback)'"
        ))
        # The look-up of a key's record, a read run outside any transaction, which
        # pg_stat_database counts as a commit.
        look_ups = int(self.sql(
            "select coalesce(sum(calls), 0) from pg_stat_statements s join pg_database d on d.oid = s.dbid "
            f"where d.datname = '{database}' and s.query ~* '^select r.status, r.progress_step'"
        ))
        # Every statement Idem sent, BEGIN, COMMIT and ROLLBACK included: a round trip each
        # (sqlx sends each statement's bind, execute and sync together).
        round_trips = int(self.sql(
            "select coalesce(sum(calls), 0) from pg_stat_statements s join pg_database d on d.oid = s.dbid "
            f"where d.datname = '{database}' and s.toplevel"
        ))
        wal = int(self.sql("select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"))
        return {"commits": commits, "statements": statements,
                "look_ups": look_ups, "round_trips": round_trips, "wal": wal}


class Idem:
    """A release `idem serve`; the first on a database also makes its tenant (keys optional,
    so that requests without one are the baseline), API key and accounts."""

    def __init__(self, binary, data_dir, database_url, provider_url, share=None, extra=(), under=()):
        self.binary, self.data_dir = binary, data_dir
        if share:
            self.env = dict(share.env, IDEM_DATA_DIR=data_dir)
            self.key = share.key
        else:
            self.env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("IDEM_")}
            self.env.update({
                "IDEM_DATA_DIR": data_dir,
                "IDEM_LOG": "warn",
                "IDEM_RESPONSE_KEYS": "b1:" + base64.b64encode(secrets.token_bytes(32)).decode(),
            })
            if database_url:
                self.env["DATABASE_URL"] = database_url
            run([binary, "migrate"], env=self.env)
            run([binary, "tenant", "create", "bench", "--optional-idempotency-key"], env=self.env)
            self.key = run([binary, "api-key", "create", "--tenant", "bench"], env=self.env).stdout.strip()
            for account in range(ACCOUNTS):
                run([binary, "account", "create", "--tenant", "bench", "--id", f"acc_{account}",
                     "--currency", "EUR", "--balance", "100000000.00"], env=self.env)
        # `under`: a tool the server runs inside (valgrind), in the same process.
        self.process = subprocess.Popen(
            [*under, binary, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--provider-url", provider_url, "--rate-limit-per-sec", "0", *extra],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = re.search(r"http://[^/]+", self.process.stdout.readline()).group(0)
        self.process.stdout.readline()  # the metrics listener
        for _ in range(300):
            if http("GET", self.url + "/readyz")[0] == 200:
                break
            time.sleep(0.1)

    def pay(self, key, ref, account=0):
        return http("POST", self.url + "/payments", BODY.format(account=account, amount="1.00", ref=ref), {
            "Authorization": "Bearer " + self.key, "Idempotency-Key": key, "Content-Type": "application/json"})

    def seed_replays(self):
        """The keys replays retry, and a payment to read."""
        status, body = self.pay("seed", "seed")
        assert status == 201, body
        for n in range(REPLAY_KEYS):
            assert self.pay(f"r-{n}", f"r-{n}", n % ACCOUNTS)[0] == 201
        return {"IDEM_BENCH_KEY": self.key, "IDEM_BENCH_PAYMENT": json.loads(body)["paymentId"]}

    def cpu_seconds(self):
        return cpu_seconds(Path(f"/proc/{self.process.pid}/stat").read_text())

    def rss_mb(self):
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)


def cpu_seconds(proc_stat):
    """User and system CPU seconds from a process's /proc/<pid>/stat text."""
    fields = proc_stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk(url, workload, seconds, env, connections=CONNECTIONS):
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch, "workload.lua")
        script.write_text(LUA[workload] + LUA_COMMON)
        result = Path(scratch, "result.json")
        env = dict(os.environ, IDEM_BENCH_RESULT=str(result), **env)
        run(["wrk", f"-t{THREADS}", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url], env=env)
        return json.loads(result.read_text())


def open_loop(load, idem, workload, rate, seconds, env):
    """Latencies at a fixed arrival rate, each from the moment its request was due."""
    output = run([load, "--url", idem.url, "--api-key", idem.key, "--workload", workload.replace("_", "-"),
                  "--rate", str(max(int(rate), 1)), "--seconds", str(seconds),
                  "--payment", env["IDEM_BENCH_PAYMENT"], "--prefix", env["IDEM_BENCH_PREFIX"],
                  "--replay-keys", str(REPLAY_KEYS), "--accounts", str(ACCOUNTS)]).stdout
    result = json.loads(output)
    non2xx = sum(count for status, count in result["statuses"].items() if not status.startswith("2"))
    return {"throughput": result["completed"] / seconds, "p50": result["p50"], "p90": result["p90"],
            "p99": result["p99"], "p999": result["p999"], "errors": result["errors"],
            "non2xx_percent": 100 * non2xx / max(result["completed"], 1)}


def pgbench(postgres, args, seconds, database="pgbench_bench"):
    output = run(["pgbench", "-n", "-M", "prepared", f"-c{CONNECTIONS}", f"-j{THREADS}", f"-T{seconds}",
                  *args, postgres.url(database)]).stdout
    tps = float(re.search(r"tps = ([\d.]+) \(without", output).group(1))
    latency = float(re.search(r"latency average = ([\d.]+) ms", output).group(1))
    return {"throughput": tps, "p50": latency}


def measure(idem, postgres, database, workload, seconds, env, right_after=None):
    """One run: throughput, latency, and the database work and server CPU per request;
    `right_after()`, if given, is added to the row as read the moment the load stops."""
    before = postgres.counters(database) if postgres else None
    cpu = idem.cpu_seconds()
    result = wrk(idem.url if workload != "healthz" else idem.url + "/healthz", workload, seconds, env)
    cpu = idem.cpu_seconds() - cpu
    extra = right_after() if right_after else {}
    requests = max(result["requests"], 1)
    row = {
        "throughput": result["requests"] / result["seconds"],
        "p50": result["p50"], "p90": result["p90"], "p99": result["p99"], "p999": result["p999"],
        "non2xx": result["non2xx"], "non2xx_percent": 100 * result["non2xx"] / requests,
        "errors": result["errors"], "cpu_ms_per_request": 1000 * cpu / requests, "rss_mb": idem.rss_mb(), **extra,
    }
    if postgres:
        # Idle connections report their transactions after 10 s (PGSTAT_IDLE_INTERVAL).
        time.sleep(11)
        after = postgres.counters(database)
        for name in ("commits", "statements", "look_ups", "wal"):
            row[f"{name}_per_request"] = (after[name] - before[name]) / requests
    return row


BACKGROUND_LEFT = ("select (select count(*) from outbox_events where published_at is null and dead_at is null) "
                   "+ (select count(*) from receipts where sent_at is null)")


def background_left(idem, postgres, database="idem_bench"):
    """What `idem`'s runs left to do in the background: events to publish (which the consumers
    apply as they are published) and receipts to send."""
    if "DATABASE_URL" in idem.env:
        return int(postgres.sql(BACKGROUND_LEFT, database))
    return int(run(["sqlite3", str(Path(idem.data_dir, "idem.db")), BACKGROUND_LEFT]).stdout.strip())


def drain(idem, postgres, database="idem_bench", timeout=300):
    """Waits until the background work the previous runs left is done, so that it does not run
    during, and is not counted in, the next run; the seconds waited. A write workload leaves
    tens of thousands of events behind it."""
    started = time.time()
    while time.time() - started < timeout:
        if background_left(idem, postgres, database) == 0:
            return time.time() - started
        time.sleep(1)
    print(f"warning: background work left after {timeout} s", flush=True)
    return time.time() - started


def quiet(idem, postgres, database="idem_bench", for_seconds=1.0, timeout=120):
    """Waits until `idem`'s database has committed nothing for `for_seconds`; the seconds
    waited. A run of replays or conflicts (30,000 a second) leaves its request journal in
    memory, up to 100,000 entries, written 256 a transaction over the following seconds: on
    SQLite's one writer that backlog ran inside the next run. PostgreSQL's runs were followed
    by 11 s for its statistics anyway; now both servers start each run on a quiet database."""
    started = time.time()
    if "DATABASE_URL" in idem.env:
        changed = lambda: postgres.sql("select pg_current_wal_insert_lsn()", database)
    else:
        # data_version changes when another connection commits, as seen from this one.
        connection = sqlite3.connect(f"file:{Path(idem.data_dir, 'idem.db')}?mode=ro", uri=True)
        changed = lambda: connection.execute("pragma data_version").fetchone()[0]
    last, since = changed(), time.time()
    while time.time() - started < timeout:
        time.sleep(0.2)
        now = changed()
        if now != last:
            last, since = now, time.time()
        elif time.time() - since >= for_seconds:
            return time.time() - started
    print(f"warning: the database still busy after {timeout} s", flush=True)
    return time.time() - started


def clone_rows(postgres, database, table, where, overrides, first, count):
    """Copies the rows matching `where` `count` times with the `overrides` (SQL over `n`,
    from `first`): a large history in seconds, without a request per row."""
    columns = postgres.sql(
        "select string_agg(column_name, ',' order by ordinal_position) from information_schema.columns "
        f"where table_schema = 'public' and table_name = '{table}'", database).split(",")
    values = ", ".join(overrides.get(column, column) for column in columns)
    postgres.sql(
        f"set synchronous_commit = off; insert into {table} ({', '.join(columns)}) select {values} from {table} "
        f"cross join generate_series({first}, {first + count - 1}) g(n) where {where}", database)


def add_records(postgres, database, first, count, expired=False):
    """`count` more settled payments with their records and stored responses, cloned from the
    seed payment's; `expired`: past their window, for the cleanup worker."""
    key = f"'{'x' if expired else 'g'}-' || n"
    payment = f"'pay_{'x' if expired else 'g'}' || n"
    expires = "now() - interval '1 hour'" if expired else "expires_at"
    clone_rows(postgres, database, "payments", "id = (select resource_id from idempotency_records where idempotency_key = 'seed')",
               {"id": payment, "merchant_reference": key, "idempotency_key": key}, first, count)
    clone_rows(postgres, database, "idempotency_records", "idempotency_key = 'seed'",
               {"idempotency_key": key, "resource_id": payment, "expires_at": expires}, first, count)
    clone_rows(postgres, database, "idempotency_responses", "idempotency_key = 'seed'",
               {"idempotency_key": key}, first, count)
    # record_steps gets a row per record through its trigger: without this, autovacuum would
    # vacuum its new rows during the next runs.
    postgres.sql("vacuum analyze idempotency_records, idempotency_responses, record_steps, payments", database)
    # The rows' WAL would otherwise be checkpointed, spread over minutes, during the next runs.
    postgres.sql("checkpoint", database)


def summarise(samples):
    keys = samples[0].keys()
    return {key: {"median": statistics.median(s[key] for s in samples),
                  "min": min(s[key] for s in samples), "max": max(s[key] for s in samples)} for key in keys}


def top_statements(postgres, database, limit=15):
    rows = postgres.sql(
        "select calls, round(total_exec_time::numeric, 0), round((total_exec_time / calls)::numeric, 3), "
        "left(regexp_replace(query, '\\s+', ' ', 'g'), 120) "
        "from pg_stat_statements s join pg_database d on d.oid = s.dbid "
        f"where d.datname = '{database}' order by total_exec_time desc limit {limit}").splitlines()
    return [dict(zip(("calls", "total_ms", "mean_ms", "query"), row.split("|", 3))) for row in rows]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--load", required=True)
    parser.add_argument("--postgres", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--out", required=True)
    parser.add_argument("--growth", default=",".join(map(str, GROWTH)),
                        help="record counts for the growth runs, comma-separated")
    parser.add_argument("--cleanup-backlog", type=int, default=CLEANUP_BACKLOG)
    args = parser.parse_args()
    args.growth = [int(size) for size in args.growth.split(",")]

    postgres = Postgres(args.postgres)
    postgres.sql("create extension if not exists pg_stat_statements")
    for database in ("idem_bench", "idem_growth", "idem_cleanup", "pgbench_bench"):
        postgres.create(database)
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
    env = {name: idem.seed_replays() for name, idem in servers.items()}
    tenant = postgres.sql("select id from tenants where name = 'bench'", "idem_bench")
    lookup = Path(work, "lookup.sql")
    lookup.write_text(f"\\set k random(0, {REPLAY_KEYS - 1})\n" + LOOK_UP.format(tenant=tenant) + "\n")
    fresh_script = Path(work, "fresh_create.sql")
    fresh_script.write_text(FRESH_CREATE.format(
        tenant=tenant, last_account=ACCOUNTS - 1,
        look_up=LOOK_UP.format(tenant=tenant).replace("'r-' || :k", "'pgb-' || :k")))
    postgres.sql("select pg_stat_statements_reset()")

    closed = [("postgres", w) for w in
              ("healthz", "get_payment", "replay", "conflict", "fresh_create", "baseline", "mix", "one_account")] + \
             [("sqlite", w) for w in ("get_payment", "replay", "conflict", "fresh_create", "baseline", "mix")]
    samples = {}

    def sample(name, row):
        samples.setdefault(name, []).append(row)

    for round_number in range(args.rounds):
        print(f"round {round_number + 1} of {args.rounds}", flush=True)
        for index, (server, workload) in enumerate(closed):
            idem = servers[server]
            previous = closed[index - 1][0]
            if previous != server:
                # One database's measurements do not pay for the other's events still being
                # published: after 20 s of fresh creates on PostgreSQL, 39,000 events were left,
                # and SQLite's fresh creates measured meanwhile ran at 608/s against 1,062/s
                # alone (docs/performance.md).
                print(f"  {previous}'s background work done in {drain(servers[previous], postgres):.0f} s",
                      flush=True)
            # Each run its own keys and merchant references: a key or reference a previous
            # run used would be answered as a replay or a duplicate, not as new work.
            run_env = dict(env[server], IDEM_BENCH_PREFIX=f"{workload}{round_number}")
            database = "idem_bench" if server == "postgres" else None
            quiet(idem, postgres)
            row = measure(idem, postgres if database else None, database, workload, args.seconds, run_env)
            sample(f"{server} {workload}", row)
            print(f"  {server} {workload}: {row['throughput']:.0f}/s p99 {row['p99']:.1f} ms", flush=True)
        for name, pg_args, database in (
                ("pgbench select-only", ["-S"], "pgbench_bench"),
                ("pgbench TPC-B", [], "pgbench_bench"),
                ("pgbench replay statement", ["-f", str(lookup)], "idem_bench"),
                ("pgbench fresh-create statements", ["-f", str(fresh_script)], "idem_bench")):
            sample(name, pgbench(postgres, pg_args, args.seconds, database))
        # Open loop at 50% and 80% of the baseline's saturation throughput (this round's).
        for server in servers:
            baseline = samples[f"{server} baseline"][-1]["throughput"]
            for share in (50, 80):
                for workload in ("get_payment", "replay", "fresh_create", "baseline", "mix"):
                    run_env = dict(env[server], IDEM_BENCH_PREFIX=f"o{round_number}-{share}-{workload}")
                    row = open_loop(args.load, servers[server], workload, baseline * share / 100,
                                    args.seconds, run_env)
                    sample(f"{server} {workload} open loop at {share}% of baseline", row)
            # The writes' own capacity is below the baseline's: their latency at 80% of it.
            for workload in ("fresh_create", "mix"):
                rate = samples[f"{server} {workload}"][-1]["throughput"] * 0.8
                run_env = dict(env[server], IDEM_BENCH_PREFIX=f"o{round_number}-own-{workload}")
                sample(f"{server} {workload} open loop at 80% of its own saturation",
                       open_loop(args.load, servers[server], workload, rate, args.seconds, run_env))
    statements = top_statements(postgres, "idem_bench")

    # Duplicate storms: two instances on one database, every key sent by 4 threads x 2
    # clients at about the same time.
    second = Idem(args.binary, str(work / "pg2"), None, sim_url, share=servers["postgres"])
    storm_prefixes = []
    for round_number in range(args.rounds):
        prefix = f"storm{round_number}"
        storm_prefixes.append(prefix)
        storm_env = dict(env["postgres"], IDEM_BENCH_PREFIX=prefix)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda idem: wrk(idem.url, "storm", args.seconds, storm_env, CONNECTIONS // 2),
                                    (servers["postgres"], second)))
        keys = int(postgres.sql(
            f"select count(*) from idempotency_records where idempotency_key like '{prefix}-%'", "idem_bench"))
        requests = sum(result["requests"] for result in results)
        sample("postgres duplicate storm, two instances", {
            "throughput": requests / max(result["seconds"] for result in results),
            "p50": max(result["p50"] for result in results), "p99": max(result["p99"] for result in results),
            "p999": max(result["p999"] for result in results), "requests_per_key": requests / max(keys, 1)})
    second.stop()
    storm_payments = int(postgres.sql(
        "select count(*) from payments where " +
        " or ".join(f"merchant_reference like '{prefix}-%'" for prefix in storm_prefixes), "idem_bench"))
    storm_keys = int(postgres.sql(
        "select count(*) from idempotency_records where " +
        " or ".join(f"idempotency_key like '{prefix}-%'" for prefix in storm_prefixes), "idem_bench"))

    growth = grow(args, postgres, sim_url, work)
    cleanup = clean_up(args, postgres, sim_url, work)
    samples.update(growth)
    samples.update(cleanup)

    duplicates = int(postgres.sql(
        "select count(*) from (select 1 from payments group by tenant_id, account_id, merchant_reference "
        "having count(*) > 1) d", "idem_bench"))
    charges = json.loads(http("GET", sim_url + "/_sim/charges")[1])["charges"]
    charged_twice = sum(1 for charge in charges if charge["createCalls"] > 1)
    payments = int(postgres.sql("select count(*) from payments where id not like 'pay_pgb%'", "idem_bench")) + int(run(
        ["sqlite3", str(work / "sqlite" / "idem.db"), "select count(*) from payments"]).stdout)
    for idem in servers.values():
        idem.stop()
    request_path = request_path_cost(args, postgres, sim_url, work, servers["postgres"])
    sim.terminate()

    summary = {name: summarise(rows) for name, rows in samples.items()}
    commit = run(["git", "rev-parse", "--short", "HEAD"]).stdout.strip()
    report = {
        "commit": commit,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "postgres": postgres.sql("show server_version")},
        "settings": {"rounds": args.rounds, "seconds": args.seconds, "threads": THREADS,
                     "connections": CONNECTIONS, "replay_keys": REPLAY_KEYS, "accounts": ACCOUNTS,
                     "growth": args.growth, "cleanup_backlog": args.cleanup_backlog},
        "correctness": {"duplicate_payments": duplicates, "duplicate_charges": charged_twice,
                        "payments": payments, "charges": len(charges),
                        "storm_keys": storm_keys, "storm_payments": storm_payments},
        "statements": statements,
        "request_path": request_path,
        "results": summary,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "benchmarks.json").write_text(json.dumps(report, indent=2) + "\n")
    page = out / "benchmarks.md"
    page.write_text(markdown(report) + kept_sections(page))
    print(f"wrote {out / 'benchmarks.md'}")


def request_path_cost(args, postgres, sim_url, work, first, payments=300):
    """Commits and statements of a fresh create's request path alone: one client, one request
    at a time, on an instance whose background jobs wait an hour between passes, the only
    client of the cluster. The commits that write are counted by the transaction ids they
    took. `pg_stat_database`'s commits count reads too: the look-ups, and a few more (8 over
    300 payments when traced: the API key's look-up, and most likely each statement's first
    preparation on a connection of the pool, which PostgreSQL runs in a transaction of its
    own)."""
    hour = "3600000"
    idem = Idem(args.binary, str(work / "request-path"), None, sim_url, share=first, extra=(
        "--outbox-interval-ms", hour, "--journal-flush-ms", hour, "--metrics-flush-ms", hour,
        "--settlement-interval-ms", hour, "--recovery-interval-ms", hour, "--cleanup-interval-ms", hour,
        "--bulk-resume-interval-ms", hour, "--instance-heartbeat-ms", hour))
    # The start's own transactions (migrations checked, the instance registered, the first
    # passes) reach pg_stat_database only after PGSTAT_IDLE_INTERVAL (10 s), as the payments'
    # do below: read earlier, they were counted as the payments' (31 commits over 300 here).
    time.sleep(11)
    postgres.pause_autovacuum(True)
    before = postgres.counters("idem_bench")
    first_id = postgres.next_transaction_id()
    for n in range(payments):
        assert idem.pay(f"path-{n}", f"path-{n}", n % ACCOUNTS)[0] == 201
    last_id = postgres.next_transaction_id()
    time.sleep(11)
    after = postgres.counters("idem_bench")
    postgres.pause_autovacuum(False)
    idem.stop()
    cost = {name: (after[name] - before[name]) / payments
            for name in ("commits", "look_ups", "statements", "round_trips")}
    cost["writing_commits"] = (last_id - first_id) / payments
    return cost


def grow(args, postgres, sim_url, work):
    """Fresh creates and replays with 10^4, 10^5 and 10^6 records already stored."""
    idem = Idem(args.binary, str(work / "growth"), postgres.url("idem_growth"), sim_url)
    env = idem.seed_replays()
    samples = {}
    stored = REPLAY_KEYS + 1
    for size in args.growth:
        print(f"growth: {size} records", flush=True)
        add_records(postgres, "idem_growth", stored, size - stored)
        stored = size
        for round_number in range(args.rounds):
            # The sizes run one after the other, so a machine that slows during the run would
            # read as a cost of size: a control beside each size's runs shows the drift.
            samples.setdefault(f"control: pgbench select-only beside {size:,} records", []).append(
                pgbench(postgres, ["-S"], max(args.seconds // 2, 1)))
            for workload in ("fresh_create", "replay"):
                run_env = dict(env, IDEM_BENCH_PREFIX=f"g{size}-{round_number}")
                drain(idem, postgres, "idem_growth")
                samples.setdefault(f"postgres {workload} with {size:,} records", []).append(
                    measure(idem, postgres, "idem_growth", workload, args.seconds, run_env))
        stored = int(postgres.sql("select count(*) from idempotency_records", "idem_growth"))
    idem.stop()
    return samples


def clean_up(args, postgres, sim_url, work):
    """The mix with the cleanup worker idle, and with it purging a backlog of expired records."""
    idem = Idem(args.binary, str(work / "cleanup"), postgres.url("idem_cleanup"), sim_url,
                extra=("--cleanup-interval-ms", "1000"))
    env = idem.seed_replays()
    samples = {}
    added = 0
    for round_number in range(args.rounds):
        print(f"cleanup: round {round_number + 1}", flush=True)
        for _ in range(600):
            if postgres.sql("select count(*) from idempotency_records where expires_at < now() "
                            "and status <> 'EXPIRED'", "idem_cleanup") == "0":
                break
            time.sleep(1)
        run_env = dict(env, IDEM_BENCH_PREFIX=f"c{round_number}")
        samples.setdefault("postgres mix, cleanup idle", []).append(
            measure(idem, postgres, "idem_cleanup", "mix", args.seconds, run_env))
        add_records(postgres, "idem_cleanup", 10_000_000 + added, args.cleanup_backlog, expired=True)
        added += args.cleanup_backlog
        run_env = dict(env, IDEM_BENCH_PREFIX=f"cb{round_number}")
        row = measure(idem, postgres, "idem_cleanup", "mix", args.seconds, run_env, lambda: {
            "backlog_left": int(postgres.sql(
                "select count(*) from idempotency_records where expires_at < now() and status <> 'EXPIRED'",
                "idem_cleanup"))})
        samples.setdefault(f"postgres mix, cleanup purging {args.cleanup_backlog:,} expired records", []).append(row)
    idem.stop()
    return samples


def markdown(report):
    def cell(result, key, digits=0):
        if key not in result:
            return "-"
        value = result[key]
        return f"{value['median']:.{digits}f} ({value['min']:.{digits}f}-{value['max']:.{digits}f})"

    results = report["results"]

    def table(names):
        rows = ["| workload | requests/s | non-2xx % | p50 ms | p90 ms | p99 ms | p99.9 ms | commits/req "
                "| statements/req | WAL bytes/req | server CPU ms/req | RSS MB |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name in names:
            result = results[name]
            rows.append("| " + " | ".join([
                name, cell(result, "throughput"), cell(result, "non2xx_percent", 1),
                cell(result, "p50", 2), cell(result, "p90", 2),
                cell(result, "p99", 2), cell(result, "p999", 2), cell(result, "commits_per_request", 2),
                cell(result, "statements_per_request", 2), cell(result, "wal_per_request"),
                cell(result, "cpu_ms_per_request", 3), cell(result, "rss_mb")]) + " |")
        return rows

    def median(name, key="throughput"):
        return results[name][key]["median"]

    def ratio(a, b, key="throughput"):
        return median(a, key) / median(b, key)

    def verdict(value, target, at_least=True):
        met = value >= target if at_least else value <= target
        return f"{value:.2f} (target {'>=' if at_least else '<='} {target}: {'met' if met else '**missed**'})"

    closed = [name for name in results if " open loop " not in name and not name.startswith("pgbench")
              and "records" not in name and "cleanup" not in name and "storm" not in name]
    open_rows = [name for name in results if " open loop " in name]
    growth_rows = [name for name in results if "records" in name and "cleanup" not in name]
    cleanup_rows = [name for name in results if "cleanup" in name]
    storm_rows = [name for name in results if "storm" in name]
    ceilings = [name for name in results if name.startswith("pgbench")]
    largest, smallest = f"{report['settings']['growth'][-1]:,}", f"{report['settings']['growth'][0]:,}"
    fresh_growth = ratio(f"postgres fresh_create with {largest} records", f"postgres fresh_create with {smallest} records")
    replay_growth = ratio(f"postgres replay with {largest} records", f"postgres replay with {smallest} records")
    growth_drift = ratio(f"control: pgbench select-only beside {largest} records",
                         f"control: pgbench select-only beside {smallest} records")
    cleanup_busy = f"postgres mix, cleanup purging {report['settings']['cleanup_backlog']:,} expired records"
    # The cleanup runs' server serves only the closed-loop mix; the main servers' memory also
    # holds what the open-loop runs above their capacity queued.
    mix_rss = max(results[name]["rss_mb"]["max"] for name in results if name.startswith("postgres mix,"))
    overload_rss = max(results[name]["rss_mb"]["max"] for name in results if "rss_mb" in results[name])
    path = report["request_path"]
    correctness = report["correctness"]
    sqlite_tail = median('sqlite fresh_create', 'p99') / median('sqlite fresh_create', 'p50')
    ratios = [
        "The speed goals (issue 30), each from this run:",
        f"- replay / an authenticated `GET /payments/{{id}}` (PostgreSQL): {verdict(ratio('postgres replay', 'postgres get_payment'), 1.0)}",
        f"- replay / an authenticated `GET /payments/{{id}}` (SQLite): {verdict(ratio('sqlite replay', 'sqlite get_payment'), 1.0)}",
        f"- SQLite fresh creates / PostgreSQL's: {verdict(ratio('sqlite fresh_create', 'postgres fresh_create'), 1.0)}",
        f"- SQLite fresh create p99 / its p50 (16 connections): {verdict(sqlite_tail, 5, False)}",
        f"- PostgreSQL fresh creates / the pgbench ceiling of their request-path statements: "
        f"{verdict(ratio('postgres fresh_create', 'pgbench fresh-create statements'), 0.8)}",
        f"- round trips per PostgreSQL fresh create on the request path alone (BEGIN and COMMIT included): "
        f"{verdict(path['round_trips'], 4, False)}",
        f"- duplicate payments and provider keys charged twice under this run's load "
        f"({correctness['duplicate_payments']} and {correctness['duplicate_charges']}): "
        f"{verdict(correctness['duplicate_payments'] + correctness['duplicate_charges'], 0, False)}. "
        "The kill storms are the test suite's, on both databases (`soak::random_kills_during_*`, "
        "`recovery::the_crash_matrix_*`), not run here.",
        "",
        "Replays:",
        f"- replay / the baseline (PostgreSQL): {verdict(ratio('postgres replay', 'postgres baseline'), 1.0)}",
        f"- replay p99 / `GET` p99 (PostgreSQL, closed loop): {verdict(ratio('postgres replay', 'postgres get_payment', 'p99'), 1.5, False)}",
        f"- replay p99 / `GET` p99 (PostgreSQL, open loop at 80% of the baseline): "
        f"{verdict(ratio('postgres replay open loop at 80% of baseline', 'postgres get_payment open loop at 80% of baseline', 'p99'), 1.5, False)}",
        f"- statements per replay, the background's journal and counter flushes included: "
        f"{verdict(median('postgres replay', 'statements_per_request'), 1.05, False)} (the request's own: 1)",
        f"- replay / the pgbench ceiling of its statement: {ratio('postgres replay', 'pgbench replay statement'):.2f}",
        "",
        "Fresh creates:",
        f"- fresh create / the baseline: {verdict(ratio('postgres fresh_create', 'postgres baseline'), 0.5)}",
        f"- commits per payment, request path and background together, at saturation: "
        f"{verdict(median('postgres fresh_create', 'commits_per_request'), 3, False)} "
        "(`pg_stat_database` counts the look-up, a read outside a transaction, as one); without the "
        f"look-ups ({median('postgres fresh_create', 'look_ups_per_request'):.2f} a payment), the commits that "
        f"write: {median('postgres fresh_create', 'commits_per_request') - median('postgres fresh_create', 'look_ups_per_request'):.2f}",
        # Counted by the transaction ids taken, not from COMMIT statements: a claim or a
        # completion that is its transaction's only statement is sent without BEGIN/COMMIT and
        # commits all the same.
        f"- commits that write per payment on the request path alone (one client, background idle; "
        f"transaction ids taken): {verdict(path['writing_commits'], 2, False)} (all commits, reads "
        f"included: {path['commits']:.2f}, of which look-ups {path['look_ups']:.2f})",
        f"- statements per payment on the request path alone: {verdict(path['statements'], 5, False)}",
        "",
        "SQLite tails (p99 / p50, 16 connections):",
        f"- replay: {verdict(median('sqlite replay', 'p99') / median('sqlite replay', 'p50'), 10, False)}",
        "",
        "Growth and cleanup:",
        f"- fresh creates with {largest} records / with {smallest}: {verdict(fresh_growth, 0.9)}",
        f"- replays with {largest} records / with {smallest}: {verdict(replay_growth, 0.9)}",
        f"- the machine's drift over the growth runs (the control beside the largest size / beside the "
        f"smallest): {growth_drift:.2f}; the two ratios above divided by it (the verdicts stay on the "
        f"ratios as measured): fresh creates {fresh_growth / growth_drift:.2f}, "
        f"replays {replay_growth / growth_drift:.2f}",
        f"- mix p99 with the cleanup worker purging / idle: {verdict(ratio(cleanup_busy, 'postgres mix, cleanup idle', 'p99'), 1.2, False)}",
        f"- server RSS under the mix, largest seen: {verdict(mix_rss, 150, False)} MB (largest seen "
        f"anywhere, after open-loop runs above a workload's capacity queued requests: {overload_rss:.0f} MB)",
    ]
    settings = report["settings"]
    statements = ["| calls | total ms | mean ms | statement |", "|---|---|---|---|"] + [
        f"| {row['calls']} | {row['total_ms']} | {row['mean_ms']} | `{row['query'].replace('|', '/')}` |"
        for row in report["statements"]]
    return "\n".join([
        "# Benchmarks",
        "",
        f"Written by `scripts/bench` at commit `{report['commit']}` on {report['machine']['cpus']} CPUs "
        f"({report['machine']['platform']}), PostgreSQL {report['machine']['postgres']} (fsync on). "
        f"{settings['rounds']} interleaved rounds of {settings['seconds']} s per workload. Medians, with "
        "min-max over the rounds. The load generators, the server, PostgreSQL and the provider "
        "simulator share the machine's CPUs.",
        "",
        "Workloads: `replay` retries one of "
        f"{settings['replay_keys']} completed keys (uniform); `conflict` sends one of them with another "
        "amount (409 `IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST`); `fresh_create` a new key each time; `baseline` the same payment without a key "
        "(the tenant's keys are optional): the same handler, payment transaction, provider call and "
        "completion, without the idempotency record, stored response or journal; `mix` is 80% fresh "
        "creates, 15% replays, 4% conflicts and 1% malformed bodies (400). Payments are spread over "
        f"{settings['accounts']} accounts; `one_account` puts every payment on one account, whose "
        "balance row each payment locks for its local transaction (a queue of its own, whatever the layer).",
        "",
        "## Saturation (closed loop)",
        "",
        f"wrk, {settings['threads']} threads and {settings['connections']} connections: latencies at saturation. "
        "Database work per request from `pg_stat_database` (transactions committed, a statement "
        "outside a transaction counting as one) and `pg_stat_statements` (statements, BEGIN/COMMIT "
        "excluded), background work included; WAL bytes from the WAL position; CPU from the server process.",
        "",
        *table(closed),
        "",
        "Ceilings: pgbench (`-M prepared`, the same connections) against the same cluster in the same "
        "rounds. `replay statement` is the look-up a replay runs; `fresh-create statements` the look-up "
        "and the two transactions of a fresh create's request path, on Idem's own tables, indexes and "
        "triggers, spread over the same accounts.",
        "",
        *table(ceilings),
        "",
        "## Latency at a fixed arrival rate (open loop)",
        "",
        "`server/examples/load.rs` sends requests on a fixed schedule at 50% and 80% of the baseline's "
        "saturation throughput measured in the same round (and fresh creates and the mix also at 80% "
        "of their own), and measures each latency from the moment its request was due (corrected for "
        "coordinated omission, HDR histogram). A rate above what a workload sustains shows as a queue "
        "growing for the whole run: latencies of seconds.",
        "",
        *table(open_rows),
        "",
        "## Duplicate storms over two instances",
        "",
        "Two `idem serve` instances on one database, each driven by its own wrk (2 threads, 8 "
        "connections); every thread walks the same keys, four requests per key, so each key is sent "
        "concurrently to both instances. Latencies are the worse of the two clients.",
        "",
        *table(storm_rows),
        "",
        f"Keys {correctness['storm_keys']}, payments {correctness['storm_payments']} (one per key), "
        f"requests per key: {results[storm_rows[0]]['requests_per_key']['median']:.1f} (median round).",
        "",
        "## Growth",
        "",
        "The same workloads on a database that already holds that many settled payments, records and "
        "stored responses (added by SQL between sizes). Each run starts once the background work the "
        "run before it left (events to publish and apply, receipts to send) is done. Each round at "
        "each size starts with a control, pgbench select-only against the same cluster for half a "
        "run's time: the sizes cannot be interleaved, and the control shows how much the machine "
        "itself moved between them.",
        "",
        *table(growth_rows),
        "",
        "## The mix while the cleanup worker purges a backlog",
        "",
        f"Each round: the mix with the cleanup worker idle, then {settings['cleanup_backlog']:,} expired "
        "records added and the mix again while the worker purges them (`--cleanup-interval-ms 1000`, "
        f"default batches). Backlog left at the end of each busy run: "
        f"{cell(results[cleanup_busy], 'backlog_left')}.",
        "",
        *table(cleanup_rows),
        "",
        "## Targets (ratios of medians from the same run)",
        "",
        *ratios,
        "",
        "Why each missed target is missed, with the profiles that show it (`scripts/profile-replay`, "
        "`perf`, the statements below) and what is proposed: `docs/performance.md`.",
        "",
        "## Where PostgreSQL's time went (`pg_stat_statements`, the main database, whole run)",
        "",
        *statements,
        "",
        f"Correctness after the run: {correctness['duplicate_payments']} duplicate payments, "
        f"{correctness['duplicate_charges']} provider keys charged twice, "
        f"{correctness['payments']} payments and {correctness['charges']} charges.",
        "",
    ])


if __name__ == "__main__":
    main()
