"""pgthread.py - what every client thread of the fault run shares: one
PostgreSQL connection to one cluster, opened and dropped the same way."""

import random
import threading

import psycopg2


def first_line(e, width=300):
    """The first line of an error's message (PostgreSQL's, else the
    exception's), at most width characters."""
    s = getattr(e, "pgerror", None) or str(e)
    s = s.strip().splitlines()[0] if s.strip() else repr(e)
    return s[:width]


def close_quietly(conn):
    """Close conn (None: nothing), whatever it answers: a connection the
    nemesis broke may fail to close."""
    try:
        if conn is not None:
            conn.close()
    except Exception:
        pass


class PgThread(threading.Thread):
    def __init__(self, run, cluster, label, seed):
        super().__init__(name="client-" + label, daemon=True)
        self.run_ = run
        self.cluster = cluster
        self.label = label
        self.rnd = random.Random(seed)
        self.conn = None
        self.pid = None         # read by the nemesis

    def _open(self):
        """Open the connection (autocommit, statement_timeout of the run) and
        note the backend's pid; raises psycopg2.Error."""
        conn = self.cluster.connect(
            timeout=3, application_name="faults-" + self.label,
            options="-c statement_timeout=%ds" % self.run_.statement_timeout)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            self.pid = cur.fetchone()[0]
        self.conn = conn

    def _try_open(self):
        """True when connected; False (and nothing open) when it failed."""
        try:
            self._open()
            return True
        except psycopg2.Error:
            self._drop()
            return False

    def _drop(self):
        close_quietly(self.conn)
        self.conn = None
        self.pid = None

    def loop(self, pause):
        """The run of a client that repeats self.one() until the run stops:
        (re)connect when the connection is gone (every 0.5 s while it cannot),
        then one(), then wait pause() seconds."""
        r = self.run_
        try:
            while not r.stop.is_set():
                if self.conn is None or self.conn.closed:
                    self._drop()
                    if not self._try_open():
                        r.stop.wait(0.5)
                        continue
                self.one()
                r.stop.wait(pause())
        finally:
            self._drop()
