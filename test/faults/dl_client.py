"""dl_client.py - the deadlock workload of a fault run.

Two groups of clients on both clusters, each a thread with its own
connection, loop over one transaction that takes 2 or 3 lock names one by
one, each by its own call:

    BEGIN;
    SELECT zk_lock(n1, '60s');  INSERT INTO history (... n1, token ...);
    SELECT zk_lock(n2, '60s');  INSERT INTO history (... n2, token ...);
    [SELECT zk_lock(n3, '60s'); INSERT ...]
    SELECT pg_sleep(hold);                  -- brief
    UPDATE history SET ended = clock_timestamp(), token_end = zk_lock_token(name) ...;
    COMMIT;

  cyclic   names dl-a, dl-b, dl-c in a RANDOM order: two transactions that
           take two names in opposite orders wait for each other in a
           circle, which the deadlock detector must break (doc/locks.md,
           "Deadlocks across servers": the youngest waiter gets 40P01);
  control  names dlc-a, dlc-b, dlc-c always in sorted order: no circle
           can form, so a 40P01 there is a false deadlock.

The rows go to the same history table as client.py's, so the checker's
overlap and token checks cover these names too.  Every attempt goes to
dl.jsonl: each call's name and times (t_call, t_ret), the names held with
the time each was granted, and the outcome; check() below gives the
verdict:

  dl_unjustified   a 40P01 of the cyclic group with no circle of waits in
                   the records at that time: the victim waited for a name
                   that (through a chain of waiters) waited for a name it
                   held; every member waits at the victim's error and holds
                   what it waits on then (SLACK_S of clock slack each way)
  dl_control       any 40P01 of the control group (sorted order: no circle)
  dl_slow_waits    a cyclic-group lock call that waited longer than
                   deadlock_timeout + WAIT_BOUND_S (or ran into its timeout,
                   55P03) with no fault of the nemesis from
                   session_timeout + connect_timeout before the call to its
                   end: a circle the detector did not break
  dl_hangs         statements of these clients ended by their
                   statement_timeout (STATEMENT_TIMEOUT_S)
  dl_progress      a client of either group without a committed transaction
                   in the quiet period
"""

import bisect
import collections
import time

import psycopg2

from pgthread import PgThread, first_line

CYCLIC = ("dl-a", "dl-b", "dl-c")
CONTROL = ("dlc-a", "dlc-b", "dlc-c")
LOCK_TIMEOUT_S = 60          # every call's timeout: longer than any bound below
STATEMENT_TIMEOUT_S = 90     # these clients' statement_timeout
WAIT_BOUND_S = 30            # a wait past deadlock_timeout + this is a circle not broken
SLACK_S = 1.0                # client clocks vs the server's grant and release


class DlClient(PgThread):
    def __init__(self, run, cluster, idx, group, seed):
        super().__init__(run, cluster, "%s%s%d" % ("dl" if group == "cyclic" else "dlc",
                                                   cluster.name, idx), seed)
        self.group = group
        self.names = CYCLIC if group == "cyclic" else CONTROL
        # read by the nemesis (client_cancel, client_terminate)
        self.state = "idle"
        self.probed = False

    def _open(self):
        conn = self.cluster.connect(
            timeout=3, application_name="faults-" + self.label,
            options="-c statement_timeout=%ds" % STATEMENT_TIMEOUT_S)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            self.pid = cur.fetchone()[0]
        self.conn = conn

    def run(self):
        r = self.run_
        try:
            while not r.stop.is_set():
                if self.conn is None or self.conn.closed:
                    self._drop()
                    if not self._try_open():
                        r.stop.wait(0.5)
                        continue
                self.one()
                r.stop.wait(self.rnd.uniform(0, 0.05))
        finally:
            self.state = "idle"
            self._drop()

    def one(self):
        r = self.run_
        rnd = self.rnd
        names = rnd.sample(self.names, rnd.choice((2, 2, 3)))
        if self.group == "control":
            names.sort()
        hold = rnd.uniform(0.005, 0.1)
        rec = {"t0": time.time(), "cluster": self.cluster.name, "client": self.label,
               "group": self.group, "pid": self.pid, "names": names,
               "in_order": names == sorted(names), "quiet": r.quiet.is_set(),
               "calls": [], "held": {}}
        stage = "begin"
        self.state = "busy"
        ids = []
        try:
            with self.conn.cursor() as cur:
                cur.execute("BEGIN")
                stage = "lock"
                for n in names:
                    call = {"name": n, "t_call": time.time()}
                    rec["calls"].append(call)
                    cur.execute("SELECT zk_lock(%s, %s::interval)", (n, "%ds" % LOCK_TIMEOUT_S))
                    token = cur.fetchone()[0]
                    call["t_ret"] = time.time()
                    rec["held"][n] = call["t_ret"]
                    call["token"] = token
                    cur.execute(
                        "INSERT INTO history (cluster, client, name, mode, token, pid, started)"
                        " VALUES (%s, %s, %s, 'exclusive', %s, pg_backend_pid(), clock_timestamp())"
                        " RETURNING id", (self.cluster.name, self.label, n, token))
                    ids.append(cur.fetchone()[0])
                stage = "body"
                cur.execute("SELECT pg_sleep(%s)", (hold,))
                cur.execute("UPDATE history SET ended = clock_timestamp(),"
                            " token_end = zk_lock_token(name) WHERE id = ANY(%s)", (ids,))
                stage = "commit"
                cur.execute("COMMIT")
                rec["outcome"] = "committed" if cur.statusmessage == "COMMIT" else "rolled_back"
        except (psycopg2.Error, AttributeError) as e:
            code = getattr(e, "pgcode", None)
            rec["sqlstate"] = code
            rec["msg"] = first_line(e)
            if code == "40P01":
                # the circle the detector saw (who waits for whom)
                rec["detail"] = getattr(getattr(e, "diag", None), "message_detail", None)
            if rec["calls"] and "t_ret" not in rec["calls"][-1]:
                rec["calls"][-1]["t_ret"] = time.time()
                rec["calls"][-1]["sqlstate"] = code
            gone = self.conn is None or self.conn.closed or code in ("57P01", "57P02", "57P03") \
                or isinstance(e, (psycopg2.OperationalError, psycopg2.InterfaceError)) and code is None
            rec["outcome"] = "conn_lost" if gone else "failed"
            if gone:
                self._drop()
            else:
                try:
                    with self.conn.cursor() as cur:
                        cur.execute("ROLLBACK")
                except psycopg2.Error:
                    self._drop()
        self.state = "idle"
        rec["stage"] = stage
        rec["t1"] = time.time()
        r.record_dl(rec)


def _cycle(victim, recs):
    """A circle of waits through victim at its 40P01 (time te): a list of
    client labels, or None.  X waits for Y when X's lock call on name p
    spans te and Y holds p at te (granted before te, transaction ended
    after te), with SLACK_S either way."""
    te = victim["calls"][-1]["t_ret"]
    lo, hi = te - SLACK_S, te + SLACK_S

    def waits(x):
        if x is victim:
            return [victim["calls"][-1]["name"]]
        return [c["name"] for c in x["calls"]
                if c["t_call"] <= hi and c.get("t_ret", x["t1"]) >= lo]

    def holds(y, p):
        t = y["held"].get(p)
        return t is not None and t <= hi and y["t1"] >= lo

    live = [x for x in recs if x["t0"] <= hi and x["t1"] >= lo]
    # a path from victim back to victim (depth-first over waits-for)
    stack = [(victim, [victim["client"]])]
    seen = set()
    while stack:
        x, path = stack.pop()
        for p, y in [(p, y) for p in waits(x) for y in live]:
            if y is x or not holds(y, p):
                continue
            if y is victim:
                return path
            if id(y) not in seen:
                seen.add(id(y))
                stack.append((y, path + [y["client"]]))
    return None


def check(recs, faults, run):
    """(figures, anomalies, report lines) of the deadlock workload."""
    fig = collections.OrderedDict()
    anomalies, lines = [], []
    if not recs:
        return fig, anomalies, lines
    t0 = run["t_start"]
    dl_ms = run.get("deadlock_timeout_s", 1.0)
    fault_lead = run.get("session_timeout_s", 4) + run.get("connect_timeout_s", 2)
    fault_ts = sorted(f["t"] for f in faults if f["action"] in ("inject", "heal", "error"))
    by_group = collections.defaultdict(list)
    for x in recs:
        by_group[x["group"]].append(x)
    for g in ("cyclic", "control"):
        rs = by_group.get(g, [])
        fig["dl_%s_attempts" % g] = len(rs)
        fig["dl_%s_committed" % g] = sum(1 for x in rs if x.get("outcome") == "committed")
        fig["dl_%s_out_of_order" % g] = sum(1 for x in rs if not x["in_order"])
        fig["dl_%s_40P01" % g] = sum(1 for x in rs if x.get("sqlstate") == "40P01")
        fig["dl_%s_failures" % g] = dict(sorted(collections.Counter(
            "%s:%s" % (x["stage"], x.get("sqlstate") or x["outcome"]) for x in rs
            if x.get("outcome") != "committed").items()))
    # (1) every 40P01 of the cyclic group closes a circle of waits
    unjust, just = [], 0
    cyc = by_group.get("cyclic", [])
    for x in cyc:
        if x.get("sqlstate") != "40P01":
            continue
        if x["stage"] != "lock" or not x["calls"]:
            unjust.append((x, "40P01 outside a lock call"))
            continue
        path = _cycle(x, cyc)
        if path is None:
            unjust.append((x, "no circle of waits at its error"))
        else:
            just += 1
    fig["dl_40P01_justified"] = just
    fig["dl_unjustified"] = len(unjust)
    for x, why in unjust[:10]:
        c = x["calls"][-1] if x["calls"] else {}
        lines.append("DEADLOCK UNJUSTIFIED: %s pid %s names %s, 40P01 on %s at %s (%s): %s DETAIL: %s"
                     % (x["client"], x["pid"], x["names"], c.get("name"),
                        "%+.3fs" % (c.get("t_ret", x["t1"]) - t0), why, x.get("msg"), x.get("detail")))
    if unjust:
        anomalies.append("%d deadlocks (40P01) of the cyclic group without a circle of waits"
                         % len(unjust))
    # the control group never waits in a circle; client.py's one-name sections neither
    ctl = [x for x in by_group.get("control", []) if x.get("sqlstate") == "40P01"]
    fig["dl_control"] = len(ctl)
    for x in ctl[:10]:
        lines.append("DEADLOCK IN THE CONTROL GROUP: %s pid %s names %s at %s: %s DETAIL: %s"
                     % (x["client"], x["pid"], x["names"], "%+.3fs" % (x["t1"] - t0), x.get("msg"),
                        x.get("detail")))
    if ctl:
        anomalies.append("%d deadlocks (40P01) in the control group (names taken in sorted order)"
                         % len(ctl))
    # (2) circles are broken: no cyclic wait much past deadlock_timeout,
    # unless a fault came near it
    bound = dl_ms + WAIT_BOUND_S
    slow, faulted, wmax = [], 0, 0.0
    for x in cyc:
        for c in x["calls"]:
            took = c.get("t_ret", x["t1"]) - c["t_call"]
            wmax = max(wmax, took)
            if took <= bound and c.get("sqlstate") != "55P03":
                continue
            lo, hi = c["t_call"] - fault_lead, c.get("t_ret", x["t1"])
            i = bisect.bisect_left(fault_ts, lo)
            if i < len(fault_ts) and fault_ts[i] <= hi:
                faulted += 1
            else:
                slow.append((took, x, c))
    fig["dl_wait_max_s"] = round(wmax, 2)
    fig["dl_wait_bound_s"] = round(bound, 2)
    fig["dl_slow_waits_near_faults"] = faulted
    fig["dl_slow_waits"] = len(slow)
    for took, x, c in sorted(slow, key=lambda s: -s[0])[:10]:
        lines.append("DEADLOCK NOT BROKEN: %s pid %s names %s waited %.2fs for %s from %s (%s)"
                     % (x["client"], x["pid"], x["names"], took, c["name"],
                        "%+.3fs" % (c["t_call"] - t0), c.get("sqlstate") or "granted"))
    if slow:
        anomalies.append("%d cyclic-group lock waits longer than deadlock_timeout + %ds (or timed"
                         " out) with no fault near (max %.1fs)"
                         % (len(slow), WAIT_BOUND_S, slow and max(s[0] for s in slow)))
    hangs = [x for x in recs if x.get("sqlstate") == "57014"
             and "statement timeout" in (x.get("msg") or "")]
    fig["dl_hangs"] = len(hangs)
    if hangs:
        anomalies.append("%d deadlock-workload statements hit statement_timeout (first: %s at %s)"
                         % (len(hangs), hangs[0]["client"], "%+.3fs" % (hangs[0]["t0"] - t0)))
    # progress: a committed transaction of every client in the quiet period
    tq, te = run.get("t_quiet"), run.get("t_quiet_end")
    if tq is not None and te is not None:
        per = collections.Counter(x["client"] for x in recs if x.get("outcome") == "committed"
                                  and x["t0"] >= tq and x["t1"] <= te)
        labels = sorted(set(run.get("dl_clients", [])) | set(x["client"] for x in recs))
        fig["dl_quiet_committed"] = {c: per.get(c, 0) for c in labels}
        stuck = [c for c in labels if per.get(c, 0) < 1]
        if stuck:
            anomalies.append("deadlock workload: no committed transaction in the quiet period: %s"
                             % ", ".join(stuck))
    return fig, anomalies, lines
