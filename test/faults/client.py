"""client.py - the clients of a fault run.

Each client is a thread with its own PostgreSQL connection to one cluster.  It
loops over short critical sections on a few lock names:

    BEGIN;
    SELECT zk_lock(name, timeout);          -- or zk_lock_shared; sometimes no timeout
                                            -- (waits without limit); control mode: no lock
    INSERT INTO history (..., token, started) VALUES (..., clock_timestamp());
    SELECT count(*) FROM zk_lock_holders(name);     -- sometimes
    SELECT pg_sleep(hold);                  -- sometimes long, to be caught by a session expiry
    UPDATE history SET ended = clock_timestamp() [, token_end = zk_lock_token(name)];
    COMMIT;

so the history table of each cluster holds exactly the committed critical
sections.  Every attempt's outcome (committed, failed at a stage with its
SQLSTATE, connection lost) is appended to the run's outcome log.
"""

import time

import psycopg2

from pgthread import PgThread, first_line as _first_line

# stages of one attempt
STAGES = ("connect", "begin", "lock", "body", "commit")


class Client(PgThread):
    def __init__(self, run, cluster, idx, seed):
        super().__init__(run, cluster, "%s%d" % (cluster.name, idx), seed)
        self.idx = idx
        # read by the nemesis (plain attribute reads and writes are atomic)
        self.state = "idle"        # idle, locking, in_cs, long_cs, committing
        self.cs_t0 = None          # time.monotonic() when the critical section began
        self.attempts = 0
        self.committed = 0
        self.probed = False        # an expiry probe waits for this client: no client faults

    # -- connection --

    def _connect(self):
        """Connect, retrying until it works or the run stops (each try bounded)."""
        delay = 0.2
        while not self.run_.stop.is_set():
            t0 = time.time()
            try:
                self._open()
                return True
            except psycopg2.Error as e:
                self._drop()
                self.run_.record({
                    "t0": t0, "t1": time.time(), "cluster": self.cluster.name,
                    "client": self.label, "stage": "connect", "outcome": "conn_failed",
                    "sqlstate": getattr(e, "pgcode", None), "msg": _first_line(e)})
                self.run_.stop.wait(delay)
                delay = min(delay * 2, 1.0)
        return False

    # -- the loop --

    def run(self):
        try:
            while not self.run_.stop.is_set():
                if self.conn is None or self.conn.closed:
                    self._drop()
                    if not self._connect():
                        break
                self.one()
                self.run_.stop.wait(self.rnd.uniform(0, 0.04))
        finally:
            self.state = "idle"
            self._drop()

    def one(self):
        r = self.run_
        rnd = self.rnd
        name = rnd.choice(r.names)
        shared = rnd.random() < r.shared_p
        long_cs = not r.quiet.is_set() and rnd.random() < r.long_p
        if not r.quiet.is_set() and not r.control and r.want_long.is_set():
            r.want_long.clear()
            long_cs = True
        hold = rnd.uniform(*r.long_hold) if long_cs else rnd.uniform(0.005, 0.12)
        check_token = (not r.control) and rnd.random() < 0.5
        holders = (not r.control) and rnd.random() < r.holders_p
        timeout = None if rnd.random() < r.null_timeout_p else r.lock_timeout
        rec = {
            "t0": time.time(), "cluster": self.cluster.name, "client": self.label,
            "pid": self.pid, "name": name, "mode": "shared" if shared else "exclusive",
            "long": long_cs, "hold": round(hold, 3), "quiet": r.quiet.is_set(),
            "timeout": timeout,
        }
        self.attempts += 1
        stage = "begin"
        token = None
        try:
            with self.conn.cursor() as cur:
                cur.execute("BEGIN")
                stage = "lock"
                self.state = "locking"
                rec["t_lock"] = time.time()
                if r.control:
                    cur.execute("SELECT NULL::bigint")
                else:
                    cur.execute("SELECT %s(%%s, %%s::interval)"
                                % ("zk_lock_shared" if shared else "zk_lock"),
                                (name, None if timeout is None else "%gs" % timeout))
                token = cur.fetchone()[0]
                rec["t_locked"] = time.time()
                rec["token"] = token
                stage = "body"
                self.cs_t0 = time.monotonic()
                self.state = "long_cs" if long_cs else "in_cs"
                cur.execute(
                    "INSERT INTO history (cluster, client, name, mode, token, pid, started)"
                    " VALUES (%s, %s, %s, %s, %s, pg_backend_pid(), clock_timestamp())"
                    " RETURNING id",
                    (self.cluster.name, self.label, name, rec["mode"], token))
                hid = cur.fetchone()[0]
                if holders:
                    cur.execute("SELECT count(*) FROM zk_lock_holders(%s)", (name,))
                    rec["holders"] = cur.fetchone()[0]
                cur.execute("SELECT pg_sleep(%s)", (hold,))
                if check_token:
                    cur.execute("UPDATE history SET ended = clock_timestamp(),"
                                " token_end = zk_lock_token(name) WHERE id = %s", (hid,))
                else:
                    cur.execute("UPDATE history SET ended = clock_timestamp() WHERE id = %s", (hid,))
                stage = "commit"
                self.state = "committing"
                cur.execute("COMMIT")
                tag = cur.statusmessage
            if tag == "COMMIT":
                rec["outcome"] = "committed"
                self.committed += 1
            else:
                rec["outcome"] = "rolled_back"
                rec["msg"] = tag
        except (psycopg2.Error, AttributeError) as e:
            code = getattr(e, "pgcode", None)
            rec["sqlstate"] = code
            rec["msg"] = _first_line(e)
            gone = self.conn is None or self.conn.closed or code in ("57P01", "57P02", "57P03") \
                or isinstance(e, (psycopg2.OperationalError, psycopg2.InterfaceError)) and code is None
            if gone:
                rec["outcome"] = "conn_lost"
                self._drop()
            else:
                rec["outcome"] = "failed"
                try:
                    with self.conn.cursor() as cur:
                        cur.execute("ROLLBACK")
                except psycopg2.Error:
                    self._drop()
        finally:
            self.state = "idle"
            self.cs_t0 = None
            self.probed = False
        rec["stage"] = stage
        rec["t1"] = time.time()
        r.record(rec)
