#!/usr/bin/python3
"""queue_bench.py - one queue benchmark case for bench/queue/run.sh: P
producers and N consumers on one queue, driven through kazoo's LockingQueue
(--driver kazoo) or through zklock's SQL functions (--driver zklock; and
zklock-delayed, every item enqueued with a delay, and zklock-retry, every
item's first hand-out backed off with zk_retry_later, both --delay-ms; and
zklock-grouped, every item in one of --groups message groups, round robin).

  queue_bench.py --driver kazoo  --zk-port P --path /bench-queue/kazoo-1 [--producers 1] --consumers 1 \
                 --seconds 10 [--warmup 2] [--backlog 100] [--drain 30]
  queue_bench.py --driver zklock --zk-port P --queue bench-1 --pg-host DIR --pg-port N --consumers 8 ...

Every worker is a process of its own with its own ZooKeeper session (kazoo) or
its own PostgreSQL connection (zklock), like separate services.  The
producers put 100-byte payloads that start with "seq=<12 digits>;t=<16
digits>;": a number 0, 1, 2, ... drawn from one counter shared by the
producers, and the wall-clock time of the put in microseconds.  A producer
waits while --backlog items are put and not yet consumed, so that the queue
stays short and the same length for every driver.  A consumer takes the time
again when the item counts: enqueue-to-dequeue latency, of the items that
count in the timed window.

  kazoo:  producer LockingQueue.put(payload); consumer get() then consume(),
          counted once consume() returned True (entry and claim deleted).
  zklock: producer SELECT zk_enqueue(queue, payload) in autocommit; consumer
          BEGIN; SELECT * FROM zk_dequeue(queue, '1s'); COMMIT, counted once
          COMMIT returned.

Timeline: all workers connect; --warmup seconds of work that is not counted;
the timed window of --seconds, framed by two mntr requests to ZooKeeper
(zk_packets_received); then the producer stops and the consumers drain the
queue until every item put is consumed and ZooKeeper holds no entry and no
claim of it (at most --drain seconds); then every worker closes and the
parent checks through ZooKeeper itself (kazoo) that no item was lost or
consumed twice and nothing is left behind.

Prints one line:
  driver=kazoo producers=1 consumers=1 seconds=10.002 consumed=... items_per_sec=...
  zk_packets=... packets_per_item=... produced_total=... consumed_total=...
  drained=1 remaining=0 claims_left=0 lost=0 duplicated=0 consumed_not_gone=0
  unknown=0 errors=0 verify=ok lat_p50_us=... lat_p99_us=... lat_max_us=...
Exit status 0 when verify=ok, 1 otherwise.
"""

import argparse
import math
import multiprocessing as mp
import queue as pyqueue
import signal
import socket
import sys
import time
import os
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import mntr_packets  # noqa: E402

PAYLOAD_LEN = 100

WAIT, RUN, DRAIN, STOP = 0, 1, 2, 3


def payload(seq):
    head = b"seq=%012d;t=%016d;" % (seq, time.time_ns() // 1000)
    return head + b"." * (PAYLOAD_LEN - len(head))


def parse_t(data):
    """the put's time in a payload (microseconds since the epoch), None when there is none"""
    if isinstance(data, str):
        data = data.encode()
    i = data.find(b";t=")
    if i < 0 or len(data) < i + 19 or not data[i + 3:i + 19].isdigit():
        return None
    return int(data[i + 3:i + 19])


def pct(sorted_v, q):
    if not sorted_v:
        return 0
    i = max(0, min(len(sorted_v) - 1, int(math.ceil(q * len(sorted_v))) - 1))
    return sorted_v[i]


def parse_seq(data):
    """sequence number in a payload, None when there is none"""
    if isinstance(data, str):
        data = data.encode()
    i = data.find(b"seq=")
    if i < 0 or len(data) < i + 16 or not data[i + 4:i + 16].isdigit():
        return None
    return int(data[i + 4:i + 16])


def kazoo_client(port):
    from kazoo.client import KazooClient
    zk = KazooClient(hosts="127.0.0.1:%d" % port, timeout=10.0)
    zk.start(timeout=15)
    return zk


# ---------------------------------------------------------------------------
# drivers: each has producer_setup / put / consumer_setup / take / close


class KazooDriver:
    """kazoo's LockingQueue at args.path (entries/ and taken/ below it)"""

    def __init__(self, args):
        self.args = args
        self.zk = None
        self.q = None

    def _open(self):
        from kazoo.recipe.queue import LockingQueue
        self.zk = kazoo_client(self.args.zk_port)
        self.q = LockingQueue(self.zk, self.args.path)
        # creates entries/ and taken/ now, outside the timed window
        self.q._ensure_paths()

    producer_setup = _open
    consumer_setup = _open

    def put(self, data):
        self.q.put(data)

    def take(self):
        """list of consumed payloads (empty when none came within 0.2 s)"""
        v = self.q.get(timeout=0.2)
        if v is None:
            return []
        if not self.q.consume():
            raise RuntimeError("LockingQueue.consume() returned False (claim lost)")
        return [v]

    def close(self):
        if self.zk is not None:
            self.zk.stop()
            self.zk.close()


class ZklockDriver:
    """zklock's zk_enqueue / zk_dequeue on queue args.queue"""

    def __init__(self, args):
        self.args = args
        self.conn = None
        self.cur = None

    def _connect(self, autocommit):
        import psycopg2
        self.conn = psycopg2.connect(host=self.args.pg_host, port=self.args.pg_port,
                                     user=self.args.pg_user, dbname=self.args.pg_db,
                                     application_name="queue_bench")
        self.conn.autocommit = autocommit
        self.cur = self.conn.cursor()

    def producer_setup(self):
        self._connect(True)

    def consumer_setup(self):
        # autocommit too: the claim is consumed when the statement's
        # transaction commits (kazoo's get + consume in one round trip)
        self._connect(True)

    def put(self, data):
        # autocommit: published when the statement's transaction commits
        self.cur.execute("SELECT zk_enqueue(%s, %s::text)", (self.args.queue, data.decode()))

    def take(self):
        # one statement, one transaction: the rows come back once it has
        # committed, and its commit consumes the items (the worker deletes
        # entry and claim right after; the claim is durable until then)
        self.cur.execute("SELECT * FROM zk_dequeue(%s, %s::interval)", (self.args.queue, "1s"))
        rows = self.cur.fetchall()
        cols = [d[0] for d in self.cur.description]
        out = []
        for r in rows:
            rec = dict(zip(cols, r))
            body = rec.get("body")
            if body is None and rec.get("payload") is not None:
                body = bytes(rec["payload"])
            out.append(body)
        return out

    def close(self):
        if self.conn is not None:
            self.conn.close()


class ZklockDelayedDriver(ZklockDriver):
    """zklock, every item delayed by --delay-ms: published at COMMIT under
    delayed, moved into the queue once due (doc/queues.md, "Delayed items")"""

    def put(self, data):
        self.cur.execute("SELECT zk_enqueue(%s, %s::text, delay => %s::interval)",
                         (self.args.queue, data.decode(), "%d milliseconds" % self.args.delay_ms))


class ZklockRetryDriver(ZklockDriver):
    """zklock, every item retried once: its first hand-out asks for a backoff
    of --delay-ms with zk_retry_later and rolls back (the item is not
    consumed but held, then handed out again; COMMIT would be refused); its
    second is consumed (doc/queues.md, "Retry later")"""

    def consumer_setup(self):
        self._connect(False)

    def take(self):
        try:
            self.cur.execute("SELECT msg_id, attempts, body FROM zk_dequeue(%s, %s::interval)",
                             (self.args.queue, "1s"))
            rows = self.cur.fetchall()
            out = []
            held = False
            for msg_id, attempts, body in rows:
                if attempts is not None and attempts <= 1:
                    self.cur.execute("SELECT zk_retry_later(%s, %s::interval)",
                                     (msg_id, "%d milliseconds" % self.args.delay_ms))
                    held = True
                else:
                    out.append(body)
            if held:
                # a transaction that held an item back ends with ROLLBACK
                # (its COMMIT is refused): what it also dequeued comes back
                self.conn.rollback()
                return []
            self.conn.commit()
            return out
        except Exception:
            self.conn.rollback()
            raise


class ZklockGroupedDriver(ZklockDriver):
    """zklock, every item in a message group: item seq goes into group
    g<seq mod --groups> with zk_enqueue_grouped, so each group holds every
    --groups-th item; a group's items are handed out one at a time, in order
    (doc/queues.md, "Message groups")"""

    def put(self, data):
        seq = parse_seq(data)
        self.cur.execute("SELECT zk_enqueue_grouped(%s, %s, %s::text)",
                         (self.args.queue, "g%d" % (seq % self.args.groups), data.decode()))


DRIVERS = {"kazoo": KazooDriver, "zklock": ZklockDriver,
           "zklock-delayed": ZklockDelayedDriver, "zklock-retry": ZklockRetryDriver,
           "zklock-grouped": ZklockGroupedDriver}


# ---------------------------------------------------------------------------
# workers (separate processes)


def worker(role, idx, args, shared, results):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    phase, produced, consumed, ready, slots, next_seq, window = shared
    drv = DRIVERS[args.driver](args)
    seqs = []
    lats = []
    err = None
    try:
        if role == "producer":
            drv.producer_setup()
        else:
            drv.consumer_setup()
        with ready.get_lock():
            ready.value += 1
        while phase.value == WAIT:
            time.sleep(0.001)
        if role == "producer":
            while phase.value == RUN:
                # one slot per item put and not yet consumed
                if not slots.acquire(timeout=0.1):
                    continue
                with next_seq.get_lock():
                    seq = next_seq.value
                    next_seq.value += 1
                drv.put(payload(seq))
                with produced.get_lock():
                    produced.value += 1
        else:
            while phase.value in (RUN, DRAIN):
                got = drv.take()
                if not got:
                    continue
                now = time.time_ns() // 1000
                for body in got:
                    seqs.append(parse_seq(body))
                    if window.value:
                        t = parse_t(body)
                        lats.append(now - t if t is not None else -1)
                    slots.release()
                with consumed.get_lock():
                    consumed.value += len(got)
    except Exception as e:  # reported by the parent; the case fails
        err = "%s %d: %s: %s" % (role, idx, type(e).__name__, e)
    finally:
        try:
            drv.close()
        except Exception as e:
            err = err or "%s %d: close: %s" % (role, idx, e)
    results.put((role, idx, seqs, lats, err))


# ---------------------------------------------------------------------------
# verification through ZooKeeper


def queue_base(args):
    if args.driver == "kazoo":
        return args.path
    return args.zk_path


def zk_queue_empty(zk, args):
    """no entry, no claim and no delayed item left in ZooKeeper"""
    base = queue_base(args)
    for sub in ("/entries", "/taken", "/delayed"):
        if zk.exists(base + sub) and zk.get_children(base + sub):
            return False
    return True


def zk_remaining(args):
    """(seqs of the items left in the queue, number of claims left, path)"""
    zk = kazoo_client(args.zk_port)
    try:
        base = queue_base(args)
        entries = base + "/entries"
        taken = base + "/taken"
        left = []
        names = zk.get_children(entries) if zk.exists(entries) else []
        for n in names:
            try:
                data, _ = zk.get(entries + "/" + n)
            except Exception:
                continue  # deleted meanwhile
            left.append(parse_seq(data))
        delayed = base + "/delayed"
        for n in (zk.get_children(delayed) if zk.exists(delayed) else []):
            if not n.startswith(("due-", "grp-")):
                continue  # a hold's index (its item is in entries), a group's state
            try:
                data, _ = zk.get(delayed + "/" + n)
            except Exception:
                continue
            left.append(parse_seq(data))
        claims = len(zk.get_children(taken)) if zk.exists(taken) else 0
        return left, claims, base
    finally:
        zk.stop()
        zk.close()


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", choices=sorted(DRIVERS), required=True)
    ap.add_argument("--zk-port", type=int, required=True)
    ap.add_argument("--path", help="kazoo: queue path (entries/ and taken/ below it)")
    ap.add_argument("--queue", help="zklock: queue name")
    ap.add_argument("--zk-root", default=None, help="zklock: zklock.root, in the root namespace (default: the queue's path from zk_path)")
    ap.add_argument("--pg-host")
    ap.add_argument("--pg-port", type=int, default=5432)
    ap.add_argument("--pg-user", default="postgres")
    ap.add_argument("--pg-db", default="postgres")
    ap.add_argument("--delay-ms", type=int, default=100,
                    help="zklock-delayed: each item's delay; zklock-retry: each item's backoff")
    ap.add_argument("--groups", type=int, default=64,
                    help="zklock-grouped: the number of message groups the items are spread over")
    ap.add_argument("--producers", type=int, default=1)
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--backlog", type=int, default=100)
    ap.add_argument("--drain", type=float, default=30.0)
    ap.add_argument("--setup-timeout", type=float, default=60.0)
    args = ap.parse_args()
    if args.driver == "kazoo" and not args.path:
        ap.error("--path is needed with --driver kazoo")
    if args.driver.startswith("zklock"):
        if not args.queue or not args.pg_host:
            ap.error("--queue and --pg-host are needed with --driver zklock")
        import psycopg2
        c = psycopg2.connect(host=args.pg_host, port=args.pg_port, user=args.pg_user, dbname=args.pg_db)
        cur = c.cursor()
        if args.zk_root is None:
            # the queue's own path, in the database's namespace
            cur.execute("SELECT zk_path('queue', %s)", (args.queue,))
            args.zk_path = cur.fetchone()[0]
        else:
            args.zk_path = args.zk_root.rstrip("/") + "/queues/" + args.queue
        c.close()

    ctx = mp.get_context("fork")
    phase = ctx.Value("i", WAIT)
    produced = ctx.Value("q", 0)
    consumed = ctx.Value("q", 0)
    ready = ctx.Value("i", 0)
    slots = ctx.Semaphore(args.backlog)
    next_seq = ctx.Value("q", 0)
    window = ctx.Value("i", 0)
    shared = (phase, produced, consumed, ready, slots, next_seq, window)
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=("producer", i, args, shared, results))
             for i in range(args.producers)]
    producers = procs[:]
    procs += [ctx.Process(target=worker, args=("consumer", i, args, shared, results))
              for i in range(args.consumers)]

    def on_term(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)

    errors = []
    got = {}
    lat_all = []
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + args.setup_timeout
        while ready.value < len(procs):
            if time.monotonic() > deadline or any(p.exitcode is not None for p in procs):
                raise RuntimeError("workers not ready after setup (%d of %d)" % (ready.value, len(procs)))
            time.sleep(0.01)

        # warm-up, then the timed window
        phase.value = RUN
        time.sleep(args.warmup)
        pk0 = mntr_packets(args.zk_port)
        c0 = consumed.value
        t0 = time.monotonic()
        window.value = 1
        time.sleep(args.seconds)
        window.value = 0
        c_win = consumed.value - c0
        t1 = time.monotonic()
        pk1 = mntr_packets(args.zk_port)
        phase.value = DRAIN

        # drain: the producer stops at once; the consumers empty the queue
        # until ZooKeeper holds no entry and no claim of it
        deadline = time.monotonic() + args.drain
        drained = 0
        zkc = None
        try:
            while time.monotonic() < deadline:
                if not any(p.is_alive() for p in producers) and consumed.value >= produced.value:
                    zkc = zkc or kazoo_client(args.zk_port)
                    if zk_queue_empty(zkc, args):
                        drained = 1
                        break
                time.sleep(0.02)
        finally:
            if zkc is not None:
                zkc.stop()
                zkc.close()
        phase.value = STOP

        # collect every worker's consumed sequence numbers
        deadline = time.monotonic() + 30
        while len(got) < len(procs) and time.monotonic() < deadline:
            try:
                role, idx, seqs, lats, err = results.get(timeout=0.5)
            except pyqueue.Empty:
                continue
            got[(role, idx)] = seqs
            lat_all.extend(lats)
            if err:
                errors.append(err)
        for p in procs:
            p.join(timeout=5)
        if len(got) < len(procs):
            errors.append("%d worker(s) did not report" % (len(procs) - len(got)))
    finally:
        phase.value = STOP
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)

    # what ZooKeeper holds, once every worker's session is closed
    left, claims, base = zk_remaining(args)
    n_prod = next_seq.value
    if any(v < 0 for v in lat_all):
        errors.append("%d consumed payload(s) without a time" % sum(v < 0 for v in lat_all))
    lat_all.sort()
    cons = [s for (role, _), seqs in got.items() if role == "consumer" for s in seqs]
    cset = set(cons)
    lset = set(left)
    pset = set(range(n_prod))
    duplicated = len(cons) - len(cset) + (len(left) - len(lset))
    consumed_not_gone = len(cset & lset)
    lost = len(pset - cset - lset)
    unknown = len((cset | lset) - pset)
    bad = (duplicated or consumed_not_gone or lost or unknown or claims or errors
           or (drained and left))
    elapsed = t1 - t0
    pk = pk1 - pk0 - 1
    print("driver=%s producers=%d consumers=%d seconds=%.3f consumed=%d items_per_sec=%.1f zk_packets=%d "
          "packets_per_item=%s produced_total=%d consumed_total=%d drained=%d remaining=%d "
          "claims_left=%d lost=%d duplicated=%d consumed_not_gone=%d unknown=%d errors=%d verify=%s path=%s "
          "lat_p50_us=%d lat_p99_us=%d lat_max_us=%d"
          % (args.driver, args.producers, args.consumers, elapsed, c_win, c_win / elapsed, pk,
             ("%.2f" % (pk / c_win)) if c_win else "-", n_prod, len(cons), drained, len(left),
             claims, lost, duplicated, consumed_not_gone, unknown, len(errors),
             "FAILED" if bad else "ok", base,
             pct(lat_all, 0.50), pct(lat_all, 0.99), lat_all[-1] if lat_all else 0))
    for e in errors[:10]:
        print("error: " + e, file=sys.stderr)
    sys.stdout.flush()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
