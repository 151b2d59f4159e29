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
import logging
import sys

logging.basicConfig(level=logging.CRITICAL)

from kazoo.client import KazooClient  # noqa: E402


def unhex(s):
    return b"" if s == "-" else binascii.unhexlify(s)


def tohex(b):
    return binascii.hexlify(b).decode() if b else "-"


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    zk = KazooClient(hosts=sys.argv[1], timeout=10.0)
    zk.start(timeout=10)
    queues = {}

    def queue(path):
        q = queues.get(path)
        if q is None:
            q = queues[path] = zk.LockingQueue(path)
        return q

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
            q = queue(args[0])
            if verb == "put":
                q.put(unhex(args[2]), priority=int(args[1]))
                answer("ok")
            elif verb == "putall":
                q.put_all([unhex(h) for h in args[2].split(",")], priority=int(args[1]))
                answer("ok")
            elif verb == "get":
                v = q.get(timeout=float(args[1]))
                answer("none" if v is None else "item " + tohex(v))
            elif verb == "consume":
                answer("true" if q.consume() else "false")
            elif verb == "release":
                answer("true" if q.release() else "false")
            elif verb == "holds":
                answer("true" if q.holds_lock() else "false")
            elif verb == "node":
                pe = q.processing_element
                answer("node " + pe[0] if pe is not None else "none")
            elif verb == "id":
                answer("id " + tohex(q.id))
            elif verb == "len":
                answer("len %d" % len(q))
            elif verb == "drain":
                got = []
                while True:
                    v = q.get(timeout=float(args[1]))
                    if v is None:
                        break
                    if not q.consume():
                        raise RuntimeError("lost the claim on %s" % tohex(v))
                    got.append(tohex(v))
                answer("drained " + ",".join(got))
            else:
                answer("error unknown command %s" % verb)
        except Exception as e:  # answer, and go on with the next command
            answer("error %s %s" % (type(e).__name__, str(e).replace("\n", " ")))
    try:
        zk.stop()
        zk.close()
    finally:
        answer("bye")
    return 0


if __name__ == "__main__":
    sys.exit(main())
