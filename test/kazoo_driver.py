"""kazoo_driver.py - the line protocol every test/*_kazoo.py speaks.

A driver is a kazoo client that zklock's TAP tests (ZkLockTest::Kazoo:
send, read_line, cmd, quit) steer one line at a time.  It connects to the
ZooKeeper given as its first argument, prints "ready", then reads commands
on stdin, one per line, a verb and its arguments, and answers each with one
line; "quit" answers "bye" after the client is closed.  A failure answers
"error <exception> <message>" (on one line) and the driver goes on; an
unknown verb answers "error unknown command VERB".

Each driver names its verbs and what they do; this module does the rest,
once.
"""

import logging
import sys
import threading

logging.basicConfig(level=logging.CRITICAL)
logging.getLogger("kazoo").setLevel(logging.CRITICAL)

from kazoo.client import KazooClient  # noqa: E402


_out = threading.Lock()


def answer(line):
    """Write one answer line at once (the test reads line by line); a
    driver's own threads may answer too (election_kazoo.py's "leading")."""
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def serve(doc, nargs, setup, maxsplit=-1, client=None, failure=None):
    """Run a driver: argv has one of the counts in nargs (after the program),
    argv[1] the ZooKeeper hosts.  client(argv) makes the KazooClient (default:
    plain, 10 s timeout); setup(zk, argv) returns the verbs, {verb: fn(args)},
    and a function to call before closing (or None).  A line is split on
    blanks, at most maxsplit times (a last argument may hold blanks).
    failure(exc) may turn an exception into an answer; None: the default."""
    if len(sys.argv) - 1 not in nargs:
        sys.stderr.write(doc)
        return 2
    zk = client(sys.argv) if client else KazooClient(hosts=sys.argv[1], timeout=10.0)
    zk.start(timeout=10)
    verbs, finish = setup(zk, sys.argv)
    answer("ready")
    for line in sys.stdin:
        parts = line.rstrip("\n").split(None if maxsplit < 0 else " ", maxsplit)
        parts = [p for p in parts if p != ""] if maxsplit < 0 else parts
        if not parts or parts[0] == "":
            continue
        verb, args = parts[0], parts[1:]
        if verb == "quit":
            break
        fn = verbs.get(verb)
        if fn is None:
            answer("error unknown command %s" % verb)
            continue
        try:
            fn(args)
        except Exception as e:  # answer, and go on with the next command
            said = failure(e) if failure else None
            answer(said if said is not None else
                   "error %s %s" % (type(e).__name__, str(e).replace("\n", " ")))
    try:
        if finish:
            finish()
        zk.stop()
        zk.close()
    finally:
        answer("bye")
    return 0


def per_path(make):
    """A function of a path that makes the recipe make(path) once and then
    gives the same object (kazoo's queues and barriers keep state)."""
    made = {}

    def get(path):
        obj = made.get(path)
        if obj is None:
            obj = made[path] = make(path)
        return obj
    return get


def yes(b):
    """kazoo's truth as the protocol writes it."""
    return "true" if b else "false"
