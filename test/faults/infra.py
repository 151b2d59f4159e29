"""infra.py - the servers of a fault run: a three-server ZooKeeper ensemble
(tools/zk.sh) and PostgreSQL 15 clusters (initdb/pg_ctl) that preload zklock.

Everything listens on 127.0.0.1 only.  Every call that waits is bounded.
"""

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import psycopg2


def log(msg):
    print("%s faults: %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def run(cmd, timeout=120, check=False, env=None):
    """Run cmd; returns (rc, stdout, stderr).  rc -1 on timeout."""
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout, env=env,
                           universal_newlines=True)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = -1, "", "timed out after %ss" % timeout
    if check and rc != 0:
        raise RuntimeError("%s failed (rc %s):\n%s\n%s" % (" ".join(cmd), rc, out, err))
    return rc, out, err


def port_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_ports(n_zk=3, n_pg=2, tries=200):
    """Client ports for an ensemble (each with +1000 and +2000 free too) and
    ports for PostgreSQL clusters, picked at random in 20000..39999."""
    rnd = random.SystemRandom()
    for _ in range(tries):
        base = rnd.randrange(20000, 39000)
        zk = [base + i for i in range(n_zk)]
        pg = [base + 10 + i for i in range(n_pg)]
        need = [p + d for p in zk for d in (0, 1000, 2000)] + pg
        if all(port_free(p) for p in need):
            return zk, pg
    raise RuntimeError("no free ports found")


def free_plain_ports(n, avoid=(), tries=2000):
    """n distinct free ports in 40000..59999 (none of avoid)."""
    rnd = random.SystemRandom()
    got = []
    for _ in range(tries):
        p = rnd.randrange(40000, 60000)
        if p not in got and p not in avoid and port_free(p):
            got.append(p)
            if len(got) == n:
                return got
    raise RuntimeError("no free ports found")


def pg_bindir():
    """Directory of initdb/pg_ctl (PATH first, else pg_config --bindir)."""
    p = shutil.which("initdb")
    if p:
        # through links (a /usr/local/bin/initdb -> .../bin/initdb): the
        # other programs (pg_basebackup) are only beside the real one
        return os.path.dirname(os.path.realpath(p))
    rc, out, _ = run(["pg_config", "--bindir"], timeout=30)
    if rc == 0 and os.path.exists(os.path.join(out.strip(), "initdb")):
        return out.strip()
    for d in ("/usr/lib/postgresql/15/bin",):
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    raise RuntimeError("initdb not found (PATH, pg_config --bindir)")


class Ensemble:
    """Three ZooKeeper servers in DIR/s1..s3, run by tools/zk.sh."""

    def __init__(self, zk_sh, directory, ports, blackhole=None):
        self.zk_sh = zk_sh
        self.dir = os.path.abspath(directory)
        self.ports = list(ports)
        self.hosts = ",".join("127.0.0.1:%d" % p for p in self.ports)
        # blackhole: test/blackhole.py, to route every link between two
        # servers through it so that one server can be cut off (partition)
        self.blackhole = blackhole
        self.bh_proc = None
        self.bh_ctl = None

    def sdir(self, i):
        return os.path.join(self.dir, "s%d" % i)

    def zk(self, *args, timeout=120):
        return run(["bash", self.zk_sh] + [str(a) for a in args], timeout=timeout)

    def start(self):
        rc, out, err = self.zk("start-ensemble", self.dir, *self.ports, timeout=180)
        if rc != 0:
            raise RuntimeError("could not start the ensemble (rc %s):\n%s\n%s" % (rc, out, err))
        if self.blackhole is not None:
            self._route_through_blackhole()
            rc, out, err = self.zk("start-ensemble", self.dir, *self.ports, timeout=180)
            if rc != 0:
                raise RuntimeError("could not restart the ensemble through the proxies (rc %s):\n%s\n%s"
                                   % (rc, out, err))
        log(out.strip())

    def _route_through_blackhole(self):
        """Every server reaches each other one's quorum and election ports
        through a port of blackhole.py tagged with both servers' numbers."""
        self.zk("stop", self.dir, timeout=120)
        ports = free_plain_ports(13, avoid=set(self.ports))
        self.bh_ctl = ports.pop()
        pairs = []
        for i in (1, 2, 3):
            f = os.path.join(self.sdir(i), "zoo.cfg")
            with open(f) as fh:
                cfg = fh.read()
            for j in (1, 2, 3):
                if j == i:
                    continue
                pj = self.ports[j - 1]
                xq, xe = ports.pop(), ports.pop()
                old = "server.%d=127.0.0.1:%d:%d" % (j, pj + 1000, pj + 2000)
                if old not in cfg:
                    raise RuntimeError("no %s in %s" % (old, f))
                cfg = cfg.replace(old, "server.%d=127.0.0.1:%d:%d" % (j, xq, xe))
                pairs += ["%d:%d:%d,%d" % (xq, pj + 1000, i, j), "%d:%d:%d,%d" % (xe, pj + 2000, i, j)]
            with open(f, "w") as fh:
                fh.write(cfg)
        logf = open(os.path.join(self.dir, "blackhole.log"), "a")
        self.bh_proc = subprocess.Popen([sys.executable, self.blackhole, str(self.bh_ctl)] + pairs,
                                        stdout=logf, stderr=subprocess.STDOUT)
        for _ in range(100):
            if self.bh("stats") is not None:
                return
            time.sleep(0.1)
        raise RuntimeError("blackhole.py does not answer")

    def bh(self, command):
        """One command to blackhole.py; its answer, or None."""
        if self.bh_ctl is None:
            return None
        try:
            with socket.create_connection(("127.0.0.1", self.bh_ctl), timeout=5) as c:
                c.sendall((command + "\n").encode())
                return c.makefile().readline().strip()
        except OSError:
            return None

    def partition(self, i):
        """Cut server i off from the other two (its clients still reach it)."""
        return (self.bh("hole %d" % i) or "").startswith("ok")

    def heal_partition(self, i=None):
        return (self.bh("heal" if i is None else "heal %d" % i) or "").startswith("ok")

    def cmd(self, i, word, timeout=15):
        """Four-letter word to server i (1..3) through tools/zk.sh cmd; None if no answer."""
        rc, out, _ = self.zk("cmd", self.ports[i - 1], word, timeout=timeout)
        return out if rc == 0 else None

    def mode(self, i):
        out = self.cmd(i, "srvr", timeout=8)
        if out is None:
            return None
        m = re.search(r"^Mode: (\S+)", out, re.M)
        return m.group(1) if m else None

    def modes(self):
        return {i: self.mode(i) for i in (1, 2, 3)}

    def kill(self, i):
        return self.zk("kill", self.sdir(i), timeout=60)[0] == 0

    def start_server(self, i):
        rc, out, err = self.zk("start", self.sdir(i), timeout=120)
        return rc == 0, (out + err).strip()

    def freeze(self, i):
        return self.zk("freeze", self.sdir(i), timeout=30)[0] == 0

    def thaw(self, i):
        return self.zk("thaw", self.sdir(i), timeout=30)[0] == 0

    def running(self, i):
        return self.zk("status", self.sdir(i), timeout=30)[0] == 0

    def pid(self, i):
        try:
            with open(os.path.join(self.sdir(i), "zk.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def stop_all(self):
        for i in (1, 2, 3):
            if os.path.isdir(self.sdir(i)):
                pid = self.pid(i)
                if pid:
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except OSError:
                        pass
        if os.path.isdir(self.dir):
            self.zk("kill", self.dir, timeout=60)
        if self.bh_proc is not None:
            self.bh("quit")
            try:
                self.bh_proc.wait(10)
            except subprocess.TimeoutExpired:
                self.bh_proc.kill()
            self.bh_proc = None


class PgCluster:
    """A PostgreSQL cluster in DIR that preloads zklock."""

    def __init__(self, name, directory, port, hosts, bindir, settings):
        self.name = name
        self.dir = os.path.abspath(directory)
        self.data = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "postgresql.log")
        self.port = port
        self.hosts = hosts
        self.bindir = bindir
        self.settings = settings
        self.started = False

    def bin(self, prog):
        return os.path.join(self.bindir, prog)

    def create(self):
        os.makedirs(self.dir, exist_ok=True)
        if os.path.exists(self.data):
            shutil.rmtree(self.data)
        run([self.bin("initdb"), "-D", self.data, "-A", "trust", "-U", "postgres",
             "-E", "UTF8", "--locale=C", "--no-sync"], timeout=180, check=True)
        conf = [
            "listen_addresses = '127.0.0.1'",
            "port = %d" % self.port,
            "unix_socket_directories = ''",
            "max_connections = 40",
            "shared_buffers = 16MB",
            "fsync = off",
            "full_page_writes = off",
            "restart_after_crash = on",
            "log_line_prefix = '%m [%p] %b %a '",
            "log_min_messages = info",
            "log_timezone = 'UTC'",
            "shared_preload_libraries = 'zklock'",
            "zklock.hosts = '%s'" % self.hosts,
            # kazoo takes part on the root namespace's paths
            "zklock.namespace = ''",
        ]
        for k, v in self.settings.items():
            conf.append("%s = '%s'" % (k, v))
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n# fault run\n" + "\n".join(conf) + "\n")

    def start(self):
        rc, out, err = run([self.bin("pg_ctl"), "-D", self.data, "-l", self.logfile,
                            "-w", "-t", "90", "start"], timeout=120)
        if rc != 0:
            raise RuntimeError("pg_ctl start %s failed (rc %s): %s %s\n%s"
                               % (self.name, rc, out, err, self.log_tail()))
        self.started = True

    def stop(self):
        if not os.path.exists(os.path.join(self.data, "postmaster.pid")):
            return
        rc, _, _ = run([self.bin("pg_ctl"), "-D", self.data, "-m", "fast", "-w", "-t", "30", "stop"],
                       timeout=45)
        if rc != 0:
            run([self.bin("pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "-t", "30", "stop"],
                timeout=45)

    def copy_cluster(self, name, fresh, backup=None):
        """A copy of this cluster (same system identifier), started beside it
        on a free port with the same settings but no elections: from a new
        base backup (fresh), or from backup, an older one of this run (kept
        pristine).  The copy has .backup (the backup used); None when no
        backup could be made or the copy did not start."""
        if fresh or backup is None:
            backup = os.path.join(self.dir, "backup-" + name)
            shutil.rmtree(backup, ignore_errors=True)
            rc, out, err = run([self.bin("pg_basebackup"), "-D", backup, "-h", "127.0.0.1",
                                "-p", str(self.port), "-U", "postgres", "-X", "stream",
                                "-c", "fast", "--no-sync"], timeout=180)
            if rc != 0:
                log("pg_basebackup of %s failed: %s %s" % (self.name, out, err))
                shutil.rmtree(backup, ignore_errors=True)
                return None
        port = free_plain_ports(1)[0]
        copy = PgCluster(name, os.path.join(os.path.dirname(self.dir), "copy" + name), port,
                         self.hosts, self.bindir, self.settings)
        shutil.rmtree(copy.dir, ignore_errors=True)
        os.makedirs(copy.dir)
        shutil.copytree(backup, copy.data, symlinks=True)
        with open(os.path.join(copy.data, "postgresql.conf"), "a") as f:
            f.write("\n# a copy of %s\nport = %d\nzklock.elections = ''\n" % (self.name, port))
        copy.backup = backup
        try:
            copy.start()
        except RuntimeError as e:
            log("the copy %s of %s did not start: %s" % (name, self.name, e))
            return None
        return copy

    def current_run(self):
        """The zklock run of this cluster's current start (16 hex digits), or None."""
        try:
            with open(os.path.join(self.data, "pgsql_tmp_zklock.run")) as f:
                return f.readline().strip() or None
        except OSError:
            return None

    def log_lines(self, text):
        try:
            with open(self.logfile, errors="replace") as f:
                return [line for line in f if text in line]
        except OSError:
            return []

    def wait_log(self, text, secs, stop=None):
        """True once text appears in the server log (within secs; stop: an
        Event that ends the wait early)."""
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            try:
                with open(self.logfile, errors="replace") as f:
                    if text in f.read():
                        return True
            except OSError:
                pass
            if stop is not None and stop.wait(0.5):
                return False
            if stop is None:
                time.sleep(0.5)
        return False

    def log_tail(self, n=30):
        try:
            with open(self.logfile, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def connect(self, timeout=5, **kw):
        return psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres",
                                dbname="postgres", connect_timeout=timeout, **kw)

    def query(self, sql, args=None, timeout=5):
        """One statement in a new connection; returns all rows (raises on error)."""
        conn = self.connect(timeout=timeout, options="-c statement_timeout=%ds" % max(timeout, 5))
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def try_query(self, sql, args=None, timeout=5):
        try:
            return self.query(sql, args, timeout)
        except Exception:
            return None

    def status(self):
        r = self.try_query("SELECT row_to_json(s)::text FROM zk_status() s")
        if not r:
            return None
        return json.loads(r[0][0])

    def wait_connected(self, timeout=60, not_session=None):
        deadline = time.monotonic() + timeout
        st = None
        while time.monotonic() < deadline:
            st = self.status()
            if st and st.get("state") == "connected" and st.get("session_id") != not_session:
                return st
            time.sleep(0.2)
        return st

    def worker_pid(self):
        r = self.try_query("SELECT pid FROM pg_stat_activity WHERE backend_type = 'zklock worker'")
        if r and len(r) == 1:
            return r[0][0]
        return None
