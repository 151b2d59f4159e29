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

import sys

from kazoo_driver import answer, serve


def setup(zk, argv):
    barrier = zk.DoubleBarrier(argv[2], int(argv[3]))

    def enter(a):
        answer("entering")
        barrier.enter()
        answer("entered" if barrier.participating else "error not participating")

    def leave(a):
        answer("leaving")
        barrier.leave()
        answer("left")

    return {
        "node": lambda a: answer("node " + barrier.node_name),
        "enter": enter,
        "leave": leave,
    }, None


if __name__ == "__main__":
    sys.exit(serve(__doc__, (3,), setup))
