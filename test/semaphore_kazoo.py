#!/usr/bin/python3
"""semaphore_kazoo.py - one holder of kazoo's Semaphore (zklock's
zk_semaphore), driven line by line, for zklock's TAP tests.

usage: test/semaphore_kazoo.py HOSTS PATH MAX_LEASES IDENTIFIER

Prints "ready" once connected, then reads commands on stdin (the line
protocol of ZkLockTest::Kazoo):

  acquire SECONDS   Semaphore.acquire(timeout=SECONDS) -> "acquired" |
                    "timeout" | "error <exception>" (a different lease count
                    in ZooKeeper is "error ValueError ...")
  try               Semaphore.acquire(blocking=False) -> "acquired" | "busy"
  release           Semaphore.release() -> "released true" | "released false"
  quit              -> "bye"
"""

import sys

from kazoo.exceptions import LockTimeout

from kazoo_driver import answer, serve, yes


def setup(zk, argv):
    sem = zk.Semaphore(argv[2], identifier=argv[4], max_leases=int(argv[3]))

    def acquire(a):
        try:
            answer("acquired" if sem.acquire(timeout=float(a[0])) else "timeout")
        except LockTimeout:
            answer("timeout")

    return {
        "acquire": acquire,
        "try": lambda a: answer("acquired" if sem.acquire(blocking=False) else "busy"),
        "release": lambda a: answer("released " + yes(sem.release())),
    }, None


if __name__ == "__main__":
    sys.exit(serve(__doc__, (4,), setup))
