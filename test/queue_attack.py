#!/usr/bin/python3
"""queue_attack.py - kazoo operations for test/t/330_queue_attack.pl.

usage: test/queue_attack.py HOSTS VERB [ARGS...]

  create PATH HEXDATA      persistent node with the given data (hex, '-' for
                           none), parents created as needed; exit 1 if it exists
  gethex PATH              data of PATH in hex (exit 1 if missing)
  put QPATH TEXT [PRIO]    kazoo LockingQueue(QPATH).put(TEXT as UTF-8, PRIO)
  rmtree PATH              delete PATH and everything below (no error if missing)
  children PATH            children of PATH, one per line (nothing if missing)
  claims QPATH             the taken/ children of queue QPATH with their data,
                           one per line: NAME<TAB>DATA (data as text)
  nchildren PATH           number of children of PATH (0 if missing)
  fill QPATH N             N items put the way LockingQueue.put does it
                           (entries/entry-100-<seq>, data "item-<i>"), sent
                           2000 at a time; prints how many entries there are

Exit status 2 on usage or connection errors.
"""

import binascii
import logging
import sys

logging.basicConfig(level=logging.CRITICAL)

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NodeExistsError

from zkq import create_many


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    hosts, verb, args = argv[1], argv[2], argv[3:]
    zk = KazooClient(hosts=hosts, timeout=10.0)
    try:
        zk.start(timeout=10)
    except Exception as e:
        sys.stderr.write("cannot connect to %s: %s\n" % (hosts, e))
        return 2
    try:
        if verb == "create":
            data = b"" if args[1] == "-" else binascii.unhexlify(args[1])
            try:
                zk.create(args[0], data, makepath=True)
            except NodeExistsError:
                return 1
        elif verb == "gethex":
            try:
                data, _ = zk.get(args[0])
            except NoNodeError:
                return 1
            print(binascii.hexlify(data or b"").decode())
        elif verb == "put":
            prio = int(args[2]) if len(args) > 2 else 100
            zk.LockingQueue(args[0]).put(args[1].encode("utf-8"), priority=prio)
        elif verb == "rmtree":
            for _ in range(5):
                try:
                    zk.delete(args[0], recursive=True)
                    break
                except NoNodeError:
                    break
                except Exception:
                    continue
        elif verb == "children":
            try:
                for c in sorted(zk.get_children(args[0])):
                    print(c)
            except NoNodeError:
                pass
        elif verb == "claims":
            try:
                names = sorted(zk.get_children(args[0] + "/taken"))
            except NoNodeError:
                names = []
            for c in names:
                try:
                    data, _ = zk.get(args[0] + "/taken/" + c)
                except NoNodeError:
                    continue
                print("%s\t%s" % (c, (data or b"").decode("utf-8", "replace")))
        elif verb == "nchildren":
            try:
                print(len(zk.get_children(args[0])))
            except NoNodeError:
                print(0)
        elif verb == "fill":
            zk.ensure_path(args[0] + "/entries")
            zk.ensure_path(args[0] + "/taken")
            create_many(zk, ((args[0] + "/entries/entry-100-", b"item-%d" % i)
                             for i in range(int(args[1]))), 2000, sequence=True)
            print(len(zk.get_children(args[0] + "/entries")))
        else:
            sys.stderr.write("unknown verb %s\n" % verb)
            return 2
    finally:
        zk.stop()
        zk.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
