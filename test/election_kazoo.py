#!/usr/bin/python3
"""election_kazoo.py - a candidate of kazoo's Election recipe (zklock's
zklock.elections), driven line by line, for zklock's TAP tests.

usage: test/election_kazoo.py HOSTS PATH IDENTIFIER

Prints "ready" once connected, then reads commands on stdin (the line
protocol of ZkLockTest::Kazoo):

  run       stands: Election.run() in a thread -> "standing"; later, once
            elected, a line "leading" (unprompted)
  resign    leaves the leadership (the elected function returns) or the
            candidacy (Election.cancel()) -> "resigned"
  quit      -> "bye"
"""

import sys
import threading

from kazoo_driver import answer, serve


def setup(zk, argv):
    election = zk.Election(argv[2], argv[3])
    done = threading.Event()
    thread = []

    def lead():
        answer("leading")
        done.wait()

    def run(a):
        done.clear()
        t = threading.Thread(target=election.run, args=(lead,), daemon=True)
        t.start()
        thread[:] = [t]
        answer("standing")

    def resign(a):
        done.set()
        election.cancel()
        for t in thread:
            t.join(10)
        answer("resigned")

    return {"run": run, "resign": resign}, done.set


if __name__ == "__main__":
    sys.exit(serve(__doc__, (3,), setup))
