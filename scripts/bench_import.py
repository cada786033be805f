"""Section j of scripts/bench.py: importing a real Jira export (docs/BENCHMARKS.md).

The shared Titanium export (../shared/data/titanium-jira.ndjson.gz; generated Jira-shaped issues
with comments when it is absent) imported, alternating, --j-runs times each way:
  - squasherd: a fresh daemon and store, `squasherctl import FILE --wait`; then the same file again
    (nothing changed); then a copy in which 1 % of the issues changed (every 200th issue a new
    status, every 200th another a new comment);
  - the naive importer (scripts/naive_import.py: json + sqlite3, one thread, upserts);
  - the floor: the rows squasherd's first import wrote, read before the clock starts, inserted
    through SQLite's C API with prepared statements into an empty store of the same schema,
    indexes and pragmas, 1,000 bugs per transaction (`bugsquasher-bench --floor`).
Printed: medians and each ratio, squasherd's CPU seconds (user + sys) per 1,000 issues, its peak
RSS, and what each re-import broadcast (objects in the history's saves, by entity).

Section l (`run_generated`): the generated --big-rows records (1,000,000), in sequential and in
random key order, imported into a fresh daemon and store, against the floor of the same rows.
"""
import collections
import gzip
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time

import __main__ as bench  # scripts/bench.py, run as the main program
from __main__ import Broken, Daemon, ratio_text, table

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORT = os.path.join(HERE, "..", "..", "shared", "data", "titanium-jira.ndjson.gz")
SAMPLE = os.path.join(HERE, "..", "..", "shared", "data", "titanium-jira-sample.ndjson")


def generated_issue(n):
    """A Jira REST v2 issue shaped like the export's, with 3 comments."""
    person = lambda i: {"name": f"user-{i % 300:04d}", "key": f"user-{i % 300:04d}", "displayName": f"User {i % 300}"}
    stamp = lambda day: f"20{10 + day % 12:02d}-0{1 + day % 9}-1{day % 10}T10:00:00.000+0000"
    return {"id": str(100000 + n), "key": f"GEN-{n}", "fields": {
        "issuetype": {"name": ["Bug", "Story", "Task"][n % 3]}, "project": {"key": "GEN", "name": "Generated"},
        "resolution": {"name": "Fixed"} if n % 2 else None, "resolutiondate": stamp(n + 9) if n % 2 else None,
        "created": stamp(n), "updated": stamp(n + 3), "priority": {"name": ["Low", "Medium", "High"][n % 3]},
        "labels": [f"label-{n % 7}"], "assignee": person(n), "reporter": person(n + 1), "creator": person(n + 1),
        "status": {"name": ["Open", "In Progress", "Resolved", "Closed"][n % 4]},
        "components": [{"name": f"Component {n % 20}"}],
        "description": f"Issue {n}: " + "The app crashes when the keyboard opens during rotation. " * 8,
        "summary": f"Crash #{n} when rotating the device",
        "comment": {"total": 3, "comments": [
            {"id": str(n * 10 + c), "author": person(n + c), "body": f"Comment {c} on {n}: " + "Seen again on the nightly build. " * 4,
             "created": stamp(n + c), "updated": stamp(n + c)} for c in range(3)]}}}


def source(args, root):
    """The export to import: the shared one (its sample with --smoke), else a generated one."""
    if os.path.exists(EXPORT) and not args.j_smoke:
        return os.path.abspath(EXPORT), "the shared Titanium export"
    if os.path.exists(SAMPLE) and args.j_smoke:
        return os.path.abspath(SAMPLE), "the shared Titanium sample (--smoke)"
    print(f"    (../shared/data is absent: generating Jira-shaped issues with comments instead)")
    path = f"{root}/generated-jira.ndjson.gz"
    with gzip.open(path, "wt", compresslevel=6) as out:
        for n in range(1, (1000 if args.j_smoke else 25000) + 1):
            out.write(json.dumps(generated_issue(n)) + "\n")
    return path, "generated Jira-shaped issues"


def changed_copy(path, root):
    """The export with 1 % of its issues changed: every 200th a new status, every 200th another
    (offset by 100) a new comment. Returns the path and how many of each."""
    out_path = f"{root}/changed.ndjson.gz"
    statuses = comments = 0
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines, gzip.open(out_path, "wt", compresslevel=6) as out:
        for n, line in enumerate(lines):
            if n % 200 == 0:
                issue = json.loads(line)
                issue["fields"]["status"] = {"name": "Reopened by the benchmark"}
                line = json.dumps(issue) + "\n"
                statuses += 1
            elif n % 200 == 100:
                issue = json.loads(line)
                page = issue["fields"].setdefault("comment", {}) or {}
                issue["fields"]["comment"] = page
                page.setdefault("comments", []).append({
                    "id": f"bench-{n}", "author": {"name": "benchmark", "displayName": "Benchmark"},
                    "body": "A new comment from the benchmark.", "created": "2026-11-29T10:00:00.000+0000",
                    "updated": "2026-11-29T10:00:00.000+0000"})
                line = json.dumps(issue) + "\n"
                comments += 1
            out.write(line)
    return out_path, statuses, comments


def count_issues(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as lines:
        return sum(1 for _ in lines)


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_import(daemon, path, issues):
    cpu = cpu_seconds(daemon.pid)
    token = daemon.status()["token"]
    start = time.perf_counter()
    daemon.import_file(path, issues)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "cpu": cpu_seconds(daemon.pid) - cpu, "broadcast": broadcast(daemon, token)}


def broadcast(daemon, after):
    """Objects in the saves committed after token `after`, by entity and kind."""
    counts = collections.Counter()
    while True:
        reply = daemon.call("io.bugsquasher.Changes", "History", after, 1000)
        for save in reply["saves"]:
            for kind in ("inserted", "updated", "deleted"):
                for change in save[kind]:
                    counts[(change["id"].split("/")[3], kind)] += 1
            after = save["token"]
        if not reply["saves"]:
            return counts


def squasherd_round(args, root, path, changed, issues, run):
    daemon = Daemon(root, f"j-{run}", args.pending_limit)
    try:
        first = timed_import(daemon, path, issues)
        first["hwm"] = daemon.hwm_kib()
        if run == 0:  # the floor's rows: what the first import wrote
            with sqlite3.connect(f"file:{daemon.dir}/state/bugs.sqlite?mode=ro", uri=True) as db, \
                    sqlite3.connect(f"{root}/j-store-0.sqlite") as copy:
                db.backup(copy)
        again = timed_import(daemon, path, issues)
        one = timed_import(daemon, changed, issues)
        return first, again, one
    finally:
        daemon.stop()


def naive_round(root, path):
    store = f"{root}/naive.sqlite"
    start = time.perf_counter()
    out = subprocess.run([sys.executable, os.path.join(HERE, "naive_import.py"), path, store], capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise Broken(f"j. scripts/naive_import.py exited with status {out.returncode}: {out.stderr.strip()[-500:]}")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(store + suffix):
            os.unlink(store + suffix)
    return seconds


def floor_round(root, store):
    out = bench.run_bench("--floor", store, "--chunk", "1000", "--directory", f"{root}/floor")
    shutil.rmtree(f"{root}/floor", ignore_errors=True)
    return float(out.split("floor: ")[1].split(" seconds")[0]), out.split("seconds, ")[1].strip()


def run(args, root, report):
    path, what = source(args, root)
    issues = count_issues(path)
    changed, statuses, comments = changed_copy(path, root)
    print(f"\n== j. importing {what} ({issues:,} issues, {os.path.getsize(path) / 2**20:.0f} MiB), {args.j_runs} runs of each, alternating")
    ours, naive, floor = [], [], []
    for run in range(args.j_runs):
        ours.append(squasherd_round(args, root, path, changed, issues, run))
        naive.append(naive_round(root, path))
        seconds, rows = floor_round(root, f"{root}/j-store-0.sqlite")
        floor.append(seconds)
    median = lambda values: statistics.median(values)
    runs = lambda values: ", ".join(f"{v:.2f}" for v in values)
    first = [r[0]["seconds"] for r in ours]
    again = [r[1]["seconds"] for r in ours]
    one = [r[2]["seconds"] for r in ours]
    rate = lambda seconds: f"{issues / seconds:,.0f}"
    table(["path", "seconds (median)", "runs", "issues/s", "speed vs the floor"], [
        ["floor: the same rows through SQLite's C API (decoded before the clock)", f"{median(floor):.2f}", runs(floor), rate(median(floor)), "1.00x"],
        ["naive importer (scripts/naive_import.py)", f"{median(naive):.2f}", runs(naive), rate(median(naive)), f"{median(floor) / median(naive):.2f}x"],
        ["squasherd, first import into a fresh store", f"{median(first):.2f}", runs(first), rate(median(first)), f"{median(floor) / median(first):.2f}x"],
        ["squasherd, the same file again (nothing changed)", f"{median(again):.2f}", runs(again), rate(median(again)), ""],
        [f"squasherd, 1 % changed ({statuses} statuses, {comments} new comments)", f"{median(one):.2f}", runs(one), rate(median(one)), ""],
    ])
    print(f"    floor rows: {rows}")
    cpu = [1000 * r[0]["cpu"] / issues for r in ours]
    print(f"    squasherd CPU seconds (user + sys) per 1,000 issues: first import {median(cpu):.3f}; unchanged re-import "
          f"{median([1000 * r[1]['cpu'] / issues for r in ours]):.3f}; 1 % changed {median([1000 * r[2]['cpu'] / issues for r in ours]):.3f}")
    print(f"    squasherd peak RSS (VmHWM) after the first import: {median([r[0]['hwm'] for r in ours]) / 1024:.0f} MiB")
    shown = lambda counts: ", ".join(f"{entity} {kind} {n:,}" for (entity, kind), n in sorted(counts.items())) or "nothing"
    print(f"    broadcast by the unchanged re-import: {shown(ours[0][1]['broadcast'])}")
    print(f"    broadcast by the 1 % re-import: {shown(ours[0][2]['broadcast'])}")

    speed = median(floor) / median(first)
    report.target("j. squasherd first import / floor (speed)", ">= 0.60x", ratio_text(speed, 0.6), speed >= 0.6)
    naive_ratio = median(naive) / median(first)
    report.target("j. squasherd first import / naive importer (speed)", ">= 2.50x", ratio_text(naive_ratio, 2.5), naive_ratio >= 2.5)
    reimport = median(again) / median(first)
    report.target("j. unchanged re-import / first import (time)", "<= 0.30x", ratio_text(reimport, 0.3), reimport <= 0.3)
    bugs_broadcast = sum(n for (entity, _), n in ours[0][1]["broadcast"].items() if entity in ("Bug", "Comment"))
    report.target("j. unchanged re-import: bugs and comments broadcast", "0", f"{bugs_broadcast:,}", bugs_broadcast == 0)
    changed_ratio = median(one) / median(again)
    report.target("j. 1 % re-import / unchanged re-import (time)", "<= 1.50x", ratio_text(changed_ratio, 1.5), changed_ratio <= 1.5)
    got = ours[0][2]["broadcast"]
    # A bug whose status changed is updated; one that gained a comment may be too (its comments).
    bugs = got.get(("Bug", "updated"), 0)
    exact = got.get(("Comment", "inserted"), 0) == comments and statuses <= bugs <= statuses + comments and not got.get(("Comment", "updated"))
    report.target("j. 1 % re-import broadcasts exactly the changed objects", f"{statuses}-{statuses + comments} bugs, {comments} comments",
                  f"{got.get(('Bug', 'updated'), 0):,} bugs, {got.get(('Comment', 'inserted'), 0):,} comments", exact)


def run_generated(args, root, files, report):
    """Section l: the --big-rows import against the C-API floor of its rows, in both key orders,
    --l-runs times each, alternating (the floor reads the rows the first import wrote)."""
    path = files[args.big_rows]
    shuffled = f"{root}/rows-{args.big_rows}-random.ndjson"
    with open(path) as lines:
        rows = lines.readlines()
    random.Random(52).shuffle(rows)
    with open(shuffled, "w") as out:
        out.writelines(rows)
    del rows
    table_rows = []
    runs = lambda values: ", ".join(f"{v:.2f}" for v in values)
    for order, file in (("sequential", path), ("random", shuffled)):
        store = f"{root}/l-{order}.sqlite"
        ours, floors, cpus, hwms = [], [], [], []
        for run in range(args.l_runs):
            daemon = Daemon(root, f"l-{order}-{run}", args.pending_limit)
            try:
                cpu = cpu_seconds(daemon.pid)
                start = time.perf_counter()
                daemon.import_file(file, args.big_rows)
                ours.append(time.perf_counter() - start)
                cpus.append(cpu_seconds(daemon.pid) - cpu)
                hwms.append(daemon.hwm_kib())
                if run == 0:
                    with sqlite3.connect(f"file:{daemon.dir}/state/bugs.sqlite?mode=ro", uri=True) as db, \
                            sqlite3.connect(store) as copy:
                        db.backup(copy)
            finally:
                daemon.stop()
                shutil.rmtree(daemon.dir, ignore_errors=True)
            floors.append(floor_round(root, store)[0])
        os.unlink(store)
        floor, seconds = statistics.median(floors), statistics.median(ours)
        ratio = floor / seconds
        table_rows.append([order, f"{floor:.2f}", runs(floors), f"{args.big_rows / floor:,.0f}", f"{seconds:.2f}", runs(ours),
                           f"{args.big_rows / seconds:,.0f}", ratio_text(ratio, 0.8), f"{1000 * statistics.median(cpus) / args.big_rows:.3f}",
                           f"{max(hwms) / 1024:.0f} MiB"])
        report.target(f"l. {args.big_rows:,}-record import / C-API floor, {order} keys", ">= 0.80x", ratio_text(ratio, 0.8), ratio >= 0.8)
    os.unlink(shuffled)
    print(f"\n== l. the generated {args.big_rows:,}-record import (squasherctl import --wait, fresh daemon and store) vs the floor of the same rows,"
          f" medians of {args.l_runs} runs of each, alternating"
          "\n   (bugsquasher-bench --floor: the rows squasherd wrote, through SQLite's C API, 1,000 per transaction, in the order squasherd got them)")
    table(["key order", "floor s", "floor runs", "floor rows/s", "squasherd s", "squasherd runs", "rows/s", "speed vs floor", "CPU s / 1,000",
           "VmHWM"], table_rows)
