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
import logging
import sys
from urllib.parse import unquote

logging.basicConfig(level=logging.CRITICAL)
logging.getLogger("kazoo").setLevel(logging.CRITICAL)

from kazoo.client import KazooClient  # noqa: E402


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    zk = KazooClient(hosts=sys.argv[1], timeout=10.0)
    zk.start(timeout=10)
    held = None

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
            elif verb == "lease":
                lease = zk.NonBlockingLease(
                    args[0], datetime.timedelta(seconds=float(args[1])),
                    identifier=unquote(args[2]))
                answer("true" if lease else "false")
            elif verb == "lock":
                held = zk.Lock(args[0], "kazoo-test")
                held.acquire(timeout=30)
                answer("locked")
            elif verb == "unlock":
                held.release()
                held = None
                answer("unlocked")
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
