#!/usr/bin/python3
"""queue_kazoo.py - kazoo's LockingQueue driven line by line, for zklock's TAP tests.

usage: test/queue_kazoo.py HOSTS

Prints "ready" once connected, then reads commands on stdin, one per line,
and answers each with one line.  Payloads travel in hex ("-" is empty).
One LockingQueue object per PATH, kept between commands (kazoo's get returns
the element it holds until it is consumed or released).

  put PATH PRIORITY HEX           put(bytes, priority) -> "ok"
  putall PATH PRIORITY HEX,HEX..  put_all(list, priority), one transaction -> "ok"
  get PATH SECONDS                get(timeout) -> "item HEX" | "none"
  consume PATH                    consume() -> "true" | "false"
  release PATH                    release() -> "true" | "false"
  holds PATH                      holds_lock() -> "true" | "false"
  node PATH                       entry name of the element held -> "node NAME" | "none"
  id PATH                         the queue object's id, the data of its claims -> "id HEX"
  len PATH                        len(queue): entries, claimed or not -> "len N"
  drain PATH SECONDS              get + consume until a get finds nothing within SECONDS
                                  -> "drained HEX,HEX,..." (in the order consumed)
  quit                            -> "bye"

Any failure answers "error <exception>".
"""

import binascii
import sys

from kazoo_driver import answer, per_path, serve, yes


def unhex(s):
    return b"" if s == "-" else binascii.unhexlify(s)


def tohex(b):
    return binascii.hexlify(b).decode() if b else "-"


def setup(zk, argv):
    queue = per_path(zk.LockingQueue)

    def put(a):
        queue(a[0]).put(unhex(a[2]), priority=int(a[1]))
        answer("ok")

    def putall(a):
        queue(a[0]).put_all([unhex(h) for h in a[2].split(",")], priority=int(a[1]))
        answer("ok")

    def get(a):
        v = queue(a[0]).get(timeout=float(a[1]))
        answer("none" if v is None else "item " + tohex(v))

    def node(a):
        pe = queue(a[0]).processing_element
        answer("node " + pe[0] if pe is not None else "none")

    def drain(a):
        q = queue(a[0])
        got = []
        while True:
            v = q.get(timeout=float(a[1]))
            if v is None:
                break
            if not q.consume():
                raise RuntimeError("lost the claim on %s" % tohex(v))
            got.append(tohex(v))
        answer("drained " + ",".join(got))

    return {
        "put": put,
        "putall": putall,
        "get": get,
        "consume": lambda a: answer(yes(queue(a[0]).consume())),
        "release": lambda a: answer(yes(queue(a[0]).release())),
        "holds": lambda a: answer(yes(queue(a[0]).holds_lock())),
        "node": node,
        "id": lambda a: answer("id " + tohex(queue(a[0]).id)),
        "len": lambda a: answer("len %d" % len(queue(a[0]))),
        "drain": drain,
    }, None


if __name__ == "__main__":
    sys.exit(serve(__doc__, (1,), setup))
