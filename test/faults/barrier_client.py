"""barrier_client.py - the double-barrier clients of a fault run.

K barrier clients (spread over the clusters) meet in rounds of --barrier-window
seconds: in round i each calls

    SELECT zk_barrier_enter('round-<i>', K, <most of the window>);
    SELECT zk_barrier_leave('round-<i>', '1.5s');     -- when it entered

except that in every third round one client (chosen by the round number, so
every client knows it) stays away.  The verdict (check()):

  - a round one client stayed away from must never open: an enter that
    returns true there let a waiter through before `parties` were present
    (a member counted twice, `ready` counted, a stale member, a spurious
    wake-up);
  - in the other rounds an enter may return true only after all K clients
    had called it;
  - in the quiet period, at least one full round opens for everybody.

Every call's outcome goes to barrier.jsonl through run.record_barrier.
"""

import time

import psycopg2

from pgthread import PgThread


def skipper(i, k):
    """The client that stays away from round i, or None."""
    return (i // 3) % k if i % 3 == 1 else None


class BarrierClient(PgThread):
    def __init__(self, run, cluster, idx, k, window, t_base, seed):
        super().__init__(run, cluster, "bar%d%s" % (idx, cluster.name), seed)
        self.idx = idx              # 0 .. k-1
        self.k = k
        self.window = window
        self.t_base = t_base

    def _call(self, sql, args):
        """(result, sqlstate): result True/False, or None on an error."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, args)
                return bool(cur.fetchone()[0]), None
        except (psycopg2.Error, AttributeError) as e:
            code = getattr(e, "pgcode", None)
            # a failed call leaves the session in an unknown state: start over
            self._drop()
            return None, code or "conn_lost"

    def run(self):
        r = self.run_
        try:
            while not r.stop.is_set():
                now = time.time()
                i = int((now - self.t_base) / self.window) + 1
                start = self.t_base + i * self.window + self.rnd.uniform(0, 0.15)
                if r.stop.wait(max(0.0, start - now)):
                    break
                rec = {"client": self.label, "cluster": self.cluster.name, "round": i,
                       "quiet": r.quiet.is_set(), "k": self.k}
                if skipper(i, self.k) == self.idx:
                    rec["called"] = False
                    r.record_barrier(rec)
                    continue
                if self.conn is None or self.conn.closed:
                    self._drop()
                    if not self._try_open():
                        rec["called"] = False
                        rec["error"] = "connect"
                        r.record_barrier(rec)
                        continue
                name = "round-%d" % i
                rec["called"] = True
                rec["t_enter"] = time.time()
                res, code = self._call("SELECT zk_barrier_enter(%s, %s, %s::interval)",
                                       (name, self.k, "%gs" % (self.window * 0.7)))
                rec["t_entered"] = time.time()
                rec["entered"] = res
                rec["enter_error"] = code
                if res:
                    res, code = self._call("SELECT zk_barrier_leave(%s, '1.5s')", (name,))
                    rec["t_left"] = time.time()
                    rec["left"] = res
                    rec["leave_error"] = code
                r.record_barrier(rec)
        finally:
            self._drop()


def check(recs, k, t_quiet):
    """(figures, anomalies) of the barrier rounds."""
    rounds = {}
    for rec in recs:
        rounds.setdefault(rec["round"], []).append(rec)
    fig = {"barrier_rounds": len(rounds), "barrier_opened": 0, "barrier_skip_rounds": 0,
           "barrier_quiet_full_rounds": 0, "barrier_enter_errors": 0}
    anomalies = []
    for i, rs in sorted(rounds.items()):
        called = [x for x in rs if x.get("called")]
        passed = [x for x in called if x.get("entered")]
        fig["barrier_enter_errors"] += sum(1 for x in called if x.get("enter_error"))
        if passed:
            fig["barrier_opened"] += 1
        if skipper(i, k) is not None:
            fig["barrier_skip_rounds"] += 1
            for x in passed:
                anomalies.append("round %d opened for %s with only %d of %d parties called"
                                 % (i, x["client"], len(called), k))
            continue
        for x in passed:
            before = {y["client"] for y in called if y["t_enter"] < x["t_entered"]}
            if len(before) < k:
                anomalies.append("round %d opened for %s when only %d of %d parties had called"
                                 % (i, x["client"], len(before), k))
        if len(passed) == k and all(x["t_enter"] >= t_quiet for x in passed):
            fig["barrier_quiet_full_rounds"] += 1
    if rounds and fig["barrier_quiet_full_rounds"] == 0:
        anomalies.append("no barrier round opened for every party in the quiet period")
    return fig, anomalies
