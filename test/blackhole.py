#!/usr/bin/python3
"""blackhole.py - TCP forwarders that can black-hole, for partition tests.

    blackhole.py CONTROL_PORT LISTEN:TARGET[:TAG,TAG...] [...]

Listens on 127.0.0.1:LISTEN for each pair and forwards every connection to
127.0.0.1:TARGET, both ways.  One line commands on 127.0.0.1:CONTROL_PORT:

    hole [TAG]  from now on every byte in either direction (of the pairs
             with that tag; without a tag, of every pair) is read and thrown
             away, and new connections are accepted (and not forwarded):
             peers see neither data nor a reset, as when a network drops
             packets; their own timeouts must notice
    heal [TAG]  forward again (connections made while holed stay dead: their
             peer never saw them; new ones are forwarded)
    stats    one JSON line: connections, bytes forwarded, bytes dropped
    quit     stop

Each command is answered with one line ("ok ..." or "error ...").  Used by
test/t/455_partition.pl and the fault run (test/faults/infra.py, tag = a
server's number) to cut one ZooKeeper server off from its quorum (its
quorum and election ports) while its clients still reach it.
"""
import json
import selectors
import socket
import sys


def main():
    control_port = int(sys.argv[1])
    pairs = []
    for arg in sys.argv[2:]:
        f = arg.split(":")
        tags = frozenset(f[2].split(",")) if len(f) > 2 and f[2] else frozenset()
        pairs.append((int(f[0]), int(f[1]), tags))
    sel = selectors.DefaultSelector()
    state = {"hole": False, "holed": [], "conns": 0, "fwd": 0, "dropped": 0}
    holed = set()   # tags cut off
    peers = {}      # socket -> its partner (None: a dead, holed connection)
    tags_of = {}    # socket -> the tags of its pair

    def is_holed(tags):
        return state["hole"] or bool(tags & holed)

    for listen, target, tags in pairs:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", listen))
        s.listen(64)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, ("listen", (target, tags)))
    ctl = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ctl.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ctl.bind(("127.0.0.1", control_port))
    ctl.listen(8)
    ctl.setblocking(False)
    sel.register(ctl, selectors.EVENT_READ, ("ctl", None))
    print("blackhole: control on %d, %s" % (control_port, " ".join(sys.argv[2:])), flush=True)

    outbuf = {}     # socket -> bytes waiting to be sent to it

    def close(s):
        for x in (s, peers.get(s)):
            if x is None:
                continue
            peers.pop(x, None)
            tags_of.pop(x, None)
            outbuf.pop(x, None)
            try:
                sel.unregister(x)
            except (KeyError, ValueError):
                pass
            x.close()

    def want(s):
        ev = selectors.EVENT_READ | (selectors.EVENT_WRITE if outbuf.get(s) else 0)
        try:
            sel.modify(s, ev, ("conn", None))
        except (KeyError, ValueError):
            pass

    running = True
    while running:
        for key, mask in sel.select(timeout=1.0):
            kind, arg = key.data
            s = key.fileobj
            if kind == "listen":
                target, tags = arg
                c, _ = s.accept()
                c.setblocking(False)
                state["conns"] += 1
                tags_of[c] = tags
                if is_holed(tags):
                    peers[c] = None
                    sel.register(c, selectors.EVENT_READ, ("conn", None))
                    continue
                u = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    u.connect(("127.0.0.1", target))
                except OSError:
                    c.close()
                    u.close()
                    tags_of.pop(c, None)
                    continue
                u.setblocking(False)
                tags_of[u] = tags
                peers[c] = u
                peers[u] = c
                sel.register(c, selectors.EVENT_READ, ("conn", None))
                sel.register(u, selectors.EVENT_READ, ("conn", None))
            elif kind == "conn":
                if mask & selectors.EVENT_WRITE and outbuf.get(s):
                    try:
                        n = s.send(outbuf[s])
                        outbuf[s] = outbuf[s][n:]
                    except BlockingIOError:
                        pass
                    except OSError:
                        close(s)
                        continue
                    want(s)
                if not mask & selectors.EVENT_READ:
                    continue
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    if is_holed(tags_of.get(s, frozenset())):
                        # the peer never learns: keep its side open
                        p = peers.pop(s, None)
                        tags_of.pop(s, None)
                        outbuf.pop(s, None)
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
                if is_holed(tags_of.get(s, frozenset())) or p is None:
                    state["dropped"] += len(data)
                    continue
                # never block: a frozen peer only grows its buffer
                outbuf[p] = outbuf.get(p, b"") + data
                state["fwd"] += len(data)
                want(p)
            elif kind == "ctl":
                c, _ = s.accept()
                c.settimeout(5)
                try:
                    line = c.makefile().readline().strip()
                except OSError:
                    line = ""
                words = line.split()
                if words[:1] == ["hole"] and len(words) <= 2:
                    if len(words) == 2:
                        holed.add(words[1])
                    else:
                        state["hole"] = True
                    reply = "ok holed"
                elif words[:1] == ["heal"] and len(words) <= 2:
                    if len(words) == 2:
                        holed.discard(words[1])
                    else:
                        state["hole"] = False
                        holed.clear()
                    reply = "ok healed"
                elif line == "stats":
                    state["holed"] = sorted(holed)
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
