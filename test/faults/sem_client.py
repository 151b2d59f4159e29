"""sem_client.py - the semaphore clients of a fault run.

K semaphore clients (spread over the clusters; the odd ones take 2 permits
at once, the even ones 1) loop over

    BEGIN;
    SELECT zk_semaphore('fault-sem', SEM_MAX, <timeout>, permits => k);   -- or zk_try_semaphore
    INSERT INTO sem_history (..., permits) VALUES (..., clock_timestamp(), k) RETURNING id;
    SELECT pg_sleep(hold);        -- sometimes longer than the session timeout
    UPDATE sem_history SET ended = clock_timestamp() WHERE id = ...;
    COMMIT;

(in the control run, --control, without the semaphore: the checker must
then find too many at once), so each cluster's sem_history holds exactly
the committed spans: a span
whose lease was lost (session expired, worker killed) must fail at COMMIT.
Both clusters run on this machine, so their clock_timestamp() compare.  The
verdict (check()):

  - more than SEM_MAX leases held by the committed spans at one instant
    (the spans of both clusters, swept in time order, each counting its
    permits);
  - no committed span in the quiet period (no progress);
  - a statement that ran into statement_timeout (a hang).

Every attempt's outcome goes to sem.jsonl through run.record_sem.
"""

import time

import psycopg2

from pgthread import PgThread

SEMAPHORE = "fault-sem"
SEM_MAX = 3


class SemClient(PgThread):
    def __init__(self, run, cluster, idx, seed):
        super().__init__(run, cluster, "sem%d%s" % (idx, cluster.name), seed)
        self.idx = idx
        self.permits = 2 if idx % 2 else 1
        # read by the nemesis, which cancels and terminates these clients too
        self.state = "idle"
        self.probed = False

    def run(self):
        self.loop(lambda: self.rnd.uniform(0, 0.05))

    def one(self):
        r = self.run_
        rnd = self.rnd
        try_only = rnd.random() < 0.3
        long_span = not r.quiet.is_set() and rnd.random() < 0.05
        hold = rnd.uniform(*r.long_hold) if long_span else rnd.uniform(0.02, 0.3)
        rec = {"t0": time.time(), "cluster": self.cluster.name, "client": self.label,
               "pid": self.pid, "try": try_only, "long": long_span, "quiet": r.quiet.is_set()}
        stage = "begin"
        self.state = "busy"
        try:
            with self.conn.cursor() as cur:
                cur.execute("BEGIN")
                stage = "acquire"
                if r.control:
                    cur.execute("SELECT true")      # the control run: no semaphore
                    got = cur.fetchone()[0]
                elif try_only:
                    cur.execute("SELECT zk_try_semaphore(%s, %s, %s)",
                                (SEMAPHORE, SEM_MAX, self.permits))
                    got = cur.fetchone()[0]
                else:
                    cur.execute("SELECT zk_semaphore(%s, %s, %s::interval, %s)",
                                (SEMAPHORE, SEM_MAX, "%gs" % r.lock_timeout, self.permits))
                    got = True
                if not got:
                    cur.execute("ROLLBACK")
                    rec["outcome"] = "refused"
                else:
                    stage = "body"
                    cur.execute("INSERT INTO sem_history (cluster, client, pid, permits, started)"
                                " VALUES (%s, %s, pg_backend_pid(), %s, clock_timestamp()) RETURNING id",
                                (self.cluster.name, self.label, self.permits))
                    hid = cur.fetchone()[0]
                    cur.execute("SELECT pg_sleep(%s)", (hold,))
                    cur.execute("UPDATE sem_history SET ended = clock_timestamp() WHERE id = %s",
                                (hid,))
                    stage = "commit"
                    cur.execute("COMMIT")
                    rec["outcome"] = "committed" if cur.statusmessage == "COMMIT" else "rolled_back"
        except (psycopg2.Error, AttributeError) as e:
            code = getattr(e, "pgcode", None)
            rec["sqlstate"] = code
            rec["msg"] = (getattr(e, "pgerror", None) or str(e)).strip().split("\n")[0][:300]
            rec["outcome"] = "failed"
            if self.conn is None or self.conn.closed or code in ("57P01", "57P02", "57P03"):
                rec["outcome"] = "conn_lost"
                self._drop()
            try:
                with self.conn.cursor() as cur:
                    cur.execute("ROLLBACK")
            except (psycopg2.Error, AttributeError):
                self._drop()
        self.state = "idle"
        rec["stage"] = stage
        rec["t1"] = time.time()
        r.record_sem(rec)


def check(spans, recs, t_quiet):
    """(figures, anomalies): spans are the committed rows of every cluster's
    sem_history (started, ended as epoch seconds)."""
    fig = {"sem_spans": len(spans), "sem_max_concurrent": 0, "sem_over_max": 0,
           "sem_refused": sum(1 for x in recs if x.get("outcome") == "refused"),
           "sem_failed": sum(1 for x in recs if x.get("outcome") == "failed"),
           "sem_lost_at_commit": sum(1 for x in recs if x.get("stage") == "commit"
                                     and x.get("sqlstate") == "40001"),
           "sem_quiet_spans": 0}
    anomalies = []
    ev = []
    for s in spans:
        if s.get("started") is None or s.get("ended") is None:
            anomalies.append("a committed semaphore span without both ends: %s" % s)
            continue
        ev.append((s["started"], 1, s))
        ev.append((s["ended"], -1, s))
        if s["started"] >= t_quiet:
            fig["sem_quiet_spans"] += 1
    # at one instant, ends before starts: touching spans do not overlap
    ev.sort(key=lambda x: (x[0], x[1]))
    cur = []
    for t, d, s in ev:
        if d < 0:
            cur.remove(s)
            continue
        cur.append(s)
        held = sum(x.get("permits") or 1 for x in cur)
        fig["sem_max_concurrent"] = max(fig["sem_max_concurrent"], held)
        if held > SEM_MAX:
            fig["sem_over_max"] += 1
            if len(anomalies) < 10:
                anomalies.append("%d leases of semaphore %r held at once (max %d) at %.3f: %s"
                                 % (held, SEMAPHORE, SEM_MAX, t,
                                    ", ".join("%s pid %s x%d %.3f-%.3f" % (x["client"], x["pid"],
                                                                           x.get("permits") or 1,
                                                                           x["started"], x["ended"])
                                              for x in cur)))
    hangs = [x for x in recs if x.get("sqlstate") == "57014"
             and "statement timeout" in (x.get("msg") or "")]
    fig["sem_hangs"] = len(hangs)
    if hangs:
        anomalies.append("%d semaphore statements hit statement_timeout (first: %s at %.3f)"
                         % (len(hangs), hangs[0]["client"], hangs[0]["t0"]))
    if recs and fig["sem_quiet_spans"] == 0:
        anomalies.append("no semaphore span committed in the quiet period")
    return fig, anomalies
