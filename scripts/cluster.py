#!/usr/bin/env python3
"""BugSquasher on PostgreSQL across hosts, on one machine.

PostgreSQL runs in a network namespace of its own and three squasherd daemons in three more
(`ip netns`, a veth pair from each daemon's host to the database's, IPv4), each with its own
runtime directory and its own subscribers. An import goes through the first daemon, edits
through the second, and subscribers on every host follow; at the end every subscriber's feed is
audited: no change missing, none twice, tokens increasing. At the start it checks that the
server's end of every daemon connection has the keepalive squasherd asks for (probes after 15 s
of silence, as `ss` shows), so that a host cut off does not leave its sessions for hours.

With --faults, four faults, each bounded in time:
  - an immediate restart of PostgreSQL as the import starts: no daemon exits, and the job waits
    for the database and goes on from its last committed chunk; the subscribers waiting for the
    keys of the first chunk's bugs fetch them while the server is down, and must try again;
  - kill -9 of the first daemon mid-import: it resumes its job when started again, and the
    other daemons' subscribers are not disturbed;
  - an immediate stop and restart of PostgreSQL during edits: no daemon exits, each edit is
    either committed and announced once or refused with StoreUnavailable (exit 75), and the
    daemons reconnect by themselves;
  - a partition of the third host (the database's packets to it dropped, no error on either
    side) for --partition seconds: its daemon notices within seconds and says so in
    `squasherctl status`, its metrics and its log, and the other daemons count it silent; after
    the network heals its subscribers catch up with nothing missed, and its metrics count the
    outage ended and nothing behind.

With --more-faults, three more, after those:
  - host c's own link down for --link-down seconds (its route to the database gone: new
    connections fail at once, where the partition leaves them unanswered; the open ones go
    silent): its daemon notices and says so in `squasherctl status`; once the link is up its
    subscribers catch up;
  - host c's daemon frozen (SIGSTOP) for --link-down seconds while edits go on: once it runs again
    its subscribers catch up;
  - kill -9 of the daemon the edits go through, between two edits: started again, it takes the
    next edits, and its own watch and subscriber reconnect and resume by themselves.

With --tls, the daemons reach PostgreSQL only over TLS (sslmode=verify-full, against a CA this
script makes with openssl, the server's certificate naming its three addresses).

Run by scripts/cluster-demo.sh (narrated) and scripts/test.sh (--smoke --tls --more-faults). Needs
root (network namespaces). Everything it starts runs under --work (removed at the end unless
--keep).
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HOSTS = ["a", "b", "c"]
KEYS = [f"CL-{i}" for i in range(1, 11)]  # the bugs the subscribers hold and the edits change
FINAL = ("finished", "failed", "aborted")  # the states a job ends in


def say(text):
    print(text, flush=True)


def run(command, check=True, **options):
    result = subprocess.run(command, capture_output=True, text=True, **options)
    if check and result.returncode != 0:
        raise SystemExit(f"cluster: {' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
    return result


def wait_until(what, timeout, check, interval=0.1):
    """Polls `check` until it returns something true; fails naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"cluster: gave up after {timeout} s waiting for {what}")
        time.sleep(interval)


class Network:
    """A namespace for the database and one per daemon host, each linked to the database's."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.db = prefix + "db"

    def namespace(self, host):
        return self.prefix + host

    def link(self, host):
        return f"{self.prefix}{host}1"  # the host's end of its veth pair

    def address(self, host, side):
        index = HOSTS.index(host) + 1
        return f"10.77.{index}.{1 if side == 'db' else 2}"

    def create(self):
        self.destroy()
        run(["ip", "netns", "add", self.db])
        run(["ip", "-n", self.db, "link", "set", "lo", "up"])
        for host in HOSTS:
            namespace, outer, inner = self.namespace(host), f"{self.prefix}{host}0", self.link(host)
            run(["ip", "netns", "add", namespace])
            run(["ip", "-n", namespace, "link", "set", "lo", "up"])
            run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])
            run(["ip", "link", "set", outer, "netns", self.db])
            run(["ip", "link", "set", inner, "netns", namespace])
            run(["ip", "-n", self.db, "addr", "add", self.address(host, "db") + "/24", "dev", outer])
            run(["ip", "-n", namespace, "addr", "add", self.address(host, "host") + "/24", "dev", inner])
            run(["ip", "-n", self.db, "link", "set", outer, "up"])
            run(["ip", "-n", namespace, "link", "set", inner, "up"])

    def cut(self, host):
        # Silently, as a network that fails does: the database's packets to the host are dropped
        # (a blackhole route), so no error reaches the host; its connections just stop answering.
        run(["ip", "-n", self.db, "route", "add", "blackhole", self.address(host, "host") + "/32"])

    def heal(self, host):
        run(["ip", "-n", self.db, "route", "del", "blackhole", self.address(host, "host") + "/32"])

    def destroy(self):
        for namespace in [self.db] + [self.namespace(h) for h in HOSTS]:
            run(["ip", "netns", "del", namespace], check=False)


class Postgres:
    """Debian's PostgreSQL in the database namespace, on TCP to the three hosts' links."""

    def __init__(self, directory, network, tls=False):
        self.directory, self.network, self.tls = directory, network, tls
        self.password = os.urandom(12).hex()
        versions = sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: [int(x) for x in v.split(".")])
        self.bin = f"/usr/lib/postgresql/{versions[-1]}/bin"

    def as_postgres(self, command):
        return ["runuser", "-u", "postgres", "--"] + command

    def create(self):
        os.makedirs(self.directory)
        shutil.chown(self.directory, "postgres", "postgres")
        run(self.as_postgres([f"{self.bin}/initdb", "-D", f"{self.directory}/data", "-A", "trust", "-U", "postgres",
                              "--no-sync"]))
        with open(f"{self.directory}/data/pg_hba.conf", "a") as hba:
            hba.write(f"{'hostssl' if self.tls else 'host'} all bsuser 10.77.0.0/16 scram-sha-256\n")
        if self.tls:
            self.make_certificates()
        self.start()
        for statement in [f"CREATE ROLE bsuser LOGIN PASSWORD '{self.password}'",
                          "CREATE DATABASE bugs OWNER bsuser"]:
            self.query(statement)

    @property
    def ca(self):
        """The CA file the daemons check the server's certificate against."""
        return f"{self.directory}/tls/ca.crt"

    def make_certificates(self):
        """A CA, and a certificate from it for the server that names its three addresses."""
        tls = f"{self.directory}/tls"
        os.makedirs(tls)
        names = ",".join("IP:" + self.network.address(h, "db") for h in HOSTS)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "postgres.sh")
        subprocess.run(["bash", "-c", 'set -e; source "$0"; pg_certificates "$1" "$2"', script, tls, names], check=True)
        for name in ["server.key", "server.crt"]:
            shutil.chown(f"{tls}/{name}", "postgres", "postgres")

    def start(self):
        listen = ",".join(self.network.address(h, "db") for h in HOSTS)
        options = (f"-c listen_addresses='{listen}' -c unix_socket_directories='{self.directory}' "
                   "-c max_connections=100 -c fsync=off")
        if self.tls:
            options += f" -c ssl=on -c ssl_cert_file={self.directory}/tls/server.crt" \
                       f" -c ssl_key_file={self.directory}/tls/server.key"
        run(["ip", "netns", "exec", self.network.db] + self.as_postgres(
            [f"{self.bin}/pg_ctl", "-D", f"{self.directory}/data", "-l", f"{self.directory}/postgres.log", "-w",
             "-t", "60", "-o", options, "start"]))

    def query(self, sql):
        """What `sql` returns, run as postgres on the Unix socket: a row's columns joined by |."""
        return run(self.as_postgres([f"{self.bin}/psql", "-h", self.directory, "-U", "postgres", "-Atc", sql])
                   ).stdout.strip()

    def stop(self, mode="fast"):
        run(self.as_postgres([f"{self.bin}/pg_ctl", "-D", f"{self.directory}/data", "-m", mode, "-w", "-t", "60",
                              "stop"]), check=False)


class Process:
    """A program started in a host's namespace, its output in files."""

    def __init__(self, name, command, directory, environment=None):
        self.name = name
        self.out_path, self.err_path = f"{directory}/{name}.out", f"{directory}/{name}.err"
        self.process = subprocess.Popen(
            command, stdout=open(self.out_path, "w"), stderr=open(self.err_path, "w"),
            env=dict(os.environ, **(environment or {})))

    def lines(self):
        with open(self.out_path) as f:
            return f.read().splitlines()

    def errors(self):
        with open(self.err_path) as f:
            return f.read()

    def alive(self):
        return self.process.poll() is None

    def signal(self, number):
        if self.alive():
            self.process.send_signal(number)

    def wait(self, timeout=30):
        return self.process.wait(timeout=timeout)


class Daemon:
    """squasherd on one host, with squasherctl run beside it."""

    def __init__(self, host, work, network, postgres, binaries):
        self.host, self.network, self.binaries = host, network, binaries
        self.directory = f"{work}/{host}"
        os.makedirs(self.directory)
        with open(f"{self.directory}/pgpass", "w") as f:
            f.write(postgres.password)
        os.chmod(f"{self.directory}/pgpass", 0o600)
        address = network.address(host, "db")
        with open(f"{self.directory}/squasherd.conf", "w") as f:
            tls = f"sslmode=verify-full&sslrootcert={postgres.ca}" if postgres.tls else "sslmode=disable"
            f.write(f"store = postgresql://bsuser@{address}:5432/bugs?schema=cluster&{tls}"
                    f"&password_file={self.directory}/pgpass\nchunk_size = 100\n")
        self.environment = {"SQUASHERD_RUNTIME_DIRECTORY": f"{self.directory}/run"}
        self.process = None
        self.starts = 0

    def command(self, program, arguments):
        # A host name of its own, as on another machine (status lists the daemons by host).
        return (["ip", "netns", "exec", self.network.namespace(self.host), "unshare", "--uts", "sh", "-c",
                 'hostname "$0"; exec "$@"', f"host-{self.host}", f"{self.binaries}/{program}"] + arguments)

    def start(self):
        self.starts += 1
        self.process = Process(
            f"squasherd-{self.starts}",
            self.command("squasherd", ["--config", f"{self.directory}/squasherd.conf", "--state-directory",
                                       f"{self.directory}/state", "--runtime-directory", f"{self.directory}/run"]),
            self.directory)
        wait_until(f"squasherd on host {self.host} to be ready", 60,
                   lambda: " ready" in self.process.errors() or self.exited())

    def exited(self):
        if not self.process.alive():
            raise SystemExit(f"cluster: squasherd on host {self.host} exited:\n{self.process.errors()[-3000:]}")
        return False

    def log(self):
        return "".join(open(f"{self.directory}/squasherd-{n}.err").read() for n in range(1, self.starts + 1))

    def ctl(self, arguments, check=True, timeout=60):
        return run(self.command("squasherctl", arguments), check=check, timeout=timeout,
                   env=dict(os.environ, **self.environment))

    def status(self):
        # Exit status 5 says the daemon is degraded (a fault here does that); the status is the same.
        try:
            result = self.ctl(["status", "--json"], check=False, timeout=30)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"cluster: squasherctl status on host {self.host} got no answer in 30 s:\n{self.log()[-3000:]}")
        if result.returncode not in (0, 5):
            raise SystemExit(f"cluster: squasherctl status on host {self.host} failed ({result.returncode}):\n{result.stderr}")
        return json.loads(result.stdout)

    def metric(self, sample):
        """The value of one sample of `squasherctl metrics` (a name, with its labels if it has
        any), or None when the daemon does not report it."""
        for line in self.ctl(["metrics"], check=False, timeout=30).stdout.splitlines():
            if line.startswith(sample + " "):
                return float(line.split()[-1])
        return None

    def follow(self, name, arguments):
        return Process(f"{name}", self.command("squasherctl", arguments), self.directory, self.environment)


def inserts_bugs(line):
    """Whether a `squasherctl watch --json` line is a save that inserts bugs."""
    if '"inserted":[{' not in line:
        return False
    save = json.loads(line).get("save") or {}
    return any("/Bug/" in change["id"] for change in save.get("inserted", []))


def records(path, count):
    """`count` records in BugSquasher's NDJSON: the subscribers' keys first, then bulk."""
    with open(path, "w") as f:
        for i in range(1, count + 1):
            f.write(json.dumps({"key": f"CL-{i}", "title": f"imported {i}", "status": "Open",
                                "project": {"key": "CL"}}) + "\n")


class Cluster:
    def __init__(self, options):
        self.options = options
        self.work = options.work
        self.network = Network(options.prefix)
        self.postgres = Postgres(f"{self.work}/postgres", self.network, tls=options.tls)
        self.daemons = {}
        self.feeds = []
        self.edits = []  # (number, key, outcome): "committed" or "refused"
        self.figures = []

    def figure(self, text):
        self.figures.append(text)
        say("  " + text)

    def up(self):
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        os.chmod(self.work, 0o755)
        say(f"network: namespaces {self.network.db} (PostgreSQL) and "
            + ", ".join(self.network.namespace(h) for h in HOSTS) + " (squasherd), linked by veth pairs")
        self.network.create()
        self.postgres.create()
        say("postgres: started in " + self.network.db + ", listening on "
            + ", ".join(self.network.address(h, "db") + ":5432" for h in HOSTS)
            + (" (TLS only; the daemons check its certificate: sslmode=verify-full)" if self.options.tls else ""))
        for host in HOSTS:
            daemon = Daemon(host, self.work, self.network, self.postgres, self.options.binaries)
            daemon.start()
            self.daemons[host] = daemon
        say("squasherd: one daemon per host, all on schema 'cluster' of database 'bugs'")
        if self.options.tls:
            encrypted, total = self.postgres.query(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s "
                "USING (pid) WHERE a.usename = 'bsuser'").split("|")
            if encrypted != total or total == "0":
                raise SystemExit(f"cluster: {encrypted} of {total} daemon connections use TLS")
            say(f"  TLS: {encrypted} of {total} daemon connections encrypted")
        self.check_keepalive()
        status = self.daemons["c"].status()
        for member in status.get("daemons", []):
            say(f"  daemon {member['id']} on {member['host']}: token {member['token']}, {member['behind']} behind")
        # Subscribers: every host watches the whole feed; b and c hold the edited bugs.
        for host in HOSTS:
            self.feeds.append((host, "watch", self.daemons[host].follow("watch", ["watch", "--json"])))
        for host in ["b", "c"]:
            self.feeds.append((host, "subscribe", self.daemons[host].follow("subscribe", ["subscribe", "--json"] + KEYS)))
        for host, kind, feed in self.feeds:
            marker = '"event":"subscribed"' if kind == "watch" else '"event":"ready"'
            wait_until(f"the {kind} on host {host} to start", 30, lambda: any(marker in l for l in feed.lines()))

    def import_through_a(self):
        a = self.daemons["a"]
        path = f"{self.work}/export.ndjson"
        records(path, self.options.records)
        say(f"import: {self.options.records} records through host a, in chunks of 100")
        # The subscribers waiting for the keys the first chunk creates are stopped until the
        # server is down: their fetch of those bugs meets it, and must be tried again.
        waiting = [feed for _, kind, feed in self.feeds if kind == "subscribe"] if self.options.faults else []
        for feed in waiting:
            feed.signal(signal.SIGSTOP)
        job = a.ctl(["import", path]).stdout.split()[-1]
        if self.options.faults:
            # A statement of the job is in flight when the server goes: it must fail, not hang.
            started = wait_until("the import to commit its first chunk", 120, lambda: self.job_progress(a, job), 0.02)
            if started["state"] != "running":
                raise SystemExit(f"cluster: the import was {started['state']} before PostgreSQL could be restarted; "
                                 "give it more --records")
            # Hosts b and c have read the first chunk (their watches show its bugs), so the
            # inserts their stopped subscribers wait for are queued before the server goes. (The
            # job's own row is inserted before it, in a save of its own: not that one.)
            for host, kind, feed in self.feeds:
                if kind == "watch" and host != "a":
                    wait_until(f"host {host}'s watch to see the first chunk", 30,
                               lambda: any(inserts_bugs(line) for line in feed.lines()), 0.01)
            self.postgres.stop("immediate")
            for feed in waiting:
                feed.signal(signal.SIGCONT)
            wait_until("the subscribers to find the database gone as they fetch the bugs created", 30,
                       lambda: all("could not fetch the bugs created" in feed.errors() for feed in waiting))
            self.postgres.start()
            back = time.monotonic()
            # The import goes on as soon as host a finds the server back: it is killed once past
            # a third, before the subscribers are awaited, so that it is still running.
            third = self.options.records // 3
            wait_until("the import to pass a third", 120, lambda: self.job(a, job)["imported"] >= third, 0.02)
            a.process.signal(signal.SIGKILL)
            a.process.wait()
            got = self.job(self.daemons["b"], job)
            wait_until("the subscribers to hold the bugs created once the database is back", 30,
                       lambda: all(any('"event":"added"' in line for line in feed.lines()) for feed in waiting))
            self.figure(f"fault 1: PostgreSQL restarted (immediate) mid-import, at {started['imported']} records "
                        "imported; the subscribers' fetch of the bugs created was refused, and held them "
                        f"{time.monotonic() - back:.1f} s after the restart")
            self.figure(f"fault 2: kill -9 of host a's squasherd mid-import, at {got['imported']} records imported")
            if got["state"] != "running":
                raise SystemExit(f"cluster: the job was {got['state']} when host a was killed; nothing interrupted")
            a.start()
        started = time.monotonic()
        final = wait_until("the import to finish", 300, lambda: self.job_if_final(a, job), 0.2)
        if final["state"] != "finished" or final["imported"] != self.options.records:
            raise SystemExit(f"cluster: the import ended {final}")
        self.figure(f"import finished: {final['imported']} imported, {final['rejected']} rejected"
                    + (" (resumed by host a after its restart)" if self.options.faults else "")
                    + f", {time.monotonic() - started:.1f} s after the last start")

    @staticmethod
    def job(daemon, job):
        return json.loads(daemon.ctl(["jobs", job, "--json"]).stdout)["job"]

    @staticmethod
    def job_progress(daemon, job):
        current = Cluster.job(daemon, job)
        return current if current["imported"] > 0 or current["state"] in FINAL else None

    @staticmethod
    def job_if_final(daemon, job):
        current = Cluster.job(daemon, job)
        return current if current["state"] in FINAL else None

    def edit(self, count, during=None):
        """`count` edits through host b, round-robin over KEYS; `during(i)` runs before edit i."""
        b = self.daemons["b"]
        for i in range(count):
            if during:
                during(i)
            number = len(self.edits) + 1
            key = KEYS[number % len(KEYS)]
            result = b.ctl(["update", key, f"title=edit {number}"], check=False, timeout=120)
            if result.returncode == 0:
                self.edits.append((number, key, "committed"))
            elif result.returncode == 75:
                self.edits.append((number, key, "refused"))
            else:
                raise SystemExit(f"cluster: edit {number} failed with {result.returncode}: {result.stderr}")

    def restart_postgres_during_edits(self):
        refused_before = sum(1 for e in self.edits if e[2] == "refused")

        def fault(i):
            if i == self.options.edits // 4:
                self.postgres.stop("immediate")
                self.restarted_at = time.monotonic()
                say("  fault 3: PostgreSQL stopped (immediate) while edits go on")
            if i == self.options.edits // 4 + 3:
                self.postgres.start()
                say(f"  PostgreSQL started again after {time.monotonic() - self.restarted_at:.1f} s")

        self.edit(self.options.edits, during=fault)
        refused = sum(1 for e in self.edits if e[2] == "refused") - refused_before
        for host, daemon in self.daemons.items():
            daemon.exited()
        self.figure(f"PostgreSQL restart: {refused} edit(s) refused with StoreUnavailable, the rest committed; "
                    "no daemon exited")
        # Every daemon reconnects by itself (at most a second apart); the next fault starts from there.
        wait_until("every daemon's status to clear after the restart", 30,
                   lambda: not any(d.status().get("storeProblem") for d in self.daemons.values()), 0.1)
        self.figure(f"every daemon answering again {time.monotonic() - self.restarted_at:.1f} s after the stop")

    def check_keepalive(self):
        """Every daemon connection's server end probes within 15 s of silence (the settings
        squasherd sends), not after the kernel's two hours: `ss` shows each idle socket's
        keepalive timer (one with data in flight shows its retransmission timer: looked at again)."""
        units = {"ms": 0.001, "sec": 1, "min": 60}

        def timers():
            sockets = run(["ip", "netns", "exec", self.network.db, "ss", "-tnoH", "state", "established",
                           "( sport = :5432 )"]).stdout.splitlines()
            found = [re.search(r"timer:\(keepalive,(\d+)(ms|sec|min)", line) for line in sockets]
            late = [line for line, timer in zip(sockets, found)
                    if timer and int(timer.group(1)) * units[timer.group(2)] > 15]
            if late:
                raise SystemExit("cluster: the server probes these daemon connections only after the kernel's "
                                 "default keepalive, not 15 s:\n" + "\n".join(late))
            return sockets if sockets and all(found) else None

        sockets = wait_until("every daemon connection idle, to read its keepalive timer", 30, timers, 0.2)
        say(f"  server keepalive: {len(sockets)} of {len(sockets)} daemon connections probed after 15 s of silence")

    def partition_c(self):
        c = self.daemons["c"]
        cut = time.monotonic()
        self.network.cut("c")
        say(f"  fault 4: host c cut off from the database for {self.options.partition} s while edits go on")
        # Status calls made in the first seconds of the silence wait for the store. Once, more of
        # them than Swift's shared pool has threads hung the daemon: the heartbeat's deadline ran
        # on that pool. Each must answer, with the problem, once the deadline has passed.
        piled = [subprocess.Popen(c.command("squasherctl", ["status", "--json", "--timeout", "30"]),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, **c.environment)) for _ in range(4)]
        problem = wait_until("host c's status to report the database unreachable", 30,
                             lambda: c.status().get("storeProblem"), 0.25)
        noticed = time.monotonic() - cut
        self.figure(f"host c noticed in {noticed:.1f} s; status says: {problem}")
        for call in piled:
            try:
                out, err = call.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                call.kill()
                raise SystemExit(f"cluster: a status call made as host c was cut off got no answer:\n{c.log()[-3000:]}")
            if call.returncode not in (0, 5) or not json.loads(out).get("storeProblem"):
                raise SystemExit(f"cluster: a status call made as host c was cut off failed ({call.returncode}): {err}{out}")
        self.figure(f"{len(piled)} status calls made as host c was cut off answered within "
                    f"{time.monotonic() - cut:.1f} s, each with the store's problem")
        shown = c.ctl(["status"], check=False).stdout
        for line in shown.splitlines():
            say("    host-c$ squasherctl status | " + line)
        if "STORE PROBLEM" not in shown or "bugs and history token unknown" not in shown:
            raise SystemExit("cluster: host c's status does not say that the store is out of reach")
        if "store-unavailable:" in shown or "Generic description" in shown:
            raise SystemExit("cluster: host c's status says the store's problem twice or without what happened")
        if "PostgreSQL does not answer" not in c.log():
            raise SystemExit("cluster: host c's log does not say that PostgreSQL does not answer")
        # The heartbeat's finding, not a statement it ended on the way ("Could not fetch Bug").
        if not problem.startswith("The database has not answered since"):
            raise SystemExit(f"cluster: host c's status gives a statement's failure, not the silence: {problem}")
        # Its metrics say so too, and the other hosts see it silent once it missed five heartbeats.
        if c.metric("squasherd_store_reachable") != 0:
            raise SystemExit("cluster: host c's metrics do not say that the database is unreachable")
        outages = c.metric("squasherd_store_outages_total")
        silent = 'squasherd_store_daemons{state="silent"}'
        if self.options.partition >= 15:
            wait_until("host a to count host c's daemon silent", 20, lambda: self.daemons["a"].metric(silent) == 1, 0.5)
            say("    host-a$ squasherctl metrics | " + silent + " 1")
        while time.monotonic() - cut < self.options.partition:
            self.edit(1)
        self.network.heal("c")
        self.figure(f"host c's subscribers caught up {self.wait_for_last_edit('c', 'after the partition'):.1f} s "
                    "after the network healed")
        wait_until("host c's status to clear", 30, lambda: not c.status().get("storeProblem"), 0.25)
        wait_until("host c's metrics to count the outage ended and its feed caught up", 30,
                   lambda: c.metric("squasherd_store_reachable") == 1
                   and c.metric("squasherd_store_outages_total") >= outages + 1
                   and c.metric("squasherd_history_behind_saves") == 0, 0.25)
        for line in c.ctl(["status"], check=False).stdout.splitlines():
            say("    host-c$ squasherctl status | " + line)

    def wait_for_last_edit(self, host, what):
        """Waits for host's subscriber to print the last committed edit; returns the seconds."""
        start = time.monotonic()
        last = max(n for n, _, outcome in self.edits if outcome == "committed")
        try:
            wait_until(f"host {host}'s subscriber to catch up {what}", 60,
                       lambda: f'"edit {last}"' in "".join(self.feed(host, "subscribe").lines()), 0.1)
        except SystemExit:
            self.diagnose(host, f"edit {last}")
            raise
        return time.monotonic() - start

    def more_faults(self):
        c, b = self.daemons["c"], self.daemons["b"]
        seconds = self.options.link_down
        namespace, link = self.network.namespace("c"), self.network.link("c")
        run(["ip", "-n", namespace, "link", "set", link, "down"])
        cut = time.monotonic()
        say(f"  fault 5: host c's own link down for {seconds:g} s while edits go on (its connects fail at once)")
        problem = wait_until("host c's status to report the database unreachable", 30,
                             lambda: c.status().get("storeProblem"), 0.25)
        self.figure(f"host c noticed in {time.monotonic() - cut:.1f} s; status says: {problem}")
        while time.monotonic() - cut < seconds:
            self.edit(1)
        run(["ip", "-n", namespace, "link", "set", link, "up"])
        self.figure(f"host c's subscribers caught up {self.wait_for_last_edit('c', 'after its link came up'):.1f} s "
                    "after the link came up")
        wait_until("host c's status to clear", 30, lambda: not c.status().get("storeProblem"), 0.25)

        c.process.signal(signal.SIGSTOP)
        frozen = time.monotonic()
        say(f"  fault 6: host c's squasherd frozen (SIGSTOP) for {seconds:g} s while edits go on")
        while time.monotonic() - frozen < seconds:
            self.edit(1)
        c.process.signal(signal.SIGCONT)
        self.figure(f"host c's subscribers caught up {self.wait_for_last_edit('c', 'after SIGCONT'):.1f} s after "
                    "its daemon ran again")

        say("  fault 7: kill -9 of host b's squasherd, which the edits go through, between two edits")
        b.process.signal(signal.SIGKILL)
        b.process.wait()
        b.start()
        self.edit(5)
        for host in ("b", "c"):
            self.wait_for_last_edit(host, "after host b's restart")
        self.figure("host b started again took the next edits; its own subscriber reconnected by itself "
                    "(its watch is audited below)")

    def diagnose(self, host, waited_for):
        """What a host's daemon and feeds say, for a failure to be understood from CI's log."""
        say(f"  diagnosis of host {host} (waited for {waited_for!r}):")
        daemon = self.daemons[host]
        try:
            say("    status: " + daemon.ctl(["status"], check=False, timeout=30).stdout.replace("\n", " | "))
        except subprocess.TimeoutExpired:
            say("    status: no answer in 30 s")
        for line in daemon.log().splitlines()[-40:]:
            say("    log: " + line[:400])
        for h, kind, feed in self.feeds:
            if h == host:
                for line in feed.errors().splitlines()[-10:]:
                    say(f"    {kind} stderr: " + line[:400])
                for line in feed.lines()[-5:]:
                    say(f"    {kind} stdout: " + line[:400])

    def feed(self, host, kind):
        return next(f for h, k, f in self.feeds if h == host and k == kind)

    def audit(self):
        """Every feed: tokens increasing, no change twice, none missing."""
        token = self.daemons["b"].status()["token"]
        committed = {n: key for n, key, outcome in self.edits if outcome == "committed"}
        refused = {n: key for n, key, outcome in self.edits if outcome == "refused"}
        for host, kind, feed in self.feeds:
            if kind == "watch":
                wait_until(f"host {host}'s watch to reach token {token}", 60,
                           lambda: any(f'"token":{token}' in l for l in feed.lines()))
            else:
                last = {key: n for n, key in committed.items()}
                wait_until(f"host {host}'s subscriber to see the last edits", 60,
                           lambda: all(f'"edit {n}"' in "".join(feed.lines()) for n in last.values()))
        for host, kind, feed in self.feeds:
            feed.signal(signal.SIGTERM)
            feed.wait()
            events = [json.loads(line) for line in feed.lines() if line.startswith("{")]
            if kind == "watch":
                self.audit_watch(host, events, token)
            else:
                self.audit_subscriber(host, events, committed, refused)

    def audit_watch(self, host, events, token):
        tokens = [e["token"] for e in events if e.get("event") == "save"]
        if any(b <= a for a, b in zip(tokens, tokens[1:])) or tokens[-1] != token:
            raise SystemExit(f"cluster: host {host}'s watch: tokens not increasing to {token}: {tokens}")
        inserted = [c["id"] for e in events if e.get("event") == "save" for c in e["save"].get("inserted", [])]
        bugs = [i for i in inserted if "/Bug/" in i]
        if len(bugs) != len(set(bugs)) or len(set(bugs)) != self.options.records:
            raise SystemExit(f"cluster: host {host}'s watch saw {len(bugs)} bug insertions, "
                             f"{len(set(bugs))} distinct, of {self.options.records}")
        self.figure(f"host {host} watch: {len(tokens)} saves up to token {token}, tokens increasing, "
                    f"every bug inserted once")

    def audit_subscriber(self, host, events, committed, refused):
        seen = {}
        last_token = 0
        for event in events:
            if event.get("event") not in ("refresh", "catch-up", "added"):
                continue
            if event["token"] < last_token:
                raise SystemExit(f"cluster: host {host}'s subscriber went back from token {last_token}: {event}")
            last_token = event["token"]
            for bug in event.get("bugs", []):
                if bug["title"].startswith("edit "):
                    seen.setdefault(bug["key"], []).append(int(bug["title"].split()[1]))
        merged = 0
        for key in KEYS:
            numbers = seen.get(key, [])
            expected = sorted(n for n, k in committed.items() if k == key)
            if any(b <= a for a, b in zip(numbers, numbers[1:])):
                raise SystemExit(f"cluster: host {host}'s subscriber saw {key}'s edits twice or out of order: {numbers}")
            unknown = [n for n in numbers if n not in committed and n not in refused]
            if unknown or not numbers or numbers[-1] != expected[-1]:
                raise SystemExit(f"cluster: host {host}'s subscriber, {key}: saw {numbers}, committed {expected}")
            # A subscriber that falls behind gets an object's pending changes merged into one
            # refresh with the newest values (docs/PROTOCOL.md, Backpressure): skipped values
            # are counted, never lost, since the last one is always the store's.
            merged += len([n for n in expected if n not in numbers])
        announced_refused = sorted(n for key in seen for n in seen[key] if n in refused)
        self.figure(f"host {host} subscriber: its {len(KEYS)} bugs end at their last edit; no edit seen twice or "
                    f"out of order; {sum(len(v) for v in seen.values())} refreshes"
                    + (f", {merged} edit(s) merged into a later refresh while it was behind" if merged else "")
                    + (f"; {len(announced_refused)} refused edit(s) committed after all and announced once"
                       if announced_refused else ""))

    def down(self):
        for _, _, feed in self.feeds:
            feed.signal(signal.SIGTERM)
        for daemon in self.daemons.values():
            if daemon.process:
                daemon.process.signal(signal.SIGTERM)
        for daemon in self.daemons.values():
            if daemon.process:
                try:
                    daemon.process.wait(30)
                except subprocess.TimeoutExpired:
                    daemon.process.signal(signal.SIGKILL)
        self.postgres.stop()
        self.network.destroy()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binaries", required=True, help="the directory of squasherd and squasherctl")
    parser.add_argument("--work", default="/tmp/bugsquasher-cluster", help="where everything runs")
    parser.add_argument("--prefix", default="bsq", help="the namespaces' names start with this")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--partition", type=float, default=30, help="seconds host c is cut off")
    parser.add_argument("--faults", action="store_true")
    parser.add_argument("--more-faults", action="store_true", help="host c's link down, its daemon frozen, "
                        "and a kill -9 of the editing daemon, after --faults' own")
    parser.add_argument("--link-down", type=float, default=10, help="seconds of --more-faults' link down and freeze")
    parser.add_argument("--tls", action="store_true", help="the daemons reach PostgreSQL over TLS only (verify-full)")
    parser.add_argument("--keep", action="store_true", help="keep --work afterwards")
    options = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("cluster: needs root, for network namespaces (ip netns)")
    cluster = Cluster(options)
    started = time.monotonic()
    try:
        cluster.up()
        cluster.import_through_a()
        say(f"edits: {options.edits} through host b")
        if options.faults:
            cluster.restart_postgres_during_edits()
            cluster.partition_c()
        else:
            cluster.edit(options.edits)
        if options.more_faults:
            cluster.more_faults()
        cluster.audit()
    finally:
        cluster.down()
        if not options.keep:
            shutil.rmtree(options.work, ignore_errors=True)
    say(f"cluster: passed in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
