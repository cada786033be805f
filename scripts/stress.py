#!/usr/bin/env python3
"""Long mixed stress run of squasherd (see scripts/stress.sh and docs/STRESS.md).

One squasherd on a temporary state directory. For --duration seconds, at the same time:

- an importer submits Jira NDJSON exports one after another: generated issues (the same keys
  every round, titles/status/labels changed per round, a few bad lines each) alternating with a
  slice of the real export in ../shared/data (gzip, summaries prefixed per round);
- editors call io.bugsquasher.Import.Update on bugs the running import is about to write (and
  on a small "hot" set), so editor saves race importer chunks on the same rows;
- `squasherctl subscribe --json` processes holding hot bugs join and leave (churn), and measure
  edit -> refresh latency;
- a Python subscriber churns Register/Unregister on its registered-only subscription;
- a follower subscribes to the whole feed (since=0) and reconnects with since = its last token
  after every kill, resubscribing from resyncFrom when told to resync;
- a killer sends kill -9 to squasherd while an import runs (and one SIGTERM, timed) and restarts
  it on the same state directory; the import must resume by itself.

Then it stops the workload, lets the last job finish, checks every invariant against the
daemon (Jobs, Rejects, Values, History) and, after a timed SIGTERM, against the SQLite file, and
prints a report. Exit status 0 only when every invariant passes.
"""
import argparse, collections, gzip, json, math, os, random, shutil, signal, socket, sqlite3, subprocess, sys, tempfile, threading, time, traceback

MASK64 = (1 << 64) - 1


def now_us():
    return time.time_ns() // 1000


# ---------------------------------------------------------------------------------------------
# A small Varlink client (JSON + NUL over a Unix stream socket), with timeouts and buffered reads.

class VarlinkError(Exception):
    def __init__(self, error, parameters):
        super().__init__(f"{error} {json.dumps(parameters)[:300]}")
        self.error = error
        self.parameters = parameters


class Conn:
    def __init__(self, path, timeout=60.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except BaseException:
            self.sock.close()
            raise
        self.buf = bytearray()
        self.scan = 0

    def send(self, method, params, more=False):
        message = {"method": method, "parameters": params}
        if more:
            message["more"] = True
        self.sock.sendall(json.dumps(message).encode() + b"\0")

    def recv(self, idle=None):
        """The next reply's (parameters, continues). `idle` is called on each socket timeout; it
        raises to give up (streams wait longer than one timeout between events)."""
        while True:
            end = self.buf.find(b"\0", self.scan)
            if end >= 0:
                data = bytes(self.buf[:end])
                del self.buf[:end + 1]
                self.scan = 0
                message = json.loads(data)
                if message.get("error"):
                    raise VarlinkError(message["error"], message.get("parameters") or {})
                return message.get("parameters") or {}, bool(message.get("continues"))
            self.scan = len(self.buf)
            try:
                chunk = self.sock.recv(1 << 20)
            except socket.timeout:
                if idle is None:
                    raise
                idle()
                continue
            if not chunk:
                raise ConnectionError("squasherd closed the connection")
            self.buf += chunk

    def call(self, method, **params):
        self.send(method, params)
        parameters, _ = self.recv()
        return parameters

    def stream(self, method, idle=None, **params):
        self.send(method, params, more=True)
        while True:
            parameters, continues = self.recv(idle)
            yield parameters
            if not continues:
                return

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class Stopped(Exception):
    pass


DISCONNECTED = (OSError, ConnectionError, json.JSONDecodeError)


# ---------------------------------------------------------------------------------------------
# The run: directories, binaries, shared state.

class Run:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.dir = tempfile.mkdtemp(prefix="bss-", dir="/tmp")
        self.bin = os.path.join(self.dir, "bin")
        os.makedirs(self.bin)
        # Copies, so that a build replacing the binaries during the run changes nothing.
        for name in ("squasherd", "squasherctl"):
            shutil.copy2(os.path.join(args.bin, name), os.path.join(self.bin, name))
        os.makedirs(os.path.join(self.dir, "logs"))
        os.makedirs(os.path.join(self.dir, "data"))
        self.run_dir = os.path.join(self.dir, "run")
        self.read_sock = os.path.join(self.run_dir, "squasherd.sock")
        self.write_sock = os.path.join(self.run_dir, "squasherd-write.sock")
        self.env = dict(os.environ, SQUASHERD_RUNTIME_DIRECTORY=self.run_dir)
        self.env.pop("NOTIFY_SOCKET", None)
        self.stop = threading.Event()          # the workload stops
        self.abort = threading.Event()         # something fatal happened
        self.errors = []                       # harness errors (thread crashes, fatal conditions)
        self.notes = []
        self.t_start = time.monotonic()
        self.lock = threading.Lock()
        self.subscribers_ref = None

    def elapsed(self):
        return time.monotonic() - self.t_start

    def log(self, message):
        print(f"[{self.elapsed():7.1f}s] {message}", flush=True)

    def error(self, message):
        with self.lock:
            self.errors.append(message)
        self.log("ERROR " + message)

    def thread(self, name, body):
        def wrapped():
            try:
                body()
            except Stopped:
                pass
            except BaseException:
                self.error(f"thread {name} crashed:\n{traceback.format_exc()}")
                self.abort.set()
                self.stop.set()
        t = threading.Thread(target=wrapped, name=name, daemon=True)
        t.start()
        return t

    def wait_up(self, daemon, timeout=120):
        """Blocks until the daemon is up (after a restart); raises Stopped on abort."""
        deadline = time.monotonic() + timeout
        while not daemon.up.wait(0.2):
            if self.abort.is_set():
                raise Stopped()
            if time.monotonic() > deadline:
                raise RuntimeError("squasherd did not come back within %d s" % timeout)


# ---------------------------------------------------------------------------------------------
# squasherd: start (readiness from sd_notify READY=1 on our NOTIFY_SOCKET), kill -9, SIGTERM.

def read_proc_status(pid):
    values = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    values[line.split(":")[0]] = int(line.split()[1]) // 1024  # MiB
    except OSError:
        pass
    return values


class Daemon:
    def __init__(self, run):
        self.run = run
        self.proc = None
        self.up = threading.Event()
        self.lock = threading.RLock()      # held across kill + restart, and by uploads/starts
        self.ready = threading.Event()
        self.lifetimes = []                # one dict per process
        self.events = []                   # (elapsed, kind)
        self.status_line = ""
        self.notify_path = os.path.join(run.dir, "notify.sock")
        self.nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.nsock.bind(self.notify_path)
        self.nsock.settimeout(0.5)
        self.closed = False
        self.stopping_at = None
        threading.Thread(target=self._notify_reader, name="notify", daemon=True).start()

    def _notify_reader(self):
        # Drained continuously: sd_notify must never find a full queue.
        while not self.closed:
            try:
                data = self.nsock.recv(65536).decode(errors="replace")
            except socket.timeout:
                continue
            except OSError:
                return
            for line in data.split("\n"):
                if line == "READY=1":
                    self.ready.set()
                elif line == "STOPPING=1":
                    self.stopping_at = time.monotonic()
                elif line.startswith("STATUS="):
                    self.status_line = line[7:]

    @property
    def lifetime(self):
        return self.lifetimes[-1]

    def start(self):
        with self.lock:
            n = len(self.lifetimes) + 1
            self.ready.clear()
            log = open(os.path.join(self.run.dir, "logs", f"squasherd-{n}.log"), "w")
            env = dict(self.run.env, NOTIFY_SOCKET=self.notify_path)
            t0 = time.monotonic()
            self.proc = subprocess.Popen([os.path.join(self.run.bin, "squasherd"), "--state-directory", os.path.join(self.run.dir, "state"),
                                          "--runtime-directory", self.run.run_dir, "--log-level", "warning",
                                          "--chunk-size", str(self.run.args.chunk)], stderr=log, stdin=subprocess.DEVNULL, env=env)
            log.close()
            deadline = t0 + 60
            while not self.ready.wait(0.05):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"squasherd exited with {self.proc.returncode} at start (logs/squasherd-{n}.log)")
                if time.monotonic() > deadline:
                    raise RuntimeError("squasherd did not report READY=1 within 60 s")
            self.lifetimes.append({"n": n, "pid": self.proc.pid, "start_s": time.monotonic() - t0, "hwm": 0, "rss": 0,
                                   "conflicts": None, "end": None, "exit": None})
            self.up.set()
            return time.monotonic() - t0

    def sample(self, status_conn=None):
        """Peak RSS (VmHWM dies with the process) and the conflicts counter of this lifetime."""
        if not self.lifetimes or self.proc is None or self.proc.poll() is not None:
            return None
        values = read_proc_status(self.proc.pid)
        life = self.lifetime
        life["hwm"] = max(life["hwm"], values.get("VmHWM", 0))
        life["rss"] = values.get("VmRSS", life["rss"])
        status = None
        try:
            conn = status_conn or Conn(self.run.read_sock, timeout=10)
            try:
                status = conn.call("io.bugsquasher.Jobs.Status")
            finally:
                if status_conn is None:
                    conn.close()
            if "conflictsResolved" in status and status["conflictsResolved"] is not None:
                life["conflicts"] = status["conflictsResolved"]
        except DISCONNECTED + (VarlinkError,):
            pass
        return status

    def kill9(self):
        with self.lock:
            self.sample()
            self.up.clear()
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.lifetime.update(end="kill -9", exit=self.proc.returncode)
            self.events.append((self.run.elapsed(), "K"))

    def term(self, limit):
        """SIGTERM; returns (exit status, seconds to exit). Falls back to kill -9 after 3x limit."""
        with self.lock:
            self.sample()
            self.up.clear()
            t0 = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=max(limit * 3, 30))
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                code = "hung (killed)"
            seconds = time.monotonic() - t0
            self.lifetime.update(end="SIGTERM", exit=code, term_s=seconds)
            self.events.append((self.run.elapsed(), "T"))
            return code, seconds

    def close(self):
        self.closed = True
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.nsock.close()


# ---------------------------------------------------------------------------------------------
# Input data: generated Jira issues and a slice of the real export.

STATUSES = ["Open", "In Progress", "Resolved", "Closed", "Reopened"]
PRIORITIES = ["Low", "Medium", "High", "Critical"]


def generated_issue(n, rnd):
    comments = [{"id": f"g{n}c{k}", "body": f"Comment {k} on generated issue {n}." + (f" Edited in round {rnd}." if n % 10 == 0 and k == 0 else ""),
                 "author": {"name": f"gen-user-{(n + k) % 40}", "displayName": f"Generated User {(n + k) % 40}"},
                 "created": "2021-03-04T05:06:07.000+0000", "updated": "2021-03-04T05:06:07.000+0000"} for k in range(n % 3)]
    return {"id": str(500000 + n), "key": f"GEN-{n}", "fields": {
        "summary": f"Generated issue {n}, round {rnd}: crash when rotating the device with the keyboard open",
        "description": f"Steps to reproduce ({rnd}): open the app, rotate the device, watch the log. " * 3,
        "status": {"name": STATUSES[(n + rnd) % len(STATUSES)]}, "priority": {"name": PRIORITIES[n % len(PRIORITIES)]},
        "issuetype": {"name": "Bug"}, "project": {"key": "GEN", "name": "Generated"}, "labels": [f"round-{rnd % 3}", "stress"],
        "components": [{"name": f"gen-component-{n % 7}"}],
        "reporter": {"name": f"gen-user-{n % 40}", "displayName": f"Generated User {n % 40}"},
        "assignee": None if n % 5 == 0 else {"name": f"gen-user-{(n * 7) % 40}"},
        "created": "2020-01-02T03:04:05.000+0000", "updated": f"2021-01-01T00:{rnd % 60:02d}:00.000+0000",
        "comment": {"comments": comments, "total": len(comments)}}}


BAD_LINES = ["{broken json, cut off", '{"id": "1", "fields": {"summary": "an issue without a key"}}', "[1, 2, 3]"]


class Dataset:
    """One input file: what each line is (a key, a reject, blank)."""

    def __init__(self, kind, rnd, path, keys, comment_ids, bad_lines, blank_lines, records=None):
        self.kind, self.rnd, self.path = kind, rnd, path
        self.keys = keys                 # line number (1-based) -> key, for record lines that carry one
        self.comment_ids = comment_ids
        self.bad_lines = bad_lines       # lines that must be rejected (None: not known in advance)
        self.blank_lines = blank_lines
        self.records = records if records is not None else len(keys) + len(bad_lines)
        self.line_keys = [None] * (max(list(keys) + list(bad_lines or []) + list(blank_lines) + [0]) + 1)
        for line, key in keys.items():
            self.line_keys[line] = key


def write_generated(run, rnd, count):
    rng = random.Random(run.args.seed * 1000 + rnd)
    order = list(range(1, count + 1))
    rng.shuffle(order)
    lines = [json.dumps(generated_issue(n, rnd), separators=(",", ":")) for n in order]
    # Never on line 1: squasherd detects the layout from the first line (a line-1 array would make
    # the whole file a JSON array document; see docs/STRESS.md).
    specials = [(rng.randrange(1, len(lines) + 1), bad) for bad in BAD_LINES] + [(rng.randrange(1, len(lines)), "")]
    for position, text in sorted(specials, key=lambda s: -s[0]):
        lines.insert(position, text)
    keys, bad, blank = {}, set(), set()
    for number, text in enumerate(lines, 1):
        if text == "":
            blank.add(number)
        elif text in BAD_LINES:
            bad.add(number)
        else:
            keys[number] = json.loads(text)["key"]
    path = os.path.join(run.dir, "data", f"generated-{rnd}.ndjson")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    comment_ids = {f"g{n}c{k}" for n in range(1, count + 1) for k in range(n % 3)}
    return Dataset("generated", rnd, path, keys, comment_ids, bad, blank)


class RealData:
    def __init__(self, run):
        self.lines = []
        self.source = None
        count = run.args.real_records
        base = run.args.data
        big, sample = os.path.join(base, "titanium-jira.ndjson.gz"), os.path.join(base, "titanium-jira-sample.ndjson")
        if count <= 0:
            return
        if count <= 1000 and os.path.exists(sample):
            opener, self.source = (lambda: open(sample, "rb")), sample
        elif os.path.exists(big):
            opener, self.source = (lambda: gzip.open(big, "rb")), big
        elif os.path.exists(sample):
            opener, self.source = (lambda: open(sample, "rb")), sample
        else:
            return
        with opener() as f:
            for raw in f:
                if len(self.lines) >= count:
                    break
                self.lines.append(raw.decode("utf-8").rstrip("\n"))
        self.keys, self.comment_ids = {}, set()
        for number, text in enumerate(self.lines, 1):
            try:
                issue = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(issue, dict) and issue.get("key"):
                self.keys[number] = issue["key"]
                for comment in ((issue.get("fields") or {}).get("comment") or {}).get("comments") or []:
                    if comment and comment.get("id"):
                        self.comment_ids.add(comment["id"])

    def write(self, run, rnd):
        path = os.path.join(run.dir, "data", f"real-{rnd}.ndjson.gz")
        prefix = f'"summary":"[stress round {rnd}] '
        with gzip.open(path, "wt", compresslevel=1) as f:
            for text in self.lines:
                f.write(text.replace('"summary":"', prefix) + "\n")
        # Rejects are not known in advance for real data: checked as "rejected or stored".
        return Dataset("real", rnd, path, dict(self.keys), set(self.comment_ids), None, set(),
                       records=sum(1 for text in self.lines if text.strip()))


# ---------------------------------------------------------------------------------------------
# Importer: submits one job after the other, waits (Jobs.Watch) until each is final.

class Importer:
    def __init__(self, run, daemon, real):
        self.run, self.daemon, self.real = run, daemon, real
        self.jobs = []              # dicts: id, dataset, final job
        self.current = None         # the job being imported: (id, dataset)
        self.cond = threading.Condition()

    def submit(self, dataset):
        run = self.run
        with self.daemon.lock:
            run.wait_up(self.daemon)
            result = subprocess.run([os.path.join(run.bin, "squasherctl"), "import", dataset.path, "--format", "jira-json",
                                     "--name", f"{dataset.kind}-{dataset.rnd}"], env=run.env, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"squasherctl import {dataset.path} failed ({result.returncode}): {result.stderr.strip()}")
        job = result.stdout.strip().splitlines()[-1]
        entry = {"id": job, "dataset": dataset, "final": None, "submitted": run.elapsed()}
        with self.cond:
            self.jobs.append(entry)
            self.current = entry
        return entry

    def wait_final(self, entry, timeout):
        run = self.run
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {entry['id']} not final after {timeout:.0f} s")
            run.wait_up(self.daemon)
            try:
                conn = Conn(run.read_sock, timeout=2)
            except DISCONNECTED:
                continue

            def idle():
                if run.abort.is_set() or time.monotonic() > deadline:
                    raise Stopped()
            try:
                for reply in conn.stream("io.bugsquasher.Jobs.Watch", idle=idle, job=entry["id"]):
                    job = reply["job"]
                    entry["last"] = job
                    if job["state"] in ("finished", "failed", "aborted"):
                        entry["final"] = job
                        return job
            except DISCONNECTED:
                continue
            except Stopped:
                if run.abort.is_set():
                    raise
                continue
            finally:
                conn.close()

    def import_one(self, dataset):
        entry = self.submit(dataset)
        timeout = max(180, dataset.records / 50)
        job = self.wait_final(entry, timeout)
        if job["state"] != "finished":
            self.run.error(f"job {entry['id']} ({dataset.kind} round {dataset.rnd}) ended {job['state']}: {job.get('error')}")
        if not self.run.args.keep:
            os.unlink(dataset.path)
        return entry

    def loop(self):
        rnd = 1
        kinds = ["generated", "real"] if self.real.lines else ["generated"]
        while not self.run.stop.is_set():
            kind = kinds[rnd % len(kinds)]
            dataset = write_generated(self.run, rnd, self.run.args.records) if kind == "generated" else self.real.write(self.run, rnd)
            self.import_one(dataset)
            rnd += 1
        with self.cond:
            self.current = None


# ---------------------------------------------------------------------------------------------
# Editors: Update(priority = marker) on bugs the running import is about to write, and on hot bugs.

class Editors:
    def __init__(self, run, daemon, importer, hot):
        self.run, self.daemon, self.importer, self.hot = run, daemon, importer, hot   # hot: key -> id
        self.edits = []
        self.ids = dict(hot)
        self.lock = threading.Lock()
        self.seq = 0

    def resolve(self, conn, key):
        with self.lock:
            if key in self.ids:
                return self.ids[key]
        ids = conn.call("io.bugsquasher.Store.Fetch", entity="Bug", predicate=f'key == "{key}"', limit=1, result="ids").get("ids") or []
        if ids:
            with self.lock:
                self.ids[key] = ids[0]
            return ids[0]
        return None

    def racing_key(self, rng, status_conn):
        """A key in the chunk the importer is writing now (or the next one)."""
        current = self.importer.current
        if current is None:
            return None
        try:
            status = status_conn.call("io.bugsquasher.Jobs.Status")
        except VarlinkError:
            return None
        job = status.get("activeJob")
        if not job or job["id"] != current["id"]:
            return None
        dataset = current["dataset"]
        read = job["recordsRead"]
        # Lines read so far are about recordsRead + blank lines before; the window covers the
        # chunk in flight and the one being decoded.
        lo = read + 1
        hi = min(read + 2 * self.run.args.chunk, len(dataset.line_keys) - 1)
        if hi < lo:
            return None
        for _ in range(8):
            key = dataset.line_keys[rng.randint(lo, hi)]
            if key:
                return key
        return None

    def editor(self, number):
        run = self.run
        rng = random.Random(run.args.seed * 7919 + number)
        hot_keys = sorted(self.hot)
        write = read = None
        while not run.stop.is_set():
            edit = None
            try:
                if write is None:
                    run.wait_up(self.daemon)
                    write, read = Conn(run.write_sock, timeout=30), Conn(run.read_sock, timeout=30)
                hot = rng.random() < 0.5
                key = rng.choice(hot_keys) if hot else self.racing_key(rng, read)
                if key is None:
                    key, hot = rng.choice(hot_keys), True
                bug = self.resolve(read, key)
                if bug is None:
                    continue
                with self.lock:
                    self.seq += 1
                    value = f"marker-{number}-{self.seq}"
                    edit = {"editor": number, "key": key, "id": bug, "value": value, "hot": hot, "t0": now_us(), "state": "sent"}
                    self.edits.append(edit)
                try:
                    reply = write.call("io.bugsquasher.Import.Update", id=bug, values={"priority": value})
                    edit.update(state="acked", t1=now_us(), version=reply["version"], token=reply["token"])
                except VarlinkError as e:
                    edit.update(state="conflict" if e.error == "io.bugsquasher.Import.Conflict" else "error", error=str(e), t1=now_us())
                    run.log(f"editor {number}: Update {key}: {e}")
            except VarlinkError as e:
                run.log(f"editor {number}: {e}")
            except DISCONNECTED:
                if edit is not None and edit["state"] == "sent":
                    edit["state"] = "unacked"      # cut off by a kill: outcome unknown, not checked
                if write is not None:
                    write.close()
                    read.close()
                write = read = None
                continue
            time.sleep(rng.uniform(0.5, 1.5) / run.args.edit_rate)   # pacing, not synchronisation
        if write is not None:
            write.close()
            read.close()


# ---------------------------------------------------------------------------------------------
# `squasherctl subscribe --json` processes: join/leave churn, refresh latency.

class SubscriberProcess:
    def __init__(self, run, keys, number):
        self.run, self.keys, self.number = run, keys, number
        self.proc = subprocess.Popen([os.path.join(run.bin, "squasherctl"), "subscribe", "--json"] + keys, env=run.env,
                                     stdout=subprocess.PIPE, stderr=open(os.path.join(run.dir, "logs", f"subscriber-{number}.log"), "w"), text=True)
        self.ready_at = None            # µs
        self.ready_versions = {}
        self.ids = {}
        self.events = collections.defaultdict(list)   # key -> [(version, at µs)]
        self.stop_requested = False
        self.stopped_at = None
        self.exit = None
        self.stats = None
        self.ready = threading.Event()
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self.read, name=f"subscriber-{number}", daemon=True)
        self.reader.start()

    def read(self):
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = event.get("event")
            with self.cond:
                if kind == "ready":
                    for bug in event.get("bugs") or []:
                        self.ready_versions[bug["key"]] = bug["version"]
                        self.ids[bug["key"]] = bug["id"]
                    self.ready_at = event["at"]
                    self.ready.set()
                elif kind in ("refresh", "catch-up"):
                    for bug in event.get("bugs") or []:
                        self.events[bug["key"]].append((bug["version"], event["at"], kind))
                elif kind == "stats":
                    self.stats = event
                self.cond.notify_all()
        self.exit = self.proc.wait()
        if self.stopped_at is None:
            self.stopped_at = now_us()
        self.ready.set()

    def latest(self, key):
        with self.cond:
            versions = [v for v, _, _ in self.events.get(key, [])]
            return max(versions + [self.ready_versions.get(key, 0)])

    def stop(self):
        self.stop_requested = True
        if self.proc.poll() is None:
            self.stopped_at = now_us()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(timeout=10)


class Subscribers:
    def __init__(self, run, daemon, hot_keys):
        self.run, self.daemon, self.hot_keys = run, daemon, hot_keys
        self.all = []
        self.live = []
        self.count = 0
        self.rng = random.Random(run.args.seed * 31)

    def start_one(self):
        keys = self.rng.sample(self.hot_keys, min(len(self.hot_keys), self.rng.randint(2, 6)))
        with self.daemon.lock:
            self.run.wait_up(self.daemon)
            self.count += 1
            sub = SubscriberProcess(self.run, keys, self.count)
            if not sub.ready.wait(60) or sub.ready_at is None:
                self.run.error(f"subscriber {sub.number} did not get ready (exit {sub.proc.poll()})")
        self.all.append(sub)
        self.live.append(sub)

    def loop(self):
        run = self.run
        for _ in range(run.args.subscribers):
            self.start_one()
        while not run.stop.wait(run.args.churn_every * self.rng.uniform(0.5, 1.5)):
            if self.live:
                sub = self.live.pop(self.rng.randrange(len(self.live)))
                sub.stop()
            self.start_one()

    def stop_all(self):
        for sub in self.live:
            sub.stop()
        self.live = []


# ---------------------------------------------------------------------------------------------
# Register/Unregister churn on a registered-only subscription.

class ChurnClient:
    def __init__(self, run, daemon, hot_ids):
        self.run, self.daemon = run, daemon
        self.hot_ids = sorted(hot_ids)
        self.lock = threading.Lock()
        self.intended = set()
        self.sub_id = None
        self.last = None
        self.connections = []       # dicts: t_resub (token after subscribed), register (set)
        self.received = []          # (connection index, event token, id, version)
        self.ops = []               # dicts: kind, ids, tb, ta
        self.failed = []            # dicts: ids, tb, until (t_resub of the next connection)
        self.resyncs = 0
        self.status = None          # the control thread's connections
        self.control = None
        # The token up to which the stream read on after the workload stopped: a save after it
        # (the last import goes on) cannot be asked to reach a stream that has ended.
        self.closed_at = None

    def token(self):
        """The current token, on a connection of the stream thread's own."""
        conn = Conn(self.run.read_sock, timeout=10)
        try:
            return conn.call("io.bugsquasher.Jobs.Status")["token"]
        finally:
            conn.close()

    def stream_loop(self):
        run = self.run
        while not run.stop.is_set():
            run.wait_up(self.daemon)
            with self.lock:
                register = sorted(self.intended)
            try:
                conn = Conn(run.read_sock, timeout=1)
            except DISCONNECTED:
                continue

            drain = {}

            def idle():
                # After the workload stops, read on for up to 3 s, until the saves committed
                # before the stop have come, so that none of them is missed for the stop.
                if not run.stop.is_set():
                    return
                if "until" not in drain:
                    try:
                        drain["until"] = self.token()
                    except DISCONNECTED + (VarlinkError,):
                        drain["until"] = self.last or 0
                    drain["deadline"] = time.monotonic() + 3
                if time.monotonic() >= drain["deadline"]:
                    self.closed_at = drain["until"]
                    raise Stopped()
            params = {"registeredOnly": True, "register": register}
            if self.last is not None:
                params["since"] = self.last
            index = None
            try:
                for reply in conn.stream("io.bugsquasher.Changes.Subscribe", idle=idle, **params):
                    event = reply["event"]
                    if event == "subscribed":
                        t_resub = self.token()
                        with self.lock:
                            index = len(self.connections)
                            self.connections.append({"t_resub": t_resub, "register": set(register)})
                            self.sub_id = reply["subscription"]
                            if self.last is None:
                                self.last = reply["token"]
                            for failure in self.failed:
                                if failure["until"] is None:
                                    failure["until"] = t_resub
                    elif event == "save":
                        save = reply["save"]
                        with self.lock:
                            for change in save["updated"] + save["deleted"]:
                                self.received.append((index, save["token"], change["id"], change["version"]))
                            self.last = save["token"]
                    elif event == "resync":
                        self.resyncs += 1
                        self.last = max(self.last or 0, reply.get("resyncFrom") or reply["token"])
            except Stopped:
                return
            except DISCONNECTED + (VarlinkError,):
                pass
            finally:
                with self.lock:
                    self.sub_id = None
                conn.close()
        # Stopped while disconnected: only what was received counts.
        if self.closed_at is None:
            self.closed_at = self.last or 0

    def control_loop(self):
        run = self.run
        rng = random.Random(run.args.seed * 17)
        while not run.stop.wait(rng.uniform(0.1, 0.6)):
            with self.lock:
                if self.sub_id is None:
                    continue
                registered = sorted(self.intended)
                unregistered = [i for i in self.hot_ids if i not in self.intended]
                if unregistered and (not registered or rng.random() < 0.55):
                    kind, ids = "Register", rng.sample(unregistered, min(len(unregistered), rng.randint(1, 4)))
                else:
                    kind, ids = "Unregister", rng.sample(registered, min(len(registered), rng.randint(1, 4)))
                tb = 0
                try:
                    if self.status is None:
                        self.status = Conn(run.read_sock, timeout=10)
                    if self.control is None:
                        self.control = Conn(run.read_sock, timeout=10)
                    tb = self.status.call("io.bugsquasher.Jobs.Status")["token"]
                    self.control.call(f"io.bugsquasher.Changes.{kind}", subscription=self.sub_id, ids=ids)
                    ta = self.status.call("io.bugsquasher.Jobs.Status")["token"]
                except DISCONNECTED + (VarlinkError,):
                    # Its effect is unknown until the next Subscribe registers the intended set.
                    self.failed.append({"ids": set(ids), "tb": tb, "until": None})
                    self.drop_connections()
                    continue
                if kind == "Register":
                    self.intended.update(ids)
                else:
                    self.intended.difference_update(ids)
                self.ops.append({"kind": kind, "ids": ids, "tb": tb, "ta": ta})

    def drop_connections(self):
        for attribute in ("control", "status"):
            conn = getattr(self, attribute)
            if conn is not None:
                conn.close()
                setattr(self, attribute, None)


# ---------------------------------------------------------------------------------------------
# The follower: the whole feed from since=0, reconnecting with since = last token.

def change_digest(save):
    """Count and order-independent 64-bit digest of a (possibly coalesced) save's changes."""
    total, count = 0, 0
    for change in save["inserted"] + save["updated"]:
        total = (total + hash((change["id"], change["version"]))) & MASK64
        count += 1
    for change in save["deleted"]:
        total = (total + hash((change["id"], "D"))) & MASK64
        count += 1
    return count, total


class Follower:
    def __init__(self, run, daemon):
        self.run, self.daemon = run, daemon
        self.last = 0
        self.events = []            # (prev token, token, count, digest)
        self.reconnects = 0
        self.resyncs = []
        self.duplicates = []
        self.cond = threading.Condition()

    def loop(self):
        run = self.run
        first = True
        while not self.closing:
            run.wait_up(self.daemon)
            try:
                conn = Conn(run.read_sock, timeout=1)
            except DISCONNECTED:
                continue
            if not first:
                self.reconnects += 1
            first = False

            def idle():
                if self.closing:
                    raise Stopped()
            try:
                for reply in conn.stream("io.bugsquasher.Changes.Subscribe", idle=idle, since=self.last, registeredOnly=False):
                    event = reply["event"]
                    if event == "save":
                        save = reply["save"]
                        token = save["token"]
                        count, digest = change_digest(save)
                        with self.cond:
                            if token <= self.last:
                                self.duplicates.append(token)
                            else:
                                self.events.append((self.last, token, count, digest))
                                self.last = token
                            self.cond.notify_all()
                    elif event == "resync":
                        frm = reply.get("resyncFrom")
                        self.resyncs.append((self.last, frm))
                        # Resume after what was received; a newer resyncFrom would skip saves.
                        if frm is not None and frm > self.last:
                            self.last = frm
            except Stopped:
                return
            except DISCONNECTED + (VarlinkError,):
                pass
            finally:
                conn.close()

    closing = False

    def wait_for(self, token, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.last < token:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cond.wait(remaining)
        return True


# ---------------------------------------------------------------------------------------------
# Killer: kill -9 while an import runs (and one SIGTERM), restart, check the job resumes alone.

class Killer:
    def __init__(self, run, daemon, importer):
        self.run, self.daemon, self.importer = run, daemon, importer
        self.records = []          # per interruption: kind, job, read_before, resumed_s, restart_s, ...
        args = run.args
        rng = random.Random(args.seed * 101)
        slots, t = [], 0.0
        while True:
            t += args.kill_every * rng.uniform(0.7, 1.3)
            if t > args.duration - 1:
                break
            slots.append([t, "kill"])
        if len(slots) < 2:
            slots = [[args.duration / 3, "kill"], [2 * args.duration / 3, "kill"]]
        # The slot nearest the middle is a SIGTERM restart.
        middle = min(range(len(slots)), key=lambda i: abs(slots[i][0] - args.duration / 2))
        if middle == 0 and len(slots) > 1:
            middle = 1
        slots[middle][1] = "term"
        self.slots = slots

    def loop(self, t_main):
        run = self.run
        conn = None
        for at, kind in self.slots:
            if run.stop.wait(max(0, t_main + at - time.monotonic())):
                return
            # Wait for a running import that has committed something, then interrupt it.
            deadline = time.monotonic() + 60
            job = None
            while time.monotonic() < deadline and not run.stop.is_set():
                try:
                    if conn is None:
                        conn = Conn(run.read_sock, timeout=10)
                    active = conn.call("io.bugsquasher.Jobs.Status").get("activeJob")
                except DISCONNECTED + (VarlinkError,):
                    if conn:
                        conn.close()
                    conn = None
                    time.sleep(0.05)
                    continue
                if active and active["state"] == "running" and active["recordsRead"] > 0 and active["bytesDone"] < active["bytesTotal"]:
                    job = active
                    break
                time.sleep(0.05)   # polling Status: no event says "an import is mid-way"
            if run.stop.is_set():
                return
            time.sleep(random.Random(at).uniform(0, 0.2))
            record = {"kind": kind, "at": run.elapsed(), "job": job["id"] if job else None, "read_before": job["recordsRead"] if job else None}
            if conn:
                conn.close()
                conn = None
            # The lock is held from the kill to the restart: a thread that takes it in between
            # to wait for the daemon (an upload, a subscriber start) would block the restart.
            with self.daemon.lock:
                if kind == "kill":
                    self.daemon.kill9()
                else:
                    code, seconds = self.daemon.term(run.args.term_limit)
                    record.update(exit=code, term_s=seconds)
                try:
                    record["restart_s"] = self.daemon.start()
                except Exception as e:
                    record["restart_error"] = str(e)
                    self.records.append(record)
                    run.error(f"squasherd did not restart after {kind}: {e}")
                    run.abort.set()
                    run.stop.set()
                    return
            run.log(f"{'kill -9' if kind == 'kill' else 'SIGTERM'} during job {record['job']} at {record['read_before']} records read"
                    + (f"; exit {record['exit']} in {record['term_s']:.2f} s" if kind == "term" else "") + f"; restarted in {record['restart_s']:.2f} s")
            if job:
                record.update(self.await_resume(job["id"], job["recordsRead"]))
            self.records.append(record)

    def await_resume(self, job, before):
        """The job moves on by itself: no call but reads (Jobs.Watch)."""
        run = self.run
        t0 = time.monotonic()
        deadline = t0 + 120
        while time.monotonic() < deadline:
            try:
                conn = Conn(run.read_sock, timeout=2)
            except DISCONNECTED:
                time.sleep(0.1)
                continue

            def idle():
                if time.monotonic() > deadline:
                    raise Stopped()
            try:
                for reply in conn.stream("io.bugsquasher.Jobs.Watch", idle=idle, job=job):
                    state = reply["job"]
                    if state["state"] != "running" and state["state"] != "queued":
                        return {"resumed_s": time.monotonic() - t0, "resumed_state": state["state"]}
                    if state["recordsRead"] > before:
                        return {"resumed_s": time.monotonic() - t0, "resumed_state": "progressing"}
            except Stopped:
                break
            except DISCONNECTED + (VarlinkError,):
                pass
            finally:
                conn.close()
        return {"resumed_s": None, "resumed_state": "stuck"}


# ---------------------------------------------------------------------------------------------
# Sampler: throughput over time, RSS, conflicts.

class Sampler:
    def __init__(self, run, daemon):
        self.run, self.daemon = run, daemon
        self.samples = []           # (elapsed, records read over all jobs, token, rss, hwm)

    def take(self, conn):
        jobs = conn.call("io.bugsquasher.Jobs.List", limit=1000)["jobs"]
        status = self.daemon.sample(conn)
        life = self.daemon.lifetime
        try:
            wal = os.path.getsize(os.path.join(self.run.dir, "state", "bugs.sqlite-wal")) // (1 << 20)
        except OSError:
            wal = 0
        self.samples.append((self.run.elapsed(), sum(j["recordsRead"] for j in jobs), status["token"] if status else None, life["rss"], wal))

    def loop(self):
        run = self.run
        conn = None
        while not run.stop.is_set():
            try:
                if self.daemon.up.is_set():
                    if conn is None:
                        conn = Conn(run.read_sock, timeout=10)
                    self.take(conn)
            except DISCONNECTED + (VarlinkError,):
                if conn:
                    conn.close()
                conn = None
            run.stop.wait(run.args.sample_every)
        if conn:
            conn.close()


# ---------------------------------------------------------------------------------------------
# Checks.

def pct(values, q):
    values = sorted(values)
    if not values:
        return None
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def rejects_of(conn, job):
    """Every reject of a job, page by page (squasherd answers 10,000 at most per call)."""
    rejects = []
    while True:
        reply = conn.call("io.bugsquasher.Jobs.Rejects", job=job, limit=10000, offset=len(rejects))
        rejects += reply["rejects"]
        if not reply.get("more") or not reply["rejects"]:
            return rejects


def fetch_history(conn, on_save):
    after, pages = 0, 0
    while True:
        reply = conn.call("io.bugsquasher.Changes.History", after=after, limit=100)
        saves = reply["saves"]
        if not saves:
            return after
        for save in saves:
            on_save(save)
            after = save["token"]
        pages += 1


class HistoryIndex:
    """One pass over the history: follower comparison, per-object changed keys, versions."""

    def __init__(self, follower_events, edited_ids, hot_ids):
        self.events = follower_events
        self.pos = 0
        self.acc = {}
        self.mismatches = []
        self.tokens = []
        self.priority_changes = collections.defaultdict(list)  # id -> tokens whose save changed priority
        self.edited_ids = edited_ids
        self.hot_ids = hot_ids
        self.version_token = {}    # (hot id, version) -> token
        self.hot_updates = collections.defaultdict(list)  # hot id -> [(token, version)]
        self.changes = 0

    def add(self, save):
        token = save["token"]
        self.tokens.append(token)
        for change in save["updated"]:
            i = change["id"]
            if i in self.edited_ids and "priority" in (change.get("keys") or []):
                self.priority_changes[i].append(token)
            if i in self.hot_ids:
                self.version_token[(i, change["version"])] = token
                self.hot_updates[i].append((token, change["version"]))
        for change in save["inserted"]:
            if change["id"] in self.hot_ids:
                self.version_token[(change["id"], change["version"])] = token
        self.changes += len(save["inserted"]) + len(save["updated"]) + len(save["deleted"])
        # Coalesce like squasherd does, up to the follower's next event token.
        acc = self.acc
        for change in save["inserted"]:
            acc[change["id"]] = ("i", change["version"])
        for change in save["updated"]:
            kind = acc.get(change["id"], ("u",))[0]
            acc[change["id"]] = ("i" if kind == "i" else "u", change["version"])
        for change in save["deleted"]:
            if acc.get(change["id"], ("u",))[0] == "i":
                del acc[change["id"]]
            else:
                acc[change["id"]] = ("d", change["version"])
        if self.pos >= len(self.events):
            if len(self.mismatches) < 10:
                self.mismatches.append(f"token {token}: committed, never received by the follower")
            self.acc = {}
            return
        prev, etoken, count, digest = self.events[self.pos]
        if etoken < token:
            self.mismatches.append(f"follower event token {etoken} is not a committed save")
            self.pos += 1
        if etoken == token:
            total = 0
            for i, (kind, version) in acc.items():
                total = (total + hash((i, "D" if kind == "d" else version))) & MASK64
            if len(acc) != count or total != digest:
                if len(self.mismatches) < 10:
                    self.mismatches.append(f"tokens ({prev}, {token}]: received {count} changes, history has {len(acc)}"
                                           + (" (same count, other objects or versions)" if len(acc) == count else ""))
            self.acc = {}
            self.pos += 1


class Report:
    def __init__(self):
        self.figures = []
        self.results = []

    def figure(self, name, value):
        self.figures.append((name, value))

    def check(self, name, ok, detail):
        self.results.append((name, bool(ok), detail))


def check_arguments(parser, args):
    """Refuses, with the usage and exit status 2, sizes and periods the run cannot work with,
    before anything starts (a zero kill period would never stop, a negative count is no run)."""
    def need(name, value, low, high=None):
        if not (math.isfinite(value) and low <= value and (high is None or value <= high)):
            def show(number):
                return f"{int(number):,}" if math.isfinite(number) and float(number).is_integer() else f"{number:g}"
            bound = f"from {show(low)} to {show(high)}" if high is not None else f"at least {show(low)}"
            parser.error(f"{name} must be {bound}, not {show(value)}")
    # Shorter, the run can end before a kill -9 and a SIGTERM land mid-import, and their
    # invariants fail for want of them.
    need("--duration", args.duration, 10, 86_400)
    need("--records", args.records, 1_000, 10_000_000)
    need("--real-records", args.real_records, 0, 10_000_000)
    need("--chunk", args.chunk, 1, 100_000)
    need("--subscribers", args.subscribers, 0, 200)
    # Without edits, the no-lost-update and refresh invariants would have nothing to check.
    need("--editors", args.editors, 1, 64)
    need("--edit-rate", args.edit_rate, 0.1, 1_000)
    need("--hot", args.hot, 1, 100_000)
    need("--churn-every", args.churn_every, 0.1)
    need("--kill-every", args.kill_every, 1)
    need("--term-limit", args.term_limit, 0.1)
    need("--max-rss-mb", args.max_rss_mb, 1)
    need("--sample-every", args.sample_every, 0.1)
    if args.records < 4 * args.chunk:
        # One or two chunks end before a kill -9 can land mid-import.
        parser.error(f"--records ({args.records:,}) must be at least 4 x --chunk ({args.chunk:,}), so that a kill -9 can land mid-import")


def main():
    parser = argparse.ArgumentParser(prog="scripts/stress.sh", description=__doc__.split("\n")[0])
    parser.add_argument("--bin", default=os.environ.get("BIN", ".build/release"), help="directory with squasherd and squasherctl (default: $BIN or .build/release)")
    parser.add_argument("--data", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")), help="directory of the real Jira export (default: ../shared/data; real imports are skipped, with a message, when it is absent)")
    parser.add_argument("--duration", type=float, default=300, help="seconds of mixed workload before the run stops and checks, at least 10, so that a kill -9 and a SIGTERM land mid-import (default: 300)")
    parser.add_argument("--records", type=int, default=20000, help="records per generated import, at least 1,000 and 4 x --chunk (default: 20000)")
    parser.add_argument("--real-records", type=int, default=5000, help="issues of the real export per real import (0: none)")
    parser.add_argument("--chunk", type=int, default=500, help="records per import chunk (one transaction each)")
    parser.add_argument("--subscribers", type=int, default=8, help="squasherctl subscribe processes at a time (they join and leave)")
    parser.add_argument("--editors", type=int, default=3, help="clients editing hot bugs through Import.Update while imports run, at least 1 (default: 3)")
    parser.add_argument("--edit-rate", type=float, default=10, help="edits per second per editor (about)")
    parser.add_argument("--hot", type=int, default=20, help="hot bugs: edited often, held by subscribers")
    parser.add_argument("--churn-every", type=float, default=3, help="seconds, about, between a subscriber leaving and another joining (with Register/Unregister churn)")
    parser.add_argument("--kill-every", type=float, default=30, help="seconds, about, between kills of squasherd (kill -9; one of them SIGTERM)")
    parser.add_argument("--term-limit", type=float, default=10, help="seconds SIGTERM may take")
    parser.add_argument("--max-rss-mb", type=int, default=512, help="the daemon-memory invariant: peak VmHWM of any daemon lifetime, MiB")
    parser.add_argument("--sample-every", type=float, default=5, help="seconds between samples of throughput and memory in the report")
    parser.add_argument("--seed", type=int, default=1, help="seed of every random choice, to repeat a run")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (store, logs) even when every invariant passes")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and short timings, for the test suite (flags given with it win)")
    args = parser.parse_args()
    if args.smoke:
        smoke = dict(duration=18, records=1500, real_records=200, chunk=100, subscribers=3, editors=2, hot=8, kill_every=4, sample_every=1, churn_every=1.5)
        given = {arg.split("=")[0].lstrip("-").replace("-", "_") for arg in sys.argv[1:] if arg.startswith("--")}
        for name, value in smoke.items():
            if name not in given:
                setattr(args, name, value)
    check_arguments(parser, args)
    args.hot = min(args.hot, args.records)

    run = Run(args)
    daemon = Daemon(run)
    report = Report()
    subscribers = None
    hard_limit = int(args.duration * 3 + 600)

    def on_alarm(*_):
        raise TimeoutError(f"the stress run exceeded its hard limit of {hard_limit} s")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(hard_limit)
    def on_term(*_):
        raise KeyboardInterrupt("SIGTERM")
    signal.signal(signal.SIGTERM, on_term)
    ok = False
    try:
        ok = execute(run, daemon, report, args)
    except (KeyboardInterrupt, TimeoutError) as e:
        run.error(f"interrupted: {e!r}")
    except Exception:
        run.error(f"the run failed:\n{traceback.format_exc()}")
    finally:
        if not report.results:
            print("\nFAIL harness: " + ("; ".join(e.splitlines()[0] for e in run.errors[:3]) or "no report"))
        signal.alarm(0)
        run.stop.set()
        run.abort.set()
        for sub in run.subscribers_ref.all if run.subscribers_ref else []:
            if sub.proc.poll() is None:
                sub.proc.kill()
                sub.proc.wait()
        daemon.close()
        if args.keep or not ok:
            print(f"\nrun directory kept: {run.dir}")
        else:
            shutil.rmtree(run.dir, ignore_errors=True)
    sys.exit(0 if ok else 1)


# Why a kill -9 or SIGTERM check had nothing to check, and what to change.
NO_IMPORT_UNDER_WAY = "the run ended before an import was under way when one was due (a longer --duration, or more --records)"


def execute(run, daemon, report, args):
    real = RealData(run)
    run.log(f"run directory {run.dir}; binaries {args.bin}; real data: "
            + (f"{len(real.lines)} issues of {real.source}" if real.lines else f"ABSENT: no titanium-jira export in {args.data} (generated data only)"))
    daemon.start()
    follower = Follower(run, daemon)
    threads = [run.thread("follower", follower.loop)]
    importer = Importer(run, daemon, real)

    # Round 0: the generated keys exist before editors and subscribers start.
    first = importer.import_one(write_generated(run, 0, args.records))
    hot_keys = [f"GEN-{n}" for n in range(1, args.hot + 1)]
    conn = Conn(run.read_sock)
    hot = {}
    for row in conn.call("io.bugsquasher.Store.Fetch", entity="Bug", predicate="key IN (" + ", ".join(f'"{k}"' for k in hot_keys) + ")", result="rows")["rows"]:
        hot[row["values"]["key"]] = row["id"]
    conn.close()
    if len(hot) != len(hot_keys):
        run.error(f"round 0 did not store the hot bugs ({len(hot)} of {len(hot_keys)}); job {first.get('final')}")
        return False
    run.log(f"round 0 imported ({first['final']['imported']} records); main phase: {args.duration:.0f} s")

    editors = Editors(run, daemon, importer, hot)
    subscribers = Subscribers(run, daemon, hot_keys)
    run.subscribers_ref = subscribers
    churn = ChurnClient(run, daemon, set(hot.values()))
    killer = Killer(run, daemon, importer)
    sampler = Sampler(run, daemon)
    t_main = time.monotonic()
    main_start = run.elapsed()
    importer_thread = run.thread("importer", importer.loop)
    threads += [run.thread("sampler", sampler.loop), run.thread("subscribers", subscribers.loop),
                run.thread("churn-stream", churn.stream_loop), run.thread("churn-control", churn.control_loop)]
    threads += [run.thread(f"editor-{n}", lambda n=n: editors.editor(n)) for n in range(1, args.editors + 1)]
    killer_thread = run.thread("killer", lambda: killer.loop(t_main))

    run.stop.wait(args.duration)
    run.log("workload stops; the last import finishes")
    run.stop.set()
    killer_thread.join(timeout=300)
    importer_thread.join(timeout=max(300, args.records / 20))
    if importer_thread.is_alive():
        run.error("the importer did not finish its last job")
    for t in threads:
        if t.name != "follower":
            t.join(timeout=60)
    if run.abort.is_set():
        run.error("aborted; checks below are partial")

    # ---- settle: the follower and the subscribers catch up with the last commit.
    conn = Conn(run.read_sock, timeout=120)
    final_status = daemon.sample(conn)
    final_token = final_status["token"]
    follower_ok = follower.wait_for(final_token, 60)
    acked = [e for e in editors.edits if e["state"] == "acked"]
    deadline = time.monotonic() + 20
    for sub in subscribers.all:
        for edit in acked:
            if edit["hot"] and edit["key"] in sub.keys and sub.ready_at and sub.ready_at < edit["t0"] and sub.exit is None and not sub.stop_requested:
                with sub.cond:
                    while sub.latest(edit["key"]) < edit["version"] and time.monotonic() < deadline:
                        sub.cond.wait(0.2)

    # ---- collect from the daemon.
    jobs = {j["id"]: j for j in conn.call("io.bugsquasher.Jobs.List", limit=1000)["jobs"]}
    rejects = {job: rejects_of(conn, job) for job in jobs}
    edited_ids = {e["id"] for e in acked}
    finals = {}
    ids = sorted(edited_ids)
    for i in range(0, len(ids), 500):
        for row in conn.call("io.bugsquasher.Store.Values", ids=ids[i:i + 500])["rows"]:
            finals[row["id"]] = row["values"].get("priority")
    follower.closing = True
    index = HistoryIndex(list(follower.events), edited_ids, set(hot.values()))
    t_hist = time.monotonic()
    fetch_history(conn, index.add)
    history_s = time.monotonic() - t_hist
    conn.close()
    subscribers.stop_all()
    churn.drop_connections()

    # ---- final SIGTERM, timed; then the file.
    daemon.sample()
    code, term_s = daemon.term(args.term_limit)
    run.log(f"final SIGTERM: exit {code} in {term_s:.2f} s")
    store_path = next((os.path.join(run.dir, "state", f) for f in sorted(os.listdir(os.path.join(run.dir, "state"))) if f.endswith(".sqlite")), None)
    db = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    integrity = [r[0] for r in db.execute("PRAGMA integrity_check")]
    h_count, h_min, h_max = db.execute("SELECT count(*), min(token), max(token) FROM bs_history").fetchone()
    bug_count, bug_distinct = db.execute("SELECT count(*), count(DISTINCT key) FROM Bug").fetchone()
    stored_keys = {r[0] for r in db.execute("SELECT key FROM Bug")}
    c_count, c_distinct = db.execute("SELECT count(*), count(DISTINCT jiraID) FROM Comment").fetchone()
    stored_comments = {r[0] for r in db.execute("SELECT jiraID FROM Comment")}
    db.close()

    # =========================================================================================
    # Figures.
    datasets = [j["dataset"] for j in importer.jobs]
    generated = [d for d in datasets if d.kind == "generated"]
    reals = [d for d in datasets if d.kind == "real"]
    total_read = sum(j["recordsRead"] for j in jobs.values())
    total_imported = sum(j["imported"] for j in jobs.values())
    total_rejected = sum(j["rejected"] for j in jobs.values())
    report.figure("real data", f"{len(real.lines)} issues of {real.source} per real import" if real.lines else f"ABSENT: no titanium-jira export in {args.data}; generated data only")
    report.figure("imports", f"{len(importer.jobs)} jobs ({len(generated)} generated x {args.records} records, {len(reals)} real x {len(real.lines)}), chunks of {args.chunk}")
    report.figure("records", f"{total_read} read, {total_imported} imported, {total_rejected} rejected; store: {bug_count} bugs, {c_count} comments; history {h_count} saves")

    # Throughput over time.
    series = []
    samples = sampler.samples
    if len(samples) >= 2:
        step = max(1, (len(samples) - 1 + 29) // 30)
        for i in range(step, len(samples), step):
            (t0, r0, k0, _, _), (t1, r1, k1, rss, wal) = samples[i - step], samples[i]
            marks = "".join(kind for (at, kind) in daemon.events if t0 < at <= t1)
            saves = (k1 - k0) / (t1 - t0) if k0 is not None and k1 is not None else 0
            series.append(f"    {t1:7.0f}s {(r1 - r0) / (t1 - t0):>10,.0f} {saves:>9,.1f} {rss:>7} {wal:>7} {marks}")
    rates = [(samples[i][1] - samples[i - 1][1]) / (samples[i][0] - samples[i - 1][0]) for i in range(1, len(samples))] if len(samples) > 1 else []
    if samples:
        span = samples[-1][0] - samples[0][0]
        report.figure("throughput", f"{(samples[-1][1] - samples[0][1]) / max(span, 1e-9):,.0f} records/s over the main phase (min {min(rates or [0]):,.0f}, max {max(rates or [0]):,.0f} per interval)")

    # Latency: edit sent -> the subscriber holding the bug printed the refresh (version >= edit's).
    steady, across, missed, counted, samples_out = [], [], [], 0, []
    restarts = [at for at, _ in daemon.events]
    t_origin_us = now_us() - int(run.elapsed() * 1e6)
    for edit in acked:
        if not edit["hot"]:
            continue
        for sub in subscribers.all:
            if edit["key"] not in sub.keys or sub.ready_at is None or sub.ready_at >= edit["t0"]:
                continue
            if sub.ready_versions.get(edit["key"], 0) >= edit["version"]:
                continue
            hit, kind = next(((at, kind) for version, at, kind in sub.events.get(edit["key"], []) if version >= edit["version"]), (None, None))
            if hit is None:
                if sub.stopped_at is None or sub.stopped_at > edit["t1"] + 10_000_000:
                    missed.append(f"{edit['key']} v{edit['version']} (token {edit['token']}) never reached subscriber {sub.number}")
                continue
            counted += 1
            latency = max(0, hit - edit["t0"]) / 1000
            t_edit, t_hit = (edit["t0"] - t_origin_us) / 1e6, (hit - t_origin_us) / 1e6
            # A delivery that spans a daemon restart, or comes as the catch-up of a (re)subscribe
            # (Register with versions), measures reconnection, not notification.
            spans = kind == "catch-up" or any(t_edit - 0.5 <= at <= t_hit + 0.5 for at in restarts)
            (across if spans else steady).append(latency)
            samples_out.append({"t": round(t_edit, 3), "ms": latency, "key": edit["key"], "subscriber": sub.number, "event": kind, "across_restart": spans})
    if steady:
        worst = max((x for x in samples_out if not x["across_restart"]), key=lambda x: x["ms"])
        report.figure("notification latency", f"edit -> subscriber refreshed: p50 {pct(steady, .5):.1f} ms, p99 {pct(steady, .99):.1f} ms, max {max(steady):.1f} ms"
                      f" ({len(steady)} deliveries; max at t={worst['t']:.0f}s, subscriber {worst['subscriber']})")
    else:
        report.figure("notification latency", "no samples")
    if across:
        report.figure("latency across restarts", f"{len(across)} deliveries spanned a kill/restart or came as a (re)subscribe catch-up: max {max(across):.0f} ms (not in the figures above)")

    with open(os.path.join(run.dir, "samples.json"), "w") as f:
        json.dump({"throughput": sampler.samples, "latency": samples_out, "kills": killer.records, "lifetimes": daemon.lifetimes,
                   "follower_resyncs": follower.resyncs}, f, default=str)
    levels = collections.Counter()
    for life in daemon.lifetimes:
        with open(os.path.join(run.dir, "logs", f"squasherd-{life['n']}.log"), errors="replace") as f:
            for line in f:
                parts = line.split(" ", 3)
                if len(parts) > 3 and parts[1] in ("error", "critical", "warning"):
                    detail = next((w for w in parts[3].split() if w.startswith("error=")), "")[:40]
                    levels[f"{parts[1]} '{line.rsplit('] ', 1)[-1].strip()[:50]}' ({detail})"] += 1
    report.figure("daemon log", ", ".join(f"{n} x {k}" for k, n in levels.most_common(4)) or "nothing at warning or above")

    # Conflicts.
    conflict_values = [l["conflicts"] for l in daemon.lifetimes]
    conflicts = "n/a (squasherd does not report conflictsResolved)" if all(c is None for c in conflict_values) else \
        f"{sum(c or 0 for c in conflict_values)} (sum over {len(conflict_values)} daemon lifetimes, read before each stop)"
    report.figure("conflicts resolved", conflicts)
    states = collections.Counter(e["state"] for e in editors.edits)
    report.figure("edits", f"{len(editors.edits)} sent: {states['acked']} acknowledged, {states['conflict']} Conflict, {states['error']} other errors, {states['unacked']} cut off by a kill; {sum(1 for e in acked if not e['hot'])} on rows the import was writing")

    kills = [r for r in killer.records if r["kind"] == "kill"]
    terms = [r for r in killer.records if r["kind"] == "term"]
    survived = [r for r in kills if "restart_error" not in r and (r["job"] is None or (r.get("resumed_state") != "stuck" and jobs.get(r["job"], {}).get("state") == "finished"))]
    report.figure("crashes survived", f"{len(survived)} of {len(kills)} kill -9 (daemon back, job resumed by itself, job finished); restart "
                  + ", ".join(f"{r.get('restart_s', 0):.1f}" for r in killer.records) + " s; resume "
                  + ", ".join("-" if r.get("resumed_s") is None else f"{r['resumed_s']:.1f}" for r in killer.records) + " s")
    term_times = [r["term_s"] for r in terms] + [term_s]
    report.figure("SIGTERM", ", ".join(f"exit {c} in {s:.2f} s" for c, s in [(r["exit"], r["term_s"]) for r in terms] + [(code, term_s)]))
    hwms = [l["hwm"] for l in daemon.lifetimes]
    report.figure("peak RSS", f"{max(hwms)} MiB (VmHWM per daemon lifetime: {', '.join(map(str, hwms))} MiB)")
    report.figure("subscribers", f"{len(subscribers.all)} squasherctl subscribe processes over the run ({args.subscribers} at a time); churn client: {len(churn.ops)} Register/Unregister calls, {len(churn.connections)} subscriptions")
    report.figure("follower", f"{len(follower.events)} events, {sum(1 for p, t, _, _ in follower.events if t != p + 1)} coalesced, {follower.reconnects} reconnects, {len(follower.resyncs)} resyncs; history pass {history_s:.1f} s")

    # =========================================================================================
    # Invariants.
    # 1. Every input record stored exactly once or in the reject report, none twice.
    problems = []
    expected_keys, expected_comments = set(), set()
    reject_sets = collections.defaultdict(set)
    for entry in importer.jobs:
        d, job = entry["dataset"], jobs.get(entry["id"])
        if job is None:
            problems.append(f"job {entry['id']} is not listed")
            continue
        listed = [r["line"] for r in rejects[entry["id"]]]
        lines = set(listed)
        if len(listed) != len(lines):
            problems.append(f"job {entry['id']}: a line rejected twice")
        if job["imported"] + job["rejected"] != job["recordsRead"] or job["recordsRead"] != d.records or job["rejected"] != len(lines):
            problems.append(f"job {entry['id']} ({d.kind} {d.rnd}): read {job['recordsRead']} (input {d.records}), imported {job['imported']}, rejected {job['rejected']}, {len(lines)} reject lines")
        if d.bad_lines is not None and lines != d.bad_lines:
            problems.append(f"job {entry['id']}: rejected lines {sorted(lines)[:10]}, expected {sorted(d.bad_lines)}")
        for line, key in d.keys.items():
            if line not in lines:
                expected_keys.add(key)
            elif d.bad_lines is not None:
                problems.append(f"job {entry['id']}: line {line} ({key}) rejected")
        expected_comments |= d.comment_ids
        reject_sets[d.kind].add(frozenset(lines) if d.kind == "real" else frozenset())
    if len(reject_sets.get("real", ())) > 1:
        problems.append("the real export's rejects differ between rounds")
    if bug_count != bug_distinct:
        problems.append(f"{bug_count - bug_distinct} bug keys stored twice")
    if c_count != c_distinct:
        problems.append(f"{c_count - c_distinct} comment IDs stored twice")
    if stored_keys != expected_keys:
        problems.append(f"store has {len(stored_keys - expected_keys)} unexpected and misses {len(expected_keys - stored_keys)} keys: {sorted(expected_keys - stored_keys)[:5]}")
    if not expected_comments <= stored_comments:
        problems.append(f"{len(expected_comments - stored_comments)} comments missing")
    report.check("records exactly once", not problems, "; ".join(problems[:5]) or
                 f"{len(stored_keys)} keys once each, {c_count} comments once each, every reject line listed once ({total_rejected} rejects)")
    # 2. integrity_check
    report.check("integrity_check", integrity == ["ok"], f"PRAGMA integrity_check: {'; '.join(integrity[:3])} ({store_path})")
    # 3. history without gap
    report.check("history has no gap", h_count == (h_max - h_min + 1) and h_min == 1 and index.tokens == list(range(1, h_max + 1)),
                 f"bs_history tokens {h_min}..{h_max}, {h_count} rows; History returned {len(index.tokens)}")
    # 4. follower
    detail = []
    if follower.duplicates:
        detail.append(f"duplicate tokens {follower.duplicates[:5]}")
    if index.mismatches:
        detail += index.mismatches[:5]
    if index.pos != len(index.events):
        detail.append(f"{len(index.events) - index.pos} follower events not matched to history")
    if not follower_ok:
        detail.append(f"follower stopped at token {follower.last}, store at {final_token}")
    contiguous = all(follower.events[i][0] == follower.events[i - 1][1] for i in range(1, len(follower.events))) and (not follower.events or follower.events[0][0] == 0)
    if not contiguous:
        detail.append("token ranges not contiguous")
    report.check("follower saw every change once", not detail, "; ".join(detail) or
                 f"tokens 1..{follower.last} contiguous, every committed change once ({index.changes} changes, {len(follower.events)} events, {follower.reconnects} reconnects)")
    # 5. jobs resume by themselves and end finished
    detail = []
    for r in killer.records:
        if r.get("restart_error"):
            detail.append(f"{r['kind']} at {r['at']:.0f}s: no restart ({r['restart_error']})")
        elif r["job"] and r.get("resumed_state") == "stuck":
            detail.append(f"job {r['job']} did not resume after {r['kind']} at {r['at']:.0f}s")
        elif r["job"] is None:
            detail.append(f"{r['kind']} at {r['at']:.0f}s found no running import")
    if not kills:
        detail.append(f"no kill -9 landed mid-import: {NO_IMPORT_UNDER_WAY}")
    not_finished = [f"{j['id']} {j['state']}" for j in jobs.values() if j["state"] != "finished"]
    if not_finished:
        detail.append("jobs not finished: " + ", ".join(not_finished[:5]))
    report.check("jobs resume after kill -9 and finish", not detail and kills, "; ".join(detail) or
                 f"{len(kills)} kill -9 + {len(terms)} SIGTERM mid-import; each job resumed with no client action; {len(jobs)} jobs finished")
    # 6. SIGTERM
    bad = [(r["exit"], r["term_s"]) for r in terms if r["exit"] != 0 or r["term_s"] > args.term_limit]
    if code != 0 or term_s > args.term_limit:
        bad.append((code, term_s))
    report.check("SIGTERM exits 0 and fast", not bad and terms, f"{len(term_times)} SIGTERM, slowest {max(term_times):.2f} s (limit {args.term_limit:g} s)"
                 + ("; bad: " + ", ".join(f"exit {c} in {t:.2f} s" for c, t in bad) if bad else "")
                 + ("" if terms else f"; none landed mid-import: {NO_IMPORT_UNDER_WAY}"))
    # 7. memory
    report.check("daemon memory bounded", max(hwms) <= args.max_rss_mb, f"peak VmHWM {max(hwms)} MiB over {len(hwms)} lifetimes (limit {args.max_rss_mb} MiB)")
    # 8. no lost update
    lost = []
    own_missing = []
    for edit in acked:
        changes = index.priority_changes.get(edit["id"], [])
        if edit["token"] not in changes:
            own_missing.append(edit)
        if finals.get(edit["id"]) != edit["value"] and not any(t > edit["token"] for t in changes):
            lost.append(f"{edit['key']} {edit['value']} (token {edit['token']}) is now {finals.get(edit['id'])!r} and no later save changed priority")
    detail = lost[:3] + [f"edit {e['key']} {e['value']}: its save {e['token']} does not list priority" for e in own_missing[:2]]
    report.check("no lost update", not lost and not own_missing and acked, "; ".join(detail) or
                 f"{len(acked)} acknowledged edits: each is the final value or a later committed save changed that attribute")
    # 9. conflicts: every one resolved by a merge policy (an edit never fails with Conflict)
    report.check("merge policies resolve every conflict", states["conflict"] == 0 and states["error"] == 0,
                 f"{states['conflict']} Update calls failed with io.bugsquasher.Import.Conflict, {states['error']} with another error; conflicts resolved: {conflicts}")
    # 10. subscribers
    died = [f"subscriber {s.number} exited {s.exit} by itself" for s in subscribers.all if not s.stop_requested]
    died += [f"subscriber {s.number} exited {s.exit} on SIGTERM" for s in subscribers.all if s.stop_requested and s.exit not in (0, None, -15)]
    report.check("subscribers refreshed every held edit", not missed and not died and counted,
                 "; ".join((missed + died)[:4]) or f"{counted} (edit, subscriber) deliveries, none missed; {len(subscribers.all)} processes survived every kill")
    # 11. Register/Unregister: registered-only delivery follows the registrations.
    violations = churn_check(churn, index)
    report.check("register/unregister respected", not violations and churn.ops, "; ".join(violations[:3]) or
                 f"{len(churn.ops)} calls; every save of a registered bug delivered, none of an unregistered one ({len(churn.received)} changes received)")
    # harness
    report.check("harness", not run.errors, "; ".join(e.splitlines()[0] for e in run.errors[:3]) or "no thread crashed, nothing timed out")

    print_report(run, report, series, daemon)
    return all(ok for _, ok, _ in report.results)


def churn_check(churn, index):
    """Positive: a save of X committed while X was surely registered (after the Register reply,
    before the Unregister call) reached the subscriber (the same or a newer version). Negative: a
    change received live was committed while X was registered (between the token read before
    Register and the token read after Unregister). Saves replayed after a reconnect are filtered
    by the registrations at that time, so they only need X in that Subscribe's register list."""
    violations = []
    intervals = collections.defaultdict(list)   # id -> [(tb_reg, ta_reg, tb_unreg, ta_unreg)]
    open_ = {}
    for op in churn.ops:
        for i in op["ids"]:
            if op["kind"] == "Register":
                if i not in open_:
                    open_[i] = (op["tb"], op["ta"])
            elif i in open_:
                tb, ta = open_.pop(i)
                intervals[i].append((tb, ta, op["tb"], op["ta"]))
    # Still registered when the stream ended: saves up to where it read on are checked.
    closed = churn.closed_at if churn.closed_at is not None else float("inf")
    for i, (tb, ta) in open_.items():
        intervals[i].append((tb, ta, closed + 1, float("inf")))
    received = collections.defaultdict(list)
    for conn, token, i, version in churn.received:
        received[i].append((version, conn))
    uncertain = collections.defaultdict(list)
    for failure in churn.failed:
        for i in failure["ids"]:
            uncertain[i].append((failure["tb"], failure["until"] if failure["until"] is not None else float("inf")))
    for i, spans in intervals.items():
        versions = [v for v, _ in received.get(i, [])]
        for token, version in index.hot_updates.get(i, []):
            if any(ta < token < tb_u for (_, ta, tb_u, _) in spans) and not any(a <= token <= b for a, b in uncertain.get(i, [])):
                if not any(v >= version for v in versions):
                    violations.append(f"save {token} of registered {i.rsplit('/', 1)[-1]} v{version} never delivered")
    for conn, token, i, version in churn.received:
        t = index.version_token.get((i, version))
        if t is None:
            continue
        connection = churn.connections[conn] if conn is not None and conn < len(churn.connections) else None
        if connection and t <= connection["t_resub"]:
            if i not in connection["register"]:
                violations.append(f"replayed {i.rsplit('/', 1)[-1]} v{version} (token {t}) not in the Subscribe register list")
            continue
        if not any(tb_r <= t <= ta_u for (tb_r, _, _, ta_u) in intervals.get(i, [])) and not any(a <= t <= b for a, b in uncertain.get(i, [])):
            violations.append(f"{i.rsplit('/', 1)[-1]} v{version} (token {t}) delivered while unregistered")
    return violations


def print_report(run, report, series, daemon):
    print("\n" + "=" * 100)
    print(f"squasherd stress report ({run.elapsed():.0f} s, seed {run.args.seed}{', smoke' if run.args.smoke else ''}, binaries {run.args.bin})")
    print("=" * 100)
    width = max(len(n) for n, _ in report.figures)
    for name, value in report.figures:
        print(f"  {name:<{width}}  {value}")
    if series:
        print("\n  throughput over time (K = kill -9, T = SIGTERM restart)")
        print(f"    {'t':>8} {'records/s':>10} {'saves/s':>9} {'RSS MiB':>7} {'WAL MiB':>7}")
        for line in series:
            print(line)
    print()
    for name, ok, detail in report.results:
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    failed = [n for n, ok, _ in report.results if not ok]
    print(f"\n{'PASS' if not failed else 'FAIL'}: {len(report.results) - len(failed)} of {len(report.results)} invariants hold"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    if failed:
        for life in daemon.lifetimes:
            path = os.path.join(run.dir, "logs", f"squasherd-{life['n']}.log")
            tail = open(path).read().strip().splitlines()[-5:] if os.path.exists(path) else []
            if tail:
                print(f"  squasherd-{life['n']}.log (end): " + " | ".join(tail))


if __name__ == "__main__":
    main()
