"""election_sampler.py - watches the election of a fault run.

Both clusters stand in the election ELECTION (zklock.elections).  One thread
asks zk_is_leader(ELECTION) on A, then on B, then on A ..., every few
milliseconds, and records each answer with the time window of its query in
election.jsonl (run.record_election).  The verdict (check()):

  - two leaders at once: an answer "true" from one cluster lies between two
    consecutive answers "true" from the other (which led all along, since
    leadership cannot pass away and back within a few milliseconds);
  - nobody leads at the end of the quiet period (the last answers of both
    clusters are false).
"""

import threading
import time

import psycopg2

ELECTION = "fault-leader"


class ElectionSampler(threading.Thread):
    def __init__(self, run, clusters):
        super().__init__(name="election-sampler", daemon=True)
        self.run_ = run
        self.clusters = clusters
        self.conns = {}
        self.label = "election"    # what run.py expects of a client
        self.cluster = clusters[0]
        self.pid = None

    def _ask(self, c):
        conn = self.conns.get(c.name)
        try:
            if conn is None or conn.closed:
                conn = c.connect(timeout=3, application_name="faults-election",
                                 options="-c statement_timeout=10s")
                conn.autocommit = True
                self.conns[c.name] = conn
            with conn.cursor() as cur:
                cur.execute("SELECT zk_is_leader(%s)", (ELECTION,))
                return bool(cur.fetchone()[0]), None
        except psycopg2.Error as e:
            try:
                conn.close()
            except Exception:
                pass
            self.conns[c.name] = None
            return None, getattr(e, "pgcode", None) or "conn"

    def run(self):
        r = self.run_
        try:
            while not r.stop.is_set():
                for c in self.clusters:
                    t0 = time.time()
                    res, err = self._ask(c)
                    r.record_election({"cluster": c.name, "t0": t0, "t1": time.time(),
                                       "leader": res, "error": err, "quiet": r.quiet.is_set()})
                r.stop.wait(0.02)
        finally:
            for conn in self.conns.values():
                try:
                    if conn is not None:
                        conn.close()
                except Exception:
                    pass


def check(recs):
    """(figures, anomalies) of the election samples."""
    fig = {"election_samples": len(recs), "election_leader_changes": 0, "election_both": 0}
    anomalies = []
    if not recs:
        return fig, anomalies
    by = {}
    for x in recs:
        by.setdefault(x["cluster"], []).append(x)
    names = sorted(by)
    for me in names:
        for other in names:
            if other == me:
                continue
            mine = by[me]
            theirs = [x for x in by[other] if x["leader"] is True]
            j = 0
            for k in range(1, len(mine)):
                a, b = mine[k - 1], mine[k]
                if not (a["leader"] is True and b["leader"] is True):
                    continue
                # an answer of the other cluster wholly between two "true" of mine
                while j < len(theirs) and theirs[j]["t0"] < a["t1"]:
                    j += 1
                if j < len(theirs) and theirs[j]["t1"] <= b["t0"]:
                    fig["election_both"] += 1
                    if len(anomalies) < 10:
                        anomalies.append("two leaders: %s said true at %.3f-%.3f between %s's %.3f and %.3f"
                                         % (other, theirs[j]["t0"], theirs[j]["t1"], me, a["t1"], b["t0"]))
    last = None
    for x in sorted(recs, key=lambda x: x["t0"]):
        who = x["cluster"] if x["leader"] else None
        if x["leader"] is True and last is not None and who != last:
            fig["election_leader_changes"] += 1
        if x["leader"] is True:
            last = who
    # at the end: the last answer of each cluster; one of them must lead
    final = {n: by[n][-1]["leader"] for n in names}
    fig["election_final"] = final
    if not any(v is True for v in final.values()):
        anomalies.append("nobody leads the election at the end of the quiet period: %s" % final)
    if fig["election_both"] and not anomalies:
        anomalies.append("%d answers showed two leaders" % fig["election_both"])
    return fig, anomalies
