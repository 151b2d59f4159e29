#!/usr/bin/python3
"""barrier_kazoo.py - one member of kazoo's DoubleBarrier recipe (zklock's
double barrier), driven line by line, for zklock's TAP tests.

usage: test/barrier_kazoo.py HOSTS PATH PARTIES

Prints "ready" once connected, then reads commands on stdin, one per line
(the line protocol of ZkLockTest::Kazoo: send, read_line, cmd, quit):

  node          -> "node NAME": this member's node name under PATH
  enter         DoubleBarrier.enter(), blocking this client: first
                "entering", then "entered" once the barrier opened
  leave         DoubleBarrier.leave(), blocking: first "leaving", then
                "left" once every member has left
  quit          -> "bye"

Any failure answers "error <exception>".
"""

import logging
import sys

logging.basicConfig(level=logging.CRITICAL)
logging.getLogger("kazoo").setLevel(logging.CRITICAL)

from kazoo.client import KazooClient  # noqa: E402


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    zk = KazooClient(hosts=sys.argv[1], timeout=10.0)
    zk.start(timeout=10)
    barrier = zk.DoubleBarrier(sys.argv[2], int(sys.argv[3]))

    def answer(line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    answer("ready")
    for line in sys.stdin:
        verb = line.strip()
        if not verb:
            continue
        try:
            if verb == "quit":
                break
            elif verb == "node":
                answer("node " + barrier.node_name)
            elif verb == "enter":
                answer("entering")
                barrier.enter()
                answer("entered" if barrier.participating else "error not participating")
            elif verb == "leave":
                answer("leaving")
                barrier.leave()
                answer("left")
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
