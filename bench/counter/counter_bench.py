#!/usr/bin/python3
"""counter_bench.py - one counter benchmark case for bench/counter/run.sh: N
clients add 1 to ONE shared counter as fast as they can, through kazoo's
Counter (--driver kazoo) or through zklock's zk_counter_add (--driver zklock).

  counter_bench.py --driver kazoo  --zk-port P --path /bench-counter/kazoo-1 --clients 32 \
                   --seconds 5 [--warmup 2]
  counter_bench.py --driver zklock --zk-port P --name bench-ctr --pg-host DIR --pg-port N \
                   --clients 32 --seconds 5 [--warmup 2]

Every client is a process of its own (the GIL would serialize threads): with
its own KazooClient, i.e. its own ZooKeeper session (kazoo), or its own
PostgreSQL connection in autocommit (zklock; the zklock worker of the cluster
holds one ZooKeeper session for all of them).

  kazoo:  counter = zk.Counter(path); counter += 1; the value it made is
          counter.post_value.  kazoo's Counter is a compare-and-set loop over
          client.retry; the client's command retry is
          KazooRetry(max_tries=-1, delay=--kazoo-delay, backoff=2,
          max_delay=--kazoo-max-delay) (kazoo's own default starts at 0.1 s
          and doubles without bound, which under contention leaves clients
          asleep for seconds).
  zklock: SELECT zk_counter_add(name); the value it made is the result.  The
          counter is dropped (zk_counter_drop) before the case.

Timeline: all clients connect; --warmup seconds of adds that are not timed;
the timed window of --seconds, framed by two mntr requests to ZooKeeper
(zk_packets_received); then every client stops after its add in progress
and closes; then the parent reads the counter's final value (kazoo: a fresh
client's Counter.value; zklock: zk_counter_get) and checks:
  final - initial == every acknowledged add (warm-up and window and the last
  ones included): no add lost, none applied twice;
  the values the adds returned are distinct and all in (initial, final].

Prints one line:
  driver=kazoo clients=32 seconds=5.001 incs=... incs_per_sec=... zk_packets=...
  packets_per_inc=... acked_total=... failed_total=0 initial=0 final=...
  duplicates=0 out_of_range=0 errors=0 verify=ok lat_p50_us=... lat_p99_us=... lat_max_us=...
Exit status 0 when verify=ok, 1 otherwise.
"""

import argparse
import math
import multiprocessing as mp
import os
import queue as pyqueue
import signal
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import mntr_packets  # noqa: E402

WAIT, RUN, STOP = 0, 1, 2


def pct(sorted_v, q):
    if not sorted_v:
        return 0
    i = max(0, min(len(sorted_v) - 1, int(math.ceil(q * len(sorted_v))) - 1))
    return sorted_v[i]


def kazoo_client(args):
    from kazoo.client import KazooClient
    from kazoo.retry import KazooRetry
    zk = KazooClient(hosts="127.0.0.1:%d" % args.zk_port, timeout=10.0,
                     command_retry=KazooRetry(max_tries=-1, delay=args.kazoo_delay, backoff=2,
                                              max_delay=args.kazoo_max_delay))
    zk.start(timeout=15)
    return zk


class KazooDriver:
    def __init__(self, args):
        self.args = args
        self.zk = kazoo_client(args)
        self.counter = self.zk.Counter(args.path)

    def add(self):
        self.counter += 1
        return self.counter.post_value

    def close(self):
        self.zk.stop()
        self.zk.close()


class ZklockDriver:
    def __init__(self, args):
        import psycopg2
        self.conn = psycopg2.connect(host=args.pg_host, port=args.pg_port, user=args.pg_user,
                                     dbname=args.pg_db)
        self.conn.autocommit = True
        self.cur = self.conn.cursor()
        self.name = args.name

    def add(self):
        self.cur.execute("SELECT zk_counter_add(%s)", (self.name,))
        return self.cur.fetchone()[0]

    def close(self):
        self.conn.close()


DRIVERS = {"kazoo": KazooDriver, "zklock": ZklockDriver}


def worker(idx, args, phase, ready, window, acked, results):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    values = []
    lats = []
    err = None
    drv = None
    try:
        drv = DRIVERS[args.driver](args)
        with ready.get_lock():
            ready.value += 1
        while phase.value == WAIT:
            time.sleep(0.001)
        n = 0
        while phase.value == RUN:
            t0 = time.monotonic_ns()
            v = drv.add()
            t1 = time.monotonic_ns()
            values.append(v)
            n += 1
            acked[idx] = n      # this worker's slot only: no lock needed
            if window.value:
                lats.append((t1 - t0) // 1000)
    except Exception as e:  # reported by the parent; the case fails
        err = "client %d: %s: %s" % (idx, type(e).__name__, e)
    finally:
        try:
            if drv is not None:
                drv.close()
        except Exception as e:
            err = err or "client %d: close: %s" % (idx, e)
    results.put((idx, values, lats, err))


def counter_value(args):
    """the counter's value now, read by a fresh client"""
    if args.driver == "kazoo":
        zk = kazoo_client(args)
        try:
            return zk.Counter(args.path).value
        finally:
            zk.stop()
            zk.close()
    import psycopg2
    c = psycopg2.connect(host=args.pg_host, port=args.pg_port, user=args.pg_user, dbname=args.pg_db)
    try:
        c.autocommit = True
        cur = c.cursor()
        cur.execute("SELECT zk_counter_get(%s)", (args.name,))
        return cur.fetchone()[0]
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", choices=sorted(DRIVERS), required=True)
    ap.add_argument("--zk-port", type=int, required=True)
    ap.add_argument("--path", help="kazoo: the counter's node")
    ap.add_argument("--name", help="zklock: the counter's name")
    ap.add_argument("--pg-host")
    ap.add_argument("--pg-port", type=int, default=5432)
    ap.add_argument("--pg-user", default="postgres")
    ap.add_argument("--pg-db", default="postgres")
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--kazoo-delay", type=float, default=0.001,
                    help="kazoo: first sleep after a lost compare-and-set, seconds")
    ap.add_argument("--kazoo-max-delay", type=float, default=0.05,
                    help="kazoo: longest sleep after a lost compare-and-set, seconds")
    ap.add_argument("--setup-timeout", type=float, default=60.0)
    args = ap.parse_args()
    if args.driver == "kazoo" and not args.path:
        ap.error("--path is needed with --driver kazoo")
    if args.driver == "zklock":
        if not args.name or not args.pg_host:
            ap.error("--name and --pg-host are needed with --driver zklock")
        import psycopg2
        c = psycopg2.connect(host=args.pg_host, port=args.pg_port, user=args.pg_user, dbname=args.pg_db)
        c.autocommit = True
        c.cursor().execute("SELECT zk_counter_drop(%s)", (args.name,))
        c.close()

    initial = counter_value(args)

    ctx = mp.get_context("fork")
    phase = ctx.Value("i", WAIT)
    ready = ctx.Value("i", 0)
    window = ctx.Value("i", 0)
    acked = ctx.Array("q", args.clients, lock=False)
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(i, args, phase, ready, window, acked, results))
             for i in range(args.clients)]

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
                raise RuntimeError("clients not ready after setup (%d of %d)" % (ready.value, len(procs)))
            time.sleep(0.01)

        phase.value = RUN
        time.sleep(args.warmup)
        pk0 = mntr_packets(args.zk_port)
        a0 = sum(acked)
        t0 = time.monotonic()
        window.value = 1
        time.sleep(args.seconds)
        window.value = 0
        a1 = sum(acked)
        t1 = time.monotonic()
        pk1 = mntr_packets(args.zk_port)
        phase.value = STOP

        deadline = time.monotonic() + 60
        while len(got) < len(procs) and time.monotonic() < deadline:
            try:
                idx, values, lats, err = results.get(timeout=0.5)
            except pyqueue.Empty:
                continue
            got[idx] = values
            lat_all.extend(lats)
            if err:
                errors.append(err)
        for p in procs:
            p.join(timeout=10)
        if len(got) < len(procs):
            errors.append("%d client(s) did not report" % (len(procs) - len(got)))
    finally:
        phase.value = STOP
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)

    # every client's session is closed: what the counter holds now
    final = counter_value(args)
    values = [v for vs in got.values() for v in vs]
    acked_total = len(values)
    duplicates = acked_total - len(set(values))
    out_of_range = sum(1 for v in values if v is None or not (initial < v <= final))
    lost = (initial + acked_total) - final   # > 0: lost adds, < 0: adds applied twice
    bad = lost != 0 or duplicates or out_of_range or errors
    incs = a1 - a0
    elapsed = t1 - t0
    pk = pk1 - pk0 - 1
    lat_all.sort()
    print("driver=%s clients=%d seconds=%.3f incs=%d incs_per_sec=%.1f zk_packets=%d packets_per_inc=%s "
          "acked_total=%d failed_total=0 initial=%d final=%d lost=%d duplicates=%d out_of_range=%d errors=%d "
          "verify=%s lat_p50_us=%d lat_p99_us=%d lat_max_us=%d"
          % (args.driver, args.clients, elapsed, incs, incs / elapsed, pk,
             ("%.2f" % (pk / incs)) if incs else "-", acked_total, initial, final, lost, duplicates,
             out_of_range, len(errors), "FAILED" if bad else "ok",
             pct(lat_all, 0.50), pct(lat_all, 0.99), lat_all[-1] if lat_all else 0))
    for e in errors[:10]:
        print("error: " + e, file=sys.stderr)
    sys.stdout.flush()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
