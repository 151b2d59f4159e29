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

import sys

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout, NoAuthError, NoNodeError
from kazoo.security import (ACL, Id, Permissions, OPEN_ACL_UNSAFE,
                            make_digest_acl, make_digest_acl_credential)

from kazoo_driver import answer, per_path, serve, yes


def perms(p):
    out = ""
    for letter, bit in (("c", Permissions.CREATE), ("d", Permissions.DELETE),
                        ("r", Permissions.READ), ("w", Permissions.WRITE),
                        ("a", Permissions.ADMIN)):
        if p & bit:
            out += letter
    return out


def client(argv):
    """With USER:PASSWORD: that digest identity, nodes created as zklock
    creates them by default; without: open nodes"""
    cred = argv[2] if len(argv) > 2 else None
    if cred:
        user, pw = cred.split(":", 1)
        acl = [make_digest_acl(user, pw, all=True),
               ACL(Permissions.READ, Id("world", "anyone"))]
        return KazooClient(hosts=argv[1], timeout=10.0, auth_data=[("digest", cred)],
                           default_acl=acl)
    return KazooClient(hosts=argv[1], timeout=10.0, default_acl=OPEN_ACL_UNSAFE)


def failure(e):
    """ZooKeeper's refusals are answers of their own"""
    if isinstance(e, NoAuthError):
        return "noauth"
    if isinstance(e, NoNodeError):
        return "nonode"
    return None


def setup(zk, argv):
    cred = argv[2] if len(argv) > 2 else None
    locks = {}

    def digest(a):
        u, p = cred.split(":", 1)
        answer("digest " + make_digest_acl_credential(u, p))

    def acl(a):
        acls, _ = zk.get_acls(a[0])
        answer("acl " + ",".join("%s:%s:%s" % (x.id.scheme, x.id.id, perms(x.perms))
                                 for x in acls))

    def ok(fn):
        def run(a):
            fn(a)
            answer("ok")
        return run

    def read(a):
        data, _ = zk.get(a[0])
        answer("data " + (data or b"").decode("utf-8", "replace").replace("\n", " "))

    def setacl(a):
        if a[1] == "open":
            new = OPEN_ACL_UNSAFE
        else:
            u, p = a[1].split(":", 1)
            new = [make_digest_acl(u, p, all=True)]
        zk.set_acls(a[0], new)
        answer("ok")

    def lock(a):
        lk = locks.get(a[0])
        # a new Lock per acquisition: the empty container may be gone
        if lk is None or not lk.is_acquired:
            lk = locks[a[0]] = zk.Lock(a[0], "kazoo-auth")
        try:
            got = lk.acquire(blocking=True, timeout=float(a[1]))
        except LockTimeout:
            got = False
        answer("locked" if got else "timeout")

    def release(a):
        locks[a[0]].release()
        answer("released")

    queue = per_path(zk.LockingQueue)

    def get(a):
        item = queue(a[0]).get(float(a[1]))
        answer("none" if item is None else "item " + item.decode())

    return {
        "digest": digest,
        "acl": acl,
        "ls": lambda a: answer("ls " + (",".join(sorted(zk.get_children(a[0]))) or "-")),
        "delete": ok(lambda a: zk.delete(a[0])),
        "create": ok(lambda a: zk.create(a[0], b"")),
        "read": read,
        "setacl": setacl,
        "set": ok(lambda a: zk.set(a[0], a[1].encode())),
        "lock": lock,
        "release": release,
        "put": ok(lambda a: queue(a[0]).put(a[1].encode())),
        "get": get,
        "consume": lambda a: answer(yes(queue(a[0]).consume())),
    }, None


if __name__ == "__main__":
    sys.exit(serve(__doc__, (1, 2), setup, maxsplit=2, client=client, failure=failure))
