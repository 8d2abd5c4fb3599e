"""The incident day at scale (scripts/bench-incident): on each database, 10,000 payments end
unknown through the provider simulator's faults, then, through the console's own server
functions as a signed-in operator, the recovery queue's first page is read, 1,000 of the records
are selected by filter and previewed against the provider in groups, and the job is applied.
The figures go into docs/benchmarks.md (its "Incident day" section, which scripts/bench keeps)
and docs/benchmarks-incident.json.
"""

import argparse
import concurrent.futures
import json
import re
import statistics
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from bench import INCIDENT_SECTION, Idem, Postgres, http, publish, run

UNKNOWN = 10_000
SELECTED = 1_000
QUEUE_READS = 20
SECTION_START, SECTION_END = INCIDENT_SECTION


class Operator:
    """A signed-in console session, calling server functions as the browser does."""

    def __init__(self, idem):
        self.url = idem.url
        password = run([idem.binary, "operator", "create", "--username", "bench-operator", "--role",
                        "operator"], env=idem.env).stdout.strip()
        request = urllib.request.Request(
            self.url + "/sign-in", method="POST",
            data=f"username=bench-operator&password={urllib.parse.quote(password)}&next=/".encode())
        request.add_header("Origin", self.url)
        request.add_header("Content-Type", "application/x-www-form-urlencoded")

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        try:
            urllib.request.build_opener(NoRedirect).open(request, timeout=30)
        except urllib.error.HTTPError as answer:
            cookie = answer.headers["Set-Cookie"]
        self.cookie = cookie.split(";")[0]

    def call(self, endpoint, body):
        status, answer = http("POST", f"{self.url}/api/console/{endpoint}", json.dumps(body), {
            "Cookie": self.cookie, "Origin": self.url, "Content-Type": "application/json"})
        assert status == 200, (endpoint, status, answer)
        return json.loads(answer)

    def job(self, job_id):
        status, answer = http("POST", f"{self.url}/api/console/bulk/job", f"id={job_id}", {
            "Cookie": self.cookie, "Origin": self.url, "Content-Type": "application/x-www-form-urlencoded"})
        assert status == 200, answer
        return json.loads(answer)

    def wait(self, job_id, state, timeout=600):
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            job = self.job(job_id)
            if job["state"] == state:
                return job
            time.sleep(0.05)
        raise TimeoutError(f"{job_id} never got {state}")


def seed(idem, sim_url):
    """10,000 unknown outcomes: the provider took each charge and answered 500; a tenth of
    them are of 11.00, the rest of 10.00."""
    status, _ = http("POST", sim_url + "/_sim/faults", json.dumps({"mode": "error_after_accept", "count": UNKNOWN}),
                     {"Content-Type": "application/json"})
    assert status == 201

    def pay(n):
        amount = "11.00" if n < SELECTED else "10.00"
        body = json.dumps({"accountId": f"acc_{n % 64}", "amount": amount, "currency": "EUR",
                           "merchantReference": f"outage-{n}"})
        status, answer = http("POST", idem.url + "/payments", body, {
            "Authorization": "Bearer " + idem.key, "Idempotency-Key": f"outage-{n}",
            "Content-Type": "application/json"})
        assert status == 202, answer

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(pay, range(UNKNOWN)))
    return time.monotonic() - started


def measure(idem, sim_url):
    seeding = seed(idem, sim_url)
    operator = Operator(idem)
    latencies = []
    for _ in range(QUEUE_READS):
        started = time.monotonic()
        page = operator.call("recovery-queue", {"query": {}})
        latencies.append((time.monotonic() - started) * 1000)
    assert page["total"] == UNKNOWN, page["total"]
    filtered = []
    query = {"currency": "EUR", "min_amount": "11.00", "max_amount": "11.00", "order": "newest"}
    for _ in range(QUEUE_READS):
        started = time.monotonic()
        operator.call("recovery-queue", {"query": query})
        filtered.append((time.monotonic() - started) * 1000)

    started = time.monotonic()
    job = operator.call("bulk/select", {"selection": {"Matching": query}})
    job = operator.wait(job["id"], "Previewed")
    preview_s = time.monotonic() - started
    assert job["items"] == SELECTED, job["items"]
    started = time.monotonic()
    operator.call("bulk/apply", {
        "id": job["id"], "name": "bench outage", "reason": "the provider's statement (bench)",
        "choices": [{"operation": "create_payment", "evidence": "Succeeded", "action": "ApplyProviderResult"}]})
    job = operator.wait(job["id"], "Finished")
    apply_s = time.monotonic() - started
    assert job["ok"] == SELECTED, job
    return {
        "seeding_s": round(seeding, 1),
        "queue_first_page_ms": round(statistics.median(latencies), 1),
        "queue_first_page_ms_range": [round(min(latencies), 1), round(max(latencies), 1)],
        "queue_filtered_page_ms": round(statistics.median(filtered), 1),
        "queue_filtered_page_ms_range": [round(min(filtered), 1), round(max(filtered), 1)],
        "preview_1000_s": round(preview_s, 2),
        "apply_1000_s": round(apply_s, 2),
    }


def markdown(report):
    def verdict(value, target):
        return "met" if value <= target else "**missed**"

    lines = [
        SECTION_START,
        "## Incident day: the recovery queue and bulk jobs at 10,000 unknown outcomes",
        "",
        f"Written by `scripts/bench-incident` at `{report['commit']}` on {report['date']}: "
        f"{UNKNOWN:,} payments end unknown through the simulator's `error_after_accept`, then a "
        "signed-in operator, through the console's server functions, reads the queue's first page "
        f"({QUEUE_READS} reads, median and min-max), selects the {SELECTED:,} of 11.00 EUR by filter "
        "and waits for the grouped preview (each record asked at the provider, 8 at a time), then "
        "applies the group and waits for the job to finish. Release build, one run.",
        "",
        "| figure | target | PostgreSQL | SQLite |",
        "|---|---|---|---|",
    ]
    rows = [
        ("queue's first page, all 10,000 (ms)", "queue_first_page_ms", "queue_first_page_ms_range", 300),
        ("queue's first page, filtered by amount (ms)", "queue_filtered_page_ms", "queue_filtered_page_ms_range", 300),
    ]
    for name, key, spread, target in rows:
        cells = []
        for database in ("postgres", "sqlite"):
            result = report[database]
            low, high = result[spread]
            cells.append(f"{result[key]} ({low}-{high}) {verdict(result[key], target)}")
        lines.append(f"| {name} | <= {target} | {cells[0]} | {cells[1]} |")
    for name, key, target in (("grouped preview of 1,000 (s)", "preview_1000_s", 10),
                              ("applying 1,000 reconciliations (s)", "apply_1000_s", 60)):
        cells = [f"{report[d][key]} {verdict(report[d][key], target)}" for d in ("postgres", "sqlite")]
        lines.append(f"| {name} | <= {target} | {cells[0]} | {cells[1]} |")
    lines.append(f"| seeding 10,000 unknown payments by traffic (s) | - | {report['postgres']['seeding_s']} "
                 f"| {report['sqlite']['seeding_s']} |")
    lines += ["", SECTION_END, ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--postgres", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    postgres = Postgres(args.postgres)
    postgres.create("idem_incident")
    work = Path(tempfile.mkdtemp(prefix="idem-incident-"))
    sim = subprocess.Popen([args.binary, "provider-sim", "--listen", "127.0.0.1:0"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    sim_url = re.search(r"http://[^/]+", sim.stdout.readline()).group(0)
    report = {
        "commit": run(["git", "rev-parse", "--short", "HEAD"]).stdout.strip(),
        "date": time.strftime("%Y-%m-%d"),
    }
    try:
        for database, url in (("postgres", postgres.url("idem_incident")), ("sqlite", None)):
            idem = Idem(args.binary, str(work / database), url, sim_url, extra=("--recovery-max-attempts", "0"))
            try:
                report[database] = measure(idem, sim_url)
                print(database, report[database])
            finally:
                idem.stop()
    finally:
        sim.terminate()
    publish(out, "benchmarks-incident", report, INCIDENT_SECTION, markdown(report))


if __name__ == "__main__":
    main()
