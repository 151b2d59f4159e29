#!/usr/bin/python3
"""gate_kazoo.py - kazoo's Barrier recipe (zklock's gate) driven line by line,
for zklock's TAP tests.

usage: test/gate_kazoo.py HOSTS

Prints "ready" once connected, then reads commands on stdin, one per line,
and answers each with one line (the line protocol of ZkLockTest::Kazoo, so
its send, read_line, cmd and quit drive it).  One client.Barrier(PATH)
object per PATH, kept between commands.

  create PATH           Barrier.create(): the gate is closed -> "ok"
  remove PATH           Barrier.remove(): the gate is open -> "removed true" |
                        "removed false" (it was open already)
  wait PATH SECONDS     Barrier.wait(SECONDS), blocking this client ->
                        "cleared" (the node is absent, or was deleted while
                        waiting) | "timeout"
  quit                  -> "bye"

Any failure answers "error <exception>".
"""

import logging
import sys

logging.basicConfig(level=logging.CRITICAL)
logging.getLogger("kazoo").setLevel(logging.CRITICAL)

from kazoo.client import KazooClient  # noqa: E402


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    zk = KazooClient(hosts=sys.argv[1], timeout=10.0)
    zk.start(timeout=10)
    barriers = {}

    def barrier(path):
        b = barriers.get(path)
        if b is None:
            b = barriers[path] = zk.Barrier(path)
        return b

    def answer(line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    answer("ready")
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        verb, args = parts[0], parts[1:]
        try:
            if verb == "quit":
                break
            b = barrier(args[0])
            if verb == "create":
                b.create()
                answer("ok")
            elif verb == "remove":
                answer("removed %s" % ("true" if b.remove() else "false"))
            elif verb == "wait":
                answer("cleared" if b.wait(float(args[1])) else "timeout")
            else:
                answer("error unknown command %s" % verb)
        except Exception as e:
            answer("error %s %s" % (type(e).__name__, e))
    zk.stop()
    zk.close()
    answer("bye")
    return 0


if __name__ == "__main__":
    sys.exit(main())
