"""campaign_client.py - the campaign clients of a fault run.

N campaign clients on each cluster stand for leader of one name, CAMPAIGN,
and record each leadership in the history table camp_history of their
cluster, in the transaction that leads.  Each attempt (0 to 0.8 s apart, so
that a try finds nobody in line now and then) is one of three kinds:

    BEGIN;                                              -- kind "wait" (half of them)
    SELECT zk_campaign('fault-camp', <0.5 to 2.5 s>);  -- the token; 55P03 when it times out
    INSERT INTO camp_history (..., token, started) VALUES (..., clock_timestamp()) RETURNING id;
    SELECT pg_sleep(hold);        -- sometimes longer than the session timeout
    UPDATE camp_history SET ended = clock_timestamp() WHERE id = ...;
    COMMIT;                       -- fails (40001) when the leadership was lost meanwhile

    kind "try": SELECT zk_try_campaign('fault-camp') (false: ROLLBACK, refused),
    then the token from zk_campaign_token (NULL, the session not fresh: ROLLBACK);

    kind "session": SELECT zk_session_campaign('fault-camp', <timeout>) in the
    transaction, the same body, then SELECT zk_campaign_token('fault-camp')
    after the UPDATE (a session-scope campaign does not decide COMMIT: the
    token must still be the one it got, else ROLLBACK; 40001 when it was
    lost), COMMIT, and SELECT zk_resign('fault-camp') after it (a
    connection whose resign failed is dropped, which withdraws).

In the control run (--control) the clients do not campaign: the checker must
then find overlapping leaderships.  So each cluster's camp_history holds
exactly the committed leaderships.  Both clusters run on this machine, so
their clock_timestamp() compare.  The verdict (check()):

  - two committed spans of both clusters that overlap in time (two leaders
    at one instant; spans that touch do not overlap);
  - a span whose token is not larger than the token of a span that started
    before it (the same token only for the same backend: a stacked
    candidacy);
  - a cluster without a committed span begun in the quiet period (no
    progress);
  - a statement that ran into statement_timeout (a hang);
  - a zk_campaign or zk_session_campaign with a timeout that took longer
    than timeout + zklock.connect_timeout + 2 s to lead or fail.

Every attempt's outcome goes to camp.jsonl through run.record_campaign.
"""

import time

import psycopg2

from pgthread import PgThread, first_line

CAMPAIGN = "fault-camp"
SLOW_CALL_SLACK_S = 2.0


class CampaignClient(PgThread):
    def __init__(self, run, cluster, idx, seed):
        super().__init__(run, cluster, "camp%d%s" % (idx, cluster.name), seed)
        self.idx = idx
        # read by the nemesis, which cancels and terminates these clients too
        self.state = "idle"
        self.probed = False

    def run(self):
        # a pause between attempts (0.4 s on average) leaves the
        # election without a candidate now and then, when a try can
        # lead: four clients that always stand would refuse every try
        self.loop(lambda: self.rnd.uniform(0, 0.8))

    def one(self):
        r = self.run_
        rnd = self.rnd
        x = rnd.random()
        kind = "wait" if x < 0.5 else "try" if x < 0.75 else "session"
        timeout = round(rnd.uniform(0.5, 2.5), 2)
        long_span = not r.quiet.is_set() and rnd.random() < 0.05
        hold = rnd.uniform(*r.long_hold) if long_span else rnd.uniform(0.02, 0.2)
        rec = {"t0": time.time(), "cluster": self.cluster.name, "client": self.label,
               "pid": self.pid, "kind": kind, "long": long_span, "quiet": r.quiet.is_set()}
        if kind != "try" and not r.control:
            rec["timeout"] = timeout
        stage = "begin"
        self.state = "busy"
        try:
            with self.conn.cursor() as cur:
                cur.execute("BEGIN")
                stage = "campaign"
                rec["t_call"] = time.time()
                token = None
                if r.control:
                    cur.execute("SELECT true")      # the control run: no campaign
                    got = cur.fetchone()[0]
                elif kind == "try":
                    cur.execute("SELECT zk_try_campaign(%s)", (CAMPAIGN,))
                    got = cur.fetchone()[0]
                    if got:
                        cur.execute("SELECT zk_campaign_token(%s)", (CAMPAIGN,))
                        token = cur.fetchone()[0]
                else:
                    func = "zk_campaign" if kind == "wait" else "zk_session_campaign"
                    cur.execute("SELECT %s(%%s, %%s::interval)" % func,
                                (CAMPAIGN, "%gs" % timeout))
                    token = cur.fetchone()[0]
                    got = True
                rec["t_led"] = time.time()
                rec["token"] = token
                if not got:
                    cur.execute("ROLLBACK")
                    rec["outcome"] = "refused"
                elif token is None and not r.control:
                    # led, but the session was not fresh a moment later
                    cur.execute("ROLLBACK")
                    rec["outcome"] = "no_token"
                else:
                    stage = "body"
                    self.state = "leading"
                    cur.execute("INSERT INTO camp_history (cluster, client, pid, kind, token, started)"
                                " VALUES (%s, %s, pg_backend_pid(), %s, %s, clock_timestamp())"
                                " RETURNING id", (self.cluster.name, self.label, kind, token))
                    hid = cur.fetchone()[0]
                    cur.execute("SELECT pg_sleep(%s)", (hold,))
                    cur.execute("UPDATE camp_history SET ended = clock_timestamp() WHERE id = %s",
                                (hid,))
                    still = token
                    if kind == "session" and not r.control:
                        # a session-scope campaign is not checked at COMMIT:
                        # it must still lead after the span's end
                        stage = "check"
                        cur.execute("SELECT zk_campaign_token(%s)", (CAMPAIGN,))
                        still = cur.fetchone()[0]
                    if still != token:
                        cur.execute("ROLLBACK")
                        rec["outcome"] = "not_leading"
                        rec["token_end"] = still
                    else:
                        stage = "commit"
                        self.state = "committing"
                        cur.execute("COMMIT")
                        rec["outcome"] = "committed" if cur.statusmessage == "COMMIT" else "rolled_back"
        except (psycopg2.Error, AttributeError) as e:
            code = getattr(e, "pgcode", None)
            rec["sqlstate"] = code
            rec["msg"] = first_line(e)
            rec["outcome"] = "failed"
            if self.conn is None or self.conn.closed or code in ("57P01", "57P02", "57P03"):
                rec["outcome"] = "conn_lost"
                self._drop()
            try:
                with self.conn.cursor() as cur:
                    cur.execute("ROLLBACK")
            except (psycopg2.Error, AttributeError):
                self._drop()
        rec["stage"] = stage
        rec["t1"] = time.time()
        if kind == "session" and not r.control and self.conn is not None:
            # let go of the session-scope candidacy (also after a failure);
            # when that fails, the connection goes, and its candidacy with it
            try:
                with self.conn.cursor() as cur:
                    cur.execute("SELECT zk_resign(%s)", (CAMPAIGN,))
                    rec["resigned"] = cur.fetchone()[0]
            except (psycopg2.Error, AttributeError) as e:
                rec["resign_error"] = getattr(e, "pgcode", None) or first_line(e)
                self._drop()
        self.state = "idle"
        r.record_campaign(rec)


def check(spans, recs, clusters, t_quiet, connect_timeout_s):
    """(figures, anomalies): spans are the committed rows of every cluster's
    camp_history (started, ended as epoch seconds), recs the attempts
    (camp.jsonl), clusters the names of the clusters."""
    fig = {"camp_spans": len(spans), "camp_overlaps": 0, "camp_token_inversions": 0,
           "camp_attempts": len(recs),
           "camp_outcomes": {}, "camp_timeouts": 0, "camp_lost_at_commit": 0,
           "camp_lost": 0, "camp_quiet_spans": {c: 0 for c in clusters},
           "camp_kinds": {}, "camp_hangs": 0, "camp_slow_calls": 0, "camp_call_max_s": 0}
    anomalies = []
    for x in recs:
        fig["camp_outcomes"][x.get("outcome")] = fig["camp_outcomes"].get(x.get("outcome"), 0) + 1
    fig["camp_timeouts"] = sum(1 for x in recs if x.get("sqlstate") == "55P03")
    fig["camp_lost_at_commit"] = sum(1 for x in recs if x.get("stage") == "commit"
                                     and x.get("sqlstate") == "40001")
    fig["camp_lost"] = sum(1 for x in recs if x.get("sqlstate") == "40001")
    ok = []
    for s in spans:
        if s.get("started") is None or s.get("ended") is None:
            anomalies.append("a committed campaign span without both ends: %s" % s)
            continue
        ok.append(s)
        fig["camp_kinds"][s.get("kind")] = fig["camp_kinds"].get(s.get("kind"), 0) + 1
        if s["started"] >= t_quiet and s["cluster"] in fig["camp_quiet_spans"]:
            fig["camp_quiet_spans"][s["cluster"]] += 1
    ok.sort(key=lambda s: (s["started"], s["ended"]))

    def span_str(s):
        return "%s pid %s %s token %s %.3f-%.3f" % (s["client"], s["pid"], s.get("kind"),
                                                     s.get("token"), s["started"], s["ended"])
    # two leaders at once: a span that starts before an earlier one ended
    active = []
    first = []
    for s in ok:
        active = [a for a in active if a["ended"] > s["started"]]
        for a in active:
            fig["camp_overlaps"] += 1
            if len(first) < 3:
                first.append("%s and %s" % (span_str(a), span_str(s)))
        active.append(s)
    if first:
        anomalies.append("%d pairs of leaders of campaign %r at once (first: %s)"
                         % (fig["camp_overlaps"], CAMPAIGN, "; ".join(first)))
    # fencing tokens grow with the leaderships' starts
    best = None
    first = []
    for s in ok:
        if s.get("token") is None:
            continue
        if best is not None and (s["token"] < best["token"] or
                                 (s["token"] == best["token"] and s["pid"] != best["pid"])):
            fig["camp_token_inversions"] += 1
            if len(first) < 3:
                first.append("%s after %s" % (span_str(s), span_str(best)))
        if best is None or s["token"] > best["token"]:
            best = s
    if first:
        anomalies.append("%d campaign spans whose token is not above an earlier span's (first: %s)"
                         % (fig["camp_token_inversions"], "; ".join(first)))
    hangs = [x for x in recs if x.get("sqlstate") == "57014"
             and "statement timeout" in (x.get("msg") or "")]
    fig["camp_hangs"] = len(hangs)
    if hangs:
        anomalies.append("%d campaign statements hit statement_timeout (first: %s at %.3f)"
                         % (len(hangs), hangs[0]["client"], hangs[0]["t0"]))
    # a campaign call with a timeout ends in bounded time
    slow = []
    for x in recs:
        if x.get("timeout") is None or "t_call" not in x:
            continue
        end = x.get("t_led")
        if end is None:
            if x.get("stage") != "campaign":
                continue
            end = x["t1"]
        took = end - x["t_call"]
        fig["camp_call_max_s"] = max(fig["camp_call_max_s"], round(took, 2))
        if took > x["timeout"] + connect_timeout_s + SLOW_CALL_SLACK_S:
            slow.append((took, x))
    fig["camp_slow_calls"] = len(slow)
    if slow:
        took, x = max(slow, key=lambda y: y[0])
        anomalies.append("%d campaign calls took longer than timeout + connect_timeout + %gs"
                         " (worst: %s %s timeout %ss took %.2fs, %s %s)"
                         % (len(slow), SLOW_CALL_SLACK_S, x["client"], x["kind"], x["timeout"],
                            took, x["outcome"], x.get("sqlstate") or ""))
    if recs:
        idle = [c for c, n in sorted(fig["camp_quiet_spans"].items()) if n == 0]
        if idle:
            anomalies.append("no campaign span committed in the quiet period on %s" % ", ".join(idle))
    return fig, anomalies
