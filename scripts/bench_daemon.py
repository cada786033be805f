#!/usr/bin/env python3
"""Benchmarks squasherd against baselines measured in the same run (see scripts/bench-daemon.sh).

1. Import throughput: the same N bug rows through `squasherctl import --wait` (upload, spool,
   parse, upsert in importer contexts, commit, broadcast) vs raw SQLite prepared-statement inserts
   (Python's sqlite3 `executemany`, C under the hood) in chunks of 1,000, WAL, synchronous=NORMAL.
2. Commit -> subscriber refreshed latency, p50/p99 of the *last* delivery, for 1, 10, 100
   subscriber processes (`squasherctl subscribe`) holding the edited bug; baseline: a raw fan-out
   of one 200-byte message over Unix sockets to the same number of processes.
3. Bytes received by a subscriber holding 100 bugs during an import, filtered by squasherd vs
   unfiltered.
"""
import argparse, json, os, socket, sqlite3, statistics, subprocess, sys, tempfile, time

import varlink

BIN = os.environ.get("BIN", ".build/release")


def run(cmd, env, **kw):
    return subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, **kw)


def start_daemon(directory):
    log = open(os.path.join(directory, "squasherd.log"), "w")
    proc = subprocess.Popen([f"{BIN}/squasherd", "--state-directory", f"{directory}/state", "--runtime-directory", f"{directory}/run", "--log-level", "warning"], stderr=log)
    sock = f"{directory}/run/squasherd.sock"
    for _ in range(400):
        if os.path.exists(f"{directory}/run/squasherd-write.sock"):
            try:
                with varlink.Client(address="unix:" + sock) as client, client.open("io.bugsquasher.Store") as store:
                    store.Info()
                    break
            except Exception:
                pass
        time.sleep(0.025)
    return proc


def stop(proc):
    proc.terminate()
    return proc.wait(timeout=60)


def generate(path, count):
    with open(path, "w") as out:
        for n in range(1, count + 1):
            out.write(json.dumps({"key": f"BENCH-{n}", "title": f"Crash #{n} when rotating the device while the keyboard is open",
                                  "details": f"{n}: " + ("Steps to reproduce: open the app, rotate the device, watch the log. " * 6)[:400],
                                  "status": ["Open", "In Progress", "Resolved", "Closed"][n % 4], "priority": ["Low", "Medium", "High"][n % 3],
                                  "labels": [], "project": {"key": "BENCH"}, "components": [], "comments": []}) + "\n")


def raw_inserts(rows_path, db_path, chunk=1000):
    db = sqlite3.connect(db_path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute('CREATE TABLE "Bug" (pk INTEGER PRIMARY KEY, _version INTEGER NOT NULL, "key" TEXT, "title" TEXT, "details" TEXT, "status" TEXT, "priority" TEXT, "project" INTEGER)')
    db.execute('CREATE UNIQUE INDEX bug_key ON "Bug"("key")')
    rows = []
    with open(rows_path) as f:
        for i, line in enumerate(f, 1):
            r = json.loads(line)
            rows.append((i, 1, r["key"], r["title"], r["details"], r["status"], r["priority"], 1))
    start = time.perf_counter()
    for i in range(0, len(rows), chunk):
        db.execute("BEGIN")
        db.executemany('INSERT INTO "Bug" VALUES (?,?,?,?,?,?,?,?)', rows[i:i + chunk])
        db.execute("COMMIT")
    return len(rows) / (time.perf_counter() - start)


def bench_import(directory, count, env):
    rows = f"{directory}/rows.ndjson"
    generate(rows, count)
    raw = raw_inserts(rows, f"{directory}/raw.sqlite")
    start = time.perf_counter()
    out = run([f"{BIN}/squasherctl", "import", rows, "--wait"], env).stdout
    daemon = count / (time.perf_counter() - start)
    assert f"{count} imported" in out, out
    return raw, daemon


def raw_fanout(n, rounds):
    """One 200-byte message over Unix stream sockets to n reader processes; last delivery."""
    path = tempfile.mktemp(prefix="bsfan", dir="/tmp")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(n)
    reader = "import socket,sys,time\ns=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1])\nwhile True:\n d=s.recv(4096)\n if not d: break\n print(time.time_ns()//1000,flush=True)"
    procs = [subprocess.Popen([sys.executable, "-c", reader, path], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    conns = [server.accept()[0] for _ in range(n)]
    latencies = []
    message = b"x" * 200
    for _ in range(rounds):
        t0 = time.time_ns() // 1000
        for c in conns:
            c.sendall(message)
        last = max(int(p.stdout.readline()) for p in procs)
        latencies.append((last - t0) / 1000)
        time.sleep(0.01)
    for c in conns:
        c.close()
    for p in procs:
        p.wait()
    os.unlink(path)
    return latencies


def bench_latency(directory, n, rounds, env, key):
    subs = [subprocess.Popen([f"{BIN}/squasherctl", "subscribe", "--json", key], env=env, stdout=subprocess.PIPE, text=True) for _ in range(n)]
    for p in subs:
        while json.loads(p.stdout.readline())["event"] != "ready":
            pass
    time.sleep(0.2 + n * 0.01)  # subscriptions registered
    latencies = []
    with varlink.Client(address=f"unix:{directory}/run/squasherd-write.sock") as client, client.open("io.bugsquasher.Import") as imp, \
            varlink.Client(address=f"unix:{directory}/run/squasherd.sock") as rclient, rclient.open("io.bugsquasher.Store") as store:
        bug = store.Fetch("Bug", f'key == "{key}"', None, 1, None, "ids")["ids"][0]
        for i in range(rounds):
            t0 = time.time_ns() // 1000
            imp.Update(bug, {"status": f"S{i}-{n}"})
            last = 0
            for p in subs:
                while True:
                    event = json.loads(p.stdout.readline())
                    if event["event"] == "refresh" and any(b["status"] == f"S{i}-{n}" for b in event.get("bugs", [])):
                        last = max(last, event["at"])
                        break
            latencies.append((last - t0) / 1000)
    for p in subs:
        p.terminate()
        p.wait()
    return latencies


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def bench_bytes(directory, count, env):
    held = [f"BENCH-{n}" for n in range(1, 101)]
    filtered = subprocess.Popen([f"{BIN}/squasherctl", "subscribe", "--json"] + held, env=env, stdout=subprocess.PIPE, text=True)
    unfiltered = subprocess.Popen([f"{BIN}/squasherctl", "subscribe", "--json", "--all"] + held, env=env, stdout=subprocess.PIPE, text=True)
    for p in (filtered, unfiltered):
        while json.loads(p.stdout.readline())["event"] != "ready":
            pass
    rows = f"{directory}/rows2.ndjson"
    with open(rows, "w") as out:
        for n in range(1, count + 1):
            out.write(json.dumps({"key": f"BENCH-{n}", "title": f"changed {n}", "status": "Reopened", "labels": [], "project": {"key": "BENCH"}, "components": [], "comments": []}) + "\n")
    run([f"{BIN}/squasherctl", "import", rows, "--wait"], env)
    time.sleep(1.0)
    result = {}
    for name, p in (("filtered", filtered), ("unfiltered", unfiltered)):
        p.terminate()
        for line in p.stdout:
            event = json.loads(line)
            if event["event"] == "stats":
                result[name] = event["bytesReceived"]
        p.wait()
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--subscribers", default="1,10,100")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="bsb-", dir="/tmp")
    env = dict(os.environ, SQUASHERD_RUNTIME_DIRECTORY=f"{directory}/run")
    daemon = start_daemon(directory)
    try:
        raw, through = bench_import(directory, args.rows, env)
        print(f"\n(a) import of {args.rows:,} bug rows, chunks of 1,000")
        print(f"    raw SQLite prepared inserts   {raw:>10,.0f} rows/s")
        print(f"    through squasherd (CLI->done) {through:>10,.0f} rows/s   ratio {through / raw:.2f}x")
        print(f"\n(b) commit -> last subscriber refreshed (ms), {args.rounds} edits each")
        print(f"    {'subscribers':>11}  {'squasherd p50':>13} {'p99':>8}   {'raw fan-out p50':>15} {'p99':>8}   ratio p50")
        for n in [int(x) for x in args.subscribers.split(",")]:
            ours = bench_latency(directory, n, args.rounds, env, "BENCH-1")
            base = raw_fanout(n, args.rounds)
            print(f"    {n:>11}  {pct(ours, .5):>13.2f} {pct(ours, .99):>8.2f}   {pct(base, .5):>15.2f} {pct(base, .99):>8.2f}   {pct(ours, .5) / max(pct(base, .5), 1e-3):.2f}x")
        count = min(args.rows, 100_000)
        sizes = bench_bytes(directory, count, env)
        print(f"\n(c) bytes received by a subscriber holding 100 bugs during a {count:,}-record import")
        print(f"    filtered by squasherd {sizes.get('filtered', 0):>12,} bytes")
        print(f"    unfiltered            {sizes.get('unfiltered', 0):>12,} bytes   ratio {sizes.get('unfiltered', 0) / max(sizes.get('filtered', 1), 1):.0f}x")
    finally:
        status = stop(daemon)
        print(f"\nsquasherd exit status {status}")


if __name__ == "__main__":
    main()
