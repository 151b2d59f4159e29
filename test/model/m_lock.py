"""m_lock.py - the lock's reference model (zk_lock, zk_lock_shared,
zk_try_lock[_shared], zk_session_lock[_shared], zk_try_session_lock[_shared],
zk_unlock[_shared], zk_unlock_all, their multi-lock forms over text[] with
short waits, and kazoo's Lock/ReadLock on the same path).

The model keeps, per lock name, the contender nodes in creation order: each
has an owner (a session or a kazoo client), a mode, whether it is an upgrade
(an exclusive node of an owner that holds the shared lock) and its holds
(mode, scope, savepoint level).  The rules of doc/locks.md decide who is granted:
a shared node when no other owner's exclusive node is before it, an
exclusive one when no other owner's node is before it, an upgrade when no
other owner holds the lock; an owner that holds the lock stacks a hold
(a shared one on its shared node, else on its exclusive node); two
upgraders deadlock (40P01).
Deadlocks across servers (doc/locks.md): the model's wait-for graph has an
edge from the owner of every waiting node to the owner of every node that
blocks it by the rules above (sessions of both clusters and kazoo clients;
kazoo never waits while the model runs on, so it only ends edges); a 40P01
from a lock call is allowed only when that graph has (or had, during the
wait) a circle through the caller's wait, and counted ("deadlocks (40P01)").
The generator makes circles: a session holding a name waits without a
timeout (or 2 s, longer than deadlock_timeout) for a name another owner
holds, often one whose owner waits for the session's own name.
With the setup's "keys", the names are decimal numbers, called as bigint
keys or as their text at random (a key stands for its decimal text); multi-
locks go as bigint[] then, and zk_unlock[_shared] over text[] or bigint[]
lets go of one session hold of each distinct name.
Revokes (doc/locks.md, "Revoking a lock", "Lost locks"): any session calls
zk_lock_revoke(name | key, '5s' or NULL), mostly of a name another session
holds.  Its rows must be the holders zk_lock_holders shows (lock_names.c's
rules over the model's nodes, view_held), with mode, cluster and pid: kazoo's
and the caller's own 'not touched', every other session's (idle, or running
a lock wait) 'revoked', with the node's token.  Then every node of a revoked
owner on the name is gone (an upgrade's two together) and its local locks
(lock_backend.c: one per name and mode; a shared hold taken while the shared
node was pinned by an upgrade rides on the exclusive one) become ghosts: the
owner's next zklock call (any of the lock's) must fail with 40001 naming one
of them, which forgets its session holds (reported once); a ghost with
transaction holds stays until its (sub)transaction ends, refuses PREPARE,
and makes COMMIT fail with 40001 (history.py asks commit_fails); a 40001
without a ghost is an anomaly; a lock wait the revoked owner runs (for
another name) must end at once, cancelled (57014); a node granted after the
revoke has a larger token than every node taken back.  The generator does
not revoke a holder that runs another recipe's statement, or waits to
upgrade the name revoked (its grant would race with the revoke).
Checks: no call returns a grant the model refuses and the reverse, a try
never waits, a wait with a short timeout times out only when the model says
the lock is taken, a waiter is granted when the model says so, fencing
tokens increase, ZooKeeper holds exactly the model's nodes.
"""

import re
import zlib

from driver import FAST, kazoo_acquire, kazoo_release_all

ROOT = "/zklock/locks/"


class Node:
    __slots__ = ("owner", "mode", "upgrade", "holds", "granted", "token", "waiting", "kl", "cycle", "victim",
                 "pin_x")

    def __init__(self, owner, mode, upgrade=False, kl=False):
        self.owner = owner
        self.mode = mode            # "x" or "s"
        self.upgrade = upgrade
        self.kl = kl                # kazoo's plain Lock: exclusive, but waits only for "__lock__" nodes
        self.holds = []             # [mode, scope ("xact"/"sess"), level]
        self.granted = False
        self.token = None
        self.waiting = False        # a pending call waits for it
        self.cycle = False          # a circle of waits ran through it while it waited
        self.victim = False         # it closed the circle: the youngest waiter, the detector's 40P01 is due
        self.pin_x = None           # a shared node whose holds went while its owner's upgrade (this
                                    # exclusive node) held on: pinned; a shared hold taken since rides
                                    # on the exclusive entry in lock_backend.c (one local lock, not two)


class Ghost:
    """A hold taken back (zk_lock_revoke): one of lock_backend.c's local
    locks of its owner, marked lost; its node is gone.  holds as Node's."""
    __slots__ = ("name", "mode", "holds")

    def __init__(self, name, mode, holds):
        self.name = name
        self.mode = mode
        self.holds = holds


FUNCS = {
    ("x", "xact", "wait"): "zk_lock", ("s", "xact", "wait"): "zk_lock_shared",
    ("x", "sess", "wait"): "zk_session_lock", ("s", "sess", "wait"): "zk_session_lock_shared",
    ("x", "xact", "try"): "zk_try_lock", ("s", "xact", "try"): "zk_try_lock_shared",
    ("x", "sess", "try"): "zk_try_session_lock", ("s", "sess", "try"): "zk_try_session_lock_shared",
}


class LockModel:
    name = "lock"
    kazoo = True

    def __init__(self, h):
        self.h = h
        n = h.setup.get("lnames", h.setup.get("names", 1))
        self.keys = bool(h.setup.get("keys"))
        if self.keys:
            # bigint keys, one block per history (the namespace's crc)
            base = 7 * 10 ** 12 + (zlib.crc32(h.ns.encode()) % 10 ** 6) * 10
            self.names = [str(base + i) for i in range(n)]
        else:
            self.names = ["%s-l%d" % (h.ns, i) for i in range(n)]
        self.nodes = {n: [] for n in self.names}
        self.max_tok = {n: 0 for n in self.names}
        self.max_x_tok = {n: 0 for n in self.names}
        self.last_x_owner = {}
        self.klocks = {}        # (k.idx, name, mode) -> kazoo lock object
        self.ghosts = {}        # session -> [Ghost]: its holds taken back by a revoke, not reported yet
        self.rv_tok = {n: 0 for n in self.names}   # the largest token a revoke took back
        self.sysids = {}        # cluster label -> system identifier (zk_lock_revoke's cluster)

    # ---- the rules
    def own(self, name, owner):
        x = s = None
        for n in self.nodes[name]:
            if n.owner is owner:
                if n.mode == "x":
                    x = n
                else:
                    s = n
        return x, s

    def grantable(self, name, node, nodes=None):
        L = self.nodes[name] if nodes is None else nodes
        i = L.index(node)
        others = [n for n in L if n.owner is not node.owner]
        before = [n for n in L[:i] if n.owner is not node.owner]
        if node.mode == "s":
            return not any(n.mode == "x" for n in before)
        if node.kl:
            return not any(n.mode == "x" for n in before)
        if node.upgrade:
            return not any(n.granted or (n.waiting and False) for n in others)
        return not before

    def would_grant_new(self, name, owner, mode, upgrade, kl=False):
        n = Node(owner, mode, upgrade, kl)
        return self.grantable(name, n, self.nodes[name] + [n])

    def deadlock(self, name, owner):
        """Another owner's upgrade already waits: ours could never be granted."""
        return any(n.upgrade and not n.granted and n.owner is not owner for n in self.nodes[name])

    def check_token(self, name, node, tok, who):
        """Fencing tokens: every exclusive grant's token is above the previous
        exclusive grant's (equal only for the same owner: an upgrade reports
        its shared node's token, and nobody else can write in between), and
        a shared grant's is above every exclusive grant's before it."""
        if tok is None:
            return
        last = self.max_x_tok[name]
        if node.mode == "x" and (tok < last or (tok == last and self.last_x_owner.get(name) is not node.owner)):
            self.h.anomaly("lock-token", "%s: exclusive grant to %s has token %s, not above %s given before"
                           % (name, who, tok, last))
        if node.mode == "s" and tok < last:
            self.h.anomaly("lock-token", "%s: shared grant to %s has token %s, below the exclusive %s given before"
                           % (name, who, tok, last))
        if node.mode == "x":
            self.max_x_tok[name] = max(last, tok)
            self.last_x_owner[name] = node.owner

    def drop_empty(self, name, owner):
        x, s = self.own(name, owner)
        L = self.nodes[name]
        if x is not None and not x.holds and not x.waiting:
            L.remove(x)
            x = None
        if s is not None and not s.holds and not s.waiting and x is None:
            L.remove(s)
        elif s is not None and not s.holds and x is not None and x.holds:
            s.pin_x = x     # pinned by the upgrade (lock_backend.c, free_local)

    def remove_holds(self, owner, pred, only=None):
        for name in self.names:
            if only is not None and name != only:
                continue
            for n in list(self.nodes[name]):
                if n.owner is owner:
                    n.holds = [hd for hd in n.holds if not pred(hd)]
            self.drop_empty(name, owner)

    # ---- the wait-for graph (deadlocks across servers)
    def blockers(self, name, node, L=None):
        """The owners of the nodes that keep node (waiting) from its grant."""
        L = self.nodes[name] if L is None else L
        i = L.index(node)
        out = set()
        for j, n in enumerate(L):
            if n.owner is node.owner:
                continue
            if node.upgrade and node.mode == "x":
                if n.granted:
                    out.add(id(n.owner))
            elif j < i and (n.mode == "x" or node.mode == "x"):
                out.add(id(n.owner))
        return out

    def cycle_through(self, owner, extra=None):
        """Whether the wait-for graph has a circle through owner's wait;
        extra: (name, Node) a waiting node not in the model (a call that
        waited and answered at once)."""
        waits = {}      # id(owner) -> set of id(blocking owner)
        for name in self.names:
            L = list(self.nodes[name])
            if extra is not None and extra[0] == name:
                L.append(extra[1])
            for n in L:
                if not n.granted and (n.waiting or (extra is not None and n is extra[1])):
                    waits.setdefault(id(n.owner), set()).update(self.blockers(name, n, L))
        start = id(owner)
        todo, seen = list(waits.get(start, ())), set()
        while todo:
            o = todo.pop()
            if o == start:
                return True
            if o in seen:
                continue
            seen.add(o)
            todo.extend(waits.get(o, ()))
        return False

    def mark_cycles(self, extra=None):
        """Note on every waiting node whether a circle runs through it now
        (the detector may answer a moment later, when a cancel or a
        terminate took a member out of the model already); extra: a call
        about to wait that the model does not keep (name, Node)."""
        if extra is not None:
            extra[1].waiting = True
        for name in self.names:
            for n in self.nodes[name]:
                if n.waiting and not n.granted and not n.cycle and self.cycle_through(n.owner, extra):
                    n.cycle = True
                    self.h.tallies["lock circles of waits"] += 1
        if extra is not None:
            extra[1].waiting = False

    def deadlock_allowed(self, s, name, node):
        """A 40P01 answered to s's wait for name (node: its waiting node in
        the model, or a new one for a call that answered at once): allowed
        only through a circle of the wait-for graph."""
        if node.cycle:
            ok = True
        elif node in self.nodes[name]:
            ok = self.cycle_through(s)
        else:
            node.waiting = True
            ok = self.cycle_through(s, (name, node))
            node.waiting = False
        if ok:
            self.h.tallies["deadlocks (40P01)"] += 1
        return ok

    def arg(self, name, text=False):
        """How a name is passed: a bigint key when the names are keys
        (unless text), else the text."""
        return int(name) if self.keys and not text else name

    def held_names(self, owner):
        return [nm for nm in self.names for n in self.nodes[nm]
                if n.owner is owner and n.holds]

    # ---- revokes (doc/locks.md, "Revoking a lock", "Lost locks")
    def view_held(self, name):
        """The nodes of name that zk_lock_holders (and so zk_lock_revoke)
        shows held: lock_names.c's zk_lock_blocker with guess_base over the
        model's contenders in creation order (an owner's oldest node stands
        for the shared node an upgrade holds)."""
        L = self.nodes[name]
        out = []
        for me, c in enumerate(L):
            shared = c.mode == "s"
            own_oldest = next((i for i in range(me) if L[i].owner is c.owner), -1)
            behind = len(L)
            if own_oldest >= 0 and not shared:
                behind = next((i for i in range(own_oldest + 1, me)
                               if L[i].mode == "x" and L[i].owner is not c.owner), len(L))
            pred = None
            for i in range(me):
                if L[i].owner is c.owner:
                    continue
                if i >= behind:
                    break
                if shared and L[i].mode == "s":
                    continue
                pred = i
            if pred is None:
                out.append(c)
        return out

    def sysid(self, cluster):
        if cluster.label not in self.sysids:
            self.sysids[cluster.label] = str(cluster.admin_query(
                "SELECT system_identifier FROM pg_control_system()")[0][0])
        return self.sysids[cluster.label]

    def lost_names(self, s):
        return [g.name for g in self.ghosts.get(s, [])]

    def lost_check(self, s, op, r, ctx):
        """Every zklock call starts by reporting a lost hold of its session
        (lock_backend.c, check_lost; doc/locks.md, "Lost locks"): with a
        hold of s taken back when the call began (ctx["lost"]), the call must
        fail with 40001 naming one of them; a session-scope hold is then
        forgotten, a transaction-scope one stays (the transaction cannot
        commit).  Without one, a 40001 is an anomaly.  True when the answer
        was dealt with here."""
        h = self.h
        lost = ctx.get("lost") or []
        what = "%s by %s" % (op.get("sql"), s.name)
        if not lost:
            if not r.ok and r.code == "40001":
                h.anomaly("lock-lost", "%s: 40001 (%s) while no hold of %s was taken back" % (what, r.msg, s.name))
                return True
            return False
        if r.ok or r.code != "40001":
            h.anomaly("lock-lost", "%s answered %r although its hold of %s was revoked: its next zklock call"
                      " must fail with 40001 (doc/locks.md, Lost locks)" % (what, r, ", ".join(sorted(set(lost)))))
            self.ghosts.pop(s, None)
            return True
        m = re.search(r'lock "(.*)" was lost', r.msg or "")
        name = m.group(1) if m else None
        gs = self.ghosts.get(s, [])
        mine = [g for g in gs if g.name == name]
        if not mine:
            h.anomaly("lock-lost", "%s: 40001 %r names none of the holds taken back (%s)"
                      % (what, r.msg, ", ".join(sorted(set(lost)))))
            return True
        # lock_backend.c reports the first lost local lock, its shared one
        # before its exclusive one (an upgrade's comes second); a session
        # scope hold is then forgotten
        g = sorted(mine, key=lambda g: g.mode != "s")[0]
        had = any(hd[1] == "sess" for hd in g.holds)
        g.holds = [hd for hd in g.holds if hd[1] != "sess"]
        if not g.holds:
            gs.remove(g)
        h.tallies["lock lost reported (40001)%s" % (" session" if had else "")] += 1
        return True

    def commit_fails(self, s):
        """A transaction-scope hold of s taken back: its COMMIT fails with
        40001 (doc/locks.md, Lost locks).  The name, or None."""
        for g in self.ghosts.get(s, []):
            if any(hd[1] == "xact" for hd in g.holds):
                return g.name
        return None

    def revoke_applicable(self, s, nm):
        """The generator's bounds on a revoke: a holder to be revoked that
        runs a statement runs a lock wait for another name (its cancel,
        57014, is then the lock model's to check); an upgrade's wait on the
        name revoked races with the revoke of its shared node (granted, it
        is the shared node's sibling and goes too; or cancelled)."""
        for n in self.nodes[nm]:
            o = n.owner
            if o is s or not hasattr(o, "pid") or o.pending is None:
                continue
            if o.pending.get("r") != "lock" or o.pending.get("nm") == nm:
                return False
        return True

    def applicable(self, s, op):
        if op["k"] == "revoke":
            return self.revoke_applicable(s, self.names[op["n"]])
        return True

    def revoke_expect(self, s, name):
        """The rows zk_lock_revoke(name) by s must answer: one per holder
        (zk_lock_holders' held), (mode, cluster, pid, outcome): kazoo's
        (cluster and pid NULL) and s's own are not touched; every other
        holder zklock made, idle or running a statement, is revoked."""
        rows = []
        for n in self.view_held(name):
            mode = "exclusive" if n.mode == "x" else "shared"
            if not hasattr(n.owner, "pid"):
                rows.append((mode, None, None, "not touched", n))
            else:
                rows.append((mode, self.sysid(n.owner.cluster), n.owner.pid,
                             "not touched" if n.owner is s else "revoked", n))
        return rows

    def done_revoke(self, s, op, r, ctx):
        h = self.h
        if self.lost_check(s, op, r, ctx):
            return
        if not r.ok:
            h.unexpected(s, op, r)
            return
        name = op["nm"]
        exp = ctx["expect"]
        key = lambda t: tuple(str(v) for v in t)    # (kazoo's cluster and pid are NULL)
        got = sorted(((row[0], row[2], row[3], row[4]) for row in r.rows), key=key)
        want = sorted((e[:4] for e in exp), key=key)
        h.tallies["lock revokes"] += 1
        for row in r.rows:
            h.tallies["lock revoke rows %s" % row[4]] += 1
        if got != want:
            h.anomaly("lock-revoke", "%s by %s answered %s, the model %s (%s)"
                      % (op.get("sql"), s.name, got, want, self.show(name)))
        # the revoked: every node of their owners goes (an upgrade's two
        # together); their holds are lost, the ones that were local locks
        # of lock_backend.c become ghosts; a statement they run is cancelled
        owners = []
        for e in exp:
            if e[3] == "revoked" and e[4].owner not in owners:
                owners.append(e[4].owner)
        toks = [row[1] for row in r.rows if row[4] == "revoked" and row[1] is not None]
        for e in exp:
            n = e[4]
            if e[3] == "revoked" and n.token is not None and not n.upgrade and n.token not in toks:
                h.anomaly("lock-revoke", "%s by %s: %s's %s node has token %s, not among the revoked rows' %s"
                          % (op.get("sql"), s.name, n.owner.name, e[0], n.token, toks))
        if toks:
            self.rv_tok[name] = max(self.rv_tok[name], max(toks))
        for o in owners:
            x, sh = self.own(name, o)
            gs = self.ghosts.setdefault(o, [])
            riding = sh is not None and sh.holds and x is not None and sh.pin_x is x
            if sh is not None and sh.holds and not riding:
                gs.append(Ghost(name, "s", [list(hd) for hd in sh.holds]))
            if x is not None and (x.holds or riding):
                gs.append(Ghost(name, "x", [list(hd) for hd in x.holds + (sh.holds if riding else [])]))
            if not gs:
                del self.ghosts[o]
            self.nodes[name] = [n for n in self.nodes[name] if n.owner is not o]
            if o.pending is not None and o.pctx is not None:
                o.pctx["revoked"] = True
            h.note("      (model: %s's holds of %s taken back: %s)" % (
                o.name, name, ", ".join("%s%s" % (g.mode, g.holds) for g in self.ghosts.get(o, [])
                                        if g.name == name) or "none of its local locks"))

    def check_after_revoke(self, name, node, tok, who):
        """A node granted after a revoke of its name was made after the
        holders taken back: its token is larger (doc/locks.md, Revoking a
        lock).  An upgrade reports its shared node's token: not checked."""
        if tok is None or node.upgrade or not self.rv_tok.get(name):
            return
        if tok <= self.rv_tok[name]:
            self.h.anomaly("lock-token", "%s: granted to %s after a revoke with token %s, not above %s taken back"
                           % (name, who, tok, self.rv_tok[name]))

    # ---- generation
    def gen(self, r, s):
        name = r.randrange(len(self.names))
        x = r.random()
        if r.random() < 0.07:
            # an operator's revoke (any session: the tests run as superuser),
            # mostly of a name another session holds
            held = [i for i, nm in enumerate(self.names) for n in self.nodes[nm]
                    if n.granted and n.owner is not s and hasattr(n.owner, "pid")]
            i = r.choice(held) if held and r.random() < 0.85 else name
            op = {"k": "revoke", "n": i, "kt": r.random() < 0.3, "t": r.choice(["5s", "5s", None])}
            if self.revoke_applicable(s, self.names[i]):
                return op
        if len(self.names) > 1 and r.random() < 0.25:
            # a circle of waits: holding a name, wait for one another owner
            # holds, best one whose owner waits for ours
            mine = set(self.held_names(s))
            if mine:
                close, other = [], []
                for nm in self.names:
                    if nm in mine:
                        continue
                    for n in self.nodes[nm]:
                        if n.owner is not s and n.holds and getattr(n.owner, "pid", None):
                            waiter = any(w.owner is n.owner and w.waiting for m in mine
                                         for w in self.nodes[m])
                            (close if waiter else other).append(nm)
                cand = close or other
                if cand:
                    scope = "xact" if (s.xact and r.random() < 0.7) else "sess"
                    return {"k": "lock", "n": self.names.index(r.choice(cand)), "m": r.choice(["x", "x", "s"]),
                            "sc": scope, "w": "wait", "t": r.choice([None, None, "30s", "2s"]),
                            "kt": r.random() < 0.3}
        if x < 0.04 and len(self.names) > 1:
            # let go of session holds of several names at once (text[] or bigint[])
            ns = [r.randrange(len(self.names)) for _ in range(r.randint(1, 3))]
            return {"k": "unlockm", "ns": ns, "m": r.choice(["x", "s"]), "kt": r.random() < 0.3}
        if x < 0.08 and len(self.names) > 1:
            # several at once (doc/locks.md, "Several locks at once"); a wait
            # is short, so no member stays held past the step
            ns = [r.randrange(len(self.names)) for _ in range(r.randint(1, 3))]
            scope = "xact" if (s.xact and r.random() < 0.7) else "sess"
            op = {"k": "lockall", "ns": ns, "m": r.choice(["x", "x", "s"]), "sc": scope,
                  "w": r.choice(["try", "wait"]), "kt": r.random() < 0.3}
            if op["w"] == "wait":
                op["t"] = r.choice(["0", "200ms"])
            return op
        if x < 0.55:
            mode = r.choice(["x", "x", "s"])
            scope = "xact" if (s.xact and r.random() < 0.7) else "sess"
            if not s.xact and scope == "xact":
                scope = "sess"
            kind = r.choice(["try", "wait"])
            op = {"k": "lock", "n": name, "m": mode, "sc": scope, "w": kind, "kt": r.random() < 0.3}
            if kind == "wait":
                op["t"] = r.choice(["0", "200ms", "200ms", "30s", None])
                if op["t"] in ("30s", None) and r.random() < 0.2:
                    op["st"] = 300
            return op
        if x < 0.75:
            return {"k": "unlock", "n": name, "m": r.choice(["x", "s"]), "kt": r.random() < 0.3}
        if x < 0.80:
            return {"k": "unlock_all"}
        if x < 0.92:
            return {"k": "token", "n": name, "kt": r.random() < 0.3}
        return {"k": "holders", "n": name}

    def gen_k(self, r, k):
        name = r.randrange(len(self.names))
        held = [key for key in self.klocks if key[0] == k.idx and key[1] == self.names[name]
                and getattr(self.klocks[key], "is_acquired", False)]
        if held:
            return {"k": "krelease", "n": name, "m": held[0][2]}
        return {"k": "kacquire", "n": name, "m": r.choice(["x", "x", "s", "l"]), "t": r.choice([0, 0.2])}

    def applicable_k(self, op, k):
        nm = self.names[op["n"]]
        lk = self.klocks.get((k.idx, nm, op["m"]))
        held = lk is not None and lk.is_acquired
        if op["k"] == "krelease":
            return held
        return not any(self.klocks[key].is_acquired for key in self.klocks
                       if key[0] == k.idx and key[1] == nm)

    # ---- execution
    def execute(self, s, op):
        h = self.h
        k = op["k"]
        s.touched.add("lock")
        if "n" in op:
            op["nm"] = self.names[op["n"]]
        # a hold of s taken back: this call must fail with 40001 at once
        lost = self.lost_names(s)
        if k == "revoke":
            name = op["nm"]
            a = self.arg(name, op.get("kt"))
            ctx = {"lost": lost, "expect": [] if lost else self.revoke_expect(s, name)}
            h.fast_call(s, op, "SELECT mode, token, cluster, pid, outcome FROM zk_lock_revoke(%%s%s, %%s::interval)"
                        % ("::bigint" if isinstance(a, int) else ""), (a, op.get("t")), self.done_revoke, ctx)
            return
        if k == "lock":
            name, mode, scope = op["nm"], op["m"], op["sc"]
            fn = FUNCS[(mode, scope, op["w"])]
            x, sh = self.own(name, s)
            ctx = {"stack": None, "new": None, "lost": lost}
            if lost:
                grant = True        # (it answers at once, 40001)
                ctx["upgrade"] = False
            elif (mode == "s" and (x or sh)) or (mode == "x" and x):
                # a shared hold stacks on our shared node, else rides on the
                # exclusive one (after an upgrade the owner has both)
                ctx["stack"] = (sh if sh is not None else x) if mode == "s" else x
                grant = True
            else:
                upgrade = mode == "x" and sh is not None
                ctx["upgrade"] = upgrade
                if upgrade and op["w"] == "wait" and self.deadlock(name, s) and not self.would_grant_new(name, s, mode, True):
                    ctx["deadlock"] = True
                grant = self.would_grant_new(name, s, mode, upgrade)
            ctx["grant"] = grant
            a = self.arg(name, op.get("kt"))
            cast = "::bigint" if isinstance(a, int) else ""
            if op["w"] == "try":
                h.fast_call(s, op, "SELECT %s(%%s%s), zk_lock_token(%%s%s)" % (fn, cast, cast), (a, a),
                            self.done_lock, ctx)
            else:
                tmo = {"0": 0.0, "200ms": 0.2, "2s": 2.0, "30s": None, None: None}[op["t"]]
                if not grant and tmo is None and not op.get("st") and not ctx.get("deadlock") and not lost:
                    n = Node(s, mode, ctx["upgrade"])
                    n.waiting = True
                    self.nodes[name].append(n)
                    ctx["new"] = n
                ww = not grant and not ctx.get("deadlock")
                if ww and ctx["new"] is None:
                    self.mark_cycles((name, Node(s, mode, ctx["upgrade"])))
                self.h_wait(s, op, "SELECT %s(%%s%s, %%s::interval)" % (fn, cast), (a, op["t"]), ww, tmo, ctx)
                new = ctx["new"]
                if new is not None and new.waiting and new in self.nodes[name] and self.cycle_through(s):
                    # its wait closed a circle: it is the youngest waiter of
                    # it, so the detector's 40P01 is due to it (settle waits
                    # for it, before anything else runs: a kazoo acquire
                    # racing with it would see its node go)
                    new.victim = True
                    self.h.tallies["lock circles closed by a pending wait"] += 1
                self.mark_cycles()
        elif k == "lockall":
            self.execute_all(s, op, lost)
        elif k == "unlockm":
            names = [self.names[i] for i in op["ns"]]
            fn = "zk_unlock" if op["m"] == "x" else "zk_unlock_shared"
            if self.keys and not op.get("kt"):
                h.fast_call(s, op, "SELECT %s(%%s::bigint[])" % fn, ([int(n) for n in names],),
                            self.done_unlockm, {"names": names, "lost": lost})
            else:
                h.fast_call(s, op, "SELECT %s(%%s::text[])" % fn, (names,), self.done_unlockm,
                            {"names": names, "lost": lost})
        elif k == "unlock":
            fn = "zk_unlock" if op["m"] == "x" else "zk_unlock_shared"
            a = self.arg(op["nm"], op.get("kt"))
            h.fast_call(s, op, "SELECT %s(%%s%s)" % (fn, "::bigint" if isinstance(a, int) else ""), (a,),
                        self.done_unlock, {"lost": lost})
        elif k == "unlock_all":
            h.fast_call(s, op, "SELECT zk_unlock_all()", None, self.done_unlock_all, {"lost": lost})
        elif k == "token":
            a = self.arg(op["nm"], op.get("kt"))
            h.fast_call(s, op, "SELECT zk_lock_token(%%s%s)" % ("::bigint" if isinstance(a, int) else ""),
                        (a,), self.done_token, {"lost": lost})
        elif k == "holders":
            h.fast_call(s, op, "SELECT mode, state FROM zk_lock_holders(%s)", (op["nm"],), self.done_holders,
                        {"lost": lost})

    def execute_all(self, s, op, lost=()):
        """A multi-lock: the members one after the other in the canonical
        order (the names' bytes), each distinct name once; the first that
        cannot be granted ends the call, and every member taken is let go."""
        mode, scope = op["m"], op["sc"]
        if scope == "xact" and not s.xact:
            scope = op["sc"] = "sess"
        names = [self.names[i] for i in op["ns"]]
        plan = []
        grant, dead, blocked = True, False, None
        for nm in sorted(set(names), key=lambda n: n.encode()) if not lost else ():
            x, sh = self.own(nm, s)
            if (mode == "s" and (x or sh)) or (mode == "x" and x):
                plan.append((nm, (sh if sh is not None else x) if mode == "s" else x, False))
                continue
            upgrade = mode == "x" and sh is not None
            if not self.would_grant_new(nm, s, mode, upgrade):
                grant = False
                dead = upgrade and op["w"] == "wait" and self.deadlock(nm, s)
                blocked = (nm, Node(s, mode, upgrade))
                break
            plan.append((nm, None, upgrade))
        ctx = {"plan": plan, "grant": grant, "dead": dead, "names": names, "blocked": blocked, "lost": list(lost)}
        fn = FUNCS[(mode, scope, op["w"])]
        if self.keys and not op.get("kt"):
            arr, cast = [int(n) for n in names], "bigint[]"
        else:
            arr, cast = names, "text[]"
        if op["w"] == "try":
            self.h.fast_call(s, op, "SELECT %s(%%s::%s)" % (fn, cast), (arr,), self.done_all, ctx)
            return
        tmo = {"0": 0.0, "200ms": 0.2}[op["t"]]

        def done(s_, op_, r, c):
            c.update(ctx)
            self.done_all(s_, op_, r, c)
        if blocked is not None and not dead:
            self.mark_cycles(blocked)
        self.h.wait_call(s, op, "SELECT %s(%%s::%s, %%s::interval)" % (fn, cast), (arr, op["t"]),
                         not grant and not dead, tmo, done)

    def done_all(self, s, op, r, ctx):
        h = self.h
        if self.lost_check(s, op, r, ctx):
            return
        mode, scope = op["m"], op["sc"]
        what = "%s by %s" % (op.get("sql"), s.name)
        if not r.ok:
            if r.code == "40P01" and ctx["dead"]:
                h.tallies["upgrade deadlocks (40P01)"] += 1
                return      # an upgrade member that can never be granted
            if r.code == "40P01" and ctx["blocked"] is not None and (
                    self.deadlock_allowed(s, ctx["blocked"][0], ctx["blocked"][1])
                    or ctx["blocked"][1].upgrade):
                return      # a circle of waits (an upgrade: seen earlier than the model)
            if r.code == "40P01":
                h.anomaly("lock-deadlock", "%s: 40P01 while the model's wait-for graph has no circle"
                          " through it (%s)" % (what, "; ".join(self.show(n) for n in sorted(set(ctx["names"])))))
                return
            if ctx["dead"]:
                h.anomaly("lock-deadlock", "%s: the model says a member's upgrade deadlocks (40P01), got %r"
                          % (what, r))
                return
            if r.code in ("55P03", "57014") and not ctx["grant"]:
                return
            if r.code in ("55P03", "57014"):
                h.anomaly("lock-refused", "%s: %r while the model says every member is free (%s)"
                          % (what, r, "; ".join(self.show(n) for n in sorted(set(ctx["names"])))))
                return
            h.unexpected(s, op, r)
            return
        toks = None
        if op["w"] == "try":
            got = r.rows[0][0]
        else:
            got, toks = True, r.rows[0][0]
        if got and not ctx["grant"]:
            h.anomaly("lock-overlap", "%s took every member while the model says one is taken (%s)"
                      % (what, "; ".join(self.show(n) for n in sorted(set(ctx["names"])))))
        if not got and ctx["grant"]:
            h.anomaly("lock-refused", "%s returned false while the model says every member is free" % what)
        if not got:
            return
        tokmap = {}
        if toks is not None:
            if len(toks) != len(ctx["names"]):
                h.anomaly("lock-token", "%s returned %d tokens for %d names" % (what, len(toks), len(ctx["names"])))
                return
            for nm, t in zip(ctx["names"], toks):
                if tokmap.setdefault(nm, t) != t:
                    h.anomaly("lock-token", "%s: a repeated name got two tokens %s and %s" % (what, tokmap[nm], t))
        for nm, st, upgrade in ctx["plan"]:
            hold = [mode, scope, s.level if scope == "xact" else 0]
            if st is not None and st in self.nodes[nm]:
                st.holds.append(hold)
                continue
            node = Node(s, mode, upgrade)
            self.nodes[nm].append(node)
            node.granted = True
            node.token = tokmap.get(nm)
            node.holds.append(hold)
            self.check_token(nm, node, node.token, s.name)
            self.check_after_revoke(nm, node, node.token, s.name)

    def h_wait(self, s, op, sql, args, would_wait, limit, ctx):
        def done(s_, op_, r, c):
            c.update(ctx)
            self.done_lock(s_, op_, r, c)
        r = self.h.wait_call(s, op, sql, args, would_wait, limit, done)
        if r is None:
            s.pctx.update(ctx)
            s.pctx["done"] = done

    def due_at_cancel(self, s, op, ctx):
        """Whether the model grants s's waiting lock call now (the harness
        asks just before it cancels it)."""
        new = ctx.get("new")
        if new is None or new not in self.nodes[op["nm"]]:
            return None
        return self.grantable(op["nm"], new)

    def done_lock(self, s, op, r, ctx):
        h = self.h
        name, mode, scope = op["nm"], op["m"], op["sc"]
        if self.lost_check(s, op, r, ctx):
            return
        if ctx.get("revoked") and not r.ok and r.code == "57014":
            h.tallies["lock waits cancelled by a revoke (57014)"] += 1
        new = ctx.get("new")
        if new is not None and new in self.nodes[name]:
            new.waiting = False
        # what the model says now (a pending waiter completes later)
        grant = ctx["grant"]
        if new is not None:
            grant = self.grantable(name, new)
        elif ctx.get("stack") is None and not ctx.get("deadlock"):
            grant = self.would_grant_new(name, s, mode, ctx.get("upgrade", False))
        what = "%s by %s" % (op.get("sql"), s.name)
        if not r.ok:
            if new is not None and new in self.nodes[name]:
                self.nodes[name].remove(new)
            if ctx.get("deadlock") and r.code == "40P01":
                h.tallies["upgrade deadlocks (40P01)"] += 1
                return
            if ctx.get("deadlock"):
                h.anomaly("lock-deadlock", "%s: the model says two upgraders deadlock (40P01), got %r" % (what, r))
                return
            if r.code in ("55P03", "57014") and not grant:
                if ctx.get("early") and r.code == "55P03":
                    h.anomaly("lock-early", "%s timed out after %.3fs" % (what, r.elapsed))
                return
            if r.code == "40P01" and not grant and ctx.get("stack") is None:
                node = new if new is not None else Node(s, mode, ctx.get("upgrade", False))
                if self.deadlock_allowed(s, name, node):
                    return  # a circle of waits, broken by the detector
                if ctx.get("upgrade"):
                    h.tallies["upgrade deadlocks (40P01)"] += 1
                    return  # an upgrade the implementation sees as a deadlock earlier than the model
            if r.code == "40P01":
                h.anomaly("lock-deadlock", "%s: 40P01 while the model's wait-for graph has no circle"
                          " through it (holders: %s)" % (what, self.show(name)))
                return
            if r.code == "57014" and ctx.get("due_at_cancel") is False:
                return      # not grantable when the cancel went: it won the race
            if r.code in ("55P03", "57014"):
                h.anomaly("lock-refused", "%s: %r while the model says it is free (holders: %s)"
                          % (what, r, self.show(name)))
                return
            h.unexpected(s, op, r)
            return
        if op["w"] == "try":
            got, tok = r.rows[0][0], r.rows[0][1]
        else:
            got, tok = True, r.rows[0][0]
        if got and not grant:
            h.anomaly("lock-overlap", "%s was granted while the model says it is taken (holders: %s)"
                      % (what, self.show(name)))
        if not got and grant:
            h.anomaly("lock-refused", "%s returned false while the model says it is free (holders: %s)"
                      % (what, self.show(name)))
        if ctx.get("deadlock"):
            h.anomaly("lock-deadlock", "%s: the model says two upgraders deadlock (40P01), got a grant" % what)
        if not got:
            return
        hold = [mode, scope, s.level if scope == "xact" else 0]
        st = ctx.get("stack")
        if st is not None and st in self.nodes[name]:
            st.holds.append(hold)
            if tok is not None and st.token is not None and op["w"] == "wait" and tok != st.token and mode == st.mode:
                h.anomaly("lock-token", "%s: a stacked hold returned token %s, the node's is %s" % (what, tok, st.token))
            return
        node = new if new is not None and new in self.nodes[name] else None
        if node is None:
            node = Node(s, mode, ctx.get("upgrade", False))
            self.nodes[name].append(node)
        node.granted = True
        node.token = tok
        node.holds.append(hold)
        self.check_token(name, node, tok, s.name)
        self.check_after_revoke(name, node, tok, s.name)

    def show(self, name):
        return "[" + ", ".join("%s:%s%s%s%s" % (getattr(n.owner, "name", n.owner), n.mode,
                                                 "^" if n.upgrade else "",
                                                 "" if n.granted else "(waiting)",
                                                 "x%d" % len(n.holds)) for n in self.nodes[name]) + "]"

    def done_unlock(self, s, op, r, ctx):
        if self.lost_check(s, op, r, ctx):
            return
        h = self.h
        if not r.ok:
            h.unexpected(s, op, r)
            return
        name, mode = op["nm"], op["m"]
        x, sh = self.own(name, s)
        target = None
        cands = [x] if mode == "x" else [sh, x]
        for n in cands:
            if n is None:
                continue
            for hd in n.holds:
                if hd[0] == mode and hd[1] == "sess":
                    target = (n, hd)
                    break
            if target:
                break
        got = r.rows[0][0]
        if bool(got) != bool(target):
            h.anomaly("lock-unlock", "%s by %s returned %s, the model %s (holders: %s)"
                      % (op.get("sql"), s.name, got, bool(target), self.show(name)))
        if target and got:
            target[0].holds.remove(target[1])
            self.drop_empty(name, s)

    def done_unlockm(self, s, op, r, ctx):
        """zk_unlock[_shared] over an array: one session hold of each
        distinct name; true when each had one."""
        if self.lost_check(s, op, r, ctx):
            return
        h = self.h
        if not r.ok:
            h.unexpected(s, op, r)
            return
        mode = op["m"]
        want = True
        for name in sorted(set(ctx["names"])):
            x, sh = self.own(name, s)
            target = None
            for n in ([x] if mode == "x" else [sh, x]):
                if n is None:
                    continue
                for hd in n.holds:
                    if hd[0] == mode and hd[1] == "sess":
                        target = (n, hd)
                        break
                if target:
                    break
            if target is None:
                want = False
                continue
            target[0].holds.remove(target[1])
            self.drop_empty(name, s)
        got = r.rows[0][0]
        if bool(got) != want:
            h.anomaly("lock-unlock", "%s by %s returned %s, the model %s (%s)"
                      % (op.get("sql"), s.name, got, want,
                         "; ".join(self.show(n) for n in sorted(set(ctx["names"])))))

    def done_unlock_all(self, s, op, r, ctx):
        if self.lost_check(s, op, r, ctx):
            return
        if not r.ok:
            self.h.unexpected(s, op, r)
            return
        self.remove_holds(s, lambda hd: hd[1] == "sess")

    def done_token(self, s, op, r, ctx):
        if self.lost_check(s, op, r, ctx):
            return
        if not r.ok:
            self.h.unexpected(s, op, r)
            return
        x, sh = self.own(op["nm"], s)
        n = x if x is not None and x.holds else (sh if sh is not None and sh.holds else None)
        want = n.token if n is not None else None
        if n is None and x is not None and sh is not None:
            want = x.token
        got = r.rows[0][0]
        if n is not None and want is None and got is not None:
            # a try's grant (a multi-lock's try answers only true): the
            # token is learnt here, and checked from now on
            n.token = got
            if n.mode == "x":     # (a shared node's may be below its owner's own upgrade's)
                self.check_token(op["nm"], n, got, s.name)
            return
        if (got is None) != (want is None) or (want is not None and got != want):
            self.h.anomaly("lock-token", "zk_lock_token(%s) by %s = %s, the model %s (holders: %s)"
                           % (op["nm"], s.name, got, want, self.show(op["nm"])))

    def done_holders(self, s, op, r, ctx):
        if self.lost_check(s, op, r, ctx):
            return
        if not r.ok:
            self.h.unexpected(s, op, r)
            return
        got = sorted(row[0] for row in r.rows)
        want = sorted("exclusive" if n.mode == "x" else "shared" for n in self.nodes[op["nm"]])
        if got != want:
            self.h.anomaly("lock-holders", "zk_lock_holders(%s) lists modes %s, the model %s (%s)"
                           % (op["nm"], got, want, self.show(op["nm"])))

    # ---- kazoo
    def klock(self, k, name, mode, new=False):
        """kazoo's lock object; a new one for every acquisition, as doc/locks.md
        says to do (kazoo creates the lock's node once per object, and
        ZooKeeper removes the empty container)."""
        key = (k.idx, name, mode)
        lk = self.klocks.get(key)
        if lk is None or new:
            path = ROOT + name
            lk = {"x": k.zk.WriteLock, "s": k.zk.ReadLock, "l": k.zk.Lock}[mode](path, k.name)
            self.klocks[key] = lk
        return lk

    def execute_k(self, k, op):
        h = self.h
        name, mode = self.names[op["n"]], op["m"]
        op["nm"] = name
        owner = self.kowner(k)
        lk = self.klock(k, name, mode, new=op["k"] == "kacquire")
        kl = mode == "l"
        if kl:
            mode = "x"
        if op["k"] == "kacquire":
            grant = self.would_grant_new(name, owner, mode, False, kl)

            got = h.kcall(k, op, lambda: kazoo_acquire(lk, op["t"]), bound=FAST + op["t"])
            if got is h.KFAIL:
                self.klocks.pop((k.idx, name, op["m"]), None)    # a new kazoo object next time
                return
            if got and not grant:
                h.anomaly("lock-overlap", "kazoo %s acquire by %s granted while the model says taken (holders: %s)"
                          % (mode, k.name, self.show(name)))
            if not got and grant:
                h.anomaly("lock-refused", "kazoo %s acquire by %s refused while the model says free (holders: %s)"
                          % (mode, k.name, self.show(name)))
            if got:
                n = Node(owner, mode, False, kl)
                n.granted = True
                n.holds.append([mode, "sess", 0])
                self.nodes[name].append(n)
        else:
            h.kcall(k, op, lk.release)
            self.remove_holds(owner, lambda hd: True, only=name)

    def kowner(self, k):
        if not hasattr(k, "owner_obj"):
            class KOwner:
                pass
            o = KOwner()
            o.name = k.name
            k.owner_obj = o
        return k.owner_obj

    # ---- transactions
    def ghost_holds(self, s, pred):
        """The end of a transaction or subtransaction ends the holds of the
        ghosts too; a ghost with no hold left is forgotten."""
        gs = self.ghosts.get(s)
        if not gs:
            return
        for g in list(gs):
            g.holds = [hd for hd in g.holds if not pred(hd)]
            if not g.holds:
                gs.remove(g)
        if not gs:
            del self.ghosts[s]

    def on_commit(self, s):
        self.remove_holds(s, lambda hd: hd[1] == "xact")
        self.ghost_holds(s, lambda hd: hd[1] == "xact")

    def on_rollback(self, s):
        self.remove_holds(s, lambda hd: hd[1] == "xact")
        self.ghost_holds(s, lambda hd: hd[1] == "xact")

    def on_rollback_to(self, s, level):
        self.remove_holds(s, lambda hd: hd[1] == "xact" and hd[2] >= level)
        self.ghost_holds(s, lambda hd: hd[1] == "xact" and hd[2] >= level)

    def on_release(self, s, level):
        for name in self.names:
            for n in self.nodes[name]:
                if n.owner is s:
                    for hd in n.holds:
                        if hd[1] == "xact" and hd[2] >= level:
                            hd[2] = level - 1
        for g in self.ghosts.get(s, []):
            for hd in g.holds:
                if hd[1] == "xact" and hd[2] >= level:
                    hd[2] = level - 1

    def on_terminate(self, s):
        for name in self.names:
            self.nodes[name] = [n for n in self.nodes[name] if n.owner is not s]
        self.ghosts.pop(s, None)

    def prepare_expect(self, s):
        strong = weak = False
        for name in self.names:
            # a ghost is a local lock still: its transaction holds refuse
            # PREPARE as any do (lock_backend.c, holds_transaction_locks)
            for n in self.nodes[name] + [g for g in self.ghosts.get(s, []) if g.name == name]:
                if getattr(n, "owner", s) is s:
                    for hd in n.holds:
                        if hd[1] == "xact":
                            strong = True
                        else:
                            weak = True
        return "strong" if strong else ("weak" if weak or "lock" in s.touched else None)

    # ---- waiting
    def due(self, s, op):
        if s.pctx is not None and s.pctx.get("revoked"):
            return True     # its statement is cancelled (57014): it ends now
        self.mark_cycles()
        for name in self.names:
            for n in self.nodes[name]:
                if n.owner is s and n.waiting:
                    return n.victim or self.grantable(name, n)
        return False

    def zk_check(self):
        for name in self.names:
            c = self.h.children(ROOT + name)
            if len(c) != len(self.nodes[name]):
                return "lock %s: %d contender nodes in ZooKeeper, the model %d %s" % (
                    name, len(c), len(self.nodes[name]), self.show(name))
        return None

    def final(self, s0):
        h = self.h
        for s in h.sessions:
            # a session-scope hold taken back is reported by one call each
            for _ in range(6):
                if not self.ghosts.get(s):
                    break
                h.fast_call(s, {"k": "unlock_all", "r": "lock"}, "SELECT zk_unlock_all()", None,
                            self.done_unlock_all, {"lost": self.lost_names(s)})
        for s in h.sessions:
            if any(n.owner is s for name in self.names for n in self.nodes[name]):
                h.fast_call(s, {"k": "unlock_all", "r": "lock"}, "SELECT zk_unlock_all()", None,
                            self.done_unlock_all)
        kazoo_release_all(h, list(self.klocks.values()), "release")
        for name in self.names:
            self.nodes[name] = [n for n in self.nodes[name] if hasattr(n.owner, "pid")]
