"""m_queue.py - the queue's reference model (zk_enqueue, zk_dequeue,
zk_try_dequeue, zk_queue_peek, zk_queue_length, zk_queue_purge, and kazoo's
LockingQueue on the same path).

An item is, in the model: pending (enqueued by an open transaction, at a
savepoint level), free (published, unclaimed), claimed (by a transaction at
a level, or by a kazoo client), done (consumed by a commit), purged or
dropped (its enqueue rolled back).  Free items are ordered by (priority,
publication, enqueue order).  The checks: what a dequeue returns was free,
in queue order; a dequeue returns something when something is free; a try
never waits; peek and length agree with the model; every committed item is
consumed at most once and, after the final drain, exactly once.

The delivery count (zk_message.attempts): each hand-out the model sees shows
more attempts than the last one it saw of that item, at least as many as
the model's hand-outs, and no more than those plus the items that dequeues
which did not answer (cancelled, failed, terminated, cut off by a restart)
may have claimed unseen; kazoo's hand-outs are not counted.

The dead-letter policy: one more queue, NS-pq, gets zk_queue_set_policy(NS-pq,
M, NS-pq.dlq) (M = setup "dlq_max", 1 to 3) before its first item.  Its items
are poison: enqueued outside a transaction, 1 to 3 at once through the array
form of zk_enqueue (published at once), handed out
only by "poison" steps (BEGIN; zk_dequeue or zk_try_dequeue; ROLLBACK:
always rolled back) and seen by peeks at the dead-letter queue.  The checks:
a hand-out shows attempts = the model's hand-outs of the item + 1 (plus at
most the items calls that failed may have claimed), never more than M; an
item handed out M times is never handed out again; a dead letter is an item
of NS-pq handed out M times, there once, with origin NS-pq, origin_msg_id its
msg_id in NS-pq, origin_attempts M and its payload; at the end (poison steps
until NS-pq is empty, then a drain of the dead-letter queue) every item is
in the dead-letter queue exactly once.

zk_queue_move (issue 38): "move" steps call zk_queue_move(src, dst, m)
(m random, 1 to 10000) between two of the model's queues and NS-mv, a
queue only moves reach, and "pmove" steps zk_queue_move(NS-pq.dlq, NS-pq, m)
(dead letters back into their origin, poison again).  Before and after the
call the tester reads both queues' items from ZooKeeper (names and data; a
dead letter's data is its header, then the payload).  The checks: the
result n is at most m and at most the items the model has free in src (the
items an open transaction or kazoo claimed are never moved), at least
min(m, the free ones not freed a moment ago by another client); the items
that left src are n, each now in dst exactly once and no more in src, the
others of src still there; they are the first n free items in queue order
(the model's, or src's own order for a dead-letter queue); dst holds
nothing else new; an item moved out of NS-pq.dlq has its original payload
(no header) in NS-pq.  A moved item is free in dst behind the items of its
priority there, with a new msg_id and attempts from 0; a dead letter moved
back is a poison item of NS-pq again (max_attempts hand-outs, then a dead
letter once more).  A move that fails is an anomaly, and the model then
takes what ZooKeeper shows (each item in exactly one of the two queues).
After the final drain (NS-mv drained like the others) every committed item
is consumed exactly once, whichever queues it went through.

Delayed items and backoff: one more queue, NS-dq, is used only by two
steps, each a whole transaction.  "denq": BEGIN; 1 to 3 zk_enqueue with
delay => d or not_before => clock_timestamp() + d (d 0 to 1.5 s; the model
notes the due time, a lower bound: the clock before the call plus d);
COMMIT or ROLLBACK.  "dtake": BEGIN; zk_dequeue(NS-dq, 0 | 300ms | 1s, 1..3)
(the clock after it answered, with each row); maybe zk_retry_later(msg_id,
d) on one item (d 0.2 to 1.5 s; the hold's end, a lower bound: the clock
before the call plus d); COMMIT or ROLLBACK.  The model: a committed delayed
item is not handed out before its due time less DTOL; a held item (the end
of a dtake with a retry, COMMIT or ROLLBACK) not before the hold's end less
DTOL, and then with attempts + 1; the others of a dtake are consumed by its
COMMIT, free again after its ROLLBACK; attempts are exact (each hand-out
the model's hand-outs + 1, plus what failed calls may have claimed unseen).
Loosely, "eventually": an item that has been due (or whose hold has ended)
for DSLACK seconds must not be missed by three dequeues that waited 1 s,
each started after that.  At the end a drain of NS-dq (waiting past the
last due time and hold) consumes every committed item exactly once.

Message groups: one more queue, NS-gq, gets items of 2 to 4 groups
(zk_enqueue_grouped, one call per item or the array form for items of one
group; the keys: plain, with '/', '~', '-' and a non-ASCII letter, and one
of 64 bytes) and some without a group (zk_enqueue), inside the sessions'
transactions (published at COMMIT, dropped by ROLLBACK or ROLLBACK TO) or
alone.  "gdeq" takes up to m items (zk_try_dequeue, zk_dequeue '0', '300ms'
or '1s') inside the transaction, which a later step commits or rolls back;
"gpeek" lists the queue; "gretry" (a whole transaction: zk_dequeue '300ms',
zk_retry_later on one item, ROLLBACK or a COMMIT refused with 25000) holds
an item.  A group's order is the order of publication (the model's COMMIT
order, call order within one transaction), whatever the priorities.  The
checks: an item of a group is handed out only when every item of its group
published before it is consumed (group-order), never while another item of
its group is claimed by an open transaction (group-exclusive), never two of
one group in one answer, a held one not before its hold ends (less DTOL);
attempts exact (plus what failed calls may have claimed unseen); a peek
lists only items that may be handed out (at most one per group); ZooKeeper's
entries never hold more than one item per group (zk_check: no more entries
than groups with an item out plus free items without a group; exactly the
claims the model has); a zk_dequeue(NS-gq, '1s') that returns nothing while
an item could be handed out for GSLACK seconds before it began is an
anomaly (group-stuck); at the end a drain (one item per group per round)
consumes every committed item exactly once, in its group's order.
"""

import time

from driver import FAST, now

# delayed items and holds (NS-dq): the clocks of the clusters and of the
# tester are one machine's; DTOL allows for rounding and the call's own time
DTOL = 0.25
DSLACK = 3.0

# message groups (NS-gq): a '1s' dequeue must return an item that could be
# handed out this long before it began (its predecessor consumed, a claim of
# it ended: the next item enters the queue when a worker serving it moves it)
GSLACK = 0.6

# An item made free by another ZooKeeper client (the other cluster's worker,
# kazoo) reaches a worker through a watch: a try or a zero timeout that
# looks at once may not see it yet.  Such an item is "fresh" for this long.
FRESH = 0.5

ROOT = "/zklock/queues/"


class Item:
    __slots__ = ("body", "q", "prio", "st", "owner", "level", "key", "eseq", "msg_id",
                 "consumed", "committed", "freed_by", "freed_at", "handouts", "attempts")

    def __init__(self, body, q, prio, owner, level, eseq):
        self.body = body
        self.q = q
        self.prio = prio
        self.st = "pend"
        self.owner = owner
        self.level = level
        self.key = None
        self.eseq = eseq
        self.msg_id = None
        self.consumed = 0
        self.committed = False
        self.freed_by = None      # who made it free last: a cluster label or "kazoo"
        self.freed_at = 0.0
        self.handouts = 0         # zklock hand-outs the model saw
        self.attempts = None      # the attempts the last of them showed


class PItem:
    """An item of the poison queue: free in it, "dead" (seen in the
    dead-letter queue) or "gone" (its dead letter consumed)."""
    __slots__ = ("body", "st", "handouts", "attempts", "msg_id", "dl_msg_id")

    def __init__(self, body):
        self.body = body
        self.st = "free"
        self.handouts = 0         # hand-outs from the poison queue the model saw
        self.attempts = None      # the attempts the last of them showed
        self.msg_id = None        # its msg_id in the poison queue
        self.dl_msg_id = None     # its msg_id in the dead-letter queue


class DItem:
    """An item of the delay queue NS-dq: "free" (published, due or not),
    "held" (a zk_retry_later hold), "done" (consumed), "dropped" (its
    enqueue rolled back) or "maybe" (a call's fate unknown)."""
    __slots__ = ("body", "st", "due", "until", "handouts", "attempts", "msg_id", "missed", "late")

    def __init__(self, body, due):
        self.body = body
        self.st = "free"
        self.due = due            # Unix time it is due (a lower bound)
        self.until = None         # Unix time its hold ends (a lower bound), while held
        self.handouts = 0
        self.attempts = None
        self.msg_id = None
        self.missed = 0           # 1 s dequeues that returned nothing while it was overdue
        self.late = False

    def ready_at(self):
        """From when it may be handed out (less DTOL)."""
        return max(self.due, self.until or 0.0)


class GItem:
    """An item of the group queue NS-gq: "pend" (enqueued by an open
    transaction), "free" (published and not claimed: out when it is its
    group's head), "claim" (by an open transaction), "held" (zk_retry_later),
    "done" (consumed), "dropped" (its enqueue rolled back) or "maybe" (a
    call's fate unknown)."""
    __slots__ = ("body", "group", "prio", "st", "owner", "level", "eseq", "pub", "freed_at", "done_at",
                 "until", "handouts", "attempts", "msg_id")

    def __init__(self, body, group, prio, owner, level, eseq):
        self.body = body
        self.group = group        # None: no group
        self.prio = prio
        self.st = "pend"
        self.owner = owner
        self.level = level
        self.eseq = eseq
        self.pub = None           # (publication, call order): the order in its group
        self.freed_at = 0.0       # (monotonic) published, or its last claim or hold ended
        self.done_at = None       # (monotonic) consumed
        self.until = None         # (Unix time) the end of its hold, while held
        self.handouts = 0
        self.attempts = None
        self.msg_id = None


class QueueModel:
    name = "queue"
    kazoo = True

    def __init__(self, h):
        self.h = h
        nq = h.setup.get("queues", 1)
        self.queues = ["%s-q%d" % (h.ns, i) for i in range(nq)]
        self.mq = "%s-mv" % h.ns   # the side queue of zk_queue_move steps (see the docstring)
        self.items = {}
        self.pubseq = 0
        self.eseq = 0
        self.kq = {}           # (k.idx, q) -> kazoo LockingQueue
        self.served = []       # waiters served since the last settling: (session, t0, queue)
        self.kheld = {}        # (k.idx, q) -> body
        self.unseen = {}       # q -> items dequeues that did not answer may have claimed
        # the poison queue and its dead-letter queue (see the docstring)
        self.pq = "%s-pq" % h.ns
        self.dlq = self.pq + ".dlq"
        self.pmax = h.setup.get("dlq_max", 2)
        self.pitems = {}       # body -> PItem
        self.punseen = 0       # hand-outs of the poison queue that failed calls may have made
        self.policy_set = False
        # the delay queue (delayed items, zk_retry_later)
        self.dq = "%s-dq" % h.ns
        self.ditems = {}       # body -> DItem
        self.dunseen = 0       # hand-outs of NS-dq that failed calls may have made
        # the group queue (message groups)
        self.gq = "%s-gq" % h.ns
        ng = h.setup.get("groups", 3)
        keys = ["%s-a" % h.ns, "%s/b~1-2 \u00e9" % h.ns, "g"]
        base = "%s-c." % h.ns
        keys.append(base + "z" * (64 - len(base.encode())))
        self.groups = keys[:max(2, min(ng, 4))]
        self.gitems = {}       # body -> GItem
        self.gpub = 0
        self.gunseen = 0       # hand-outs of NS-gq that failed calls may have made

    # ---- model helpers
    def free(self, q):
        return sorted((it for it in self.items.values() if it.q == q and it.st == "free"),
                      key=lambda it: it.key)

    def owned(self, owner):
        return [it for it in self.items.values() if it.owner == owner and it.st in ("pend", "claim")]

    def publish(self, its, by):
        self.pubseq += 1
        for it in sorted(its, key=lambda i: i.eseq):
            it.key = (it.prio, self.pubseq, it.eseq)
            it.st = "free"
            it.owner = None
            it.committed = True
            self.freed(it, by)

    @staticmethod
    def freed(it, by):
        it.freed_by = by
        it.freed_at = now()

    @staticmethod
    def fresh_for(it, s, waited):
        """True when session s may not have seen item it become free yet."""
        return not waited and it.freed_by != s.cluster.label and now() - it.freed_at < FRESH

    def consume(self, it, who):
        it.consumed += 1
        it.st = "done"
        it.owner = None
        if it.consumed > 1:
            self.h.anomaly("queue-dup", "item %s consumed %d times (last by %s)" % (it.body, it.consumed, who))

    # ---- generation
    def gen(self, r, s):
        h = self.h
        mv = self.gen_move(r)
        if mv is not None:
            return mv
        if r.random() < 0.35:
            return self.gen_g(r, s)
        if not s.xact and r.random() < 0.5:
            y = r.random()
            if y < 0.16:
                return {"k": "penq", "b": [h.new_id("x") for _ in range(r.choice([1, 1, 2, 3]))]}
            if y < 0.34:
                return {"k": "poison", "m": r.choice([1, 2, 3]), "t": r.choice([None, "0", "200ms"])}
            if y < 0.39:
                return {"k": "pdlq"}
            if y < 0.62:
                n = r.choice([1, 2, 2, 3])
                return {"k": "denq", "b": [h.new_id("d") for _ in range(n)],
                        "d": [r.choice([0.0, round(r.uniform(0.2, 1.5), 3), round(r.uniform(0.2, 1.5), 3)])
                              for _ in range(n)],
                        "nb": [r.random() < 0.3 for _ in range(n)],
                        "end": "ROLLBACK" if r.random() < 0.15 else "COMMIT"}
            return {"k": "dtake", "m": r.choice([1, 1, 2, 3]), "t": r.choice(["0", "300ms", "1s", "1s"]),
                    "retry": ([r.randrange(3), round(r.uniform(0.2, 1.5), 3)] if r.random() < 0.6 else None),
                    "end": "ROLLBACK" if r.random() < 0.3 else "COMMIT"}
        q = r.randrange(len(self.queues))
        x = r.random()
        if x < 0.30:
            n = r.choice([1, 1, 1, 2, 3])
            prios = [r.choice([100, 100, 100, 0, 50, 500, 999]) for _ in range(n)]
            bodies = [h.new_id("i") for _ in range(n)]
            return {"k": "enq", "q": q, "b": bodies, "p": prios}
        if x < 0.55:
            op = {"k": "deq", "q": q, "t": r.choice(["0", "200ms", "200ms", "30s", "30s", None]),
                  "m": r.choice([1, 1, 2, 3, 5])}
            if op["t"] in ("30s", None) and r.random() < 0.25:
                op["st"] = 300
            return op
        if x < 0.72:
            return {"k": "try", "q": q, "m": r.choice([1, 1, 2, 4])}
        if x < 0.82:
            return {"k": "peek", "q": q, "n": r.choice([1, 3, 10])}
        if x < 0.95:
            return {"k": "len", "q": q}
        return {"k": "purge", "q": q}

    def gen_k(self, r, k):
        h = self.h
        q = r.randrange(len(self.queues))
        held = (k.idx, self.queues[q]) in self.kheld
        x = r.random()
        if held:
            return {"k": "kconsume" if x < 0.6 else "krelease", "q": q}
        if x < 0.45:
            return {"k": "kput", "q": q, "p": r.choice([100, 100, 0, 500]), "b": h.new_id("k")}
        return {"k": "kget", "q": q, "t": r.choice([0, 0.2])}

    def applicable_k(self, op, k):
        held = (k.idx, self.queues[op["q"]]) in self.kheld
        if op["k"] in ("kconsume", "krelease"):
            return held
        if op["k"] == "kget":
            return not held
        return True

    def applicable(self, s, op):
        return not s.xact if op["k"] in ("penq", "poison", "pdlq", "denq", "dtake", "gretry") else True

    # ---- execution
    def execute(self, s, op):
        h = self.h
        k = op["k"]
        if k in ("move", "pmove"):
            s.touched.add("queue")
            return self.execute_move(s, op)
        if k in ("penq", "poison", "pdlq"):
            s.touched.add("queue")
            return self.execute_p(s, op)
        if k in ("denq", "dtake"):
            s.touched.add("queue")
            return self.denq(s, op) if k == "denq" else self.dtake(s, op)
        if k in ("genq", "gdeq", "gpeek", "gretry"):
            s.touched.add("queue")
            return getattr(self, k)(s, op)
        q = op["qn"] = self.queues[op["q"]]
        s.touched.add("queue")
        if k == "enq":
            if len(op["b"]) == 1:
                sql = "SELECT zk_enqueue(%s, %s::text, %s)"
                args = (q, op["b"][0], op["p"][0])
            else:
                sql = ("SELECT zk_enqueue(%s, v.b, v.p) FROM (VALUES "
                       + ", ".join(["(%s::text, %s::int)"] * len(op["b"])) + ") v(b, p)")
                args = [q]
                for b, p in zip(op["b"], op["p"]):
                    args += [b, p]
            h.fast_call(s, op, sql, args, self.done_enq)
        elif k == "deq":
            free = self.free(q)
            tmo = {"0": 0.0, "200ms": 0.2, "30s": None, None: None}[op["t"]]
            self.unseen[q] = self.unseen.get(q, 0) + op["m"]
            h.wait_call(s, op, "SELECT msg_id, body, attempts FROM zk_dequeue(%s, %s::interval, %s)",
                        (q, op["t"], op["m"]), would_wait=not free, limit=tmo,
                        done=self.done_deq)
        elif k == "try":
            self.unseen[q] = self.unseen.get(q, 0) + op["m"]
            h.fast_call(s, op, "SELECT msg_id, body, attempts FROM zk_try_dequeue(%s, %s)", (q, op["m"]),
                        self.done_deq)
        elif k == "peek":
            h.fast_call(s, op, "SELECT body FROM zk_queue_peek(%s, %s)", (q, op["n"]), self.done_peek)
        elif k == "len":
            h.fast_call(s, op, "SELECT zk_queue_length(%s)", (q,), self.done_len)
        elif k == "purge":
            h.fast_call(s, op, "SELECT zk_queue_purge(%s)", (q,), self.done_purge)

    def done_enq(self, s, op, r, ctx):
        if not r.ok:
            self.h.unexpected(s, op, r)
            return
        for b, p in zip(op["b"], op["p"]):
            self.eseq += 1
            self.items[b] = Item(b, op["qn"], p, s, s.level, self.eseq)

    def done_deq(self, s, op, r, ctx):
        h = self.h
        q = op["qn"]
        free = self.free(q)
        if not r.ok:
            if r.code == "57014" and ctx.get("expect_wait"):
                return            # cancelled or statement timeout while nothing was free
            h.unexpected(s, op, r)
            return
        if op.get("k") in ("deq", "try") and "q" in op and op["q"] is not None:
            self.unseen[q] = self.unseen.get(q, 0) - op["m"]   # answered: nothing unseen
        bodies = [row[1] for row in r.rows]
        what = "zk_try_dequeue" if op["k"] == "try" else "zk_dequeue(%s)" % op["t"]
        # a dequeue that may wait gets what a watch shows within its timeout;
        # a look at once (a try, '0') may miss an item another client freed
        # a moment ago, and any call may take a visible item before it
        waits = op["k"] == "deq" and op["t"] != "0"
        stale_ok = [i for i in free if self.fresh_for(i, s, False)]
        if len(bodies) > op["m"]:
            h.anomaly("queue-max-items", "%s returned %d rows, max_items %d" % (what, len(bodies), op["m"]))
        if not bodies and free and (waits or len(stale_ok) < len(free)):
            h.anomaly("queue-empty-while-free", "%s on %s by %s returned no row while %d item(s) were free (%s)"
                      % (what, q, s.name, len(free), ",".join(i.body for i in free[:5])))
        if not bodies and not free and op["k"] == "deq" and op["t"] == "200ms" and r.elapsed < 0.15:
            h.anomaly("queue-early", "zk_dequeue(200ms) returned no row after %.3fs" % r.elapsed)
        ok_bodies = []
        for row in r.rows:
            msg_id, b = row[0], row[1]
            it = self.items.get(b)
            if it is None or it.q != q:
                h.anomaly("queue-phantom", "%s returned %r, never enqueued in %s" % (what, b, q))
                continue
            if it.st != "free":
                kind = {"done": "queue-dup", "claim": "queue-double-claim", "pend": "queue-phantom",
                        "dropped": "queue-phantom", "purged": "queue-phantom"}[it.st]
                h.anomaly(kind, "%s by %s returned %s, which is %s (owner %s)"
                          % (what, s.name, b, it.st, getattr(it.owner, "name", it.owner)))
                continue
            if it.msg_id is not None and it.msg_id != msg_id:
                h.anomaly("queue-msg-id", "item %s had msg_id %s, now %s" % (b, it.msg_id, msg_id))
            it.msg_id = msg_id
            if len(row) > 2:
                self.check_attempts(it, row[2], what, s)
            ok_bodies.append(b)
        if len(set(r[0] for r in r.rows)) != len(r.rows):
            h.anomaly("queue-msg-id", "one dequeue returned a msg_id twice: %r" % (r.rows,))
        want = [i.body for i in free[:len(bodies)]]
        # items another waiter's dequeue of q took in the same round (its
        # answer is handled after this one): that one may have come first
        meanwhile = set(row[1] for op2, r2 in self.h.answered_meanwhile(s)
                        if r2.ok and op2.get("qn") == q for row in r2.rows)
        if ok_bodies == bodies and bodies != want:
            # no older free item skipped, unless it may not be visible yet
            last = max(i for i, it in enumerate(free) if it.body in bodies)
            skipped = [it for it in free[:last] if it.body not in bodies and it not in stale_ok
                       and it.body not in meanwhile]
            if skipped:
                h.anomaly("queue-order", "%s by %s returned %s, queue order says %s (skipped %s)"
                          % (what, s.name, bodies, want, [it.body for it in skipped]))
        if bodies and ctx.get("expect_wait") and ctx.get("limit") is None:
            self.served.append((s, s.t0, q))
        for b in ok_bodies:
            it = self.items[b]
            it.st = "claim"
            it.owner = s
            it.level = s.level

    def check_attempts(self, it, att, what, s):
        """A hand-out of it showed att attempts (the delivery count)."""
        h = self.h
        it.handouts += 1
        slack = max(self.unseen.get(it.q, 0), 0)
        if att is None or att < it.handouts:
            h.anomaly("queue-attempts", "%s by %s handed %s out with attempts %s, the model saw %d hand-outs"
                      % (what, s.name, it.body, att, it.handouts))
        elif it.attempts is not None and att <= it.attempts:
            h.anomaly("queue-attempts", "%s by %s handed %s out with attempts %s, after %s the last time"
                      % (what, s.name, it.body, att, it.attempts))
        elif att > it.handouts + slack:
            h.anomaly("queue-attempts", "%s by %s handed %s out with attempts %s, the model saw %d hand-outs"
                      " and at most %d more unseen" % (what, s.name, it.body, att, it.handouts, slack))
        it.attempts = att

    def done_peek(self, s, op, r, ctx):
        if not r.ok:
            self.h.unexpected(s, op, r)
            return
        got = [row[0] for row in r.rows]
        free = self.free(op["qn"])
        want = [i.body for i in free[:op["n"]]]
        alt = [i.body for i in free if not self.fresh_for(i, s, False)][:op["n"]]
        if got != want and got != alt:
            self.h.anomaly("queue-peek", "zk_queue_peek(%s, %d) gave %s, the model %s" % (op["qn"], op["n"], got, want))

    def done_len(self, s, op, r, ctx):
        if not r.ok:
            self.h.unexpected(s, op, r)
            return
        free = self.free(op["qn"])
        n = len(free)
        fresh = len([i for i in free if self.fresh_for(i, s, False)])
        if not n - fresh <= r.rows[0][0] <= n:
            self.h.anomaly("queue-length", "zk_queue_length(%s) = %s, the model %d" % (op["qn"], r.rows[0][0], n))

    def done_purge(self, s, op, r, ctx):
        if not r.ok:
            self.h.unexpected(s, op, r)
            return
        free = self.free(op["qn"])
        if r.rows[0][0] != len(free):
            self.h.anomaly("queue-purge", "zk_queue_purge(%s) = %s, the model %d" % (op["qn"], r.rows[0][0], len(free)))
        for it in free:
            it.st = "purged"

    # ---- the poison queue and its dead-letter queue
    def set_policy(self, s, op):
        if self.policy_set:
            return True
        r = self.h.sql(s, op, "SELECT zk_queue_set_policy(%s, %s, %s)", (self.pq, self.pmax, self.dlq), FAST)
        if not r.ok:
            self.h.unexpected(s, op, r)
            self.h.after(s, op, r)
            return False
        self.policy_set = True
        return True

    def execute_p(self, s, op):
        h = self.h
        k = op["k"]
        if k == "penq":
            if not self.set_policy(s, op):
                return
            bs = op["b"] if isinstance(op["b"], list) else [op["b"]]
            r = h.sql(s, op, "SELECT zk_enqueue(%s, %s::text[])", (self.pq, bs), FAST)
            if r.ok:
                for b in bs:
                    self.pitems[b] = PItem(b)
            elif r.pending:
                h.anomaly("slow-call", "%s by %s did not answer within %.0fs" % (op["sql"], s.name, FAST))
                h.recover(s)
                for b in bs:
                    self.pitems[b] = PItem(b)   # maybe: its fate unknown
                    self.pitems[b].st = "maybe"
            else:
                h.unexpected(s, op, r)
            h.after(s, op, r)
        elif k == "poison":
            self.poison(s, op, op["m"], op["t"])
        elif k == "pdlq":
            r = h.sql(s, op, "SELECT msg_id, body, attempts, origin, origin_msg_id, origin_attempts"
                             " FROM zk_queue_peek(%s, 1000)", (self.dlq,), FAST)
            if r.ok:
                self.dead_letters(s, r.rows, "zk_queue_peek(%s)" % self.dlq, peek=True)
            else:
                h.unexpected(s, op, r)
            h.after(s, op, r)

    def poison(self, s, op, m, t):
        """BEGIN; a dequeue of up to m items of the poison queue; ROLLBACK.
        Returns the rows (None when the dequeue failed)."""
        h = self.h
        r = h.sql(s, op, "BEGIN", None, FAST)
        if not r.ok:
            h.unexpected(s, op, r)
            h.after(s, op, r)
            return None
        if t is None:
            sql, args, what = "zk_try_dequeue(%s, %s)", (self.pq, m), "zk_try_dequeue"
        else:
            sql, args, what = "zk_dequeue(%s, %s::interval, %s)", (self.pq, t, m), "zk_dequeue(%s)" % t
        r = h.sql(s, op, "SELECT msg_id, body, attempts, origin FROM " + sql, args, FAST + 0.5)
        if r.pending:
            h.anomaly("slow-call", "%s by %s did not answer within %.1fs" % (op["sql"], s.name, FAST + 0.5))
            r = h.recover(s)
        rows = None
        if r.ok:
            rows = r.rows
            self.p_handouts(s, rows, what, m)
        else:
            self.punseen += m
            h.unexpected(s, op, r)
        if r.broken:
            h.after(s, op, r)
            return rows
        rb = h.sql(s, {"r": "queue"}, "ROLLBACK", None, FAST)
        if not rb.ok:
            h.unexpected(s, op, rb)
            h.after(s, op, rb)
        return rows

    def p_handouts(self, s, rows, what, m):
        """Hand-outs from the poison queue (each then rolled back)."""
        h = self.h
        if len(rows) > m:
            h.anomaly("queue-max-items", "%s returned %d rows, max_items %d" % (what, len(rows), m))
        for msg_id, b, att, origin in rows:
            it = self.pitems.get(b)
            if it is None:
                h.anomaly("queue-phantom", "%s on %s returned %r, never enqueued there" % (what, self.pq, b))
                continue
            if it.st == "maybe":
                it.st = "free"
            if origin is not None:
                h.anomaly("queue-dlq-origin", "%s on %s returned %s with origin %r: not a dead letter"
                          % (what, self.pq, b, origin))
            if it.st != "free":
                h.anomaly("queue-dlq-again", "%s by %s handed %s out from %s, which is %s in %s"
                          % (what, s.name, b, self.pq, "consumed" if it.st == "gone" else "already",
                             self.dlq))
            if it.msg_id is not None and it.msg_id != msg_id:
                h.anomaly("queue-msg-id", "item %s had msg_id %s, now %s" % (b, it.msg_id, msg_id))
            it.msg_id = msg_id
            it.handouts += 1
            h.tallies["poison hand-outs"] += 1
            slack = max(self.punseen, 0)
            if it.handouts > self.pmax:
                h.anomaly("queue-dlq-beyond-max", "%s by %s handed %s out once more, hand-out %d (attempts %s), max_attempts %d"
                          % (what, s.name, b, it.handouts, att, self.pmax))
            elif att is None or att > self.pmax:
                h.anomaly("queue-dlq-beyond-max", "%s by %s handed %s out with attempts %s, max_attempts %d"
                          % (what, s.name, b, att, self.pmax))
            elif att < it.handouts or att > it.handouts + slack:
                h.anomaly("queue-attempts", "%s by %s handed %s out with attempts %s, the model saw %d hand-outs"
                          " (this one included) and at most %d more unseen" % (what, s.name, b, att, it.handouts, slack))
            elif it.attempts is not None and att <= it.attempts:
                h.anomaly("queue-attempts", "%s by %s handed %s out with attempts %s, after %s the last time"
                          % (what, s.name, b, att, it.attempts))
            it.attempts = att

    def dead_letters(self, s, rows, what, peek):
        """Rows of the dead-letter queue: (msg_id, body, attempts, origin,
        origin_msg_id, origin_attempts)."""
        h = self.h
        ids = [row[0] for row in rows]
        if len(set(ids)) != len(ids):
            h.anomaly("queue-dlq-dup", "%s listed a msg_id twice: %r" % (what, rows))
        bodies = [row[1] for row in rows]
        for b in set(bodies):
            if bodies.count(b) > 1:
                h.anomaly("queue-dlq-dup", "%s listed %s %d times" % (what, b, bodies.count(b)))
        for msg_id, b, att, origin, om, oa in rows:
            it = self.pitems.get(b)
            if it is None:
                h.anomaly("queue-dlq-phantom", "%s listed %r, never enqueued in %s" % (what, b, self.pq))
                continue
            if it.st == "maybe":
                it.st = "free"
            if origin != self.pq or oa != self.pmax:
                h.anomaly("queue-dlq-header", "%s: dead letter %s has origin %r and origin_attempts %r, the model"
                          " %r and %d" % (what, b, origin, oa, self.pq, self.pmax))
            if it.msg_id is not None and om != it.msg_id:
                h.anomaly("queue-dlq-header", "%s: dead letter %s has origin_msg_id %r, its msg_id in %s was %s"
                          % (what, b, om, self.pq, it.msg_id))
            if not (self.pmax - max(self.punseen, 0) <= it.handouts <= self.pmax):
                h.anomaly("queue-dlq-early", "%s: %s is a dead letter after %d hand-outs the model saw "
                          "(at most %d more unseen), max_attempts %d"
                          % (what, b, it.handouts, max(self.punseen, 0), self.pmax))
            if it.st == "gone":
                h.anomaly("queue-dlq-dup", "%s: dead letter %s is there again after it was consumed" % (what, b))
            if it.dl_msg_id is not None and it.dl_msg_id != msg_id:
                h.anomaly("queue-dlq-dup", "%s: dead letter %s has msg_id %s, %s before: moved twice"
                          % (what, b, msg_id, it.dl_msg_id))
            it.dl_msg_id = msg_id
            exp = 0 if peek else 1
            if att != exp:
                h.anomaly("queue-attempts", "%s: dead letter %s shows attempts %r, the model %d" % (what, b, att, exp))
            it.st = "dead" if peek else "gone"
            if not peek:
                h.tallies["dead letters"] += 1

    def final_poison(self, s):
        """Poison steps until the poison queue is empty, then a drain of the
        dead-letter queue: every item was moved there exactly once."""
        h = self.h
        if not self.pitems:
            return
        for _ in range(self.pmax + 5):
            op = {"k": "poison", "r": "queue"}
            rows = self.poison(s, op, 100, "1s")
            if rows is None:
                return
            if not rows:
                r = h.sql(s, {"r": "queue"}, "SELECT zk_queue_length(%s)", (self.pq,), FAST)
                if r.ok and r.rows[0][0] == 0:
                    break
        for _ in range(20):
            op = {"k": "pdrain", "r": "queue"}
            r = h.sql(s, op, "BEGIN", None, FAST)
            r = h.sql(s, op, "SELECT msg_id, body, attempts, origin, origin_msg_id, origin_attempts"
                             " FROM zk_dequeue(%s, '1s', 100)", (self.dlq,), FAST + 1)
            if not r.ok:
                h.anomaly("queue-drain", "drain of %s: %r" % (self.dlq, r))
                h.after(s, op, r)
                return
            self.dead_letters(s, r.rows, "zk_dequeue(%s)" % self.dlq, peek=False)
            c = h.sql(s, {"r": "queue"}, "COMMIT", None, FAST)
            if not c.ok:
                h.anomaly("commit-failed", "COMMIT of the drain of %s: %r" % (self.dlq, c))
                return
            if not r.rows:
                break
        for it in self.pitems.values():
            if it.st != "gone" and it.st != "maybe":
                h.anomaly("queue-dlq-lost", "item %s of %s (%d hand-outs seen) is not in %s after the drain"
                          % (it.body, self.pq, it.handouts, self.dlq))

    # ---- the delay queue: delayed items and zk_retry_later
    def dcall(self, s, op, sql, args, wait=FAST):
        """One statement of a delay-queue step; None when it failed (the
        transaction is then rolled back, or the session reconnected)."""
        h = self.h
        r = h.sql(s, op, sql, args, wait)
        if r.pending:
            h.anomaly("slow-call", "%s by %s did not answer within %.1fs" % (op["sql"], s.name, wait))
            r = h.recover(s)
        if r.ok:
            return r
        h.unexpected(s, op, r)
        if r.broken:
            h.reconnect(s)
        else:
            h.sql(s, {"r": "queue"}, "ROLLBACK", None, FAST)
        return None

    def denq(self, s, op):
        """BEGIN; zk_enqueue(NS-dq, b, delay | not_before) for each; COMMIT or ROLLBACK."""
        if self.dcall(s, op, "BEGIN", None) is None:
            return
        dues = []
        for b, d, nb in zip(op["b"], op["d"], op["nb"]):
            if nb:
                sql = ("SELECT extract(epoch FROM t.nb)::float8, zk_enqueue(%s, %s::text, not_before => t.nb)"
                       " FROM (SELECT clock_timestamp() + make_interval(secs => %s) AS nb) t")
                args = (self.dq, b, d)
            else:
                sql = ("SELECT extract(epoch FROM clock_timestamp() + make_interval(secs => %s))::float8,"
                       " zk_enqueue(%s, %s::text, delay => make_interval(secs => %s))")
                args = (d, self.dq, b, d)
            r = self.dcall(s, op, sql, args)
            if r is None:
                return
            dues.append(r.rows[0][0])
        c = self.h.sql(s, op, op["end"], None, FAST)
        if c.pending:
            self.h.anomaly("slow-call", "%s by %s did not answer within %.0fs" % (op["end"], s.name, FAST))
            c = self.h.recover(s)
        if op["end"] == "ROLLBACK":
            for b, due in zip(op["b"], dues):
                it = self.ditems[b] = DItem(b, due)
                it.st = "dropped"
            if not c.ok:
                self.h.unexpected(s, op, c)
                if c.broken:
                    self.h.reconnect(s)
            return
        for b, due in zip(op["b"], dues):
            it = self.ditems[b] = DItem(b, due)
            if not c.ok:
                it.st = "maybe"
        if not c.ok:
            self.h.unexpected(s, op, c)
            if c.broken:
                self.h.reconnect(s)
        self.h.tallies["delayed items"] += sum(1 for d in op["d"] if d > 0)

    def d_handouts(self, s, rows, what, t_before, m):
        """Rows (msg_id, body, attempts, clock after the answer) of a dequeue
        of NS-dq that started at t_before; returns the items."""
        h = self.h
        if len(rows) > m:
            h.anomaly("queue-max-items", "%s returned %d rows, max_items %d" % (what, len(rows), m))
        got = []
        for msg_id, b, att, t in rows:
            it = self.ditems.get(b)
            if it is None or it.st == "dropped":
                h.anomaly("queue-phantom", "%s on %s returned %r, %s" % (what, self.dq, b,
                          "never enqueued there" if it is None else "whose enqueue was rolled back"))
                continue
            if it.st == "done":
                h.anomaly("queue-dup", "%s by %s returned %s of %s, consumed before" % (what, s.name, b, self.dq))
                continue
            if it.st != "maybe":
                if t < it.due - DTOL:
                    h.anomaly("queue-delay-early", "%s by %s handed %s out at %.3f, %.3fs before its due time"
                              % (what, s.name, b, t, it.due - t))
                if it.until is not None and t < it.until - DTOL:
                    h.anomaly("queue-hold-early", "%s by %s handed %s out at %.3f, %.3fs before its hold"
                              " (zk_retry_later) ended" % (what, s.name, b, t, it.until - t))
            if it.msg_id is not None and it.msg_id != msg_id:
                h.anomaly("queue-msg-id", "item %s had msg_id %s, now %s" % (b, it.msg_id, msg_id))
            it.msg_id = msg_id
            it.handouts += 1
            slack = max(self.dunseen, 0)
            if att is None or att < it.handouts or att > it.handouts + slack:
                h.anomaly("queue-attempts", "%s by %s handed %s out with attempts %s, the model saw %d hand-outs"
                          " (this one included) and at most %d more unseen" % (what, s.name, b, att,
                                                                              it.handouts, slack))
            elif it.attempts is not None and att <= it.attempts:
                h.anomaly("queue-attempts", "%s by %s handed %s out with attempts %s, after %s the last time"
                          % (what, s.name, b, att, it.attempts))
            if it.until is not None:
                h.tallies["held items handed out again"] += 1
            if it.handouts == 1:
                h.tallies["delay-queue items handed out"] += 1
            it.attempts = att
            it.st = "claim"
            it.until = None
            it.missed = 0
            got.append(it)
        return got

    def d_missed(self, s, what, t_before, rows):
        """A dequeue that waited 1 s and returned nothing: items overdue by
        DSLACK when it started count a miss; three are an anomaly."""
        if rows:
            return
        for it in self.ditems.values():
            if it.st == "free" or it.st == "held":
                if t_before >= it.ready_at() + DSLACK:
                    it.missed += 1
                    if it.missed >= 3 and not it.late:
                        it.late = True
                        self.h.anomaly("queue-delay-late", "%s by %s returned nothing the %dth time, while %s"
                                       " (%s) was ready %.1fs before it began"
                                       % (what, s.name, it.missed, it.body, it.st, t_before - it.ready_at()))

    def dtake(self, s, op):
        """BEGIN; zk_dequeue(NS-dq, t, m); maybe zk_retry_later on one; COMMIT
        (refused with 25000 when one is marked) or ROLLBACK."""
        h = self.h
        if self.dcall(s, op, "BEGIN", None) is None:
            return
        t_before = time.time()
        what = "zk_dequeue(%s, %s)" % (self.dq, op["t"])
        self.dunseen += op["m"]
        r = self.dcall(s, op, "SELECT msg_id, body, attempts, extract(epoch FROM clock_timestamp())::float8"
                              " FROM zk_dequeue(%s, %s::interval, %s)", (self.dq, op["t"], op["m"]), FAST + 1.5)
        if r is None:
            return
        self.dunseen -= op["m"]
        got = self.d_handouts(s, r.rows, what, t_before, op["m"])
        if op["t"] == "1s":
            self.d_missed(s, what, t_before, r.rows)
        held = None
        if op["retry"] and got:
            it = got[op["retry"][0] % len(got)]
            d = op["retry"][1]
            rr = self.dcall(s, op, "SELECT extract(epoch FROM clock_timestamp() + make_interval(secs => %s))::float8,"
                                   " zk_retry_later(%s, make_interval(secs => %s))", (d, it.msg_id, d))
            if rr is None:
                for x in got:
                    x.st = "free"
                return
            held = it
            it.until = rr.rows[0][0]
        c = h.sql(s, op, op["end"], None, FAST)
        if c.pending:
            h.anomaly("slow-call", "%s by %s did not answer within %.0fs" % (op["end"], s.name, FAST))
            c = h.recover(s)
        # a COMMIT with a marked item is refused (25000) and rolls back;
        # one that succeeds is an anomaly (it would consume the held item)
        refused = held is not None and op["end"] == "COMMIT"
        if refused and c.ok:
            h.anomaly("retry-commit", "COMMIT by %s with %s marked by zk_retry_later succeeded"
                      % (s.name, held.body))
        for x in got:
            if x is held:
                x.st = "held"
                h.tallies["holds"] += 1
            elif refused and not c.ok and c.code == "25000":
                x.st = "free"
            elif not c.ok and op["end"] == "COMMIT":
                x.st = "maybe"
            elif op["end"] == "COMMIT":
                x.st = "done"
            else:
                x.st = "free"
        if refused and not c.ok and c.code == "25000":
            h.tallies["holds_commit_refused"] += 1
        elif not c.ok:
            h.unexpected(s, op, c)
            if c.broken:
                h.reconnect(s)

    def final_delay(self, s):
        """Drain NS-dq, waiting past the last due time and hold: every
        committed item consumed exactly once."""
        h = self.h
        if not self.ditems:
            return
        last = max([it.ready_at() for it in self.ditems.values()] + [time.time()])
        deadline = last + DSLACK + 10
        while time.time() < deadline:
            want = [it for it in self.ditems.values() if it.st in ("free", "held", "maybe")]
            if not want and time.time() > last + 1:
                break
            op = {"k": "ddrain", "r": "queue"}
            t_before = time.time()
            if self.dcall(s, op, "BEGIN", None) is None:
                return
            r = self.dcall(s, op, "SELECT msg_id, body, attempts, extract(epoch FROM clock_timestamp())::float8"
                                  " FROM zk_dequeue(%s, '1s', 100)", (self.dq,), FAST + 1.5)
            if r is None:
                return
            got = self.d_handouts(s, r.rows, "zk_dequeue(%s) (drain)" % self.dq, t_before, 100)
            self.d_missed(s, "zk_dequeue(%s) (drain)" % self.dq, t_before, r.rows)
            c = h.sql(s, op, "COMMIT", None, FAST)
            if not c.ok:
                h.anomaly("commit-failed", "COMMIT of the drain of %s: %r" % (self.dq, c))
                return
            for x in got:
                x.st = "done"
        for it in self.ditems.values():
            if it.st in ("free", "held"):
                h.anomaly("queue-lost", "committed item %s of %s (due %.3f, %d hand-outs) is %s after the drain"
                          % (it.body, self.dq, it.due, it.handouts, it.st))

    # ---- kazoo
    def kqueue(self, k, q):
        o = self.kq.get((k.idx, q))
        if o is None:
            o = self.kq[(k.idx, q)] = k.zk.LockingQueue(ROOT + q)
        return o

    def execute_k(self, k, op):
        h = self.h
        q = op["qn"] = self.queues[op["q"]]
        kq = self.kqueue(k, q)
        kind = op["k"]
        if kind == "kput":
            h.kcall(k, op, lambda: kq.put(op["b"].encode(), priority=op["p"]))
            self.eseq += 1
            it = Item(op["b"], q, op["p"], None, 0, self.eseq)
            self.items[op["b"]] = it
            self.publish([it], "kazoo")
        elif kind == "kget":
            free = self.free(q)
            v = h.kcall(k, op, lambda: kq.get(timeout=op["t"]), bound=FAST + op["t"])
            if v is h.KFAIL:
                return
            if v is None:
                if free:
                    h.anomaly("queue-empty-while-free", "kazoo get(%s) on %s returned nothing while %d item(s) were free (%s)"
                              % (op["t"], q, len(free), ",".join(i.body for i in free[:5])))
                return
            b = v.decode()
            it = self.items.get(b)
            if it is None or it.st != "free":
                h.anomaly("queue-phantom" if it is None else "queue-double-claim",
                          "kazoo get on %s returned %s (%s)" % (q, b, "unknown" if it is None else it.st))
                return
            if free and free[0].body != b:
                h.anomaly("queue-order", "kazoo get returned %s, queue order says %s" % (b, free[0].body))
            it.st = "claim"
            it.owner = ("k", k.idx)
            self.kheld[(k.idx, q)] = b
        elif kind == "kconsume":
            b = self.kheld.pop((k.idx, q))
            v = h.kcall(k, op, lambda: kq.consume())
            if v is not True:
                h.anomaly("queue-kazoo", "kazoo consume of %s answered %r" % (b, v))
            self.consume(self.items[b], k.name)
        elif kind == "krelease":
            b = self.kheld.pop((k.idx, q))
            h.kcall(k, op, lambda: kq.release())
            it = self.items[b]
            it.st = "free"
            it.owner = None
            self.freed(it, "kazoo")

    # ---- transactions
    def on_commit(self, s):
        self.g_on_commit(s)
        pend = [it for it in self.items.values() if it.owner is s and it.st == "pend"]
        if pend:
            self.publish(pend, s.cluster.label)
        for it in list(self.items.values()):
            if it.owner is s and it.st == "claim":
                self.consume(it, s.name)

    def undo(self, it):
        if it.st == "pend":
            it.st = "dropped"
            it.owner = None
        elif it.st == "claim":
            self.freed(it, it.owner.cluster.label)
            it.st = "free"
            it.owner = None

    def on_rollback(self, s):
        self.g_on_rollback(s)
        for it in self.items.values():
            if it.owner is s:
                self.undo(it)

    def on_rollback_to(self, s, level):
        self.g_on_rollback(s, level)
        for it in self.items.values():
            if it.owner is s and it.level >= level:
                self.undo(it)

    def on_release(self, s, level):
        for it in list(self.items.values()) + list(self.gitems.values()):
            if it.owner is s and it.level >= level:
                it.level = level - 1

    def on_terminate(self, s):
        self.on_rollback(s)

    def prepare_expect(self, s):
        if self.owned(s) or any(it.owner is s and it.st in ("pend", "claim") for it in self.gitems.values()):
            return "strong"
        return "weak" if "queue" in s.touched else None

    # ---- waiting
    def due(self, s, op):
        """A pending dequeue must complete now: something is free."""
        return op["k"] == "deq" and bool(self.free(op["qn"]))

    def after_settle(self):
        """Local waiters of one queue are served in arrival order (doc/queues.md)."""
        for (s, t0, q) in self.served:
            for x in self.h.sessions:
                if x.pending is not None and x.pending.get("r") == self.name and x.pending["k"] == "deq" \
                        and x.pending.get("qn") == q and x.cluster is s.cluster and x.t0 < t0:
                    self.h.anomaly("queue-waiter-order", "%s was served before %s, which waits on %s since earlier"
                                   % (s.name, x.name, q))
        self.served = []

    # ---- ZooKeeper
    def zk_check(self):
        for q in self.queues + [self.mq]:
            its = [i for i in self.items.values() if i.q == q]
            want_e = sum(1 for i in its if i.st in ("free", "claim"))
            want_t = sum(1 for i in its if i.st == "claim")
            e = len(self.h.children(ROOT + q + "/entries"))
            t = len(self.h.children(ROOT + q + "/taken"))
            if (e, t) != (want_e, want_t):
                return "queue %s: %d entries and %d claims in ZooKeeper, the model %d and %d" % (q, e, t, want_e, want_t)
        return self.g_zk_check()

    # ---- the end
    def final(self, s):
        """Release kazoo's claims, drain every queue through session s, and
        check that every committed item was consumed exactly once."""
        h = self.h
        for (kidx, q), b in list(self.kheld.items()):
            try:
                v = self.kq[(kidx, q)].release()
                h.note("     k%d: kazoo release %s (final)  -> %r" % (kidx, b, v))
            except Exception as e:
                h.anomaly("queue-kazoo", "kazoo release failed: %r" % e)
            self.items[b].st = "free"
            self.items[b].owner = None
            self.freed(self.items[b], "kazoo")
        self.kheld.clear()
        h.settle()
        for q in self.queues + [self.mq]:
            for _ in range(50):
                if not self.free(q):
                    break
                op = {"k": "deq", "r": "queue", "q": None, "qn": q, "t": "2s", "m": 100}
                r = h.sql(s, op, "SELECT msg_id, body, attempts FROM zk_dequeue(%s, '2s', 100)", (q,), 5)
                if not r.ok:
                    h.anomaly("queue-drain", "drain of %s: %r" % (q, r))
                    break
                self.done_deq(s, op, r, {})
                self.on_commit(s)
                if not r.rows:
                    break
        for it in self.items.values():
            if it.committed and it.st not in ("done", "purged"):
                h.anomaly("queue-lost", "committed item %s (%s) is %s after the drain" % (it.body, it.q, it.st))
            if it.committed and it.st == "done" and it.consumed != 1:
                h.anomaly("queue-dup", "item %s consumed %d times" % (it.body, it.consumed))
        self.final_poison(s)
        self.final_delay(s)
        self.final_groups(s)

    # ---- zk_queue_move (issue 38; see the docstring)
    DL_HEADER = b"\x00zklock-dead-letter\x01"

    def gen_move(self, r):
        """Now and then a move step: between two queues of the model (its
        queues and NS-mv), or from the dead-letter queue back to NS-pq."""
        if r.random() >= 0.1:
            return None
        m = r.choice([1, 1, 2, 3, 5, 10000])
        if r.random() < (0.6 if any(it.st == "dead" for it in self.pitems.values()) else 0.2):
            return {"k": "pmove", "m": m}
        qs = self.queues + [self.mq]
        n = len(qs)
        # mostly from a queue that has free items (an empty one moves 0)
        full = [i for i, q in enumerate(qs) if self.free(q)]
        a = r.choice(full) if full and r.random() < 0.8 else r.randrange(n)
        b = r.randrange(n - 1)
        return {"k": "move", "src": a, "dst": b + 1 if b >= a else b, "m": m}

    def zk_items(self, q):
        """The items of queue q in ZooKeeper, in queue order (name order):
        [(name, data)]; None when they could not be read."""
        from kazoo.exceptions import NoNodeError
        path = ROOT + q + "/entries"
        try:
            names = sorted(self.h.kz.get_children(path))
        except NoNodeError:
            return []
        except Exception as e:
            self.h.anomaly("queue-move-zk", "cannot list %s: %r" % (path, e))
            return None
        out = []
        for n in names:
            try:
                out.append((n, self.h.kz.get(path + "/" + n)[0]))
            except NoNodeError:
                continue      # consumed meanwhile (kazoo, a waiter's COMMIT: not in this thread)
            except Exception as e:
                self.h.anomaly("queue-move-zk", "cannot read %s/%s: %r" % (path, n, e))
                return None
        return out

    def dl_body(self, data):
        """The body of a dead letter's data (header, then the payload):
        the poison item whose body ends it, or None."""
        for b in self.pitems:
            if data.endswith(b.encode()):
                return b
        return None

    def execute_move(self, s, op):
        h = self.h
        if op["k"] == "pmove":
            src, dst = self.dlq, self.pq
        else:
            qs = self.queues + [self.mq]
            if op["src"] >= len(qs) or op["dst"] >= len(qs):
                return
            src, dst = qs[op["src"]], qs[op["dst"]]
        op["qn"] = src
        m = op["m"]
        before_s, before_d = self.zk_items(src), self.zk_items(dst)
        free = self.free(src) if op["k"] == "move" else None
        r = h.sql(s, op, "SELECT zk_queue_move(%s, %s, %s)", (src, dst, m), FAST + 3)
        if r.pending:
            h.anomaly("slow-call", "%s by %s did not answer within %.0fs" % (op["sql"], s.name, FAST + 3))
            r = h.recover(s)
        after_s, after_d = self.zk_items(src), self.zk_items(dst)
        n = None
        if r.ok:
            n = r.rows[0][0]
            h.tallies["moves"] += 1
            h.tallies["items moved"] += n
        else:
            h.unexpected(s, op, r)
        if None not in (before_s, before_d, after_s, after_d):
            if op["k"] == "move":
                self.moved_items(s, op, src, dst, m, n, free, before_s, before_d, after_s, after_d)
            else:
                self.moved_dead_letters(s, op, m, n, before_s, before_d, after_s, after_d)
        h.after(s, op, r)

    def move_diff(self, what, n, m, before_s, before_d, after_s, after_d, key, dst_waited=False):
        """What left src and came to dst (by key(data), a body or None),
        with the generic checks: n at most m, n items left src, each of
        them in dst exactly once more, nothing else new in dst.  Returns
        the bodies that left src, in src's order.  dst_waited: another
        session was waiting to dequeue from dst, and may have taken (and
        consumed) a moved item before dst was listed again: an item that
        left src need not be in dst then (its dequeue's answer is checked
        against the model, which has it free in dst)."""
        import collections
        h = self.h
        bs = [key(d) for _, d in before_s]
        as_ = collections.Counter(key(d) for _, d in after_s)
        bd = collections.Counter(key(d) for _, d in before_d)
        ad = collections.Counter(key(d) for _, d in after_d)
        left = []
        rest = collections.Counter(as_)
        for b in bs:
            if rest[b] > 0:
                rest[b] -= 1
            else:
                left.append(b)
        came = ad - bd
        if n is not None and n > m:
            h.anomaly("queue-move-max-items", "%s moved %d items, max_items %d" % (what, n, m))
        if n is not None and len(left) != n:
            h.anomaly("queue-move-count", "%s answered %d, but %d items left the source in ZooKeeper (%s)"
                      % (what, n, len(left), left[:5]))
        if +rest:
            h.anomaly("queue-move-phantom", "%s: items came into the source meanwhile: %s" % (what, list((+rest).elements())[:5]))
        if dst_waited and not +(came - collections.Counter(left)):
            pass                # some moved items taken at once by the waiter
        elif came != collections.Counter(left):
            h.anomaly("queue-move-lost" if len(left) > sum(came.values()) else "queue-move-dup",
                      "%s: items that left the source %s, new in the destination %s"
                      % (what, sorted(left, key=str)[:8], sorted(came.elements(), key=str)[:8]))
        for b, c in ad.items():
            if c > 1 and b is not None:
                h.anomaly("queue-move-dup", "%s: %s is %d times in the destination" % (what, b, c))
        return left

    def moved_items(self, s, op, src, dst, m, n, free, before_s, before_d, after_s, after_d):
        h = self.h
        what = "zk_queue_move(%s, %s, %d) by %s" % (src, dst, m, s.name)
        waited = any(x is not s and x.pending is not None and x.pending.get("r") == self.name
                     and x.pending.get("k") == "deq" and x.pending.get("qn") == dst
                     for x in h.sessions)
        left = self.move_diff(what, n, m, before_s, before_d, after_s, after_d,
                              lambda d: d.decode("utf-8", "replace"), dst_waited=waited)
        # the model: at most the free items (claimed ones are skipped), at
        # least those of them no other client freed a moment ago
        nfresh = len([i for i in free if self.fresh_for(i, s, False)])
        if n is not None and not (min(m, len(free) - nfresh) <= n <= min(m, len(free))):
            h.anomaly("queue-move-count", "%s answered %d, the model has %d free (%d of them freed a moment"
                      " ago by another client)" % (what, n, len(free), nfresh))
        byname = {it.body: it for it in free}
        moved = []
        for b in left:
            it = byname.pop(b, None)
            if it is None:
                x = self.items.get(b)
                h.anomaly("queue-move-claimed", "%s moved %s, which the model says is %s"
                          % (what, b, "unknown" if x is None else "%s in %s (owner %s)"
                             % (x.st, x.q, getattr(x.owner, "name", x.owner))))
                continue
            moved.append(it)
        want = [it.body for it in free[:len(left)]]
        if left != want and not [i for i in free[:len(left)] if self.fresh_for(i, s, False)]:
            h.anomaly("queue-move-order", "%s moved %s, queue order says %s" % (what, left, want))
        # the moved items: free in dst, behind the items of their priority
        # there, in the order they had; a new msg_id, attempts from 0
        self.pubseq += 1
        for i, it in enumerate(moved):
            it.q = dst
            it.key = (it.prio, self.pubseq, i)
            it.msg_id = None
            it.handouts = 0
            it.attempts = None
            it.freed_by = "move"       # seen through a watch by every cluster
            it.freed_at = now()
        if moved:
            h.tallies["items moved between queues"] += len(moved)

    def moved_dead_letters(self, s, op, m, n, before_s, before_d, after_s, after_d):
        """A move of the dead-letter queue back into NS-pq."""
        h = self.h
        what = "zk_queue_move(%s, %s, %d) by %s" % (self.dlq, self.pq, m, s.name)
        for nm, d in after_d:
            if d.startswith(self.DL_HEADER):
                h.anomaly("queue-move-header", "%s: %s in %s still has the dead-letter header: %r"
                          % (what, nm, self.pq, d[:60]))

        def key(d):
            b = self.dl_body(d) if d.startswith(self.DL_HEADER) else d.decode("utf-8", "replace")
            return b if b is not None else repr(d[:60])
        left = self.move_diff(what, n, m, before_s, before_d, after_s, after_d, key)
        # the model: only items that may be dead letters (seen there, or
        # handed out max_attempts times, counting those failed calls may
        # have made unseen)
        slack = max(self.punseen, 0)
        maybe = set(b for b, it in self.pitems.items()
                    if it.st == "dead" or (it.st in ("free", "maybe") and it.handouts + slack >= self.pmax))
        if n is not None and n > len(maybe):
            h.anomaly("queue-move-count", "%s answered %d, the model has at most %d dead letters"
                      % (what, n, len(maybe)))
        for b in left:
            it = self.pitems.get(b)
            if it is None:
                h.anomaly("queue-move-phantom", "%s moved %r, never enqueued in %s" % (what, b, self.pq))
                continue
            if b not in maybe:
                h.anomaly("queue-move-claimed", "%s moved %s, which the model says is %s in %s after %d hand-outs"
                          % (what, b, it.st, self.pq, it.handouts))
            if it.st == "gone":
                h.anomaly("queue-move-dup", "%s moved %s, whose dead letter was consumed" % (what, b))
            # poison again, in NS-pq, from 0 hand-outs
            it.st = "free"
            it.handouts = 0
            it.attempts = None
            it.msg_id = None
            it.dl_msg_id = None
        if left:
            h.tallies["dead letters moved back"] += len(left)

    # ---- the group queue: message groups (see the docstring)
    def gen_g(self, r, s):
        h = self.h
        x = r.random()
        if x < 0.45:
            n = r.choice([1, 2, 2, 3])
            if r.random() < 0.35 and n > 1:
                g = r.randrange(len(self.groups))
                return {"k": "genq", "b": [h.new_id("g") for _ in range(n)], "g": [g] * n,
                        "p": [r.choice([0, 100, 500])] * n, "arr": True}
            return {"k": "genq", "b": [h.new_id("g") for _ in range(n)],
                    "g": [None if r.random() < 0.15 else r.randrange(len(self.groups)) for _ in range(n)],
                    "p": [r.choice([0, 100, 100, 500]) for _ in range(n)], "arr": False}
        if x < 0.78 or (x >= 0.86 and s.xact):
            return {"k": "gdeq", "m": r.choice([1, 1, 2, 3]), "t": r.choice(["try", "0", "300ms", "1s"])}
        if x < 0.86:
            return {"k": "gpeek"}
        return {"k": "gretry", "m": r.choice([1, 2, 3]), "i": r.randrange(3),
                "d": round(r.uniform(0.2, 1.2), 3), "end": r.choice(["ROLLBACK", "COMMIT"])}

    def gkey(self, it):
        return it.pub

    def g_group(self, g):
        """The published items of group g in the group's order."""
        return sorted((it for it in self.gitems.values() if it.group == g and it.pub is not None),
                      key=lambda it: it.pub)

    def g_head(self, g):
        """The item of group g that may be out (free, claimed or held): the
        first published one not consumed; None when none."""
        for it in self.g_group(g):
            if it.st in ("free", "claim", "held", "maybe"):
                return it
        return None

    def g_ready(self, held_due=False):
        """The items that can be handed out now, with the (monotonic) time
        since when: free items without a group, free heads of groups (and,
        held_due, held ones whose hold may have ended)."""
        sts = ("free", "held") if held_due else ("free",)
        out = []
        for it in self.gitems.values():
            if it.group is None and it.st in sts and (it.st == "free" or time.time() >= it.until - DTOL):
                out.append((it, it.freed_at))
        for g in self.groups:
            it = self.g_head(g)
            if it is not None and it.st in sts and (it.st == "free" or time.time() >= it.until - DTOL):
                before = [x for x in self.g_group(g) if x.pub < it.pub and x.done_at is not None]
                out.append((it, max([it.freed_at] + [x.done_at for x in before])))
        return out

    def g_publish(self, its):
        self.gpub += 1
        for it in sorted(its, key=lambda i: i.eseq):
            it.pub = (self.gpub, it.eseq)
            it.st = "free"
            it.owner = None
            it.freed_at = now()

    def g_consume(self, it, who):
        if it.st == "done":
            self.h.anomaly("queue-dup", "item %s of %s consumed twice (last by %s)" % (it.body, self.gq, who))
        it.st = "done"
        it.owner = None
        it.done_at = now()
        if it.group is not None:
            self.h.tallies["grouped items consumed"] += 1

    def g_undo(self, it):
        if it.st == "pend":
            it.st = "dropped"
            it.owner = None
        elif it.st == "claim":
            it.st = "free"
            it.owner = None
            it.freed_at = now()

    def g_on_commit(self, s):
        pend = [it for it in self.gitems.values() if it.owner is s and it.st == "pend"]
        if pend:
            self.g_publish(pend)
        for it in self.gitems.values():
            if it.owner is s and it.st == "claim":
                self.g_consume(it, s.name)

    def g_on_rollback(self, s, level=0):
        for it in self.gitems.values():
            if it.owner is s and it.level >= level:
                self.g_undo(it)

    def g_call(self, s, op, sql, args, wait=FAST):
        """One statement inside the session's transaction (or alone): its
        Result, or None when it did not answer (then recovered)."""
        h = self.h
        r = h.sql(s, op, sql, args, wait)
        if r.pending:
            h.anomaly("slow-call", "%s by %s did not answer within %.1fs" % (op["sql"], s.name, wait))
            r = h.recover(s)
        return r

    def genq(self, s, op):
        h = self.h
        keys = [None if g is None else self.groups[g] for g in op["g"]]
        if op.get("arr"):
            sql = "SELECT zk_enqueue_grouped(%s, %s, %s::text[], %s)"
            args = (self.gq, keys[0], op["b"], op["p"][0])
        else:
            parts, args = [], []
            for b, k, p in zip(op["b"], keys, op["p"]):
                if k is None:
                    parts.append("zk_enqueue(%s, %s::text, %s)")
                    args += [self.gq, b, p]
                else:
                    parts.append("zk_enqueue_grouped(%s, %s, %s::text, %s)")
                    args += [self.gq, k, b, p]
            # one statement, the calls in order (a SELECT list is evaluated left to right)
            sql = "SELECT " + ", ".join(parts)
        r = self.g_call(s, op, sql, args)
        if r.ok:
            for b, k, p in zip(op["b"], keys, op["p"]):
                self.eseq += 1
                self.gitems[b] = GItem(b, k, p, s, s.level, self.eseq)
            h.tallies["grouped items enqueued"] += sum(1 for k in keys if k is not None)
        elif r.broken or r.code is None:
            # fate unknown: the enqueue may have committed (alone) or not
            for b, k, p in zip(op["b"], keys, op["p"]):
                self.eseq += 1
                it = self.gitems[b] = GItem(b, k, p, None, 0, self.eseq)
                it.st = "maybe" if not s.xact else "dropped"
            h.unexpected(s, op, r)
        else:
            h.unexpected(s, op, r)
        h.after(s, op, r)

    def g_handouts(self, s, rows, what, m, t_wall):
        """Rows (msg_id, body, attempts) a dequeue of NS-gq returned to s
        (t_wall: the server's clock after it answered); the items, claimed
        by s."""
        h = self.h
        if len(rows) > m:
            h.anomaly("queue-max-items", "%s returned %d rows, max_items %d" % (what, len(rows), m))
        got = []
        for row in rows:
            msg_id, b, att = row[0], row[1], row[2]
            it = self.gitems.get(b)
            if it is None or it.st in ("pend", "dropped"):
                h.anomaly("queue-phantom", "%s on %s returned %r, %s" % (what, self.gq, b,
                          "never enqueued there" if it is None else "whose enqueue is %s"
                          % ("not committed" if it.st == "pend" else "rolled back")))
                continue
            if it.st == "maybe":
                # its enqueue committed after all; its place in the group is unknown
                it.st = "free"
                it.pub = it.pub or (self.gpub + 0.5, it.eseq)
            if it.st == "done":
                h.anomaly("queue-dup", "%s by %s returned %s of %s, consumed before" % (what, s.name, b, self.gq))
                continue
            if it.st == "claim":
                h.anomaly("queue-double-claim", "%s by %s returned %s of %s, claimed by %s"
                          % (what, s.name, b, self.gq, getattr(it.owner, "name", it.owner)))
                continue
            if it.st == "held" and it.until is not None and t_wall < it.until - DTOL:
                h.anomaly("queue-hold-early", "%s by %s handed %s out %.3fs before its hold (zk_retry_later)"
                          " ended" % (what, s.name, b, it.until - t_wall))
            if it.group is not None:
                grp = self.g_group(it.group)
                before = [x for x in grp if x.pub < it.pub and x.st in ("free", "claim", "held")]
                if before:
                    h.anomaly("group-order", "%s by %s handed %s of group %r out while %s of that group,"
                              " published before it, is not consumed (%s)"
                              % (what, s.name, b, it.group, before[0].body,
                                 before[0].st + (" by %s" % before[0].owner.name
                                                 if before[0].st == "claim" else "")))
                others = [x for x in grp if x is not it and x.st == "claim"]
                if others:
                    h.anomaly("group-exclusive", "%s by %s handed %s of group %r out while %s of that group"
                              " is claimed by %s (an open transaction)"
                              % (what, s.name, b, it.group, others[0].body,
                                 "this very answer" if others[0].owner is s and others[0] in got
                                 else others[0].owner.name))
            if it.msg_id is not None and it.msg_id != msg_id:
                h.anomaly("queue-msg-id", "item %s had msg_id %s, now %s" % (b, it.msg_id, msg_id))
            it.msg_id = msg_id
            it.handouts += 1
            slack = max(self.gunseen, 0)
            if att is None or att < it.handouts or att > it.handouts + slack:
                h.anomaly("queue-attempts", "%s by %s handed %s out with attempts %s, the model saw %d hand-outs"
                          " (this one included) and at most %d more unseen" % (what, s.name, b, att,
                                                                              it.handouts, slack))
            elif it.attempts is not None and att <= it.attempts:
                h.anomaly("queue-attempts", "%s by %s handed %s out with attempts %s, after %s the last time"
                          % (what, s.name, b, att, it.attempts))
            it.attempts = att
            if it.st == "held":
                h.tallies["held grouped items handed out again"] += 1
            elif it.handouts > 1 and it.group is not None:
                h.tallies["grouped items handed out again"] += 1
            it.st = "claim"
            it.owner = s
            it.level = s.level
            it.until = None
            got.append(it)
        return got

    def gdeq(self, s, op):
        """Up to m items of NS-gq, claimed in s's transaction (consumed at
        once when s is in none)."""
        h = self.h
        t0 = now()
        if op["t"] == "try":
            sql, args, what = "zk_try_dequeue(%s, %s)", (self.gq, op["m"]), "zk_try_dequeue(%s)" % self.gq
        else:
            sql, args = "zk_dequeue(%s, %s::interval, %s)", (self.gq, op["t"], op["m"])
            what = "zk_dequeue(%s, %s)" % (self.gq, op["t"])
        ready = self.g_ready()
        self.gunseen += op["m"]
        r = self.g_call(s, op, "SELECT msg_id, body, attempts, extract(epoch FROM clock_timestamp())::float8"
                               " FROM " + sql, args, FAST + 1.5)
        if r.ok:
            self.gunseen -= op["m"]
            t_wall = max([row[3] for row in r.rows] + [0.0])
            self.g_handouts(s, r.rows, what, op["m"], t_wall)
            if not r.rows and op["t"] == "1s":
                late = [(it, t0 - since) for it, since in ready if t0 - since > GSLACK]
                if late:
                    it, age = late[0]
                    h.anomaly("group-stuck", "%s by %s returned no row while %s%s could be handed out for %.1fs"
                              " before it began" % (what, s.name, it.body,
                                                    " (group %r)" % it.group if it.group is not None else "",
                                                    age))
        else:
            h.unexpected(s, op, r)
        h.after(s, op, r)

    def gpeek(self, s, op):
        h = self.h
        r = self.g_call(s, op, "SELECT body FROM zk_queue_peek(%s, 100)", (self.gq,))
        if r.ok:
            got = [row[0] for row in r.rows]
            may = set(it.body for it, _ in self.g_ready(held_due=True))
            seen = {}
            for b in got:
                it = self.gitems.get(b)
                if it is None or b not in may:
                    h.anomaly("group-peek", "zk_queue_peek(%s) listed %s, which %s" % (
                        self.gq, b, "was never enqueued there" if it is None else
                        "cannot be handed out now (%s%s)" % (it.st, ", group %r" % it.group
                                                             if it.group is not None else "")))
                if it is not None and it.group is not None:
                    if it.group in seen:
                        h.anomaly("group-peek", "zk_queue_peek(%s) listed %s and %s of group %r"
                                  % (self.gq, seen[it.group], b, it.group))
                    seen[it.group] = b
        else:
            h.unexpected(s, op, r)
        h.after(s, op, r)

    def gretry(self, s, op):
        """BEGIN; zk_dequeue(NS-gq, '300ms', m); zk_retry_later on one;
        ROLLBACK, or COMMIT (refused, 25000)."""
        h = self.h
        if self.dcall(s, op, "BEGIN", None) is None:
            return
        what = "zk_dequeue(%s, 300ms)" % self.gq
        self.gunseen += op["m"]
        r = self.dcall(s, op, "SELECT msg_id, body, attempts, extract(epoch FROM clock_timestamp())::float8"
                              " FROM zk_dequeue(%s, '300ms', %s)", (self.gq, op["m"]), FAST + 1.5)
        if r is None:
            self.g_on_rollback(s)
            return
        self.gunseen -= op["m"]
        got = self.g_handouts(s, r.rows, what, op["m"], max([row[3] for row in r.rows] + [0.0]))
        held = None
        if got:
            it = got[op["i"] % len(got)]
            rr = self.dcall(s, op, "SELECT extract(epoch FROM clock_timestamp() + make_interval(secs => %s))::float8,"
                                   " zk_retry_later(%s, make_interval(secs => %s))", (op["d"], it.msg_id, op["d"]))
            if rr is None:
                self.g_on_rollback(s)
                return
            held = it
            held.until = rr.rows[0][0]
        c = h.sql(s, op, op["end"], None, FAST)
        if c.pending:
            h.anomaly("slow-call", "%s by %s did not answer within %.0fs" % (op["end"], s.name, FAST))
            c = h.recover(s)
        refused = held is not None and op["end"] == "COMMIT"
        if refused and c.ok:
            h.anomaly("retry-commit", "COMMIT by %s with %s marked by zk_retry_later succeeded"
                      % (s.name, held.body))
        for x in got:
            if x is held:
                until = x.until
                self.g_undo(x)
                x.st = "held"
                x.until = until
                h.tallies["grouped holds" if x.group is not None else "holds"] += 1
            elif c.ok and op["end"] == "COMMIT" and not refused:
                self.g_consume(x, s.name)
            else:
                self.g_undo(x)
        if refused and not c.ok and c.code == "25000":
            pass
        elif not c.ok:
            h.unexpected(s, op, c)
            if c.broken:
                h.reconnect(s)

    def g_zk_check(self):
        if not self.gitems:
            return None
        out = sum(1 for g in self.groups if self.g_head(g) is not None
                  and self.g_head(g).st in ("free", "claim", "held"))
        # (a held item stays in entries, its hold in delayed)
        loose = sum(1 for it in self.gitems.values() if it.group is None and it.st in ("free", "claim", "held"))
        maybe = sum(1 for it in self.gitems.values() if it.st == "maybe")
        claims = sum(1 for it in self.gitems.values() if it.st == "claim")
        held = sum(1 for it in self.gitems.values() if it.st == "held")
        e = len(self.h.children(ROOT + self.gq + "/entries"))
        t = len(self.h.children(ROOT + self.gq + "/taken"))
        if e > out + loose + maybe or not claims <= t <= claims + held:
            return ("queue %s: %d entries and %d claims in ZooKeeper, the model at most %d entries (%d groups"
                    " with an item out, %d items without a group, %d of unknown fate) and %d claims"
                    % (self.gq, e, t, out + loose + maybe, out, loose, maybe, claims))
        return None

    def final_groups(self, s):
        """Drain NS-gq (one item per group per round, waiting past the
        holds): every committed item consumed exactly once, in its group's
        order (the hand-out checks)."""
        h = self.h
        if not self.gitems:
            return
        last = max([it.until or 0.0 for it in self.gitems.values()] + [time.time()])
        deadline = max(last, time.time()) + 20
        empty = 0
        while time.time() < deadline:
            want = [it for it in self.gitems.values() if it.st in ("free", "held")]
            if not want and empty:
                break
            op = {"k": "gdrain", "r": "queue"}
            if self.dcall(s, op, "BEGIN", None) is None:
                return
            t0 = now()
            ready = self.g_ready()
            r = self.dcall(s, op, "SELECT msg_id, body, attempts, extract(epoch FROM clock_timestamp())::float8"
                                  " FROM zk_dequeue(%s, '1s', 100)", (self.gq,), FAST + 1.5)
            if r is None:
                self.g_on_rollback(s)
                return
            got = self.g_handouts(s, r.rows, "zk_dequeue(%s) (drain)" % self.gq, 100,
                                  max([row[3] for row in r.rows] + [0.0]))
            c = h.sql(s, op, "COMMIT", None, FAST)
            if not c.ok:
                h.anomaly("commit-failed", "COMMIT of the drain of %s: %r" % (self.gq, c))
                return
            for x in got:
                self.g_consume(x, s.name + " (drain)")
            if not r.rows:
                late = [(it, t0 - since) for it, since in ready if t0 - since > GSLACK]
                if late:
                    it, age = late[0]
                    h.anomaly("group-stuck", "the drain's zk_dequeue(%s, '1s') returned no row while %s%s"
                              " could be handed out for %.1fs before it began"
                              % (self.gq, it.body, " (group %r)" % it.group if it.group is not None else "", age))
                    break
                empty += 1
            else:
                empty = 0
        for it in self.gitems.values():
            if it.st in ("free", "held", "claim"):
                h.anomaly("queue-lost", "committed item %s of %s (group %r, %d hand-outs) is %s after the drain"
                          % (it.body, self.gq, it.group, it.handouts, it.st))
