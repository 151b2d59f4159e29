#!/usr/bin/python3
"""report.py - the lock benchmark's table, from the per-round results that
bench/run.sh writes (one line per case and round):

  round|shape|contender|clients|cycles|seconds|cycles_per_sec|zk_packets|p50_us|p99_us|max_us|status|note

  report.py lock RESULTS.psv CLIENTS

For every shape and contender: the median cycles/s over the rounds, each
round's cycles/s, and of the median round the ZooKeeper requests per cycle
and the cycle latency p50/p99/max; then zklock's ratios to every peer and
its SQL overhead per cycle against the raw C client at 1 client.
"""

import re
import sys

ORDER = ["zklock", "curator", "kazoo", "zkbench", "advisory"]
LABEL = {
    "zklock": "zklock (pgbench)",
    "curator": "Curator InterProcessMutex",
    "kazoo": "kazoo Lock",
    "zkbench": "raw C zkbench -p -a",
    "advisory": "pg_advisory_xact_lock",
}
SHAPES = ["one", "distinct", "shared"]


# CPU figures run.sh puts in a case's note (key=value, us per cycle)
CPU_RE = re.compile(r"(cpu_(?:backend|worker|client)_us)=([0-9.]+)")


def shape_label(shape, clients):
    return {"one": "1 client",
            "distinct": "%s clients, distinct names" % clients,
            "shared": "%s clients, one shared name" % clients}[shape]


def fnum(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def ms(us):
    v = fnum(us)
    return "-" if v is None else "%.2f" % (v / 1000.0)


def main():
    if len(sys.argv) != 4 or sys.argv[1] != "lock":
        print("usage: report.py lock RESULTS.psv CLIENTS", file=sys.stderr)
        return 2
    clients = sys.argv[3]
    rows = []
    with open(sys.argv[2]) as f:
        for line in f:
            p = line.rstrip("\n").split("|")
            if len(p) < 13:
                continue
            rows.append(dict(zip(["round", "shape", "who", "clients", "cycles", "seconds", "cps", "pk",
                                  "p50", "p99", "max", "status", "note"], p[:12] + ["|".join(p[12:])])))

    med = {}      # (shape, who) -> median row
    failed_any = False
    shapes = [s for s in SHAPES if any(r["shape"] == s for r in rows)]
    whos = [w for w in ORDER if any(r["who"] == w for r in rows)]
    for shape in shapes:
        print()
        print("lock cycle, %s" % shape_label(shape, clients))
        hdr = "  %-27s %10s  %-24s %8s  %27s  %s" % (
            "contender", "cycles/s", "each round", "req/cyc", "cycle latency ms p50/p99/max", "notes")
        print(hdr)
        print("  " + "-" * (len(hdr) - 2))
        for who in whos:
            rs = sorted((r for r in rows if r["shape"] == shape and r["who"] == who), key=lambda r: int(r["round"]))
            if not rs:
                continue
            ok = [r for r in rs if r["status"] == "ok" and fnum(r["cps"])]
            each = " ".join(("%.0f" % fnum(r["cps"])) if (r["status"] == "ok" and fnum(r["cps"])) else "FAILED"
                            for r in rs)
            bad = len(ok) < len(rs)
            failed_any = failed_any or bad
            if not ok:
                print("  %-27s %10s  %-24s %8s  %27s  %s" % (LABEL[who], "FAILED", each, "-", "-",
                                                           "; ".join(r["note"] for r in rs if r["note"])))
                continue
            srt = sorted(ok, key=lambda r: fnum(r["cps"]))
            m = srt[(len(srt) - 1) // 2]
            med[(shape, who)] = m
            cyc = fnum(m["cycles"])
            pk = fnum(m["pk"])
            rpc = "-" if not cyc or pk is None else "%.2f" % (pk / cyc)
            if who == "advisory":
                rpc = "(%s)" % rpc
            lat = "%s / %s / %s" % (ms(m["p50"]), ms(m["p99"]), ms(m["max"]))
            note = CPU_RE.sub("", m["note"]).strip()
            if bad:
                note = ("%d of %d rounds FAILED; " % (len(rs) - len(ok), len(rs))) + note
            print("  %-27s %10.1f  %-24s %8s  %27s  %s" % (LABEL[who], fnum(m["cps"]), each, rpc, lat, note))

    print()
    print("ratios of the median cycles/s (zklock / peer):")
    peers = [w for w in ["curator", "kazoo", "zkbench", "advisory"] if w in whos]
    head = "  %-28s" % "shape" + "".join("%14s" % ("vs " + {"curator": "Curator", "kazoo": "kazoo",
                                                              "zkbench": "raw C", "advisory": "advisory"}[w])
                                          for w in peers)
    print(head)
    for shape in shapes:
        z = med.get((shape, "zklock"))
        cells = []
        for w in peers:
            p = med.get((shape, w))
            if z is None or p is None:
                cells.append("-")
            else:
                cells.append("%.2f" % (fnum(z["cps"]) / fnum(p["cps"])))
        print("  %-28s" % shape_label(shape, clients) + "".join("%14s" % c for c in cells))

    cpu_rows = []
    for shape in shapes:
        cells = []
        for who in whos:
            m = med.get((shape, who))
            cpu = dict(CPU_RE.findall(m["note"])) if m else {}
            if "cpu_backend_us" in cpu and "cpu_worker_us" in cpu:
                b, w = float(cpu["cpu_backend_us"]), float(cpu["cpu_worker_us"])
                cells.append("%s %.0f (backends %.0f + worker %.0f)" % (LABEL[who], b + w, b, w))
            elif "cpu_backend_us" in cpu:
                cells.append("%s %.0f (backends)" % (LABEL[who], float(cpu["cpu_backend_us"])))
            elif "cpu_client_us" in cpu:
                cells.append("%s %.0f" % (LABEL[who], float(cpu["cpu_client_us"])))
        if cells:
            cpu_rows.append("  %s: %s" % (shape_label(shape, clients), "; ".join(cells)))
    if cpu_rows:
        print()
        print("CPU per cycle, us (the round with the median cycles/s; ZooKeeper's own CPU not included):")
        for r in cpu_rows:
            print(r)
        print("  zklock, advisory: the PostgreSQL backends (pgbench's connections) and zklock's worker, not")
        print("  pgbench itself; Curator, kazoo: the whole client process (its threads, JIT, GC) over the window.")

    z1 = med.get(("one", "zklock"))
    c1 = med.get(("one", "zkbench"))
    if z1 and c1:
        d_tp = 1e6 / fnum(z1["cps"]) - 1e6 / fnum(c1["cps"])
        d_p50 = (fnum(z1["p50"]) or 0) - (fnum(c1["p50"]) or 0)
        print()
        print("zklock's SQL overhead per cycle at 1 client, against the raw C client:")
        print("  %+.0f us per cycle from cycles/s (1/zklock - 1/raw C), %+.0f us from the p50 latencies"
              % (d_tp, d_p50))
        print("  (zklock's cycle is pgbench's transaction BEGIN; SELECT zk_lock(...); COMMIT: three")
        print("  statements over a unix socket, the backend, the worker and the same ZooKeeper requests)")
        a1 = med.get(("one", "advisory"))
        if a1:
            floor = 1e6 / fnum(a1["cps"])
            print("  of which PostgreSQL's own statement path (the advisory cycle, same three statements")
            print("  through pgbench): %.0f us; the rest, %+.0f us, is the backend's hop to the worker and back"
                  % (floor, d_tp - floor))
            print("  plus what the worker does beyond the raw C client.  Even with nothing but that floor added,")
            print("  zklock could reach %.2f x raw C at 1 client." % ((1e6 / fnum(c1["cps"])) /
                                                                   (1e6 / fnum(c1["cps"]) + floor)))

    print()
    print("notes:")
    print("  cycles/s: median over the rounds; 'each round' in round order.  One cycle = acquire + release.")
    print("  req/cyc and latency: of the round with the median cycles/s.")
    print("  req/cyc: growth of ZooKeeper's mntr zk_packets_received / cycles.  zklock, advisory, zkbench:")
    print("    over the whole case (zkbench also counts its clients' connects and parent creates, ~5 each);")
    print("    Curator, kazoo: over their timed window, after their warm-up.  Includes pings.  Advisory")
    print("    locks send nothing to ZooKeeper: their figure (in parentheses) is the noise.")
    print("  cycle latency: from the start of the acquire until the release is done, per cycle:")
    print("    zklock and advisory: pgbench's per-transaction latency (--log), BEGIN to COMMIT returned;")
    print("    zklock's COMMIT does not wait for the delete.  Curator, kazoo: acquire() called until")
    print("    release() returned (it waits for the delete's reply).  zkbench -p -a: create and")
    print("    get_children pipelined, then the delete sent without waiting for its reply.")
    print("  clients: pgbench connections (zklock: one ZooKeeper session, the worker's, for all);")
    print("    Curator and kazoo: threads on ONE client (one session); zkbench: processes, a session each.")
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
