#!/usr/bin/python3
"""report.py - the table of bench/counter/run.sh.

  report.py RESULTS.psv CLIENTS...

RESULTS.psv: one line per case, round|contender|clients|driver's line|exit status.
For every shape (number of clients) and contender: the median increments/s
over the rounds, ZooKeeper requests per increment and latencies of the
median round, every round's figure, and the check of all rounds; then the
ratios zklock/kazoo and zklock/Curator of the medians.
"""

import sys

LABELS = {"zklock": "zklock zk_counter_add",
          "kazoo": "kazoo Counter",
          "curator": "Curator DistributedAtomicLong"}
ORDER = ["zklock", "kazoo", "curator"]


def kv(line):
    out = {}
    for f in line.split():
        if "=" in f:
            k, v = f.split("=", 1)
            out[k] = v
    return out


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "-"
    return "%.2f" % (a / b)


def ms(us):
    return "-" if us is None else "%.1f" % (int(us) / 1000)


def main():
    path = sys.argv[1]
    shapes = [int(s) for s in sys.argv[2:]]
    cases = {}   # (contender, clients) -> [(round, fields or None, rc)]
    with open(path) as f:
        for raw in f:
            raw = raw.rstrip("\n")
            if not raw:
                continue
            r, who, c, line, rc = raw.split("|")
            fields = kv(line) if line else None
            cases.setdefault((who, int(c)), []).append((int(r), fields, int(rc)))
    contenders = [d for d in ORDER if any(k[0] == d for k in cases)]
    medians = {}
    fmt = "  %-30s %10s %9s  %-26s %21s  %s"
    for c in shapes:
        print()
        print("one shared counter, %d client(s), each adding 1 in a loop" % c)
        print(fmt % ("contender", "incs/s", "req/inc", "incs/s of each round", "latency ms p50/p99/max",
                     "check (all rounds): final value - initial = acknowledged, values distinct"))
        print(fmt % ("---------", "------", "-------", "--------------------", "----------------------",
                     "--------------------------------------------------------------------"))
        for d in contenders:
            rounds = sorted(cases.get((d, c), []), key=lambda x: x[0])
            ok_rounds = [(r, f) for r, f, rc in rounds if f is not None and "incs_per_sec" in f]
            each = " ".join(("%s" % f["incs_per_sec"]) if f is not None and "incs_per_sec" in f else "FAILED"
                            for _, f, _ in rounds)
            bad = []
            acked = failed = 0
            for r, f, rc in rounds:
                if f is None:
                    bad.append("round %d FAILED (exit %d)" % (r, rc))
                    continue
                acked += int(f.get("acked_total", 0))
                failed += int(f.get("failed_total", 0))
                if f.get("verify") != "ok" or rc != 0:
                    bad.append("round %d: lost %s, duplicates %s, out of range %s, errors %s, exit %d"
                               % (r, f.get("lost"), f.get("duplicates"), f.get("out_of_range"),
                                  f.get("errors"), rc))
            chk = "%d acknowledged" % acked
            if d == "curator":
                chk += ", %d not succeeded (retries ran out; not counted)" % failed
            chk = ("NOT OK: " + "; ".join(bad) + "; " + chk) if bad else ("ok: " + chk)
            if not ok_rounds:
                print(fmt % (LABELS[d], "FAILED", "-", each, "-", chk))
                continue
            srt = sorted(ok_rounds, key=lambda x: float(x[1]["incs_per_sec"]))
            mr, mf = srt[(len(srt) - 1) // 2]   # the lower median with an even count
            medians[(d, c)] = float(mf["incs_per_sec"])
            print(fmt % (LABELS[d], mf["incs_per_sec"], mf.get("packets_per_inc", "-"), each,
                         "%s / %s / %s" % (ms(mf.get("lat_p50_us")), ms(mf.get("lat_p99_us")),
                                           ms(mf.get("lat_max_us"))), chk))
    print()
    print("ratios of the median incs/s:")
    print("  %-12s %14s %16s %16s" % ("clients", "zklock/kazoo", "zklock/Curator", "Curator/kazoo"))
    for c in shapes:
        z, k, u = medians.get(("zklock", c)), medians.get(("kazoo", c)), medians.get(("curator", c))
        print("  %-12s %14s %16s %16s" % (c, ratio(z, k), ratio(z, u), ratio(u, k)))
    print()
    print("notes:")
    print("  incs/s: median over the rounds (the lower of the two middle ones with an even count) of the")
    print("    increments acknowledged in the timed window / window length; req/inc and latency: of that round.")
    print("  req/inc: mntr zk_packets_received delta over the window (minus one for the closing mntr) /")
    print("    increments of the window; includes lost compare-and-sets, retries and pings.")
    print("  check: after the clients closed, a fresh client read the counter: final - initial must equal")
    print("    every acknowledged increment (warm-up, window and the last ones), and the values the")
    print("    increments returned (zk_counter_add's result, Counter.post_value, AtomicValue.postValue)")
    print("    must be distinct and within (initial, final].")


if __name__ == "__main__":
    main()
