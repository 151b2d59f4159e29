"""history.py - one history of the model-based tester: a few sessions on two
clusters and a few kazoo clients run a random sequence of calls, one
statement at a time from one thread (the exact mode), and every answer is
checked against the reference models of the recipes (m_*.py).

An op is a dict: "k" its kind, "r" its recipe (None for the transaction
control common to all), "s" the session (or "c" the kazoo client) that runs
it, and its arguments.  A history can be replayed from its list of ops
(the shrinker does that); an op that does not apply any more (a COMMIT
outside a transaction, a cancel of a session that waits for nothing) is
skipped.
"""

import collections
import random
import time

from driver import FAST, KClient, Session, log, now

FATAL_KINDS = ("worker-unresponsive", "hung")


class HistoryFatal(Exception):
    pass


class History:
    KFAIL = object()

    def __init__(self, env, seed, steps, ns, setup=None, ops=None, verbose=False):
        self.env = env
        self.seed = seed
        self.steps = steps
        self.ns = ns
        self.rnd = random.Random(seed)
        self.setup = setup or self.gen_setup(self.rnd, env.recipes)
        self.replay = ops
        self.verbose = verbose
        self.ops = []
        self.trace = []
        self.anomalies = []
        self.calls = collections.Counter()
        self.tallies = collections.Counter()   # counted by the models (the run's figures)
        self.fatal = False
        self.ids = 0
        self.prepared = {}        # gid -> cluster label
        self.kz = env.kz
        self.sessions = []
        self.kclients = []
        self.models = []
        self.step_no = 0
        self.t_start = now()

    # ---- setup
    @staticmethod
    def gen_setup(r, recipes):
        n = r.randint(2, 5)
        cl = [r.choice("AB") for _ in range(n)]
        if "A" not in cl:
            cl[0] = "A"
        if "B" not in cl:
            cl[-1] = "B"
        weights = {"queue": 4, "lock": 4, "election": 1}
        pool = [x for x in recipes]
        k = 1 if r.random() < 0.7 or len(pool) < 2 else 2
        chosen = []
        for _ in range(k):
            cand = [x for x in pool if x not in chosen]
            w = [weights.get(x, 2) for x in cand]
            chosen.append(r.choices(cand, w)[0])
        if "election" in chosen:
            chosen = ["election"]      # it restarts workers: alone in its history
        return {"sessions": cl, "kazoo": r.choice([0, 1, 1, 2]), "recipes": sorted(chosen),
                "queues": r.choice([1, 1, 2]), "names": r.choice([1, 1, 2]),
                "max": r.choice([1, 2, 2, 3]), "parties": r.choice([2, 2, 3]),
                "dlq_max": r.choice([1, 2, 3]), "groups": r.choice([2, 3, 4]),
                # the lock's names (m_lock.py; 2 or 3 make circles of waits
                # for the deadlock detector) and whether they are bigint keys
                "lnames": r.choice([1, 2, 2, 3]), "keys": r.random() < 0.3}

    def open(self):
        from model import MODELS
        for i, label in enumerate(self.setup["sessions"]):
            s = Session(i, self.env.cluster(label))
            s.connect()
            self.sessions.append(s)
        self.models = [MODELS[name](self) for name in self.setup["recipes"]]
        self.by_name = {m.name: m for m in self.models}
        if any(getattr(m, "kazoo", False) for m in self.models):
            for i in range(self.setup["kazoo"]):
                self.kclients.append(KClient(i, self.env.zk.hosts))

    def close(self):
        for s in self.sessions:
            s.close()
        for k in self.kclients:
            k.close()

    # ---- recording
    def new_id(self, prefix):
        self.ids += 1
        return "%s%d" % (prefix, self.ids)

    def count(self, recipe, n=1):
        self.calls[recipe] += n

    def anomaly(self, kind, msg):
        self.anomalies.append((kind, msg, self.step_no))
        self.trace.append("      !! %s: %s" % (kind, msg))
        if self.verbose:
            log("ANOMALY %s: %s" % (kind, msg))
        if kind in FATAL_KINDS:
            self.fatal = True

    def unexpected(self, s, op, r):
        self.anomaly("unexpected-error", "%s by %s: %r" % (self.describe(op), s.name, r))

    def note(self, line):
        self.trace.append(line)

    @staticmethod
    def fmt(sql, args):
        if not args:
            return sql
        try:
            return sql % tuple(repr(a) for a in args)
        except (TypeError, ValueError):
            return "%s %r" % (sql, args)

    def describe(self, op):
        return op.get("sql") or op["k"]

    def children(self, path):
        from kazoo.exceptions import NoNodeError
        try:
            return self.kz.get_children(path)
        except NoNodeError:
            return []

    # ---- calls
    def sql(self, s, op, sql, args, wait):
        op["sql"] = self.fmt(sql, args)
        self.count(op.get("r") or "xact")
        r = s.call(sql, args, wait)
        self.note("%4d %s: %s  -> %r" % (self.step_no, s.name, op["sql"], r))
        return r

    def fast_call(self, s, op, sql, args, done, ctx=None):
        """A call that must answer at once (within FAST seconds)."""
        r = self.sql(s, op, sql, args, FAST)
        if r.pending:
            self.anomaly("slow-call", "%s by %s did not answer within %.0fs" % (op["sql"], s.name, FAST))
            r = self.recover(s, more=2.0)
        done(s, op, r, ctx or {})
        self.after(s, op, r)
        return r

    def wait_call(self, s, op, sql, args, would_wait, limit, done):
        """A call that may wait: limit is its timeout in seconds (None: long).
        When the model says it must wait, a short wait is followed to its end
        and a long one left pending (the settling completes it)."""
        ctx = {"expect_wait": would_wait, "limit": limit, "done": done}
        if op.get("st"):
            self.sql(s, {"r": op.get("r")}, "SET statement_timeout = %s", (op["st"],), FAST)
        if not would_wait:
            r = self.sql(s, op, sql, args, FAST)
            if r.pending:
                self.anomaly("slow-call", "%s by %s did not answer within %.0fs although the model says it need not wait"
                             % (op["sql"], s.name, FAST))
                r = self.recover(s)
        else:
            eff = limit
            if op.get("st"):
                eff = op["st"] / 1000.0 if eff is None else min(eff, op["st"] / 1000.0)
            if eff is not None:
                r = self.sql(s, op, sql, args, eff + FAST)
                if r.pending:
                    self.anomaly("wait-overrun", "%s by %s still waits %.1fs after its timeout"
                                 % (op["sql"], s.name, FAST))
                    r = self.recover(s)
                elif eff > 0 and r.elapsed < eff * 0.7 and not r.broken:
                    ctx["early"] = True
            else:
                r = self.sql(s, op, sql, args, 0.3)
                if r.pending:
                    s.pending = op
                    s.pctx = ctx
                    return None
        done(s, op, r, ctx)
        self.after(s, op, r)
        return r

    def kcall(self, k, op, fn, bound=FAST):
        op["sql"] = "kazoo %s %s" % (op["k"], " ".join("%s=%s" % (a, op[a]) for a in sorted(op)
                                                       if a not in ("k", "r", "c", "sql", "oe", "step", "q", "n", "unsure")))
        self.count(op.get("r"))
        t0 = now()
        try:
            v = fn()
        except Exception as e:
            v = e
        el = now() - t0
        self.note("%4d %s: %s  -> %r (%.2fs)" % (self.step_no, k.name, op["sql"], v, el))
        if el > bound:
            self.anomaly("slow-call", "%s by %s took %.2fs" % (op["sql"], k.name, el))
        if isinstance(v, Exception):
            return self._kfail(k, op, v)
        return v

    def _kfail(self, k, op, e):
        from kazoo.exceptions import NoNodeError
        if isinstance(e, NoNodeError) and op.get("r") == "lock" and op["k"] == "kacquire":
            # the lock's node is a container (doc/how-it-works.md): once its
            # last contender is gone ZooKeeper removes it, and a kazoo lock
            # object that created or found it before creates its contender
            # under a path that is no more
            self.anomaly("lock-kazoo-reaped", "%s by %s raised NoNodeError: the lock's container node was "
                         "reaped under a kazoo lock object used before" % (op["sql"], k.name))
            return self.KFAIL
        self.anomaly("kazoo-error", "%s by %s raised %r" % (op["sql"], k.name, e))
        return self.KFAIL

    def recover(self, s, more=8.0):
        """A statement runs longer than it should: wait a little more, then
        cancel it, then end the backend.  Returns its Result."""
        r = s.finish(now() + more)
        if r is not None:
            return r
        self.anomaly("hung", "%s by %s still runs %.0fs later" % (s.sql, s.name, more + FAST))
        try:
            s.cluster.admin_query("SELECT pg_cancel_backend(%s)", (s.pid,))
        except Exception:
            pass
        r = s.finish(now() + 3)
        if r is not None:
            return r
        self.terminate(s, quiet=True)
        from driver import Result
        return Result(broken=True, msg="terminated after hanging")

    def after(self, s, op, r):
        """The transaction side of a completed call."""
        if r.broken:
            self.anomaly("connection-lost", "%s by %s: %r" % (self.describe(op), s.name, r)) \
                if r.code not in ("57P01",) else None
            self.reconnect(s)
            return
        if not r.ok:
            self.error_recovery(s, op)
        elif not s.xact:
            self.tell("on_commit", s)
        if op.get("st"):
            self.sql(s, {"r": op.get("r")}, "SET statement_timeout = 0", None, FAST)

    def error_recovery(self, s, op):
        if not s.xact:
            self.tell("on_rollback", s)
            return
        if op.get("oe") == "rbto" and s.sps:
            lvl = len(s.sps)
            r = self.sql(s, {"r": None}, "ROLLBACK TO SAVEPOINT %s" % s.sps[-1], None, FAST)
            if r.ok:
                self.tell("on_rollback_to", s, lvl)
                return
        r = self.sql(s, {"r": None}, "ROLLBACK", None, FAST)
        s.xact = False
        s.sps = []
        self.tell("on_rollback", s)

    def complete_pending(self, s, r):
        op, ctx = s.pending, s.pctx
        s.pending = None
        s.pctx = None
        self.note("%4d %s: (pending %s)  -> %r" % (self.step_no, s.name, op.get("sql"), r))
        ctx["done"](s, op, r, ctx)
        self.after(s, op, r)

    def terminate(self, s, quiet=False):
        try:
            s.cluster.admin_query("SELECT pg_terminate_backend(%s)", (s.pid,))
        except Exception as e:
            self.anomaly("admin", "pg_terminate_backend: %r" % e)
        if s.pending:
            s.finish(now() + 3)
            s.pending = None
        gone = False
        for _ in range(100):
            try:
                if not s.cluster.admin_query("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (s.pid,)):
                    gone = True
                    break
            except Exception:
                pass
            time.sleep(0.05)
        if not gone and not quiet:
            self.anomaly("hung", "backend %s of %s did not exit within 5s of pg_terminate_backend" % (s.pid, s.name))
        s.close()
        self.reconnect(s)

    def answered_meanwhile(self, s):
        """The (op, Result) of the other pending calls that answered in the
        same settling round as s's (see settle)."""
        return [(op, r) for x, op, r in getattr(self, "finished", []) if x is not s]

    def tell(self, event, *args):
        """Every model hears of event (on_commit, on_rollback ...)."""
        for m in self.models:
            getattr(m, event)(*args)

    def reconnect(self, s):
        """s's backend is gone: the models forget its transaction, and s
        connects again."""
        self.tell("on_terminate", s)
        try:
            s.connect()
        except Exception as e:
            self.anomaly("hung", "cannot reconnect %s: %r" % (s.name, e))

    # ---- generation
    def gen(self):
        r = self.rnd
        ss = self.sessions
        pend = [s for s in ss if s.pending]
        if pend and r.random() < 0.05:
            return {"k": "cancel", "r": None, "t": r.choice(pend).idx}
        if r.random() < 0.015:
            return {"k": "terminate", "r": None, "t": r.choice(ss).idx}
        if self.prepared and r.random() < 0.3:
            gid = r.choice(sorted(self.prepared))
            cand = [s for s in ss if not s.pending and not s.xact and s.cluster.label == self.prepared[gid]]
            if cand:
                return {"k": r.choice(["cprep", "rprep"]), "r": None, "s": r.choice(cand).idx, "gid": gid}
        actors = [s for s in ss if not s.pending]
        kac = [k for k in self.kclients if not k.pending]
        kmodels = [m for m in self.models if getattr(m, "kazoo", False)]
        if kac and kmodels and r.random() < 0.2 * len(kac):
            k = r.choice(kac)
            m = r.choice(kmodels)
            op = m.gen_k(r, k)
            if op is not None:
                op["r"] = m.name
                op["c"] = k.idx
                return op
        if not actors:
            return {"k": "sleep", "r": None, "ms": 200}
        s = r.choice(actors)
        if s.xact and any(getattr(m, "commit_fails", lambda s: None)(s) is not None for m in self.models) \
                and r.random() < 0.4:
            # a transaction whose lock was taken back: often its COMMIT next (40001)
            return {"k": "commit", "r": None, "s": s.idx}
        x = r.random()
        if not s.xact:
            if x < 0.35:
                return {"k": "begin", "r": None, "s": s.idx}
        else:
            if x < 0.09:
                return {"k": "commit", "r": None, "s": s.idx}
            if x < 0.14:
                return {"k": "rollback", "r": None, "s": s.idx}
            if x < 0.19:
                return {"k": "savepoint", "r": None, "s": s.idx}
            if x < 0.23 and s.sps:
                return {"k": "rbto", "r": None, "s": s.idx, "i": r.randrange(len(s.sps))}
            if x < 0.25 and s.sps:
                return {"k": "release", "r": None, "s": s.idx, "i": r.randrange(len(s.sps))}
            if x < 0.28:
                return {"k": "prepare", "r": None, "s": s.idx, "gid": "%s-g%d" % (self.ns, self.step_no)}
        m = r.choice(self.models)
        op = m.gen(r, s)
        if op is None:
            return {"k": "sleep", "r": None, "ms": 10}
        op["r"] = m.name
        op["s"] = s.idx
        op["oe"] = "rbto" if r.random() < 0.5 else "rb"
        return op

    def applicable(self, op):
        k = op["k"]
        if k in ("cancel", "terminate"):
            if op["t"] >= len(self.sessions):
                return False
            return k == "terminate" or self.sessions[op["t"]].pending is not None
        if k == "sleep":
            return True
        if "c" in op:
            if op["c"] >= len(self.kclients) or op["r"] not in self.by_name:
                return False
            k_ = self.kclients[op["c"]]
            m = self.by_name[op["r"]]
            return k_.pending is None and m.applicable_k(op, k_)
        if op["s"] >= len(self.sessions):
            return False
        s = self.sessions[op["s"]]
        if s.pending is not None:
            return False
        if op.get("r") is not None:
            if op["r"] not in self.by_name:
                return False
            m = self.by_name[op["r"]]
            return getattr(m, "applicable", lambda s, op: True)(s, op)
        if k == "begin":
            return not s.xact
        if k in ("commit", "rollback", "savepoint", "prepare"):
            return s.xact
        if k in ("rbto", "release"):
            return s.xact and op["i"] < len(s.sps)
        if k in ("cprep", "rprep"):
            return not s.xact and self.prepared.get(op["gid"]) == s.cluster.label
        return True

    # ---- execution
    def execute(self, op):
        k = op["k"]
        if k == "sleep":
            time.sleep(op["ms"] / 1000.0)
            return
        if k in ("cancel", "terminate"):
            t = self.sessions[op["t"]]
            fn = "pg_%s_backend" % k
            op["sql"] = "%s(%s)" % (fn, t.name)
            self.count("xact")
            self.note("%4d admin: SELECT %s(%s)  [%s]" % (self.step_no, fn, t.pid, t.name))
            if k == "terminate":
                self.terminate(t)
                return
            # what the model said of the call when the cancel went: a cancel
            # may win the race with a grant that falls due just after it
            if t.pending is not None and t.pctx is not None:
                m = self.model_of(t.pending)
                if hasattr(m, "due_at_cancel"):
                    t.pctx["due_at_cancel"] = m.due_at_cancel(t, t.pending, t.pctx)
            try:
                t.cluster.admin_query("SELECT pg_cancel_backend(%s)", (t.pid,))
            except Exception as e:
                self.anomaly("admin", "pg_cancel_backend: %r" % e)
            r = t.finish(now() + FAST + 1)
            if r is None:
                self.anomaly("cancel-ignored", "%s did not end within %.0fs of pg_cancel_backend" % (t.sql, FAST + 1))
                r = self.recover(t)
            if t.pending is not None:
                self.complete_pending(t, r)
            return
        if "c" in op:
            kc = self.kclients[op["c"]]
            self.by_name[op["r"]].execute_k(kc, op)
            return
        s = self.sessions[op["s"]]
        if op["r"] is not None:
            self.by_name[op["r"]].execute(s, op)
            return
        if k == "begin":
            r = self.sql(s, op, "BEGIN", None, FAST)
            if r.ok:
                s.xact = True
                s.sps = []
                s.touched = set()
            else:
                self.unexpected(s, op, r)
        elif k in ("commit", "rollback"):
            # a transaction that had a lock taken back cannot commit (40001)
            lost = None
            if k == "commit":
                lost = next((x for x in (getattr(m, "commit_fails", lambda s: None)(s) for m in self.models)
                             if x is not None), None)
            r = self.end_xact(s, op, k.upper(), k.upper(), None)
            if r is None:
                return
            if lost is not None and r.ok:
                self.anomaly("lock-lost", "COMMIT by %s succeeded although its transaction-scope hold of %s"
                             " was taken back: it must fail with 40001 (doc/locks.md, Lost locks)" % (s.name, lost))
            elif lost is not None and r.code == "40001":
                self.tallies["lock lost at COMMIT (40001)"] += 1
            elif not r.ok:
                self.anomaly("commit-failed", "%s by %s: %r" % (k.upper(), s.name, r))
            for m in self.models:
                if r.ok and k == "commit":
                    m.on_commit(s)
                else:
                    m.on_rollback(s)
        elif k == "savepoint":
            name = "sp%d" % (len(s.sps) + 1)
            r = self.sql(s, op, "SAVEPOINT " + name, None, FAST)
            if r.ok:
                s.sps.append(name)
            else:
                self.unexpected(s, op, r)
        elif k in ("rbto", "release"):
            # ROLLBACK TO keeps savepoint i, RELEASE ends it too
            i = op["i"]
            sql, event, keep = (("ROLLBACK TO SAVEPOINT ", "on_rollback_to", i + 1) if k == "rbto"
                                else ("RELEASE SAVEPOINT ", "on_release", i))
            r = self.sql(s, op, sql + s.sps[i], None, FAST)
            if r.ok:
                del s.sps[keep:]
                self.tell(event, s, i + 1)
            else:
                self.unexpected(s, op, r)
        elif k == "prepare":
            self.do_prepare(s, op)
        elif k in ("cprep", "rprep"):
            verb = "COMMIT PREPARED" if k == "cprep" else "ROLLBACK PREPARED"
            r = self.sql(s, op, verb + " %s", (op["gid"],), FAST)
            if not r.ok:
                self.unexpected(s, op, r)
                if r.broken:
                    self.after(s, op, r)
            del self.prepared[op["gid"]]

    def end_xact(self, s, op, what, sql, args):
        """Run sql (what: its name in an anomaly), which ends s's
        transaction whatever it answers; its result, or None when the
        connection broke (after() dealt with it)."""
        r = self.sql(s, op, sql, args, FAST)
        if r.pending:
            self.anomaly("slow-call", "%s by %s did not answer within %.0fs" % (what, s.name, FAST))
            r = self.recover(s)
        s.xact = False
        s.sps = []
        if r.broken:
            self.after(s, op, r)
            return None
        return r

    def do_prepare(self, s, op):
        expect = None
        for m in self.models:
            e = m.prepare_expect(s)
            if e == "strong" or (e == "weak" and expect is None):
                expect = e
        r = self.end_xact(s, op, "PREPARE TRANSACTION", "PREPARE TRANSACTION %s", (op["gid"],))
        if r is None:
            return
        if r.ok:
            self.prepared[op["gid"]] = s.cluster.label
            if expect == "strong":
                self.anomaly("prepare", "PREPARE TRANSACTION by %s succeeded after zklock work (doc/errors.md: 0A000)" % s.name)
                self.sql(s, {"r": None}, "ROLLBACK PREPARED %s", (op["gid"],), FAST)
                del self.prepared[op["gid"]]
                self.tell("on_rollback", s)
            return
        if r.code == "0A000" and expect is not None:
            pass
        else:
            self.anomaly("prepare", "PREPARE TRANSACTION by %s (zklock work: %s): %r" % (s.name, expect, r))
        self.sql(s, {"r": None}, "ROLLBACK", None, FAST)
        self.tell("on_rollback", s)

    # ---- settling
    def model_of(self, op):
        return self.by_name.get(op.get("r"))

    def settle(self, limit=3.0):
        """Complete the pending calls the models say must complete now, and
        wait until ZooKeeper holds what the models say (at most `limit` s)."""
        t_end = now() + limit
        while True:
            # the calls that answered, all of them first: a model may need to
            # know what the others got (two waiters served at once on two
            # clusters take items in either order)
            self.finished = []
            for s in self.sessions:
                if s.pending is not None:
                    r = s.finish(now())
                    if r is not None:
                        self.finished.append((s, s.pending, r))
            # a call that failed first: its error aborted its transaction
            # (PostgreSQL's abort runs when the error is raised, and zklock's
            # hooks let go of the transaction's holds then), so a waiter
            # answered in the same round may have been granted what it held
            # (a deadlock victim's 40P01 and the grant it let through)
            self.finished.sort(key=lambda f: f[2].ok)
            for s, _, r in self.finished:
                self.complete_pending(s, r)
            self.finished = []
            due = [s for s in self.sessions if s.pending is not None
                   and self.model_of(s.pending).due(s, s.pending)]
            for s in self.sessions:
                if s.pending is not None and s.pctx.get("limit") is not None \
                        and now() - s.t0 > s.pctx["limit"] + FAST and s not in due:
                    due.append(s)
            zk = None
            for m in self.models:
                zk = m.zk_check()
                if zk:
                    break
            if not due and zk is None:
                for m in self.models:
                    if hasattr(m, "after_settle"):
                        m.after_settle()
                return
            if now() > t_end:
                for s in due:
                    self.anomaly("waiter-not-woken", "%s by %s still waits %.1fs after the model says it can complete"
                                 % (s.pending.get("sql"), s.name, limit))
                    r = self.recover(s, more=1.0)
                    if s.pending is not None:
                        self.complete_pending(s, r)
                if zk:
                    self.anomaly("zk-state", zk)
                return
            time.sleep(0.02)

    def watchdog(self):
        for (t, label, msg) in self.env.watchdog.take():
            if t >= self.t_start:
                self.anomaly("worker-unresponsive", msg)

    # ---- the whole history
    def run(self):
        self.open()
        try:
            n = len(self.replay) if self.replay is not None else self.steps
            for i in range(n):
                self.step_no = i
                if self.replay is not None:
                    op = dict(self.replay[i])
                    op.pop("sql", None)
                    if not self.applicable(op):
                        continue
                else:
                    op = self.gen()
                op["step"] = i
                self.ops.append(op)
                self.execute(op)
                if not self.fatal:
                    self.settle()
                self.watchdog()
                if self.fatal:
                    break
            self.step_no = n
            if not self.fatal:
                self.finish()
                self.watchdog()
        finally:
            self.close()
        return self

    def finish(self):
        """End every transaction and hold, drain, and check that nothing is left."""
        for s in self.sessions:
            if s.pending is not None:
                self.execute({"k": "cancel", "r": None, "t": s.idx})
                # a cancel may let another pending call be served (a waiter
                # behind the cancelled one): let it be, before cancelling it
                # races with its grant
                self.settle()
        for s in self.sessions:
            if s.xact:
                self.execute({"k": "rollback", "r": None, "s": s.idx})
        for gid, label in list(self.prepared.items()):
            s = [x for x in self.sessions if x.cluster.label == label][0]
            self.execute({"k": "rprep", "r": None, "s": s.idx, "gid": gid})
        for m in self.models:
            m.final(self.sessions[0])
            if self.fatal:
                return
        self.settle()
