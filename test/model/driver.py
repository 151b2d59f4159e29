"""driver.py - sessions, servers and the one-thread driver of the model-based
tester (test/model/model.py).

A Session is one PostgreSQL backend reached through an asynchronous psycopg2
connection: a statement is sent, then polled with a deadline, so one thread
can keep several sessions busy (a dequeue or a lock that waits) and still
know, step by step, what each of them is doing.  A KClient is one kazoo
client on the same ZooKeeper.  Everything listens on 127.0.0.1; every wait is
bounded.
"""

import os
import select
import signal
import sys
import threading
import time

import psycopg2
import psycopg2.extensions as ext

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "test", "faults"))

import infra  # noqa: E402
from pgthread import close_quietly, first_line as pg_first_line  # noqa: E402

FAST = 2.0          # a call that must not wait answers within this (seconds)


def kazoo_acquire(lk, t):
    """kazoo's acquire of lock or semaphore lk as the models call it: a try
    when t is 0, else a wait of up to t s; False when it timed out."""
    from kazoo.exceptions import LockTimeout
    try:
        if t == 0:
            return lk.acquire(blocking=False)
        return lk.acquire(timeout=t)
    except LockTimeout:
        return False


def kazoo_release_all(h, held, what):
    """Release each of kazoo's locks or semaphores held that is acquired
    (the models' final step); a failure is an anomaly of h."""
    for lk in held:
        try:
            if lk.is_acquired:
                lk.release()
        except Exception as e:
            h.anomaly("kazoo-error", "%s: %r" % (what, e))


def now():
    return time.monotonic()


def log(msg):
    print("%s model: %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def first_line(e):
    return pg_first_line(e, 240)


class Result:
    """What a statement did: ok with rows, or an error (SQLSTATE), or pending
    (still running at the deadline), or broken (the connection is gone)."""

    def __init__(self, ok=False, rows=None, code=None, msg=None, elapsed=0.0,
                 pending=False, broken=False):
        self.ok = ok
        self.rows = rows or []
        self.code = code
        self.msg = msg
        self.elapsed = elapsed
        self.pending = pending
        self.broken = broken

    def __repr__(self):
        if self.pending:
            return "<pending %.2fs>" % self.elapsed
        if self.ok:
            rs = repr(self.rows) if self.rows else "no row"
            if len(rs) > 160:
                rs = rs[:150] + "...(%d rows)" % len(self.rows)
            return "<ok %s %.2fs>" % (rs, self.elapsed)
        return "<%s %s %.2fs%s>" % ("broken" if self.broken else "error", self.code,
                                     self.elapsed, (": " + self.msg) if self.msg else "")


def poll_until(conn, deadline):
    """Poll an asynchronous connection until it is ready (True) or the
    deadline passes (False).  Raises what the server answered."""
    while True:
        st = conn.poll()
        if st == ext.POLL_OK:
            return True
        rem = deadline - now()
        if rem <= 0:
            return False
        rem = min(rem, 0.5)
        if st == ext.POLL_READ:
            select.select([conn.fileno()], [], [], rem)
        elif st == ext.POLL_WRITE:
            select.select([], [conn.fileno()], [], rem)


class Session:
    """One SQL session (backend).  State kept for the model: in a
    transaction block or not, the savepoints, the running statement."""

    def __init__(self, idx, cluster):
        self.idx = idx
        self.cluster = cluster
        self.name = "s%d%s" % (idx, cluster.label)
        self.conn = None
        self.cur = None
        self.pid = None
        self.xact = False
        self.sps = []            # savepoint names, outermost first
        self.pending = None      # the op whose statement runs (a dict), or None
        self.t0 = None
        self.sql = None
        self.touched = set()     # recipes called in this transaction (for PREPARE)
        self.generation = 0      # bumped on every reconnect

    @property
    def level(self):
        return len(self.sps)

    def connect(self, timeout=10):
        self.close()
        deadline = now() + timeout
        conn = psycopg2.connect(host="127.0.0.1", port=self.cluster.port, user="postgres",
                                dbname="postgres", connect_timeout=5,
                                application_name="model-" + self.name, async_=1)
        if not poll_until(conn, deadline):
            conn.close()
            raise RuntimeError("connect %s timed out" % self.name)
        self.conn = conn
        r = self.call("SELECT pg_backend_pid()", None, 5)
        if not r.ok:
            raise RuntimeError("session %s: %r" % (self.name, r))
        self.pid = r.rows[0][0]
        self.xact = False
        self.sps = []
        self.pending = None
        self.touched = set()
        self.generation += 1

    def close(self):
        close_quietly(self.conn)
        self.conn = None
        self.cur = None

    def start(self, sql, args=None):
        self.cur = self.conn.cursor()
        self.sql = sql
        self.t0 = now()
        self.cur.execute(sql, args)

    def finish(self, deadline):
        """Result of the running statement, or None when it still runs at the deadline."""
        try:
            done = poll_until(self.conn, deadline)
        except psycopg2.Error as e:
            el = now() - self.t0
            broken = self.conn.closed != 0 or e.pgcode is None
            return Result(code=e.pgcode, msg=first_line(e), elapsed=el, broken=broken)
        except (OSError, ValueError) as e:
            return Result(code=None, msg=repr(e), elapsed=now() - self.t0, broken=True)
        if not done:
            return None
        el = now() - self.t0
        try:
            rows = self.cur.fetchall() if self.cur.description else []
        except psycopg2.Error as e:
            return Result(code=e.pgcode, msg=first_line(e), elapsed=el)
        return Result(ok=True, rows=rows, elapsed=el)

    def call(self, sql, args=None, wait=FAST):
        """Run a statement, waiting at most `wait` seconds; a Result with
        pending=True when it still runs (the session is then busy)."""
        try:
            self.start(sql, args)
        except psycopg2.Error as e:
            return Result(code=e.pgcode, msg=first_line(e), broken=True)
        r = self.finish(now() + wait)
        if r is None:
            return Result(pending=True, elapsed=now() - self.t0)
        return r


class KClient:
    """One kazoo client (its own ZooKeeper session)."""

    def __init__(self, idx, hosts):
        from kazoo.client import KazooClient
        self.idx = idx
        self.name = "k%d" % idx
        self.zk = KazooClient(hosts=hosts, timeout=10.0)
        self.zk.start(timeout=15)
        self.pending = None
        self.objs = {}           # recipe objects (lock, queue, semaphore) by key

    def close(self):
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            pass


class ZkServer:
    """A single ZooKeeper server run by tools/zk.sh."""

    def __init__(self, directory, port):
        self.dir = os.path.abspath(directory)
        self.port = port
        self.hosts = "127.0.0.1:%d" % port
        self.zk_sh = os.path.join(SRC, "tools", "zk.sh")

    def start(self):
        rc, out, err = infra.run(["bash", self.zk_sh, "start", self.dir, str(self.port)], timeout=120)
        if rc != 0:
            raise RuntimeError("could not start ZooKeeper (rc %s): %s %s" % (rc, out, err))

    def stop(self):
        if os.path.exists(os.path.join(self.dir, "zk.pid")):
            rc, _, _ = infra.run(["bash", self.zk_sh, "stop", self.dir], timeout=40)
            if rc != 0:
                infra.run(["bash", self.zk_sh, "kill", self.dir], timeout=40)


def children_of(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(d))
    return out


class Cluster(infra.PgCluster):
    """infra.PgCluster plus a stop that always ends (a wedged worker does not
    stop a fast shutdown: immediate, then SIGKILL of the postmaster's own
    children and of the postmaster itself, by pid)."""

    def __init__(self, label, directory, port, hosts, settings):
        bindir = os.environ.get("ZKLOCK_PG_BINDIR") or infra.pg_bindir()
        super().__init__(label, directory, port, hosts, bindir, settings)
        self.label = label
        self.admin = None

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    def hard_stop(self, immediate=False):
        self.close_admin()
        pid = self.postmaster_pid()
        if pid is None:
            return
        if not immediate:
            rc, _, _ = infra.run([self.bin("pg_ctl"), "-D", self.data, "-m", "fast", "-w", "-t", "8",
                                  "stop"], timeout=15)
            if rc == 0:
                return
            log("cluster %s: fast stop did not complete, immediate stop" % self.label)
        rc, _, _ = infra.run([self.bin("pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "-t",
                              "3" if immediate else "8", "stop"], timeout=15)
        for _ in range(40):
            if not os.path.exists("/proc/%d" % pid):
                break
            time.sleep(0.05)
        if rc == 0 and not os.path.exists("/proc/%d" % pid):
            return
        log("cluster %s: immediate stop did not complete, SIGKILL" % self.label)
        for c in children_of(pid):
            try:
                os.kill(c, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        for _ in range(100):
            if not os.path.exists("/proc/%d" % pid):
                break
            time.sleep(0.05)
        try:
            os.unlink(os.path.join(self.data, "postmaster.pid"))
        except OSError:
            pass

    def restart(self):
        self.hard_stop()
        self.start()

    def admin_conn(self):
        if self.admin is None or self.admin.closed:
            self.admin = self.connect(timeout=5, options="-c statement_timeout=5s",
                                      application_name="model-admin")
            self.admin.autocommit = True
        return self.admin

    def close_admin(self):
        close_quietly(self.admin)
        self.admin = None

    def admin_query(self, sql, args=None):
        try:
            with self.admin_conn().cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else []
        except psycopg2.Error:
            self.close_admin()
            raise


class Watchdog(threading.Thread):
    """Calls zk_status() on every cluster every `every` seconds through a
    connection of its own; a call that takes more than `limit` seconds (or
    fails) is an anomaly: the worker is unresponsive."""

    def __init__(self, clusters, every=0.2, limit=1.0):
        super().__init__(name="watchdog", daemon=True)
        self.clusters = clusters
        self.every = every
        self.limit = limit
        self.stop_ev = threading.Event()
        self.paused = threading.Event()
        self.lock = threading.Lock()
        self.events = []        # (monotonic time, cluster label, message)
        self.calls = 0
        self.conns = {}

    def pause(self):
        self.paused.set()
        time.sleep(self.every * 2)
        with self.lock:
            for c in list(self.conns.values()):
                try:
                    c.close()
                except Exception:
                    pass
            self.conns.clear()

    def resume(self):
        self.paused.clear()

    def take(self):
        with self.lock:
            ev, self.events = self.events, []
        return ev

    def probe(self, cl):
        with self.lock:
            conn = self.conns.get(cl.label)
        if conn is None or conn.closed:
            conn = cl.connect(timeout=3, options="-c statement_timeout=15s",
                              application_name="model-watchdog")
            conn.autocommit = True
            with self.lock:
                self.conns[cl.label] = conn
        t0 = now()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT state FROM zk_status()")
                cur.fetchall()
            err = None
        except psycopg2.Error as e:
            err = first_line(e)
            try:
                conn.close()
            except Exception:
                pass
        el = now() - t0
        self.calls += 1
        if err is not None or el > self.limit:
            if self.paused.is_set():
                return
            with self.lock:
                self.events.append((now(), cl.label, "worker unresponsive: zk_status() on %s took %.2fs%s"
                                    % (cl.label, el, (" and failed: " + err) if err else "")))

    def run(self):
        while not self.stop_ev.is_set():
            if not self.paused.is_set():
                for cl in self.clusters:
                    if self.paused.is_set():
                        break
                    try:
                        self.probe(cl)
                    except Exception:
                        pass      # a connection that cannot be made now: tried again
            self.stop_ev.wait(self.every)

    def stop(self):
        self.stop_ev.set()
        self.join(timeout=20)
        for c in self.conns.values():
            try:
                c.close()
            except Exception:
                pass
