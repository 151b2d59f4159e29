#!/usr/bin/python3
"""auth_kazoo.py - a kazoo client with or without digest credentials, for
zklock's TAP test of ZooKeeper authentication and ACLs (test/t/500_zk_auth.pl).

usage: test/auth_kazoo.py HOSTS [USER:PASSWORD]

With credentials the client authenticates with the digest scheme
(auth_data) and creates its nodes with the ACL zklock uses by default:
the authenticated identity may do everything, anyone may read
(default_acl).  Prints "ready", then answers one line per command:

  digest                 the digest id of the credentials -> "digest USER:BASE64"
  acl PATH               the node's ACL -> "acl scheme:id:perms,..." (perms in cdrwa order)
  ls PATH                children -> "ls NAME,NAME,..." ("ls -" when none)
  delete PATH            -> "ok" | "noauth" | "nonode" | "error ..."
  create PATH            an empty persistent node -> "ok" | "noauth" | ...
  set PATH TEXT          set its data -> "ok" | "noauth" | ...
  read PATH              its data -> "data TEXT" | "noauth" | "nonode"
  setacl PATH WHO        set its ACL: WHO "open" (world:anyone:cdrwa) or
                         USER:PASSWORD (that digest identity only, cdrwa) -> "ok" | ...
  lock PATH SECONDS      kazoo Lock -> "locked" | "timeout"
  release PATH           -> "released"
  put PATH TEXT          LockingQueue put -> "ok"
  get PATH SECONDS       LockingQueue get -> "item TEXT" | "none"
  consume PATH           LockingQueue consume -> "true" | "false"
  quit                   -> "bye"
"""

import logging
import sys

logging.basicConfig(level=logging.CRITICAL)

from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import LockTimeout, NoAuthError, NoNodeError  # noqa: E402
from kazoo.security import (ACL, Id, Permissions, OPEN_ACL_UNSAFE,  # noqa: E402
                            make_digest_acl, make_digest_acl_credential)


def perms(p):
    out = ""
    for letter, bit in (("c", Permissions.CREATE), ("d", Permissions.DELETE),
                        ("r", Permissions.READ), ("w", Permissions.WRITE),
                        ("a", Permissions.ADMIN)):
        if p & bit:
            out += letter
    return out


def main():
    hosts = sys.argv[1]
    cred = sys.argv[2] if len(sys.argv) > 2 else None
    if cred:
        user, pw = cred.split(":", 1)
        acl = [make_digest_acl(user, pw, all=True),
               ACL(Permissions.READ, Id("world", "anyone"))]
        zk = KazooClient(hosts=hosts, timeout=10.0, auth_data=[("digest", cred)],
                         default_acl=acl)
    else:
        zk = KazooClient(hosts=hosts, timeout=10.0, default_acl=OPEN_ACL_UNSAFE)
    zk.start(timeout=10)
    locks = {}
    queues = {}
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        parts = line.rstrip("\n").split(" ", 2)
        verb = parts[0]
        try:
            if verb == "digest":
                u, p = cred.split(":", 1)
                ans = "digest " + make_digest_acl_credential(u, p)
            elif verb == "acl":
                acls, _ = zk.get_acls(parts[1])
                ans = "acl " + ",".join("%s:%s:%s" % (a.id.scheme, a.id.id, perms(a.perms))
                                        for a in acls)
            elif verb == "ls":
                ans = "ls " + (",".join(sorted(zk.get_children(parts[1]))) or "-")
            elif verb == "delete":
                zk.delete(parts[1])
                ans = "ok"
            elif verb == "create":
                zk.create(parts[1], b"")
                ans = "ok"
            elif verb == "read":
                data, _ = zk.get(parts[1])
                ans = "data " + (data or b"").decode("utf-8", "replace").replace("\n", " ")
            elif verb == "setacl":
                if parts[2] == "open":
                    acl = OPEN_ACL_UNSAFE
                else:
                    u, p = parts[2].split(":", 1)
                    acl = [make_digest_acl(u, p, all=True)]
                zk.set_acls(parts[1], acl)
                ans = "ok"
            elif verb == "set":
                zk.set(parts[1], parts[2].encode())
                ans = "ok"
            elif verb == "lock":
                lk = locks.get(parts[1])
                # a new Lock per acquisition: the empty container may be gone
                if lk is None or not lk.is_acquired:
                    lk = locks[parts[1]] = zk.Lock(parts[1], "kazoo-auth")
                try:
                    got = lk.acquire(blocking=True, timeout=float(parts[2]))
                except LockTimeout:
                    got = False
                ans = "locked" if got else "timeout"
            elif verb == "release":
                locks[parts[1]].release()
                ans = "released"
            elif verb in ("put", "get", "consume"):
                q = queues.get(parts[1])
                if q is None:
                    q = queues[parts[1]] = zk.LockingQueue(parts[1])
                if verb == "put":
                    q.put(parts[2].encode())
                    ans = "ok"
                elif verb == "get":
                    item = q.get(float(parts[2]))
                    ans = "none" if item is None else "item " + item.decode()
                else:
                    ans = "true" if q.consume() else "false"
            elif verb == "quit":
                out.write("bye\n")
                out.flush()
                break
            else:
                ans = "error unknown verb " + verb
        except NoAuthError:
            ans = "noauth"
        except NoNodeError:
            ans = "nonode"
        except Exception as e:  # the test shows it
            ans = "error %s %s" % (type(e).__name__, str(e).replace("\n", " "))
        out.write(ans + "\n")
        out.flush()
    zk.stop()
    zk.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
