"""counter_client.py - the counter clients of a fault run.

N counter clients on each cluster loop over

    SELECT zk_counter_add('fault-ctr');        -- delta 1: the value this add made

and record every attempt in ctr.jsonl (run.record_counter): the value it
was answered with (acknowledged), or its error.  An error once the call was
sent is an unknown outcome: the add may or may not have been applied
(doc/counters.md, "In doubt"); a refused connection is no attempt, and an
add refused for want of a zklock entry (53200, "out of zklock lock entries"
or "... uses too many zklock entries": raised before the request is
handed to the worker) is known not to be applied.  Once
every client stopped and no zklock entry is left in flight, run.py reads
zk_counter_get('fault-ctr') on each cluster: the final value V (the
counter starts at 0 on the run's fresh ensemble).

In the control run (--control) the clients do a non-atomic read-then-set
instead:

    SELECT zk_counter_get('fault-ctr');                    -- v
    SELECT zk_counter_set('fault-ctr', v + 1, <read again>);  -- acknowledged v + 1 when true

(the compare-and-set compares with a second read, not with v, so two
clients that read the same v both write v + 1): the checker must then find
values handed out twice or adds lost.  The verdict (check()):

  - two acknowledged adds answered with the same value;
  - V < acked (an acknowledged add lost) or V > acked + unknown (an add
    counted twice, or one nobody made), acked the acknowledged adds and
    unknown the failed attempts, for V read on each cluster;
  - an acknowledged value below 1 or above V;
  - no final value read;
  - a cluster without an acknowledged add in the quiet period (no
    progress);
  - a statement that ran into statement_timeout (a hang).
"""

import time

import psycopg2

from pgthread import PgThread, first_line

COUNTER = "fault-ctr"


class CounterClient(PgThread):
    def __init__(self, run, cluster, idx, seed):
        super().__init__(run, cluster, "ctr%d%s" % (idx, cluster.name), seed)
        self.idx = idx
        # read by the nemesis, which cancels and terminates these clients too
        self.state = "idle"
        self.probed = False

    def run(self):
        self.loop(lambda: self.rnd.uniform(0, 0.05))

    def one(self):
        r = self.run_
        rec = {"t0": time.time(), "cluster": self.cluster.name, "client": self.label,
               "pid": self.pid, "quiet": r.quiet.is_set()}
        stage = "add"
        self.state = "busy"
        try:
            with self.conn.cursor() as cur:
                if r.control:
                    # the control run: read, then write what was read plus one
                    stage = "get"
                    cur.execute("SELECT zk_counter_get(%s)", (COUNTER,))
                    v = cur.fetchone()[0]
                    cur.execute("SELECT zk_counter_get(%s)", (COUNTER,))
                    now = cur.fetchone()[0]
                    stage = "set"
                    cur.execute("SELECT zk_counter_set(%s, %s, %s)", (COUNTER, v + 1, now))
                    if cur.fetchone()[0]:
                        rec["outcome"], rec["value"] = "acked", v + 1
                    else:
                        rec["outcome"] = "refused"      # nothing written
                else:
                    cur.execute("SELECT zk_counter_add(%s)", (COUNTER,))
                    rec["outcome"], rec["value"] = "acked", cur.fetchone()[0]
        except (psycopg2.Error, AttributeError) as e:
            code = getattr(e, "pgcode", None)
            rec["sqlstate"] = code
            rec["msg"] = first_line(e)
            rec["outcome"] = "failed"
            if stage == "get":
                rec["outcome"] = "failed_read"          # nothing written
            elif code == "53200" and "zklock" in rec["msg"] and "entries" in rec["msg"]:
                rec["outcome"] = "not_sent"             # no entry: nothing handed to the worker
            if self.conn is None or self.conn.closed or code in ("57P01", "57P02", "57P03"):
                rec["conn_lost"] = True
                self._drop()
        self.state = "idle"
        rec["stage"] = stage
        rec["t1"] = time.time()
        r.record_counter(rec)


def check(recs, finals, clusters, t_quiet):
    """(figures, anomalies): recs the attempts (ctr.jsonl), finals the final
    value read on each cluster ({cluster: V or None}), clusters the names of
    the clusters."""
    acked = [x for x in recs if x.get("outcome") == "acked"]
    unknown = sum(1 for x in recs if x.get("outcome") == "failed")
    values = sorted(x["value"] for x in acked)
    fig = {"ctr_attempts": len(recs), "ctr_acked": len(acked), "ctr_unknown": unknown,
           "ctr_not_sent": sum(1 for x in recs if x.get("outcome") == "not_sent"),
           "ctr_unknown_by": {}, "ctr_final": finals, "ctr_duplicates": 0, "ctr_lost": 0,
           "ctr_extra": 0, "ctr_max_value": values[-1] if values else None,
           "ctr_quiet_acked": {c: 0 for c in clusters}, "ctr_hangs": 0}
    anomalies = []
    if not recs:
        return fig, anomalies
    for x in recs:
        if x.get("outcome") == "failed":
            k = x.get("sqlstate") or "none"
            fig["ctr_unknown_by"][k] = fig["ctr_unknown_by"].get(k, 0) + 1
        if x.get("outcome") == "acked" and x["t0"] >= t_quiet and x["cluster"] in fig["ctr_quiet_acked"]:
            fig["ctr_quiet_acked"][x["cluster"]] += 1
    # no two adds answered with one value
    dups = []
    for i in range(1, len(values)):
        if values[i] == values[i - 1]:
            dups.append(values[i])
    fig["ctr_duplicates"] = len(dups)
    if dups:
        by = {}
        for x in acked:
            if x["value"] in dups[:3]:
                by.setdefault(x["value"], []).append("%s pid %s at %.3f" % (x["client"], x["pid"], x["t0"]))
        anomalies.append("%d counter values handed out twice or more (first: %s)"
                         % (len(dups), "; ".join("%d to %s" % (v, ", ".join(w))
                                                 for v, w in sorted(by.items()))))
    if values and values[0] < 1:
        anomalies.append("a counter add answered with %d, below 1 (the counter starts at 0)" % values[0])
    if not finals or any(v is None for v in finals.values()):
        anomalies.append("the counter's final value was not read: %s" % (finals,))
    for c, v in sorted((finals or {}).items()):
        if v is None:
            continue
        if v < len(acked):
            fig["ctr_lost"] = max(fig["ctr_lost"], len(acked) - v)
            anomalies.append("counter %r reads %d on %s, below the %d acknowledged adds (adds lost)"
                             % (COUNTER, v, c, len(acked)))
        elif v > len(acked) + unknown:
            fig["ctr_extra"] = max(fig["ctr_extra"], v - len(acked) - unknown)
            anomalies.append("counter %r reads %d on %s, above %d acknowledged + %d unknown adds"
                             % (COUNTER, v, c, len(acked), unknown))
        above = [x for x in values if x > v]
        if above:
            anomalies.append("%d acknowledged counter values above the final %d on %s (max %d)"
                             % (len(above), v, c, above[-1]))
    hangs = [x for x in recs if x.get("sqlstate") == "57014"
             and "statement timeout" in (x.get("msg") or "")]
    fig["ctr_hangs"] = len(hangs)
    if hangs:
        anomalies.append("%d counter statements hit statement_timeout (first: %s at %.3f)"
                         % (len(hangs), hangs[0]["client"], hangs[0]["t0"]))
    idle = [c for c, n in sorted(fig["ctr_quiet_acked"].items()) if n == 0]
    if idle:
        anomalies.append("no counter add acknowledged in the quiet period on %s" % ", ".join(idle))
    return fig, anomalies
