#!/usr/bin/python3
"""lease_kazoo.py - kazoo's NonBlockingLease (zklock's zk_try_lease) driven
line by line, for zklock's TAP tests.

usage: test/lease_kazoo.py HOSTS

Prints "ready" once connected, then reads commands on stdin, one per line,
and answers each with one line (the line protocol of ZkLockTest::Kazoo):

  lease PATH SECONDS IDENT   NonBlockingLease(PATH, SECONDS, IDENT) ->
                             "true" | "false" (IDENT is given %-encoded:
                             %20 for a space, %C3%9C for U+00DC ...)
  lock PATH                  takes kazoo's Lock(PATH) (the lease's guard)
                             -> "locked"
  unlock                     releases it -> "unlocked"
  quit                       -> "bye"

Any failure answers "error <exception>".
"""

import datetime
import sys
from urllib.parse import unquote

from kazoo_driver import answer, serve, yes


def setup(zk, argv):
    held = []

    def lease(a):
        got = zk.NonBlockingLease(a[0], datetime.timedelta(seconds=float(a[1])),
                                  identifier=unquote(a[2]))
        answer(yes(got))

    def lock(a):
        lk = zk.Lock(a[0], "kazoo-test")
        lk.acquire(timeout=30)
        held.append(lk)
        answer("locked")

    def unlock(a):
        held.pop().release()
        answer("unlocked")

    return {"lease": lease, "lock": lock, "unlock": unlock}, None


if __name__ == "__main__":
    sys.exit(serve(__doc__, (1,), setup))
