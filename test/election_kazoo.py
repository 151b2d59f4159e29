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

import logging
import sys
import threading

logging.basicConfig(level=logging.CRITICAL)
logging.getLogger("kazoo").setLevel(logging.CRITICAL)

from kazoo.client import KazooClient  # noqa: E402

out_lock = threading.Lock()


def answer(line):
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    zk = KazooClient(hosts=sys.argv[1], timeout=10.0)
    zk.start(timeout=10)
    election = zk.Election(sys.argv[2], sys.argv[3])
    done = threading.Event()
    thread = None

    def lead():
        answer("leading")
        done.wait()

    answer("ready")
    for line in sys.stdin:
        verb = line.strip()
        if not verb:
            continue
        if verb == "quit":
            break
        elif verb == "run":
            done.clear()
            thread = threading.Thread(target=election.run, args=(lead,), daemon=True)
            thread.start()
            answer("standing")
        elif verb == "resign":
            done.set()
            election.cancel()
            if thread is not None:
                thread.join(10)
            answer("resigned")
        else:
            answer("error unknown command %s" % verb)
    done.set()
    zk.stop()
    zk.close()
    answer("bye")
    return 0


if __name__ == "__main__":
    sys.exit(main())
