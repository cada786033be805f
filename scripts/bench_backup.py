"""Section k of scripts/bench.py: `squasherctl backup` in the middle of the large import.

Each run imports the --big-rows file into a fresh daemon and store; runs alternate between an
import alone and one during which `squasherctl backup` starts once 30 % of the records are in.
The job's progress (Jobs.Get) is sampled every 20 ms. The backup run's rate is the records
imported while the backup ran, over its wall time; the baseline's is the same range of records
in the runs without a backup, timed from the same samples. The backup is then read with
Python's sqlite3 (not BugSquasher's code): its bugs must be exactly the chunks its job's
progress counts, and its newest token the one squasherctl printed.
"""
import os
import re
import sqlite3
import statistics
import subprocess
import threading
import time

import __main__ as bench  # scripts/bench.py, run as the main program
from __main__ import Broken, Daemon, ratio_text, table


def time_at(samples, imported):
    """When the job's progress reached `imported` records, interpolated between two samples."""
    for (t0, n0), (t1, n1) in zip(samples, samples[1:]):
        if n1 >= imported:
            return t1 if n1 == n0 else t0 + (t1 - t0) * (imported - n0) / (n1 - n0)
    raise Broken(f"the import never reached {imported:,} records")


def import_run(args, root, path, name, backup_at=None):
    """Imports `path` into a fresh daemon, sampling the job's progress; with `backup_at`, runs
    `squasherctl backup` once that many records are in. Returns the samples, the backup's start
    and end (seconds since the import started), what squasherctl printed and the copy's path."""
    daemon = Daemon(root, name, args.pending_limit)
    try:
        started = time.perf_counter()
        out = subprocess.run([f"{bench.BIN}/squasherctl", "import", path], env=daemon.env, capture_output=True, text=True, timeout=600)
        if out.returncode != 0 or not out.stdout.split():
            raise Broken(f"squasherctl import {path}: status {out.returncode}: {out.stdout.strip()} {out.stderr.strip()}")
        job = out.stdout.split()[-1]
        samples, backup = [], {}
        copy = f"{root}/{name}.backup.sqlite"

        def take_backup():
            backup["start"] = time.perf_counter() - started
            done = subprocess.run([f"{bench.BIN}/squasherctl", "backup", copy], env=daemon.env, capture_output=True, text=True, timeout=1800)
            backup["end"] = time.perf_counter() - started
            backup["status"], backup["said"] = done.returncode, (done.stdout + done.stderr).strip()

        thread = None
        while True:
            state = daemon.call("io.bugsquasher.Jobs", "Get", job)["job"]
            samples.append((time.perf_counter() - started, state["imported"]))
            if state["state"] in ("finished", "failed", "aborted"):
                break
            if backup_at is not None and thread is None and state["imported"] >= backup_at:
                thread = threading.Thread(target=take_backup)
                thread.start()
            time.sleep(0.02)
        if thread:
            thread.join()
        if state["state"] != "finished" or state["imported"] != args.big_rows:
            raise Broken(f"k. import {name} ended {state['state']} with {state['imported']:,} of {args.big_rows:,} records: {state.get('error')}")
        if thread and backup["status"] != 0:
            raise Broken(f"k. squasherctl backup exited with status {backup['status']}: {backup['said']}")
        return {"samples": samples, "job": job, "copy": copy if thread else None, **backup}
    finally:
        daemon.stop()


def check_copy(run, chunk=1000):
    """What the backup holds, read with Python's sqlite3: its bugs, its job's progress, its newest
    token; and whether they agree with each other and with what squasherctl printed."""
    db = sqlite3.connect(f"file:{run['copy']}?mode=ro", uri=True)
    try:
        bugs = db.execute('SELECT count(*) FROM "Bug"').fetchone()[0]
        imported = db.execute('SELECT "imported" FROM "ImportJob" WHERE "jobID" = ?', (run["job"],)).fetchone()[0]
        token = db.execute("SELECT max(token) FROM bs_history").fetchone()[0]
        integrity = db.execute("PRAGMA quick_check").fetchone()[0]
    finally:
        db.close()
    printed = re.search(r"at history token (\d+):", run["said"])
    problems = []
    if bugs != imported:
        problems.append(f"{bugs:,} bugs but the job counts {imported:,}")
    if imported <= 0 or imported % chunk:
        problems.append(f"the job counts {imported:,} records, not a whole number of chunks above 0")
    if not printed or int(printed.group(1)) != token:
        problems.append(f"newest token {token}, squasherctl said: {run['said']}")
    if integrity != "ok":
        problems.append(f"quick_check: {integrity}")
    return {"bugs": bugs, "imported": imported, "token": token, "bytes": os.path.getsize(run["copy"]), "problems": problems}


def run(args, root, files, report):
    path = files[args.big_rows]
    backup_at = int(args.big_rows * 0.3)
    plain, backed = [], []
    for i in range(args.k_runs):
        plain.append(import_run(args, root, path, f"k-plain-{i + 1}"))
        backed.append(import_run(args, root, path, f"k-backup-{i + 1}", backup_at=backup_at))
    rows, ratios, copies = [], [], []
    for i, b in enumerate(backed):
        copy = check_copy(b)
        copies.append(copy)
        os.unlink(b["copy"])
        held = [f"{copy['bytes'] / 2**20:,.0f} MiB", f"{copy['bugs']:,} / {copy['imported']:,}", copy["token"]]
        # The records committed while the backup ran, from the first sample after it started to
        # the last before it ended.
        inside = [n for t, n in b["samples"] if b["start"] <= t <= b["end"]]
        if len(inside) < 2 or inside[-1] <= inside[0] or b["end"] >= b["samples"][-1][0]:
            rows.append([i + 1, f"{b['end'] - b['start']:.1f} s", "too few to time", "-", "-", "-"] + held)
            continue
        n0, n1 = inside[0], inside[-1]
        during = (n1 - n0) / (time_at(b["samples"], n1) - time_at(b["samples"], n0))
        without = statistics.median((n1 - n0) / (time_at(p["samples"], n1) - time_at(p["samples"], n0)) for p in plain)
        ratios.append(during / without)
        rows.append([i + 1, f"{b['end'] - b['start']:.1f} s", f"{n0:,} - {n1:,}", f"{without:,.0f}", f"{during:,.0f}", f"{during / without:.2f}x"] + held)
    totals = [p["samples"][-1][0] for p in plain], [b["samples"][-1][0] for b in backed]
    print(f"\n== k. `squasherctl backup` in the middle of a {args.big_rows:,}-record import (started at {backup_at:,} records); "
          f"{args.k_runs} runs with a backup, alternating with {args.k_runs} without")
    print("   (records/s over the records the import committed while the backup ran, in that run and in the runs without a backup)")
    table(["run", "backup took", "records during it", "rows/s without", "with backup", "ratio", "copy", "bugs / job's progress", "token"], rows)
    print(f"    whole imports: without a backup {', '.join(f'{t:.1f}' for t in totals[0])} s; with one {', '.join(f'{t:.1f}' for t in totals[1])} s")
    if ratios:
        ratio = statistics.median(ratios)
        report.target("k. import rate while a backup runs / without", ">= 0.80x", ratio_text(ratio, 0.8), ratio >= 0.8)
    else:
        report.info("k. import rate while a backup runs / without", "not measured: every backup outlasted the chunks around it (a larger --big-rows)")
    problems = [f"run {i + 1}: {p}" for i, c in enumerate(copies) for p in c["problems"]]
    report.check("k. each backup holds exactly the chunks its job's progress counts, up to its token", not problems,
                 "; ".join(problems) or f"{len(copies)} copies, integrity ok")
