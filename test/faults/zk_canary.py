#!/usr/bin/python3
"""zk_canary.py - does the ZooKeeper ensemble of a fault run keep what it acknowledged?

usage: test/faults/zk_canary.py write HOSTS FILE [--every SECONDS]
       test/faults/zk_canary.py check HOSTS FILE

zklock's exactly-once promises rest on ZooKeeper keeping every write it has
acknowledged.  ZooKeeper 3.8.0 (Debian 12's) has known bugs that lose
committed transactions when a server is killed during the synchronisation
after a leader election (ZOOKEEPER-4643, -4646, -4685, -4785, fixed in 3.9).
The fault run kills servers, so an item lost there may be ZooKeeper's loss,
not zklock's.  This canary tells them apart: beside the clients, it writes
a node of its own every --every seconds (default 0.02) through kazoo, to
whichever server kazoo is connected to, and appends the path of every
create ZooKeeper acknowledged to FILE (a create whose answer was lost counts
for nothing).  "check" then reads every acknowledged path back, from each
server on its own, and prints one line, CANARY {json}: acknowledged;
missing (on a majority of the servers: a write ZooKeeper acknowledged and
lost), with the first such paths and when they were acknowledged; and
diverged (per server, acknowledged paths that server lacks while the
others have them: a replica that went its own way and serves its clients
a past the quorum does not have).

Paths are /zkcanary/b-<bucket>/w-<n> with n counting up (1,000 per bucket,
so no listing outgrows a packet); names are never reused, so a lost node
cannot be hidden by a later write that got its name.  "write" runs until
SIGTERM or SIGINT.
"""

import contextlib
import json
import signal
import sys
import time

ROOT = "/zkcanary"
PER_BUCKET = 1000


def path_of(n):
    return "%s/b-%06d/w-%09d" % (ROOT, n // PER_BUCKET, n)


def client(hosts):
    from kazoo.client import KazooClient
    from kazoo.retry import KazooRetry
    zk = KazooClient(hosts=hosts, timeout=10.0,
                     connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0))
    zk.start(timeout=60)
    return zk


def write(hosts, out, every):
    from kazoo.exceptions import KazooException, NodeExistsError
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    zk = client(hosts)
    n = 0
    made = set()
    with open(out, "a", buffering=1) as f:
        while not stop:
            t0 = time.monotonic()
            path = path_of(n)
            bucket = path.rsplit("/", 1)[0]
            try:
                if bucket not in made:
                    zk.ensure_path(bucket)
                    made.add(bucket)
                zk.create(path, b"")
                f.write("%s %.3f\n" % (path, time.time()))
                n += 1
            except NodeExistsError:
                # an earlier try of this create landed though its answer was
                # lost: it was never acknowledged, so it is not counted
                n += 1
            except KazooException:
                # no answer: not acknowledged; the next create gets a new name
                n += 1
                time.sleep(0.05)
            except Exception:
                n += 1
                time.sleep(0.05)
            left = every - (time.monotonic() - t0)
            if left > 0:
                time.sleep(left)
    with contextlib.suppress(Exception):
        zk.stop()
        zk.close()
    return 0


def present_on(host, buckets):
    """The canary's nodes one server holds (after a sync), or None if it
    cannot be read."""
    try:
        zk = client(host)
    except Exception:
        return None
    present = set()
    try:
        zk.sync(ROOT)
        for b in buckets:
            try:
                present.update("%s/%s" % (b, k) for k in zk.get_children(b))
            except Exception:
                pass
    finally:
        with contextlib.suppress(Exception):
            zk.stop()
            zk.close()
    return present


def check(hosts, acked_file):
    acked = []
    with open(acked_file) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                acked.append((parts[0], float(parts[1])))
    buckets = sorted({p.rsplit("/", 1)[0] for p, _ in acked})
    # every server on its own: a replica can diverge from the others (it
    # then serves its clients a past that the quorum does not have)
    views = {h: present_on(h, buckets) for h in hosts.split(",")}
    read = [v for v in views.values() if v is not None]
    # lost: missing on a majority of the servers read (the quorum's view)
    missing = [(p, t) for p, t in acked
               if read and sum(1 for v in read if p not in v) * 2 > len(read)]
    lost = {p for p, _ in missing}
    diverged = {h: sum(1 for p, _ in acked if p not in v and p not in lost)
                for h, v in views.items() if v is not None}
    report = {
        "acknowledged": len(acked),
        "servers_read": len(read),
        "servers": len(views),
        "missing": len(missing),
        "first_missing": [{"path": p, "acked_at": t} for p, t in missing[:10]],
        "missing_from": missing[0][1] if missing else None,
        "missing_to": missing[-1][1] if missing else None,
        "diverged": {h: n for h, n in diverged.items() if n},
        "diverged_paths": {h: [{"path": p, "acked_at": t} for p, t in acked
                               if p not in views[h] and p not in lost][:10]
                           for h, n in diverged.items() if n},
    }
    print("CANARY " + json.dumps(report, sort_keys=True))
    return 0


def main(argv):
    if len(argv) >= 4 and argv[1] == "write":
        every = 0.02
        if len(argv) == 6 and argv[4] == "--every":
            every = float(argv[5])
        return write(argv[2], argv[3], every)
    if len(argv) == 4 and argv[1] == "check":
        return check(argv[2], argv[3])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
