#!/usr/bin/python3
"""holders_kazoo.py - a foreign client of a lock's contenders, for
test/t/190_lock_holders_data.pl: one kazoo session whose ephemeral nodes
live until it quits.

usage: test/holders_kazoo.py HOSTS

Prints "ready" once connected, then reads commands on stdin, one per line,
and answers each with one line (the line protocol of ZkLockTest::Kazoo):

  create PARENT HEXDATA [HEXDATA...]  one contender per HEXDATA ("-" for no
                                      data), ephemeral and sequential, named
                                      like a lock's -> "created NAME..."
  quit                                -> "bye"
"""

import binascii
import sys
import uuid

from kazoo_driver import answer, serve


def setup(zk, argv):
    def create(a):
        names = []
        for h in a[1:]:
            data = b"" if h == "-" else binascii.unhexlify(h)
            p = zk.create(a[0] + "/" + uuid.uuid4().hex + "__lock__", data,
                          ephemeral=True, sequence=True, makepath=True)
            names.append(p.rsplit("/", 1)[1])
        answer("created " + " ".join(names))

    return {"create": create}, None


if __name__ == "__main__":
    sys.exit(serve(__doc__, (1,), setup))
