#!/usr/bin/python3
"""run.py - zklock's randomized fault run (Jepsen-style).

usage: test/faults/run.py --dir DIR [--seconds N] [--quiet N] [--control] [options]

Starts a three-server ZooKeeper ensemble (tools/zk.sh start-ensemble) and two
PostgreSQL clusters, A and B, that preload zklock with zklock.hosts = all
three servers and short session, connect and commit timeouts.  Clients on
both clusters (client.py) contend for a few lock names with short critical
sections recorded in a history table of their cluster, while a nemesis
(nemesis.py) kills and freezes ZooKeeper servers, freezes, kills, terminates
and cancels the zklock workers, and cancels and terminates client backends.
Beside them, queue_run.py's load enqueues and dequeues on both clusters
(--queue-producers, --queue-consumers per cluster), recording each item in
tables of the same transactions.
Beside them, the deadlock workload (dl_client.py; --dl-clients and
--dl-control-clients per cluster) takes two or three of dl-a..c one by one
in a random order (circles of waits the deadlock detector must break;
deadlock_timeout is --deadlock-timeout, 200ms) and, as a control, two or
three of dlc-a..c in sorted order (never a circle: never 40P01).
Beside them, semaphore clients (sem_client.py; --sem-clients, spread over
the clusters) hold leases of fault-sem (max 3) and record their spans in
sem_history; campaign clients (campaign_client.py; --campaign-clients per
cluster) campaign for the one name fault-camp (zk_campaign, zk_try_campaign,
zk_session_campaign and zk_resign) and record each leadership in camp_history
in the transaction that leads; counter clients (counter_client.py;
--counter-clients per cluster) add 1 to the counter fault-ctr
(zk_counter_add) and record every answer, whose final value the run reads
once every client stopped.
After --seconds of faults everything is healed and the clients go on for
--quiet seconds without faults; then they stop.  The run stops the queue
load, waits for the workers to resolve every claim and transaction node,
drains the queue on A and runs queue_run.py's exactly-once check (DIR/queue);
then it observes ZooKeeper (orphan nodes through test/zkq.py, watches through `wchc` on every
server) and both clusters (zk_status().entries_used), stops every server and
hands DIR to checker.py, whose figures and verdict it prints.

--control: the clients do not take the lock, the semaphore clients not the
semaphore, the campaign clients do not campaign, and the counter clients
read the counter and set it to what they read plus one (same workload, same
checker): the checker must then find overlapping critical sections, too many
leases at once, two leaders at once and counter values handed out twice or
adds lost.

Unless --no-auth, both clusters authenticate with one digest identity
(zklock.auth_file), so every node carries the default ACL
auth::cdrwa,world:anyone:r and the promises are checked with ACLs on.

Exit status: the checker's (0 no anomaly, 1 anomalies), 2 when the run
itself could not be set up.  Everything listens on 127.0.0.1; every server
started is stopped at the end, also on failure or SIGTERM.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True      # no __pycache__ in the source tree

import checker  # noqa: E402
import queue_run  # noqa: E402
from barrier_client import BarrierClient  # noqa: E402
from campaign_client import CAMPAIGN, CampaignClient  # noqa: E402
from client import Client  # noqa: E402
from counter_client import COUNTER, CounterClient  # noqa: E402
from dl_client import DlClient  # noqa: E402
from election_sampler import ELECTION, ElectionSampler  # noqa: E402
from sem_client import SemClient  # noqa: E402
from infra import Ensemble, PgCluster, free_ports, log, pg_bindir, run as run_cmd  # noqa: E402
from nemesis import Nemesis  # noqa: E402

SRC = os.path.dirname(os.path.dirname(HERE))


def _write(f, rec):
    """One record, a line of JSON, into the .jsonl file f."""
    f.write(json.dumps(rec, sort_keys=True) + "\n")


class Run:
    """What the clients and the nemesis share."""

    def __init__(self, args, directory):
        self.dir = directory
        self.control = args.control
        self.names = args.names.split(",")
        self.shared_p = args.shared_p
        self.long_p = args.long_p
        self.long_hold = (args.session_timeout * 1.5, args.session_timeout * 2.2)
        self.lock_timeout = args.lock_timeout
        self.null_timeout_p = args.null_timeout_p
        self.holders_p = args.holders_p
        self.statement_timeout = args.statement_timeout
        self.session_timeout_s = args.session_timeout
        self.probe_every = args.probe_every
        # set by the nemesis when an expiry probe is due and no client is in a
        # long critical section: the next lock client to start one takes it
        self.want_long = threading.Event()
        self.stop = threading.Event()          # clients stop
        self.quiet = threading.Event()         # no more long critical sections
        self.faults_over = threading.Event()   # the nemesis stops starting faults
        self.clients = []
        self._lock = threading.Lock()
        self._out = open(os.path.join(directory, "outcomes.jsonl"), "a", buffering=1)
        self._faults = open(os.path.join(directory, "nemesis.jsonl"), "a", buffering=1)
        self._barrier = open(os.path.join(directory, "barrier.jsonl"), "a", buffering=1)
        self._election = open(os.path.join(directory, "election.jsonl"), "a", buffering=1)
        self._sem = open(os.path.join(directory, "sem.jsonl"), "a", buffering=1)
        self._dl = open(os.path.join(directory, "dl.jsonl"), "a", buffering=1)
        self._camp = open(os.path.join(directory, "camp.jsonl"), "a", buffering=1)
        self._ctr = open(os.path.join(directory, "ctr.jsonl"), "a", buffering=1)
        self.dclients = []
        self.bclients = []
        self.sclients = []
        self.cclients = []      # campaign clients
        self.kclients = []      # counter clients
        self.n_committed = 0
        self.n_failed = 0
        self.n_faults = 0

    def record(self, rec):
        with self._lock:
            if rec.get("outcome") == "committed":
                self.n_committed += 1
            elif rec.get("stage") != "connect":
                self.n_failed += 1
            _write(self._out, rec)

    def record_barrier(self, rec):
        with self._lock:
            _write(self._barrier, rec)

    def record_election(self, rec):
        with self._lock:
            _write(self._election, rec)

    def record_sem(self, rec):
        with self._lock:
            _write(self._sem, rec)

    def record_dl(self, rec):
        with self._lock:
            _write(self._dl, rec)

    def record_campaign(self, rec):
        with self._lock:
            _write(self._camp, rec)

    def record_counter(self, rec):
        with self._lock:
            _write(self._ctr, rec)

    def record_fault(self, rec):
        with self._lock:
            if rec["action"] == "inject":
                self.n_faults += 1
            _write(self._faults, rec)
        if rec["action"] in ("inject", "error"):
            extra = {k: v for k, v in rec.items() if k not in ("t", "kind", "action", "target")}
            log("nemesis: %s %s %s %s" % (rec["action"], rec["kind"], rec["target"],
                                          json.dumps(extra, sort_keys=True) if extra else ""))

    def close(self):
        self._out.close()
        self._faults.close()
        self._barrier.close()
        self._election.close()
        self._sem.close()
        self._dl.close()
        self._camp.close()
        self._ctr.close()


class Interrupted(Exception):
    pass


def on_signal(signum, frame):
    raise Interrupted("signal %d" % signum)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True, help="work directory (created; servers' data and logs)")
    p.add_argument("--seconds", type=float, default=45, help="seconds of faults (default 45)")
    p.add_argument("--quiet", type=float, default=20,
                   help="seconds without faults at the end, the progress bound (default 20)")
    p.add_argument("--control", action="store_true", help="clients do not take the lock")
    p.add_argument("--no-faults", action="store_true", help="no nemesis (baseline)")
    p.add_argument("--clients", type=int, default=4, help="clients per cluster (default 4)")
    p.add_argument("--barrier-clients", type=int, default=3,
                   help="double-barrier clients, spread over the clusters (default 3; 0: none)")
    p.add_argument("--barrier-window", type=float, default=3,
                   help="seconds of one barrier round (default 3)")
    p.add_argument("--sem-clients", type=int, default=4,
                   help="semaphore clients (max 3 leases; the odd ones take 2 at once), spread over"
                        " the clusters (default 4; 0: none)")
    p.add_argument("--dl-clients", type=int, default=2,
                   help="deadlock-workload clients per cluster taking dl-a..c one by one in a "
                        "random order (test/faults/dl_client.py; default 2; 0: none)")
    p.add_argument("--dl-control-clients", type=int, default=1,
                   help="deadlock-workload clients per cluster taking dlc-a..c in sorted "
                        "order, which must never get 40P01 (default 1)")
    p.add_argument("--campaign-clients", type=int, default=2,
                   help="campaign clients per cluster, all campaigning for fault-camp "
                        "(test/faults/campaign_client.py; default 2; 0: none)")
    p.add_argument("--counter-clients", type=int, default=2,
                   help="counter clients per cluster, adding 1 to fault-ctr "
                        "(test/faults/counter_client.py; default 2; 0: none)")
    p.add_argument("--deadlock-timeout", type=float, default=0.2,
                   help="deadlock_timeout of both clusters, s (0.2)")
    p.add_argument("--queue-producers", type=int, default=1,
                   help="queue producers per cluster (test/faults/queue_run.py load; default 1)")
    p.add_argument("--queue-consumers", type=int, default=1,
                   help="queue consumers per cluster (default 1; with --queue-producers 0: "
                        "no queue load; never in a control run)")
    p.add_argument("--names", default="a,b,c", help="lock names, comma separated (default a,b,c)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    p.add_argument("--session-timeout", type=float, default=4, help="zklock.session_timeout, s (4)")
    p.add_argument("--connect-timeout", type=float, default=2, help="zklock.connect_timeout, s (2)")
    p.add_argument("--commit-timeout", type=float, default=2, help="zklock.commit_timeout, s (2)")
    p.add_argument("--lock-timeout", type=float, default=3, help="zk_lock timeout, s (3)")
    p.add_argument("--null-timeout-p", type=float, default=0.25,
                   help="share of zk_lock calls without a timeout (0.25)")
    p.add_argument("--holders-p", type=float, default=0.15,
                   help="share of critical sections that call zk_lock_holders (0.15)")
    p.add_argument("--max-locks", type=int, default=32, help="zklock.max_locks (32)")
    p.add_argument("--no-auth", action="store_true",
                   help="no zklock.auth_file: the clusters' nodes get the open ACL "
                        "(default: both clusters authenticate as one digest user, so every "
                        "node has the default ACL auth::cdrwa,world:anyone:r)")
    p.add_argument("--statement-timeout", type=int, default=30,
                   help="clients' statement_timeout, s: a statement running longer is a hang (30)")
    p.add_argument("--progress", type=int, default=3,
                   help="critical sections each client must commit in the quiet period (3)")
    p.add_argument("--shared-p", type=float, default=0.25, help="share of shared locks (0.25)")
    p.add_argument("--long-p", type=float, default=0.05,
                   help="share of long critical sections during the faults (0.05)")
    p.add_argument("--probe-every", type=float, default=15,
                   help="seconds between expiry probes: worker frozen past the session "
                        "timeout while a client is in a long critical section (15)")
    p.add_argument("--zk-sh", default=os.environ.get("ZKLOCK_ZK_SH", os.path.join(SRC, "tools/zk.sh")))
    p.add_argument("--zkq", default=os.environ.get("ZKLOCK_ZKQ", os.path.join(SRC, "test/zkq.py")))
    return p.parse_args(argv)


def zkq(args, hosts, *verb):
    python = os.environ.get("ZKLOCK_PYTHON", sys.executable)
    return run_cmd([python, args.zkq, hosts] + list(verb), timeout=60)


def observe_orphans(args, ens, wait_s):
    """Contender nodes under /zklock/locks, leases under /zklock/semaphores,
    the campaign clients' candidacies under /zklock/elections/fault-camp and
    barrier members under /zklock/barriers (ready aside), through ZooKeeper,
    after waiting up to wait_s for them to go.  Returns (count or None, node
    lines)."""
    deadline = time.monotonic() + wait_s
    while True:
        rc, out, err = zkq(args, ens.hosts, "tree", "/zklock")
        nodes = None
        if rc == 0:
            nodes = []
            for line in out.splitlines():
                path = line.split(" ")[0]
                parts = path.split("/")
                # /zklock/locks/<name>/<contender>, /zklock/barriers/<name>/<member>
                if len(parts) == 5 and parts[1] == "zklock" and (
                        parts[2] in ("locks", "semaphores") or
                        (parts[2] == "elections" and parts[3].split(":")[-1] == CAMPAIGN) or
                        (parts[2] == "barriers" and parts[4] != "ready")):
                    nodes.append(line)
            if not nodes:
                return 0, []
        if time.monotonic() >= deadline:
            if nodes is None:
                return None, ["zkq tree failed: rc %s %s" % (rc, err.strip())]
            return len(nodes), nodes
        time.sleep(0.5)


CANARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zk_canary.py")


def canary_finish(ens, proc, acked):
    """Stop zk_canary.py's writes and read them back: its report, or None."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    python = os.environ.get("ZKLOCK_PYTHON", sys.executable)
    rc, out, err = run_cmd([python, CANARY, "check", ens.hosts, acked], timeout=300)
    m = re.search(r"^CANARY (\{.*\})\s*$", out, re.M)
    if rc != 0 or not m:
        log("zk canary: the check failed: rc %s %s" % (rc, err.strip()[-500:]))
        return None
    rep = json.loads(m.group(1))
    log("zk canary: %d writes acknowledged by ZooKeeper, %d of them missing, read from %d of %d"
        " servers; diverged: %s" % (rep["acknowledged"], rep["missing"], rep["servers_read"],
                                    rep["servers"], rep["diverged"] or "none"))
    return rep


QUEUE_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "queue_run.py")
QUEUE_PATH = "/zklock/queues/" + queue_run.QUEUE
DLQ_PATH = "/zklock/queues/" + queue_run.DLQ
SIDE_PATH = "/zklock/queues/" + queue_run.SIDE      # where the load's movers put items


def queue_py(*argv, timeout=300):
    python = os.environ.get("ZKLOCK_PYTHON", sys.executable)
    env = dict(os.environ, PGUSER="postgres")
    return run_cmd([python, QUEUE_RUN] + list(argv), timeout=timeout, env=env)


def queue_report(tag, out):
    """The JSON of queue_run.py's "TAG {...}" line, or None."""
    m = re.search(r"^%s (\{.*\})\s*$" % tag, out, re.M)
    return json.loads(m.group(1)) if m else None


KEPT_SEEN = [0]  # the most kept transaction nodes seen at once (queue_left)


def queue_left(args, ens):
    """Children of the queue's entries and taken, and of /zklock/txns, through
    ZooKeeper (None when it could not be counted)."""
    left = {}
    for what, path in (("entries", QUEUE_PATH + "/entries"), ("taken", QUEUE_PATH + "/taken")):
        rc, out, _ = zkq(args, ens.hosts, "count", path)
        left[what] = int(out.strip()) if rc == 0 and out.strip().isdigit() else None
    # transaction nodes; kept ones (published, kept against a late create
    # until their session is surely gone) are counted apart, not as left
    rc, out, _ = zkq(args, ens.hosts, "count-kept", "/zklock/txns")
    parts = out.split() if rc == 0 else []
    ok = len(parts) == 2 and all(p.isdigit() for p in parts)
    left["txns"] = int(parts[0]) if ok else None
    KEPT_SEEN[0] = max(KEPT_SEEN[0], int(parts[1]) if ok else 0)
    return left


def queue_wait_resolved(args, ens, wait_s):
    """Wait until no claim and no transaction node is left; returns the last count."""
    deadline = time.monotonic() + wait_s
    while True:
        left = queue_left(args, ens)
        if (left["taken"] == 0 and left["txns"] == 0) or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def queue_diag(args, ens, clusters, qdir):
    """What is left, for the report: the claims' data, and each cluster's
    queue rows, zklock entries and sessions."""
    lines = []
    rc, out, _ = zkq(args, ens.hosts, "ls", QUEUE_PATH + "/taken")
    for child in (out.split() if rc == 0 else [])[:20]:
        _, data, _ = zkq(args, ens.hosts, "get", QUEUE_PATH + "/taken/" + child)
        lines.append("claim %s: %s" % (child, data.strip()))
    # each server's own view of the items (a server behind its quorum shows
    # fewer: then a cluster connected to it sees a queue shorter than it is)
    for i, port in enumerate(ens.ports, 1):
        rc, out, _ = zkq(args, "127.0.0.1:%d" % port, "ls", QUEUE_PATH + "/entries")
        lines.append("s%d (port %d) entries: %s" % (i, port, " ".join(out.split()[:20]) if rc == 0 else "no answer"))
        lines.append("s%d srvr: %s" % (i, " ".join((ens.cmd(i, "srvr") or "").split()[:40])))
    for c in clusters:
        for sql in ("SELECT * FROM zk_queues",
                    "SELECT * FROM zk_locks",
                    "SELECT entries_used, state, session_id, reconnects, sessions FROM zk_status()",
                    "SELECT pid, application_name, state, backend_xid, wait_event, left(query, 60)"
                    " FROM pg_stat_activity WHERE backend_type <> 'client backend'"
                    " OR application_name <> ''"):
            rows = c.try_query(sql)
            lines.append("%s: %s -> %s" % (c.name, sql, rows))
    with open(os.path.join(qdir, "diag.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    for line in lines:
        log("queue left: " + line)
    return lines


def queue_finish(args, ens, clusters, qdir, proc):
    """Stop the queue load, resolve, drain, resolve, check: the observations."""
    q = {}
    with open(os.path.join(qdir, "stop"), "w"):
        pass
    try:
        proc.wait(timeout=100)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    with open(os.path.join(qdir, "load.out")) as f:
        q["load"] = queue_report("QUEUE-LOAD", f.read())
    q["left_after_load"] = queue_wait_resolved(args, ens, 90)
    a = clusters[0]
    # what is left grows with the run (poison items need every attempt,
    # a group lets one item in at a time): 120 s, or 40% of a longer run
    drain_s = max(120, int(args.seconds * 0.4))
    rc, out, err = queue_py("drain", "--dir", qdir, "--host", "127.0.0.1", "--port", str(a.port),
                            "--label", a.name, "--seconds", str(drain_s), timeout=drain_s + 60)
    q["drain"] = queue_report("QUEUE-DRAIN", out)
    if q["drain"] is None:
        log("queue drain failed: rc %s %s %s" % (rc, out[-2000:], err[-2000:]))
    q["left"] = queue_wait_resolved(args, ens, 60)
    q["kept_seen"] = KEPT_SEEN[0]
    # the dead-letter queue, drained too
    q["dlq_left"] = {}
    for what, path in (("entries", DLQ_PATH + "/entries"), ("taken", DLQ_PATH + "/taken")):
        rc, out, _ = zkq(args, ens.hosts, "count", path)
        q["dlq_left"][what] = int(out.strip()) if rc == 0 and out.strip().isdigit() else None
    # and the queue the movers filled, moved back by the drain
    q["side_left"] = {}
    for what, path in (("entries", SIDE_PATH + "/entries"), ("taken", SIDE_PATH + "/taken")):
        rc, out, _ = zkq(args, ens.hosts, "count", path)
        q["side_left"][what] = int(out.strip()) if rc == 0 and out.strip().isdigit() else None
    if q["left"] != {"entries": 0, "taken": 0, "txns": 0}:
        q["diag"] = queue_diag(args, ens, clusters, qdir)
    tables = ",".join("%s:%d" % (c.name, c.port) for c in clusters)
    rc, out, err = queue_py("check", "--dir", qdir, "--host", "127.0.0.1", "--tables", tables,
                            timeout=300)
    q["check"] = queue_report("QUEUE-CHECK", out)
    q["check_rc"] = rc
    with open(os.path.join(qdir, "check.out"), "w") as f:
        f.write(out + err)
    summary = re.search(r"^(produced \d+.*)$", out, re.M)
    log("queue: %s" % (summary.group(1) if summary else "check failed: rc %s %s" % (rc, err[-2000:])))
    return q


def observe_watches(ens, wait_s):
    """Watches on /zklock paths on every server, after waiting up to wait_s:
    `wchs` (always answers) gives the total, `wchc` (silent when there is
    none) the paths by session."""
    deadline = time.monotonic() + wait_s
    while True:
        lines, failed = [], []
        for i in (1, 2, 3):
            out = ens.cmd(i, "wchs")
            m = re.search(r"Total watches:\s*(\d+)", out or "")
            if not m:
                failed.append(i)
                continue
            if int(m.group(1)) == 0:
                continue
            session = "?"
            for line in (ens.cmd(i, "wchc") or "").splitlines():
                s = line.strip()
                if s.startswith("0x"):
                    session = s
                elif s.startswith("/zklock") and not s.startswith("/zklock/elections/"):
                    # (a candidate in line watches its predecessor for good)
                    lines.append("s%d session %s watches %s" % (i, session, s))
        if not lines and not failed:
            return 0, []
        if time.monotonic() >= deadline:
            if failed:
                lines.append("no wchs answer from %s" % ", ".join("s%d" % i for i in failed))
                return None, lines
            return len(lines), lines
        time.sleep(0.5)


def observe_entries(clusters, wait_s):
    deadline = time.monotonic() + wait_s
    res = {}
    while True:
        res = {}
        for c in clusters:
            # the worker's own candidacies (zk_elections) are not left over
            rows = c.try_query("SELECT (SELECT entries_used FROM zk_status())"
                               " - (SELECT count(*) FROM zk_elections)")
            res[c.name] = rows[0][0] if rows else None
        if all(v == 0 for v in res.values()) or time.monotonic() >= deadline:
            break
        time.sleep(0.3)
    # what is left, for the diagnosis: every entry but the candidacies
    for c in clusters:
        if res.get(c.name):
            rows = c.try_query("SELECT row_to_json(e)::text FROM zk_entries e"
                               " WHERE kind <> 'lock' OR name NOT IN"
                               " (SELECT name FROM zk_elections)")
            for r in rows or []:
                log("cluster %s: entry left: %s" % (c.name, r[0]))
    return res


def dump_rows(c, cols, table, path):
    """Write the rows of table (cols, with started and ended as epoch
    seconds) to path as a JSON array; returns how many."""
    rows = c.query(
        "SELECT coalesce(json_agg(h ORDER BY id), '[]')::text FROM ("
        " SELECT id, %s, extract(epoch FROM started)::float8 AS started,"
        " extract(epoch FROM ended)::float8 AS ended FROM %s) h" % (cols, table), timeout=60)
    with open(path, "w") as f:
        f.write(rows[0][0])
    return len(json.loads(rows[0][0]))


def dump_history(c, path):
    return dump_rows(c, "cluster, client, name, mode, token, token_end, pid", "history", path)


def dump_sem_history(c, path):
    return dump_rows(c, "cluster, client, pid, permits", "sem_history", path)


def dump_camp_history(c, path):
    return dump_rows(c, "cluster, client, pid, kind, token", "camp_history", path)


def read_counter(clusters, wait_s):
    """The counter's final value on each cluster ({name: value or None}),
    read again (up to wait_s) until the clusters agree."""
    deadline = time.monotonic() + wait_s
    while True:
        res = {}
        for c in clusters:
            rows = c.try_query("SELECT zk_counter_get(%s)", (COUNTER,))
            res[c.name] = rows[0][0] if rows else None
        if (None not in res.values() and len(set(res.values())) == 1) \
                or time.monotonic() >= deadline:
            return res
        time.sleep(0.5)


def main(argv):
    args = parse_args(argv)
    if args.control:
        args.queue_producers = args.queue_consumers = 0
    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    for f in ("outcomes.jsonl", "nemesis.jsonl", "barrier.jsonl", "election.jsonl",
              "sem.jsonl", "dl.jsonl", "camp.jsonl", "ctr.jsonl", "run.json"):
        if os.path.exists(os.path.join(d, f)):
            os.unlink(os.path.join(d, f))
    # the progress bound must leave room for a long critical section begun
    # just before the faults stopped
    least = args.session_timeout * 2.2 + 5
    if args.quiet < least:
        log("quiet period raised from %gs to %gs (long critical sections last up to %gs)"
            % (args.quiet, least, args.session_timeout * 2.2))
        args.quiet = least
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    rnd = random.Random(seed)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log("%s run in %s: %gs of faults, %gs quiet, seed %d"
        % ("control" if args.control else "locked", d, args.seconds, args.quiet, seed))

    r = Run(args, d)
    ens = None
    clusters = []
    nemesis = None
    canary = None
    qproc = None
    qdir = None
    info = {
        "control": args.control, "seconds": args.seconds, "quiet": args.quiet, "seed": seed,
        "names": r.names, "session_timeout_s": args.session_timeout, "progress_n": args.progress,
        "connect_timeout_s": args.connect_timeout, "lock_timeout_s": args.lock_timeout,
        "deadlock_timeout_s": args.deadlock_timeout, "dl_clients": [],
        "logs": {}, "zk_sh": os.path.abspath(args.zk_sh),
        "clusters": [], "clients": [], "t_start": time.time(), "observed": {},
    }
    rc = 2
    try:
        zk_ports, pg_ports = free_ports()
        ens = Ensemble(args.zk_sh, os.path.join(d, "zk"), zk_ports,
                       blackhole=os.path.join(SRC, "test", "blackhole.py"))
        ens.start()
        bindir = pg_bindir()
        settings = {
            "zklock.session_timeout": "%gs" % args.session_timeout,
            "zklock.connect_timeout": "%gs" % args.connect_timeout,
            "zklock.commit_timeout": "%gs" % args.commit_timeout,
            # the deadlock workload's clients hold up to three names each;
            # a campaign client holds one candidacy and a counter client one
            # add in flight, but while the worker is frozen each leaves
            # behind entries it gave up waiting for (and takes new ones):
            # three each too, beside what the other workloads had
            "zklock.max_locks": str(args.max_locks + 3 * (args.dl_clients + args.dl_control_clients
                                                          + args.campaign_clients
                                                          + args.counter_clients)),
            "zklock.elections": ELECTION,
            "max_prepared_transactions": "4",
            # the deadlock detector across servers checks a zk lock wait
            # this old (dl_client.py's circles)
            "deadlock_timeout": "%dms" % round(args.deadlock_timeout * 1000),
        }
        if not args.no_auth:
            # one identity for both clusters (they share names), relative
            # to each data directory; zkq.py and queue_run.py only read,
            # with the same identity (zklock's nodes are private to it)
            settings["zklock.auth_file"] = "zk.auth"
            os.environ["ZKLOCK_ZK_AUTH"] = "zklock-faults:faults-secret"
        for name, port in zip(("A", "B"), pg_ports):
            c = PgCluster(name, os.path.join(d, "pg" + name), port, ens.hosts, bindir, settings)
            clusters.append(c)
            c.create()
            if not args.no_auth:
                fd = os.open(os.path.join(c.data, "zk.auth"),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.write(fd, b"zklock-faults:faults-secret\n")
                os.close(fd)
            c.start()
            c.query("CREATE EXTENSION zklock")
            c.query("CREATE TABLE history (id bigserial PRIMARY KEY, cluster text, client text,"
                    " name text, mode text, token bigint, token_end bigint, pid int,"
                    " started timestamptz, ended timestamptz)")
            c.query(queue_run.TABLES)
            c.query("CREATE TABLE sem_history (id bigserial PRIMARY KEY, cluster text, client text,"
                    " pid int, permits int, started timestamptz, ended timestamptz)")
            c.query("CREATE TABLE camp_history (id bigserial PRIMARY KEY, cluster text, client text,"
                    " pid int, kind text, token bigint, started timestamptz, ended timestamptz)")
            info["clusters"].append(name)
            info["logs"][name] = c.logfile
            log("PostgreSQL %s on 127.0.0.1:%d (%s)" % (name, port, c.dir))
        for c in clusters:
            st = c.wait_connected(60)
            if not st or st.get("state") != "connected":
                raise RuntimeError("worker of %s did not connect: %s\n%s" % (c.name, st, c.log_tail()))
            log("cluster %s: zklock session %s, timeout %s" % (c.name, st["session_id"], st["session_timeout"]))
        if args.queue_producers + args.queue_consumers > 0:
            # the queue's dead-letter policy (queue_run.py: poison items)
            clusters[0].query(queue_run.POLICY_SQL, timeout=30)

        for c in clusters:
            for i in range(1, args.clients + 1):
                cl = Client(r, c, i, rnd.randrange(1 << 30))
                r.clients.append(cl)
                info["clients"].append(cl.label)
        info["t_start"] = time.time()
        info["barrier_k"] = args.barrier_clients
        for j in range(args.barrier_clients):
            r.bclients.append(BarrierClient(r, clusters[j % len(clusters)], j, args.barrier_clients,
                                            args.barrier_window, info["t_start"],
                                            rnd.randrange(1 << 30)))
        r.bclients.append(ElectionSampler(r, clusters))
        for j in range(args.sem_clients):
            r.sclients.append(SemClient(r, clusters[j % len(clusters)], j, rnd.randrange(1 << 30)))
        r.bclients.extend(r.sclients)
        for c in clusters:
            for j in range(1, args.campaign_clients + 1):
                r.cclients.append(CampaignClient(r, c, j, rnd.randrange(1 << 30)))
            for j in range(1, args.counter_clients + 1):
                r.kclients.append(CounterClient(r, c, j, rnd.randrange(1 << 30)))
        info["campaign_clients"] = [cl.label for cl in r.cclients]
        info["counter_clients"] = [cl.label for cl in r.kclients]
        r.bclients.extend(r.cclients + r.kclients)
        if not args.control:
            for c in clusters:
                for group, n in (("cyclic", args.dl_clients), ("control", args.dl_control_clients)):
                    for j in range(1, n + 1):
                        r.dclients.append(DlClient(r, c, j, group, rnd.randrange(1 << 30)))
            info["dl_clients"] = [cl.label for cl in r.dclients]
            r.bclients.extend(r.dclients)
        for cl in r.clients + r.bclients:
            cl.start()
        if args.queue_producers + args.queue_consumers > 0:
            # exactly-once queue load on both clusters (queue_run.py load): its
            # producers and consumers ride out every fault of the nemesis
            qdir = os.path.join(d, "queue")
            shutil.rmtree(qdir, ignore_errors=True)
            os.makedirs(qdir)
            python = os.environ.get("ZKLOCK_PYTHON", sys.executable)
            with open(os.path.join(qdir, "load.out"), "w") as qo, \
                    open(os.path.join(qdir, "load.err"), "w") as qe:
                qproc = subprocess.Popen(
                    [python, QUEUE_RUN, "load", "--dir", qdir, "--host", "127.0.0.1",
                     "--a", str(clusters[0].port), "--b", str(clusters[1].port),
                     "--producers", str(args.queue_producers),
                     "--consumers", str(args.queue_consumers),
                     "--seed", str(rnd.randrange(1 << 30))],
                    stdin=subprocess.DEVNULL, stdout=qo, stderr=qe,
                    env=dict(os.environ, PGUSER="postgres"))
            info["queue"] = True
        # ZooKeeper's own writes beside the clients: did it keep what it
        # acknowledged? (test/faults/zk_canary.py)
        canary_file = os.path.join(d, "zk_canary.acked")
        with open(os.path.join(d, "zk_canary.err"), "w") as ce:
            canary = subprocess.Popen(
                [os.environ.get("ZKLOCK_PYTHON", sys.executable), CANARY, "write", ens.hosts,
                 canary_file], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=ce)
        if not args.no_faults:
            nemesis = Nemesis(r, ens, clusters, random.Random(rnd.randrange(1 << 30)))
            nemesis.start()

        def progress(phase, until):
            while True:
                left = until - time.monotonic()
                if left <= 0:
                    return
                time.sleep(min(10, left))
                log("%s: %d committed, %d failed, %d faults"
                    % (phase, r.n_committed, r.n_failed, r.n_faults))

        progress("faults", time.monotonic() + args.seconds)
        r.faults_over.set()
        r.quiet.set()
        info["t_faults_end"] = time.time()
        problems = []
        if nemesis is not None:
            log("healing every fault")
            problems = nemesis.heal_all()
            for p in problems:
                log("heal problem: " + p)
        info["observed"]["heal_problems"] = problems
        info["t_quiet"] = time.time()
        log("quiet period: %gs without faults" % args.quiet)
        progress("quiet", time.monotonic() + args.quiet)
        info["t_quiet_end"] = time.time()
        r.stop.set()
        deadline = time.monotonic() + args.statement_timeout + 15
        hung = []
        for cl in r.clients + r.bclients:
            cl.join(max(0.1, deadline - time.monotonic()))
            if cl.is_alive():
                hung.append(cl.label)
        for cl in r.clients + r.bclients:
            if cl.is_alive() and cl.pid:
                # do not let a hung client hide the observations below
                cl.cluster.try_query("SELECT pg_terminate_backend(%s)", (cl.pid,))
        info["observed"]["hung_clients"] = hung
        log("clients stopped%s" % (" (hung: %s)" % hung if hung else ""))

        obs = info["observed"]
        obs["zk_canary"] = canary_finish(ens, canary, canary_file)
        canary = None
        if qproc is not None:
            obs["queue"] = queue_finish(args, ens, clusters, qdir, qproc)
            qproc = None
        obs["entries_left"] = observe_entries(clusters, 15)
        if r.kclients:
            # no add in flight any more (entries_left): the counter's final value
            obs["counter_final"] = read_counter(clusters, 10)
            log("counter %s: final value %s" % (COUNTER, obs["counter_final"]))
        n, nodes = observe_orphans(args, ens, 2 * args.session_timeout + 8)
        obs["orphans"], obs["orphan_nodes"] = n, nodes
        n, lines = observe_watches(ens, 5)
        obs["watches"], obs["watch_lines"] = n, lines
        obs["zk_status"] = {c.name: c.status() for c in clusters}
        obs["zk_modes"] = {"s%d" % i: m for i, m in ens.modes().items()}
        for c in clusters:
            n = dump_history(c, os.path.join(d, "history_%s.json" % c.name))
            log("cluster %s: %d committed critical sections" % (c.name, n))
            n = dump_sem_history(c, os.path.join(d, "sem_history_%s.json" % c.name))
            log("cluster %s: %d committed semaphore spans" % (c.name, n))
            n = dump_camp_history(c, os.path.join(d, "camp_history_%s.json" % c.name))
            log("cluster %s: %d committed campaign spans" % (c.name, n))
        info["t_teardown"] = time.time()
        rc = 0
    except Interrupted as e:
        log("interrupted (%s), stopping everything" % e)
        rc = 2
    except Exception as e:
        log("the run failed: %r" % (e,))
        import traceback
        traceback.print_exc(file=sys.stdout)
        rc = 2
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        r.faults_over.set()
        r.stop.set()
        if qproc is not None and qproc.poll() is None:
            qproc.kill()
            qproc.wait()
        if canary is not None and canary.poll() is None:
            canary.kill()
            canary.wait()
        if nemesis is not None:
            nemesis.heal_now.set()
            nemesis.thaw_everything()
        for c in clusters:
            try:
                c.stop()
            except Exception as e:
                log("could not stop %s: %r" % (c.name, e))
        if ens is not None:
            ens.stop_all()
        if nemesis is not None:
            nemesis.thaw_everything()
        info["t_end"] = time.time()
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump(info, f, indent=1, sort_keys=True)
        r.close()
    if rc != 0:
        log("no verdict: the run did not complete")
        return rc
    sys.stdout.flush()
    return checker.main(["checker.py", d])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
