#!/usr/bin/python3
"""zkproxy.py - a fault-injecting proxy for ZooKeeper's client protocol, for zklock's tests.

usage: test/zkproxy.py --listen PORT --upstream HOST:PORT[,HOST:PORT...] --control PORT
                       [--pidfile FILE] [--log FILE] [--trace]

Clients connect to 127.0.0.1:LISTEN; each connection is forwarded to one upstream
ZooKeeper (round robin over the --upstream list, which may also be given several
times).  The proxy understands ZooKeeper's framing (4-byte big-endian length, then
the body): the first client packet is a ConnectRequest and the first server packet
a ConnectResponse; later client packets start with a RequestHeader (int xid, int
type) and server packets with a ReplyHeader (int xid, long zxid, int err).  Replies
are matched to requests by xid per connection, so rules can name the operation a
reply answers.  Watch notifications (xid -1) are the pseudo operation
"notification", handshake packets the pseudo operation "connect".

Control: a line protocol on 127.0.0.1:CONTROL.  Every command answers one line
that starts with "ok" or "error".  OP is an operation name (create, delete,
exists, getData, setData, getChildren, sync, ping, getChildren2, check, multi,
create2, removeWatches, createContainer, closeSession, setWatches, setWatches2,
notification, connect, ...; case does not matter) or its number.

  cut-after-request OP [N] [rst] [path=P]
                                  after forwarding the Nth (default: the next) request
                                  of type OP, forward nothing more from that client;
                                  when ZooKeeper's reply to it arrives (the request
                                  landed), close the connection without delivering it;
                                  with path=P only requests on exactly that path count
                                  (operations whose request starts with a path: create,
                                  delete, exists, getData, setData, getACL, setACL,
                                  getChildren, sync, getChildren2, create2, ...)
  cut-after-reply OP [N] [rst]    after delivering the Nth reply to OP (default: the
                                  next), close the connection; later replies are lost
  delay-replies OP|all MS         hold matching replies MS milliseconds (replies keep
                                  their order: later ones wait behind a held one)
  drop-replies OP|all             hold matching replies for good: from the first one on
                                  the client hears nothing more on that connection
  drop-requests OP|all [path=P]   never forward matching requests (with path=P: only
                                  those on exactly that path)
  refuse SECONDS                  close new client connections at once for that long
                                  (0 ends it); connections already open are not touched
  cut-all [rst]                   close every current connection now
  freeze / thaw                   stop / resume forwarding bytes in both directions
  release                         deliver replies held by drop-replies (from now on)
  clear ID                        remove one rule (its number is in the answer that added it)
  reset                           clear every rule, thaw, stop refusing (replies already
                                  dropped stay dropped; delayed ones keep their time)
  rules                           "ok" and the active rules as JSON
  stats                           "ok" and one line of JSON: connections accepted, open,
                                  refused; requests, replies (from ZooKeeper) and
                                  delivered replies per operation; times each rule
                                  fired, by text ("fired") and by number ("fired_ids");
                                  the most requests one connection had in flight at
                                  once ("peak_pending"); listings (getChildren,
                                  getChildren2) per path ("listed", first 10000 paths)
  peak-reset                      start "peak_pending" again from what is in flight now
  ping                            "ok pong"
  quit                            "ok bye", then exit

A cut closes the upstream socket and ends the client side with FIN (the client
reads what was delivered, then end of file) or, with "rst", with a reset: the
client's next send() then fails.  Rules with "all" also match the handshake for
delay/drop; cut rules count only packets after the handshake.  Cut rules fire
once and are then removed; the others stay until reset.  Rules apply to every
connection, firing is logged with a timestamp (stderr, or --log); a cut rule
counts as fired when the connection is actually cut.
SIGTERM and SIGINT end the proxy cleanly.
"""

import argparse
import collections
import errno
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time

MAX_PACKET = 64 * 1024 * 1024
CUT_REPLY_WAIT = 5.0  # seconds a cut-after-request waits for the reply before cutting anyway
DRAIN_TIME = 2.0  # seconds a FIN-cut client side is drained before it is closed

# pseudo operations
OP_CONNECT = -1000
OP_NOTIFICATION = -1001

OPS = {
    "notification": OP_NOTIFICATION, "connect": OP_CONNECT,
    "create": 1, "delete": 2, "exists": 3, "getData": 4, "setData": 5, "getACL": 6,
    "setACL": 7, "getChildren": 8, "sync": 9, "ping": 11, "getChildren2": 12,
    "check": 13, "multi": 14, "create2": 15, "reconfig": 16, "checkWatches": 17,
    "removeWatches": 18, "createContainer": 19, "deleteContainer": 20,
    "createTTL": 21, "multiRead": 22, "auth": 100, "setWatches": 101, "sasl": 102,
    "getEphemerals": 103, "getAllChildrenNumber": 104, "setWatches2": 105,
    "addWatch": 106, "whoAmI": 107, "createSession": -10, "closeSession": -11,
    "error": -1,
}
OP_NAMES = {v: k for k, v in OPS.items()}
OPS_LOWER = {k.lower(): v for k, v in OPS.items()}
OPS_LOWER.update({"watch": OP_NOTIFICATION, "event": OP_NOTIFICATION,
                  "handshake": OP_CONNECT})


def op_name(op):
    if op is None:
        return "all"
    return OP_NAMES.get(op, str(op))


def parse_op(word, allow_all):
    w = word.lower()
    if w == "all":
        if not allow_all:
            raise ValueError("this rule needs one operation, not all")
        return None
    if w in OPS_LOWER:
        return OPS_LOWER[w]
    try:
        return int(word)
    except ValueError:
        raise ValueError("unknown operation %r" % word)


# requests whose body starts with the path they act on
PATH_OPS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 19, 21)


def request_path(op, data):
    """The path a request acts on, or None (data: the packet with its length)."""
    if op not in PATH_OPS or len(data) < 16:
        return None
    plen = struct.unpack(">i", data[12:16])[0]
    if not 0 <= plen <= len(data) - 16:
        return None
    return data[16:16 + plen].decode("utf-8", "replace")


def split_path_arg(args):
    """args without a trailing path=P, and P (or None)."""
    path = None
    rest = []
    for a in args:
        if a.startswith("path="):
            if path is not None or len(a) == 5:
                raise ValueError("give one path=P, with a path")
            path = a[5:]
        else:
            rest.append(a)
    return rest, path


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1) if path else sys.stderr

    def __call__(self, msg):
        t = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + ".%03d" % (int(t * 1000) % 1000)
        try:
            self.f.write("%s zkproxy[%d]: %s\n" % (stamp, os.getpid(), msg))
            self.f.flush()
        except OSError:
            pass


class Rule:
    _next = 1

    def __init__(self, kind, op, n=1, ms=0, rst=False, text="", path=None):
        self.id = Rule._next
        Rule._next += 1
        self.kind = kind
        self.op = op
        self.n = n
        self.ms = ms
        self.rst = rst
        self.seen = 0
        self.text = text
        self.path = path

    def matches(self, op, handshake, path=None):
        if handshake:
            if self.op == OP_CONNECT:
                return self.path is None
            return self.op is None and self.path is None and \
                self.kind in ("delay-replies", "drop-replies", "drop-requests")
        if self.path is not None and self.path != path:
            return False
        return self.op is None or self.op == op

    def describe(self):
        d = {"id": self.id, "rule": self.text, "kind": self.kind, "op": op_name(self.op)}
        if self.kind.startswith("cut"):
            d.update(n=self.n, seen=self.seen, rst=self.rst)
        if self.kind == "delay-replies":
            d["ms"] = self.ms
        if self.path is not None:
            d["path"] = self.path
        return d


class Packet:
    __slots__ = ("data", "off", "release", "cut", "rst", "op", "rule")

    def __init__(self, data, release, op, cut=False, rst=False, rule=None):
        self.data = data
        self.off = 0
        self.release = release
        self.op = op
        self.cut = cut
        self.rst = rst
        self.rule = rule  # the cut rule that fires once this packet is delivered


class Conn:
    def __init__(self, proxy, csock, peer, upstream):
        self.proxy = proxy
        self.id = proxy.next_conn_id
        proxy.next_conn_id += 1
        self.c = csock
        self.s = None
        self.peer = peer
        self.upstream = upstream
        self.cin = bytearray()
        self.sin = bytearray()
        self.to_s = bytearray()
        self.to_c = collections.deque()
        self.c_hs = False
        self.s_hs = False
        self.raw = False
        self.pending = {}  # xid -> deque of ops
        self.npending = 0  # requests forwarded whose reply has not come back
        self.hold_client = False  # after a cut-after-request fired
        self.cut_xid = None
        self.cut_rst = False
        self.cut_rule = None
        self.cut_deadline = None
        self.server_done = False  # nothing more from the server is delivered
        self.s_connected = False
        self.state = "open"  # open, draining, closed
        self.drain_deadline = None

    def label(self):
        return "conn %d (%s:%d -> %s)" % (self.id, self.peer[0], self.peer[1], self.upstream)


class Proxy:
    def __init__(self, args):
        self.args = args
        self.log = Log(args.log)
        self.trace = args.trace
        self.sel = selectors.DefaultSelector()
        self.registered = {}  # fileobj -> events
        self.upstreams = []
        for spec in args.upstream:
            for hp in spec.split(","):
                hp = hp.strip()
                if not hp:
                    continue
                host, _, port = hp.rpartition(":")
                self.upstreams.append((host or "127.0.0.1", int(port)))
        if not self.upstreams:
            raise SystemExit("zkproxy.py: no upstream given")
        self.rr = 0
        self.conns = []
        self.next_conn_id = 1
        self.rules = []
        self.frozen = False
        self.refuse_until = 0.0
        self.stopping = False
        self.peak_pending = 0  # most requests of one connection in flight at once
        self.stats = {
            "accepted": 0, "refused": 0, "closed": 0, "cuts": 0,
            "dropped_requests": 0, "held_replies": 0,
            "requests": collections.Counter(), "replies": collections.Counter(),
            "listed": collections.Counter(),
            "delivered": collections.Counter(), "fired": collections.Counter(),
            "fired_ids": collections.Counter(),
        }
        self.listener = self._listen(args.listen)
        self.control = self._listen(args.control)
        self.ctl_clients = {}  # sock -> [inbuf, outbuf]
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self._want(self.listener, selectors.EVENT_READ)
        self._want(self.control, selectors.EVENT_READ)
        self._want(self.wake_r, selectors.EVENT_READ)

    def _listen(self, port):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(128)
        s.setblocking(False)
        return s

    # ---- selector bookkeeping ----

    def _want(self, sock, events):
        if sock is None:
            return
        cur = self.registered.get(sock)
        if events == 0:
            if cur is not None:
                try:
                    self.sel.unregister(sock)
                except (KeyError, ValueError, OSError):
                    pass
                del self.registered[sock]
            return
        if cur is None:
            self.sel.register(sock, events)
            self.registered[sock] = events
        elif cur != events:
            self.sel.modify(sock, events)
            self.registered[sock] = events

    def _forget(self, sock):
        if sock is None:
            return
        self._want(sock, 0)
        try:
            sock.close()
        except OSError:
            pass

    # ---- connections ----

    def accept(self):
        while True:
            try:
                csock, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self.log("accept failed: %s" % e)
                return
            now = time.monotonic()
            if now < self.refuse_until:
                self.stats["refused"] += 1
                self.log("refused a connection from %s:%d (refusing for %.1fs more)"
                         % (peer[0], peer[1], self.refuse_until - now))
                try:
                    csock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
                csock.close()
                continue
            self.stats["accepted"] += 1
            csock.setblocking(False)
            csock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            host, port = self.upstreams[self.rr % len(self.upstreams)]
            self.rr += 1
            conn = Conn(self, csock, peer, "%s:%d" % (host, port))
            self.conns.append(conn)
            try:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.s = s
                rc = s.connect_ex((host, port))
                if rc not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
                    raise OSError(rc, os.strerror(rc))
            except OSError as e:
                self.log("%s: cannot connect upstream: %s" % (conn.label(), e))
                self.close_conn(conn, "upstream connect failed")
                continue
            self.log("%s: accepted" % conn.label())

    def close_conn(self, conn, why, rst=False):
        if conn.state == "closed":
            return
        conn.state = "closed"
        self._forget(conn.s)
        conn.s = None
        if conn.c is not None:
            if rst:
                try:
                    conn.c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            self._forget(conn.c)
            conn.c = None
        self.stats["closed"] += 1
        try:
            self.conns.remove(conn)
        except ValueError:
            pass
        self.log("%s: closed (%s)" % (conn.label(), why))

    def cut(self, conn, why, rst):
        """Cut a connection: upstream closed, client reset or FIN + drain."""
        if conn.state != "open":
            return
        self.stats["cuts"] += 1
        self.log("%s: CUT (%s)%s" % (conn.label(), why, " with reset" if rst else ""))
        self._forget(conn.s)
        conn.s = None
        conn.to_c.clear()
        if rst or conn.c is None:
            self.close_conn(conn, "cut", rst=True)
            return
        try:
            conn.c.shutdown(socket.SHUT_WR)
        except OSError:
            self.close_conn(conn, "cut")
            return
        conn.state = "draining"
        conn.drain_deadline = time.monotonic() + DRAIN_TIME

    # ---- packets ----

    def _next_packet(self, buf, first):
        """(packet bytes, body) of the first complete packet of buf, or None."""
        if len(buf) < 4:
            return None
        (length,) = struct.unpack(">i", bytes(buf[:4]))
        if length < 0 or length > MAX_PACKET:
            raise ValueError("bad packet length %d" % length)
        if len(buf) < 4 + length:
            return None
        data = bytes(buf[:4 + length])
        del buf[:4 + length]
        return data

    def client_data(self, conn):
        if conn.raw:
            conn.to_s += conn.cin
            conn.cin.clear()
            return
        while not conn.hold_client and conn.state == "open":
            if not conn.c_hs and len(conn.cin) >= 4 and bytes(conn.cin[:4]).isalpha():
                # a four-letter word (ruok, srvr, ...): pass bytes through
                conn.raw = True
                self.log("%s: four-letter word, raw pass-through" % conn.label())
                conn.to_s += conn.cin
                conn.cin.clear()
                return
            data = self._next_packet(conn.cin, not conn.c_hs)
            if data is None:
                return
            if not conn.c_hs:
                conn.c_hs = True
                op, xid, handshake = OP_CONNECT, None, True
            else:
                handshake = False
                if len(data) >= 12:
                    xid, op = struct.unpack(">ii", data[4:12])
                else:
                    xid, op = None, None
            name = op_name(op) if op is not None else "?"
            rpath = None if handshake else request_path(op, data)
            drop = None
            for r in self.rules:
                if r.kind == "drop-requests" and r.matches(op, handshake, rpath):
                    drop = r
                    break
            if drop is not None:
                self.stats["dropped_requests"] += 1
                self.fire(drop, conn, "request %s xid %s not forwarded" % (name, xid))
                continue
            self.stats["requests"][name] += 1
            if op in (8, 12) and len(data) >= 16:
                # a listing: count it by path too (tests assert which node was listed)
                plen = struct.unpack(">i", data[12:16])[0]
                if 0 <= plen <= len(data) - 16:
                    lp = data[16:16 + plen].decode("utf-8", "replace")
                    if lp in self.stats["listed"] or len(self.stats["listed"]) < 10000:
                        self.stats["listed"][lp] += 1
            if self.trace:
                self.log("%s: request %s xid %s len %d" % (conn.label(), name, xid, len(data) - 4))
            if xid is not None:
                conn.pending.setdefault(xid, collections.deque()).append(op)
                conn.npending += 1
                if conn.npending > self.peak_pending:
                    self.peak_pending = conn.npending
            conn.to_s += data
            if handshake:
                continue
            for r in list(self.rules):
                if r.kind == "cut-after-request" and r.matches(op, False, rpath):
                    r.seen += 1
                    if r.seen >= r.n:
                        self.rules.remove(r)
                        self.log("%s: rule %d (%s) armed: request %s xid %d forwarded, "
                                 "cutting when its reply arrives" % (conn.label(), r.id, r.text, name, xid))
                        conn.hold_client = True
                        conn.cut_xid = xid
                        conn.cut_rst = r.rst
                        conn.cut_rule = r
                        conn.cut_deadline = time.monotonic() + CUT_REPLY_WAIT
                        return

    def server_data(self, conn):
        if conn.raw:
            if not conn.server_done:
                conn.to_c.append(Packet(bytes(conn.sin), 0.0, None))
            conn.sin.clear()
            return
        now = time.monotonic()
        while conn.state == "open":
            data = self._next_packet(conn.sin, not conn.s_hs)
            if data is None:
                return
            if conn.server_done:
                continue
            if not conn.s_hs:
                conn.s_hs = True
                op, xid, handshake, err = OP_CONNECT, None, True, 0
            else:
                handshake = False
                xid = err = None
                op = None
                if len(data) >= 20:
                    xid, _zxid, err = struct.unpack(">iqi", data[4:20])
                elif len(data) >= 8:
                    (xid,) = struct.unpack(">i", data[4:8])
                if xid == -1:
                    op = OP_NOTIFICATION
                elif xid is not None:
                    q = conn.pending.get(xid)
                    if q:
                        op = q.popleft()
                        conn.npending -= 1
                        if not q:
                            del conn.pending[xid]
            name = op_name(op) if op is not None else "?"
            self.stats["replies"][name] += 1
            if self.trace:
                self.log("%s: reply %s xid %s err %s len %d" % (conn.label(), name, xid, err, len(data) - 4))
            if conn.cut_xid is not None and not handshake and xid == conn.cut_xid:
                # the request landed: its reply and everything after it are lost
                conn.server_done = True
                conn.cut_deadline = None
                conn.to_c.append(Packet(b"", 0.0, op, cut=True, rst=conn.cut_rst, rule=conn.cut_rule))
                continue
            release = 0.0
            for r in self.rules:
                if r.kind == "drop-replies" and r.matches(op, handshake):
                    release = float("inf")
                    self.stats["held_replies"] += 1
                    self.fire(r, conn, "reply %s xid %s held for good" % (name, xid))
                    break
                if r.kind == "delay-replies" and r.matches(op, handshake):
                    release = max(release, now + r.ms / 1000.0)
                    self.fire(r, conn, "reply %s xid %s delayed %d ms" % (name, xid, r.ms))
            pkt = Packet(data, release, op)
            if not handshake:
                for r in list(self.rules):
                    if r.kind == "cut-after-reply" and r.matches(op, False):
                        r.seen += 1
                        if r.seen >= r.n:
                            self.rules.remove(r)
                            self.log("%s: rule %d (%s) armed: reply %s xid %s, cutting once it is delivered"
                                     % (conn.label(), r.id, r.text, name, xid))
                            pkt.cut = True
                            pkt.rst = r.rst
                            pkt.rule = r
                            conn.server_done = True
                            break
            conn.to_c.append(pkt)

    def fire(self, rule, conn, what):
        self.stats["fired"][rule.text] += 1
        self.stats["fired_ids"][str(rule.id)] += 1
        self.log("%s: rule %d (%s) fired: %s" % (conn.label(), rule.id, rule.text, what))

    def flush_client(self, conn, now):
        while conn.state == "open" and conn.to_c:
            p = conn.to_c[0]
            if p.release > now:
                return
            if p.cut and p.rst:
                # the reset must follow the data as closely as possible: the
                # client is to read the reply, then find the socket reset
                try:
                    conn.c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            if p.off < len(p.data):
                try:
                    n = conn.c.send(memoryview(p.data)[p.off:])
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as e:
                    self.close_conn(conn, "client send failed: %s" % e)
                    return
                p.off += n
                if p.off < len(p.data):
                    return
            if p.cut and p.rst:
                self._forget(conn.c)  # close at once: the reset goes out now
                conn.c = None
            conn.to_c.popleft()
            if p.data and not conn.raw:
                self.stats["delivered"][op_name(p.op) if p.op is not None else "?"] += 1
            if p.cut:
                what = "%s %s" % ("the reply to" if p.data else "losing the reply to", op_name(p.op))
                if p.rule is not None:
                    self.fire(p.rule, conn, "connection cut after " + what)
                self.cut(conn, "after " + what, p.rst)
                return

    def flush_server(self, conn):
        if conn.state != "open" or not conn.to_s or not conn.s_connected:
            return
        try:
            n = conn.s.send(conn.to_s)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.close_conn(conn, "upstream send failed: %s" % e)
            return
        del conn.to_s[:n]

    def recv_side(self, conn, sock, side, closed):
        """What sock (conn's client or server socket) has to read: bytes, or
        None (nothing now, or conn closed: a failure, "SIDE recv failed", or
        the end of the stream, "CLOSED")."""
        try:
            d = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as e:
            self.close_conn(conn, "%s recv failed: %s" % (side, e))
            return None
        if d == b"":
            self.close_conn(conn, closed)
            return None
        return d

    def handle_conn_event(self, conn, sock, mask, now):
        if conn.state == "draining":
            if sock is conn.c and mask & selectors.EVENT_READ:
                try:
                    d = conn.c.recv(65536)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    d = b""
                if not d:
                    self.close_conn(conn, "client closed after the cut")
            return
        if conn.state != "open":
            return
        if sock is conn.s:
            if not conn.s_connected and mask & selectors.EVENT_WRITE:
                err = conn.s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    self.close_conn(conn, "upstream connect failed: %s" % os.strerror(err))
                    return
                conn.s_connected = True
            if mask & selectors.EVENT_READ:
                d = self.recv_side(conn, conn.s, "upstream", "upstream closed")
                if conn.state != "open":
                    return
                if d:
                    conn.sin += d
                    self.server_data(conn)
            if conn.state == "open" and mask & selectors.EVENT_WRITE:
                self.flush_server(conn)
        elif sock is conn.c:
            if mask & selectors.EVENT_READ:
                d = self.recv_side(conn, conn.c, "client",
                                   "client closed" + (" in mid-packet" if conn.cin else ""))
                if conn.state != "open":
                    return
                if d:
                    conn.cin += d
                    self.client_data(conn)
                    self.flush_server(conn)
            if conn.state == "open" and mask & selectors.EVENT_WRITE:
                self.flush_client(conn, now)

    def update_interest(self, now):
        """Register what each socket waits for; return the next timer (monotonic) or None."""
        nxt = None
        for conn in list(self.conns):
            if conn.state == "draining":
                self._want(conn.c, selectors.EVENT_READ)
                nxt = conn.drain_deadline if nxt is None else min(nxt, conn.drain_deadline)
                continue
            if self.frozen:
                self._want(conn.c, 0)
                self._want(conn.s, 0)
                continue
            cev = 0
            if not conn.hold_client or conn.raw:
                cev |= selectors.EVENT_READ
            elif len(conn.cin) < MAX_PACKET:
                cev |= selectors.EVENT_READ  # keep reading (and buffering) so EOF is seen
            if conn.to_c:
                head = conn.to_c[0]
                if head.release <= now:
                    cev |= selectors.EVENT_WRITE
                elif head.release != float("inf"):
                    nxt = head.release if nxt is None else min(nxt, head.release)
            sev = 0
            if not conn.s_connected:
                sev = selectors.EVENT_WRITE
            else:
                sev = selectors.EVENT_READ
                if conn.to_s:
                    sev |= selectors.EVENT_WRITE
            self._want(conn.c, cev)
            self._want(conn.s, sev)
            if conn.cut_deadline is not None:
                nxt = conn.cut_deadline if nxt is None else min(nxt, conn.cut_deadline)
        for sock, (inb, outb) in self.ctl_clients.items():
            self._want(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if outb else 0))
        return nxt

    def timers(self, now):
        for conn in list(self.conns):
            if conn.state == "draining" and now >= conn.drain_deadline:
                self.close_conn(conn, "drained")
            elif (conn.state == "open" and not self.frozen and conn.cut_deadline is not None
                  and now >= conn.cut_deadline):
                self.log("%s: no reply to xid %d within %.0fs" % (conn.label(), conn.cut_xid, CUT_REPLY_WAIT))
                conn.server_done = True
                conn.cut_deadline = None
                conn.to_c.append(Packet(b"", 0.0, None, cut=True, rst=conn.cut_rst, rule=conn.cut_rule))
            if conn.state == "open" and not self.frozen:
                self.flush_client(conn, now)

    # ---- control ----

    def control_accept(self):
        while True:
            try:
                s, _ = self.control.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            s.setblocking(False)
            self.ctl_clients[s] = [bytearray(), bytearray()]

    def control_event(self, sock, mask):
        inb, outb = self.ctl_clients[sock]
        if mask & selectors.EVENT_READ:
            try:
                d = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                d = None
            except OSError:
                d = b""
            if d == b"":
                self.control_close(sock)
                return
            if d:
                inb += d
                while b"\n" in inb:
                    line, _, rest = bytes(inb).partition(b"\n")
                    inb[:] = rest
                    answer = self.command(line.decode("utf-8", "replace").strip())
                    outb += (answer.replace("\n", " ") + "\n").encode()
                if len(inb) > 65536:
                    self.control_close(sock)
                    return
        if outb:
            try:
                n = sock.send(outb)
                del outb[:n]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self.control_close(sock)

    def control_close(self, sock):
        self.ctl_clients.pop(sock, None)
        self._forget(sock)

    def command(self, line):
        if not line:
            return "error empty command"
        words = line.split()
        verb = words[0].lower()
        args = words[1:]
        try:
            answer = self._command(verb, args, " ".join(words))
        except ValueError as e:
            answer = "error %s" % e
        self.log("control: %s -> %s" % (line, answer if len(answer) < 200 else answer[:200] + "..."))
        return answer

    def _command(self, verb, args, text):
        now = time.monotonic()
        if verb in ("cut-after-request", "cut-after-reply"):
            args, path = split_path_arg(args)
            if path is not None and verb != "cut-after-request":
                raise ValueError("path=P is for cut-after-request and drop-requests")
            if not 1 <= len(args) <= 3:
                raise ValueError("usage: %s OP [N] [rst]%s" % (verb, " [path=P]" if verb == "cut-after-request" else ""))
            op = parse_op(args[0], allow_all=True)
            n, rst = 1, False
            for a in args[1:]:
                if a.lower() == "rst":
                    rst = True
                else:
                    n = int(a)
                    if n < 1:
                        raise ValueError("N must be at least 1")
            r = Rule(verb, op, n=n, rst=rst, text=text, path=path)
            self.rules.append(r)
            return "ok rule %d: %s" % (r.id, text)
        if verb == "delay-replies":
            if len(args) != 2:
                raise ValueError("usage: delay-replies OP|all MS")
            op = parse_op(args[0], allow_all=True)
            ms = int(args[1])
            if ms < 0:
                raise ValueError("MS must not be negative")
            r = Rule(verb, op, ms=ms, text=text)
            self.rules.append(r)
            return "ok rule %d: %s" % (r.id, text)
        if verb in ("drop-replies", "drop-requests"):
            args, path = split_path_arg(args)
            if path is not None and verb != "drop-requests":
                raise ValueError("path=P is for cut-after-request and drop-requests")
            if len(args) != 1:
                raise ValueError("usage: %s OP|all%s" % (verb, " [path=P]" if verb == "drop-requests" else ""))
            r = Rule(verb, parse_op(args[0], allow_all=True), text=text, path=path)
            self.rules.append(r)
            return "ok rule %d: %s" % (r.id, text)
        if verb == "refuse":
            if len(args) != 1:
                raise ValueError("usage: refuse SECONDS")
            secs = float(args[0])
            self.refuse_until = now + secs if secs > 0 else 0.0
            return "ok refusing for %gs" % secs if secs > 0 else "ok not refusing"
        if verb == "cut-all":
            rst = bool(args) and args[0].lower() == "rst"
            n = 0
            for conn in list(self.conns):
                if conn.state == "open":
                    self.cut(conn, "cut-all", rst)
                    n += 1
                elif conn.state == "draining":
                    self.close_conn(conn, "cut-all")
            self.stats["fired"][text] += 1
            return "ok cut %d connections" % n
        if verb == "freeze":
            self.frozen = True
            return "ok frozen"
        if verb == "thaw":
            self.frozen = False
            return "ok thawed"
        if verb == "release":
            n = 0
            for conn in self.conns:
                for p in conn.to_c:
                    if p.release == float("inf"):
                        p.release = now
                        n += 1
            return "ok released %d replies" % n
        if verb == "clear":
            if len(args) != 1:
                raise ValueError("usage: clear RULE-ID")
            rid = int(args[0])
            for r in self.rules:
                if r.id == rid:
                    self.rules.remove(r)
                    return "ok cleared rule %d: %s" % (rid, r.text)
            return "ok no rule %d (fired or cleared already)" % rid
        if verb == "reset":
            n = len(self.rules)
            self.rules = []
            self.frozen = False
            self.refuse_until = 0.0
            return "ok cleared %d rules" % n
        if verb == "rules":
            return "ok " + json.dumps([r.describe() for r in self.rules])
        if verb == "stats":
            return "ok " + json.dumps(self.stats_json(now), sort_keys=True)
        if verb == "peak-reset":
            self.peak_pending = max([c.npending for c in self.conns] + [0])
            return "ok peak %d" % self.peak_pending
        if verb == "ping":
            return "ok pong"
        if verb in ("quit", "exit"):
            self.stopping = True
            return "ok bye"
        if verb == "help":
            return "ok commands: cut-after-request cut-after-reply delay-replies drop-replies " \
                   "drop-requests refuse cut-all freeze thaw release clear reset rules stats peak-reset ping quit"
        raise ValueError("unknown command %r" % verb)

    def stats_json(self, now):
        s = self.stats
        return {
            "accepted": s["accepted"],
            "open": sum(1 for c in self.conns if c.state == "open"),
            "refused": s["refused"],
            "closed": s["closed"],
            "cuts": s["cuts"],
            "dropped_requests": s["dropped_requests"],
            "held_replies": s["held_replies"],
            "requests": dict(s["requests"]),
            "listed": dict(s["listed"]),
            "replies": dict(s["replies"]),
            "delivered": dict(s["delivered"]),
            "fired": dict(s["fired"]),
            "fired_ids": dict(s["fired_ids"]),
            "fired_total": sum(s["fired"].values()),
            "rules": [r.describe() for r in self.rules],
            "frozen": self.frozen,
            "refusing": now < self.refuse_until,
            "peak_pending": self.peak_pending,
        }

    # ---- main loop ----

    def run(self):
        self.log("listening on 127.0.0.1:%d, upstream %s, control on 127.0.0.1:%d"
                 % (self.args.listen, ",".join("%s:%d" % u for u in self.upstreams), self.args.control))
        while not self.stopping:
            now = time.monotonic()
            nxt = self.update_interest(now)
            timeout = 0.5
            if nxt is not None:
                timeout = max(0.0, min(timeout, nxt - now))
            try:
                events = self.sel.select(timeout)
            except InterruptedError:
                events = []
            now = time.monotonic()
            for key, mask in events:
                sock = key.fileobj
                try:
                    if sock is self.wake_r:
                        try:
                            self.wake_r.recv(4096)
                        except OSError:
                            pass
                    elif sock is self.listener:
                        self.accept()
                    elif sock is self.control:
                        self.control_accept()
                    elif sock in self.ctl_clients:
                        self.control_event(sock, mask)
                    else:
                        conn = self._conn_of(sock)
                        if conn is None:
                            self._forget(sock)
                            continue
                        try:
                            self.handle_conn_event(conn, sock, mask, now)
                        except ValueError as e:
                            self.close_conn(conn, "protocol error: %s" % e)
                except Exception as e:  # never let one connection end the proxy
                    self.log("unexpected error: %r" % (e,))
                    conn = self._conn_of(sock)
                    if conn is not None:
                        self.close_conn(conn, "unexpected error")
            self.timers(time.monotonic())
        self.shutdown()

    def _conn_of(self, sock):
        for conn in self.conns:
            if sock is conn.c or sock is conn.s:
                return conn
        return None

    def shutdown(self):
        self.log("stopping: %d connections open" % len(self.conns))
        for conn in list(self.conns):
            self.close_conn(conn, "proxy stopping")
        for sock in list(self.ctl_clients):
            try:
                outb = self.ctl_clients[sock][1]
                if outb:
                    sock.setblocking(True)
                    sock.settimeout(1.0)
                    sock.sendall(outb)
            except OSError:
                pass
            self.control_close(sock)
        for s in (self.listener, self.control, self.wake_r, self.wake_w):
            self._forget(s)
        self.sel.close()
        if self.args.pidfile:
            try:
                os.unlink(self.args.pidfile)
            except OSError:
                pass
        self.log("stopped")


def main(argv):
    ap = argparse.ArgumentParser(description="fault-injecting ZooKeeper proxy")
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--upstream", action="append", required=True)
    ap.add_argument("--control", type=int, required=True)
    ap.add_argument("--pidfile")
    ap.add_argument("--log")
    ap.add_argument("--trace", action="store_true", help="log every packet")
    args = ap.parse_args(argv[1:])

    proxy = Proxy(args)

    def on_signal(signum, frame):
        proxy.stopping = True
        try:
            proxy.wake_w.send(b"x")
        except OSError:
            pass

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if args.pidfile:
        with open(args.pidfile, "w") as f:
            f.write("%d\n" % os.getpid())
    proxy.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
