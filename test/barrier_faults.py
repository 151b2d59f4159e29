#!/usr/bin/python3
"""barrier_faults.py - a kazoo client that answers questions about ZooKeeper's
content line by line, for test/t/420_barrier_faults.pl.

usage: test/barrier_faults.py HOSTS

One long-lived client, so that the test can poll ZooKeeper every few
milliseconds while faults come and go (kazoo reconnects by itself, with a
new session if the old one expired).  It never sets a watch, so it does not
change ZooKeeper's watch count.

Commands on stdin, one per line; each answers one line of JSON on stdout,
{"ok": true, ...} or {"ok": false, "error": "..."}:

  kids PATH     the children of PATH, sorted:
                  "kids": [{"name", "owner" (ephemeral owner, "0x.."),
                            "czxid", "data"}, ...]
                or "kids": null when PATH does not exist
  count PATH    "count": number of descendants of PATH (0 if missing)
  pending PATH  "count": children of PATH without a child "kept" (transaction
                nodes not published yet)
  exists PATH   "exists": true | false
  quit          "bye", then exit

Every read is bounded by 5 s: while ZooKeeper is down the answer is an
error, never a hang.
"""

import json
import logging
import sys

logging.basicConfig(level=logging.CRITICAL)
logging.getLogger("kazoo").setLevel(logging.CRITICAL)

from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import NoNodeError  # noqa: E402

WAIT = 5.0


def join(parent, child):
    return (parent if parent != "/" else "") + "/" + child


def kids(zk, path):
    try:
        names = zk.get_children_async(path).get(timeout=WAIT)
    except NoNodeError:
        return None
    out = []
    for n in sorted(names):
        try:
            data, st = zk.get_async(join(path, n)).get(timeout=WAIT)
        except NoNodeError:
            continue
        out.append({"name": n, "owner": "0x%x" % st.ephemeralOwner, "czxid": st.czxid,
                    "data": (data or b"").decode("utf-8", "replace")})
    return out


def count(zk, path):
    try:
        names = zk.get_children_async(path).get(timeout=WAIT)
    except NoNodeError:
        return 0
    return sum(1 + count(zk, join(path, n)) for n in names)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    zk = KazooClient(hosts=argv[1], timeout=10.0,
                     connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 0.5})
    zk.start(timeout=30)
    print(json.dumps({"ok": True, "ready": True}), flush=True)
    for line in sys.stdin:
        verb, _, path = line.strip().partition(" ")
        if not verb:
            continue
        try:
            if verb == "kids":
                res = {"ok": True, "kids": kids(zk, path)}
            elif verb == "count":
                res = {"ok": True, "count": count(zk, path)}
            elif verb == "pending":
                # transaction nodes not yet published: those without the
                # child "kept" (a published node kept against a late create)
                try:
                    names = zk.get_children_async(path).get(timeout=WAIT)
                except NoNodeError:
                    names = []
                n = sum(1 for c in names
                        if zk.exists_async(join(join(path, c), "kept")).get(timeout=WAIT) is None)
                res = {"ok": True, "count": n}
            elif verb == "exists":
                res = {"ok": True, "exists": zk.exists_async(path).get(timeout=WAIT) is not None}
            elif verb == "quit":
                print(json.dumps({"ok": True, "bye": True}), flush=True)
                break
            else:
                res = {"ok": False, "error": "unknown command %r" % verb}
        except Exception as e:  # the test decides what an error means
            res = {"ok": False, "error": "%s %s" % (type(e).__name__, e)}
        print(json.dumps(res), flush=True)
    try:
        zk.stop()
        zk.close()
    except Exception:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
