#!/usr/bin/python3
"""counter_kazoo.py - kazoo's Counter (zklock's zk_counter_*) driven line by
line, for zklock's TAP tests.

usage: test/counter_kazoo.py HOSTS PATH

Prints "ready" once connected, then reads commands on stdin, one per line,
and answers each with one line (the line protocol of ZkLockTest::Kazoo):

  add DELTA        Counter(PATH) += DELTA -> "value POST_VALUE"
  get              Counter(PATH).value -> "value V"
  adds N DELTA     N adds of DELTA in a row -> "values V1,V2,...,VN" (each
                   add's post_value)
  raw DATA         set PATH's data to DATA as it is (ASCII, may hold blanks;
                   "-" for empty data), as another client could -> "set"
  data             PATH's data -> "data D" ("data" alone when empty)
  version          PATH's version (its writes so far) -> "version V"
  quit             -> "bye"

Any failure answers "error <exception> <message>".
"""

import sys

from kazoo_driver import answer, serve


def setup(zk, argv):
    path = argv[2]
    counter = zk.Counter(path)

    def add(a):
        counter.__add__(int(a[0]))
        answer("value %d" % counter.post_value)

    def adds(a):
        n, delta = a[0].split()
        vals = []
        for _ in range(int(n)):
            counter.__add__(int(delta))
            vals.append(str(counter.post_value))
        answer("values " + ",".join(vals))

    def raw(a):
        data = a[0] if a else ""
        zk.ensure_path(path)
        zk.set(path, b"" if data == "-" else data.encode("ascii"))
        answer("set")

    def data(a):
        d, _ = zk.get(path)
        answer(("data " + d.decode("ascii", "replace")).rstrip())

    def version(a):
        _, stat = zk.get(path)
        answer("version %d" % stat.version)

    return {
        "add": add,
        "get": lambda a: answer("value %d" % counter.value),
        "adds": adds,
        "raw": raw,
        "data": data,
        "version": version,
    }, None


if __name__ == "__main__":
    sys.exit(serve(__doc__, (2,), setup, maxsplit=1))
