#!/usr/bin/python3
"""kazoo_lock_bench.py - one lock benchmark case for bench/run.sh: N threads
share ONE KazooClient (one ZooKeeper session) and loop over kazoo's Lock:
acquire(), release().

  kazoo_lock_bench.py --zk-port P --root /bench-kazoo --clients 32 [--shared] \
                      --seconds 10 [--warmup 2]

Without --shared thread i locks ROOT/locks/bench-<i> (a name of its own);
with --shared every thread locks ROOT/locks/bench-shared.  Every acquisition
uses a new Lock object, as an application that makes zk.Lock(path) where it
needs one does: a Lock remembers that it made sure of its parent node and
never looks again, so a reused Lock whose parent is a container node (as
zklock's and Curator's are) fails with NoNodeError once ZooKeeper's reaper
removed the empty parent.  A new Lock costs kazoo one exists request per
cycle (ensure_path) besides create, get_children and delete.

Timeline: connect; --warmup seconds of cycles that are not counted; the
timed window of --seconds, framed by two mntr requests (zk_packets_received);
stop.  A cycle counts when it ends inside the window; its latency is the time
from calling acquire() until release() returned (release waits for the
delete's reply).

Prints one line:
  driver=kazoo clients=32 shared=0 cycles=... seconds=... cycles_per_sec=...
  zk_packets=... lat_p50_us=... lat_p99_us=... lat_max_us=... errors=0 cpu_ms=...
(cpu_ms: this process's CPU time over the window, every thread included)
Exit status 0 when no cycle failed.
"""

import argparse
import math
import signal
import socket
import sys
import threading
import time
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import mntr_packets  # noqa: E402

WARM, WINDOW, STOP = 0, 1, 2


def pct(sorted_v, q):
    if not sorted_v:
        return 0
    i = max(0, min(len(sorted_v) - 1, int(math.ceil(q * len(sorted_v))) - 1))
    return sorted_v[i]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zk-port", type=int, required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--shared", action="store_true")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    args = ap.parse_args()

    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))

    from kazoo.client import KazooClient
    from kazoo.recipe.lock import Lock

    zk = KazooClient(hosts="127.0.0.1:%d" % args.zk_port, timeout=30.0)
    zk.start(timeout=15)

    state = {"phase": WARM}
    cycles = [0] * args.clients
    lats = [[] for _ in range(args.clients)]
    errors = []

    def locker(i):
        path = "%s/locks/bench-%s" % (args.root, "shared" if args.shared else i)
        try:
            while state["phase"] != STOP:
                t0 = time.monotonic()
                lk = Lock(zk, path)
                if not lk.acquire(timeout=30):
                    raise RuntimeError("acquire(%s) not granted within 30 s" % path)
                lk.release()
                t1 = time.monotonic()
                if state["phase"] == WINDOW:
                    cycles[i] += 1
                    lats[i].append(int((t1 - t0) * 1e6))
        except Exception as e:  # reported below; the case fails
            errors.append("thread %d: %s: %s" % (i, type(e).__name__, e))

    threads = [threading.Thread(target=locker, args=(i,), daemon=True) for i in range(args.clients)]
    for t in threads:
        t.start()
    time.sleep(args.warmup)
    pk0 = mntr_packets(args.zk_port)
    c0 = time.process_time()
    t0 = time.monotonic()
    state["phase"] = WINDOW
    time.sleep(args.seconds)
    state["phase"] = STOP
    t1 = time.monotonic()
    c1 = time.process_time()
    pk1 = mntr_packets(args.zk_port)
    for t in threads:
        t.join(60)
    if any(t.is_alive() for t in threads):
        errors.append("%d thread(s) did not stop" % sum(t.is_alive() for t in threads))
    zk.stop()
    zk.close()

    total = sum(cycles)
    allv = sorted(v for lv in lats for v in lv)
    elapsed = t1 - t0
    print("driver=kazoo clients=%d shared=%d cycles=%d seconds=%.3f cycles_per_sec=%.1f zk_packets=%d "
          "lat_p50_us=%d lat_p99_us=%d lat_max_us=%d errors=%d cpu_ms=%d"
          % (args.clients, 1 if args.shared else 0, total, elapsed, total / elapsed, pk1 - pk0 - 1,
             pct(allv, 0.50), pct(allv, 0.99), allv[-1] if allv else 0, len(errors),
             (c1 - c0) * 1000))
    for e in errors[:10]:
        print("error: " + e, file=sys.stderr)
    sys.stdout.flush()
    return 0 if not errors and total > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
