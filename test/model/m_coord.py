"""m_coord.py - reference models of the counters and of the SQL sessions'
campaigns, for the exact mode of the model-based tester (the concurrent
mode's checks of both are in conc.py).

counter   zk_counter_add returns the value before plus its delta (no add
          lost, none counted twice), whoever added before it (sessions of
          both clusters, kazoo's Counter); zk_counter_get reads it;
          zk_counter_set is a compare-and-set by value; zk_counter_drop
          answers whether there was a node and starts the counter again from
          0; a sum beyond bigint fails with 22003 and writes nothing; data
          another client wrote that is not a number fails every call (XX001)
          until the counter is dropped or written by a client; ROLLBACK
          changes nothing of it.  ZooKeeper holds exactly the model's value.
campaign  one leader of a name at a time (a SQL session or kazoo's Lock on
          the same path, kazoo's Election layout); a try leads when nobody
          leads and nobody waits, waiters lead in the order they came, a
          wait times out only when the model says someone else leads; every
          new leadership's token is above every earlier one, a campaign
          stacked on a candidacy returns its token; zk_campaign_token is the
          token of the session's leadership, NULL otherwise; zk_resign lets
          go of both scopes and answers whether the session stood;
          zk_leader_wait returns at once when the token it is given is not
          the leader's, the next leader's token (or NULL) when the leader
          changes while it waits, and the known token when its timeout runs
          out; zk_campaign_candidates and ZooKeeper's children list the
          leader and the waiting candidates, nobody else.
"""

from driver import FAST, kazoo_acquire, kazoo_release_all
from m_more import TMO, Base, ScopedHolds, tmo_choice

BIGINT_MAX = 2 ** 63 - 1
GARBAGE = b"12 apples"


# ---------------------------------------------------------------- counter

class CounterModel(Base):
    name = "counter"
    kazoo = True
    ROOT = "/zklock/counters/"

    def __init__(self, h):
        super().__init__(h)
        self.names = self.model_names("n")
        self.val = {n: 0 for n in self.names}
        self.exists = {n: False for n in self.names}
        self.garbage = {n: False for n in self.names}

    def gen(self, r, s):
        i = r.randrange(len(self.names))
        x = r.random()
        if x < 0.5:
            return {"k": "add", "n": i, "d": r.choice([1, 1, 1, 1, 2, -3, 0, 7, BIGINT_MAX // 2])}
        if x < 0.65:
            return {"k": "get", "n": i}
        if x < 0.85:
            return {"k": "set", "n": i, "v": r.choice([r.randrange(-50, 50), BIGINT_MAX - 2]),
                    "right": r.random() < 0.7}
        return {"k": "drop", "n": i}

    def gen_k(self, r, k):
        i = r.randrange(len(self.names))
        name = self.names[i]
        x = r.random()
        d = r.choice([1, 1, 5, -2])
        # kazoo's Counter cannot read what is not a number (ValueError), and
        # writes a sum beyond bigint (Python's ints): not what is tested here
        if x < 0.7 and not self.garbage[name] and -BIGINT_MAX <= self.val[name] + d <= BIGINT_MAX:
            return {"k": "kadd", "n": i, "d": d}
        if x < 0.85:
            return {"k": "kgarbage", "n": i}
        return {"k": "kwrite", "n": i, "v": r.randrange(0, 1000)}

    def applicable_k(self, op, k):
        name = self.names[op["n"]]
        return op["k"] != "kadd" or (not self.garbage[name] and
                                     -BIGINT_MAX <= self.val[name] + op["d"] <= BIGINT_MAX)

    def path(self, name):
        return self.ROOT + name

    def execute(self, s, op):
        h = self.h
        s.touched.add(self.name)
        name = op["nm"] = self.names[op["n"]]
        k = op["k"]
        if k == "add":
            h.fast_call(s, op, "SELECT zk_counter_add(%s, %s)", (name, op["d"]), self.done_add)
        elif k == "get":
            h.fast_call(s, op, "SELECT zk_counter_get(%s)", (name,), self.done_get)
        elif k == "set":
            exp = self.val[name] if op["right"] else \
                (self.val[name] + 1 if self.val[name] < BIGINT_MAX else self.val[name] - 1)
            op["exp"] = exp
            h.fast_call(s, op, "SELECT zk_counter_set(%s, %s, %s)", (name, op["v"], exp), self.done_set)
        elif k == "drop":
            h.fast_call(s, op, "SELECT zk_counter_drop(%s)", (name,), self.done_drop)

    def refused_garbage(self, s, op, r):
        """A call on a counter holding data that is not a number: XX001."""
        if r.ok or r.code != "XX001":
            self.h.anomaly("counter-garbage", "%s by %s on a counter holding %r: %r (doc/counters.md: XX001)"
                           % (op.get("sql"), s.name, GARBAGE, r))

    def done_add(self, s, op, r, ctx):
        h = self.h
        name = op["nm"]
        if self.garbage[name]:
            return self.refused_garbage(s, op, r)
        want = self.val[name] + op["d"]
        if want > BIGINT_MAX or want < -BIGINT_MAX - 1:
            if r.ok or r.code != "22003":
                h.anomaly("counter-range", "%s by %s with the counter at %d: %r (doc/counters.md: 22003)"
                          % (op.get("sql"), s.name, self.val[name], r))
            return
        if not self.ok_or_unexpected(s, op, r):
            return
        got = r.rows[0][0]
        if got != want:
            h.anomaly("counter-add", "%s by %s returned %s, the model %d (the counter was %d)"
                      % (op.get("sql"), s.name, got, want, self.val[name]))
        self.val[name] = want
        self.exists[name] = True

    def done_get(self, s, op, r, ctx):
        name = op["nm"]
        if self.garbage[name]:
            return self.refused_garbage(s, op, r)
        if not self.ok_or_unexpected(s, op, r):
            return
        if r.rows[0][0] != self.val[name]:
            self.h.anomaly("counter-get", "%s by %s = %s, the model %d" % (op.get("sql"), s.name, r.rows[0][0],
                                                                          self.val[name]))

    def done_set(self, s, op, r, ctx):
        name = op["nm"]
        if self.garbage[name]:
            return self.refused_garbage(s, op, r)
        if not self.ok_or_unexpected(s, op, r):
            return
        want = op["exp"] == self.val[name]
        if bool(r.rows[0][0]) != want:
            self.h.anomaly("counter-set", "%s by %s = %s with the counter at %d" % (op.get("sql"), s.name,
                                                                                     r.rows[0][0], self.val[name]))
        if r.rows[0][0]:
            self.val[name] = op["v"]
            self.exists[name] = True

    def done_drop(self, s, op, r, ctx):
        name = op["nm"]
        if not self.ok_or_unexpected(s, op, r):
            return
        if bool(r.rows[0][0]) != self.exists[name]:
            self.h.anomaly("counter-drop", "%s by %s = %s, the model says the node %s" % (
                op.get("sql"), s.name, r.rows[0][0], "exists" if self.exists[name] else "does not exist"))
        self.val[name] = 0
        self.exists[name] = False
        self.garbage[name] = False

    def execute_k(self, k, op):
        h = self.h
        name = op["nm"] = self.names[op["n"]]
        path = self.path(name)
        if op["k"] == "kadd":
            want = self.val[name] + op["d"]

            def add():
                # a new Counter per add: one made before a drop creates its
                # node only once (doc/counters.md)
                c = k.zk.Counter(path)
                c += op["d"]
                return c.post_value
            got = h.kcall(k, op, add)
            if got is h.KFAIL:
                return
            if got != want:
                h.anomaly("counter-add", "kazoo Counter += %d by %s made %s, the model %d"
                          % (op["d"], k.name, got, want))
            self.val[name] = want
            self.exists[name] = True
        else:
            data = GARBAGE if op["k"] == "kgarbage" else str(op["v"]).encode()

            def write():
                k.zk.ensure_path(path)
                k.zk.set(path, data)
                return True
            if h.kcall(k, op, write) is h.KFAIL:
                return
            self.exists[name] = True
            self.garbage[name] = op["k"] == "kgarbage"
            self.val[name] = 0 if self.garbage[name] else op["v"]

    def prepare_expect(self, s):
        # nothing of a counter is transactional: PREPARE is none of its business
        return None

    def zk_check(self):
        from kazoo.exceptions import NoNodeError
        for name in self.names:
            try:
                data, _ = self.h.kz.get(self.path(name))
            except NoNodeError:
                data = None
            if data is None:
                if self.exists[name] or self.val[name] != 0:
                    return "counter %s: no node, the model %d" % (name, self.val[name])
                continue
            if not self.exists[name]:
                return "counter %s: a node (%r), the model none" % (name, data)
            if self.garbage[name]:
                if data != GARBAGE:
                    return "counter %s holds %r, the model %r" % (name, data, GARBAGE)
            elif data != str(self.val[name]).encode() and not (data == b"" and self.val[name] == 0):
                return "counter %s holds %r, the model %d" % (name, data, self.val[name])
        return None


# ---------------------------------------------------------------- campaign

class CampaignModel(ScopedHolds, Base):
    name = "campaign"
    kazoo = True
    ROOT = "/zklock/elections/"

    def __init__(self, h):
        super().__init__(h)
        self.names = self.model_names("v")
        self.holds = {n: {} for n in self.names}      # the leader -> [[scope, level], ...]
        self.tok = {n: None for n in self.names}      # the leader's token (None: nobody leads)
        self.seq = {n: [None] for n in self.names}    # every leader's token in turn, None between
        self.top = {n: 0 for n in self.names}         # the highest token of each name
        self.klock = {}
        self.served = []

    # ---- state
    def leader(self, name):
        for o in self.holds[name]:
            return o
        return None

    def waiters(self, s, name):
        """Other sessions waiting to lead name (their candidacies stand)."""
        return [x for x in self.h.sessions if x is not s and x.pending is not None and
                x.pending.get("r") == self.name and x.pending.get("k") == "take" and x.pending.get("nm") == name]

    def show(self, name):
        ld = self.leader(name)
        w = [x.name for x in sorted(self.waiters(None, name), key=lambda x: x.t0)]
        return "leader %s (token %s), waiting %s" % (getattr(ld, "name", ld), self.tok[name], w or "none")

    def lead(self, name, owner, tok, what):
        if tok is None or tok <= self.top[name]:
            self.h.anomaly("campaign-token", "%s: a new leadership of %s with token %s, not above %s"
                           % (what, name, tok, self.top[name]))
        if tok is not None:
            self.top[name] = max(self.top[name], tok)
        self.tok[name] = tok
        self.seq[name].append(tok)

    def gone(self, name):
        if not self.holds[name] and self.tok[name] is not None:
            self.tok[name] = None
            self.seq[name].append(None)

    # ---- generation
    def gen(self, r, s):
        i = r.randrange(len(self.names))
        x = r.random()
        if x < 0.45:
            scope = "xact" if (s.xact and r.random() < 0.7) else "sess"
            op = {"k": "take", "n": i, "sc": scope, "w": r.choice(["try", "wait", "wait"])}
            if op["w"] == "wait":
                op["t"] = tmo_choice(r)
                if op["t"] in ("30s", None) and r.random() < 0.2:
                    op["st"] = 300
            return op
        if x < 0.6:
            return {"k": "resign", "n": i}
        if x < 0.68:
            return {"k": "token", "n": i}
        if x < 0.88:
            return {"k": "observe", "n": i, "known": r.choice(["leader", "leader", "null", "stale"]),
                    "t": r.choice(["0", "200ms", "30s", "30s"])}
        return {"k": "candidates", "n": i}

    def gen_k(self, r, k):
        i = r.randrange(len(self.names))
        lk = self.klock.get((k.idx, i))
        if lk is not None and lk.is_acquired:
            return {"k": "krelease", "n": i}
        return {"k": "kacquire", "n": i, "t": r.choice([0, 0.2])}

    def applicable_k(self, op, k):
        lk = self.klock.get((k.idx, op["n"]))
        held = lk is not None and lk.is_acquired
        return held if op["k"] == "krelease" else not held

    # ---- SQL calls
    def execute(self, s, op):
        h = self.h
        s.touched.add(self.name)
        name = op["nm"] = self.names[op["n"]]
        k = op["k"]
        if k == "take":
            held = s in self.holds[name]
            grant = held or (self.leader(name) is None and not self.waiters(s, name))
            if op["w"] == "try":
                fn = "zk_try_campaign" if op["sc"] == "xact" else "zk_try_session_campaign"
                h.fast_call(s, op, "SELECT %s(%%s), zk_campaign_token(%%s)" % fn, (name, name),
                            self.done_take, {"grant": grant})
            else:
                fn = "zk_campaign" if op["sc"] == "xact" else "zk_session_campaign"
                h.wait_call(s, op, "SELECT %s(%%s, %%s::interval)" % fn, (name, op["t"]),
                            not grant, TMO[op["t"]], self.done_take)
        elif k == "resign":
            h.fast_call(s, op, "SELECT zk_resign(%s)", (name,), self.done_resign)
        elif k == "token":
            h.fast_call(s, op, "SELECT zk_campaign_token(%s)", (name,), self.done_token)
        elif k == "observe":
            cur = self.tok[name]
            known = {"leader": cur, "null": None, "stale": 1}[op["known"]]
            op["kv"] = known
            op["i"] = len(self.seq[name])
            h.wait_call(s, op, "SELECT zk_leader_wait(%s, %s, %s::interval)", (name, known, op["t"]),
                        known == cur, TMO[op["t"]], self.done_observe)
        elif k == "candidates":
            h.fast_call(s, op, "SELECT count(*), count(*) FILTER (WHERE state = 'held') "
                        "FROM zk_campaign_candidates(%s)", (name,), self.done_candidates)

    def done_take(self, s, op, r, ctx):
        h = self.h
        name = op["nm"]
        held = s in self.holds[name]
        ld = self.leader(name)
        grant = held or ld is None
        if not r.ok:
            if r.code in ("55P03", "57014"):
                self.timed_out(s, op, r, ctx, op.get("sql"), grant and r.code == "55P03"
                               and not self.waiters(s, name))
                return
            h.unexpected(s, op, r)
            return
        if op["w"] == "try":
            got, tok = r.rows[0]
            grant = ctx["grant"]
        else:
            got, tok = True, r.rows[0][0]
        if got and not grant:
            h.anomaly("campaign-two-leaders", "%s by %s led while %s" % (op.get("sql"), s.name, self.show(name)))
        if not got and grant:
            h.anomaly("campaign-refused", "%s by %s returned false while nobody leads or waits (%s)"
                      % (op.get("sql"), s.name, self.show(name)))
        if not got:
            if tok is not None:
                h.anomaly("campaign-token", "%s by %s: false, with zk_campaign_token %s" % (op.get("sql"), s.name, tok))
            return
        if held:
            if tok != self.tok[name]:
                h.anomaly("campaign-token", "%s by %s stacked on its candidacy returned token %s, its token is %s"
                          % (op.get("sql"), s.name, tok, self.tok[name]))
        else:
            if ld is not None and ld is not s:
                # counted above; keep one leader in the model
                self.holds[name].clear()
            self.lead(name, s, tok, "%s by %s" % (op.get("sql"), s.name))
            if ctx.get("expect_wait") and ctx.get("limit") is None:
                self.served.append((s, s.t0, name))
        self.holds[name].setdefault(s, []).append([op["sc"], s.level if op["sc"] == "xact" else 0])

    def after_settle(self):
        """Waiters lead in the order they came (their nodes' sequence)."""
        for (s, t0, name) in self.served:
            for x in self.waiters(s, name):
                if x.t0 < t0:
                    self.h.anomaly("campaign-waiter-order", "%s led %s before %s, which waits since earlier"
                                   % (s.name, name, x.name))
        self.served = []

    def done_resign(self, s, op, r, ctx):
        if not self.ok_or_unexpected(s, op, r):
            return
        name = op["nm"]
        stood = s in self.holds[name]
        if bool(r.rows[0][0]) != stood:
            self.h.anomaly("campaign-resign", "%s by %s = %s, the model %s" % (op.get("sql"), s.name,
                                                                                 r.rows[0][0], stood))
        self.holds[name].pop(s, None)
        self.gone(name)

    def done_token(self, s, op, r, ctx):
        if not self.ok_or_unexpected(s, op, r):
            return
        name = op["nm"]
        want = self.tok[name] if s in self.holds[name] else None
        if r.rows[0][0] != want:
            self.h.anomaly("campaign-token", "%s by %s = %s, the model %s (%s)" % (op.get("sql"), s.name,
                                                                                  r.rows[0][0], want, self.show(name)))

    def done_observe(self, s, op, r, ctx):
        h = self.h
        name = op["nm"]
        if not r.ok:
            if r.code == "57014":      # cancelled, or statement_timeout
                return
            h.unexpected(s, op, r)
            return
        got = r.rows[0][0]
        known = op["kv"]
        if got == known:
            if self.tok[name] != known:
                h.anomaly("campaign-observe", "%s by %s returned the token it was given while %s"
                          % (op.get("sql"), s.name, self.show(name)))
            elif not ctx.get("expect_wait"):
                h.anomaly("harness", "observe: known == got without a wait")
            elif ctx.get("early"):
                h.anomaly("campaign-observe-early", "%s by %s returned after %.3fs" % (op.get("sql"), s.name,
                                                                                     r.elapsed))
            return
        # a leader it was not given: one of those since the call began, or
        # one whose campaign answered in the same settling round (its
        # answer is taken in after this one)
        since = self.seq[name][op["i"] - 1:]
        since += [r_.rows[0][-1] for (op_, r_) in h.answered_meanwhile(s)
                  if r_.ok and op_.get("r") == self.name and op_.get("k") == "take" and op_.get("nm") == name]
        if got not in since:
            h.anomaly("campaign-observe", "%s by %s returned %s, the leaders since the call began %s (%s)"
                      % (op.get("sql"), s.name, got, since, self.show(name)))

    def done_candidates(self, s, op, r, ctx):
        if not self.ok_or_unexpected(s, op, r):
            return
        name = op["nm"]
        n, held = r.rows[0]
        lead = 1 if self.leader(name) is not None else 0
        want = lead + len(self.waiters(s, name))
        if held != lead or n != want:
            self.h.anomaly("campaign-candidates", "%s by %s: %d candidates (%d held), the model %d (%d) (%s)"
                           % (op.get("sql"), s.name, n, held, want, lead, self.show(name)))

    def due(self, s, op):
        name = op["nm"]
        if op["k"] == "observe":
            return self.tok[name] != op["kv"]
        if op["k"] != "take" or self.leader(name) is not None:
            return False
        line = sorted(self.waiters(None, name), key=lambda x: x.t0)
        return bool(line) and line[0] is s

    # ---- kazoo
    def execute_k(self, k, op):
        h = self.h
        name = op["nm"] = self.names[op["n"]]
        path = self.ROOT + name
        if op["k"] == "kacquire":
            grant = self.leader(name) is None and not self.waiters(None, name)
            # a new Lock per acquisition: one made before creates its path once
            lk = self.klock[(k.idx, op["n"])] = k.zk.Lock(path, k.name)
            got = h.kcall(k, op, lambda: kazoo_acquire(lk, op["t"]), bound=FAST + op["t"])
            if got is h.KFAIL:
                return
            if got and not grant:
                h.anomaly("campaign-two-leaders", "kazoo Lock on %s by %s acquired while %s" % (path, k.name,
                                                                                                self.show(name)))
            if not got and grant:
                h.anomaly("campaign-refused", "kazoo Lock on %s by %s refused while nobody leads" % (path, k.name))
            if got:
                st = k.zk.exists(path + "/" + lk.node)
                self.holds[name].clear()
                self.holds[name]["kazoo-" + k.name] = [["sess", 0]]
                self.lead(name, "kazoo-" + k.name, st.czxid if st else None, "kazoo %s" % k.name)
        else:
            lk = self.klock[(k.idx, op["n"])]
            h.kcall(k, op, lk.release)
            self.holds[name].pop("kazoo-" + k.name, None)
            self.gone(name)

    # ---- transactions (ScopedHolds)
    def holds_of(self, name):
        return self.holds[name]

    def owner_gone(self, name):
        self.gone(name)

    def zk_check(self):
        for name in self.names:
            cs = [c for c in self.h.children(self.ROOT + name) if "__lock__" in c]
            want = (1 if self.leader(name) is not None else 0) + len(self.waiters(None, name))
            if len(cs) != want:
                return "campaign %s: %d candidates in ZooKeeper, the model %d (%s)" % (name, len(cs), want,
                                                                                     self.show(name))
        return None

    def final(self, s0):
        h = self.h
        for s in h.sessions:
            for name in self.names:
                if s in self.holds[name] and s.pending is None:
                    h.fast_call(s, {"k": "resign", "r": self.name, "nm": name},
                                "SELECT zk_resign(%s)", (name,), self.done_resign)
        kazoo_release_all(h, self.klock.values(), "campaign release")
        for name in self.names:
            for o in [o for o in self.holds[name] if isinstance(o, str)]:
                del self.holds[name][o]
            self.gone(name)


MODELS = {
    "counter": CounterModel,
    "campaign": CampaignModel,
}
