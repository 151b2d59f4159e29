#!/usr/bin/python3
"""bench/scale_herd.py - many waiters on one zklock lock, counted (bench/scale.sh).

One zklock session takes the lock NAME and keeps it; then WAITERS contenders
queue behind it: ZKLOCK of them are zklock sessions (psql, each
`BEGIN; SELECT zk_lock(NAME); COMMIT`), the rest are contenders that follow
kazoo's Lock recipe by hand on one kazoo client (an ephemeral sequential
`<uuid>__lock__` node under zklock's parent of NAME, a watch on the
immediate predecessor only, a listing after each wake, delete once lowest).
Half of the kazoo contenders queue before the zklock sessions and half
after, so zklock's waiters sit between foreign ones.

Once every waiter is queued, the holder commits and the chain drains: every
release must wake exactly one waiter.  Printed (one line, key=value): the
releases, the watches ZooKeeper held before the drain (wchs: watches and
distinct paths), the watch notifications the kazoo contenders received and
the listings they sent during the drain, zklock's watch_events and
ZooKeeper's packets during the drain, and their ratios per release.
"""
import argparse
import subprocess
import sys
import threading
import time
import uuid
import queue as pyqueue

from kazoo.client import KazooClient
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import four_letter  # noqa: E402


def mntr(host, port):
    d = {}
    for line in four_letter(host, port, "mntr").splitlines():
        p = line.split("\t")
        if len(p) == 2:
            d[p[0]] = p[1]
    return d


def wchs(host, port):
    """(watches, paths) from 'wchs'"""
    out = four_letter(host, port, "wchs")
    watches = paths = -1
    for line in out.splitlines():
        if "watching" in line:
            # "N connections watching M paths"
            w = line.split()
            paths = int(w[3])
        if line.startswith("Total watches:"):
            watches = int(line.split(":")[1])
    return watches, paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zk", required=True, help="host:port")
    ap.add_argument("--name", default="herd")
    ap.add_argument("--waiters", type=int, required=True)
    ap.add_argument("--zklock", type=int, required=True, help="how many of them are zklock sessions")
    ap.add_argument("--psql", required=True, help="psql command line (shell words)")
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    host, port = a.zk.rsplit(":", 1)
    port = int(port)
    psql = a.psql.split()

    def sql(q):
        return subprocess.run(psql + ["-c", q], check=True, capture_output=True,
                              text=True).stdout.strip()

    # the holder
    holder = subprocess.Popen(psql, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    holder.stdin.write("BEGIN;\nSELECT zk_lock('%s');\n" % a.name)
    holder.stdin.flush()
    deadline = time.time() + 60
    while sql("SELECT count(*) FROM zk_locks WHERE name = '%s' AND state = 'held'" % a.name) != "1":
        if time.time() > deadline:
            sys.exit("scale_herd: the holder did not get the lock")
        time.sleep(0.05)

    # the lock's parent node, as zklock names it
    node = sql("SELECT node FROM zk_locks WHERE name = '%s' AND state = 'held'" % a.name)
    path = node.rsplit("/", 1)[0]
    zk = KazooClient(hosts=a.zk, timeout=30)
    zk.start()
    nkazoo = a.waiters - a.zklock
    mine = []           # our node names, in creation order

    def create(n):
        for _ in range(n):
            p = zk.create(path + "/" + uuid.uuid4().hex + "__lock__", b"",
                          ephemeral=True, sequence=True)
            mine.append(p.rsplit("/", 1)[1])

    create(nkazoo // 2)
    sessions = []
    for _ in range(a.zklock):
        s = subprocess.Popen(psql, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        s.stdin.write("BEGIN;\nSELECT zk_lock('%s');\nCOMMIT;\n" % a.name)
        s.stdin.close()
        sessions.append(s)
    while int(sql("SELECT count(*) FROM zk_locks WHERE name = '%s' AND state = 'waiting' AND node IS NOT NULL"
                  % a.name)) < a.zklock:
        if time.time() > deadline + 120:
            sys.exit("scale_herd: the zklock waiters did not queue")
        time.sleep(0.05)
    create(nkazoo - nkazoo // 2)

    work = pyqueue.Queue()
    count_lock = threading.Lock()
    counts = {"wakes": 0, "listings": 0, "acquired": 0}
    done_mine = set()

    def wake(node):
        def fn(event):
            with count_lock:
                counts["wakes"] += 1
            work.put(node)
        return fn

    def step(node):
        """kazoo's recipe for our node: lowest holds; else watch the predecessor"""
        kids = zk.get_children(path)
        with count_lock:
            counts["listings"] += 1
        kids = sorted((k for k in kids if "__lock__" in k), key=lambda k: int(k[-10:]))
        names = [k for k in kids]
        if node not in names:
            return
        i = names.index(node)
        if i == 0:
            zk.delete(path + "/" + node)
            with count_lock:
                counts["acquired"] += 1
            done_mine.add(node)
            return
        if zk.exists(path + "/" + names[i - 1], watch=wake(node)) is None:
            work.put(node)

    # every waiter queued: set the watches (not counted), then drain
    for node in mine:
        step(node)
    time.sleep(0.5)
    with count_lock:
        counts = {"wakes": 0, "listings": 0, "acquired": 0}
    nkids = len(zk.get_children(path))
    watches, paths = wchs(host, port)
    m0 = mntr(host, port)
    z0 = int(sql("SELECT watch_events FROM zk_status()"))
    t0 = time.time()
    holder.stdin.write("COMMIT;\n")
    holder.stdin.close()
    while len(done_mine) < nkazoo:
        try:
            node = work.get(timeout=max(0.1, a.timeout - (time.time() - t0)))
        except pyqueue.Empty:
            sys.exit("scale_herd: the drain stalled (%d of %d kazoo waiters done)"
                     % (len(done_mine), nkazoo))
        step(node)
    for s in sessions:
        s.wait(timeout=max(1, a.timeout - (time.time() - t0)))
    holder.wait(timeout=30)
    t1 = time.time()
    m1 = mntr(host, port)
    z1 = int(sql("SELECT watch_events FROM zk_status()"))
    zk.stop()
    releases = a.waiters + 1
    pk = int(m1["zk_packets_received"]) - int(m0["zk_packets_received"]) - 1
    zw = z1 - z0
    print("waiters=%d zklock=%d kazoo=%d children=%d releases=%d "
          "zk_watches=%d zk_watched_paths=%d kazoo_wakes=%d kazoo_listings=%d "
          "zklock_watch_events=%d wakes_per_release=%.3f zk_packets=%d packets_per_release=%.2f "
          "drain_s=%.3f ms_per_release=%.3f"
          % (a.waiters, a.zklock, nkazoo, nkids, releases, watches, paths,
             counts["wakes"], counts["listings"], zw,
             (counts["wakes"] + zw) / float(releases - 1), pk, pk / float(releases),
             t1 - t0, (t1 - t0) * 1000.0 / releases))


if __name__ == "__main__":
    main()
