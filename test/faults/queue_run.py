#!/usr/bin/python3
"""queue_run.py - the load, the drain and the checker of the queue's
exactly-once test under faults (test/t/320_queue_exactly_once.pl).

usage:
  queue_run.py setup --host HOST --port PORT
  queue_run.py load  --dir DIR --host HOST --a PORT --b PORT [--producers N] [--consumers N]
                     [--movers N] [--side-consumers N] [--seed N]
  queue_run.py drain --dir DIR --host HOST --port PORT [--label L] [--seconds N]
  queue_run.py zk    --dir DIR --hosts ZKHOSTS --sysids A=ID,B=ID
  queue_run.py check --dir DIR --host HOST --tables A:PORT,B2:PORT [--mutate]

setup: creates the tables produced, consumed and dead_letters in database
postgres and gives queue 'eo' its dead-letter policy:
zk_queue_set_policy('eo', 3, 'eo.dlq') (run.py does the same by itself).

load: producers and consumers on clusters A and B (2 producers, 3 consumers
each by default), until DIR/stop exists.  The clients of B connect to the port
and label in DIR/target_B when that file exists ("PORT LABEL", rewritten by
the test when it promotes B's standby), else to --b with label B.

  producer:  BEGIN;
             for each of 1..3 new ids (LABEL-pN-SEQ, never reused; a poison
             id, LABEL-pN-SEQ-poison, about one in twelve and the first of a
             producer's first transaction, enqueued at priority 500):
                 SELECT zk_enqueue('eo', id, prio);  INSERT INTO produced(id) VALUES (id);
             or, for about one ordinary id in four, a delayed item (0.5-3 s;
             one in four of them through not_before):
                 SELECT clock_timestamp() + d, zk_enqueue('eo', id, delay => d, priority => prio);
                 INSERT INTO produced(id, due_at) VALUES (id, <that lower bound of its due time>);
             or, in about three transactions in ten, for about half the
             ordinary ids, a grouped item (never delayed; LABEL-pN-SEQ-gKsG, in
             group K of the producer's 8, G its per-group sequence number; 4 %
             of them poison, at priority 500; the others at 50, 100 or 200,
             consecutive ones often in one group, then sometimes enqueued by
             one call of the array form):
                 SELECT zk_enqueue_grouped('eo', group, id, prio);
                 INSERT INTO produced(id, grp, gseq) VALUES (id, group, G);
             (sometimes one more id inside a savepoint that is rolled back,
             sometimes a grouped one)
             COMMIT, or ROLLBACK (20 %)
  consumer:  BEGIN;
             SELECT body FROM zk_queue_peek('eo', K)   (K = 1..3; then asks for
                 the ordinary items at the head only, or the poison ones)
             SELECT msg_id, body, attempts, clock_timestamp() FROM zk_dequeue('eo', '1s', <= K);
                 (the outcome records each item's clock_timestamp() as deq_t, and
                 t_open: the client's clock just before it sent COMMIT or
                 ROLLBACK, or after the last statement that answered)
             a poison item among them: ROLLBACK (always);
             (15 %, with an item at its first hand-out: SELECT clock_timestamp() + d,
             zk_retry_later(msg_id, d) on one of them, d 0.2-2 s: a hold, recorded
             in the outcome as "retry" [msg_id, id, attempts, until, t_call, d];
             not inserted into consumed; only when every item is at its first
             hand-out, and then ROLLBACK: a COMMIT with a marked item is
             refused, 25000)
             (half the time, with items: holds the claims 0.05-0.4 s)
             for each row: INSERT INTO consumed(id, msg_id, attempts, dequeued_at, ...);
             COMMIT, or ROLLBACK (25 %, only when every item is at its first
             hand-out: by choice no ordinary item comes near max_attempts)
  dead-letter consumer (1 per cluster; with movers it pauses 1-4 s between
  transactions until the stop, so that dead letters wait there for moves):
             BEGIN; SELECT ... FROM zk_dequeue('eo.dlq', '1s', 1..3);
             for each row: INSERT INTO dead_letters(id, msg_id, origin,
                 origin_msg_id, origin_attempts, attempts, ...);
             COMMIT, or ROLLBACK (10 %; 30 % with movers)
  mover (1 per cluster, --movers), every 0.5-2.5 s until the stop:
             SELECT zk_queue_move(FROM, TO, k)   (k one of 1 2 3 5 10 50), outside
                 a transaction, FROM -> TO one of: 'eo.dlq' -> 'eo' (40 %: dead
                 letters back into their origin, poison again there, so the
                 policy moves them to eo.dlq again after 3 more hand-outs),
                 'eo' -> 'eo.side' (25 %), 'eo.side' -> 'eo' (35 %: the poison
                 items a move took to eo.side come back to their policy);
             recorded with its result ("moved"; none when it failed: some
             items may have moved)
  consumer of eo.side (1 per cluster, --side-consumers):
             BEGIN; a peek of eo.side (poison items at its head: mostly
                 ROLLBACK at once), then zk_dequeue('eo.side', '1s', <= 1..3);
             poison items: ROLLBACK (a move takes them back to eo); else for
             each row: INSERT INTO consumed (..., queue) VALUES (..., 'eo.side');
             COMMIT, or ROLLBACK (15 %)

When DIR/stop appears the producers stop and the consumers go on without
new holds until the last due time and end of hold recorded (plus 1.5 s, at
most 10 s): the servers move due items and end holds only while they serve
the queue, and nothing must be left delayed or held after the load.

Every error is tolerated: the client rolls back or reconnects and goes on.
Every attempt's outcome goes to DIR/outcomes.jsonl:
  committed    COMMIT answered COMMIT (acknowledged)
  rolled_back  the client rolled back (its choice)
  refused      COMMIT answered ERROR: PostgreSQL rolled the transaction back
  failed       an error before COMMIT was sent: not committed
  unknown      the connection broke during COMMIT (or a FATAL): fate unknown
Outcomes are only cross-checks: the verdict comes from the tables.

drain: first moves eo.side back into eo (zk_queue_move('eo.side', 'eo', 10000),
recorded like the movers' moves) until a move moves nothing and zk_queues
shows neither item nor claim in eo.side; then one consumer that dequeues
('2s', 50 at a time) and commits, recording in consumed like the others,
until a dequeue returns nothing and
zk_queue_length('eo') is 0 after the last due time or end of hold that
outcomes.jsonl records -- except that it rolls back the poison items, as
the consumers do, until the policy moves them; then it drains eo.dlq the same
way into dead_letters, until zk_queue_length('eo.dlq') is 0.

zk: what ZooKeeper holds for the queue (entries, claims and transaction
nodes by cluster), through kazoo: "QUEUE-ZK <json>".

check: reads produced and consumed of every cluster in --tables (the
clusters whose WAL holds every commit that counts), the outcomes and
DIR/faults.jsonl (written by the test), and counts
  lost        produced ids never consumed
  duplicated  ids consumed by more than one committed transaction (consumed has
              no unique constraint, so that a duplicate shows)
  msg_id_dups msg_ids consumed more than once
  conflicts   one id with two msg_ids or one msg_id with two ids
  phantom     consumed ids that no committed transaction produced (a rolled-back,
              refused or savepoint-rolled-back enqueue that was published)
  acked_producer_missing / acked_consumer_missing
              acknowledged COMMITs whose rows are not in the tables (for B: the
              synchronous standby did not have them; the test's premise)
  aborted_producer_present
              ids of transactions known to be rolled back that are in produced
  attempts_undercount / attempts_not_increasing
              items whose delivery count (zk_message.attempts), over the
              hand-outs the clients saw in claim order, fell below a
              hand-out's rank or did not grow (in eo; and in eo.dlq, where a
              dead letter counts from 1 again; and in eo.side: each
              incarnation of an item -- its life in one queue under one
              msg_id -- apart, as a moved item counts from 0 again)
and, for the dead-letter policy (max_attempts 3, dead letter eo.dlq; an id
counts as consumed when it is in consumed or in dead_letters, so lost,
above, spans both queues):
  attempts_over_max     items handed out from eo more than 3 times (by their
                        attempts or by the hand-outs seen)
  poison_consumed       poison ids consumed from eo
  poison_not_dead_lettered  committed poison ids not in dead_letters
  dead_letter_dups / dead_letter_msg_id_dups
                        ids (msg_ids of eo.dlq) in dead_letters twice
  dead_letter_and_consumed  ids both consumed from eo and dead-lettered
  dead_letter_phantom   dead letters of ids no committed transaction produced
  dead_letter_bad_origin / dead_letter_bad_attempts
                        origin not 'eo', origin_attempts not 3
  dead_letter_mismatch  origin_msg_id not the msg_id the item's hand-outs
                        from eo showed (or shared by two dead letters), or
                        a payload not the item's (then a phantom too)
  ordinary_dead_lettered_unexplained
                        ordinary ids dead-lettered although the clients saw
                        them committed, or saw fewer than 3 hand-outs and
                        not enough failed dequeues after them to make up 3
(an id is consumed when it is in consumed, from eo or from eo.side, or in
dead_letters; dead_letters records dead letters consumed, so an id is there
at most once even when moves took it through eo.dlq several times)
and, for zk_queue_move (see check_moves: incarnations against the moves):
  move_over_max         moves that answered more than their max_items
  move_overlap          ids with two incarnations alive at once
  move_unexplained      ids seen in a new incarnation (another queue, or
                        eo or eo.dlq again under another msg_id: a second
                        trip through the dead-letter queue) with no move
                        that could have made it in between
  move_overcount        more incarnations made by moves into eo or eo.side
                        than the moves into it answered
  (attempts_over_max and the origin_msg_id of dead letters: per incarnation
  in eo)
and, for delayed items and holds (CLOCK_TOLERANCE 0.5 s: one machine's clock):
  delayed_early         delayed ids handed out (a consumed row's dequeued_at, a
                        client's time after its dequeue answered) before their
                        due time (produced.due_at) less the tolerance
  hold_early            items handed out again with more attempts than at a
                        zk_retry_later hold before the hold's end (the clock
                        before the call plus the delay) less the tolerance;
                        one with a fault injected between the call and that
                        hand-out is only counted (hold_early_after_fault: a
                        crash before the end of the claim reached ZooKeeper
                        releases it at once, doc/queues.md "Retry later")
(a held item's hand-out, COMMIT or ROLLBACK, is not a consume: neither an
acknowledged consume nor a committed hand-out of a dead-lettered item)
and, for message groups (check_groups; a group has one producer, so its
order is produced.gseq among its committed ids):
  group_order           a group's committed consumes (by dequeued_at) out of
                        gseq order
  group_ahead           a hand-out (any, from the outcomes' deq_t) of an item
                        while an item of its group with a smaller gseq had not
                        left the queue (consumed: its consumed row's at;
                        dead-lettered: the end of its last hand-out seen)
  group_overlap         two hand-outs of one group held at one moment (each
                        from deq_t to t_open)
(an inversion behind an item whose producer's COMMIT got no answer, or
returned with a WARNING, is only counted, group_*_deferred: the worker may
have published it after its producer's next commits; an overlap never is)
and prints the figures (poison_produced, poison_handouts, dead_letters,
ordinary_dead_lettered, moves, moved, ids_dead_lettered_again...), the
first anomalies with the faults just before them, and "QUEUE-CHECK <json>";
exit 1 when any of these is not 0.  With
--mutate the data read is altered first (one consumed row removed, one
duplicated, one phantom added, one hand-out's attempts set to 0, one dead
letter's origin_attempts set to 4, one dead letter duplicated, a delayed
item consumed 2 s before due, an item handed out again 1 ms after a 5 s
hold began, an id in eo.dlq under two msg_ids with no move between, a move
that answered more than its max_items, two made-up groups, one consumed out of
order, one with two hand-outs at once): the checker
must then report each, which the test asserts (the checker can fail).
"""

import argparse
import collections
import json
import os
import random
import sys
import threading
import time
import traceback

sys.dont_write_bytecode = True      # no __pycache__ in the source tree

import psycopg2  # noqa: E402

from checker import load_jsonl  # noqa: E402  (the lock fault run's reader of .jsonl records)
from pgthread import close_quietly, first_line  # noqa: E402

QUEUE = "eo"

# The dead-letter policy of QUEUE (set at setup): an item handed out
# POLICY_MAX times without being consumed is moved, at its next claim, into
# DLQ.  A poison item (an id ending in POISON, enqueued at POISON_PRIORITY,
# behind every ordinary item) is rolled back by every consumer, so it must
# end up in DLQ, exactly once, with POLICY_MAX hand-outs.
POLICY_MAX = 3
DLQ = QUEUE + ".dlq"
POISON = "-poison"
POISON_PRIORITY = 500
POLICY_SQL = "SELECT zk_queue_set_policy('%s', %d, '%s')" % (QUEUE, POLICY_MAX, DLQ)


# Delayed items (doc/queues.md, "Delayed items"): about DELAY_FRAC of the
# ordinary ids are enqueued with a delay of DELAY_S seconds (one in four of
# them with not_before instead); produced.due_at records a lower bound of
# their due time (the clock just before the call, plus the delay).
DELAY_FRAC = 0.25
DELAY_S = (0.5, 3.0)
# Backoff (doc/queues.md, "Retry later"): about RETRY_FRAC of the consumer
# transactions that got ordinary items at their first hand-out call
# zk_retry_later on one of them (HOLD_S seconds), then ROLLBACK (a COMMIT
# would be refused, 25000): the item is not consumed, and not handed out again before the hold ends
# (its second hand-out: by choice an ordinary item is rolled back or
# retried at most once, so it stays clear of max_attempts).
RETRY_FRAC = 0.15
HOLD_S = (0.2, 2.0)
# the clusters run on one machine: their clocks are one
CLOCK_TOLERANCE = 0.5
# Message groups (doc/queues.md, "Message groups"): about GROUP_FRAC of the
# ordinary ids (never delayed) are enqueued with zk_enqueue_grouped into one
# of GROUPS groups of their producer (a group has one producer, so its order
# is that producer's: its committed transactions one after the other, call
# order inside one), at a priority of GROUP_PRIOS (the order in a group is
# publication order, whatever the priority); poison among them about
# GROUP_POISON_FRAC (dead-lettered like the others, which unblocks the group).
# produced.grp and produced.gseq record the group and the per-group sequence
# number (the id says them too: LABEL-pN-SEQ-gKsGSEQ).
GROUP_FRAC = 0.3
GROUPS = 8
GROUP_PRIOS = (50, 100, 100, 200)
GROUP_POISON_FRAC = 0.04
# two hand-outs of one group overlap when each was certainly held at a
# moment the other was: more than GROUP_TOLERANCE (one clock, see above)
GROUP_TOLERANCE = 0.002


def group_key(client, k):
    """The key of group k of producer client (B.p1 keeps its groups on B2):
    some with characters a node name must encode, one of the 64 bytes allowed."""
    if k == 1:
        return "%s/g1 \u00fc" % client
    if k == 2:
        return "%s.g2~x-000001" % client
    if k == 7:
        base = "%s.g7." % client
        return base + "x" * (64 - len(base.encode()))
    return "%s.g%d" % (client, k)

# zk_queue_move (doc/queues.md, issue 38): a mover per cluster now and then
# (every MOVE_PAUSE seconds) moves up to MOVE_K items of one queue into
# another: dead letters back into QUEUE (poison again there, so dead-lettered
# again), items of QUEUE into SIDE, or items of SIDE back into QUEUE; a
# consumer of SIDE per cluster consumes its ordinary items (into consumed,
# queue SIDE) and rolls back its poison items, which only a move takes back
# to QUEUE and its policy.  Each move's result is recorded (role "move").
SIDE = QUEUE + ".side"
MOVES = ((DLQ, QUEUE), (QUEUE, SIDE), (SIDE, QUEUE))
MOVE_WEIGHTS = (0.4, 0.25, 0.35)
MOVE_K = (1, 2, 3, 5, 10, 50)
MOVE_PAUSE = (0.5, 2.5)
DLQ_PAUSE = (1.0, 4.0)  # the dead-letter consumers' pause while movers run


def is_poison(body):
    return isinstance(body, str) and body.endswith(POISON)


def leading(bodies):
    """How many items to ask a dequeue for, from a peek at the head of the
    queue: the ordinary items at its head, else the poison items there (so
    that a batch rarely mixes the two: an ordinary item rolled back with a
    poison one would come closer to the dead-letter queue), else None."""
    if not bodies:
        return None
    first = is_poison(bodies[0])
    n = 0
    for b in bodies:
        if is_poison(b) != first:
            break
        n += 1
    return n

# the tables of every cluster the load runs on (the verdict reads them)
TABLES = """
CREATE TABLE produced (id text PRIMARY KEY, client text,
    xid xid8 DEFAULT pg_current_xact_id(), at timestamptz DEFAULT clock_timestamp(),
    due_at timestamptz, grp text, gseq int);
CREATE TABLE consumed (id text, msg_id bigint, cluster text, client text,
    xid xid8 DEFAULT pg_current_xact_id(), at timestamptz DEFAULT clock_timestamp(),
    attempts int, dequeued_at timestamptz, queue text DEFAULT 'eo');
CREATE TABLE dead_letters (id text, msg_id bigint, origin text, origin_msg_id bigint,
    origin_attempts int, attempts int, cluster text, client text,
    xid xid8 DEFAULT pg_current_xact_id(), at timestamptz DEFAULT clock_timestamp());
"""


def log(msg):
    print("%s queue: %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def severity(e):
    d = getattr(e, "diag", None)
    try:
        return d.severity_nonlocalized or d.severity if d is not None else None
    except Exception:
        return None


def server_error(e):
    """True when the server answered ERROR (the session and the connection
    live on, the transaction is rolled back); False for a FATAL, PANIC or a
    connection that broke (no answer)."""
    return getattr(e, "pgcode", None) is not None and severity(e) == "ERROR"


class Recorder:
    def __init__(self, directory):
        self.lock = threading.Lock()
        self.f = open(os.path.join(directory, "outcomes.jsonl"), "a", buffering=1)
        self.counts = collections.Counter()
        self.horizon = 0.0      # the latest due time or end of a hold recorded

    def record(self, rec):
        with self.lock:
            for t in (rec.get("due") or {}).values():
                self.horizon = max(self.horizon, t)
                self.counts[("prod", "delayed")] += 1
            for r in rec.get("retry") or []:
                self.horizon = max(self.horizon, r[3])
                self.counts[("cons", "retried")] += 1
            self.counts[(rec["role"], rec["outcome"])] += 1
            if rec["role"] == "cons" and rec["outcome"] == "committed":
                self.counts[("cons", "items_committed")] += len(rec.get("msgs", []))
            if rec["role"] == "prod" and rec["outcome"] == "committed":
                self.counts[("prod", "items_committed")] += len(rec.get("ids", []))
                self.counts[("prod", "poison_committed")] += sum(1 for i in rec.get("ids", [])
                                                                 if is_poison(i))
            if rec["role"] == "dlq" and rec["outcome"] == "committed":
                self.counts[("dlq", "items_committed")] += len(rec.get("msgs", []))
            if rec["role"] == "side" and rec["outcome"] == "committed":
                self.counts[("side", "items_committed")] += len(rec.get("msgs", []))
            if rec["role"] == "move":
                self.counts[("move", "moved")] += rec.get("moved") or 0
            if rec.get("poison"):
                self.counts[("cons", "poison_handouts")] += rec["poison"]
            if rec.get("sqlstate") == "57014":
                self.counts[("all", "statement_timeouts")] += 1
            self.f.write(json.dumps(rec, sort_keys=True) + "\n")

    def summary(self):
        with self.lock:
            out = collections.defaultdict(dict)
            for (role, what), n in sorted(self.counts.items()):
                out[role][what] = n
            return dict(out)

    def close(self):
        self.f.close()


class Targets:
    """Where the clients of a cluster role connect."""

    def __init__(self, args):
        self.dir = args.dir
        self.host = args.host
        self.fixed = {"A": (args.a, "A"), "B": (args.b, "B")}

    def get(self, role):
        if role == "B":
            try:
                with open(os.path.join(self.dir, "target_B")) as f:
                    port, label = f.read().split()
                    return int(port), label
            except (OSError, ValueError):
                pass
        return self.fixed[role]


class Client(threading.Thread):
    def __init__(self, run, role, kind, idx, seed):
        super().__init__(name="%s-%s%d" % (role, kind, idx), daemon=True)
        self.run_ = run
        self.role = role            # cluster role, A or B
        self.kind = kind            # p (producer) or c (consumer)
        self.name_ = "%s.%s%d" % (role, kind, idx)
        self.rnd = random.Random(seed)
        self.conn = None
        self.label = None           # cluster the connection goes to (A, B, B2)
        self.pid = None
        self.stmt = None            # statement running, and since when
        self.stmt_t0 = None
        self.attempts = 0
        self.gseq = collections.Counter()   # group -> the last sequence number given (producers)
        self.last_ok = None         # when the last statement answered (consumers: claims held until then)

    def connect(self):
        delay = 0.1
        while not self.run_.stop.is_set():
            port, label = self.run_.targets.get(self.role)
            try:
                conn = psycopg2.connect(host=self.run_.host, port=port, dbname="postgres",
                                        connect_timeout=5, application_name="queue-" + self.name_,
                                        options="-c statement_timeout=60s")
                conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute("SELECT pg_backend_pid()")
                    self.pid = cur.fetchone()[0]
                self.conn = conn
                self.label = label
                return True
            except psycopg2.Error:
                self.run_.stop.wait(delay)
                delay = min(delay * 2, 1.0)
        return False

    def drop(self):
        close_quietly(self.conn)
        self.conn = None
        self.pid = None

    def ex(self, cur, sql, args=None):
        self.stmt, self.stmt_t0 = sql, time.time()
        cur.execute(sql, args)
        self.stmt = None
        self.last_ok = time.time()

    def run(self):
        try:
            while not self.run_.stop.is_set():
                if self.conn is None or self.conn.closed:
                    self.drop()
                    if not self.connect():
                        break
                self.attempts += 1
                if self.kind == "p":
                    if self.run_.quiesce.is_set():
                        # no new item once the stop is asked for (see cmd_load)
                        self.run_.stop.wait(0.1)
                        continue
                    self.produce()
                    self.run_.stop.wait(self.rnd.uniform(0.0, self.run_.producer_pause))
                elif self.kind == "d":
                    self.consume_dlq()
                    # with movers, dead letters stay a while in DLQ, so
                    # that moves find some to take back into QUEUE
                    self.run_.stop.wait(self.rnd.uniform(*DLQ_PAUSE) if self.run_.movers
                                        and not self.run_.quiesce.is_set() else self.rnd.uniform(0.0, 0.05))
                elif self.kind == "m":
                    if not self.run_.quiesce.is_set():
                        self.move()
                    self.run_.stop.wait(self.rnd.uniform(*MOVE_PAUSE))
                elif self.kind == "s":
                    self.consume_side()
                    self.run_.stop.wait(self.rnd.uniform(0.0, 0.05))
                else:
                    self.consume()
                    self.run_.stop.wait(self.rnd.uniform(0.0, 0.02))
        except Exception:
            log("client %s died: %s" % (self.name_, traceback.format_exc()))
            self.run_.client_deaths.append(self.name_)
        finally:
            self.drop()

    def after_error(self, rec, e, stage):
        code = getattr(e, "pgcode", None)
        rec["sqlstate"] = code
        rec["severity"] = severity(e)
        rec["msg"] = first_line(e)
        if stage == "commit":
            rec["outcome"] = "refused" if server_error(e) else "unknown"
        else:
            rec["outcome"] = "failed"
        self.stmt = None
        if server_error(e) and self.conn is not None and not self.conn.closed:
            try:
                with self.conn.cursor() as cur:
                    cur.execute("ROLLBACK")
                return
            except psycopg2.Error:
                pass
        self.drop()

    def transaction(self, rec, body):
        """BEGIN, then body(cur, rec), which ends the transaction and names
        each stage it comes to in self.stage; an error is recorded with the
        stage it came in, and rec with the stage reached."""
        self.stage = "begin"
        self.last_ok = None
        try:
            with self.conn.cursor() as cur:
                self.ex(cur, "BEGIN")
                body(cur, rec)
        except psycopg2.Error as e:
            # the claims were held at least until the last statement that answered
            if "t_open" not in rec and self.last_ok is not None:
                rec["t_open"] = self.last_ok
            self.after_error(rec, e, self.stage)
        rec["stage"] = self.stage
        rec["t1"] = time.time()
        self.run_.rec.record(rec)

    def rollback_or_commit(self, cur, rec, rollback):
        # the transaction (and its claims) certainly lasted until now
        rec["t_open"] = time.time()
        if rollback:
            self.stage = "rollback"
            self.ex(cur, "ROLLBACK")
            rec["outcome"] = "rolled_back"
        else:
            self.stage = "commit"
            rec["t_commit"] = time.time()
            del self.conn.notices[:]
            self.ex(cur, "COMMIT")
            rec["outcome"] = "committed" if cur.statusmessage == "COMMIT" else "refused"
            rec["tag"] = cur.statusmessage
            # a COMMIT whose items ZooKeeper did not take within
            # zklock.commit_timeout returns with a WARNING; the worker
            # publishes them later (doc/settings.md)
            warn = [n.strip() for n in self.conn.notices if n.startswith("WARNING")]
            if warn:
                rec["commit_warning"] = warn[0][:300]

    def next_id(self):
        self.run_.seq[self.name_] += 1
        return "%s-%s%s-%d" % (self.label, self.kind, self.name_.split(".")[1][1:],
                              self.run_.seq[self.name_])

    def produce(self):
        rnd = self.rnd
        ids = [self.next_id() for _ in range(rnd.randint(1, 3))]
        # poison items: the first of each producer's first transaction, then
        # about one id in twelve
        for j in range(len(ids)):
            if (self.attempts == 1 and j == 0) or rnd.random() < 0.08:
                ids[j] += POISON
        sp_ids = [self.next_id()] if rnd.random() < 0.15 else []
        rollback = rnd.random() < 0.20
        # delayed ids: (seconds, True for not_before)
        delays = {i: (round(rnd.uniform(*DELAY_S), 3), rnd.random() < 0.25) for i in ids
                  if not is_poison(i) and rnd.random() < DELAY_FRAC}
        # grouped ids (never delayed): id -> [group key, per-group seq, priority]
        groups = {}
        last = None         # (k, priority) of the last grouped id: often the next one's too
        grouped_txn = rnd.random() < 2 * GROUP_FRAC
        for j in range(len(ids)):
            if ids[j] in delays or is_poison(ids[j]) or not grouped_txn or rnd.random() >= 0.5:
                continue
            k, gp = last if last and rnd.random() < 0.6 else (rnd.randrange(GROUPS), rnd.choice(GROUP_PRIOS))
            last = (k, gp)
            self.gseq[k] += 1
            ids[j] = "%s-g%ds%d%s" % (ids[j], k, self.gseq[k],
                                      POISON if rnd.random() < GROUP_POISON_FRAC else "")
            groups[ids[j]] = [group_key(self.name_, k), self.gseq[k],
                              POISON_PRIORITY if is_poison(ids[j]) else gp]
        # the savepoint's id, grouped sometimes: rolled back, it must neither
        # come out nor hold its group up
        if sp_ids and rnd.random() < 0.4:
            k = rnd.randrange(GROUPS)
            self.gseq[k] += 1
            sp_ids[0] = "%s-g%ds%d" % (sp_ids[0], k, self.gseq[k])
            sp_group = group_key(self.name_, k)
        else:
            sp_group = None
        # consecutive ids of one group at one priority: sometimes one call of
        # the array form for them
        array = rnd.random() < 0.3
        rec = {"t0": time.time(), "role": "prod", "client": self.name_, "cluster": self.label,
               "pid": self.pid, "ids": ids, "sp_ids": sp_ids, "due": {},
               "groups": groups}

        def body(cur, rec):
            self.stage = "enqueue"
            pos = rnd.randrange(len(ids) + 1)
            batched = set()     # ids enqueued already by an array call
            for i, pid in enumerate(ids + [None]):
                if sp_ids and i == pos:
                    # an item enqueued and recorded in a savepoint that is
                    # rolled back: never published, never in produced
                    self.ex(cur, "SAVEPOINT s")
                    if sp_group is not None:
                        self.ex(cur, "SELECT zk_enqueue_grouped(%s, %s, %s::text)", (QUEUE, sp_group, sp_ids[0]))
                    else:
                        self.ex(cur, "SELECT zk_enqueue(%s, %s::text)", (QUEUE, sp_ids[0]))
                    self.ex(cur, "INSERT INTO produced (id, client) VALUES (%s, %s)",
                            (sp_ids[0], self.name_))
                    self.ex(cur, "ROLLBACK TO SAVEPOINT s")
                if pid is None:
                    break
                prio = POISON_PRIORITY if is_poison(pid) else 100
                due = None
                if pid in groups:
                    g, gs, gp = groups[pid]
                    if pid not in batched:
                        run_ = [pid]
                        for q in ids[i + 1:]:
                            if q not in groups or groups[q][0] != g or groups[q][2] != gp:
                                break
                            run_.append(q)
                        if array and len(run_) > 1:
                            self.ex(cur, "SELECT zk_enqueue_grouped(%s, %s, %s::text[], %s)",
                                    (QUEUE, g, run_, gp))
                            batched.update(run_)
                        else:
                            self.ex(cur, "SELECT zk_enqueue_grouped(%s, %s, %s::text, %s)", (QUEUE, g, pid, gp))
                    self.ex(cur, "INSERT INTO produced (id, client, grp, gseq) VALUES (%s, %s, %s, %s)",
                            (pid, self.name_, g, gs))
                    continue
                if pid in delays:
                    d, nb = delays[pid]
                    if nb:
                        self.ex(cur, "SELECT nb, zk_enqueue(%s, %s::text, not_before => nb, priority => %s)"
                                     " FROM (SELECT clock_timestamp() + make_interval(secs => %s) AS nb) t",
                                (QUEUE, pid, prio, d))
                    else:
                        # the clock before the call: a lower bound of zklock's due time
                        self.ex(cur, "SELECT clock_timestamp() + make_interval(secs => %s),"
                                     " zk_enqueue(%s, %s::text, delay => make_interval(secs => %s),"
                                     " priority => %s)", (d, QUEUE, pid, d, prio))
                    due = cur.fetchone()[0]
                    rec["due"][pid] = due.timestamp()
                else:
                    self.ex(cur, "SELECT zk_enqueue(%s, %s::text, %s)", (QUEUE, pid, prio))
                self.ex(cur, "INSERT INTO produced (id, client, due_at) VALUES (%s, %s, %s)",
                        (pid, self.name_, due))
            self.rollback_or_commit(cur, rec, rollback)
        self.transaction(rec, body)

    def consume(self):
        rnd = self.rnd
        k = rnd.randint(1, 3)
        rollback = rnd.random() < 0.25
        # PREPARE TRANSACTION after a dequeue must be refused (0A000): a
        # prepared claim would hide its item until COMMIT PREPARED
        prepare = not rollback and rnd.random() < 0.05
        rec = {"t0": time.time(), "role": "cons", "client": self.name_, "cluster": self.label,
               "pid": self.pid, "max_items": k, "msgs": [], "queue": QUEUE}

        def body(cur, rec):
            # a look at the head first: ordinary and poison items are then
            # seldom claimed together (see leading)
            self.stage = "peek"
            self.ex(cur, "SELECT body FROM zk_queue_peek(%s, %s)", (QUEUE, k))
            n = leading([b for (b,) in cur.fetchall()])
            kk = min(k, n) if n else k
            rec["max_items"] = kk
            self.stage = "dequeue"
            self.ex(cur, "SELECT msg_id, body, attempts, clock_timestamp() FROM zk_dequeue(%s, '1s', %s)",
                    (QUEUE, kk))
            rows = cur.fetchall()
            rec["msgs"] = [[m, b] for m, b, _, _ in rows]
            rec["att"] = {b: a for _, b, a, _ in rows}   # the delivery count of each
            # the server's clock after each was claimed (message groups: the
            # hand-out is certainly held from then until t_open)
            rec["deq_t"] = {b: t.timestamp() for _, b, _, t in rows}
            rec["t_claimed"] = time.time()
            poison = sum(1 for _, b, _, _ in rows if is_poison(b))
            if poison:
                # never consumed: rolled back, every time, until the policy
                # moves it to the dead-letter queue
                rec["poison"] = poison
                self.rollback_or_commit(cur, rec, True)
                return
            # an ordinary item is rolled back by choice only at its first
            # hand-out: it must not reach the policy's max_attempts (only
            # faults can add hand-outs to it)
            nonlocal rollback
            first = all(a == 1 for _, _, a, _ in rows)
            rollback = rollback and first
            # a backoff on one item at its first hand-out (zk_retry_later),
            # then ROLLBACK: it is not consumed
            # (then always ROLLBACK: a COMMIT with a marked item is refused,
            # 25000; so only when every item is at its first hand-out)
            firsts = [r for r in rows if r[2] == 1]
            if first and firsts and not self.run_.quiesce.is_set() and rnd.random() < RETRY_FRAC:
                m, b, a, _ = rnd.choice(firsts)
                d = round(rnd.uniform(*HOLD_S), 3)
                self.stage = "retry"
                t_call = time.time()
                self.ex(cur, "SELECT clock_timestamp() + make_interval(secs => %s),"
                             " zk_retry_later(%s, make_interval(secs => %s))", (d, m, d))
                until = cur.fetchone()[0]
                rec.setdefault("retry", []).append([m, b, a, until.timestamp(), t_call, d])
                rows = [r for r in rows if r[0] != m]
                rollback = True
            rows = [(m, b, a, t) for m, b, a, t in rows]
            if rows and rnd.random() < 0.5:
                # hold the claims a while (idle in transaction): a crash
                # or a failover then often finds claims to settle
                time.sleep(rnd.uniform(0.05, 0.4))
            self.stage = "record"
            for m, b, a, t in rows:
                self.ex(cur, "INSERT INTO consumed (id, msg_id, cluster, client, attempts, dequeued_at)"
                             " VALUES (%s, %s, %s, %s, %s, %s)", (b, m, self.label, self.name_, a, t))
            if not (prepare and rows):  # (prepare: never with rollback)
                self.rollback_or_commit(cur, rec, rollback)
                return
            self.stage = "prepare"
            gid = "eo-%s-%d" % (self.name_, rnd.randrange(1 << 30))
            try:
                self.ex(cur, "PREPARE TRANSACTION %s", (gid,))
            except psycopg2.Error as e:
                if getattr(e, "pgcode", None) != "0A000":
                    raise
                self.ex(cur, "ROLLBACK")
                rec["outcome"] = "rolled_back"
                rec["tag"] = "PREPARE refused (0A000)"
            else:
                # accepted: an anomaly (checked), undone so the run goes on
                rec["outcome"] = "prepared"
                self.ex(cur, "ROLLBACK PREPARED %s", (gid,))
        self.transaction(rec, body)


def dlq_body(cur, ex, rec, k, timeout, label, client, rows_out):
    """Dequeue up to k dead letters and record each in dead_letters (in the
    transaction, which the caller ends)."""
    ex(cur, "SELECT msg_id, body, attempts, origin, origin_msg_id, origin_attempts"
            " FROM zk_dequeue(%s, %s, %s)", (DLQ, timeout, k))
    rows = cur.fetchall()
    rec["msgs"] = [[m, b] for m, b, _, _, _, _ in rows]
    rec["att"] = {b: a for _, b, a, _, _, _ in rows}
    rec["dl"] = [list(r) for r in rows]
    rec["t_claimed"] = time.time()
    for m, b, a, o, om, oa in rows:
        ex(cur, "INSERT INTO dead_letters (id, msg_id, origin, origin_msg_id, origin_attempts,"
                " attempts, cluster, client) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
           (b, m, o, om, oa, a, label, client))
    rows_out.extend(rows)


def _consume_dlq(self):
    """The dead-letter consumer: dequeues 1..3 dead letters of DLQ, records
    each (with origin, origin_msg_id, origin_attempts) in dead_letters,
    commits or rolls back (10 %)."""
    rnd = self.rnd
    k = rnd.randint(1, 3)
    # (with movers more often: a dead letter seen, rolled back, moved back
    # and dead-lettered again is a second trip the checker can follow)
    rollback = rnd.random() < (0.3 if self.run_.movers else 0.10)
    rec = {"t0": time.time(), "role": "dlq", "client": self.name_, "cluster": self.label,
           "pid": self.pid, "max_items": k, "msgs": [], "queue": DLQ}

    def body(cur, rec):
        self.stage = "dequeue"
        rows = []
        dlq_body(cur, self.ex, rec, k, "1s", self.label, self.name_, rows)
        self.stage = "record"
        self.rollback_or_commit(cur, rec, rollback)
    self.transaction(rec, body)


Client.consume_dlq = _consume_dlq


def record_move(rec, ex, cur, src, dst, k):
    """zk_queue_move(src, dst, k) outside a transaction, its result in rec:
    "moved" (None when it failed: some items may have moved, at most k)."""
    rec.update({"from": src, "to": dst, "max_items": k, "moved": None})
    ex(cur, "SELECT zk_queue_move(%s, %s, %s)", (src, dst, k))
    rec["moved"] = cur.fetchone()[0]
    rec["outcome"] = "committed"


def _move(self):
    """The mover: one zk_queue_move between two of the queues (MOVES),
    recorded with its result."""
    rnd = self.rnd
    src, dst = rnd.choices(MOVES, MOVE_WEIGHTS)[0]
    k = rnd.choice(MOVE_K)
    rec = {"t0": time.time(), "role": "move", "client": self.name_, "cluster": self.label,
           "pid": self.pid, "msgs": []}
    self.stage = "move"
    try:
        with self.conn.cursor() as cur:
            record_move(rec, self.ex, cur, src, dst, k)
    except psycopg2.Error as e:
        self.after_error(rec, e, "move")
    rec["stage"] = self.stage
    rec["t1"] = time.time()
    self.run_.rec.record(rec)


def _consume_side(self):
    """The consumer of SIDE: a peek at its head, then 1..3 ordinary items
    consumed (recorded in consumed with queue SIDE) or rolled back (15 %),
    or poison items, always rolled back (a move takes them back to QUEUE)."""
    rnd = self.rnd
    k = rnd.randint(1, 3)
    rollback = rnd.random() < 0.15
    rec = {"t0": time.time(), "role": "side", "client": self.name_, "cluster": self.label,
           "pid": self.pid, "max_items": k, "msgs": [], "queue": SIDE}

    def body(cur, rec):
        self.stage = "peek"
        self.ex(cur, "SELECT body FROM zk_queue_peek(%s, %s)", (SIDE, k))
        head = [b for (b,) in cur.fetchall()]
        n = leading(head)
        kk = min(k, n) if n else k
        rec["max_items"] = kk
        if head and is_poison(head[0]) and rnd.random() < 0.8:
            # only poison items at the head: mostly left for a move back
            self.rollback_or_commit(cur, rec, True)
            self.run_.stop.wait(0.2)
            return
        self.stage = "dequeue"
        self.ex(cur, "SELECT msg_id, body, attempts, clock_timestamp() FROM zk_dequeue(%s, '1s', %s)",
                (SIDE, kk))
        rows = cur.fetchall()
        rec["msgs"] = [[m, b] for m, b, _, _ in rows]
        rec["att"] = {b: a for _, b, a, _ in rows}
        rec["t_claimed"] = time.time()
        if any(is_poison(b) for _, b, _, _ in rows):
            rec["side_poison"] = sum(1 for _, b, _, _ in rows if is_poison(b))
            self.rollback_or_commit(cur, rec, True)
            return
        self.stage = "record"
        for m, b, a, t in rows:
            self.ex(cur, "INSERT INTO consumed (id, msg_id, cluster, client, attempts, dequeued_at, queue)"
                         " VALUES (%s, %s, %s, %s, %s, %s, %s)", (b, m, self.label, self.name_, a, t, SIDE))
        self.rollback_or_commit(cur, rec, rollback)
    self.transaction(rec, body)


Client.move = _move
Client.consume_side = _consume_side


class LoadRun:
    def __init__(self, args):
        self.dir = args.dir
        self.host = args.host
        self.targets = Targets(args)
        self.stop = threading.Event()
        self.quiesce = threading.Event()    # stop asked for: no new item, no new hold
        self.rec = Recorder(args.dir)
        self.seq = collections.Counter()
        self.client_deaths = []
        self.producer_pause = args.producer_pause
        self.movers = args.movers


def cmd_load(args):
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    rnd = random.Random(seed)
    r = LoadRun(args)
    log("load: %d producers, %d consumers, %d dead-letter consumers, %d movers and %d consumers of %s"
        " on A and on B, seed %d" % (args.producers, args.consumers, args.dlq_consumers, args.movers,
                                     args.side_consumers, SIDE, seed))
    clients = []
    for role in ("A", "B"):
        for i in range(1, args.producers + 1):
            clients.append(Client(r, role, "p", i, rnd.randrange(1 << 30)))
        for i in range(1, args.consumers + 1):
            clients.append(Client(r, role, "c", i, rnd.randrange(1 << 30)))
        for i in range(1, args.dlq_consumers + 1):
            clients.append(Client(r, role, "d", i, rnd.randrange(1 << 30)))
        # (after the others: a run without movers draws the same seeds as before)
        for i in range(1, args.movers + 1):
            clients.append(Client(r, role, "m", i, rnd.randrange(1 << 30)))
        for i in range(1, args.side_consumers + 1):
            clients.append(Client(r, role, "s", i, rnd.randrange(1 << 30)))
    for c in clients:
        c.start()
    stopfile = os.path.join(args.dir, "stop")
    t_last = time.time()
    while not os.path.exists(stopfile):
        time.sleep(0.1)
        if time.time() - t_last >= 5:
            t_last = time.time()
            log("progress %s" % json.dumps(r.rec.summary(), sort_keys=True))
            now = time.time()
            slow = ["%s: %.0fs in %s" % (c.name_, now - c.stmt_t0, c.stmt)
                    for c in clients if c.stmt is not None and now - c.stmt_t0 > 20]
            if slow:
                log("slow statements: %s" % "; ".join(slow))
    log("stop requested")
    # the consumers go on (no new item, no new hold) until the last delayed
    # item is due and the last hold over, and a little more: a server moves
    # due items and ends holds only while it serves the queue (a consumer
    # there), so nothing is left delayed or held for the checks after the
    # load (claims resolved, the drain)
    r.quiesce.set()
    t_q = time.time()
    while time.time() < min(r.rec.horizon + 1.5, t_q + 10):
        time.sleep(0.1)
    r.stop.set()
    deadline = time.time() + 75
    for c in clients:
        c.join(max(0.1, deadline - time.time()))
    hung = []
    for c in clients:
        if c.is_alive():
            hung.append("%s in %s for %.0fs" % (c.name_, c.stmt,
                                                time.time() - (c.stmt_t0 or time.time())))
    summary = r.rec.summary()
    out = {"seed": seed, "outcomes": summary, "hung": hung, "client_deaths": r.client_deaths,
           "statement_timeouts": summary.get("all", {}).get("statement_timeouts", 0)}
    r.rec.close()
    print("QUEUE-LOAD %s" % json.dumps(out, sort_keys=True), flush=True)
    sys.stdout.flush()
    os._exit(0)     # hung threads must not keep the process


def cmd_setup(args):
    conn = psycopg2.connect(host=args.host, port=args.port, dbname="postgres", connect_timeout=10)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(TABLES)
        cur.execute(POLICY_SQL)
    conn.close()
    return 0


def cmd_drain(args):
    rec = Recorder(args.dir)
    deadline = time.time() + args.seconds
    conn = None
    drained = commits = errors = dead_letters = poison = 0
    done = False
    moved_back = 0
    phase = SIDE        # then QUEUE, once SIDE is moved back into it; then DLQ, once QUEUE is empty
    last_err = None
    # delayed items and holds are not in zk_queue_length: QUEUE is empty only
    # once the last of them the load recorded is due (or over) and a
    # dequeue after that returned nothing
    horizon = 0.0
    for o in load_jsonl(os.path.join(args.dir, "outcomes.jsonl")):
        for t in (o.get("due") or {}).values():
            horizon = max(horizon, t)
        for x in o.get("retry") or []:
            horizon = max(horizon, x[3])
    horizon += 1.5
    t_deq = 0.0
    empties = 0
    while time.time() < deadline and not done:
        if conn is None or conn.closed:
            try:
                conn = psycopg2.connect(host=args.host, port=args.port, dbname="postgres",
                                        connect_timeout=5, application_name="queue-drain",
                                        options="-c statement_timeout=60s")
                conn.autocommit = True
            except psycopg2.Error as e:
                errors += 1
                last_err = first_line(e)
                conn = None
                time.sleep(0.5)
                continue
        if phase == SIDE:
            # every item of SIDE moved back into QUEUE (its poison items then
            # go to the dead-letter queue), until none is left, nor claimed
            r = {"t0": time.time(), "role": "move", "client": "drain", "cluster": args.label, "msgs": []}
            try:
                with conn.cursor() as cur:
                    record_move(r, lambda c, q, a: c.execute(q, a), cur, SIDE, QUEUE, 10000)
                    moved_back += r["moved"]
                    cur.execute("SELECT coalesce(sum(items + claimed), 0) FROM zk_queues WHERE queue = %s",
                                (SIDE,))
                    if r["moved"] == 0 and cur.fetchone()[0] == 0:
                        phase = QUEUE
            except psycopg2.Error as e:
                errors += 1
                last_err = first_line(e)
                r["sqlstate"] = getattr(e, "pgcode", None)
                r["msg"] = first_line(e)
                r["outcome"] = "failed"
                if not server_error(e):
                    conn = None
            r["stage"] = "move"
            r["t1"] = time.time()
            rec.record(r)
            if phase == SIDE:
                time.sleep(0.3)
            continue
        r = {"t0": time.time(), "role": "cons" if phase == QUEUE else "dlq", "client": "drain",
             "cluster": args.label, "msgs": [], "queue": phase}
        stage = "begin"
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN")
                if phase == QUEUE:
                    # the ordinary items at the head, consumed; poison items
                    # (behind them), rolled back until the policy moves them
                    stage = "peek"
                    cur.execute("SELECT body FROM zk_queue_peek(%s, 50)", (QUEUE,))
                    k = leading([b for (b,) in cur.fetchall()]) or 50
                    stage = "dequeue"
                    t_deq = time.time()
                    cur.execute("SELECT msg_id, body, attempts, clock_timestamp() FROM zk_dequeue(%s, '2s', %s)",
                                (QUEUE, k))
                    rows = cur.fetchall()
                    r["msgs"] = [[m, b] for m, b, _, _ in rows]
                    r["att"] = {b: a for _, b, a, _ in rows}
                    r["deq_t"] = {b: t.timestamp() for _, b, _, t in rows}
                    r["t_claimed"] = time.time()
                    r["t_open"] = r["t_claimed"]
                    r["poison"] = sum(1 for _, b, _, _ in rows if is_poison(b))
                    stage = "record"
                    if r["poison"]:
                        stage = "rollback"
                        r["t_open"] = time.time()
                        cur.execute("ROLLBACK")
                        r["outcome"] = "rolled_back"
                        poison += r["poison"]
                        rows = None
                    else:
                        for m, b, a, t in rows:
                            cur.execute("INSERT INTO consumed (id, msg_id, cluster, client, attempts,"
                                        " dequeued_at) VALUES (%s, %s, %s, 'drain', %s, %s)",
                                        (b, m, args.label, a, t))
                else:
                    stage = "dequeue"
                    rows = []
                    dlq_body(cur, lambda c, q, a: c.execute(q, a), r, 50, "2s", args.label, "drain", rows)
                    stage = "record"
                if rows is not None:
                    stage = "commit"
                    r["t_open"] = time.time()
                    cur.execute("COMMIT")
                    r["outcome"] = "committed" if cur.statusmessage == "COMMIT" else "refused"
                    if r["outcome"] == "committed":
                        commits += 1
                        if phase == QUEUE:
                            drained += len(rows)
                        else:
                            dead_letters += len(rows)
                    if not rows:
                        cur.execute("SELECT zk_queue_length(%s)", (phase,))
                        n = cur.fetchone()[0]
                        # message groups: a group's next item enters the
                        # queue after its predecessor left it (consumed or
                        # dead-lettered); twice empty, to let it come
                        empties = empties + 1 if n == 0 else 0
                        if empties >= 2 and phase == QUEUE and t_deq > horizon:
                            phase = DLQ
                            empties = 0
                        elif empties >= 2 and phase == DLQ:
                            done = True
                    else:
                        empties = 0
        except psycopg2.Error as e:
            errors += 1
            last_err = first_line(e)
            r["sqlstate"] = getattr(e, "pgcode", None)
            r["msg"] = first_line(e)
            r["outcome"] = ("refused" if server_error(e) else "unknown") if stage == "commit" else "failed"
            if server_error(e) and not conn.closed:
                try:
                    with conn.cursor() as cur:
                        cur.execute("ROLLBACK")
                except psycopg2.Error:
                    conn = None
            else:
                conn = None
            time.sleep(0.2)
        r["stage"] = stage
        r["t1"] = time.time()
        rec.record(r)
    rec.close()
    out = {"drained": drained, "commits": commits, "errors": errors, "done": done, "last_error": last_err,
           "dead_letters": dead_letters, "poison_rollbacks": poison, "moved_back_from_side": moved_back}
    print("QUEUE-DRAIN %s" % json.dumps(out, sort_keys=True), flush=True)
    return 0 if done else 1


def fetch(host, port):
    conn = psycopg2.connect(host=host, port=port, dbname="postgres", connect_timeout=10,
                            options="-c statement_timeout=120s")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT id, client, xid::text, extract(epoch FROM at)::float8,"
                        " extract(epoch FROM due_at)::float8, grp, gseq FROM produced")
            produced = [{"id": i, "client": c, "xid": x, "at": a, "due": d, "grp": g, "gseq": gs}
                        for i, c, x, a, d, g, gs in cur.fetchall()]
            cur.execute("SELECT id, msg_id, cluster, client, xid::text, extract(epoch FROM at)::float8,"
                        " attempts, extract(epoch FROM dequeued_at)::float8, queue FROM consumed")
            consumed = [{"id": i, "msg_id": m, "cluster": cl, "client": c, "xid": x, "at": a,
                         "attempts": n, "deq": t, "queue": q}
                        for i, m, cl, c, x, a, n, t, q in cur.fetchall()]
            cur.execute("SELECT id, msg_id, origin, origin_msg_id, origin_attempts, attempts, cluster,"
                        " client, xid::text, extract(epoch FROM at)::float8 FROM dead_letters")
            dead = [{"id": i, "msg_id": m, "origin": o, "origin_msg_id": om, "origin_attempts": oa,
                     "attempts": a, "cluster": cl, "client": c, "xid": x, "at": t}
                    for i, m, o, om, oa, a, cl, c, x, t in cur.fetchall()]
        return produced, consumed, dead
    finally:
        conn.close()


def mutate_dead(produced, dead):
    """Alter the dead letters the way a broken policy would: one shows a
    hand-out more than max_attempts, one is there twice."""
    n = 0
    while len(dead) < 2:        # too few: make some
        i = "ZZ-mutate-dl-%d%s" % (n, POISON)
        n += 1
        produced.append({"id": i, "client": "mutate", "xid": "0", "at": time.time(), "src": "mutate"})
        dead.append({"id": i, "msg_id": 10 ** 15 + 500 + n, "origin": QUEUE,
                     "origin_msg_id": 10 ** 15 + 600 + n, "origin_attempts": POLICY_MAX,
                     "attempts": 1, "cluster": "mutate", "client": "mutate", "xid": "0",
                     "at": time.time(), "src": "mutate"})
    dead[0]["origin_attempts"] = POLICY_MAX + 1
    dup = dict(dead[1])
    dup["client"] = "mutate-dup"
    dead.append(dup)


def mutate(produced, consumed):
    """Alter the data the way a broken queue would: one consumed row gone (a
    lost item), one consumed twice, one consumed that was never produced."""
    counts = collections.Counter(r["id"] for r in consumed)
    single = [r for r in consumed if counts[r["id"]] == 1 and r["id"] is not None]
    base = 10 ** 15
    while len(single) < 2:      # no data worth the name: make some
        i = "ZZ-mutate-%d" % len(single)
        produced.append({"id": i, "client": "mutate", "xid": "0", "at": time.time(), "src": "mutate"})
        row = {"id": i, "msg_id": base + len(single), "cluster": "mutate", "client": "mutate",
               "xid": "0", "at": time.time(), "src": "mutate"}
        consumed.append(row)
        single.append(row)
    consumed.remove(single[0])
    dup = dict(single[1])
    dup["client"] = "mutate-dup"
    consumed.append(dup)
    consumed.append({"id": "ZZ-phantom", "msg_id": base + 99, "cluster": "mutate", "client": "mutate",
                     "xid": "0", "at": time.time(), "src": "mutate"})


def cmd_zk(args):
    """What ZooKeeper holds for queue 'eo' and the transaction nodes, by
    cluster (system identifier -> name from --sysids NAME=ID,...)."""
    import logging
    logging.basicConfig(level=logging.CRITICAL)
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError
    names = dict((v, k) for k, v in (x.split("=") for x in args.sysids.split(",")))
    auth = os.environ.get("ZKLOCK_ZK_AUTH")   # run.py: the clusters' identity
    zk = KazooClient(hosts=args.hosts, timeout=10.0,
                     auth_data=[("digest", auth)] if auth else None)
    zk.start(timeout=10)
    try:
        def kids(path):
            try:
                return zk.get_children(path)
            except NoNodeError:
                return []
        root = "/zklock/queues/" + QUEUE
        out = {"entries": len(kids(root + "/entries")), "taken": collections.Counter(),
               "txns": collections.Counter()}
        for c in kids(root + "/taken"):
            try:
                data, _ = zk.get(root + "/taken/" + c)
                sysid = json.loads(data.decode()).get("cluster")
            except NoNodeError:
                continue
            except (ValueError, AttributeError):
                sysid = "?"
            out["taken"][names.get(sysid, str(sysid))] += 1
        for c in kids("/zklock/txns"):
            if zk.exists("/zklock/txns/" + c + "/kept") is not None:
                continue  # published, kept against a late create (src/queue/queue_publish.c)
            out["txns"][names.get(c.split("-")[0], c.split("-")[0])] += 1
    finally:
        zk.stop()
        zk.close()
    print("QUEUE-ZK %s" % json.dumps(out, sort_keys=True), flush=True)
    return 0


# the anomalies of the dead-letter policy (checker.py's QUEUE_COUNTS has them too)
DEAD_COUNTS = ("attempts_over_max", "poison_consumed", "poison_not_dead_lettered", "dead_letter_dups",
               "dead_letter_msg_id_dups", "dead_letter_and_consumed", "dead_letter_phantom",
               "dead_letter_bad_origin", "dead_letter_bad_attempts", "dead_letter_mismatch",
               "ordinary_dead_lettered_unexplained")


# the anomalies of delayed items and holds (checker.py's QUEUE_COUNTS has them too)
TIMING_COUNTS = ("delayed_early", "hold_early")


def mutate_timing(produced, consumed, outcomes):
    """Alter the data the way a queue that ignored due times and holds
    would: a delayed item consumed 2 s before its due time, an item handed
    out again with more attempts 1 ms after a hold of 5 s began."""
    now = time.time()
    base = 10 ** 15
    due = {r["id"]: r["due"] for r in produced if r.get("due") is not None}
    rows = [r for r in consumed if r["id"] in due and r.get("deq") is not None]
    if rows:
        rows[0]["deq"] = due[rows[0]["id"]] - 2.0
    else:
        produced.append({"id": "ZZ-mutate-delayed", "client": "mutate", "xid": "0", "at": now,
                         "due": now + 100, "src": "mutate"})
        consumed.append({"id": "ZZ-mutate-delayed", "msg_id": base + 71, "cluster": "mutate",
                         "client": "mutate", "xid": "0", "at": now, "attempts": 1, "deq": now,
                         "src": "mutate"})
    rows = [r for r in consumed if (r.get("attempts") or 0) >= 1 and r.get("deq") is not None
            and r["id"] not in due]
    if rows:
        r = rows[0]
    else:
        r = {"id": "ZZ-mutate-held", "msg_id": base + 72, "cluster": "mutate", "client": "mutate",
             "xid": "0", "at": now, "attempts": 2, "deq": now, "src": "mutate"}
        produced.append({"id": r["id"], "client": "mutate", "xid": "0", "at": now, "src": "mutate"})
        consumed.append(r)
    a = (r.get("attempts") or 2) - 1
    outcomes.append({"t0": r["deq"] - 0.001, "t1": r["deq"] - 0.001, "role": "cons", "client": "mutate",
                     "outcome": "committed", "msgs": [],
                     "retry": [[r["msg_id"], r["id"], a, r["deq"] + 4.999, r["deq"] - 0.001, 5.0]]})


def outcome_queue(o):
    """The queue an outcome's hand-outs came from."""
    if o.get("queue"):
        return o["queue"]
    return {"dlq": DLQ, "side": SIDE}.get(o["role"], QUEUE)


# the anomalies of zk_queue_move (checker.py's QUEUE_COUNTS has them too)
MOVE_COUNTS = ("move_over_max", "move_unexplained", "move_overlap", "move_overcount")


def check_moves(outcomes, when=lambda t: "%.3f" % t):
    """The moves (role "move": from, to, max_items, moved or None when the
    call failed) against the hand-outs the clients saw.  An incarnation of
    an item is its life in one queue under one name: (queue, msg_id),
    seen by the hand-outs of that msg_id there (t0 of the dequeue's
    transaction .. t_claimed, after it answered).  A move or the dead-letter
    policy ends one incarnation and makes the next one in one multi, so:
      move_over_max    moves that answered more than max_items
      move_overlap     ids with two incarnations alive at once: one seen
                       handed out after another was handed out that was
                       first seen later (a duplicate)
      move_unexplained ids seen in a new incarnation that no move could have
                       made: one into SIDE needs a move QUEUE->SIDE, one
                       into QUEUE a move into QUEUE, a dead letter after an
                       incarnation outside QUEUE (another trip through the
                       dead-letter queue) a move into QUEUE -- a move that
                       ended after the last hand-out of the previous
                       incarnation began and began before the first of the
                       next one answered, and moved something (or failed:
                       then whenever it ended)
      move_overcount   incarnations that moves must have made (every one in
                       SIDE; in QUEUE all but the first of each id) more than
                       the moves into that queue moved (a failed move counts
                       as its max_items)
    Returns (figures, {count: [ids or descriptions]})."""
    moves = [o for o in outcomes if o["role"] == "move"]
    bad = {k: [] for k in MOVE_COUNTS}
    for o in moves:
        if o.get("moved") is not None and o["moved"] > o.get("max_items", 0):
            bad["move_over_max"].append("%s zk_queue_move(%s, %s, %s) = %s"
                                        % (o["client"], o["from"], o["to"], o["max_items"], o["moved"]))
    incs = collections.defaultdict(lambda: collections.defaultdict(list))   # id -> (q, m) -> [(t0, tc)]
    for o in outcomes:
        if o["role"] == "move" or not o.get("msgs"):
            continue
        q = outcome_queue(o)
        for m, b in o["msgs"]:
            incs[b][(q, m)].append((o["t0"], o.get("t_claimed", o["t0"])))

    # (a move that failed may have had multis in flight that ZooKeeper
    # applied after the client saw the error: it may have acted any time
    # after it began)
    def moved_between(kinds, t_from, t_to):
        return [o for o in moves if (o.get("from"), o.get("to")) in kinds and o.get("moved") != 0
                and (o.get("moved") is None or o.get("t1", o["t0"]) >= t_from) and o["t0"] <= t_to]
    into = {QUEUE: {(SIDE, QUEUE), (DLQ, QUEUE)}, SIDE: {(QUEUE, SIDE)}}
    made = collections.Counter()        # queue -> incarnations moves must have made
    why = {}
    dl_trips = collections.Counter()
    for b, per in incs.items():
        seq = sorted(per.items(), key=lambda kv: min(tc for _, tc in kv[1]))
        dl_trips[b] = sum(1 for (q, _), _ in seq if q == DLQ)
        made[SIDE] += sum(1 for (q, _), _ in seq if q == SIDE)
        made[QUEUE] += max(0, sum(1 for (q, _), _ in seq if q == QUEUE) - 1)
        for (pk, pobs), (nk, nobs) in zip(seq, seq[1:]):
            p_last = max(t0 for t0, _ in pobs)
            n_first = min(tc for _, tc in nobs)
            if p_last > n_first and b not in bad["move_overlap"]:
                bad["move_overlap"].append(b)
                why[b] = "%s %s handed out (from %s) after %s %s was (by %s)" % (pk + (when(p_last),) + nk
                                                                                   + (when(n_first),))
            if nk[0] == DLQ and pk[0] == QUEUE:
                continue        # the dead-letter policy
            kinds = into[nk[0]] if nk[0] in into else into[QUEUE]
            if not moved_between(kinds, p_last, n_first) and b not in bad["move_unexplained"]:
                bad["move_unexplained"].append(b)
                why[b] = ("%s %s (last handed out from %s), then %s %s (first handed out by %s): no move %s"
                          " in between" % (pk + (when(p_last),) + nk + (when(n_first),)
                                           + (" or ".join("%s->%s" % k for k in sorted(kinds)),)))
    moved = collections.Counter()
    for o in moves:
        moved[o.get("to")] += o["moved"] if o.get("moved") is not None else o.get("max_items", 0)
    for q in (QUEUE, SIDE):
        if made[q] > moved[q]:
            bad["move_overcount"].append("%s: %d incarnations made by moves, %d items moved into it"
                                         % (q, made[q], moved[q]))
    fig = {"moves": len(moves),
           "moves_failed": sum(1 for o in moves if o.get("moved") is None),
           "moves_failed_by": dict(collections.Counter("%s %s" % (o.get("sqlstate"), (o.get("msg") or "")[:60])
                                                       for o in moves if o.get("moved") is None)),
           "moved": {"%s->%s" % k: sum(o.get("moved") or 0 for o in moves if (o.get("from"), o.get("to")) == k)
                     for k in MOVES},
           "moved_by_drain": sum(o.get("moved") or 0 for o in moves if o["client"] == "drain"),
           "moved_incarnations_seen": dict(made),
           "dead_letter_trips_max": max(dl_trips.values()) if dl_trips else 0,
           "ids_dead_lettered_again": sum(1 for n in dl_trips.values() if n > 1)}
    return fig, bad, why


def mutate_moves(produced, dead, outcomes):
    """Alter the data the way a queue whose moves duplicated items would:
    an id seen in the dead-letter queue under two msg_ids 0.1 s apart with no
    move between (a second trip without a move), and a move that answered
    more than its max_items."""
    t = min([o["t0"] for o in outcomes] + [time.time()]) - 100
    i = "ZZ-mutate-trip" + POISON
    base = 10 ** 15
    produced.append({"id": i, "client": "mutate", "xid": "0", "at": t, "src": "mutate"})
    dead.append({"id": i, "msg_id": base + 81, "origin": QUEUE, "origin_msg_id": base + 82,
                 "origin_attempts": POLICY_MAX, "attempts": 1, "cluster": "mutate", "client": "mutate",
                 "xid": "0", "at": t + 0.2, "src": "mutate"})
    for k, m in enumerate((base + 80, base + 81)):
        outcomes.append({"t0": t + 0.1 * k, "t_claimed": t + 0.1 * k + 0.01, "t1": t + 0.1 * k + 0.02,
                         "role": "dlq", "client": "mutate", "outcome": "rolled_back" if k == 0 else "committed",
                         "queue": DLQ, "msgs": [[m, i]], "att": {i: 1}})
    outcomes.append({"t0": t, "t1": t + 0.01, "role": "move", "client": "mutate", "outcome": "committed",
                     "from": QUEUE, "to": SIDE, "max_items": 2, "moved": 3, "msgs": []})


# a message group's item in eo has a msg_id with bits 62 and 61 set
# (queue_nodes.c, zk_queue_msg_id); one moved out of its group does not
GROUP_MSG_ID = (1 << 62) | (1 << 61)


def in_group(m):
    """Is m the msg_id of an item while in its message group?"""
    return m is not None and (int(m) >> 61) == 3


# the anomalies of message groups (checker.py's QUEUE_COUNTS has them too)
GROUP_COUNTS = ("group_order", "group_ahead", "group_overlap")


def mutate_groups(produced, consumed, outcomes):
    """Alter the data the way a queue that ignored message groups would
    (items of two made-up groups, long before any fault): in one, the second
    item consumed before the first (out of order, and handed out while the
    first was still there); in the other, the first item handed out twice at
    once (two hand-outs of one group overlapping)."""
    t = min([o["t0"] for o in outcomes] + [time.time()]) - 1000.0
    base = GROUP_MSG_ID
    for g, n in (("ZZ-mutate-group-order", 1), ("ZZ-mutate-group-overlap", 2)):
        ids = ["ZZ-mutate-g%ds%d" % (n, k) for k in (1, 2)]
        for k, i in enumerate(ids):
            produced.append({"id": i, "client": "mutate", "xid": "0", "at": t, "grp": g, "gseq": k + 1,
                             "src": "mutate"})
        outcomes.append({"t0": t, "t_commit": t + 0.1, "t1": t + 0.2, "role": "prod", "client": "mutate",
                         "outcome": "committed", "ids": ids, "sp_ids": [], "due": {},
                         "groups": {i: [g, k + 1, 100] for k, i in enumerate(ids)}})
        if n == 1:
            hs = [(ids[1], base + 81, t + 1, t + 1.5, "committed"), (ids[0], base + 82, t + 2, t + 2.5, "committed")]
        else:
            hs = [(ids[0], base + 83, t + 1, t + 3, "rolled_back"), (ids[0], base + 83, t + 2, t + 4, "committed"),
                  (ids[1], base + 84, t + 5, t + 6, "committed")]
        for i, m, a, e, out in hs:
            outcomes.append({"t0": a - 0.1, "t_claimed": a, "t_open": e, "t1": e + 0.01, "role": "cons",
                             "client": "mutate", "outcome": out, "msgs": [[m, i]], "deq_t": {i: a}})
            if out == "committed":
                consumed.append({"id": i, "msg_id": m, "cluster": "mutate", "client": "mutate", "xid": "0",
                                 "at": e - 0.01, "attempts": None, "deq": a, "src": "mutate"})


def check_groups(produced, consumed, dead, outcomes, faults):
    """The checks of message groups.  Each group has one producer, so its
    order is the per-group sequence number (gseq) of the ids its committed
    transactions enqueued.  A hand-out of an item is certainly held from the
    server's clock just after zk_dequeue claimed it (deq_t) until the client
    sent the end of its transaction, or until the last statement that
    answered (t_open); an item certainly left the queue no earlier than its
    consumer's INSERT into consumed (at, the server's clock; the first, if it
    was consumed twice), a dead letter no earlier than the end of its last
    hand-out seen, a lost item never.
      group_order    committed consumes of a group out of gseq order (by their
                     dequeued_at)
      group_ahead    hand-outs (any: committed, rolled back, held) of an item
                     while an item of its group with a smaller gseq had not
                     yet left the queue
      group_overlap  two hand-outs of one group (the same item or two) held at
                     one moment
    An acknowledged COMMIT returns once ZooKeeper holds its items, unless
    it returns with a WARNING (not within zklock.commit_timeout: the worker
    publishes them later); a COMMIT of unknown fate may have been published
    by the worker's settling too.  Such an item may be published after items
    its producer committed next -- and order in a group is publication
    order: an inversion behind it is only counted (group_order_deferred,
    group_ahead_deferred); an overlap never is."""
    info = {}
    grp_of = {r["id"]: (r["grp"], r["gseq"]) for r in produced if r.get("grp") is not None}
    prod_rec = {}
    for o in outcomes:
        if o["role"] == "prod":
            for i in o.get("ids", []):
                prod_rec[i] = o

    def excused(i):
        o = prod_rec.get(i)
        return o is None or o["outcome"] != "committed" or bool(o.get("commit_warning"))

    # zk_queue_move takes a group's item out of its group (a new name, an
    # ordinary msg_id, in eo.side or back in eo): only hand-outs and consumes
    # under the group's own msg_id count; an item moved left its group no
    # earlier than the end of its last hand-out there
    moved_out = set()
    for r in consumed:
        if r["id"] in grp_of and not in_group(r.get("msg_id")):
            moved_out.add(r["id"])
    for o in outcomes:
        for m, b in o.get("msgs", []) or []:
            if b in grp_of and not in_group(m):
                moved_out.add(b)
    first_cons = {}
    for r in consumed:
        if r["id"] in grp_of and in_group(r.get("msg_id")) and \
                (r["id"] not in first_cons or r["at"] < first_cons[r["id"]]["at"]):
            first_cons[r["id"]] = r
    dead_ids = set(r["id"] for r in dead)
    # hand-outs: (deq_t, t_open, outcome, id)
    hand = collections.defaultdict(list)
    for o in outcomes:
        if o["role"] != "cons":
            continue
        for m, b in o.get("msgs", []):
            if b not in grp_of or not in_group(m):
                continue
            a = (o.get("deq_t") or {}).get(b)
            if a is None:
                continue
            e = o.get("t_open")
            hand[grp_of[b][0]].append((a, e if e is not None and e >= a else a, o, b))
    last_end = collections.defaultdict(float)
    for hs in hand.values():
        for a, e, o, b in hs:
            last_end[b] = max(last_end[b], e)

    def left_at(i):
        if i in first_cons:
            return first_cons[i]["at"]
        if i in dead_ids or i in moved_out:
            return last_end.get(i, 0.0)
        return float("inf")

    by_group = collections.defaultdict(list)
    for i, (g, k) in grp_of.items():
        by_group[g].append((k, i))
    order, order_x, ahead, ahead_x, overlap = [], [], [], [], []
    why = {}
    gaps = []
    for g, items in by_group.items():
        items.sort()
        rank = {i: n for n, (_, i) in enumerate(items)}
        # (a) committed consumes in gseq order
        cons = sorted((first_cons[i]["deq"] if first_cons[i].get("deq") is not None else first_cons[i]["at"], k, i)
                      for k, i in items if i in first_cons)
        for n in range(1, len(cons)):
            prev = cons[n - 1]
            if cons[n][1] < prev[1]:
                i, j = cons[n][2], prev[2]      # i (smaller gseq) consumed after j
                key = "%s: %s consumed after %s" % (g, i, j)
                why[key] = ["    %s (gseq %d) handed out (consumed) at %.3f, %s (gseq %d) at %.3f"
                            % (j, prev[1], prev[0], i, cons[n][1], cons[n][0])]
                (order_x if excused(i) else order).append(key)
        # (b) no hand-out while an earlier item is still there
        lefts = [left_at(i) for _, i in items]
        for a, e, o, j in hand.get(g, []):
            for n in range(rank[j]):
                if a < lefts[n] - GROUP_TOLERANCE:
                    i = items[n][1]
                    key = "%s: %s handed out at %.3f by %s (%s) before %s left" % (g, j, a, o["client"],
                                                                                   o["outcome"], i)
                    why[key] = ["    %s (gseq %d) left the queue %s" % (
                        i, items[n][0], "never" if lefts[n] == float("inf") else "at %.3f at the earliest"
                        % lefts[n])]
                    (ahead_x if excused(i) else ahead).append(key)
                    break
        # (c) one hand-out of the group at a time
        hs = sorted(hand.get(g, []), key=lambda h: h[0])
        top = None
        for h in hs:
            if top is not None:
                if h[0] < top[1] - GROUP_TOLERANCE:
                    key = "%s: %s and %s" % (g, top[3], h[3])
                    why[key] = ["    %s by %s (%s): held %.3f .. %.3f" % (x[3], x[2]["client"], x[2]["outcome"],
                                                                        x[0], x[1]) for x in (top, h)]
                    overlap.append(key)
                else:
                    gaps.append(h[0] - top[1])
            if top is None or h[1] > top[1]:
                top = h
    info["groups"] = len(by_group)
    info["grouped_moved_out"] = len(moved_out)
    info["grouped_produced"] = len(grp_of)
    info["grouped_consumed"] = sum(1 for i in grp_of if i in first_cons)
    info["grouped_dead_lettered"] = sum(1 for i in grp_of if i in dead_ids)
    info["grouped_poison"] = sum(1 for i in grp_of if is_poison(i))
    info["group_handouts"] = sum(len(hs) for hs in hand.values())
    per_item = collections.Counter(h[3] for hs in hand.values() for h in hs)
    info["group_handed_out_again"] = sum(1 for n in per_item.values() if n > 1)
    info["group_order"] = len(order)
    info["group_order_deferred"] = len(order_x)
    info["group_ahead"] = len(ahead)
    info["group_ahead_deferred"] = len(ahead_x)
    info["group_overlap"] = len(overlap)
    info["group_gap_min"] = round(min(gaps), 4) if gaps else None
    lists = {"group_order": order, "group_ahead": ahead, "group_overlap": overlap,
             "group_order_deferred": order_x, "group_ahead_deferred": ahead_x}
    return info, lists, why


def claimed_outcomes(outcomes, i):
    """The consumer transactions of eo whose dequeue returned id i."""
    return [o for o in outcomes if o["role"] == "cons" and any(b == i for _, b in o.get("msgs", []))]


def cmd_check(args):
    produced, consumed, dead, sources = [], [], [], {}
    for spec in args.tables.split(","):
        name, port = spec.split(":")
        p, c, dl = fetch(args.host, int(port))
        for r in p + c + dl:
            r["src"] = name
        produced += p
        consumed += c
        dead += dl
        sources[name] = {"produced": len(p), "consumed": len(c), "dead_letters": len(dl)}
    if args.mutate:
        mutate(produced, consumed)
        mutate_dead(produced, dead)
    outcomes = load_jsonl(os.path.join(args.dir, "outcomes.jsonl"))
    if args.mutate:
        # and a hand-out that showed no attempt: a delivery count lost
        for o in outcomes:
            if o.get("att"):
                o["att"] = {b: 0 for b in o["att"]}
                break
    faults = load_jsonl(os.path.join(args.dir, "faults.jsonl"))
    if not faults and os.path.exists(os.path.join(args.dir, "..", "nemesis.jsonl")):
        faults = load_jsonl(os.path.join(args.dir, "..", "nemesis.jsonl"))   # run.py's faults
    if args.mutate:
        mutate_timing(produced, consumed, outcomes)
        mutate_moves(produced, dead, outcomes)
        mutate_groups(produced, consumed, outcomes)
    t0 = min([o["t0"] for o in outcomes] + [f["t"] for f in faults] + [time.time()])

    prod_ids = collections.Counter(r["id"] for r in produced)
    prod_by_id = {r["id"]: r for r in produced}
    cons_by_id = collections.defaultdict(list)
    cons_by_msg = collections.defaultdict(list)
    for r in consumed:
        cons_by_id[r["id"]].append(r)
        cons_by_msg[(r.get("queue") or QUEUE, r["msg_id"])].append(r)   # msg_ids are per queue

    dl_by_id = collections.defaultdict(list)
    dl_by_msg = collections.defaultdict(list)
    for r in dead:
        dl_by_id[r["id"]].append(r)
        dl_by_msg[r["msg_id"]].append(r)
    # an item is consumed from eo or from eo.dlq (a dead letter), never both
    lost = sorted(i for i in prod_ids if i not in cons_by_id and i not in dl_by_id)
    duplicated = sorted((i for i, rows in cons_by_id.items() if i is not None and len(rows) > 1),
                        key=str)
    dup_rows = sum(len(cons_by_id[i]) - 1 for i in duplicated)
    msg_dups = sorted(m for m, rows in cons_by_msg.items() if len(rows) > 1)
    conflicts = []
    for i, rows in cons_by_id.items():
        if len(set(r["msg_id"] for r in rows)) > 1:
            conflicts.append("id %s has msg_ids %s" % (i, sorted(set(r["msg_id"] for r in rows))))
    for m, rows in cons_by_msg.items():
        if len(set(r["id"] for r in rows)) > 1:
            conflicts.append("msg_id %s has ids %s" % (m, sorted(set(str(r["id"]) for r in rows))))
    phantom = sorted((i for i in cons_by_id if i not in prod_ids), key=str)
    dup_produced = sorted(i for i, n in prod_ids.items() if n > 1)

    # cross-checks with what the clients were told
    acked_prod, aborted_prod, sp_ids, unknown_prod = set(), set(), set(), set()
    acked_cons, acked_dl, claimed_aborted = [], [], collections.defaultdict(list)
    attempts = collections.Counter()
    by_id_attempts = collections.defaultdict(list)
    for o in outcomes:
        attempts[(o["role"], o["outcome"])] += 1
        if o["role"] == "prod":
            ids = o.get("ids", [])
            for i in ids + o.get("sp_ids", []):
                by_id_attempts[i].append(o)
            sp_ids.update(o.get("sp_ids", []))
            if o["outcome"] == "committed":
                acked_prod.update(ids)
            elif o["outcome"] in ("rolled_back", "refused", "failed"):
                aborted_prod.update(ids)
            else:
                unknown_prod.update(ids)
        elif o["role"] == "dlq":
            for m, b in o.get("msgs", []):
                by_id_attempts[b].append(o)
                if o["outcome"] == "committed":
                    acked_dl.append((b, m))
        else:
            retried_here = set(x[0] for x in o.get("retry") or [])
            for m, b in o.get("msgs", []):
                by_id_attempts[b].append(o)
                if m in retried_here:
                    continue        # held (zk_retry_later), not consumed, whatever the end
                if o["outcome"] == "committed":
                    acked_cons.append((b, m))
                elif o["outcome"] in ("rolled_back", "refused", "failed"):
                    claimed_aborted[b].append(o)
    # the delivery count: each item's hand-outs the clients saw, in the order
    # they claimed it (one at a time), show attempts that grow, each at least
    # its rank among them (hand-outs the clients did not see -- a dequeue
    # that failed after claiming -- only add to it)
    # (of eo and of eo.dlq apart: a dead letter counts its own hand-outs)
    # (and of each incarnation of an item apart: an item zk_queue_move moved
    # has a new msg_id and counts from 0 again)
    handouts = collections.defaultdict(list)       # eo, by body (all its incarnations there)
    inc_handouts = collections.defaultdict(list)   # (queue, msg_id, body): one incarnation
    origin_msg = collections.defaultdict(set)      # body -> msg_ids its eo hand-outs showed
    eo_msg_owner = collections.defaultdict(set)    # msg_id in eo -> bodies its hand-outs showed
    for o in outcomes:
        q = outcome_queue(o)
        mids = {b: m for m, b in o.get("msgs", [])}
        for b, a in (o.get("att") or {}).items():
            if q == QUEUE:
                handouts[b].append((o.get("t_claimed", o["t0"]), a))
            inc_handouts[(q, mids.get(b), b)].append((o.get("t_claimed", o["t0"]), a))
        if q == QUEUE:
            for m, b in o.get("msgs", []):
                origin_msg[b].add(m)
                eo_msg_owner[m].add(b)
    att_under, att_order = [], []
    for (q, m, b), hs in inc_handouts.items():
        tag = "" if q == QUEUE else " (in %s)" % q
        hs.sort(key=lambda h: h[0])
        for k, (t, a) in enumerate(hs):
            if a is None or a < k + 1:
                att_under.append(b + tag)
                break
            if k > 0 and a <= hs[k - 1][1]:
                att_order.append(b + tag)
                break
    att_under = sorted(set(att_under))
    att_order = sorted(set(att_order))

    # the dead-letter policy (max_attempts POLICY_MAX, dead letter DLQ)
    poison_ids = sorted(i for i in prod_ids if is_poison(i))
    # no hand-out from eo beyond max_attempts (by the count it showed, or by
    # the hand-outs the clients saw)
    # (of one incarnation in eo: a move makes a new one, from 0 hand-outs)
    over_max = sorted(set(b for (q, m, b), hs in inc_handouts.items() if q == QUEUE and
                          (len(hs) > POLICY_MAX or any(a is not None and a > POLICY_MAX for _, a in hs))))
    poison_consumed = sorted(i for i in cons_by_id if is_poison(i))
    poison_not_dead = sorted(i for i in poison_ids if i not in dl_by_id)
    dl_dups = sorted((i for i, rows in dl_by_id.items() if len(rows) > 1), key=str)
    dl_msg_dups = sorted(m for m, rows in dl_by_msg.items() if len(rows) > 1)
    in_both = sorted((i for i in dl_by_id if i in cons_by_id), key=str)
    dl_phantom = sorted((i for i in dl_by_id if i not in prod_ids), key=str)
    dl_bad_origin = sorted(set(r["id"] for r in dead if r["origin"] != QUEUE), key=str)
    dl_bad_attempts = sorted(set(r["id"] for r in dead if r["origin_attempts"] != POLICY_MAX), key=str)
    # payload and origin_msg_id: the dead letter's body is the id it was
    # enqueued with (the original payload) and origin_msg_id the msg_id its
    # hand-outs from eo showed; no two dead letters share an origin_msg_id
    # (with moves into eo an item has had several msg_ids there: its dead
    # letter's is one of them, or one the clients never saw handed out)
    moves = [o for o in outcomes if o["role"] == "move"]
    into_eo = any(o.get("to") == QUEUE and o.get("moved") != 0 for o in moves)
    dl_mismatch, dl_unchecked = [], 0
    by_origin_msg = collections.defaultdict(set)
    for r in dead:
        by_origin_msg[r["origin_msg_id"]].add(r["id"])
        seen = origin_msg.get(r["id"])
        om = r["origin_msg_id"]
        if om is None or (seen and om not in seen and not into_eo) \
                or eo_msg_owner.get(om, {r["id"]}) != {r["id"]}:
            dl_mismatch.append(r["id"])
        elif not seen or om not in seen:
            dl_unchecked += 1
    dl_mismatch += [i for om, ids in by_origin_msg.items() if len(ids) > 1 for i in ids]
    dl_mismatch = sorted(set(dl_mismatch), key=str)
    # an ordinary item is rolled back by choice only at its first hand-out,
    # so only faults can take it to the dead-letter queue: its max_attempts
    # hand-outs must then show, seen (attempts POLICY_MAX) or unseen (as
    # many dequeues of eo that failed or got no answer after its last seen
    # hand-out), none committed
    failed_deq = sorted(o.get("t_claimed", o["t0"]) for o in outcomes
                        if o["role"] == "cons" and not o.get("msgs")
                        and o["outcome"] in ("failed", "unknown") and o.get("stage") == "dequeue")
    ordinary_dead = sorted((i for i in dl_by_id if i in prod_ids and not is_poison(i)), key=str)
    ordinary_unexplained = []
    for i in ordinary_dead:
        # the hand-outs of the incarnation that was dead-lettered
        hs = [h for r in dl_by_id[i] for h in inc_handouts.get((QUEUE, r["origin_msg_id"], i), [])]
        last_t = max([t for t, _ in hs] + [0])
        top = max([a for _, a in hs if a is not None] + [0])
        unseen = sum(1 for t in failed_deq if t >= last_t)
        committed_handout = any(o["outcome"] == "committed" and not any(x[1] == i for x in o.get("retry") or [])
                                for o in claimed_outcomes(outcomes, i))
        if committed_handout or (top < POLICY_MAX and top + unseen < POLICY_MAX):
            ordinary_unexplained.append(i)
    poison_handouts = sum(len(handouts.get(i, [])) for i in poison_ids)
    acked_prod_missing = sorted(i for i in acked_prod if i not in prod_ids)
    aborted_prod_present = sorted(i for i in (aborted_prod | sp_ids) if i in prod_ids)
    consumed_pairs = set((r["id"], r["msg_id"]) for r in consumed)
    acked_cons_missing = sorted(set(p for p in acked_cons if p not in consumed_pairs), key=str)
    dead_pairs = set((r["id"], r["msg_id"]) for r in dead)
    acked_cons_missing += sorted(set(p for p in acked_dl if p not in dead_pairs), key=str)
    redelivered = sum(1 for i in claimed_aborted if i in cons_by_id)
    phantom_known_aborted = sorted((i for i in phantom if i in aborted_prod or i in sp_ids), key=str)

    def fault_before(t):
        prior = [f for f in faults if f["t"] <= t]
        if not prior:
            return "no fault before"
        f = prior[-1]
        return "%.1fs after %s %s %s" % (t - f["t"], f["action"], f["kind"], f.get("target", ""))

    def when(t):
        return "%+.2fs (%s)" % (t - t0, fault_before(t)) if t else "?"

    # delayed items and holds: every hand-out of an id the clients saw (the
    # consumed rows' dequeued_at, taken after zk_dequeue answered, and the
    # clients' t_claimed, after it answered too) comes no earlier than its
    # due time (a lower bound: the clock before zk_enqueue, plus the delay)
    # less CLOCK_TOLERANCE; a hand-out after a hold made at attempts N (one
    # with more attempts) no earlier than the hold's end (the clock before
    # zk_retry_later, plus the delay) less CLOCK_TOLERANCE -- unless a fault
    # came between the zk_retry_later and that hand-out: a crash before the
    # end of the claim reached ZooKeeper releases it at once, the backoff
    # lost (doc/queues.md, "Retry later"), so that one is only counted
    seen_at = collections.defaultdict(list)     # id -> [(time, attempts, by)]
    for r in consumed:
        if r.get("deq") is not None:
            seen_at[r["id"]].append((r["deq"], r.get("attempts"), "consumed by %s (table of %s)"
                                     % (r["client"], r["src"])))
    for o in outcomes:
        if o["role"] == "cons":
            for b, a in (o.get("att") or {}).items():
                seen_at[b].append((o.get("t_claimed", o["t0"]), a, "%s %s" % (o["client"], o["outcome"])))
    delayed = {r["id"]: r["due"] for r in produced if r.get("due") is not None}
    delayed_early, early_why = [], {}
    margins = []
    for i, due in delayed.items():
        hs = seen_at.get(i, [])
        if hs:
            margins.append(min(h[0] for h in hs) - due)
        early = [h for h in hs if h[0] < due - CLOCK_TOLERANCE]
        if early:
            delayed_early.append(i)
            early_why[i] = ["    due %s, handed out %s (attempts %s) by %s" % (when(due), when(h[0]), h[1], h[2])
                            for h in early]
    holds = [(o, x) for o in outcomes if o["role"] == "cons" for x in o.get("retry") or []]
    injects = sorted(f["t"] for f in faults if f.get("action") == "inject")
    hold_early, hold_excused, hold_again, hold_margins = [], [], 0, []
    for o, (m, b, a, until, t_call, d) in holds:
        # the hand-outs after this hold's call: an id moved out and back in
        # (eo.dlq -> eo) starts its attempts again, so an earlier
        # incarnation's hand-outs may have more attempts than the hold's
        after = [h for h in seen_at.get(b, []) if h[1] is not None and h[1] > a and h[0] >= t_call]
        if not after:
            continue
        hold_again += 1
        t_next = min(h[0] for h in after)
        hold_margins.append(t_next - until)
        early = [h for h in after if h[0] < until - CLOCK_TOLERANCE]
        if not early:
            continue
        t_first = min(h[0] for h in early)
        key = "%s (msg_id %s, attempts %s)" % (b, m, a)
        why = ["    held by %s (%s) at %s for %.3fs, until %s; handed out %s (attempts %s) by %s"
               % (o["client"], o["outcome"], when(t_call), d, when(until), when(h[0]), h[1], h[2]) for h in early]
        if any(t_call <= t <= t_first for t in injects):
            hold_excused.append(key)
        else:
            hold_early.append(key)
        early_why[key] = why

    # zk_queue_move: the moves against the incarnations the clients saw
    move_fig, move_bad, move_why = check_moves(outcomes, when)
    ginfo, glists, gwhy = check_groups(produced, consumed, dead, outcomes, faults)

    labels = collections.Counter(str(i).split("-")[0] for i in prod_ids)
    cons_labels = collections.Counter(r["cluster"] for r in consumed)
    fig = {
        "sources": sources,
        "produced": len(prod_ids),
        "produced_by": dict(labels),
        "consumed_rows": len(consumed),
        "consumed_ids": len(cons_by_id),
        "consumed_by": dict(cons_labels),
        "consumed_by_drain": sum(1 for r in consumed if r["client"] == "drain"),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "duplicate_rows": dup_rows,
        "msg_id_dups": len(msg_dups),
        "conflicts": len(conflicts),
        "phantom": len(phantom),
        "phantom_known_aborted": len(phantom_known_aborted),
        "dup_produced": len(dup_produced),
        "acked_producer_missing": len(acked_prod_missing),
        "acked_consumer_missing": len(acked_cons_missing),
        "aborted_producer_present": len(aborted_prod_present),
        "unknown_producer_ids": len(unknown_prod),
        "unknown_producer_ids_committed": sum(1 for i in unknown_prod if i in prod_ids),
        "savepoint_ids": len(sp_ids),
        "redelivered": redelivered,
        "attempts": {"%s_%s" % k: v for k, v in sorted(attempts.items())},
        "attempts_undercount": len(att_under),
        "attempts_not_increasing": len(att_order),
        "attempts_max": max([a for hs in handouts.values() for _, a in hs if a is not None] + [0]),
        "handed_out_again": sum(1 for hs in handouts.values() if len(hs) > 1),
        "consumer_rollbacks_with_items": sum(1 for o in outcomes if o["role"] == "cons"
                                             and o["outcome"] == "rolled_back" and o.get("msgs")),
        "prepare_refused": sum(1 for o in outcomes if o.get("tag") == "PREPARE refused (0A000)"),
        "prepare_accepted": sum(1 for o in outcomes if o["outcome"] == "prepared"),
        "max_attempts": POLICY_MAX,
        "poison_produced": len(poison_ids),
        "poison_handouts": poison_handouts,
        "dead_letters": len(dl_by_id),
        "dead_letter_rows": len(dead),
        "dead_letters_by_drain": sum(1 for r in dead if r["client"] == "drain"),
        "dead_letter_handouts_rolled_back": sum(1 for o in outcomes if o["role"] == "dlq"
                                                and o["outcome"] == "rolled_back" and o.get("msgs")),
        "dead_letter_msg_id_unchecked": dl_unchecked,
        "ordinary_dead_lettered": len(ordinary_dead),
        "attempts_over_max": len(over_max),
        "poison_consumed": len(poison_consumed),
        "poison_not_dead_lettered": len(poison_not_dead),
        "dead_letter_dups": len(dl_dups),
        "dead_letter_msg_id_dups": len(dl_msg_dups),
        "dead_letter_and_consumed": len(in_both),
        "dead_letter_phantom": len(dl_phantom),
        "dead_letter_bad_origin": len(dl_bad_origin),
        "dead_letter_bad_attempts": len(dl_bad_attempts),
        "dead_letter_mismatch": len(dl_mismatch),
        "ordinary_dead_lettered_unexplained": len(ordinary_unexplained),
        "delayed_produced": len(delayed),
        "delayed_consumed": sum(1 for i in delayed if i in cons_by_id),
        "delayed_early": len(delayed_early),
        "delayed_margin_min": round(min(margins), 3) if margins else None,
        "retried": len(holds),
        "retried_handed_out_again": hold_again,
        "retried_consumed": len(set(x[1] for _, x in holds if x[1] in cons_by_id)),
        "hold_early": len(hold_early),
        "lost_after_hold": len(set(x[1] for _, x in holds if x[1] in lost)),
        "hold_early_after_fault": len(hold_excused),
        "hold_margin_min": round(min(hold_margins), 3) if hold_margins else None,
        "consumed_from_side": sum(1 for r in consumed if r.get("queue") == SIDE),
    }
    fig.update(move_fig)
    for k in MOVE_COUNTS:
        fig[k] = len(move_bad[k])
    fig.update(ginfo)
    anomalies = ("lost", "duplicated", "msg_id_dups", "conflicts", "phantom", "dup_produced",
                 "acked_producer_missing", "acked_consumer_missing", "aborted_producer_present",
                 "prepare_accepted", "attempts_undercount", "attempts_not_increasing") + DEAD_COUNTS \
        + TIMING_COUNTS + MOVE_COUNTS + GROUP_COUNTS
    bad = [k for k in anomalies if fig[k]]
    fig["verdict"] = "anomalies: " + ", ".join(bad) if bad else "exactly once"

    def attempts_of(i):
        out = []
        for o in by_id_attempts.get(i, [])[:6]:
            out.append("      %s %s on %s pid %s %s: %s [%s .. %s]%s"
                       % (o["role"], o["client"], o.get("cluster"), o.get("pid"),
                          "stage " + str(o.get("stage")), o["outcome"], when(o["t0"]), when(o.get("t1")),
                          (" %s %s" % (o.get("sqlstate"), o.get("msg"))) if o.get("sqlstate") or o.get("msg")
                          else ""))
            for x in o.get("retry") or []:
                if x[1] == i:
                    out.append("        (zk_retry_later(%s, %.3fs) at %s attempts %s: held until %s, not consumed)"
                               % (x[0], x[5], when(x[4]), x[2], when(x[3])))
        return out

    def show(title, items, detail):
        if not items:
            return
        print("%s: %d" % (title, len(items)))
        for i in items[:args.show]:
            for line in detail(i):
                print(line)
        if len(items) > args.show:
            print("  ... and %d more" % (len(items) - args.show))

    show("LOST (produced, never consumed)", lost,
         lambda i: ["  %s produced by %s xid %s at %s in %s" % (i, prod_by_id[i]["client"], prod_by_id[i]["xid"],
                                                               when(prod_by_id[i]["at"]), prod_by_id[i]["src"])]
         + attempts_of(i))
    show("DUPLICATED (consumed by more than one committed transaction)", duplicated,
         lambda i: ["  %s" % i] + ["    consumed msg_id %s by %s on %s xid %s at %s (table of %s)"
                                   % (r["msg_id"], r["client"], r["cluster"], r["xid"], when(r["at"]), r["src"])
                                   for r in cons_by_id[i]] + attempts_of(i))
    show("MSG_ID consumed twice", msg_dups,
         lambda m: ["  msg_id %s: %s" % (m, ", ".join("%s by %s xid %s at %s" % (r["id"], r["client"], r["xid"],
                                                                                when(r["at"]))
                                                      for r in cons_by_msg[m]))])
    show("CONFLICTS", conflicts, lambda s: ["  " + s])
    show("PHANTOM (consumed, never produced)", phantom,
         lambda i: ["  %s%s" % (i, " (its producer rolled back)" if i in phantom_known_aborted else "")]
         + ["    consumed msg_id %s by %s on %s xid %s at %s" % (r["msg_id"], r["client"], r["cluster"],
                                                                 r["xid"], when(r["at"])) for r in cons_by_id[i]]
         + attempts_of(i))
    show("ACKNOWLEDGED PRODUCER COMMIT MISSING from produced", acked_prod_missing,
         lambda i: ["  %s" % i] + attempts_of(i))
    show("ACKNOWLEDGED CONSUMER COMMIT MISSING from consumed", acked_cons_missing,
         lambda p: ["  %s msg_id %s" % p] + attempts_of(p[0]))
    show("ROLLED-BACK ENQUEUE PRESENT in produced", aborted_prod_present,
         lambda i: ["  %s" % i] + attempts_of(i))
    show("DELIVERY COUNT BELOW THE HAND-OUTS SEEN", att_under,
         lambda i: ["  %s attempts seen %s" % (i, [a for _, a in handouts[i]])] + attempts_of(i))
    show("DELIVERY COUNT NOT GROWING", att_order,
         lambda i: ["  %s attempts seen %s" % (i, [a for _, a in handouts[i]])] + attempts_of(i))

    def dl_rows(i):
        return ["    dead letter msg_id %s origin %s origin_msg_id %s origin_attempts %s attempts %s"
                " by %s on %s xid %s at %s (table of %s)"
                % (r["msg_id"], r["origin"], r["origin_msg_id"], r["origin_attempts"], r["attempts"],
                   r["client"], r["cluster"], r["xid"], when(r["at"]), r["src"]) for r in dl_by_id.get(i, [])]

    def dl_detail(i):
        return (["  %s: hand-outs from %s showed attempts %s, msg_ids %s"
                 % (i, QUEUE, [a for _, a in handouts.get(i, [])], sorted(origin_msg.get(i, ())))]
                + dl_rows(i) + attempts_of(i))
    show("HANDED OUT FROM %s MORE THAN max_attempts %d TIMES" % (QUEUE, POLICY_MAX), over_max, dl_detail)
    show("POISON ITEM CONSUMED FROM %s" % QUEUE, poison_consumed, dl_detail)
    show("POISON ITEM NEVER DEAD-LETTERED", poison_not_dead, dl_detail)
    show("DEAD LETTER CONSUMED TWICE", dl_dups, dl_detail)
    show("DEAD LETTER MSG_ID CONSUMED TWICE", dl_msg_dups,
         lambda m: ["  msg_id %s: %s" % (m, [r["id"] for r in dl_by_msg[m]])])
    show("BOTH CONSUMED FROM %s AND DEAD-LETTERED" % QUEUE, in_both,
         lambda i: dl_detail(i) + ["    consumed msg_id %s by %s" % (r["msg_id"], r["client"])
                                   for r in cons_by_id[i]])
    show("DEAD LETTER NEVER PRODUCED", dl_phantom, dl_detail)
    show("DEAD LETTER WITH ANOTHER ORIGIN", dl_bad_origin, dl_detail)
    show("DEAD LETTER WITH origin_attempts NOT %d" % POLICY_MAX, dl_bad_attempts, dl_detail)
    show("DEAD LETTER WHOSE origin_msg_id OR PAYLOAD IS NOT THE ITEM'S", dl_mismatch, dl_detail)
    show("ORDINARY ITEM DEAD-LETTERED WITHOUT max_attempts HAND-OUTS", ordinary_unexplained, dl_detail)
    show("DELAYED ITEM HANDED OUT BEFORE ITS DUE TIME", delayed_early,
         lambda i: ["  %s" % i] + early_why[i] + attempts_of(i))
    show("HELD ITEM (zk_retry_later) HANDED OUT AGAIN BEFORE THE HOLD ENDED", hold_early,
         lambda k: ["  %s" % k] + early_why[k] + attempts_of(k.split(" ")[0]))
    show("held item handed out early after a fault (the backoff may be lost: not an anomaly)", hold_excused,
         lambda k: ["  %s" % k] + early_why[k])
    show("MOVE ANSWERED MORE THAN max_items", move_bad["move_over_max"], lambda x: ["  " + x])
    show("TWO INCARNATIONS OF AN ITEM AT ONCE", move_bad["move_overlap"],
         lambda i: ["  %s: %s" % (i, move_why.get(i))] + attempts_of(i))
    show("ITEM IN A NEW QUEUE OR UNDER A NEW NAME WITHOUT A MOVE", move_bad["move_unexplained"],
         lambda i: ["  %s: %s" % (i, move_why.get(i))] + dl_rows(i) + attempts_of(i))
    show("MORE INCARNATIONS MADE BY MOVES THAN ITEMS MOVED", move_bad["move_overcount"], lambda x: ["  " + x])

    def group_detail(k):
        ids = [x for x in k.replace(":", " ").replace(",", " ").split() if x in prod_by_id or x in cons_by_id]
        out = ["  %s" % k] + gwhy.get(k, [])
        for i in ids[:2]:
            out.append("    %s:" % i)
            out += attempts_of(i)
        return out
    show("MESSAGE GROUP CONSUMED OUT OF ORDER", glists["group_order"], group_detail)
    show("MESSAGE GROUP ITEM HANDED OUT BEFORE AN EARLIER ITEM OF ITS GROUP LEFT", glists["group_ahead"],
         group_detail)
    show("TWO HAND-OUTS OF ONE MESSAGE GROUP AT ONCE", glists["group_overlap"], group_detail)
    show("message group out of order behind an item whose publication may have been deferred"
         " (not an anomaly)", glists["group_order_deferred"] + glists["group_ahead_deferred"],
         lambda k: ["  %s" % k] + gwhy.get(k, []))

    print("produced %d, consumed %d (rows %d), lost %d, duplicated %d, phantom %d;"
          " poison %d, dead letters %d (ordinary %d), poison hand-outs %d;"
          " delayed %d (early %d), retried %d (early %d, after a fault %d);"
          " moves %d (failed %d, moved %s; unexplained %d, overlaps %d);"
          " grouped %d in %d groups (consumed %d, dead-lettered %d, moved out %d, hand-outs %d;"
          " out of order %d, ahead %d, overlapping %d; behind a deferred publication %d)"
          % (fig["produced"], fig["consumed_ids"], fig["consumed_rows"], fig["lost"], fig["duplicated"],
             fig["phantom"], fig["poison_produced"], fig["dead_letters"], fig["ordinary_dead_lettered"],
             fig["poison_handouts"], fig["delayed_produced"], fig["delayed_early"], fig["retried"],
             fig["hold_early"], fig["hold_early_after_fault"], fig["moves"], fig["moves_failed"],
             json.dumps(fig["moved"], sort_keys=True), fig["move_unexplained"], fig["move_overlap"],
             fig["grouped_produced"], fig["groups"], fig["grouped_consumed"], fig["grouped_dead_lettered"],
             fig["grouped_moved_out"], fig["group_handouts"], fig["group_order"],
             fig["group_ahead"], fig["group_overlap"],
             fig["group_order_deferred"] + fig["group_ahead_deferred"]))
    print("QUEUE-CHECK %s" % json.dumps(fig, sort_keys=True), flush=True)
    return 1 if bad else 0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("load")
    lp.add_argument("--dir", required=True)
    lp.add_argument("--host", required=True)
    lp.add_argument("--a", type=int, required=True)
    lp.add_argument("--b", type=int, required=True)
    lp.add_argument("--producers", type=int, default=2)
    lp.add_argument("--consumers", type=int, default=3)
    lp.add_argument("--dlq-consumers", type=int, default=1,
                    help="consumers of the dead-letter queue per cluster")
    lp.add_argument("--movers", type=int, default=1,
                    help="clients calling zk_queue_move now and then, per cluster")
    lp.add_argument("--side-consumers", type=int, default=1,
                    help="consumers of %s (where movers put items) per cluster" % SIDE)
    lp.add_argument("--producer-pause", type=float, default=0.15,
                    help="each producer sleeps up to this many seconds between transactions")
    lp.add_argument("--seed", type=int, default=None)
    sp = sub.add_parser("setup")
    sp.add_argument("--host", required=True)
    sp.add_argument("--port", type=int, required=True)
    sp.add_argument("--dir", default=".")
    dp = sub.add_parser("drain")
    dp.add_argument("--dir", required=True)
    dp.add_argument("--host", required=True)
    dp.add_argument("--port", type=int, required=True)
    dp.add_argument("--label", default="A")
    dp.add_argument("--seconds", type=float, default=120)
    zp = sub.add_parser("zk")
    zp.add_argument("--dir", required=True)
    zp.add_argument("--hosts", required=True)
    zp.add_argument("--sysids", required=True, help="NAME=SYSTEM_IDENTIFIER,...")
    cp = sub.add_parser("check")
    cp.add_argument("--dir", required=True)
    cp.add_argument("--host", required=True)
    cp.add_argument("--tables", required=True, help="NAME:PORT,...")
    cp.add_argument("--mutate", action="store_true")
    cp.add_argument("--show", type=int, default=10, help="anomalies shown per kind")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    args.dir = os.path.abspath(args.dir)
    os.makedirs(args.dir, exist_ok=True)
    if args.cmd == "setup":
        return cmd_setup(args)
    if args.cmd == "load":
        return cmd_load(args)
    if args.cmd == "drain":
        return cmd_drain(args)
    if args.cmd == "zk":
        return cmd_zk(args)
    return cmd_check(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
