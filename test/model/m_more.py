"""m_more.py - reference models of the other recipes, for the exact mode of
the model-based tester: semaphores, leases, gates, arrivals, double barriers
and elections.  Each keeps what doc/ says the recipe's state is and
checks every answer against it (see each class).
"""

import datetime
import time

from driver import FAST, kazoo_acquire, kazoo_release_all, now

TMO = {"0": 0.0, "200ms": 0.2, "30s": None, None: None}


def tmo_choice(r):
    return r.choice(["0", "200ms", "200ms", "30s", None])


class Base:
    kazoo = False

    def __init__(self, h):
        self.h = h

    def model_names(self, letter):
        """The history's names of this model: <ns>-<letter><i>, as many as
        its setup says (one by default)."""
        h = self.h
        return ["%s-%s%d" % (h.ns, letter, i) for i in range(h.setup.get("names", 1))]

    def gen_k(self, r, k):
        return None

    def applicable_k(self, op, k):
        return True

    def on_commit(self, s):
        pass

    def on_rollback(self, s):
        pass

    def on_rollback_to(self, s, level):
        pass

    def on_release(self, s, level):
        pass

    def on_terminate(self, s):
        pass

    def prepare_expect(self, s):
        return "weak" if self.name in s.touched else None

    def due(self, s, op):
        return False

    def zk_check(self):
        return None

    def final(self, s):
        pass

    def ok_or_unexpected(self, s, op, r):
        if not r.ok:
            self.h.unexpected(s, op, r)
            return False
        return True

    def timed_out(self, s, op, r, ctx, what, grant_expected):
        """An answer that means 'timed out' (false, no row, 55P03, 57014):
        right only when the model said it had to wait, and not early."""
        h = self.h
        if grant_expected:
            h.anomaly("%s-refused" % self.name, "%s by %s: %r while the model says it need not wait"
                      % (op.get("sql"), s.name, r))
            return
        if ctx.get("early") and not (not r.ok and r.code == "57014"):
            h.anomaly("%s-early" % self.name, "%s by %s timed out after %.3fs" % (op.get("sql"), s.name, r.elapsed))

    def wait_failed(self, s, op, r, ctx, free):
        """Whether the wait r answered failed: a timeout (57014) is checked
        against free (whether it need not have waited), anything else is
        unexpected."""
        if r.ok:
            return False
        if r.code == "57014":
            self.timed_out(s, op, r, ctx, None, free)
        else:
            self.h.unexpected(s, op, r)
        return True


class XactActions(Base):
    """Effects written at COMMIT (gates, arrivals): (session, level, what)."""

    def __init__(self, h):
        super().__init__(h)
        self.pend = []

    def on_commit(self, s):
        mine = [p for p in self.pend if p[0] is s]
        self.pend = [p for p in self.pend if p[0] is not s]
        for p in mine:
            self.apply(p[2])

    def on_rollback(self, s):
        self.pend = [p for p in self.pend if p[0] is not s]

    on_terminate = on_rollback

    def on_rollback_to(self, s, level):
        self.pend = [p for p in self.pend if not (p[0] is s and p[1] >= level)]

    def on_release(self, s, level):
        self.pend = [(p[0], level - 1 if (p[0] is s and p[1] >= level) else p[1], p[2]) for p in self.pend]

    def prepare_expect(self, s):
        if any(p[0] is s for p in self.pend):
            return "strong"
        return "weak" if self.name in s.touched else None


class ScopedHolds:
    """Holds kept per name and owner, each [scope, level] ("xact" with its
    savepoint level, or "sess"), and what COMMIT, ROLLBACK, savepoints,
    PREPARE and a backend's end do to them (semaphores, campaigns).  The
    model says where they are (holds_of) and hears when an owner's last
    hold of a name went (owner_gone)."""

    def holds_of(self, name):
        raise NotImplementedError

    def owner_gone(self, name):
        pass

    def drop(self, s, pred):
        for name in self.names:
            holds = self.holds_of(name).get(s)
            if holds is None:
                continue
            holds[:] = [hd for hd in holds if not pred(hd)]
            if not holds:
                del self.holds_of(name)[s]
                self.owner_gone(name)

    def on_commit(self, s):
        self.drop(s, lambda hd: hd[0] == "xact")

    def on_rollback(self, s):
        self.on_commit(s)

    def on_rollback_to(self, s, level):
        self.drop(s, lambda hd: hd[0] == "xact" and hd[1] >= level)

    def on_release(self, s, level):
        for name in self.names:
            for hd in self.holds_of(name).get(s, []):
                if hd[0] == "xact" and hd[1] >= level:
                    hd[1] = level - 1

    def on_terminate(self, s):
        self.drop(s, lambda hd: True)

    def prepare_expect(self, s):
        hs = [hd for name in self.names for hd in self.holds_of(name).get(s, [])]
        if any(hd[0] == "xact" for hd in hs):
            return "strong"
        return "weak" if hs or self.name in s.touched else None


# ---------------------------------------------------------------- semaphore

class SemModel(ScopedHolds, Base):
    """The owners' leases never add up to more than max_leases; a SQL owner
    takes its own number of permits (1 or 2) at once, all or none, and
    stacks holds on that set; waiters are served in the order they came; a
    wrong max_leases is refused (22023); zk_semaphore_set_max returns the
    pool's number, and takers go by the new one (raising it lets waiters
    in).  kazoo's Semaphore shares the
    leases, one each."""
    name = "semaphore"
    kazoo = True
    ROOT = "/zklock/semaphores/"

    def __init__(self, h):
        super().__init__(h)
        self.names = self.model_names("s")
        self.max = h.setup.get("max", 2)
        self.maxn = {n: self.max for n in self.names}   # the pool's number (zk_semaphore_set_max)
        self.leases = {n: {} for n in self.names}     # owner -> [[scope, level], ...]
        self.created = set()
        self.ksem = {}
        self.served = []
        self.perm = {}                                # (session name, name) -> permits

    def after_settle(self):
        """Waiters queue on the guard: they are served in the order they came."""
        for (s, t0, name) in self.served:
            for x in self.h.sessions:
                if x.pending is not None and x.pending.get("r") == self.name and x.pending.get("nm") == name \
                        and x.t0 < t0:
                    self.h.anomaly("semaphore-waiter-order", "%s got a lease of %s before %s, which waits since earlier"
                                   % (s.name, name, x.name))
        self.served = []

    def gen(self, r, s):
        i = r.randrange(len(self.names))
        x = r.random()
        if x < 0.55:
            scope = "xact" if (s.xact and r.random() < 0.7) else "sess"
            op = {"k": "take", "n": i, "sc": scope, "w": r.choice(["try", "wait"])}
            if op["w"] == "wait":
                op["t"] = tmo_choice(r)
                if op["t"] in ("30s", None) and r.random() < 0.2:
                    op["st"] = 300
            return op
        if x < 0.62 and self.names[i] in self.created:
            return {"k": "wrongmax", "n": i}
        if x < 0.68:
            # another number for a pool that surely exists (a lease is
            # held); never below what a session's permits need, and a lower
            # one only with nobody waiting (it waits for the guard as a
            # taker does)
            lo = 2 if self.max >= 2 else 1
            v = r.randrange(lo, self.max + 3)
            op = {"k": "setmax", "n": i, "v": v}
            if self.setmax_ok(op):
                return op
        if x < 0.85:
            return {"k": "release", "n": i}
        return {"k": "holders", "n": i}

    def gen_k(self, r, k):
        i = r.randrange(len(self.names))
        sem = self.ksem.get((k.idx, i))
        if sem is not None and sem.is_acquired:
            return {"k": "krelease", "n": i}
        return {"k": "kacquire", "n": i, "t": r.choice([0, 0.2])}

    def applicable_k(self, op, k):
        sem = self.ksem.get((k.idx, op["n"]))
        held = sem is not None and sem.is_acquired
        return held if op["k"] == "krelease" else not held

    def permits(self, owner, name):
        """An owner's permits of name: a SQL session's own number, kazoo's 1."""
        return self.perm.get((getattr(owner, "name", owner), name), 1)

    def held(self, name):
        return sum(self.permits(o, name) for o in self.leases[name])

    def free(self, name):
        return self.maxn[name] - self.held(name)

    def waiters(self, s, name):
        """Other sessions waiting for name: they hold or queue on its guard."""
        return [x for x in self.h.sessions if x is not s and x.pending is not None and
                x.pending.get("r") == self.name and x.pending.get("nm") == name]

    def setmax_ok(self, op):
        name = self.names[op["n"]]
        return self.held(name) > 0 and (op["v"] >= self.maxn[name] or not self.waiters(None, name))

    def applicable(self, s, op):
        if op["k"] == "setmax":
            return self.setmax_ok(op)
        # a try behind a waiter for more permits than are free waits for
        # the guard up to 10 s (doc/semaphores.md): not a fast call
        if op["k"] == "take" and op["w"] == "try" and self.waiters(s, self.names[op["n"]]):
            return False
        return op["k"] != "wrongmax" or self.names[op["n"]] in self.created

    def execute(self, s, op):
        h = self.h
        s.touched.add(self.name)
        name = op["nm"] = self.names[op["n"]]
        k = op["k"]
        if k == "take":
            held = s in self.leases[name]
            pk = self.perm.setdefault((s.name, name), 2 if self.max >= 2 and op["n"] % 2 else 1)
            # in line behind a waiter, whatever is free
            grant = held or (self.free(name) >= pk and not self.waiters(s, name))
            if op["w"] == "try":
                fn = "zk_try_semaphore" if op["sc"] == "xact" else "zk_try_session_semaphore"
                h.fast_call(s, op, "SELECT %s(%%s, %%s, permits => %%s)" % fn, (name, self.maxn[name], pk),
                            self.done_take, {"grant": grant})
            else:
                fn = "zk_semaphore" if op["sc"] == "xact" else "zk_session_semaphore"
                done = self.done_take
                r = h.wait_call(s, op, "SELECT %s(%%s, %%s, %%s::interval, permits => %%s)" % fn,
                                (name, self.maxn[name], op["t"], pk), not grant, TMO[op["t"]], done)
                if r is None:
                    s.pctx["grant"] = False
        elif k == "wrongmax":
            h.fast_call(s, op, "SELECT zk_try_semaphore(%s, %s)", (name, self.maxn[name] + 1), self.done_wrongmax)
        elif k == "release":
            h.fast_call(s, op, "SELECT zk_semaphore_release(%s)", (name,), self.done_release)
        elif k == "setmax":
            h.fast_call(s, op, "SELECT zk_semaphore_set_max(%s, %s)", (name, op["v"]), self.done_setmax)
        elif k == "holders":
            h.fast_call(s, op, "SELECT count(*) FROM zk_semaphore_holders(%s)", (name,), self.done_holders)

    def done_take(self, s, op, r, ctx):
        h = self.h
        name = op["nm"]
        held = s in self.leases[name]
        grant = held or self.free(name) >= self.permits(s, name)
        if not r.ok:
            if r.code in ("55P03", "57014"):
                self.timed_out(s, op, r, ctx, op.get("sql"), grant and r.code == "55P03")
                return
            h.unexpected(s, op, r)
            return
        got = r.rows[0][0] if op["w"] == "try" else True
        if got and not grant:
            h.anomaly("semaphore-overflow", "%s by %s granted %d leases while the model says %d of %d are free (%s)"
                      % (op.get("sql"), s.name, self.permits(s, name), self.free(name), self.maxn[name],
                         self.show(name)))
        if not got and grant:
            h.anomaly("semaphore-refused", "%s by %s returned false while the model says %d leases are free (%s)"
                      % (op.get("sql"), s.name, self.free(name), self.show(name)))
        if got:
            self.created.add(name)
            if not held and ctx.get("expect_wait") and ctx.get("limit") is None:
                self.served.append((s, s.t0, name))
            self.leases[name].setdefault(s, []).append([op["sc"], s.level if op["sc"] == "xact" else 0])

    def show(self, name):
        return ", ".join("%s x%d (%d leases)" % (getattr(o, "name", o), len(v), self.permits(o, name))
                         for o, v in self.leases[name].items()) or "none"

    def done_wrongmax(self, s, op, r, ctx):
        name = op["nm"]
        if name in self.created:
            if r.ok or r.code != "22023":
                self.h.anomaly("semaphore-max", "zk_try_semaphore with max_leases %d on a pool of %d by %s: %r"
                               % (self.maxn[name] + 1, self.maxn[name], s.name, r))
            return
        # no pool yet: the call may have created it with the other number;
        # the model cannot tell, so it is given back with a fresh name
        if r.ok and r.rows[0][0]:
            self.h.anomaly("harness", "wrongmax on a new pool")

    def done_setmax(self, s, op, r, ctx):
        if not self.ok_or_unexpected(s, op, r):
            return
        name = op["nm"]
        if r.rows[0][0] != self.maxn[name]:
            self.h.anomaly("semaphore-set-max", "%s by %s returned %s, the pool's number is %d"
                           % (op.get("sql"), s.name, r.rows[0][0], self.maxn[name]))
        # raising it lets waiters in at once (the settling completes them)
        self.maxn[name] = op["v"]

    def done_release(self, s, op, r, ctx):
        if not self.ok_or_unexpected(s, op, r):
            return
        name = op["nm"]
        holds = self.leases[name].get(s, [])
        sess = [hd for hd in holds if hd[0] == "sess"]
        if bool(r.rows[0][0]) != bool(sess):
            self.h.anomaly("semaphore-release", "zk_semaphore_release(%s) by %s = %s, the model %s"
                           % (name, s.name, r.rows[0][0], bool(sess)))
        if sess and r.rows[0][0]:
            holds.remove(sess[0])
            if not holds:
                del self.leases[name][s]

    def done_holders(self, s, op, r, ctx):
        if not self.ok_or_unexpected(s, op, r):
            return
        if r.rows[0][0] != self.held(op["nm"]):
            self.h.anomaly("semaphore-holders", "zk_semaphore_holders(%s) lists %s, the model %d (%s)"
                           % (op["nm"], r.rows[0][0], self.held(op["nm"]), self.show(op["nm"])))

    def execute_k(self, k, op):
        from kazoo.exceptions import NoNodeError
        h = self.h
        name = op["nm"] = self.names[op["n"]]
        sem = self.ksem.get((k.idx, op["n"]))
        # a new Semaphore object per acquisition (doc/semaphores.md): the
        # guard's lock node is a container that ZooKeeper removes when empty,
        # and kazoo's inner Lock creates its path once per object
        if sem is None or (op["k"] == "kacquire" and not sem.is_acquired):
            sem = self.ksem[(k.idx, op["n"])] = k.zk.Semaphore(self.ROOT + name, identifier=k.name,
                                                               max_leases=self.maxn[name])
        if op["k"] == "kacquire":
            # behind a SQL waiter (for more permits than are free) on the guard
            grant = self.free(name) > 0 and not self.waiters(None, name)

            def acq():
                nonlocal sem
                for attempt in (0, 1):
                    try:
                        return kazoo_acquire(sem, op["t"])
                    except NoNodeError:
                        # doc/semaphores.md: an acquisition that starts as
                        # zklock deletes a pool quiet for 2 s finds it gone
                        # (kazoo ensures the pool once, before its guard);
                        # the documented answer is to retry, once
                        if attempt:
                            raise
                        sem = self.ksem[(k.idx, op["n"])] = k.zk.Semaphore(
                            self.ROOT + name, identifier=k.name, max_leases=self.maxn[name])
            got = h.kcall(k, op, acq, bound=FAST + op["t"])
            if got is h.KFAIL:
                return
            if got and not grant:
                h.anomaly("semaphore-overflow", "kazoo acquire by %s granted while all %d leases are held (%s)"
                          % (k.name, self.maxn[name], self.show(name)))
            if not got and grant:
                h.anomaly("semaphore-refused", "kazoo acquire by %s refused while a lease is free (%s)"
                          % (k.name, self.show(name)))
            if got:
                self.created.add(name)
                self.leases[name][self.kowner(k)] = [["sess", 0]]
        else:
            h.kcall(k, op, sem.release)
            self.leases[name].pop(self.kowner(k), None)

    def kowner(self, k):
        return "kazoo-" + k.name

    def holds_of(self, name):
        return self.leases[name]

    def due(self, s, op):
        if op["k"] != "take":
            return False
        name = op["nm"]
        # in line by when they came: each takes its permits in turn, and
        # one that does not fit holds up those behind it (the guard)
        line = sorted((x for x in self.h.sessions if x.pending is not None and x.pending.get("r") == self.name
                       and x.pending.get("nm") == name), key=lambda x: x.t0)
        if s not in line:
            line.append(s)
        free = self.free(name)
        for x in line:
            k = self.permits(x, name)
            if free < k:
                return False
            if x is s:
                return True
            free -= k
        return False

    def zk_check(self):
        for name in self.names:
            n = len([c for c in self.h.children(self.ROOT + name)])
            if n != self.held(name):
                return "semaphore %s: %d leases in ZooKeeper, the model %d (%s)" % (name, n, self.held(name),
                                                                                  self.show(name))
        return None

    def final(self, s0):
        h = self.h
        for s in h.sessions:
            for name in self.names:
                while any(hd[0] == "sess" for hd in self.leases[name].get(s, [])):
                    r = h.fast_call(s, {"k": "release", "r": self.name, "nm": name},
                                    "SELECT zk_semaphore_release(%s)", (name,), self.done_release)
                    if not r.ok or not r.rows[0][0]:
                        break
        kazoo_release_all(h, self.ksem.values(), "semaphore release")
        for name in self.names:
            for o in [o for o in self.leases[name] if isinstance(o, str)]:
                del self.leases[name][o]


# ---------------------------------------------------------------- gate

class GateModel(XactActions):
    """A gate is open (no node) or closed (the node); zk_gate_close/open take
    effect at COMMIT, in order; zk_gate_wait is true at once when open,
    false after its timeout when closed, and a waiter is woken when the gate
    opens.  kazoo's Barrier on the same path closes, opens and waits."""
    name = "gate"
    kazoo = True
    ROOT = "/zklock/gates/"

    def __init__(self, h):
        super().__init__(h)
        self.names = self.model_names("g")
        self.closed = {n: False for n in self.names}
        self.kb = {}

    def apply(self, what):
        name, closed = what
        self.closed[name] = closed

    def gen(self, r, s):
        i = r.randrange(len(self.names))
        x = r.random()
        if x < 0.3:
            return {"k": "close", "n": i}
        if x < 0.55:
            return {"k": "open", "n": i}
        op = {"k": "wait", "n": i, "t": tmo_choice(r)}
        if op["t"] in ("30s", None) and r.random() < 0.2:
            op["st"] = 300
        return op

    def gen_k(self, r, k):
        return {"k": r.choice(["kclose", "kopen", "kwait"]), "n": r.randrange(len(self.names))}

    def execute(self, s, op):
        h = self.h
        s.touched.add(self.name)
        name = op["nm"] = self.names[op["n"]]
        if op["k"] in ("close", "open"):
            def done(s_, op_, r, ctx):
                if self.ok_or_unexpected(s_, op_, r):
                    self.pend.append((s_, s_.level, (name, op_["k"] == "close")))
            h.fast_call(s, op, "SELECT zk_gate_%s(%%s)" % op["k"], (name,), done)
        else:
            h.wait_call(s, op, "SELECT zk_gate_wait(%s, %s::interval)", (name, op["t"]),
                        self.closed[name], TMO[op["t"]], self.done_wait)

    def done_wait(self, s, op, r, ctx):
        name = op["nm"]
        is_open = not self.closed[name]
        if self.wait_failed(s, op, r, ctx, is_open):
            return
        got = r.rows[0][0]
        if got and not is_open:
            self.h.anomaly("gate-through", "%s by %s returned true while the gate is closed" % (op.get("sql"), s.name))
        elif not got:
            self.timed_out(s, op, r, ctx, None, is_open)

    def execute_k(self, k, op):
        h = self.h
        name = op["nm"] = self.names[op["n"]]
        b = self.kb.get((k.idx, name))
        if b is None:
            b = self.kb[(k.idx, name)] = k.zk.Barrier(self.ROOT + name)
        if op["k"] == "kclose":
            h.kcall(k, op, b.create)
            self.closed[name] = True
        elif op["k"] == "kopen":
            h.kcall(k, op, b.remove)
            self.closed[name] = False
        else:
            v = h.kcall(k, op, lambda: b.wait(0.1), bound=FAST + 0.1)
            if v is not h.KFAIL and bool(v) == self.closed[name]:
                h.anomaly("gate-kazoo", "kazoo Barrier.wait(0.1) on %s = %s, the gate is %s"
                          % (name, v, "closed" if self.closed[name] else "open"))

    def due(self, s, op):
        return op["k"] == "wait" and not self.closed[op["nm"]]

    def zk_check(self):
        for name in self.names:
            ex = self.h.kz.exists(self.ROOT + name) is not None
            if ex != self.closed[name]:
                return "gate %s: node %s in ZooKeeper, the model says %s" % (
                    name, "present" if ex else "absent", "closed" if self.closed[name] else "open")
        return None


# ---------------------------------------------------------------- arrivals

class ArrivalsModel(XactActions):
    """zk_arrive counts at COMMIT, once per participant; zk_await is true at
    once when enough distinct participants arrived, false after its timeout
    otherwise, and a waiter is woken by the arrival that completes the count;
    zk_arrivals lists them; zk_arrivals_reset deletes them at once."""
    name = "arrivals"
    ROOT = "/zklock/arrivals/"

    def __init__(self, h):
        super().__init__(h)
        self.names = self.model_names("a")
        self.arrived = {n: set() for n in self.names}

    def apply(self, what):
        name, p = what
        self.arrived[name].add(p)

    def gen(self, r, s):
        i = r.randrange(len(self.names))
        x = r.random()
        if x < 0.35:
            return {"k": "arrive", "n": i, "p": "p%d" % r.randint(1, 4)}
        if x < 0.75:
            op = {"k": "await", "n": i, "parties": r.randint(1, 4), "t": tmo_choice(r)}
            if op["t"] in ("30s", None) and r.random() < 0.2:
                op["st"] = 300
            return op
        if x < 0.92:
            return {"k": "list", "n": i}
        return {"k": "reset", "n": i}

    def execute(self, s, op):
        h = self.h
        s.touched.add(self.name)
        name = op["nm"] = self.names[op["n"]]
        k = op["k"]
        if k == "arrive":
            def done(s_, op_, r, ctx):
                if self.ok_or_unexpected(s_, op_, r):
                    self.pend.append((s_, s_.level, (name, op_["p"])))
            h.fast_call(s, op, "SELECT zk_arrive(%s, %s)", (name, op["p"]), done)
        elif k == "await":
            enough = len(self.arrived[name]) >= op["parties"]
            h.wait_call(s, op, "SELECT zk_await(%s, %s, %s::interval)", (name, op["parties"], op["t"]),
                        not enough, TMO[op["t"]], self.done_await)
        elif k == "list":
            h.fast_call(s, op, "SELECT participant FROM zk_arrivals(%s)", (name,), self.done_list)
        else:
            h.fast_call(s, op, "SELECT zk_arrivals_reset(%s)", (name,), self.done_reset)

    def done_await(self, s, op, r, ctx):
        name = op["nm"]
        enough = len(self.arrived[name]) >= op["parties"]
        if self.wait_failed(s, op, r, ctx, enough):
            return
        got = r.rows[0][0]
        if got and not enough:
            self.h.anomaly("arrivals-early", "%s by %s returned true with %d arrived (%s)"
                           % (op.get("sql"), s.name, len(self.arrived[name]), sorted(self.arrived[name])))
        elif not got:
            self.timed_out(s, op, r, ctx, None, enough)

    def done_list(self, s, op, r, ctx):
        if self.ok_or_unexpected(s, op, r):
            got = sorted(x[0] for x in r.rows)
            if got != sorted(self.arrived[op["nm"]]):
                self.h.anomaly("arrivals-list", "zk_arrivals(%s) = %s, the model %s"
                               % (op["nm"], got, sorted(self.arrived[op["nm"]])))

    def done_reset(self, s, op, r, ctx):
        if self.ok_or_unexpected(s, op, r):
            n = len(self.arrived[op["nm"]])
            if r.rows[0][0] != n:
                self.h.anomaly("arrivals-reset", "zk_arrivals_reset(%s) = %s, the model %d" % (op["nm"], r.rows[0][0], n))
            self.arrived[op["nm"]] = set()

    def due(self, s, op):
        return op["k"] == "await" and len(self.arrived[op["nm"]]) >= op["parties"]

    def zk_check(self):
        for name in self.names:
            c = sorted(self.h.children(self.ROOT + name))
            if len(c) != len(self.arrived[name]):
                return "arrivals %s: %s in ZooKeeper, the model %s" % (name, c, sorted(self.arrived[name]))
        return None


# ---------------------------------------------------------------- lease

class LeaseModel(Base):
    """zk_try_lease is true when nobody holds the lease, the holder is the
    caller, or the lease has ended; false otherwise.  The end is stored to
    the second, so answers within a second of the end are not judged.
    kazoo's NonBlockingLease with the same identifier is the same holder."""
    name = "lease"
    kazoo = True
    ROOT = "/zklock/leases/"

    def __init__(self, h):
        super().__init__(h)
        self.names = self.model_names("e")
        self.lease = {n: None for n in self.names}     # (holder key, taken at, seconds)

    def gen(self, r, s):
        i = r.randrange(len(self.names))
        if r.random() < 0.8:
            return {"k": "try", "n": i, "d": r.choice([1, 1, 2, 3]), "who": r.choice(["h1", "h2", None])}
        return {"k": "holder", "n": i}

    def gen_k(self, r, k):
        return {"k": "ktry", "n": r.randrange(len(self.names)), "d": r.choice([1, 2]), "who": r.choice(["h1", "h2"])}

    def verdict(self, name, key):
        """True / False / None (too close to the end to tell)."""
        cur = self.lease[name]
        if cur is None or cur[0] == key:
            return True
        end = cur[1] + cur[2]
        t = time.time()
        if t > end + 0.3:
            return True
        if t < end - 1.3:
            return False
        return None

    def execute(self, s, op):
        h = self.h
        s.touched.add(self.name)
        name = op["nm"] = self.names[op["n"]]
        if op["k"] == "try":
            key = op["who"] or ("default-" + s.cluster.label)
            want = self.verdict(name, key)
            t0 = time.time()

            def done(s_, op_, r, ctx):
                if not self.ok_or_unexpected(s_, op_, r):
                    return
                got = r.rows[0][0]
                if want is not None and got != want:
                    self.h.anomaly("lease-%s" % ("overlap" if got else "refused"),
                                   "%s by %s = %s, the model %s (lease %s)" % (op_.get("sql"), s_.name, got, want,
                                                                             self.lease[name]))
                if got:
                    self.lease[name] = (key, t0, op_["d"])
            h.fast_call(s, op, "SELECT zk_try_lease(%s, %s::interval, %s)", (name, "%d seconds" % op["d"], op["who"]),
                        done)
        else:
            def done(s_, op_, r, ctx):
                if not self.ok_or_unexpected(s_, op_, r):
                    return
                cur = self.lease[name]
                if cur is None:
                    if r.rows:
                        self.h.anomaly("lease-holder", "zk_lease_holder(%s) = %r, nobody took it" % (name, r.rows))
                    return
                if not r.rows:
                    self.h.anomaly("lease-holder", "zk_lease_holder(%s): no row, the model %r" % (name, cur))
                    return
                holder, this = r.rows[0]
                if cur[0].startswith("default-"):
                    if bool(this) != (cur[0] == "default-" + s_.cluster.label):
                        self.h.anomaly("lease-holder", "zk_lease_holder(%s) by %s: this_server %s, the holder is %s"
                                       % (name, s_.name, this, cur[0]))
                elif holder != cur[0]:
                    self.h.anomaly("lease-holder", "zk_lease_holder(%s) = %s, the model %s" % (name, holder, cur[0]))
            h.fast_call(s, op, "SELECT holder, this_server FROM zk_lease_holder(%s)", (name,), done)

    def execute_k(self, k, op):
        h = self.h
        name = op["nm"] = self.names[op["n"]]
        want = self.verdict(name, op["who"])
        t0 = time.time()
        got = h.kcall(k, op, lambda: bool(k.zk.NonBlockingLease(self.ROOT + name,
                                                                 datetime.timedelta(seconds=op["d"]),
                                                                 identifier=op["who"])))
        if got is h.KFAIL:
            return
        if want is not None and got != want:
            h.anomaly("lease-%s" % ("overlap" if got else "refused"),
                      "kazoo NonBlockingLease(%s, %ds, %s) = %s, the model %s (lease %s)"
                      % (name, op["d"], op["who"], got, want, self.lease[name]))
        if got:
            self.lease[name] = (op["who"], t0, op["d"])


# ---------------------------------------------------------------- double barrier

class BarrierModel(Base):
    """zk_barrier_enter is true once `parties` members are present (at once
    when they are), false after its timeout (the member is withdrawn);
    zk_barrier_leave is true once every other member has left, false after
    its timeout (no longer a member either way); entering twice or leaving
    without being a member is 55000.  Membership is the session's, not the
    transaction's: it ends with the backend."""
    name = "barrier"
    ROOT = "/zklock/barriers/"

    def __init__(self, h):
        super().__init__(h)
        self.bname = "%s-b0" % h.ns
        self.parties = h.setup.get("parties", 2)
        self.members = {}          # session -> "entering" | "in" | "leaving"

    def state(self, st):
        return [s for s, v in self.members.items() if v == st]

    def gen(self, r, s):
        st = self.members.get(s)
        if r.random() < 0.04:
            return {"k": "enter" if st else "leave", "t": "0", "bad": True}
        if st is None:
            return {"k": "enter", "t": tmo_choice(r)}
        if st == "in":
            return {"k": "leave", "t": tmo_choice(r)}
        return None

    def applicable(self, s, op):
        st = self.members.get(s)
        if op.get("bad"):
            return (st is not None) == (op["k"] == "enter")
        if op["k"] == "enter":
            return st is None and not self.state("leaving")
        return st == "in" and not self.state("entering")

    def execute(self, s, op):
        h = self.h
        s.touched.add(self.name)
        if op.get("bad"):
            def done(s_, op_, r, ctx):
                if r.ok or r.code != "55000":
                    h.anomaly("barrier-misuse", "%s by %s (%s): %r, doc/barriers.md: 55000"
                              % (op_.get("sql"), s_.name, self.members.get(s_), r))
            if op["k"] == "enter":
                h.fast_call(s, op, "SELECT zk_barrier_enter(%s, %s, '0')", (self.bname, self.parties), done)
            else:
                h.fast_call(s, op, "SELECT zk_barrier_leave(%s, '0')", (self.bname,), done)
            return
        if not self.applicable(s, op):
            return
        if op["k"] == "enter":
            opens = len(self.members) + 1 >= self.parties
            self.members[s] = "entering"
            h.wait_call(s, op, "SELECT zk_barrier_enter(%s, %s, %s::interval)", (self.bname, self.parties, op["t"]),
                        not opens, TMO[op["t"]], self.done_enter)
        else:
            alone = len(self.members) == 1 or all(v == "leaving" for x, v in self.members.items() if x is not s)
            # the others all leave, but the lowest of them keeps its node
            # until it sees everyone else gone: a look ('0') may see it
            op["unsure"] = alone and len(self.members) > 1 and op["t"] == "0"
            self.members[s] = "leaving"
            h.wait_call(s, op, "SELECT zk_barrier_leave(%s, %s::interval)", (self.bname, op["t"]),
                        not alone, TMO[op["t"]], self.done_leave)

    def done_enter(self, s, op, r, ctx):
        present = len(self.members)
        if not r.ok:
            self.members.pop(s, None)
        if self.wait_failed(s, op, r, ctx, present >= self.parties):
            return
        got = r.rows[0][0]
        if got:
            if present < self.parties:
                self.h.anomaly("barrier-early", "%s by %s opened with %d member(s) of %d"
                               % (op.get("sql"), s.name, present, self.parties))
            self.members[s] = "in"
        else:
            self.members.pop(s, None)
            self.timed_out(s, op, r, ctx, None, present >= self.parties)

    def done_leave(self, s, op, r, ctx):
        others = [x for x, v in self.members.items() if x is not s and v != "leaving"]
        self.members.pop(s, None)
        if self.wait_failed(s, op, r, ctx, not others):
            return
        got = r.rows[0][0]
        if not got and op.get("unsure"):
            return
        if got and others:
            self.h.anomaly("barrier-leave-early", "%s by %s returned true while %s are still in"
                           % (op.get("sql"), s.name, [x.name for x in others]))
        elif not got:
            self.timed_out(s, op, r, ctx, None, not others)

    def due(self, s, op):
        if op["k"] == "enter":
            return len(self.members) >= self.parties
        return all(v == "leaving" for v in self.members.values())

    def on_terminate(self, s):
        self.members.pop(s, None)

    def prepare_expect(self, s):
        return "weak" if (s in self.members or self.name in s.touched) else None

    def zk_check(self):
        if self.state("leaving") or self.state("entering"):
            return None
        c = [x for x in self.h.children(self.ROOT + self.bname) if x != "ready"]
        if len(c) != len(self.members):
            return "barrier %s: %d members in ZooKeeper, the model %d" % (self.bname, len(c), len(self.members))
        return None

    def final(self, s0):
        for s in list(self.members):
            if s.pending is None and self.members.get(s) == "in":
                self.h.fast_call(s, {"k": "leave", "r": self.name, "t": "0"},
                                 "SELECT zk_barrier_leave(%s, '0')", (self.bname,),
                                 lambda s_, op_, r, ctx: self.members.pop(s_, None))


# ---------------------------------------------------------------- election

class ElectionModel(Base):
    """Both clusters stand in the election named in zklock.elections: at
    every quiescent point exactly one of them says zk_is_leader, zk_leader
    names that one, both are candidates, and a new leadership's token is
    above the last one; after the leader's worker is terminated the other
    cluster leads within a few seconds (the watchdog is paused meanwhile)."""
    name = "election"

    def __init__(self, h):
        super().__init__(h)
        from model import ELECTION
        self.el = ELECTION
        self.sysid = {}
        self.last = None           # (label, token)

    def gen(self, r, s):
        x = r.random()
        if x < 0.08:
            return {"k": "restart", "which": r.choice(["leader", "other"])}
        return {"k": "check"}

    def ident(self, label):
        if label not in self.sysid:
            c = self.h.env.cluster(label)
            self.sysid[label] = str(c.admin_query("SELECT system_identifier FROM pg_control_system()")[0][0])
        return self.sysid[label]

    def leaders(self):
        """(labels that say true, zk_leader's cluster, token, candidates) through admin connections."""
        says = []
        who = tok = None
        ncand = 0
        for label, c in sorted(self.h.env.clusters.items()):
            try:
                if c.admin_query("SELECT zk_is_leader(%s)", (self.el,))[0][0]:
                    says.append(label)
                rows = c.admin_query("SELECT cluster, token FROM zk_leader(%s)", (self.el,))
                if rows:
                    who, tok = rows[0]
                ncand = c.admin_query("SELECT count(*) FROM zk_election_candidates(%s)", (self.el,))[0][0]
            except Exception:
                return None
            self.h.count(self.name, 3)
        return says, who, tok, ncand

    def settled(self, limit=12.0):
        t_end = now() + limit
        last = None
        while now() < t_end:
            last = self.leaders()
            if last and len(last[0]) == 1 and last[3] == 2 and last[1] == self.ident(last[0][0]):
                return last
            time.sleep(0.1)
        return last

    def execute(self, s, op):
        h = self.h
        if op["k"] == "check":
            def done(s_, op_, r, ctx):
                if not self.ok_or_unexpected(s_, op_, r):
                    return
                got = r.rows[0][0]
                st = self.leaders()
                if st is None:
                    return
                says, who, tok, ncand = st
                if len(says) != 1 or ncand != 2:
                    h.anomaly("election-leaders", "%d cluster(s) say they lead (%s), %d candidates" % (len(says), says, ncand))
                    return
                if got != (says[0] == s_.cluster.label):
                    h.anomaly("election-leaders", "zk_is_leader on %s = %s, the leader is %s" % (s_.name, got, says[0]))
                if who != self.ident(says[0]):
                    h.anomaly("election-leader", "zk_leader names %s, %s says it leads" % (who, says[0]))
                self.note_leader(says[0], tok)
            h.fast_call(s, op, "SELECT zk_is_leader(%s)", (self.el,), done)
            return
        st = self.settled()
        if not st or len(st[0]) != 1:
            h.anomaly("election-leaders", "before the restart: no single leader (%r)" % (st,))
            return
        leader = st[0][0]
        label = leader if op["which"] == "leader" else ("B" if leader == "A" else "A")
        c = h.env.cluster(label)
        op["sql"] = "pg_terminate_backend(zklock worker of %s)" % label
        h.note("%4d admin: SELECT pg_terminate_backend(worker_pid) FROM zk_status()  [%s; %s leads]"
               % (h.step_no, label, leader))
        h.count(self.name)
        h.env.watchdog.pause()
        try:
            c.admin_query("SELECT pg_terminate_backend(worker_pid) FROM zk_status()")
            time.sleep(0.5)
            st = self.settled()
        finally:
            h.env.watchdog.take()
            h.env.watchdog.resume()
        if not st or len(st[0]) != 1 or st[3] != 2:
            h.anomaly("election-settle", "12 s after the worker of %s was terminated: %r" % (label, st))
            return
        want = ("B" if leader == "A" else "A") if op["which"] == "leader" else leader
        if st[0][0] != want:
            h.anomaly("election-settle", "after the worker of %s was terminated %s leads, the model %s"
                      % (label, st[0][0], want))
        self.note_leader(st[0][0], st[2])

    def note_leader(self, label, tok):
        if self.last is not None and self.last[0] != label and tok is not None and tok <= self.last[1]:
            self.h.anomaly("election-token", "new leader %s has token %s, not above %s of %s" % (label, tok, self.last[1], self.last[0]))
        if tok is not None:
            self.last = (label, tok)

    def prepare_expect(self, s):
        return None


MODELS = {
    "semaphore": SemModel,
    "gate": GateModel,
    "arrivals": ArrivalsModel,
    "lease": LeaseModel,
    "barrier": BarrierModel,
    "election": ElectionModel,
}
