#!/usr/bin/python3
"""blackhole.py - TCP forwarders that can black-hole, for partition tests.

    blackhole.py CONTROL_PORT LISTEN:TARGET[:TAG,TAG...] [...]

Listens on 127.0.0.1:LISTEN for each pair and forwards every connection to
127.0.0.1:TARGET, both ways.  One line commands on 127.0.0.1:CONTROL_PORT:

    hole [TAG]  the pairs with that tag (without a tag: every pair) stop
             carrying anything, as when a network drops every packet and
             TCP keeps retransmitting: nothing is read from or written to
             their connections (what was sent waits in the kernel and in
             the proxy), and new connections wait unaccepted in the backlog.
             Peers see neither data nor a reset; their own timeouts must
             notice.
    heal [TAG]  the pairs carry again, from where they stopped: nothing is
             lost (the data that waited goes through, in order), as TCP
             delivers it once a partition heals
    mute [TAG]  only the data from the side that connected (to the proxy)
             toward the target waits; the other way still flows.  For a
             follower's link to its leader: the follower still receives
             and applies every commit (its clients read fresh data), but
             what it forwards (requests, acknowledgements) waits.  heal ends
             it too.
    stats    one JSON line: the holed tags, connections, bytes forwarded
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

BUF_MAX = 8 * 1024 * 1024   # bytes waiting for one socket before its peer is not read


def main():
    control_port = int(sys.argv[1])
    pairs = []
    for arg in sys.argv[2:]:
        f = arg.split(":")
        tags = frozenset(f[2].split(",")) if len(f) > 2 and f[2] else frozenset()
        pairs.append((int(f[0]), int(f[1]), tags))
    sel = selectors.DefaultSelector()
    state = {"all": False, "conns": 0, "fwd": 0}
    holed = set()       # tags cut off
    listeners = {}      # listening socket -> (target, tags)
    peers = {}          # socket -> its partner
    tags_of = {}        # socket -> the tags of its pair
    outbuf = {}         # socket -> bytes waiting to be sent to it

    muted = set()       # tags whose connecting side's data waits
    accepted = set()    # sockets of the sides that connected
    state["mute_all"] = False

    def is_holed(tags):
        return state["all"] or bool(tags & holed)

    def is_muted(tags):
        return state["mute_all"] or bool(tags & muted)

    def events(s):
        """What s may do now: nothing while its pair is holed."""
        if s in listeners:
            return 0 if is_holed(listeners[s][1]) else selectors.EVENT_READ
        tags = tags_of.get(s, frozenset())
        if is_holed(tags):
            return 0
        ev = 0
        p = peers.get(s)
        if p is not None and len(outbuf.get(p, b"")) < BUF_MAX and \
                not (s in accepted and is_muted(tags)):
            ev |= selectors.EVENT_READ
        if outbuf.get(s) and not (s not in accepted and is_muted(tags)):
            ev |= selectors.EVENT_WRITE
        return ev

    def update(s):
        ev = events(s)
        try:
            key = sel.get_key(s)
        except (KeyError, ValueError):
            key = None
        if ev == 0:
            if key is not None:
                sel.unregister(s)
        elif key is None:
            sel.register(s, ev)
        elif key.events != ev:
            sel.modify(s, ev)

    def close(s):
        for x in (s, peers.get(s)):
            if x is None:
                continue
            peers.pop(x, None)
            tags_of.pop(x, None)
            accepted.discard(x)
            outbuf.pop(x, None)
            try:
                sel.unregister(x)
            except (KeyError, ValueError):
                pass
            x.close()

    for listen, target, tags in pairs:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", listen))
        s.listen(64)
        s.setblocking(False)
        listeners[s] = (target, tags)
        update(s)
    ctl = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ctl.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ctl.bind(("127.0.0.1", control_port))
    ctl.listen(8)
    ctl.setblocking(False)
    sel.register(ctl, selectors.EVENT_READ)
    print("blackhole: control on %d, %s" % (control_port, " ".join(sys.argv[2:])), flush=True)

    running = True
    while running:
        for key, mask in sel.select(timeout=1.0):
            s = key.fileobj
            if s is ctl:
                c, _ = s.accept()
                c.settimeout(5)
                try:
                    line = c.makefile().readline().strip()
                except OSError:
                    line = ""
                words = line.split()
                if words[:1] in (["hole"], ["heal"], ["mute"]) and len(words) <= 2:
                    if words[0] == "hole":
                        if len(words) == 2:
                            holed.add(words[1])
                        else:
                            state["all"] = True
                    elif words[0] == "mute":
                        if len(words) == 2:
                            muted.add(words[1])
                        else:
                            state["mute_all"] = True
                    elif len(words) == 2:
                        holed.discard(words[1])
                        muted.discard(words[1])
                    else:
                        state["all"] = False
                        state["mute_all"] = False
                        holed.clear()
                        muted.clear()
                    for x in list(listeners) + list(peers):
                        update(x)
                    reply = "ok " + {"hole": "holed", "heal": "healed", "mute": "muted"}[words[0]]
                elif line == "stats":
                    reply = json.dumps(dict(state, holed=sorted(holed), muted=sorted(muted)))
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
            elif s in listeners:
                target, tags = listeners[s]
                try:
                    c, _ = s.accept()
                except BlockingIOError:
                    continue
                c.setblocking(False)
                u = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    u.connect(("127.0.0.1", target))
                except OSError:
                    c.close()
                    u.close()
                    continue
                u.setblocking(False)
                state["conns"] += 1
                for x, y in ((c, u), (u, c)):
                    peers[x] = y
                    tags_of[x] = tags
                accepted.add(c)
                update(c)
                update(u)
            else:
                if mask & selectors.EVENT_WRITE and outbuf.get(s):
                    try:
                        n = s.send(outbuf[s])
                        outbuf[s] = outbuf[s][n:]
                    except BlockingIOError:
                        pass
                    except OSError:
                        close(s)
                        continue
                    update(s)
                    if s in peers:
                        update(peers[s])
                if not mask & selectors.EVENT_READ or s not in peers:
                    continue
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                p = peers.get(s)
                if not data:
                    # end of one side: pass on what waits, then close both
                    if p is not None and outbuf.get(p):
                        try:
                            p.setblocking(True)
                            p.settimeout(2)
                            p.sendall(outbuf[p])
                        except OSError:
                            pass
                    close(s)
                    continue
                outbuf[p] = outbuf.get(p, b"") + data
                state["fwd"] += len(data)
                update(p)
                update(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
