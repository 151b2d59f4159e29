#!/usr/bin/python3
"""model.py - zklock's model-based random API tester (issue 21, item 3).

usage: test/model/model.py [--seconds N] [--seed N] [--steps K] [--histories N]
                           [--recipes queue,lock,...] [--mode exact|concurrent|both]
                           [--shrink-seconds N] [--dir DIR] [--keep] [--verbose]

Starts one ZooKeeper server (tools/zk.sh) and two PostgreSQL 15 clusters, A
and B, that preload zklock and share it (test/faults/infra.py), all on
127.0.0.1 and on free ports, then runs histories until --seconds (default
60) have passed.  A history is a random sequence of calls by 2 to 5
sessions spread over both clusters and 0 to 2 kazoo clients, on one or two
recipes (queue, lock, semaphore, lease, gate, arrivals, barrier, election,
counter, campaign):
the recipe's calls with every kind of timeout, BEGIN, COMMIT, ROLLBACK,
SAVEPOINT, ROLLBACK TO, RELEASE, PREPARE TRANSACTION / COMMIT PREPARED /
ROLLBACK PREPARED, pg_cancel_backend, pg_terminate_backend and
statement_timeout.

Exact mode (the default for most histories): one thread drives every
session one statement at a time through asynchronous connections, so the
reference model of each recipe (m_*.py) knows at each step what is free, and
checks every answer: a try never waits, a wait with a short timeout times
out only when the model says the thing is taken, a waiter is served when it
becomes free, nothing phantom, nothing twice, and ZooKeeper holds exactly
the nodes the model says.  Concurrent mode (conc.py): threads race on the
same names; weaker checks (no overlap, no loss, no duplicate).

A watchdog calls zk_status() on each cluster every 200 ms and reports any
call that takes more than 1 s ("worker unresponsive").

The seed is printed at the start; history i runs with seed SEED+i.
test/model/found/ keeps the shortest histories of the bugs the generator
found, each with what was expected: --replay test/model/found/*.json runs
them (deterministic tests of those bugs).  When a
history shows an anomaly, its seed and the step are printed (it replays
with --seed S --steps K), and the history is shrunk (delta debugging over
its recorded ops, replayed on fresh names, for at most --shrink-seconds)
to the shortest list of calls that still shows the anomaly, which is
printed.  At the end: histories run, calls per recipe, anomalies.

Exit status: 0 no anomaly, 1 anomalies, 2 the run could not be set up.
Run as root, it copies what it needs to a directory under /tmp and runs
there as the postgres user (initdb refuses root).  Every server it starts
is stopped at the end, also on failure, SIGINT or SIGTERM.
"""

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from driver import SRC, Cluster, Watchdog, ZkServer, infra, log, now  # noqa: E402
from history import History  # noqa: E402
import m_queue  # noqa: E402
import m_lock  # noqa: E402

MODELS = {
    "queue": m_queue.QueueModel,
    "lock": m_lock.LockModel,
}
try:
    import m_more  # noqa: E402
    MODELS.update(m_more.MODELS)
except ImportError:
    m_more = None
import m_coord  # noqa: E402
MODELS.update(m_coord.MODELS)

ELECTION = "model-el"
# anomalies that are one symptom of a worker that stopped answering
WEDGE = {"slow-call", "worker-unresponsive", "hung", "wait-overrun", "waiter-not-woken"}


class Env:
    def __init__(self, args, directory):
        self.args = args
        self.dir = directory
        self.recipes = args.recipes
        self.zk = None
        self.clusters = {}
        self.kz = None
        self.watchdog = None

    def cluster(self, label):
        return self.clusters[label]

    def start(self):
        zk_ports, pg_ports = infra.free_ports(n_zk=1, n_pg=2)
        self.zk = ZkServer(os.path.join(self.dir, "zk"), zk_ports[0])
        self.zk.start()
        log("ZooKeeper on %s" % self.zk.hosts)
        settings = {
            "max_prepared_transactions": "4",
            "zklock.connect_timeout": "3s",
            "zklock.elections": ELECTION,
            "max_connections": "60",
            # the deadlock detector across servers checks a zk lock wait this
            # old (m_lock.py's circles of waits, conc.py's crossed lockers)
            "deadlock_timeout": "500ms",
        }
        for label, port in zip("AB", pg_ports):
            c = Cluster(label, os.path.join(self.dir, "pg" + label), port, self.zk.hosts, settings)
            self.clusters[label] = c
            c.create()
            c.start()
            c.query("CREATE EXTENSION IF NOT EXISTS zklock")
            st = c.wait_connected(timeout=60)
            if not st or st.get("state") != "connected":
                raise RuntimeError("cluster %s: zklock not connected: %r\n%s" % (label, st, c.log_tail(8)))
            log("cluster %s on 127.0.0.1:%d, zklock connected" % (label, port))
        from kazoo.client import KazooClient
        import logging
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        self.kz = KazooClient(hosts=self.zk.hosts, timeout=10.0)
        self.kz.start(timeout=15)
        self.watchdog = Watchdog(list(self.clusters.values()))
        self.watchdog.start()

    def healthy(self, c):
        try:
            t0 = now()
            conn = c.connect(timeout=3, options="-c statement_timeout=3s")
            try:
                conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute("SELECT state FROM zk_status()")
                    st = cur.fetchone()[0]
            finally:
                conn.close()
            return st == "connected" and now() - t0 < 1.5
        except Exception:
            return False

    def ensure_healthy(self, force=False):
        bad = [c for c in self.clusters.values() if force or not self.healthy(c)]
        if not bad:
            return
        self.watchdog.pause()
        try:
            for c in bad:
                log("restarting cluster %s" % c.label)
                c.hard_stop(immediate=True)
                c.start()
                st = c.wait_connected(timeout=60)
                if not st or st.get("state") != "connected":
                    raise RuntimeError("cluster %s does not come back: %r" % (c.label, st))
        finally:
            self.watchdog.take()
            self.watchdog.resume()

    def stop(self):
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.kz is not None:
            try:
                self.kz.stop()
                self.kz.close()
            except Exception:
                pass
        for c in self.clusters.values():
            try:
                c.hard_stop()
            except Exception as e:
                log("stopping cluster %s: %r" % (c.label, e))
        if self.zk is not None:
            self.zk.stop()


class Figures:
    def __init__(self):
        self.histories = collections.Counter()
        self.calls = collections.Counter()
        self.anomalies = collections.Counter()
        self.tallies = collections.Counter()   # what the models count beside calls (h.tallies)
        self.failed = []          # (seed, steps, kinds, shrunk trace)

    def add(self, h, mode="exact"):
        self.histories[mode] += 1
        self.calls.update(h.calls)
        self.tallies.update(getattr(h, "tallies", {}))

    def line(self):
        calls = ", ".join("%s %d" % (k, v) for k, v in sorted(self.calls.items()))
        an = ", ".join("%s %d" % (k, v) for k, v in sorted(self.anomalies.items())) or "none"
        ev = "".join("; %s %d" % kv for kv in sorted(self.tallies.items()))
        return ("histories %d (%s); calls %d (%s)%s; anomalies %d (%s)"
                % (sum(self.histories.values()),
                   ", ".join("%s %d" % kv for kv in sorted(self.histories.items())),
                   sum(self.calls.values()), calls, ev, sum(self.anomalies.values()), an))


def replay_cmd(args, seed, steps):
    extra = ""
    if args.recipes != default_recipes():
        extra = " --recipes " + ",".join(args.recipes)
    return "test/model/model.py --seed %d --steps %d%s   (or: tools/test.sh model --seed %d --steps %d%s)" % (
        seed, steps, extra, seed, steps, extra)


def default_recipes():
    return sorted(MODELS)


def run_history(env, args, seed, steps, ns, setup=None, ops=None, verbose=False):
    env.ensure_healthy()
    h = History(env, seed, steps, ns, setup=setup, ops=ops, verbose=verbose)
    try:
        h.run()
    except Exception as e:
        import traceback
        h.anomaly("harness", "the history failed: %r\n%s" % (e, traceback.format_exc()))
        h.fatal = True
    if h.fatal:
        env.ensure_healthy()
    return h


def shrink(env, args, h, budget):
    """Delta debugging over h's recorded ops: the shortest list that still
    shows an anomaly of the first one's kind."""
    kind = h.anomalies[0][0]
    last = h.anomalies[0][2]
    kinds = WEDGE if kind in WEDGE else {kind}
    ops = [op for op in h.ops if op.get("step", 0) <= last]
    t_end = now() + budget
    tries = [0]

    def fails(cand):
        tries[0] += 1
        r = run_history(env, args, h.seed, None, "%s-r%d" % (h.ns, tries[0]), setup=h.setup, ops=cand)
        return any(a[0] in kinds for a in r.anomalies), r

    ok, best = fails(ops)
    if not ok:
        return None, "the first %d ops did not show %s again on replay (it showed: %s)" % (
            len(ops), kind, "; ".join("%s: %s" % (a[0], a[1][:300]) for a in best.anomalies[:3]) or "nothing"), tries[0]
    ops = best.ops
    n = 2
    while len(ops) >= 2 and now() < t_end:
        size = max(1, len(ops) // n)
        chunks = [ops[i:i + size] for i in range(0, len(ops), size)]
        reduced = False
        for i in range(len(chunks)):
            if now() >= t_end:
                break
            cand = [op for j, c in enumerate(chunks) if j != i for op in c]
            ok, r = fails(cand)
            if ok:
                ops = r.ops
                best = r
                n = max(n - 1, 2)
                reduced = True
                break
        if not reduced:
            if n >= len(ops):
                break
            n = min(len(ops), n * 2)
    return best, None, tries[0]


def report(h, args, figures, env, shrunk_kinds):
    kinds = sorted(set(a[0] for a in h.anomalies))
    first = h.anomalies[0]
    steps = first[2] + 1
    log("ANOMALY in history seed %d (%d sessions %s, %d kazoo, recipes %s): %s"
        % (h.seed, len(h.sessions), "".join(h.setup["sessions"]), h.setup["kazoo"],
           ",".join(h.setup["recipes"]), ", ".join(kinds)))
    for kind, msg, step in h.anomalies[:8]:
        print("    step %d %s: %s" % (step, kind, msg), flush=True)
    print("  replay: " + replay_cmd(args, h.seed, steps), flush=True)
    entry = {"seed": h.seed, "steps": steps, "kinds": kinds, "shrunk": None}
    figures.failed.append(entry)
    if first[0] in shrunk_kinds or args.shrink_seconds <= 0:
        return
    shrunk_kinds.add(first[0])
    log("shrinking (at most %ds) ..." % args.shrink_seconds)
    best, why, tries = shrink(env, args, h, args.shrink_seconds)
    if best is None:
        log("not shrunk: %s (%d replays)" % (why, tries))
        return
    used = sorted(set(op.get("s", op.get("t")) for op in best.ops if "c" not in op) - {None})
    log("shrunk to %d ops in %d replays (sessions %s; %s):" % (
        len(best.ops), tries, ", ".join(best.sessions[i].name for i in used if i < len(best.sessions)),
        best.anomalies[0][0] if best.anomalies else "?"))
    lines = [ln for ln in best.trace]
    for ln in lines:
        print("    " + ln, flush=True)
    entry["shrunk"] = {"ops": best.ops, "trace": lines, "setup": best.setup}
    with open(os.path.join(env.dir, "shrunk-%d.json" % h.seed), "w") as f:
        json.dump(entry, f, indent=1, default=str)


def main_inner(args):
    seed0 = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10 ** 9)
    log("seed %d (replay a run: --seed %d; a history: --seed S --steps K as printed)" % (seed0, seed0))
    env = Env(args, args.dir)
    figures = Figures()
    shrunk_kinds = set()
    t_end = now() + args.seconds
    rc = 2
    try:
        env.start()
        rc = 0
        i = 0
        while True:
            if args.replay and i >= len(args.replay):
                break
            if args.replay:
                path = args.replay[i]
                with open(path) as f:
                    entry = json.load(f)
                sh = entry["shrunk"] or entry
                log("replay %s%s" % (path, (": " + entry["about"]) if entry.get("about") else ""))
                h = run_history(env, args, entry.get("seed", 0), None, "r%d" % i, setup=sh["setup"], ops=sh["ops"])
                figures.add(h)
                for ln in h.trace:
                    print("    " + ln)
                for a in h.anomalies:
                    figures.anomalies[a[0]] += 1
                log("replay %s: %s" % (os.path.basename(path), ", ".join(sorted(set(a[0] for a in h.anomalies)))
                                       or "no anomaly"))
                if h.anomalies:
                    rc = 1
                    figures.failed.append({"seed": entry.get("seed", 0), "kinds": sorted(set(a[0] for a in h.anomalies))})
                i += 1
                continue
            if args.steps is not None and i >= args.histories:
                break
            if args.steps is None and now() >= t_end:
                break
            seed = seed0 + (0 if args.same_seed else i)
            mode = "exact"
            if args.mode == "concurrent" or (args.mode == "both" and i % 8 == 7):
                mode = "concurrent"
            if mode == "concurrent":
                import conc
                h = conc.run(env, args, seed, "c%d" % i)
                figures.add(h, "concurrent")
            else:
                steps = args.steps if args.steps is not None else random.Random(seed * 7919).randint(25, 70)
                h = run_history(env, args, seed, steps, "h%d" % i, verbose=args.verbose)
                figures.add(h)
            if args.verbose or h.anomalies:
                for ln in h.trace[-60:] if args.verbose else []:
                    print("    " + ln)
            if h.anomalies:
                for a in h.anomalies:
                    figures.anomalies[a[0]] += 1
                if any(a[0] not in args.ignore for a in h.anomalies):
                    rc = 1
                if mode == "exact":
                    report(h, args, figures, env, shrunk_kinds)
                else:
                    log("ANOMALY in concurrent history seed %d: %s" % (seed, "; ".join(
                        "%s: %s" % (a[0], a[1]) for a in h.anomalies[:6])))
                    figures.failed.append({"seed": seed, "kinds": sorted(set(a[0] for a in h.anomalies))})
            i += 1
            if i % 10 == 0:
                log("progress: " + figures.line())
    except Exception as e:
        import traceback
        traceback.print_exc()
        log("the run failed: %r" % e)
        rc = 2
    finally:
        env.stop()
    log("seed %d: %s; watchdog probes %d" % (seed0, figures.line(),
                                              env.watchdog.calls if env.watchdog else 0))
    for f in figures.failed:
        log("  failed history: seed %d%s: %s" % (f["seed"], (" steps %d" % f["steps"]) if "steps" in f else "",
                                                  ", ".join(f["kinds"])))
    log("verdict: %s" % ("no anomaly" if rc == 0 else ("ANOMALIES" if rc == 1 else "the run did not complete")))
    return rc


def sweep(run_dir):
    """Stop every PostgreSQL and ZooKeeper still running under run_dir (the
    run was killed before it could stop them)."""
    if not os.path.isdir(run_dir):
        return
    for root, dirs, files in os.walk(run_dir):
        if "postmaster.pid" in files:
            try:
                with open(os.path.join(root, "postmaster.pid")) as f:
                    pid = int(f.readline().strip())
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    if root.encode() not in f.read():
                        continue
            except (OSError, ValueError):
                continue
            log("stopping leftover PostgreSQL in %s" % root)
            bindir = os.environ.get("ZKLOCK_PG_BINDIR") or infra.pg_bindir()
            subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(bindir, "pg_ctl"),
                            "-D", root, "-m", "immediate", "-w", "-t", "20", "stop"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=40)
        if "zk.pid" in files:
            subprocess.run(["bash", os.path.join(SRC, "tools", "zk.sh"), "kill", root],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def reexec_as_postgres(argv, args):
    """Root: copy what the run needs to a fresh directory under /tmp and run
    there as postgres."""
    base = tempfile.mkdtemp(prefix="zklock-model.")
    src = os.path.join(base, "src")
    for rel in ("test/model", "test/faults"):
        shutil.copytree(os.path.join(SRC, rel), os.path.join(src, rel),
                        ignore=shutil.ignore_patterns("__pycache__"))
    os.makedirs(os.path.join(src, "tools"))
    shutil.copy(os.path.join(SRC, "tools", "zk.sh"), os.path.join(src, "tools", "zk.sh"))
    os.makedirs(os.path.join(base, "run"))
    subprocess.run(["chown", "-R", "postgres:postgres", base], check=True)
    os.chmod(base, 0o755)
    py = os.environ.get("ZKLOCK_PYTHON") or ("/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable)
    cmd = ["runuser", "-u", "postgres", "--", py, os.path.join(src, "test", "model", "model.py")]
    cmd += [a for a in argv] + ["--dir", os.path.join(base, "run")]
    p = subprocess.Popen(cmd, cwd=base)

    def fwd(sig, frame):
        try:
            os.kill(p.pid, signal.SIGTERM)
        except OSError:
            pass
    signal.signal(signal.SIGTERM, fwd)
    signal.signal(signal.SIGINT, fwd)
    try:
        rc = p.wait()
    finally:
        sweep(os.path.join(base, "run"))
    if rc == 0 and not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    else:
        log("run directory kept: %s" % base)
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--steps", type=int, help="run --histories histories of K steps from --seed, then stop")
    ap.add_argument("--histories", type=int, default=1)
    ap.add_argument("--recipes", default=",".join(default_recipes()))
    ap.add_argument("--mode", choices=["exact", "concurrent", "both"], default="both")
    ap.add_argument("--shrink-seconds", type=float, default=150)
    ap.add_argument("--replay", nargs="+", metavar="FILE",
                    help="replay saved histories: shrunk-SEED.json of a run directory, or test/model/found/*.json")
    ap.add_argument("--same-seed", action="store_true",
                    help="every history with the seed given (concurrent races: run one again and again)")
    ap.add_argument("--dir")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--ignore", default="",
                    help="anomaly kinds to report without failing (comma-separated), e.g. known bugs")
    ap.add_argument("--control", action="store_true",
                    help="concurrent mode without the protection: the checks must fail")
    argv = sys.argv[1:]
    args = ap.parse_args(argv)
    args.recipes = sorted(set(x for x in args.recipes.split(",") if x))
    args.ignore = set(x for x in args.ignore.split(",") if x)
    bad = [x for x in args.recipes if x not in MODELS]
    if bad:
        ap.error("unknown recipes %s (known: %s)" % (bad, ", ".join(sorted(MODELS))))
    if os.geteuid() == 0:
        # files named on the command line (--replay) are read from the copy's cwd
        argv = [os.path.abspath(a) if os.path.isfile(a) else a for a in argv]
        return reexec_as_postgres(argv, args)
    made = False
    if args.dir is None:
        args.dir = tempfile.mkdtemp(prefix="zklock-model.")
        made = True
    os.makedirs(args.dir, exist_ok=True)
    args.dir = os.path.abspath(args.dir)

    def on_term(sig, frame):
        raise SystemExit(143)
    signal.signal(signal.SIGTERM, on_term)
    rc = main_inner(args)
    if rc == 0 and made and not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)
    elif made:
        log("run directory kept: %s" % args.dir)
    return rc


if __name__ == "__main__":
    sys.exit(main())
