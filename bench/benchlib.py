"""bench/benchlib.py - what the benchmarks' Python drivers share.

four_letter(host, port, word): a ZooKeeper four-letter word's answer, as text.
mntr_packets(port): zk_packets_received of the server on 127.0.0.1:port (the mntr
request itself counts as one packet).
"""

import socket


def four_letter(host, port, word, timeout=10):
    """The answer of ZooKeeper at host:port to a four-letter word"""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    return out.decode(errors="replace")


def mntr_packets(port):
    """zk_packets_received of the server on 127.0.0.1:port (one packet itself)"""
    for line in four_letter("127.0.0.1", port, "mntr", timeout=5).splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == "zk_packets_received":
            return int(f[1])
    raise RuntimeError("no zk_packets_received in mntr answer of 127.0.0.1:%d" % port)
