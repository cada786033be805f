"""The benchmark's PostgreSQL sections (f to i), run by scripts/bench.py, whose helpers they use.

Every figure is a ratio against a baseline measured on the same server in the same run:
  f. import through one squasherd into PostgreSQL vs a raw COPY of the same rows into the same
     table (a copy of the store's Bug table), chunks of 1,000, medians of alternating runs;
  g. an edit through daemon A -> subscribers on daemon B refreshed (two daemons on one schema),
     at each subscriber count, vs UPDATE + pg_notify -> listener processes, rounds alternating;
  h. single-object saves from 32 concurrent writers spread over the two daemons vs pgbench
     running UPDATE + pg_notify transactions at the same concurrency: the price of the gapless
     token (every save updates one counter row last);
  i. section g at 10 subscribers while a third daemon imports: p99 vs the idle p99.
"""

import glob
import os
import statistics
import tempfile
import subprocess
import threading
import time

import __main__ as bench  # scripts/bench.py, run as the main program

WRITERS = 32


def store_url(socket_dir, schema):
    return f"postgresql:///postgres?host={socket_dir}&user=postgres&schema={schema}"


def pg_daemon(args, root, name, schema):
    return bench.Daemon(root, name, args.pending_limit, store=store_url(args.pg_socket, schema))


def raw_copy(socket_dir, schema, rows_path, chunk=1000):
    """The same rows as section a's raw inserts, by COPY into a copy of `schema`'s Bug table."""
    rows = []
    with open(rows_path) as f:
        for i, line in enumerate(f, 1):
            r = bench.json.loads(line)
            rows.append((i, 1, r["key"], r["title"], r["details"], r["status"], r["priority"], "", 1))
    raw = f"{schema}_raw"
    with bench.pg_connect(socket_dir, autocommit=True) as db:
        db.execute(f'DROP SCHEMA IF EXISTS {raw} CASCADE')
        db.execute(f'CREATE SCHEMA {raw}')
        db.execute(f'CREATE TABLE {raw}."Bug" (LIKE {schema}."Bug" INCLUDING ALL)')
    with bench.pg_connect(socket_dir) as db:
        start = time.perf_counter()
        for i in range(0, len(rows), chunk):
            with db.cursor() as cursor:
                with cursor.copy(f'COPY {raw}."Bug" (pk, _version, "key", "title", "details", "status", "priority", '
                                 '"labels", "project") FROM STDIN') as copy:
                    for row in rows[i:i + chunk]:
                        copy.write_row(row)
            db.commit()
        seconds = time.perf_counter() - start
        count = db.execute(f'SELECT count(*) FROM {raw}."Bug"').fetchone()[0]
        db.execute(f'DROP SCHEMA {raw} CASCADE')
        db.commit()
    if count != len(rows):
        raise bench.Broken(f"raw COPY: {count} rows, expected {len(rows)}")
    return len(rows) / seconds


def drop_schema(socket_dir, schema):
    with bench.pg_connect(socket_dir, autocommit=True) as db:
        db.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def section_f(args, root, files, report):
    ours, raws = [], []
    for run in range(args.a_runs):
        schema = f"bench_f{run}"
        daemon = pg_daemon(args, root, f"pg-import-{run}", schema)
        try:
            start = time.perf_counter()
            daemon.import_file(files[args.rows], args.rows)
            ours.append(args.rows / (time.perf_counter() - start))
        finally:
            daemon.stop()
        raws.append(raw_copy(args.pg_socket, schema, files[args.rows]))
        drop_schema(args.pg_socket, schema)
    raw, mine = statistics.median(raws), statistics.median(ours)
    runs = lambda values: ", ".join(f"{v:,.0f}" for v in values)
    print(f"\n== f. import of {args.rows:,} bug rows into PostgreSQL, chunks of 1,000; median of {args.a_runs} runs of each, alternating")
    bench.table(["path", "rows/s (median)", "runs", "ratio"],
                [["raw COPY (a copy of the store's Bug table)", f"{raw:,.0f}", runs(raws), "1.00x"],
                 ["through squasherd on PostgreSQL (squasherctl import --wait)", f"{mine:,.0f}", runs(ours),
                  bench.ratio_text(mine / raw, 0.5)]])
    report.target("f. squasherd import into PostgreSQL / raw COPY", ">= 0.50x", bench.ratio_text(mine / raw, 0.5),
                  mine / raw >= 0.5)


def section_g(args, writer, reader, report):
    """Returns the 10-subscriber figures (or the largest count's) for section i: the count, our
    times and PostgreSQL's."""
    print(f"\n== g. edit through daemon A -> last subscriber on daemon B refreshed (ms), {args.rounds} edits per count "
          f"after {args.warmup} warm-up; vs UPDATE + pg_notify -> listeners; floor: the same hops with nothing in "
          f"them (bench.FloorChain)")
    rows, idle = [], None
    for n in args.counts:
        ours, pg, floor = bench.paired_latency(reader, args.pg_socket, n, args.rounds, args.warmup, args.pause,
                                               bench.LATENCY_KEY, editor_daemon=writer, floor=True)
        p50, p99 = bench.pct(ours, .5) / bench.pct(pg, .5), bench.pct(ours, .99) / bench.pct(pg, .99)
        rows.append([n, f"{bench.pct(ours, .5):.2f}", f"{bench.pct(ours, .99):.2f}", f"{bench.pct(pg, .5):.2f}",
                     f"{bench.pct(pg, .99):.2f}", f"{bench.pct(floor, .5):.2f}", f"{bench.pct(floor, .99):.2f}",
                     f"{p50:.2f}x / {p99:.2f}x",
                     f"{bench.pct(floor, .5) / bench.pct(pg, .5):.2f}x / {bench.pct(floor, .99) / bench.pct(pg, .99):.2f}x"])
        report.target(f"g. A -> B latency, {n} subscriber(s) / UPDATE + pg_notify", "p50 <= 1.30x, p99 <= 1.50x",
                      f"{p50:.2f}x / {p99:.2f}x", p50 <= 1.3 and p99 <= 1.5)
        # Section i compares with 10 subscribers, or the largest count below it when 10 is not run.
        if idle is None or (idle[0] != 10 and (n == 10 or n > idle[0])):
            idle = (n, ours, pg)
    bench.table(["subscribers", "squasherd A->B p50", "p99", "PostgreSQL p50", "p99", "floor p50", "p99",
                 "squasherd / PG p50 / p99", "floor / PG p50 / p99"], rows)
    return idle


def writers(daemons, keys, seconds):
    """`WRITERS` writers, each updating its own bug through one daemon's write socket (spread over
    `daemons`) as fast as it can for `seconds`; returns saves per second. The writers are
    `bugsquasher-bench --edit-load`, a native client on blocking sockets as pgbench is on the
    other side: Python threads spent a third of a core of the two on the client alone."""
    handle, ids = tempfile.mkstemp(prefix="bsbench-ids-")
    with os.fdopen(handle, "w") as f:
        f.write("\n".join(daemons[0].bug_id(key) for key in keys))
    command = [f"{bench.BIN}/bugsquasher-bench", "--edit-load", ",".join(d.write_socket for d in daemons),
               "--edit-ids", ids, "--edit-seconds", str(seconds)]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
    finally:
        os.unlink(ids)
    match = bench.re.search(r"edits: (\d+) in ([0-9.]+) seconds", out.stdout)
    if out.returncode != 0 or not match:
        raise bench.Broken(f"h. bugsquasher-bench --edit-load exited with status {out.returncode}: {out.stderr.strip()[-300:]}")
    return int(match.group(1)) / float(match.group(2))


def pgbench(socket_dir, clients, seconds):
    """pgbench, `clients` connections, each transaction an UPDATE of a random row of section b's
    bug table and a pg_notify; returns transactions per second."""
    # Where pgbench, run as the postgres user, can read it.
    handle, script = tempfile.mkstemp(prefix="bsbench-", suffix=".sql")
    with os.fdopen(handle, "w") as f:
        f.write("\\set id random(1, 1000)\nBEGIN;\nUPDATE bug SET status = 'w' WHERE id = :id;\n"
                "SELECT pg_notify('bench', 'w');\nEND;\n")
    os.chmod(script, 0o644)
    tool = sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"))[-1]
    command = [tool, "-h", socket_dir, "-U", "postgres", "-n", "-c", str(clients), "-j", "2",
               "-T", str(max(1, round(seconds))), "-f", script, "postgres"]
    if os.geteuid() == 0:  # as scripts/postgres.sh runs the server
        command = ["runuser", "-u", "postgres", "--"] + command
    out = subprocess.run(command, capture_output=True, text=True, timeout=600)
    os.unlink(script)
    match = bench.re.search(r"tps = ([0-9.]+)", out.stdout)
    if out.returncode != 0 or not match:
        raise bench.Broken(f"pgbench failed ({out.returncode}): {out.stderr.strip()[-300:]}")
    return float(match.group(1))


def section_h(args, daemons, report):
    seconds = args.h_seconds
    keys = [f"BENCH-{n}" for n in range(1, WRITERS + 1)]
    ours, theirs = [], []
    for _ in range(args.a_runs):
        ours.append(writers(daemons, keys, seconds))
        theirs.append(pgbench(args.pg_socket, WRITERS, seconds))
    mine, raw = statistics.median(ours), statistics.median(theirs)
    runs = lambda values: ", ".join(f"{v:,.0f}" for v in values)
    print(f"\n== h. single-object saves from {WRITERS} concurrent writers for {seconds:g} s, median of {args.a_runs} runs of each, alternating")
    bench.table(["path", "saves/s (median)", "runs", "ratio"],
                [["pgbench: UPDATE + pg_notify, same concurrency", f"{raw:,.0f}", runs(theirs), "1.00x"],
                 [f"squasherd: Import.Update over {len(daemons)} daemons", f"{mine:,.0f}", runs(ours),
                  bench.ratio_text(mine / raw, 1.0)]])
    report.target(f"h. {WRITERS} writers: squasherd saves / pgbench UPDATE + pg_notify", ">= 1.00x",
                  bench.ratio_text(mine / raw, 1.0), mine / raw >= 1.0)


def section_i(args, writer, reader, importer, files, idle, report):
    """Section g's edits while daemon C imports, their p99 against section g's; PostgreSQL's
    UPDATE + pg_notify rounds alternate with them, for what the import does to the server's own
    path on this machine."""
    n, idle_times, idle_pg = idle
    subs = bench.Subscribers(reader, [[bench.LATENCY_KEY]] * n)
    pg = None
    during, during_pg = [], []
    try:
        subs.wait_ready()
        pg = bench.PgListeners(args.pg_socket, n)
        editor = bench.Editor(writer)
        done = threading.Event()
        failure = []

        def run_import():
            try:
                importer.import_file(files[args.rows], args.rows)
            except Exception as error:
                failure.append(error)
            finally:
                done.set()

        thread = threading.Thread(target=run_import, daemon=True)
        thread.start()
        i = 0
        try:
            while not done.is_set():
                during.append(bench.edit_round(editor, subs, f"I{i}"))
                time.sleep(args.pause)
                if not done.is_set():
                    during_pg.append(pg.round(f"I{i}"))
                    time.sleep(args.pause)
                i += 1
        finally:
            editor.close()
        thread.join()
        if failure:
            raise failure[0]
    finally:
        if pg:
            pg.close()
        subs.close()
    idle_p99, during_p99 = bench.pct(idle_times, .99), bench.pct(during, .99)
    print(f"\n== i. section g at {n} subscribers while daemon C imports {args.rows:,} records ({len(during)} edits "
          f"during it), UPDATE + pg_notify rounds alternating")
    rows = [["squasherd, idle (section g)", f"{bench.pct(idle_times, .5):.2f}", f"{idle_p99:.2f}", len(idle_times), ""],
            ["squasherd, during the import", f"{bench.pct(during, .5):.2f}", f"{during_p99:.2f}", len(during),
             f"{during_p99 / idle_p99:.2f}x"]]
    if idle_pg and during_pg:
        rows += [["PostgreSQL, idle (section g)", f"{bench.pct(idle_pg, .5):.2f}", f"{bench.pct(idle_pg, .99):.2f}",
                  len(idle_pg), ""],
                 ["PostgreSQL, during the import", f"{bench.pct(during_pg, .5):.2f}", f"{bench.pct(during_pg, .99):.2f}",
                  len(during_pg), f"{bench.pct(during_pg, .99) / bench.pct(idle_pg, .99):.2f}x"]]
    bench.table(["", "p50", "p99", "edits", "p99 / idle"], rows)
    report.target(f"i. A -> B p99 during an import on C / idle, {n} subscribers", "<= 1.20x",
                  f"{during_p99 / idle_p99:.2f}x", during_p99 <= 1.2 * idle_p99)


def run(args, root, files, report):
    """Sections f to i on the PostgreSQL server of --pg-socket."""
    section_f(args, root, files, report)
    schema = "bench_cluster"
    drop_schema(args.pg_socket, schema)
    names = ["pg-a", "pg-b", "pg-c"]
    daemons = []
    try:
        for name in names:
            daemons.append(pg_daemon(args, root, name, schema))
        a, b, c = daemons
        seed = f"{root}/pg-seed.ndjson"
        bench.write_seed(seed, args.rows)
        with open(seed, "a") as f:
            for n in range(1, WRITERS + 1):
                f.write(bench.bench_record(n))
        with open(seed) as f:
            records = sum(1 for _ in f)
        a.import_file(seed, records)
        idle = section_g(args, a, b, report)
        section_h(args, [a, b], report)
        section_i(args, a, b, c, files, idle, report)
    finally:
        for daemon in daemons:
            daemon.stop()
        drop_schema(args.pg_socket, schema)
