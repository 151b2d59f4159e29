#!/usr/bin/python3
"""zkq.py - query a ZooKeeper through kazoo, for zklock's tests.

usage: test/zkq.py HOSTS VERB [ARGS...]

  ls PATH                 children of PATH, sorted, one per line (nothing if PATH is missing)
  count PATH              number of descendants of PATH, recursive, PATH excluded (0 if missing)
  sizes PATH              "NODES BYTES": PATH and its descendants, and their data bytes, as
                            ZooKeeper's quota stats count them (0 0 if missing)
  tree PATH               PATH and its descendants, one per line:
                            path ephemeralOwner(hex, 0x0 if persistent) czxid(hex)
  get PATH                data of PATH (exit 1 if missing)
  hex PATH                data of PATH in hexadecimal, one line (exit 1 if missing)
  exists PATH             exit 0 if PATH exists, else 1
  create PATH [DATA]      persistent node, parents created as needed
  delete PATH             delete PATH and all its descendants (no error if missing)
  wait-count PATH N SECS  poll until count PATH == N; exit 1 on timeout, printing the last count
  fill PATH N FMT [DATALEN [BATCH]]
                          N children of PATH (made as needed) named FMT % i (i from 0),
                            DATALEN bytes "x" each (default 0), sent BATCH (default
                            2000) at a time; prints how many children PATH has then

HOSTS is a kazoo/ZooKeeper connect string such as 127.0.0.1:2181.  With
ZKLOCK_ZK_AUTH=user:password in the environment the client authenticates
(digest), as the clusters of the fault run do: zklock's nodes are private
to their identity by default.
Exit status 2 on usage or connection errors.
"""

import logging
import os
import sys
import time

logging.basicConfig(level=logging.CRITICAL)
logging.getLogger("kazoo").setLevel(logging.CRITICAL)

try:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError, NodeExistsError, NotEmptyError
    from kazoo.handlers.threading import KazooTimeoutError
except ImportError as e:  # pragma: no cover
    sys.stderr.write("zkq.py: kazoo is missing (apt-get install python3-kazoo): %s\n" % e)
    sys.exit(2)

CONNECT_TIMEOUT = 5.0


def usage(msg=None):
    if msg:
        sys.stderr.write("zkq.py: %s\n" % msg)
    sys.stderr.write(__doc__.split("\n\n", 1)[1])
    sys.exit(2)


def norm(path):
    if not path.startswith("/"):
        usage("path must start with /: %r" % path)
    if len(path) > 1:
        path = path.rstrip("/")
    return path


def join(parent, child):
    return (parent if parent != "/" else "") + "/" + child


def children(zk, path):
    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def walk(zk, path):
    """yield the descendants of path, depth first, in sorted order"""
    for c in children(zk, path):
        p = join(path, c)
        yield p
        for d in walk(zk, p):
            yield d


def count(zk, path):
    return sum(1 for _ in walk(zk, path))


def delete_tree(zk, path):
    for _ in range(10):
        for c in children(zk, path):
            delete_tree(zk, join(path, c))
        try:
            zk.delete(path)
            return
        except NoNodeError:
            return
        except NotEmptyError:
            continue  # somebody created a child meanwhile; retry


def create_many(zk, nodes, batch=2000, **kw):
    """Create the nodes, (path, data) pairs, asynchronously (kw for
    create_async), with at most batch of them in flight; an error raises."""
    pending = []
    for path, data in nodes:
        pending.append(zk.create_async(path, data, **kw))
        if len(pending) >= batch:
            for r in pending:
                r.get()
            pending = []
    for r in pending:
        r.get()


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        usage()
    hosts, verb, args = argv[1], argv[2], argv[3:]
    nargs = {
        "ls": (1, 1), "count": (1, 1), "tree": (1, 1), "get": (1, 1), "hex": (1, 1),
        "exists": (1, 1), "create": (1, 2), "delete": (1, 1), "wait-count": (3, 3),
        "count-kept": (1, 1), "sizes": (1, 1), "fill": (3, 5),
    }
    if verb not in nargs:
        usage("unknown verb %r" % verb)
    lo, hi = nargs[verb]
    if not lo <= len(args) <= hi:
        usage("wrong number of arguments for %s" % verb)
    path = norm(args[0])

    auth = os.environ.get("ZKLOCK_ZK_AUTH")
    # fill: a long run of writes, a longer session
    zk = KazooClient(hosts=hosts, timeout=20.0 if verb == "fill" else 10.0, connection_retry={"max_tries": 3, "delay": 0.2},
                     command_retry={"max_tries": 3, "delay": 0.2},
                     auth_data=[("digest", auth)] if auth else None)
    try:
        zk.start(timeout=CONNECT_TIMEOUT)
    except KazooTimeoutError:
        sys.stderr.write("zkq.py: cannot connect to %s within %gs\n" % (hosts, CONNECT_TIMEOUT))
        try:
            zk.stop()
        finally:
            return 2
    try:
        if verb == "ls":
            for c in children(zk, path):
                print(c)
        elif verb == "count":
            print(count(zk, path))
        elif verb == "count-kept":
            # children of a txns node: "<not kept> <kept>" (a kept published
            # transaction node has the child "kept": src/queue/queue_publish.c)
            kept = 0
            kids = children(zk, path)
            for c in kids:
                if zk.exists(path + "/" + c + "/kept") is not None:
                    kept += 1
            print("%d %d" % (len(kids) - kept, kept))
        elif verb == "sizes":
            st = zk.exists(path)
            n, b = 0, 0
            if st is not None:
                n, b = 1, st.dataLength
                for p in walk(zk, path):
                    st = zk.exists(p)
                    if st is not None:
                        n += 1
                        b += st.dataLength
            print("%d %d" % (n, b))
        elif verb == "tree":
            st = zk.exists(path)
            if st is not None:
                print("%s %s %s" % (path, hex(st.ephemeralOwner), hex(st.czxid)))
                for p in walk(zk, path):
                    st = zk.exists(p)
                    if st is not None:
                        print("%s %s %s" % (p, hex(st.ephemeralOwner), hex(st.czxid)))
        elif verb in ("get", "hex"):
            try:
                data, _ = zk.get(path)
            except NoNodeError:
                sys.stderr.write("zkq.py: %s does not exist\n" % path)
                return 1
            if verb == "hex":
                sys.stdout.write((data or b"").hex() + "\n")
            elif data:
                sys.stdout.write(data.decode("utf-8", "replace"))
                if not data.endswith(b"\n"):
                    sys.stdout.write("\n")
        elif verb == "exists":
            return 0 if zk.exists(path) is not None else 1
        elif verb == "create":
            data = args[1].encode() if len(args) > 1 else b""
            try:
                zk.create(path, data, makepath=True)
            except NodeExistsError:
                zk.set(path, data)
        elif verb == "delete":
            delete_tree(zk, path)
        elif verb == "fill":
            try:
                n, fmt = int(args[1]), args[2]
                data = b"x" * int(args[3]) if len(args) > 3 else b""
                batch = int(args[4]) if len(args) > 4 else 2000
            except ValueError:
                usage("fill PATH N FMT [DATALEN [BATCH]]")
            zk.ensure_path(path)
            create_many(zk, ((join(path, fmt % i), data) for i in range(n)), batch)
            print(zk.exists(path).numChildren)
        elif verb == "wait-count":
            try:
                want, secs = int(args[1]), float(args[2])
            except ValueError:
                usage("wait-count PATH N SECONDS")
            deadline = time.monotonic() + secs
            while True:
                n = count(zk, path)
                if n == want:
                    print(n)
                    return 0
                if time.monotonic() >= deadline:
                    sys.stderr.write("zkq.py: %s has %d descendants, not %d, after %gs\n"
                                     % (path, n, want, secs))
                    print(n)
                    return 1
                time.sleep(0.1)
        return 0
    finally:
        try:
            zk.stop()
            zk.close()
        except Exception:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
