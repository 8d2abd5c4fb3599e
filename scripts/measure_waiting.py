"""How long after its owner answers a request held by `Prefer: wait` gets its answer, on the
owner's own instance (announced in memory) and on another instance (seen by reading the record
again), over PostgreSQL: the figures behind the choice of a bounded poll over LISTEN/NOTIFY in
docs/performance.md ("Waiting on an in-flight request").

    python3 scripts/measure_waiting.py ROUNDS HOLD_MS [BINARY] [POSTGRES_ADMIN_URL]

ROUNDS owners, each held by the provider simulator for HOLD_MS after a request is held behind
it on each instance. Needs a built `idem` (target/debug/idem by default) and a PostgreSQL that
lets it create a database (127.0.0.1:5432 by default).
"""
import json, os, subprocess, sys, tempfile, threading, time, urllib.request, statistics, socket
from pathlib import Path
B = sys.argv[3] if len(sys.argv) > 3 else str(Path(__file__).resolve().parent.parent / "target/debug/idem")
admin = sys.argv[4] if len(sys.argv) > 4 else "postgres://postgres@127.0.0.1:5432/postgres"
db = "idem_measure_waiting"
subprocess.run(["psql", admin, "-c", f"drop database if exists {db}"], check=True, capture_output=True)
subprocess.run(["psql", admin, "-c", f"create database {db}"], check=True, capture_output=True)
url = admin.rsplit("/", 1)[0] + "/" + db
env = dict(os.environ, DATABASE_URL=url, IDEM_DATA_DIR=tempfile.mkdtemp(prefix="idem-waiting-"), IDEM_RESPONSE_KEYS="t1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
def run(*a): return subprocess.run([B, *a], env=env, check=True, capture_output=True, text=True).stdout.strip()
run("migrate"); run("tenant", "create", "m")
key = run("api-key", "create", "--tenant", "m")
run("account", "create", "--tenant", "m", "--id", "acc_1", "--currency", "EUR", "--balance", "1000000.00")
sim = subprocess.Popen([B, "provider-sim", "--listen", "127.0.0.1:4710"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def serve(port, mport):
    return subprocess.Popen([B, "serve", "--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{mport}",
"--provider-url", "http://127.0.0.1:4710", "--rate-limit-per-sec", "0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
a, b = serve(4711, 4712), serve(4713, 4714)
def up(port):
    for _ in range(300):
        try: socket.create_connection(("127.0.0.1", port), 0.2).close(); return
        except OSError: time.sleep(0.1)
    sys.exit(f"{port} never up")
for p in (4710, 4711, 4713): up(p)
def post(port, k, body, prefer=None, out=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/payments", data=body.encode(), method="POST",
        headers={"authorization": f"Bearer {key}", "idempotency-key": k, "content-type": "application/json", **({"prefer": prefer} if prefer else {})})
    try:
        with urllib.request.urlopen(req) as r: status = r.status
    except urllib.error.HTTPError as e: status = e.code
    out.append((time.monotonic(), status))
def sim_post(path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:4710{path}", data=json.dumps(body or {}).encode(), method="POST", headers={"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req)) if path != "/_sim/faults" else urllib.request.urlopen(req).status
def applied(): return json.load(urllib.request.urlopen("http://127.0.0.1:4710/_sim/faults"))["applied"]
def waiting(mport):
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics").read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("idempotency_waiting_requests"))
results = {"same instance": [], "other instance": []}
n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
hold = float(sys.argv[2]) / 1000 if len(sys.argv) > 2 else 0.0
print(f"owner held {hold*1000:.0f} ms after the request is held")
for i in range(n):
    for label, (wport, mport) in (("same instance", (4711, 4712)), ("other instance", (4713, 4714))):
        k = f"k-{label[0]}-{i}"
        body = json.dumps({"accountId": "acc_1", "amount": "1.00", "currency": "EUR", "merchantReference": k})
        before = applied()
        sim_post("/_sim/faults", {"mode": "latency", "count": 1, "held": True})
        o, w = [], []
        to = threading.Thread(target=post, args=(4711, k, body, None, o)); to.start()
        while applied() <= before: time.sleep(0.005)
        tw = threading.Thread(target=post, args=(wport, k, body, "wait=10", w)); tw.start()
        while waiting(mport) < 1: time.sleep(0.005)
        time.sleep(hold)
        sim_post("/_sim/held-calls")
        to.join(); tw.join()
        assert o[0][1] == 201 and w[0][1] == 201, (o, w)
        results[label].append((w[0][0] - o[0][0]) * 1000)
for label, xs in results.items():
    xs.sort()
    print(f"{label}: n={len(xs)} median {statistics.median(xs):.1f} ms, p90 {xs[int(len(xs)*0.9)-1]:.1f} ms, max {xs[-1]:.1f} ms (held answer after owner's)")
for p in (a, b, sim): p.kill()
