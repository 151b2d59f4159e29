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

import logging
import sys

logging.basicConfig(level=logging.CRITICAL)
logging.getLogger("kazoo").setLevel(logging.CRITICAL)

from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import LockTimeout  # noqa: E402


def main():
    if len(sys.argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    zk = KazooClient(hosts=sys.argv[1], timeout=10.0)
    zk.start(timeout=10)
    sem = zk.Semaphore(sys.argv[2], identifier=sys.argv[4], max_leases=int(sys.argv[3]))

    def answer(line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    answer("ready")
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        try:
            if parts[0] == "quit":
                break
            elif parts[0] == "acquire":
                try:
                    ok = sem.acquire(timeout=float(parts[1]))
                    answer("acquired" if ok else "timeout")
                except LockTimeout:
                    answer("timeout")
            elif parts[0] == "try":
                answer("acquired" if sem.acquire(blocking=False) else "busy")
            elif parts[0] == "release":
                answer("released %s" % ("true" if sem.release() else "false"))
            else:
                answer("error unknown command %s" % parts[0])
        except Exception as e:
            answer("error %s %s" % (type(e).__name__, e))
    zk.stop()
    zk.close()
    answer("bye")
    return 0


if __name__ == "__main__":
    sys.exit(main())
