#!/usr/bin/python3
"""node_copy.py - save a ZooKeeper node's bytes and create a node with them,
as a client that copies zklock's nodes would (tests 336 and 526).

usage: test/node_copy.py HOSTS save PATH          prints the data, base64
       test/node_copy.py HOSTS magic PATH         prints its first 4 bytes as a
                                                  little-endian tag ("ZKQK")
       test/node_copy.py HOSTS restore PATH B64   creates PATH (and its parents)
                                                  with the data; prints "created",
                                                  or "exists" when PATH is there
"""
import base64
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError


def main(argv):
    if len(argv) < 4 or argv[2] not in ("save", "magic", "restore"):
        sys.stderr.write(__doc__)
        return 2
    zk = KazooClient(hosts=argv[1])
    zk.start(timeout=15)
    try:
        if argv[2] == "save":
            data, _ = zk.get(argv[3])
            print(base64.b64encode(data).decode())
        elif argv[2] == "magic":
            data, _ = zk.get(argv[3])
            print(data[:4][::-1].decode("latin-1"))
        else:
            try:
                zk.create(argv[3], base64.b64decode(argv[4]), makepath=True)
                print("created")
            except NodeExistsError:
                print("exists")
    finally:
        zk.stop()
        zk.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
