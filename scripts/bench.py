#!/usr/bin/env python3
"""BugSquasher's benchmark report, run by scripts/bench.sh (which builds, and starts PostgreSQL).

Every figure is a ratio against a baseline measured in the same run on the same machine:

 1. object graph: bugsquasher-bench (importer contexts vs raw GRDB inserts; peak RSS at two sizes);
 a. import rows/s through squasherd (`squasherctl import --wait`: upload, spool, decode, upsert,
    one transaction per chunk of 1,000, broadcast) vs raw SQLite prepared-statement inserts of the
    same rows into the same Bug table (Python's sqlite3 `executemany`, chunks of 1,000, WAL,
    synchronous=NORMAL);
 b. commit -> last subscriber refreshed, p50/p99, for 1, 10, 100 `squasherctl subscribe`
    processes vs PostgreSQL LISTEN/NOTIFY (UPDATE + pg_notify in one transaction -> last listener
    process) and a raw fan-out of one 200-byte message over Unix sockets; both writers use a
    client in C or close to the wire (psycopg's C implementation of libpq; a minimal Varlink
    client, `Connection`);
 c. bytes and work (CPU time, loads) of a subscriber holding 100 bugs during an import,
    filtered by squasherd vs unfiltered;
 d. peak RSS (VmHWM) of squasherd after an import of --rows vs --big-rows records;
 e. slow subscribers: the --big-rows import with 100 subscribers (89 fast, 10 slow, 1 stalled)
    vs the same import with none (the mean of the --big-rows run of d and one more run after
    the one with subscribers, against the VM's drift); the fast ones' latency during the import
    vs when idle (edits before and after the import, with every subscriber attached, against
    the same drift); the stalled one must be told to resync and end consistent after resuming
    with `since`.

Exits 1 when something is broken (wrong counts, a subscriber that does not end consistent, a
daemon that does not exit cleanly); a missed performance target is only reported.

Also the child processes of the benchmark: `bench.py child ROLE ...` (slow and stalled Varlink
subscribers, PostgreSQL listeners, raw fan-out readers).
"""
import argparse, gc, json, math, os, platform, queue, random, re, select, selectors, shutil, signal, socket, sqlite3, statistics, subprocess, sys, tempfile, threading, time

HERE = os.path.abspath(__file__)
PYTHON = sys.executable
BIN = os.environ.get("BIN", ".build/release")
LATENCY_KEY = "LATENCY-1"


class Broken(Exception):
    """Something is wrong (not merely slow): the script exits 1."""


# MARK: - Small helpers

def now_us():
    return time.time_ns() // 1000


def pct(values, q):
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def proc_status(pid, field):
    """A field of /proc/PID/status in KiB (VmHWM, VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise Broken(f"no {field} for pid {pid}")


def cpu_ms(pid):
    """User + system CPU time of a running process, in ms."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def mib(kib):
    return kib / 1024


def hold_seconds(readers):
    """How long the script reads no child's output after starting a measured fan-out to
    `readers` processes: longer than the fan-out takes on 2 cores (100 subscribers: about 10 ms,
    during an import up to 13)."""
    return 0.004 + 0.00015 * readers


class PipeReader:
    """One thread that reads the stdout of every child process the script watches, line by line,
    so that pipes never fill. One thread for all, at `nice` 10: a thread per child, each woken by
    its line and taking the GIL, cost the script 3 ms of CPU per fan-out to 89 subscribers, CPU
    that the subscribers it times were waiting for. The times it reports are the children's own
    (printed by them), so reading them later changes no figure: `hold` keeps it off the cores
    while a measured fan-out runs (squasherd's and PostgreSQL's alike)."""

    _shared = None
    _lock = threading.Lock()

    def __init__(self):
        self.selector = selectors.DefaultSelector()
        self.pending = queue.Queue()
        self.wake_r, self.wake_w = os.pipe()
        self.quiet_until = 0.0
        self.selector.register(self.wake_r, selectors.EVENT_READ, None)
        threading.Thread(target=self._run, daemon=True, name="pipe reader").start()

    @classmethod
    def shared(cls):
        with cls._lock:
            if cls._shared is None:
                cls._shared = PipeReader()
            return cls._shared

    def watch(self, proc, on_line, on_end):
        """Calls `on_line(text)` for each line `proc` prints and `on_end()` when it closes its
        stdout, on the reader's thread."""
        # A descriptor of its own: the child's `stdout` may be closed (or collected) before the
        # reader has seen its end, and its number reused.
        self.pending.put((os.dup(proc.stdout.fileno()), on_line, on_end))
        os.write(self.wake_w, b"x")

    def hold(self, seconds):
        """Reads nothing for `seconds` from now: call it right before a measured fan-out, so that
        the lines it makes are read after it, and again once the change committed (a later call
        extends the hold). Pipes hold the lines meanwhile."""
        self.quiet_until = time.monotonic() + seconds

    def _run(self):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        partial = {}
        while True:
            ready = self.selector.select()
            # `hold` may be extended while this sleeps (see `edit_round`).
            while (quiet := self.quiet_until - time.monotonic()) > 0:
                time.sleep(quiet)
            for key, _ in ready:
                fd = key.fd
                if fd == self.wake_r:
                    os.read(fd, 4096)
                    while not self.pending.empty():
                        watched, on_line, on_end = self.pending.get()
                        partial[watched] = b""
                        self.selector.register(watched, selectors.EVENT_READ, (on_line, on_end))
                    continue
                on_line, on_end = key.data
                data = os.read(fd, 1 << 16)
                if not data:
                    self.selector.unregister(fd)
                    os.close(fd)
                    partial.pop(fd)  # a last line without a newline: the child died mid-line
                    on_end()
                    continue
                *lines, partial[fd] = (partial[fd] + data).split(b"\n")
                for line in lines:
                    try:
                        on_line(line.decode())
                    except Exception as error:  # one bad line must not stop every other child's
                        print(f"bench: a child printed {line[:200]!r}: {error}", file=sys.stderr, flush=True)


class Lines:
    """The stdout of a child process, line by line (read by the ``PipeReader``); `get` waits for
    the next line, bounded."""

    def __init__(self, proc, name):
        self.proc, self.name, self.queue = proc, name, queue.Queue()
        PipeReader.shared().watch(proc, self.queue.put, lambda: self.queue.put(None))

    def get(self, timeout):
        try:
            line = self.queue.get(timeout=timeout)
        except queue.Empty:
            raise Broken(f"{self.name}: no output within {timeout:.0f} s")
        if line is None:
            raise Broken(f"{self.name}: exited (status {self.proc.wait()}) early")
        return line


def stop_process(proc, timeout=30):
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise Broken(f"pid {proc.pid} did not stop within {timeout} s of SIGTERM")


# MARK: - Generated data

def bench_record(n):
    return (f'{{"key": "BENCH-{n}", "title": "Crash #{n} when rotating the device while the keyboard is open", '
            f'"details": {json.dumps((f"{n}: " + "Steps to reproduce: open the app, rotate the device, watch the log. " * 6)[:400])}, '
            f'"status": "{["Open", "In Progress", "Resolved", "Closed"][n % 4]}", "priority": "{["Low", "Medium", "High"][n % 3]}", '
            f'"labels": [], "project": {{"key": "BENCH"}}, "components": [], "comments": []}}\n')


def generate(path, count):
    """`count` bugsquasher-ndjson bug records BENCH-1 ... BENCH-count (about 640 bytes each)."""
    with open(path, "w") as out:
        for start in range(1, count + 1, 10_000):
            out.write("".join(bench_record(n) for n in range(start, min(count, start + 9_999) + 1)))


def seed_keys(count):
    """1,000 keys spread over BENCH-1 ... BENCH-count: seeded before an import, which updates them."""
    step = max(1, count // 1000)
    return [f"BENCH-{1 + i * step}" for i in range(min(1000, count))]


def write_seed(path, count):
    with open(path, "w") as out:
        for key in seed_keys(count) + [LATENCY_KEY]:
            out.write(json.dumps({"key": key, "title": f"seeded {key}", "status": "Seeded", "labels": [], "project": {"key": "BENCH"},
                                  "components": [], "comments": []}) + "\n")


# MARK: - squasherd

class Daemon:
    """A squasherd with its own store, sockets and configuration in a fresh directory; ready when it
    says READY=1 on $NOTIFY_SOCKET (a socket we read until it stops, like a service manager)."""

    def __init__(self, root, name, pending_limit, store=None):
        import varlink  # noqa: F401  (fail early when the venv lacks it)
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.config = f"{self.dir}/squasherd.conf"
        with open(self.config, "w") as f:
            f.write(f"log_level = warning\nchunk_size = 1000\nsubscriber_pending_limit = {pending_limit}\n")
            if store:  # a PostgreSQL store (the sections of bench_postgres.py)
                f.write(f"store = {store}\n")
        self.read_socket = f"{self.dir}/run/squasherd.sock"
        self.write_socket = f"{self.dir}/run/squasherd-write.sock"
        self.env = dict(os.environ, SQUASHERD_RUNTIME_DIRECTORY=f"{self.dir}/run")
        notify_path = f"{self.dir}/notify"
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(notify_path)
        self.notify.settimeout(60)
        env = dict(os.environ, NOTIFY_SOCKET=notify_path)
        env.pop("JOURNAL_STREAM", None)
        self.log = open(f"{self.dir}/squasherd.log", "w")
        self.proc = subprocess.Popen([f"{BIN}/squasherd", "--config", self.config, "--state-directory", f"{self.dir}/state",
                                      "--runtime-directory", f"{self.dir}/run"], stderr=self.log, env=env)
        self.pid = self.proc.pid
        try:
            while b"READY=1" not in self.notify.recv(4096).split(b"\n"):
                pass
        except socket.timeout:
            stop_process(self.proc)
            raise Broken(f"squasherd did not report READY=1 within 60 s (log: {self.log.name})")
        self.notify.settimeout(None)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        try:
            while self.notify.recv(4096):
                pass
        except OSError:
            pass

    def call(self, interface, method, *args, write=False):
        import varlink
        with varlink.Client(address="unix:" + (self.write_socket if write else self.read_socket)) as client, client.open(interface) as service:
            return getattr(service, method)(*args)

    def status(self):
        return self.call("io.bugsquasher.Jobs", "Status")

    def bug_id(self, key):
        ids = self.call("io.bugsquasher.Store", "Fetch", "Bug", f'key == "{key}"', None, 1, None, "ids")["ids"]
        if not ids:
            raise Broken(f"no bug {key} in the store")
        return ids[0]

    def versions(self, ids):
        """The store's current version of each ID."""
        result = {}
        for i in range(0, len(ids), 1000):
            for row in self.call("io.bugsquasher.Store", "Values", ids[i:i + 1000])["rows"]:
                result[row["id"]] = row["version"]
        return result

    def wait_subscribers(self, count, timeout=120):
        """Polls Jobs.Status until `count` subscriptions are open (their registrations came with
        Subscribe, so they are registered too)."""
        deadline = time.monotonic() + timeout
        while True:
            have = self.status()["subscribers"]
            if have == count:
                return
            if time.monotonic() > deadline:
                raise Broken(f"{have} subscribers connected after {timeout} s, expected {count}")
            time.sleep(0.02)

    def import_file(self, path, expect):
        out = subprocess.run([f"{BIN}/squasherctl", "import", path, "--wait"], env=self.env, capture_output=True, text=True, timeout=3600)
        if out.returncode != 0 or f"{expect} imported, 0 rejected" not in out.stdout:
            raise Broken(f"import of {path} (expected {expect} imported): status {out.returncode}: {out.stdout.strip()} {out.stderr.strip()}")
        return out.stdout

    def commit_times(self, tokens):
        """When each of these saves committed (µs since 1970): `bs_history.committed_at`, the
        time squasherd's writer appended the save to the history, in the save's transaction just
        before its commit (read from the store file, which the daemon keeps open)."""
        if not tokens:
            return {}
        db = sqlite3.connect(f"file:{self.dir}/state/bugs.sqlite?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT token, committed_at FROM bs_history WHERE token BETWEEN ? AND ?", (min(tokens), max(tokens)))
            return {token: at * 1e6 for token, at in rows}
        finally:
            db.close()

    def hwm_kib(self):
        return proc_status(self.pid, "VmHWM")

    def stop(self):
        status = stop_process(self.proc, timeout=120)
        self.notify.close()
        self.log.close()
        if status != 0:
            raise Broken(f"squasherd exited with status {status} on SIGTERM (log: {self.log.name})")
        shutil.rmtree(self.dir, ignore_errors=True)


class Editor:
    """Edits one bug through io.bugsquasher.Import.Update on one write connection, with a minimal
    Varlink client (`Connection`), as PostgreSQL's writer uses libpq through psycopg's C
    implementation. (The PyPI `varlink` package's Python adds about 0.2 ms to each call.)"""

    def __init__(self, daemon, key=LATENCY_KEY):
        self.connection = Connection(daemon.write_socket)
        self.id = daemon.bug_id(key)

    def update(self, status):
        self.connection.send("io.bugsquasher.Import.Update", {"id": self.id, "values": {"status": status}})
        return self.connection.receive("Update")["parameters"]

    def close(self):
        self.connection.close()


class Subscribers:
    """`squasherctl subscribe --json` processes, each holding some bugs; records when each printed
    a refresh of LATENCY-1 with a given status, and the last version of every held bug."""

    def __init__(self, daemon, key_sets, unfiltered=False, name="subscriber", mark_key=LATENCY_KEY):
        self.daemon, self.cond, self.mark_key = daemon, threading.Condition(), mark_key
        self.marks, self.refreshes, self.stats, self.ready = {}, [0] * len(key_sets), {}, 0
        self.held = [dict() for _ in key_sets]   # key -> (id, version)
        self.procs = [subprocess.Popen([f"{BIN}/squasherctl", "subscribe", "--json"] + (["--all"] if unfiltered else []) + keys,
                                       env=daemon.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for keys in key_sets]
        self.name = name
        reader = PipeReader.shared()
        for i, proc in enumerate(self.procs):
            reader.watch(proc, lambda line, i=i: self._line(i, line), self._ended)

    def _line(self, i, line):
        event = json.loads(line)
        with self.cond:
            kind = event["event"]
            # The waiting thread is woken only when what it waits for may have come, not for
            # each of 100 subscribers' events.
            wake = False
            if kind == "ready":
                self.ready += 1
                wake = self.ready == len(self.procs)
            if kind in ("ready", "refresh", "catch-up"):
                for bug in event.get("bugs") or []:
                    self.held[i][bug["key"]] = (bug["id"], bug["version"])
                    if bug["key"] == self.mark_key:
                        marks = self.marks.setdefault(bug["status"], {})
                        marks[i] = event["at"]
                        wake = wake or len(marks) == len(self.procs)
                if kind != "ready":
                    self.refreshes[i] += 1
            elif kind == "stats":
                self.stats[i] = event
                wake = len(self.stats) == len(self.procs)
            if wake:
                self.cond.notify_all()

    def _ended(self):
        with self.cond:
            self.cond.notify_all()

    def wait_ready(self, timeout=120):
        with self.cond:
            if not self.cond.wait_for(lambda: self.ready == len(self.procs), timeout):
                raise Broken(f"{self.name}s: {self.ready} of {len(self.procs)} ready after {timeout} s")

    def wait_mark(self, status, timeout=60):
        """When each subscriber printed LATENCY-1 with this status (µs since 1970), once all have."""
        with self.cond:
            if not self.cond.wait_for(lambda: len(self.marks.get(status, {})) == len(self.procs), timeout):
                raise Broken(f"{self.name}s: {len(self.marks.get(status, {}))} of {len(self.procs)} refreshed '{status}' within {timeout} s")
            return list(self.marks.pop(status).values())

    def cpu_ms(self):
        return [cpu_ms(p.pid) for p in self.procs]

    def check_consistent(self):
        """Every held bug's last version equals the store's."""
        ids = sorted({bug_id for held in self.held for bug_id, _ in held.values()})
        store = self.daemon.versions(ids)
        for i, held in enumerate(self.held):
            for key, (bug_id, version) in held.items():
                if store.get(bug_id) != version:
                    raise Broken(f"{self.name} {i} holds {key} at version {version}, the store has {store.get(bug_id)}")

    def close(self, timeout=60):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                raise Broken(f"{self.name} pid {p.pid} did not stop on SIGTERM")
        with self.cond:
            self.cond.wait_for(lambda: len(self.stats) == len(self.procs), 10)
        return self.stats


def edit_round(editor, subscribers, marker, timeout=60, rounds=None):
    """Edits the bug to status `marker`; returns ms from the edit to the last subscriber's refresh
    (to the reply, without subscribers). With `rounds`, appends the save's history token and when
    each subscriber refreshed (µs since 1970), for `from_commit`."""
    if subscribers is not None:
        PipeReader.shared().hold(hold_seconds(len(subscribers.procs)))
    t0 = now_us()
    token = editor.update(marker)["token"]
    if subscribers is None:
        return (now_us() - t0) / 1000
    # Again from the reply, which follows the commit: the fan-out starts there, and an edit that
    # waited for the store's writer (behind an import's chunk) would otherwise outlast the hold,
    # and the script would read the subscribers' lines while they are still being timed.
    PipeReader.shared().hold(hold_seconds(len(subscribers.procs)))
    refreshed = subscribers.wait_mark(marker, timeout)
    if rounds is not None:
        rounds.append((token, refreshed))
    return (max(refreshed) - t0) / 1000


def idle_edits(args, editor, subscribers, name, rounds):
    """--idle-edits edits, one every --edit-interval ms, with nothing else running; returns each
    one's ms from the edit to the last refresh, and appends its round (see `edit_round`)."""
    times = []
    for i in range(args.idle_edits):
        tick = time.monotonic()
        times.append(edit_round(editor, subscribers, f"{name}-{i}", rounds=rounds))
        time.sleep(max(0, args.edit_interval / 1000 - (time.monotonic() - tick)))
    return times


def from_commit(daemon, rounds):
    """ms from each save's commit to its refreshes (see `edit_round`): per save, the last
    subscriber's; and every subscriber's refresh of every save, one figure each."""
    committed = daemon.commit_times([token for token, _ in rounds])
    last = [(max(refreshed) - committed[token]) / 1000 for token, refreshed in rounds]
    each = [(at - committed[token]) / 1000 for token, refreshed in rounds for at in refreshed]
    return last, each


# MARK: - Baselines

def raw_inserts(rows_path, db_path, schema, chunk=1000):
    """Raw prepared-statement inserts of the same rows into the daemon's Bug table schema."""
    db = sqlite3.connect(db_path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    for statement in schema:
        db.execute(statement)
    rows = []
    with open(rows_path) as f:
        for i, line in enumerate(f, 1):
            r = json.loads(line)
            rows.append((i, 1, r["key"], r["title"], r["details"], r["status"], r["priority"], "", 1))
    start = time.perf_counter()
    for i in range(0, len(rows), chunk):
        db.execute("BEGIN")
        db.executemany('INSERT INTO "Bug" (pk, _version, "key", "title", "details", "status", "priority", "labels", "project") VALUES (?,?,?,?,?,?,?,?,?)', rows[i:i + chunk])
        db.execute("COMMIT")
    seconds = time.perf_counter() - start
    if db.execute('SELECT count(*) FROM "Bug"').fetchone()[0] != len(rows):
        raise Broken("raw inserts: wrong row count")
    db.close()
    return len(rows) / seconds


def raw_fanout(n, rounds, warmup, pause):
    """One 200-byte message over Unix stream sockets to n reader processes; the last receipt."""
    directory = tempfile.mkdtemp(prefix="bsfan-")
    path = f"{directory}/fan.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(n)
    server.settimeout(60)
    procs = [subprocess.Popen([PYTHON, HERE, "child", "fanout", path], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    readers = [Lines(p, "fan-out reader") for p in procs]
    conns = [server.accept()[0] for _ in range(n)]
    latencies = []
    message = b"x" * 200
    try:
        for i in range(warmup + rounds):
            PipeReader.shared().hold(hold_seconds(n))
            t0 = now_us()
            for c in conns:
                c.sendall(message)
            last = max(int(r.get(30)) for r in readers)
            if i >= warmup:
                latencies.append((last - t0) / 1000)
            time.sleep(pause)
    finally:
        for c in conns:
            c.close()
        for p in procs:
            stop_process(p)
        server.close()
        shutil.rmtree(directory, ignore_errors=True)
    return latencies


def pg_connect(socket_dir, autocommit=False):
    import psycopg
    return psycopg.connect(host=socket_dir, user="postgres", dbname="postgres", autocommit=autocommit)


def pg_prepare(socket_dir):
    with pg_connect(socket_dir) as db:
        db.execute("DROP TABLE IF EXISTS bug")
        db.execute("CREATE TABLE bug (id integer PRIMARY KEY, key text UNIQUE, title text, details text, status text, priority text)")
        with db.cursor() as cur:
            cur.executemany("INSERT INTO bug VALUES (%s, %s, %s, %s, %s, %s)",
                            [(n, f"BENCH-{n}", f"Crash #{n}", "Steps to reproduce " * 20, "Open", "Low") for n in range(1, 1001)])
        version = db.execute("SHOW server_version").fetchone()[0]
        settings = {name: db.execute(f"SHOW {name}").fetchone()[0] for name in ("fsync", "synchronous_commit", "wal_level", "listen_addresses")}
    return version, settings


def last_receipt(readers, marker, name):
    """When the last of `readers` (`Lines` printing `payload stamp`) received `marker` (µs)."""
    last = 0
    for r in readers:
        payload, at = r.get(30).split()
        if payload != marker:
            raise Broken(f"{name} got {payload}, expected {marker}")
        last = max(last, int(at))
    return last


class PgListeners:
    """`n` PostgreSQL listeners (LISTEN bench, each its own process and backend) and a writer
    connection; `round` times one UPDATE of a bug row + pg_notify in one transaction, committed,
    to the last listener's receipt."""

    def __init__(self, socket_dir, n):
        self.procs = [subprocess.Popen([PYTHON, HERE, "child", "pg-listener", socket_dir], stdout=subprocess.PIPE, text=True) for _ in range(n)]
        self.db = None
        try:
            self.readers = [Lines(p, "PostgreSQL listener") for p in self.procs]
            for r in self.readers:
                if r.get(120).strip() != "ready":
                    raise Broken("PostgreSQL listener: unexpected output")
            self.db = pg_connect(socket_dir)
        except BaseException:
            self.close()
            raise

    def round(self, marker):
        """ms from the UPDATE to the last listener's receipt."""
        PipeReader.shared().hold(hold_seconds(len(self.procs)))
        t0 = now_us()
        self.db.execute("UPDATE bug SET status = %s WHERE id = 1", (marker,))
        self.db.execute("SELECT pg_notify('bench', %s)", (marker,))
        self.db.commit()
        PipeReader.shared().hold(hold_seconds(len(self.procs)))  # from the commit, as `edit_round`
        return (last_receipt(self.readers, marker, "PostgreSQL listener") - t0) / 1000

    def close(self):
        if self.db is not None:
            self.db.close()
        for p in self.procs:
            stop_process(p)


class FloorChain:
    """The hops of an edit from daemon A to a subscriber on daemon B, with nothing in them: a
    writer process that runs the edit as squasherd's one statement does (the row, the counter
    row's token, the history row, a hint of the token; see DESIGN-NOTES, "History tokens"), a
    reader process that LISTENs, reads the history after the hinted token and sends it to `n`
    subscriber processes over Unix sockets. All Python on psycopg, as `PgListeners`: what any
    implementation of the design pays on this machine before doing any work of its own (the
    floor under section g's ratios)."""

    def __init__(self, socket_dir, n):
        self.directory = tempfile.mkdtemp(prefix="bsfloor-")
        self.procs, self.db, self.writer = [], None, None
        try:
            with pg_connect(socket_dir, autocommit=True) as db:
                db.execute("DROP TABLE IF EXISTS bench_floor_history, bench_floor_counter")
                db.execute("CREATE TABLE bench_floor_counter (id integer PRIMARY KEY, token bigint NOT NULL)")
                db.execute("INSERT INTO bench_floor_counter VALUES (1, 0)")
                db.execute("CREATE TABLE bench_floor_history (token bigint PRIMARY KEY, payload text NOT NULL)")
            # Each in turn: the subscribers connect to the reader's socket, the script to the writer's.
            def started(role, name, *arguments):
                lines = Lines(self._start(role, *arguments), name)
                if lines.get(120).strip() != "ready":
                    raise Broken(f"{name}: unexpected output")
                return lines
            started("floor-reader", "floor reader", socket_dir, f"{self.directory}/reader.sock", str(n))
            self.readers = [started("floor-subscriber", "floor subscriber", f"{self.directory}/reader.sock")
                            for _ in range(n)]
            started("floor-writer", "floor writer", socket_dir, f"{self.directory}/writer.sock")
            self.writer = socket.socket(socket.AF_UNIX)
            self.writer.connect(f"{self.directory}/writer.sock")
            self.replies = self.writer.makefile("rb")
        except BaseException:
            self.close()
            raise

    def _start(self, role, *arguments):
        proc = subprocess.Popen([PYTHON, HERE, "child", role, *arguments], stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        return proc

    def round(self, marker):
        """ms from the edit sent to the writer to the last subscriber's receipt."""
        PipeReader.shared().hold(hold_seconds(len(self.readers)))
        t0 = now_us()
        self.writer.sendall(f"{marker}\n".encode())
        if self.replies.readline().strip() != b"ok":
            raise Broken("floor writer: no reply")
        PipeReader.shared().hold(hold_seconds(len(self.readers)))
        return (last_receipt(self.readers, marker, "floor subscriber") - t0) / 1000

    def close(self):
        if self.writer is not None:
            self.writer.close()
        for p in self.procs:
            stop_process(p)
        shutil.rmtree(self.directory, ignore_errors=True)


def paired_latency(daemon, pg_socket, n, rounds, warmup, pause, key, editor_daemon=None, floor=False):
    """Section b for one count: an edit of `key` through squasherd -> the last of `n`
    `squasherctl subscribe` holding it printed the refreshed bug; and, with `pg_socket`, the
    same count of PostgreSQL listeners (`PgListeners`). Both sets run at once and their rounds
    alternate, so that each pair of figures is measured on the machine in one state: timed one
    after the other, the two sides could land in different phases of the shared host (in one
    run, PostgreSQL's p50 and the raw fan-out's were 0.50 and 0.03 ms, against 0.74 and 0.08
    in the runs before). With `editor_daemon`, the edits go through that daemon instead (another
    daemon on the same PostgreSQL store). With `floor`, a third side alternates too: the same
    hops with nothing in them (`FloorChain`). Returns ours, PostgreSQL's (or None) and the
    floor's (or None)."""
    subs = Subscribers(daemon, [[key]] * n, mark_key=key)
    pg = chain = None
    ours, theirs, floors = [], [], []
    try:
        subs.wait_ready()
        daemon.wait_subscribers(n)
        pg = PgListeners(pg_socket, n) if pg_socket else None
        chain = FloorChain(pg_socket, n) if pg_socket and floor else None
        editor = Editor(editor_daemon or daemon, key)
        try:
            for i in range(warmup + rounds):
                ms = edit_round(editor, subs, f"S{i}-{n}")
                time.sleep(pause)
                pg_ms = floor_ms = None
                if pg:
                    pg_ms = pg.round(f"S{i}-{n}")
                    time.sleep(pause)
                if chain:
                    floor_ms = chain.round(f"S{i}-{n}")
                    time.sleep(pause)
                if i >= warmup:
                    ours.append(ms)
                    if pg:
                        theirs.append(pg_ms)
                    if chain:
                        floors.append(floor_ms)
        finally:
            editor.close()
    finally:
        for side in (pg, chain):
            if side:
                side.close()
        subs.close()
    return ours, theirs or None, floors or None


# MARK: - Children

def child_fanout(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    while True:
        d = s.recv(4096)
        if not d:
            break
        print(now_us(), flush=True)


def child_pg_listener(socket_dir):
    db = pg_connect(socket_dir, autocommit=True)
    db.execute("LISTEN bench")
    print("ready", flush=True)
    for notify in db.notifies():
        print(notify.payload, now_us(), flush=True)


def child_floor_writer(socket_dir, path):
    db = pg_connect(socket_dir, autocommit=True)
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    print("ready", flush=True)
    connection, _ = server.accept()
    for line in connection.makefile("rb"):
        marker = line.decode().strip()
        db.execute("WITH changed AS (UPDATE bug SET status = %s WHERE id = 1 RETURNING id), "
                   "issued AS (UPDATE bench_floor_counter SET token = token + 1 WHERE id = 1 RETURNING token), "
                   "written AS (INSERT INTO bench_floor_history SELECT token, %s FROM issued RETURNING token) "
                   "SELECT pg_notify('bench_floor', token::text) FROM written, changed", (marker, marker))
        connection.sendall(b"ok\n")


def child_floor_reader(socket_dir, path, n):
    listening, reading = pg_connect(socket_dir, autocommit=True), pg_connect(socket_dir, autocommit=True)
    listening.execute("LISTEN bench_floor")
    last = reading.execute("SELECT coalesce(max(token), 0) FROM bench_floor_history").fetchone()[0]
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(int(n))
    print("ready", flush=True)
    subscribers = [server.accept()[0] for _ in range(int(n))]
    for _ in listening.notifies():
        for token, payload in reading.execute(
                "SELECT token, payload FROM bench_floor_history WHERE token > %s ORDER BY token", (last,)).fetchall():
            last = token
            for s in subscribers:
                s.sendall(f"{payload}\n".encode())


def child_floor_subscriber(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    print("ready", flush=True)
    for line in s.makefile("rb"):
        print(line.decode().strip(), now_us(), flush=True)


class Connection:
    """A minimal Varlink client: one JSON message and a NUL each way, on a Unix socket."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)
        self.buffer, self.bytes = b"", 0

    def send(self, method, parameters, **flags):
        self.sock.sendall(json.dumps({"method": method, "parameters": parameters, **flags}).encode() + b"\0")

    def receive(self, what, timeout=120):
        """The next reply; an error reply raises."""
        while b"\0" not in self.buffer:
            self.sock.settimeout(timeout)
            data = self.sock.recv(1 << 16)
            if not data:
                raise Broken(f"squasherd closed the connection before the reply to {what}")
            self.buffer += data
            self.bytes += len(data)
        message, self.buffer = self.buffer.split(b"\0", 1)
        reply = json.loads(message)
        if "error" in reply:
            raise Broken(f"{what} failed: {reply}")
        return reply

    def pending(self):
        """Whether a whole reply is already buffered."""
        return b"\0" in self.buffer

    def close(self):
        self.sock.close()


class Feed(Connection):
    """A raw Varlink client of io.bugsquasher.Changes.Subscribe."""

    def __init__(self, path, **parameters):
        super().__init__(path)
        self.done = False
        self.send("io.bugsquasher.Changes.Subscribe", parameters, more=True)

    def next(self, timeout=120):
        """The next reply's parameters; None after the last one (no `continues`)."""
        if self.done and not self.pending():
            return None
        reply = self.receive("Subscribe", timeout)
        if not reply.get("continues"):
            self.done = True
        return reply["parameters"]


def child_slow(path, delay_ms):
    """An unfiltered subscriber that sleeps `delay_ms` after each message; resubscribes with
    `since` when told to resync. Asks for runs of IDs (`idRuns`): an import chunk's 1,000 new
    bugs are one change with a count. Prints a summary once it has read up to the token of
    "until TOKEN" on stdin (at once if it has), and reads on until "stop" (or prints it then,
    if it has not yet). It prints nothing per save: the
    script would read 10 lines per import chunk, on the cores the fast subscribers it times
    share."""
    feed = Feed(path, registeredOnly=False, idRuns=True)
    first = feed.next()
    token, subscribed = first["token"], first["token"]
    print(json.dumps({"event": "subscribed", "token": token}), flush=True)
    saves = objects = coalesced = resyncs = 0
    until = None
    summarized = False

    def summarize():
        print(json.dumps({"event": "summary", "subscribed": subscribed, "token": token, "saves": saves, "objects": objects,
                          "coalesced": coalesced, "resyncs": resyncs, "bytes": feed.bytes, "cpuMs": cpu_ms(os.getpid())}), flush=True)
    # It follows on after its summary, as before the import, until "stop": the script measures
    # the fast subscribers' idle latency again after the import, with every subscriber attached.
    while True:
        if not summarized and until is not None and token >= until:
            summarize()
            summarized = True
        if not feed.pending():
            readable = select.select([feed.sock, sys.stdin], [], [], 60)[0]
            if sys.stdin in readable:
                command = sys.stdin.readline().split()
                if command[:1] != ["until"]:
                    break  # "stop", or the script ended
                until = int(command[1])
                continue
            if feed.sock not in readable:
                continue
        event = feed.next()
        if event is None:
            continue
        if event["event"] == "save":
            save = event["save"]
            if save["token"] <= token:
                raise Broken(f"slow subscriber: token {save['token']} after {token}")
            coalesced += save["token"] > token + 1
            token = save["token"]
            saves += 1
            objects += sum(change.get("count", 1) for change in save["inserted"] + save["updated"] + save["deleted"])
            time.sleep(delay_ms / 1000)
        elif event["event"] == "resync":
            resyncs += 1
            feed.close()
            feed = Feed(path, registeredOnly=False, idRuns=True, since=event["resyncFrom"])
            feed.next()
            token = event["resyncFrom"]
    if not summarized:
        summarize()


def child_stalled(path, sample_size):
    """Subscribes (unfiltered, with values) and reads nothing until "go TOKEN" arrives on stdin;
    then reads what squasherd kept for it, expects "resync", resubscribes with since = resyncFrom
    and reads up to TOKEN; checks what it saw against the store; prints the result as JSON.
    Then subscribes once more and reads nothing again, until its input ends."""
    import varlink
    feed = Feed(path, registeredOnly=False, includeValues=True)
    first = feed.next()
    print(json.dumps({"event": "subscribed", "token": first["token"]}), flush=True)
    command = sys.stdin.readline().split()
    if command[:1] != ["go"]:
        return
    target = int(command[1])
    seen = {}          # object ID -> highest version seen
    values = {}        # object ID -> values seen with that version (live saves carry them)
    problems = []

    def take(save):
        for change in save["inserted"] + save["updated"]:
            if change["version"] >= seen.get(change["id"], 0):
                seen[change["id"]] = change["version"]
                if change.get("values") is not None:
                    values[change["id"]] = change["values"]
                else:
                    values.pop(change["id"], None)
        for change in save["deleted"]:
            seen[change["id"]] = -1

    state = {"token": first["token"], "before": 0, "resync": None, "replayed": 0, "contiguous": True}

    def read():
        nonlocal feed
        while True:
            event = feed.next()
            if event is None:
                break
            if event["event"] == "save":
                if event["token"] <= state["token"]:
                    problems.append(f"token {event['token']} after {state['token']}")
                state["token"] = event["token"]
                state["before"] += 1
                take(event["save"])
                if state["token"] >= target:
                    break
            elif event["event"] == "resync":
                state["resync"] = event["resyncFrom"]
                break
        resync = state["resync"]
        if resync is None:
            return
        if resync > state["token"]:
            problems.append(f"resyncFrom {resync} is past the last token received ({state['token']}): saves in between would be lost")
        feed.close()
        feed = Feed(path, registeredOnly=False, includeValues=True, since=resync)
        again = feed.next()
        if again["event"] != "subscribed":
            problems.append(f"resubscribe answered {again['event']}")
        state["token"] = resync
        while state["token"] < target:
            event = feed.next()
            if event is None:
                problems.append(f"the resumed feed ended at token {state['token']}, before {target}")
                break
            if event["event"] != "save":
                problems.append(f"the resumed feed sent {event['event']}")
                continue
            if event["token"] != state["token"] + 1:
                state["contiguous"] = False
            if event["token"] <= state["token"]:
                problems.append(f"token {event['token']} after {state['token']}")
            state["token"] = event["token"]
            state["replayed"] += 1
            take(event["save"])

    try:
        read()
    except (socket.timeout, Broken) as error:
        problems.append(f"reading the feed: {error or 'no reply for 120 s'}")
    token, resync = state["token"], state["resync"]
    feed.close()
    # Compare with the store: every bug, and the versions (and values, where the feed carried
    # them) of a sample.
    with varlink.Client(address="unix:" + path) as client, client.open("io.bugsquasher.Store") as store, client.open("io.bugsquasher.Jobs") as jobs:
        status = jobs.Status()
        bugs = [i for i, v in seen.items() if "/Bug/" in i and v > 0]
        if len(bugs) != status["bugs"]:
            problems.append(f"saw {len(bugs)} bugs, the store has {status['bugs']}")
        with_values = [b for b in bugs if b in values]
        sample = set(random.Random(7).sample(bugs, min(sample_size, len(bugs))))
        sample = sorted(sample | set(random.Random(8).sample(with_values, min(200, len(with_values)))))
        rows = {row["id"]: row for row in store.Values(sample)["rows"]}
        compared = 0
        for bug in sample:
            row = rows.get(bug)
            if row is None or row["version"] != seen[bug]:
                problems.append(f"{bug}: saw version {seen[bug]}, the store has {row and row['version']}")
            elif bug in values:
                compared += 1
                if values[bug] != row["values"]:
                    problems.append(f"{bug}: values differ from the store's")
    print(json.dumps({"event": "result", "resyncFrom": resync, "savesBeforeResync": state["before"], "replayed": state["replayed"], "contiguous": state["contiguous"],
                      "token": token, "target": target, "daemonToken": status["token"], "bugsSeen": len(bugs), "storeBugs": status["bugs"],
                      "sampled": len(sample), "valuesCompared": compared, "problems": problems[:10]}), flush=True)
    # Stalled again, as before the import, while the script measures the idle latency once more.
    again = Feed(path, registeredOnly=False, includeValues=True)
    again.next()
    print(json.dumps({"event": "stalled again"}), flush=True)
    sys.stdin.readline()


# MARK: - Sections

class Report:
    def __init__(self):
        self.targets, self.broken = [], []

    def target(self, name, target, measured, ok):
        self.targets.append((name, target, measured, "PASS" if ok else "MISS"))

    def info(self, name, measured):
        self.targets.append((name, "(no target)", measured, "-"))

    def check(self, name, ok, detail):
        self.targets.append((name, "correct", detail, "PASS" if ok else "BROKEN"))
        if not ok:
            self.broken.append(f"{name}: {detail}")


def ratio_text(value, threshold):
    """A ratio with two decimals, or three when two would print the threshold itself (0.497x is a
    miss of >= 0.50x, and "0.50x MISS" would read as a contradiction)."""
    return f"{value:.3f}x" if round(value, 2) == threshold and value != threshold else f"{value:.2f}x"


def table(header, rows, indent="    ", left=False):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: indent + "  ".join(str(c).ljust(w) if i == 0 or left else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    print(line(header))
    print(indent + "  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def run_bench(*arguments):
    out = subprocess.run([f"{BIN}/bugsquasher-bench", *arguments], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise Broken(f"bugsquasher-bench {' '.join(arguments)} exited with status {out.returncode}: {out.stderr.strip()[-500:]}")
    return out.stdout


def section_graph(args, report):
    print(f"\n== 1. object graph: importer contexts vs raw GRDB inserts (bugsquasher-bench), N={args.rows:,}, chunks of 1,000")
    out = run_bench("--rows", str(args.rows), "--chunk", "1000", "--order", "both")
    print("    " + out.rstrip().replace("\n", "\n    "))
    for order in ("sequential", "random"):
        m = re.search(rf"^{order}\s+graph\s+\d+\s+[\d.]+\s+([\d.]+)x", out, re.M)
        if not m:
            raise Broken(f"bugsquasher-bench printed no {order} ratio")
        report.target(f"1. object graph / raw GRDB, {order}", ">= 0.50x", f"{float(m.group(1)):.2f}x", float(m.group(1)) >= 0.5)
    rss = []
    for n in (args.rows, args.big_rows):
        out = run_bench("--rows", str(n), "--chunk", "1000", "--order", "sequential", "--mode", "graph")
        rss.append((n, float(re.search(r"peak RSS: ([\d.]+) MiB", out).group(1))))
    print("\n    peak RSS of the object-graph import alone (one process per size)")
    table(["rows", "VmHWM"], [[f"{n:,}", f"{m:.1f} MiB"] for n, m in rss] + [["ratio", f"{rss[1][1] / rss[0][1]:.2f}x"]])
    report.target(f"1. object-graph peak RSS {args.big_rows:,} / {args.rows:,} rows", "<= 1.20x (flat)", f"{rss[1][1] / rss[0][1]:.2f}x", rss[1][1] / rss[0][1] <= 1.2)


def section_a(args, daemon, files, root, report):
    """Both paths --a-runs times, alternating, each import on a fresh daemon and store (the shared
    daemon's is the first; sections b and c use its bugs); the medians are compared, since a
    single run of either moves by 20 % on this VM."""
    rows = files[args.rows]

    def through(d):
        start = time.perf_counter()
        d.import_file(rows, args.rows)
        return args.rows / (time.perf_counter() - start)

    ours, raws = [], []
    schema = None
    for run in range(args.a_runs):
        if run == 0:
            ours.append(through(daemon))
            bugs = daemon.status()["bugs"]
            if bugs != args.rows:
                report.check("a. record count after the import", False, f"{bugs} bugs, expected {args.rows}")
            with sqlite3.connect(f"file:{daemon.dir}/state/bugs.sqlite?mode=ro", uri=True) as db:
                schema = [sql for (sql,) in db.execute("SELECT sql FROM sqlite_master WHERE tbl_name = 'Bug' AND sql IS NOT NULL ORDER BY type DESC")]
        else:
            extra = Daemon(root, f"import-run-{run + 1}", args.pending_limit)
            try:
                ours.append(through(extra))
            finally:
                extra.stop()
        raws.append(raw_inserts(rows, f"{root}/raw.sqlite", schema))
        os.unlink(f"{root}/raw.sqlite")
    raw, mine = statistics.median(raws), statistics.median(ours)
    runs = lambda values: ", ".join(f"{v:,.0f}" for v in values)
    print(f"\n== a. import of {args.rows:,} bug rows, chunks of 1,000; median of {args.a_runs} runs of each, alternating")
    table(["path", "rows/s (median)", "runs", "ratio"],
          [["raw SQLite prepared inserts (same Bug table)", f"{raw:,.0f}", runs(raws), "1.00x"],
           ["through squasherd (squasherctl import --wait)", f"{mine:,.0f}", runs(ours), ratio_text(mine / raw, 0.5)]])
    report.target("a. squasherd import / raw SQLite inserts", ">= 0.50x", ratio_text(mine / raw, 0.5), mine / raw >= 0.5)


def section_b(args, daemon, report):
    print(f"\n== b. commit -> last subscriber refreshed (ms), {args.rounds} edits per count after {args.warmup} warm-up")
    rows = []
    for n in args.counts:
        ours, pg, _ = paired_latency(daemon, args.pg_socket, n, args.rounds, args.warmup, args.pause, "BENCH-1")
        fan = raw_fanout(n, args.rounds, args.warmup, args.pause)
        rows.append([n, f"{pct(ours, .5):.2f}", f"{pct(ours, .99):.2f}",
                     f"{pct(pg, .5):.2f}" if pg else "-", f"{pct(pg, .99):.2f}" if pg else "-",
                     f"{pct(fan, .5):.2f}", f"{pct(fan, .99):.2f}",
                     f"{pct(ours, .5) / pct(pg, .5):.2f}x" if pg else "-", f"{pct(ours, .99) / pct(pg, .99):.2f}x" if pg else "-"])
        if pg:
            ok = pct(ours, .5) <= pct(pg, .5) and pct(ours, .99) <= pct(pg, .99)
            report.target(f"b. latency, {n} subscriber(s): squasherd / PostgreSQL", "<= 1.00x p50 and p99",
                          f"{pct(ours, .5) / pct(pg, .5):.2f}x / {pct(ours, .99) / pct(pg, .99):.2f}x", ok)
    table(["subscribers", "squasherd p50", "p99", "PostgreSQL p50", "p99", "raw fan-out p50", "p99", "vs PG p50", "vs PG p99"], rows)


def section_c(args, daemon, root, report):
    count = min(args.rows, 100_000)
    held = [f"BENCH-{n}" for n in range(1, 101)]
    filtered = Subscribers(daemon, [held], name="filtered subscriber", mark_key="BENCH-1")
    unfiltered = Subscribers(daemon, [held], unfiltered=True, name="unfiltered subscriber", mark_key="BENCH-1")
    filtered.wait_ready()
    unfiltered.wait_ready()
    daemon.wait_subscribers(2)
    cpu0 = [filtered.cpu_ms()[0], unfiltered.cpu_ms()[0]]
    path = f"{root}/updates.ndjson"
    with open(path, "w") as out:
        for n in range(1, count + 1):
            out.write(json.dumps({"key": f"BENCH-{n}", "title": f"changed {n}", "status": "Reopened", "labels": [], "project": {"key": "BENCH"},
                                  "components": [], "comments": []}) + "\n")
    daemon.import_file(path, count)
    os.unlink(path)
    # A barrier: the feed is ordered, so once both printed this edit they processed the import.
    editor = Editor(daemon, "BENCH-1")
    editor.update("barrier")
    editor.close()
    filtered.wait_mark("barrier", 300)
    unfiltered.wait_mark("barrier", 300)
    cpu = [filtered.cpu_ms()[0] - cpu0[0], unfiltered.cpu_ms()[0] - cpu0[1]]
    for subs in (filtered, unfiltered):
        subs.check_consistent()
    refreshes = [filtered.refreshes[0], unfiltered.refreshes[0]]
    stats = [filtered.close().get(0), unfiltered.close().get(0)]
    if None in stats:
        raise Broken("a squasherctl subscribe printed no stats on SIGTERM")
    print(f"\n== c. one subscriber holding 100 bugs during a {count:,}-record import that updates every bug")
    ratio = lambda a, b: f"{b / a:.0f}x" if a else "-"
    table(["", "filtered by squasherd", "unfiltered (--all)", "unfiltered / filtered"], [
        ["bytes received", f"{stats[0]['bytesReceived']:,}", f"{stats[1]['bytesReceived']:,}", ratio(stats[0]["bytesReceived"], stats[1]["bytesReceived"])],
        ["CPU time (ms; 10 ms ticks)", f"{cpu[0]:,.0f}" if cpu[0] else "< 10", f"{cpu[1]:,.0f}", f"{cpu[1] / max(cpu[0], 10):.0f}x" + ("+" if not cpu[0] else "")],
        ["refresh events", refreshes[0], refreshes[1], ""],
        ["objects loaded / value requests / fetches", f"{len(stats[0]['loaded'])} / {stats[0]['valueRequests']} / {stats[0]['fetches']}",
         f"{len(stats[1]['loaded'])} / {stats[1]['valueRequests']} / {stats[1]['fetches']}", ""],
    ])
    report.check("c. filtered and unfiltered subscribers end with the store's versions", True, "100 held bugs each")
    report.info("c. bytes per subscriber, unfiltered / filtered", ratio(stats[0]["bytesReceived"], stats[1]["bytesReceived"]))


def import_run(args, root, files, count, report, label, fast=0, slow=0, stalled=0):
    """A fresh squasherd and store; seeds 1,000 bugs the import updates (and LATENCY-1); attaches
    the subscribers; measures idle edit latency; imports `count` records while editing LATENCY-1
    every --edit-interval ms; with subscribers, checks they caught up and measures idle edit
    latency again; returns throughput, memory and latency figures."""
    daemon = Daemon(root, label, args.pending_limit)
    result = {"count": count}
    procs = []
    subs = None
    try:
        seed = f"{root}/seed-{count}.ndjson"
        write_seed(seed, count)
        daemon.import_file(seed, len(seed_keys(count)) + 1)
        editor = Editor(daemon)
        if fast:
            keys = seed_keys(count)
            subs = Subscribers(daemon, [[LATENCY_KEY] + keys[j::fast][:10] for j in range(fast)], name="fast subscriber")
        slow_readers = []
        for _ in range(slow):
            p = subprocess.Popen([PYTHON, HERE, "child", "slow", daemon.read_socket, str(args.slow_ms)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            procs.append(p)
            slow_readers.append((p, Lines(p, "slow subscriber")))
        stalled_reader = None
        if stalled:
            p = subprocess.Popen([PYTHON, HERE, "child", "stalled", daemon.read_socket, "1000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            procs.append(p)
            stalled_reader = (p, Lines(p, "stalled subscriber"))
        for _, lines in slow_readers + ([stalled_reader] if stalled_reader else []):
            if json.loads(lines.get(120))["event"] != "subscribed":
                raise Broken("a Varlink subscriber did not subscribe")
        if subs:
            subs.wait_ready()
        daemon.wait_subscribers(fast + slow + stalled)
        if fast:
            idle_rounds = []
            result["idle"] = idle_edits(args, editor, subs, "idle", idle_rounds)
        # The import, with an edit of LATENCY-1 every --edit-interval ms and VmRSS sampled.
        rss, during, during_rounds, ended = [], [], [], threading.Event()

        def subscriber_cpu_ms():
            return sum(subs.cpu_ms() if subs else []) + sum(cpu_ms(p.pid) for p in procs)
        cpu0 = (cpu_ms(daemon.pid), subscriber_cpu_ms())
        start = time.perf_counter()

        def run_import():
            try:
                daemon.import_file(files[count], count)
                result["seconds"] = time.perf_counter() - start
            except Exception as error:  # reported below
                result["error"] = error
            ended.set()

        def sample():
            while not ended.is_set():
                rss.append((time.perf_counter() - start, proc_status(daemon.pid, "VmRSS")))
                ended.wait(0.25)

        importer = threading.Thread(target=run_import, daemon=True)
        importer.start()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        i = 0
        while not ended.is_set():
            tick = time.monotonic()
            during.append(edit_round(editor, subs, f"import-{i}", rounds=during_rounds) if fast else edit_round(editor, None, f"import-{i}"))
            i += 1
            ended.wait(max(0, args.edit_interval / 1000 - (time.monotonic() - tick)))
        importer.join()
        sampler.join()
        result["daemon_cpu"] = (cpu_ms(daemon.pid) - cpu0[0]) / 1000
        result["subscriber_cpu"] = (subscriber_cpu_ms() - cpu0[1]) / 1000
        if "error" in result:
            raise result["error"]
        result["during"], result["rss"] = during, rss
        result["hwm"] = daemon.hwm_kib()
        result["rows_per_s"] = count / result["seconds"]
        if fast:
            edit_round(editor, subs, "final", timeout=args.catch_up_timeout)  # a barrier: the fast ones processed everything
            result["idle_commit"], result["during_commit"] = from_commit(daemon, idle_rounds), from_commit(daemon, during_rounds)
        status = daemon.status()
        expected_bugs = count + 1
        if status["bugs"] != expected_bugs:
            report.check(f"{label}: bugs after the import", False, f"{status['bugs']}, expected {expected_bugs}")
        target = status["token"]
        result["token"] = target
        # Slow subscribers catch up, then report.
        slow_results = []
        for p, _ in slow_readers:
            p.stdin.write(f"until {target}\n")
            p.stdin.flush()
        deadline = time.monotonic() + args.catch_up_timeout
        for p, lines in slow_readers:
            event = json.loads(lines.get(max(1, deadline - time.monotonic())))
            if event["event"] != "summary":
                raise Broken(f"a slow subscriber printed {event} before its summary")
            slow_results.append(event)
        result["slow"] = slow_results
        if stalled_reader:
            p, lines = stalled_reader
            p.stdin.write(f"go {target}\n")
            p.stdin.flush()
            result["stalled"] = json.loads(lines.get(args.catch_up_timeout))
            if json.loads(lines.get(120))["event"] != "stalled again":
                raise Broken("the stalled subscriber did not subscribe again")
        if fast:
            # Their normal once more, after the import: this VM's speed drifts by 20 % or more
            # over minutes, and a phase of it before the import alone could land in a slow or a
            # fast spell (idle p99 from 8.3 to 19.0 ms in runs of one binary). Every subscriber
            # is attached as before: the slow ones following, the stalled one not reading.
            daemon.wait_subscribers(fast + slow + stalled)
            idle_after_rounds = []
            result["idle_after"] = idle_edits(args, editor, subs, "after", idle_after_rounds)
            result["idle_after_commit"] = from_commit(daemon, idle_after_rounds)
        editor.close()
        if subs:
            subs.check_consistent()
            result["fast_refreshes"] = sum(subs.refreshes)
        return result
    finally:
        if subs:
            subs.close()
        for p in procs:
            stop_process(p)
        daemon.stop()


def rss_growth(samples):
    """Peak VmRSS in the second half of the import / in the first half."""
    if len(samples) < 4:
        return float("nan")
    end = samples[-1][0]
    first = max(r for t, r in samples if t <= end / 2)
    second = max(r for t, r in samples if t > end / 2)
    return second / first


def section_de(args, root, files, report):
    small = import_run(args, root, files, args.rows, report, "d-small")
    base = import_run(args, root, files, args.big_rows, report, "d-big")
    print(f"\n== d. peak squasherd RSS (VmHWM) after an import (fresh daemon and store per size; 1,000 seeded bugs; an edit every {args.edit_interval} ms)")
    table(["records imported", "rows/s", "VmHWM", "ratio"], [
        [f"{args.rows:,}", f"{small['rows_per_s']:,.0f}", f"{mib(small['hwm']):.1f} MiB", "1.00x"],
        [f"{args.big_rows:,}", f"{base['rows_per_s']:,.0f}", f"{mib(base['hwm']):.1f} MiB", f"{base['hwm'] / small['hwm']:.2f}x"]])
    report.target(f"d. squasherd VmHWM {args.big_rows:,} / {args.rows:,} records", "<= 1.20x (flat)", f"{base['hwm'] / small['hwm']:.2f}x", base["hwm"] / small["hwm"] <= 1.2)

    fast = args.e_subscribers - args.e_slow - 1
    chunk_ms = base["seconds"] * 1000 / (args.big_rows / 1000)
    if args.slow_ms is None:
        args.slow_ms = max(1, round(2 * chunk_ms))
    loaded = import_run(args, root, files, args.big_rows, report, "e-subscribers", fast=fast, slow=args.e_slow, stalled=1)
    # The baseline once more, after: this VM's speed drifts by 20 % or more over minutes, and the
    # mean of a run before and one after the import with subscribers cancels a steady drift.
    after = import_run(args, root, files, args.big_rows, report, "e-after")
    base_rate = (base["rows_per_s"] + after["rows_per_s"]) / 2
    print(f"\n== e. {args.big_rows:,}-record import with {args.e_subscribers} subscribers ({fast} fast `squasherctl subscribe` holding 11 bugs each, "
          f"{args.e_slow} slow unfiltered readers sleeping {args.slow_ms} ms per message, 1 stalled) vs none"
          f"\n   (without subscribers a chunk of 1,000 commits every {chunk_ms:.0f} ms; the import without subscribers ran before and after"
          f" the one with them, at {base['rows_per_s']:,.0f} and {after['rows_per_s']:,.0f} rows/s, and the ratio is against their mean)")
    ratio = loaded["rows_per_s"] / base_rate
    growth = rss_growth(loaded["rss"])
    table(["", "no subscribers", f"{args.e_subscribers} subscribers", "ratio"], [
        ["import rows/s", f"{base_rate:,.0f}", f"{loaded['rows_per_s']:,.0f}", f"{ratio:.2f}x"],
        ["import seconds", f"{base['seconds']:.1f}", f"{loaded['seconds']:.1f}", ""],
        ["CPU seconds of squasherd during the import", f"{base['daemon_cpu']:.1f}", f"{loaded['daemon_cpu']:.1f}", f"{loaded['daemon_cpu'] / base['daemon_cpu']:.2f}x"],
        ["CPU seconds of the subscriber processes", "-", f"{loaded['subscriber_cpu']:.1f}", ""],
        ["squasherd VmHWM", f"{mib(base['hwm']):.1f} MiB", f"{mib(loaded['hwm']):.1f} MiB", f"{loaded['hwm'] / base['hwm']:.2f}x"],
        ["VmRSS peak, 2nd half / 1st half of the import"] + ["-" if math.isnan(g) else f"{g:.2f}x" for g in (rss_growth(base["rss"]), growth)] + [""],
    ])
    # The subscribers' latency is section b's: from the commit to the refresh. Timed from the
    # edit it adds the edit's wait for the store's one writer, which an import chunk holds for
    # tens of ms: the editor's latency, not the subscribers'. Both are shown. The target is on
    # every fast subscriber's refresh of every edit (about 9,000 per phase); the last of the 89
    # per edit is shown too, but with about 100 edits a phase its p99 is the second-highest
    # edit, which moves by 10 % between runs of one binary (docs/BENCHMARKS.md).
    # Their normal: the idle phases before and after the import, shown apart and pooled (as the
    # throughput's baseline is the imports before and after); the target allows for their spread.
    (before_last, before), (after_last, after_each) = loaded["idle_commit"], loaded["idle_after_commit"]
    idle_last, idle = before_last + after_last, before + after_each
    during_last, during = loaded["during_commit"]
    idle_edit, during_edit = loaded["idle"] + loaded["idle_after"], loaded["during"]
    print(f"\n    fast subscribers: an edit of {LATENCY_KEY} every {args.edit_interval} ms -> each of the {fast} printed it refreshed (ms), "
          f"timed from the save's commit (bs_history.committed_at);\n    {len(before_last)} edits idle before the import and {len(after_last)} after "
          f"(all subscribers attached), {len(during_last)} during it; the last of the {fast} per edit also timed from the edit request")
    table(["", "refreshes", "commit: p50", "p90", "p99", "max", "edit: p50", "p99", "max"], [
        [name, f"{len(values):,}"] + [f"{pct(values, q):.2f}" for q in (.5, .9, .99, 1)]
        + ([f"{pct(edits, q):.2f}" for q in (.5, .99, 1)] if edits else ["", "", ""])
        for name, values, edits in [("idle before the import, each", before, None), ("idle after the import, each", after_each, None),
                                    ("idle, both (their normal), each", idle, None), ("during the import, each", during, None),
                                    (f"idle, the last of {fast} per edit", idle_last, idle_edit),
                                    (f"during, the last of {fast} per edit", during_last, during_edit)]])
    print(f"    ({loaded['fast_refreshes']:,} refresh events in all, with the import's; edit round trips without subscribers during the import: p50 "
          f"{pct(base['during'], .5):.2f} ms, p99 {pct(base['during'], .99):.2f} ms)")
    print(f"\n    slow subscribers (after the import each caught up to token {loaded['token']:,})")
    table(["reader", "saves", "coalesced", "objects", "bytes", "resyncs", "CPU ms"],
          [[i + 1, f"{s['saves']:,}", f"{s['coalesced']:,}", f"{s['objects']:,}", f"{s['bytes']:,}", s["resyncs"], f"{s['cpuMs']:,.0f}"]
           for i, s in enumerate(loaded["slow"])])
    st = loaded["stalled"]
    print("\n    stalled subscriber (read nothing until the import finished)")
    table(["", "result"], [
        ["saves received before the resync event", st["savesBeforeResync"]],
        ["told to resync, resyncFrom", st["resyncFrom"] if st["resyncFrom"] is not None else "NO"],
        ["saves replayed after Subscribe(since: resyncFrom)", f"{st['replayed']:,} (tokens contiguous: {'yes' if st['contiguous'] else 'NO'})"],
        ["final token / daemon token", f"{st['token']:,} / {st['daemonToken']:,}"],
        ["bugs seen / bugs in the store", f"{st['bugsSeen']:,} / {st['storeBugs']:,}"],
        ["sample checked against Store.Values (versions; values where the feed had them)", f"{st['sampled']} ({st['valuesCompared']} with values)"],
        ["problems", "; ".join(st["problems"]) or "none"]])
    report.target(f"e. import with {args.e_subscribers} subscribers / with none", ">= 0.80x", ratio_text(ratio, 0.8), ratio >= 0.8)
    # Within their normal: no higher than the idle p99 measured before or after the import. A
    # p99 is itself a measurement that moves (the two idle phases differed by 5 % and 23 % in the
    # first two runs that measured both), and against the two phases pooled, an import that
    # changed nothing would still miss about every other run: their own spread is the allowance.
    idle_p99, during_p99 = pct(idle, .99), pct(during, .99)
    normal = max(pct(before, .99), pct(after_each, .99))
    report.target("e. fast subscribers' p99 during the import, each refresh from its commit", "<= idle p99, before or after",
                  f"{during_p99:.1f} ms; idle {pct(before, .99):.1f} / {pct(after_each, .99):.1f} ms ({during_p99 / idle_p99:.2f}x both)",
                  during_p99 <= normal)
    within = sum(1 for v in during if v <= idle_p99)
    report.info("e. their refreshes during the import within the idle p99", f"{100 * within / max(1, len(during)):.1f} % ({within:,} of {len(during):,})")
    report.info(f"e. the same p99 for the last of {fast} per edit", f"{pct(during_last, .99) / pct(idle_last, .99):.2f}x "
                f"({pct(during_last, .99):.1f} / {pct(idle_last, .99):.1f} ms)")
    report.info("e. the same timed from the edit (with its wait for the writer)",
                f"{pct(during_edit, .99) / pct(idle_edit, .99):.2f}x ({pct(during_edit, .99):.1f} / {pct(idle_edit, .99):.1f} ms)")
    if not math.isnan(growth):  # the import lasted long enough for four samples
        report.target("e. squasherd VmRSS peak, 2nd half / 1st half of the import", "<= 1.10x (bounded)", f"{growth:.2f}x", growth <= 1.1)
    else:
        report.info("e. squasherd VmRSS peak, 2nd half / 1st half of the import", f"not measured: the import took {loaded['seconds']:.1f} s, under a second of samples")
    report.info("e. squasherd VmHWM with subscribers / without", f"{loaded['hwm'] / base['hwm']:.2f}x ({mib(loaded['hwm']):.0f} / {mib(base['hwm']):.0f} MiB)")
    report.check("e. stalled subscriber told to resync", st["resyncFrom"] is not None, f"resyncFrom {st['resyncFrom']}")
    ok = not st["problems"] and st["contiguous"] and st["token"] == st["daemonToken"] and st["bugsSeen"] == st["storeBugs"]
    report.check("e. stalled subscriber consistent after Subscribe(since)", ok,
                 f"token {st['token']} = daemon's, {st['bugsSeen']:,} bugs, {st['sampled']} sampled" if ok else "; ".join(st["problems"]) or "see above")
    slow_ok = all(s["token"] == loaded["token"] for s in loaded["slow"])
    report.check("e. slow subscribers caught up", slow_ok, f"{len(loaded['slow'])} at token {loaded['token']:,}")
    report.check("e. fast subscribers hold the store's versions", True, f"{fast} subscribers")


def machine():
    def first(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        except Exception:
            return "?"
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    mem = int(open("/proc/meminfo").readline().split()[1]) / 1024 / 1024
    os_name = next((l.split("=", 1)[1].strip().strip('"') for l in open("/etc/os-release") if l.startswith("PRETTY_NAME=")), "?")
    print(f"== machine: {os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, {platform.system()} {platform.release()}, {os_name}")
    print(f"== {first(['swift', '--version'])}; SQLite {first(['sqlite3', '--version']).split()[0]} (Python's sqlite3: {sqlite3.sqlite_version})")
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(os.path.getmtime(f"{BIN}/squasherd")))
    print(f"== binaries: {BIN} (squasherd built {stamp}); load average at start: {open('/proc/loadavg').read().split()[0:3]}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        role, rest = sys.argv[2], sys.argv[3:]
        try:
            {"fanout": lambda: child_fanout(rest[0]), "pg-listener": lambda: child_pg_listener(rest[0]),
             "floor-writer": lambda: child_floor_writer(*rest), "floor-reader": lambda: child_floor_reader(*rest),
             "floor-subscriber": lambda: child_floor_subscriber(rest[0]),
             "slow": lambda: child_slow(rest[0], int(rest[1])), "stalled": lambda: child_stalled(rest[0], int(rest[1]))}[role]()
        except (KeyboardInterrupt, BrokenPipeError):
            pass
        return 0
    # No garbage collection of the script's own while it measures: a full one took 4 ms of CPU
    # inside a measured fan-out, from the subscribers timed. The script makes few cycles.
    gc.disable()
    def terminated(*_):
        raise SystemExit(143)  # runs the finally blocks: daemons, subscribers and files go
    signal.signal(signal.SIGTERM, terminated)
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--big-rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--a-runs", type=int, default=3, help="runs of each path in section a (the medians are compared)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.02, help="seconds between latency rounds")
    parser.add_argument("--counts", default="1,10,100")
    parser.add_argument("--pg-socket", help="directory of a running PostgreSQL's Unix socket (user postgres, trust)")
    parser.add_argument("--e-subscribers", type=int, default=100)
    parser.add_argument("--e-slow", type=int, default=10)
    parser.add_argument("--slow-ms", type=int, help="sleep of a slow subscriber after each message (default: two chunk commits "
                        "of the import without subscribers, i.e. it reads at half that rate)")
    parser.add_argument("--idle-edits", type=int, default=100)
    parser.add_argument("--edit-interval", type=int, default=200, help="ms between edits during section d/e imports")
    parser.add_argument("--pending-limit", type=int, help="squasherd's subscriber_pending_limit (default: a tenth of --big-rows, "
                        "at most 100,000, so that section e's stalled subscriber overflows its mailbox and is told to resync)")
    parser.add_argument("--catch-up-timeout", type=int, default=600)
    parser.add_argument("--skip-graph", action="store_true")
    parser.add_argument("--h-seconds", type=float, default=10, help="seconds of each run of section h (32 writers)")
    parser.add_argument("--postgres-only", action="store_true", help="sections f to i only")
    parser.add_argument("--k-runs", type=int, default=3, help="runs of section k with a backup (and as many without, alternating)")
    parser.add_argument("--backup-only", action="store_true", help="section k only")
    parser.add_argument("--j-runs", type=int, default=3, help="runs of each path in section j (the medians are compared)")
    parser.add_argument("--l-runs", type=int, default=3, help="runs of each path and key order in section l (the medians are compared)")
    parser.add_argument("--j-smoke", action="store_true", help="section j on the export's 1,000-issue sample")
    parser.add_argument("--import-only", action="store_true", help="sections j and l only")
    args = parser.parse_args()
    if args.big_rows < args.rows:
        parser.error(f"--big-rows ({args.big_rows:,}) must be at least --rows ({args.rows:,}): sections 1 and d compare the two")
    if args.pending_limit is None:
        args.pending_limit = min(100_000, max(100, args.big_rows // 10))
    args.counts = [int(x) for x in args.counts.split(",")]
    report = Report()
    machine()
    if args.pg_socket:
        version, settings = pg_prepare(args.pg_socket)
        print(f"== PostgreSQL {version}: " + ", ".join(f"{k}={v or chr(39) * 2}" for k, v in settings.items()) + f", Unix socket in {args.pg_socket}")
    else:
        print("== PostgreSQL: skipped (--skip-postgres)")
    started = time.monotonic()
    root = tempfile.mkdtemp(prefix="bsbench-")
    try:
        only = args.postgres_only or args.backup_only or args.import_only
        if not args.skip_graph and not only:
            section_graph(args, report)
        files = {}

        def generate_rows(sizes):
            for n in sizes:
                if n not in files:
                    files[n] = f"{root}/rows-{n}.ndjson"
                    generate(files[n], n)

        # Not before section j, which does not read them: the page cache would still be writing
        # hundreds of MB of them back while j's first imports run.
        if not args.import_only:
            generate_rows(sorted({args.rows, args.big_rows}))
        if not only:
            daemon = Daemon(root, "shared", args.pending_limit)
            try:
                section_a(args, daemon, files, root, report)
                section_b(args, daemon, report)
                section_c(args, daemon, root, report)
            finally:
                daemon.stop()
            section_de(args, root, files, report)
        if not args.postgres_only and not args.backup_only:
            import bench_import
            bench_import.run(args, root, report)
            generate_rows([args.big_rows])
            bench_import.run_generated(args, root, files, report)
        if not args.postgres_only and not args.import_only:
            import bench_backup
            bench_backup.run(args, root, files, report)
        if args.pg_socket and not args.backup_only and not args.import_only:
            import bench_postgres
            bench_postgres.run(args, root, files, report)
    except Broken as error:
        report.broken.append(str(error))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n== summary ({(time.monotonic() - started) / 60:.1f} min; load average at the end: {open('/proc/loadavg').read().split()[0:3]})")
    table(["target", "wanted", "measured", ""], [list(t) for t in report.targets], left=True)
    if report.broken:
        print("\nBROKEN:")
        for b in report.broken:
            print(f"  - {b}")
        return 1
    scored = [t for t in report.targets if t[3] != "-"]  # not the lines without a target
    missed = sum(t[3] == "MISS" for t in scored)
    print(f"\n{len(scored) - missed} of {len(scored)} targets and checks met; {missed} missed (a miss is reported, not a failure)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
