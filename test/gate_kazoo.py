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

import sys

from kazoo_driver import answer, per_path, serve, yes


def setup(zk, argv):
    barrier = per_path(zk.Barrier)

    def create(a):
        barrier(a[0]).create()
        answer("ok")

    return {
        "create": create,
        "remove": lambda a: answer("removed " + yes(barrier(a[0]).remove())),
        "wait": lambda a: answer("cleared" if barrier(a[0]).wait(float(a[1])) else "timeout"),
    }, None


if __name__ == "__main__":
    sys.exit(serve(__doc__, (1,), setup))
