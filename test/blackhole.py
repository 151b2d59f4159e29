#!/usr/bin/python3
"""blackhole.py - TCP forwarders that can black-hole, for partition tests.

    blackhole.py CONTROL_PORT LISTEN:TARGET [LISTEN:TARGET ...]

Listens on 127.0.0.1:LISTEN for each pair and forwards every connection to
127.0.0.1:TARGET, both ways.  One line commands on 127.0.0.1:CONTROL_PORT:

    hole     from now on every byte in either direction is read and thrown
             away, and new connections are accepted (and not forwarded):
             peers see neither data nor a reset, as when a network drops
             packets; their own timeouts must notice
    heal     forward again (connections made while holed stay dead: their
             peer never saw them; new ones are forwarded)
    stats    one JSON line: connections, bytes forwarded, bytes dropped
    quit     stop

Each command is answered with one line ("ok ..." or "error ...").  Used by
test/t/455_partition.pl to cut one ZooKeeper server off from its quorum
(its quorum and election ports) while its clients still reach it.
"""
import json
import selectors
import socket
import sys


def main():
    control_port = int(sys.argv[1])
    pairs = []
    for arg in sys.argv[2:]:
        listen, target = arg.split(":")
        pairs.append((int(listen), int(target)))
    sel = selectors.DefaultSelector()
    state = {"hole": False, "conns": 0, "fwd": 0, "dropped": 0}
    peers = {}      # socket -> its partner (None: a dead, holed connection)

    for listen, target in pairs:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", listen))
        s.listen(64)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, ("listen", target))
    ctl = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ctl.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ctl.bind(("127.0.0.1", control_port))
    ctl.listen(8)
    ctl.setblocking(False)
    sel.register(ctl, selectors.EVENT_READ, ("ctl", None))
    print("blackhole: control on %d, %s" % (control_port, " ".join(sys.argv[2:])), flush=True)

    def close(s):
        p = peers.pop(s, None)
        try:
            sel.unregister(s)
        except (KeyError, ValueError):
            pass
        s.close()
        if p is not None and p in peers:
            peers.pop(p, None)
            try:
                sel.unregister(p)
            except (KeyError, ValueError):
                pass
            p.close()

    running = True
    while running:
        for key, _ in sel.select(timeout=1.0):
            kind, arg = key.data
            s = key.fileobj
            if kind == "listen":
                c, _ = s.accept()
                c.setblocking(False)
                state["conns"] += 1
                if state["hole"]:
                    peers[c] = None
                    sel.register(c, selectors.EVENT_READ, ("conn", None))
                    continue
                u = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    u.connect(("127.0.0.1", arg))
                except OSError:
                    c.close()
                    u.close()
                    continue
                u.setblocking(False)
                peers[c] = u
                peers[u] = c
                sel.register(c, selectors.EVENT_READ, ("conn", None))
                sel.register(u, selectors.EVENT_READ, ("conn", None))
            elif kind == "conn":
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    if state["hole"]:
                        # the peer never learns: keep its side open
                        p = peers.pop(s, None)
                        try:
                            sel.unregister(s)
                        except (KeyError, ValueError):
                            pass
                        s.close()
                        if p is not None:
                            peers[p] = None
                    else:
                        close(s)
                    continue
                p = peers.get(s)
                if state["hole"] or p is None:
                    state["dropped"] += len(data)
                    continue
                try:
                    p.setblocking(True)
                    p.sendall(data)
                    p.setblocking(False)
                    state["fwd"] += len(data)
                except OSError:
                    close(s)
            elif kind == "ctl":
                c, _ = s.accept()
                c.settimeout(5)
                try:
                    line = c.makefile().readline().strip()
                except OSError:
                    line = ""
                if line == "hole":
                    state["hole"] = True
                    reply = "ok holed"
                elif line == "heal":
                    state["hole"] = False
                    reply = "ok healed"
                elif line == "stats":
                    reply = json.dumps(state)
                elif line == "quit":
                    reply = "ok bye"
                    running = False
                else:
                    reply = "error unknown command %r" % line
                try:
                    c.sendall((reply + "\n").encode())
                except OSError:
                    pass
                c.close()
                print("blackhole: %s -> %s" % (line, reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
