#!/usr/bin/python3
"""checker.py - the verdict of a fault run.

usage: test/faults/checker.py RUNDIR

Reads what test/faults/run.py left in RUNDIR (history_<cluster>.json: the
committed critical sections of each cluster; outcomes.jsonl: every attempt;
nemesis.jsonl: every fault; run.json: parameters, timeline and the final
observations of ZooKeeper and of both clusters), prints the figures and exits
1 when it finds an anomaly, 0 otherwise (2 when RUNDIR is unusable):

  overlaps        two committed critical sections of one name that overlap in time,
                  unless both are shared
  inversions      for one name, a section that started later than another with a
                  smaller token (czxid), unless both are shared
  token_mismatch  zk_lock_token() at the end of a section differs from the token
                  zk_lock returned
  orphans         contender nodes left under <root>/locks, semaphore leases and guard
                  nodes under <root>/semaphores, the campaign clients' candidacies
                  under <root>/elections/fault-camp, barrier members left under
                  <root>/barriers, after the quiet period
  watches         watches on /zklock paths left on any server (wchc)
  entries_left    zk_status().entries_used of a cluster once the clients stopped
  progress        a client, or a name, with fewer than PROGRESS_N committed sections in
                  the quiet period
  hangs           statements ended by statement_timeout, clients that did not stop
  slow_lock_calls zk_lock calls with a timeout that took longer than timeout +
                  zklock.connect_timeout + 2 s to succeed or fail
  slow_cancels    a pg_cancel_backend that took more than 2 s to end a statement
  crashes         processes killed by a signal the nemesis did not send, PANICs (server logs)
  worker_exits    zklock workers that exited though the nemesis did not terminate them
                  (a pg_cancel_backend of the worker counts here too)
  setup           the run itself could not heal its faults
  election        both clusters leading the election at once (one answered
                  zk_is_leader true between two true answers of the other), or nobody
                  leading at the end (election.jsonl, test/faults/election_sampler.py)
  semaphore       more than 3 leases held by committed spans at one instant (a span
                  counts its permits: 1 or 2),
                  no span in the quiet period, or a semaphore statement hung
                  (sem.jsonl, sem_history_*.json, test/faults/sem_client.py)
  campaign        two committed leaderships of fault-camp (spans of both clusters'
                  camp_history) that overlap in time, a leadership whose fencing
                  token is not larger than an earlier one's, a cluster without a
                  leadership begun in the quiet period, a campaign statement hung, a
                  campaign call with a timeout that took longer than timeout +
                  zklock.connect_timeout + 2 s (camp.jsonl, camp_history_*.json,
                  test/faults/campaign_client.py)
  counter         two acknowledged zk_counter_add of fault-ctr answered with the same
                  value, a final value V (zk_counter_get on each cluster at the end)
                  below the acknowledged adds or above acknowledged + unknown (failed)
                  ones, an acknowledged value above V, a cluster without an
                  acknowledged add in the quiet period, a counter statement hung
                  (ctr.jsonl, test/faults/counter_client.py)
  barrier         a double-barrier round that opened before every party had called
                  zk_barrier_enter (barrier.jsonl, test/faults/barrier_client.py), or
                  no round that opened for every party in the quiet period
  zk_canary       writes ZooKeeper acknowledged to test/faults/zk_canary.py and then
                  lost (missing on most servers), or that one server lacks while the
                  others have them (a diverged replica): ZooKeeper's own faults, not
                  zklock's; anything zklock lost then is suspect, not proven
  deadlocks       the deadlock workload (test/faults/dl_client.py, dl.jsonl; its
                  sections are in the history tables, checked above with the rest):
                  a 40P01 of its cyclic group without a circle of waits in the
                  records, any 40P01 of its control group (names in sorted order)
                  or of client.py's one-name sections, a cyclic-group wait longer
                  than deadlock_timeout + 30 s with no fault near, a statement
                  timeout, a client without a commit in the quiet period
  queue           the exactly-once queue load (test/faults/queue_run.py, run by run.py
                  through the faults, then drained on the first cluster): an item
                  lost, consumed twice or published by a transaction that did not
                  commit, a queue client hung or died, the drain not done, or a
                  claim, entry or transaction node left in ZooKeeper; of its
                  message groups, consumes out of a group's order, an item
                  handed out while an earlier one of its group was there, two
                  hand-outs of one group at once

The last line of output is "FAULTRUN-FIGURES <json>".
"""

import calendar
import collections
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True

import barrier_client  # noqa: E402
import campaign_client  # noqa: E402
import counter_client  # noqa: E402
import dl_client  # noqa: E402
import election_sampler  # noqa: E402
import sem_client  # noqa: E402
import txnlogs  # noqa: E402

SLOW_CANCEL_S = 2.0
SLOW_CALL_SLACK_S = 2.0


def load_jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def fmt_t(t, t0):
    return "%+.3fs" % (t - t0) if t is not None else "?"


def section_str(s, t0):
    return ("%s/%s pid %s %s token %s [%s .. %s]"
            % (s["cluster"], s["client"], s["pid"], s["mode"], s["token"],
               fmt_t(s["started"], t0), fmt_t(s["ended"], t0)))


def faults_near(faults, lo, hi, t0):
    """Fault events between lo and hi (seconds since the epoch)."""
    out = []
    for f in faults:
        if lo <= f["t"] <= hi and f["action"] in ("inject", "heal", "error"):
            extra = {k: v for k, v in f.items() if k not in ("t", "kind", "action", "target")}
            out.append("    %s %s %s %s %s" % (fmt_t(f["t"], t0), f["action"], f["kind"], f["target"],
                                              json.dumps(extra) if extra else ""))
    return out


def log_time(line):
    """Epoch seconds of a server log line ('%m' prefix, UTC); None if none."""
    m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d+)? UTC ", line)
    if not m:
        return None
    return calendar.timegm(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + float(m.group(2) or 0)


def scan_logs(run):
    """Signals and worker exits in each cluster's server log during the run
    (before the teardown)."""
    res = {}
    lo, hi = run["t_start"], run.get("t_teardown") or run.get("t_end") or 1e18
    for name, path in run.get("logs", {}).items():
        r = {"signals": collections.Counter(), "worker_exits": 0, "panics": 0, "lines": []}
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    t = log_time(line)
                    if t is None or t < lo or t > hi:
                        continue
                    m = re.search(r"was terminated by signal (\d+)", line)
                    if m:
                        r["signals"][int(m.group(1))] += 1
                        r["lines"].append(line.rstrip())
                    elif re.search(r'background worker "zklock worker" \(PID \d+\) exited with exit code', line):
                        r["worker_exits"] += 1
                        r["lines"].append(line.rstrip())
                    elif " PANIC: " in line:
                        r["panics"] += 1
                        r["lines"].append(line.rstrip())
        except OSError as e:
            r["lines"].append("cannot read %s: %s" % (path, e))
            r["unreadable"] = True
        res[name] = r
    return res


def cancel_latencies(faults, outcomes):
    """For each client_cancel that ended a statement: seconds from the cancel
    to the client's 57014 (user request)."""
    by_client = collections.defaultdict(list)
    for o in outcomes:
        by_client[o["client"]].append(o)
    res = []
    for f in faults:
        if f["kind"] != "client_cancel" or f["action"] != "inject":
            continue
        t = f.get("t_sent", f["t"])
        nxt = [o for o in by_client[f["target"]] if o.get("t1", 0) >= t and o.get("pid") == f.get("pid")]
        if not nxt:
            continue
        o = min(nxt, key=lambda o: o["t1"])
        if o.get("sqlstate") == "57014" and "user request" in (o.get("msg") or ""):
            res.append((o["t1"] - t, f, o))
    return res


def check_sections(sections):
    """Overlaps and inversions among committed sections.  Returns two lists of pairs."""
    overlaps, inversions = [], []
    by_name = collections.defaultdict(list)
    for s in sections:
        if s["started"] is not None and s["ended"] is not None:
            by_name[s["name"]].append(s)
    for name, ss in by_name.items():
        ss.sort(key=lambda s: (s["started"], s["ended"]))
        # overlaps: sweep by start time over the sections still running
        active = []
        for s in ss:
            active = [a for a in active if a["ended"] > s["started"]]
            for a in active:
                if not (a["mode"] == "shared" and s["mode"] == "shared"):
                    overlaps.append((a, s))
            active.append(s)
        # inversions: a later start with a smaller token than an earlier section,
        # unless both are shared (readers may record their starts in any order)
        max_excl = None     # earlier exclusive section with the largest token
        max_any = None      # earlier section of any mode with the largest token
        for s in ss:
            if s["token"] is None:
                continue
            cands = [max_excl] if s["mode"] == "shared" else [max_excl, max_any]
            for a in cands:
                if a is not None and a["token"] > s["token"]:
                    inversions.append((a, s))
                    break
            if s["mode"] == "exclusive" and (max_excl is None or s["token"] > max_excl["token"]):
                max_excl = s
            if max_any is None or s["token"] > max_any["token"]:
                max_any = s
    return overlaps, inversions


QUEUE_COUNTS = ("lost", "duplicated", "msg_id_dups", "conflicts", "phantom",
                "acked_producer_missing", "acked_consumer_missing", "aborted_producer_present",
                "prepare_accepted", "attempts_undercount", "attempts_not_increasing",
                # the dead-letter policy (poison items, queue_run.py DEAD_COUNTS)
                "attempts_over_max", "poison_consumed", "poison_not_dead_lettered", "dead_letter_dups",
                "dead_letter_msg_id_dups", "dead_letter_and_consumed", "dead_letter_phantom",
                "dead_letter_bad_origin", "dead_letter_bad_attempts", "dead_letter_mismatch",
                "ordinary_dead_lettered_unexplained",
                # delayed items and holds (queue_run.py TIMING_COUNTS)
                "delayed_early", "hold_early",
                # zk_queue_move (queue_run.py MOVE_COUNTS)
                "move_over_max", "move_unexplained", "move_overlap", "move_overcount",
                # message groups (queue_run.py GROUP_COUNTS)
                "group_order", "group_ahead", "group_overlap")


def queue_verdict(q, run):
    """Figures and anomalies of the queue load (run.py runs queue_run.py's
    load through the faults, then its drain and its check)."""
    fig = collections.OrderedDict()
    if not run.get("queue"):
        return fig, []
    if q is None:
        return fig, ["queue: nothing observed (the run ended before the queue was checked)"]
    anom = []
    load = q.get("load")
    drain = q.get("drain") or {}
    chk = q.get("check") or {}
    fig["queue_produced"] = chk.get("produced")
    fig["queue_consumed"] = chk.get("consumed_ids")
    for k in QUEUE_COUNTS:
        fig["queue_" + k] = chk.get(k)
    fig["queue_prepare_refused"] = chk.get("prepare_refused")
    fig["queue_handed_out_again"] = chk.get("handed_out_again")
    fig["queue_attempts_max"] = chk.get("attempts_max")
    fig["queue_poison_produced"] = chk.get("poison_produced")
    fig["queue_poison_handouts"] = chk.get("poison_handouts")
    fig["queue_dead_letters"] = chk.get("dead_letters")
    fig["queue_ordinary_dead_lettered"] = chk.get("ordinary_dead_lettered")
    for k in ("delayed_produced", "delayed_consumed", "delayed_margin_min", "retried",
              "retried_handed_out_again", "hold_early_after_fault", "hold_margin_min",
              "groups", "grouped_produced", "grouped_consumed", "grouped_dead_lettered", "group_handouts",
              "group_handed_out_again", "group_order_deferred", "group_ahead_deferred", "group_gap_min"):
        fig["queue_" + k] = chk.get(k)
    for k in ("moves", "moves_failed", "moves_failed_by", "moved", "consumed_from_side",
              "ids_dead_lettered_again"):
        fig["queue_" + k] = chk.get(k)
    fig["queue_dlq_left"] = q.get("dlq_left")
    fig["queue_side_left"] = q.get("side_left")
    fig["queue_drained"] = drain.get("drained")
    fig["queue_left_after_load"] = q.get("left_after_load")
    fig["queue_left"] = q.get("left")
    fig["queue_kept_seen"] = q.get("kept_seen")
    if load is None:
        anom.append("queue: the load did not report")
    else:
        fig["queue_outcomes"] = load.get("outcomes", {}).get("all")
        if load.get("hung"):
            anom.append("queue: hung clients %s" % load["hung"])
        if load.get("client_deaths"):
            anom.append("queue: clients died %s" % load["client_deaths"])
        if load.get("statement_timeouts"):
            anom.append("queue: %s statement timeouts" % load["statement_timeouts"])
    if not drain.get("done"):
        anom.append("queue: the final drain did not empty the queue: %s" % (q.get("drain"),))
    if q.get("left") != {"entries": 0, "taken": 0, "txns": 0}:
        anom.append("queue: left in ZooKeeper after the drain: %s" % (q.get("left"),))
    if q.get("dlq_left") != {"entries": 0, "taken": 0}:
        anom.append("queue: left in the dead-letter queue after the drain: %s" % (q.get("dlq_left"),))
    if q.get("side_left", {"entries": 0, "taken": 0}) != {"entries": 0, "taken": 0}:
        anom.append("queue: left in %s after the drain: %s" % ("eo.side", q.get("side_left")))
    if not chk:
        anom.append("queue: the exactly-once check did not run")
    else:
        bad = ["%s %s" % (k, chk.get(k)) for k in QUEUE_COUNTS if chk.get(k) != 0]
        if bad:
            anom.append("queue: " + ", ".join(bad))
        elif q.get("check_rc") != 0:
            anom.append("queue: the exactly-once check failed (exit %s)" % q.get("check_rc"))
        if not chk.get("produced"):
            anom.append("queue: no item produced")
    return fig, anom


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__.split("\n\n", 2)[1] + "\n")
        return 2
    d = argv[1]
    try:
        with open(os.path.join(d, "run.json")) as f:
            run = json.load(f)
    except (OSError, ValueError) as e:
        print("checker: cannot read %s/run.json: %s" % (d, e))
        return 2
    t0 = run["t_start"]
    sections = []
    for c in run["clusters"]:
        try:
            with open(os.path.join(d, "history_%s.json" % c)) as f:
                sections.extend(json.load(f))
        except (OSError, ValueError) as e:
            print("checker: cannot read the history of cluster %s: %s" % (c, e))
            return 2
    outcomes = load_jsonl(os.path.join(d, "outcomes.jsonl"))
    faults = load_jsonl(os.path.join(d, "nemesis.jsonl"))
    obs = run.get("observed", {})

    fig = collections.OrderedDict()
    fig["mode"] = "control" if run["control"] else "locked"
    fig["seconds"] = run["seconds"]
    fig["quiet_seconds"] = run["quiet"]
    fig["clients"] = len(run["clients"])
    fig["names"] = run["names"]
    fig["attempts"] = sum(1 for o in outcomes if o["stage"] != "connect")
    fig["committed"] = len(sections)
    fig["committed_shared"] = sum(1 for s in sections if s["mode"] == "shared")
    fig["outcomes"] = dict(collections.Counter(o["outcome"] for o in outcomes))

    def by_code(pred):
        return dict(sorted(collections.Counter(o.get("sqlstate") or "none" for o in outcomes
                                               if pred(o)).items()))
    fig["refused_commits"] = by_code(lambda o: o["stage"] == "commit" and o["outcome"] == "failed")
    fig["lost_lock_errors"] = sum(1 for o in outcomes if o["stage"] == "body"
                                  and o["outcome"] == "failed" and o.get("sqlstate") == "40001")
    fig["body_failures"] = by_code(lambda o: o["stage"] == "body" and o["outcome"] == "failed")
    fig["lock_failures"] = by_code(lambda o: o["stage"] == "lock" and o["outcome"] == "failed")
    fig["connection_lost"] = dict(sorted(collections.Counter(
        o["stage"] for o in outcomes if o["outcome"] == "conn_lost").items()))
    fig["commit_outcome_unknown"] = sum(1 for o in outcomes if o["outcome"] == "conn_lost"
                                        and o["stage"] == "commit")
    fig["faults"] = dict(sorted(collections.Counter(f["kind"] for f in faults
                                                    if f["action"] == "inject").items()))
    fig["fault_errors"] = sum(1 for f in faults if f["action"] == "error")
    # a kind of fault that failed every time it was tried, three times or
    # more, tests nothing: the run's own set-up is broken (a program not
    # found, say); one failure in a short run may be bad luck
    tried = collections.Counter(f["kind"] for f in faults if f["action"] == "error"
                                and "live run" not in f.get("error", ""))
    fig["faults_never_injected"] = sorted(k for k in tried
                                          if k not in fig["faults"] and tried[k] >= 3)
    # a copy of a cluster (pg_clone) must say it is a copy of the live original
    fig["clones"] = sum(1 for f in faults if f["kind"] == "pg_clone" and f["action"] == "inject")
    fig["clones_said_copy"] = sum(1 for f in faults if f["kind"] == "pg_clone"
                                  and f["action"] == "heal" and f.get("said_copy"))
    fig["clones_took_live"] = sum(1 for f in faults if f["kind"] == "pg_clone"
                                  and f["action"] == "error" and "live run" in f.get("error", ""))
    fig["partitions"] = sum(1 for f in faults if f["kind"] == "zk_partition" and f["action"] == "inject")
    wc = [f for f in faults if f["kind"] == "worker_cancel" and f["action"] == "heal"]
    fig["worker_cancel_killed_worker"] = sum(1 for f in wc if not f.get("worker_survived"))
    fig["expiry_path"] = fig["refused_commits"].get("40001", 0) + fig["lost_lock_errors"]

    overlaps, inversions = check_sections(sections)
    fig["overlaps"] = len(overlaps)
    fig["inversions"] = len(inversions)
    fig["token_mismatch"] = sum(1 for s in sections if s.get("token_end") is not None
                                and s["token_end"] != s["token"])
    fig["incomplete_sections"] = sum(1 for s in sections if s["ended"] is None)
    fig["orphans"] = obs.get("orphans")
    fig["watches"] = obs.get("watches")
    fig["entries_left"] = obs.get("entries_left", {})

    # progress in the quiet period: sections wholly inside [t_quiet, t_quiet + quiet]
    tq, te = run.get("t_quiet"), run.get("t_quiet_end")
    per = collections.Counter()
    if tq is not None and te is not None:
        for s in sections:
            if s["ended"] is not None and s["started"] >= tq and s["ended"] <= te:
                per[s["client"]] += 1
    fig["progress_min"] = run["progress_n"]
    fig["progress"] = {c: per.get(c, 0) for c in run["clients"]}
    slow = [c for c in run["clients"] if per.get(c, 0) < run["progress_n"]]
    per_name = collections.Counter()
    if tq is not None and te is not None:
        for s in sections:
            if s["ended"] is not None and s["started"] >= tq and s["ended"] <= te:
                per_name[s["name"]] += 1
    fig["progress_names"] = {n: per_name.get(n, 0) for n in run["names"]}
    slow += ["name %s" % n for n in run["names"] if per_name.get(n, 0) < run["progress_n"]]
    fig["progress_failures"] = len(slow)
    stmt_timeouts = [o for o in outcomes if o.get("sqlstate") == "57014"
                     and "statement timeout" in (o.get("msg") or "")]
    fig["hangs"] = len(stmt_timeouts) + len(obs.get("hung_clients", []))
    fig["heal_problems"] = obs.get("heal_problems", [])

    # lock calls with a timeout must end within timeout + connect_timeout (+ slack)
    slow_calls = []
    for o in outcomes:
        if o["stage"] == "connect" or o.get("timeout") is None or "t_lock" not in o:
            continue
        end = o.get("t_locked")
        if end is None:
            if o["stage"] != "lock":
                continue
            end = o["t1"]
        took = end - o["t_lock"]
        if took > o["timeout"] + run.get("connect_timeout_s", 0) + SLOW_CALL_SLACK_S:
            slow_calls.append((took, o))
    fig["slow_lock_calls"] = len(slow_calls)
    fig["lock_call_max_s"] = round(max([(o.get("t_locked") or o["t1"]) - o["t_lock"] for o in outcomes
                                        if o.get("timeout") is not None and "t_lock" in o
                                        and (o.get("t_locked") or o["stage"] == "lock")] or [0]), 2)
    srecs = load_jsonl(os.path.join(d, "sem.jsonl")) \
        if os.path.exists(os.path.join(d, "sem.jsonl")) else []
    drecs = load_jsonl(os.path.join(d, "dl.jsonl"))
    crecs = load_jsonl(os.path.join(d, "camp.jsonl"))
    krecs = load_jsonl(os.path.join(d, "ctr.jsonl"))
    cl = cancel_latencies(faults, outcomes + srecs + drecs + crecs + krecs)
    fig["cancels_effective"] = len(cl)
    fig["cancel_latency_max_s"] = round(max([x[0] for x in cl] or [0]), 3)
    slow_cancels = [x for x in cl if x[0] > SLOW_CANCEL_S]
    fig["slow_cancels"] = len(slow_cancels)

    # crashes and worker exits, from the server logs
    logs = scan_logs(run)
    injected = collections.Counter((f["kind"], f["target"]) for f in faults if f["action"] == "inject")
    # zk_link_switch ends a worker's session by terminating or killing it, too
    for f in faults:
        if f["action"] == "inject" and f["kind"] == "zk_link_switch" and f.get("how") in ("kill", "terminate"):
            injected[("worker_" + f["how"], f.get("cluster"))] += 1
    crashes, exits = [], []
    for name, lr in sorted(logs.items()):
        for sig, n in sorted(lr["signals"].items()):
            allowed = injected[("worker_kill", name)] if sig == 9 else 0
            if n > allowed:
                crashes.append("%s: %d processes ended by signal %d (%d sent)" % (name, n, sig, allowed))
        if lr["panics"]:
            crashes.append("%s: %d PANIC" % (name, lr["panics"]))
        if lr.get("unreadable"):
            crashes.append("%s: server log unreadable" % name)
        allowed = injected[("worker_terminate", name)]
        if lr["worker_exits"] > allowed:
            exits.append("%s: %d worker exits, %d worker_terminate" % (name, lr["worker_exits"], allowed))
    fig["crashes"] = len(crashes)
    fig["unexpected_worker_exits"] = len(exits)
    fig["log_events"] = {n: {"signals": dict(lr["signals"]), "worker_exits": lr["worker_exits"],
                             "panics": lr["panics"]} for n, lr in sorted(logs.items())}
    fig["zk_status"] = obs.get("zk_status", {})

    anomalies = []
    if overlaps:
        anomalies.append("%d overlapping critical sections" % len(overlaps))
    if inversions:
        anomalies.append("%d token inversions" % len(inversions))
    if fig["token_mismatch"]:
        anomalies.append("%d sections whose token changed" % fig["token_mismatch"])
    if fig["incomplete_sections"]:
        anomalies.append("%d committed sections without an end" % fig["incomplete_sections"])
    if fig["orphans"] is None or fig["orphans"] != 0:
        anomalies.append("orphan nodes: %s" % fig["orphans"])
    if fig["watches"] is None or fig["watches"] != 0:
        anomalies.append("leftover watches: %s" % fig["watches"])
    left = fig["entries_left"]
    if len(left) != len(run["clusters"]) or any(v != 0 for v in left.values()):
        anomalies.append("shared-memory entries left: %s" % left)
    if slow:
        anomalies.append("no progress after the faults: %s" % ", ".join(
            "%s (%d)" % (c, per.get(c, 0)) for c in slow))
    if fig["hangs"]:
        anomalies.append("hangs: %d statement timeouts, hung clients %s"
                         % (len(stmt_timeouts), obs.get("hung_clients", [])))
    if slow_calls:
        anomalies.append("%d zk_lock calls took longer than timeout + connect_timeout + %gs (max %.1fs)"
                         % (len(slow_calls), SLOW_CALL_SLACK_S, max(x[0] for x in slow_calls)))
    if slow_cancels:
        anomalies.append("%d cancels took more than %gs (max %.1fs)"
                         % (len(slow_cancels), SLOW_CANCEL_S, max(x[0] for x in slow_cancels)))
    if crashes:
        anomalies.append("crashes: " + "; ".join(crashes))
    if exits:
        anomalies.append("unexpected worker exits: " + "; ".join(exits))
    if fig["faults_never_injected"]:
        anomalies.append("faults that failed every time and were never injected: %s"
                         % ", ".join("%s (%d errors)" % (k, tried[k])
                                     for k in fig["faults_never_injected"]))
    if fig["heal_problems"]:
        anomalies.append("heal problems: %s" % fig["heal_problems"])
    if fig["clones_took_live"]:
        anomalies.append("%d copies of a cluster took over the live original's run"
                         % fig["clones_took_live"])
    # client.py holds one name at a time: it can never be in a circle of waits
    fig["lock_40P01"] = sum(1 for o in outcomes if o.get("sqlstate") == "40P01")
    if fig["lock_40P01"]:
        anomalies.append("%d deadlocks (40P01) of one-name critical sections" % fig["lock_40P01"])
    dfig, danom, dlines = dl_client.check(drecs, faults, run)
    for o in [o for o in outcomes if o.get("sqlstate") == "40P01"][:10]:
        dlines.append("DEADLOCK OF A ONE-NAME SECTION: %s pid %s %s %s at %s: %s"
                      % (o["client"], o.get("pid"), o.get("mode"), o.get("name"),
                         fmt_t(o["t1"], t0), o.get("msg")))
    fig.update(dfig)
    anomalies.extend(danom)
    brecs = load_jsonl(os.path.join(d, "barrier.jsonl")) \
        if os.path.exists(os.path.join(d, "barrier.jsonl")) else []
    bfig, banom = barrier_client.check(brecs, run.get("barrier_k", 0),
                                       run.get("t_quiet", run["t_start"]))
    fig.update(bfig)
    anomalies.extend(banom)
    erecs = load_jsonl(os.path.join(d, "election.jsonl")) \
        if os.path.exists(os.path.join(d, "election.jsonl")) else []
    efig, eanom = election_sampler.check(erecs)
    fig.update(efig)
    anomalies.extend(eanom)
    spans = []
    for name in run["clusters"]:
        p = os.path.join(d, "sem_history_%s.json" % name)
        if os.path.exists(p):
            with open(p) as f:
                spans.extend(json.load(f))
    sfig, sanom = sem_client.check(spans, srecs, run.get("t_quiet", run["t_start"]))
    fig.update(sfig)
    anomalies.extend(sanom)
    cspans = []
    for name in run["clusters"]:
        p = os.path.join(d, "camp_history_%s.json" % name)
        if os.path.exists(p):
            with open(p) as f:
                cspans.extend(json.load(f))
    cfig, canom = campaign_client.check(cspans, crecs, run["clusters"],
                                        run.get("t_quiet", run["t_start"]),
                                        run.get("connect_timeout_s", 0))
    fig.update(cfig)
    anomalies.extend(canom)
    kfig, kanom = counter_client.check(krecs, obs.get("counter_final"), run["clusters"],
                                       run.get("t_quiet", run["t_start"]))
    fig.update(kfig)
    anomalies.extend(kanom)
    qfig, qanom = queue_verdict(obs.get("queue"), run)
    fig.update(qfig)
    anomalies.extend(qanom)
    canary = obs.get("zk_canary")
    fig["zk_canary_acknowledged"] = canary.get("acknowledged") if canary else None
    fig["zk_canary_missing"] = canary.get("missing") if canary else None
    fig["zk_canary_diverged"] = canary.get("diverged") if canary else None
    if "zk_canary" in obs and canary is None:
        anomalies.append("zk canary: its writes were not read back (see the run's log)")
    if canary and canary.get("diverged"):
        anomalies.append("ZOOKEEPER REPLICA DIVERGED: %s lack acknowledged writes of the canary that the"
                         " other servers have (a ZooKeeper bug, e.g. ZOOKEEPER-4646/-4785 in 3.8.0: its"
                         " clients read a past the quorum does not have; what zklock lost then is not its"
                         " doing alone)"
                         % ", ".join("%s (%d)" % (h, n) for h, n in sorted(canary["diverged"].items())))
    if canary and canary["missing"]:
        anomalies.append("ZOOKEEPER LOST %d acknowledged writes of the canary, acknowledged from %s to %s"
                         " (ZooKeeper's own data loss, e.g. ZOOKEEPER-4646 in 3.8.0: what zklock lost"
                         " then is not its doing alone)"
                         % (canary["missing"], fmt_t(canary["missing_from"], t0),
                            fmt_t(canary["missing_to"], t0)))
    txn_lines = []
    if (anomalies or os.environ.get("ZKLOCK_FAULTS_TXNLOGS") == "1") and run.get("zk_sh") \
            and os.path.isdir(os.path.join(d, "zk")):
        # who lost it: ZooKeeper (a replica lacks or differs) or zklock (an old
        # session's request applied after its successor's)
        # (evidence for the anomalies above, not an anomaly of its own: a deposed
        # leader's proposals that were never committed stay in its log too; the
        # canary's read-back decides whether an acknowledged write was lost)
        tfig, txn_lines = txnlogs.analyse(d, run, run["zk_sh"])
        fig.update(tfig)
        lost = sorted(set(tfig.get("txnlog_lost_item_deletes") or []))
        if lost:
            # evidence to name beside the queue's anomalies: a replica lacks
            # the writes that deleted these items (see queue/check.out)
            anomalies = [a + ("; ZooKeeper: a replica lacks the logged deletes of items %s"
                              " (a replica that led without them brings them back)" % ", ".join(lost[:10])
                              if a.startswith("queue: ") and "duplicated" in a else "")
                         for a in anomalies]
    fig["anomalies"] = anomalies
    fig["verdict"] = "FAIL" if anomalies else "PASS"

    # -- report --
    print("==== fault run figures (%s mode, %ss of faults + %ss quiet, %d clients, names %s)"
          % (fig["mode"], fig["seconds"], fig["quiet_seconds"], fig["clients"], ",".join(fig["names"])))
    for k in (("attempts", "committed", "committed_shared", "outcomes", "refused_commits",
              "lost_lock_errors", "body_failures", "lock_failures", "connection_lost",
              "commit_outcome_unknown", "faults", "fault_errors", "faults_never_injected",
              "clones", "clones_said_copy",
              "clones_took_live",
              "partitions", "worker_cancel_killed_worker",
              "expiry_path", "overlaps", "inversions", "token_mismatch", "orphans", "watches",
              "entries_left", "progress", "progress_names", "hangs", "slow_lock_calls",
              "lock_call_max_s", "cancels_effective", "cancel_latency_max_s", "slow_cancels",
              "crashes", "unexpected_worker_exits", "log_events", "barrier_rounds",
              "barrier_opened", "barrier_skip_rounds", "barrier_quiet_full_rounds",
              "barrier_enter_errors", "election_samples", "election_leader_changes",
              "election_both", "election_final", "sem_spans", "sem_max_concurrent",
              "sem_over_max", "sem_refused", "sem_failed", "sem_lost_at_commit",
              "sem_quiet_spans", "sem_hangs", "zk_canary_acknowledged",
              "zk_canary_missing", "zk_canary_diverged", "lock_40P01") + tuple(dfig)
              + tuple(cfig) + tuple(kfig) + tuple(qfig)):
        print("  %-28s %s" % (k, json.dumps(fig[k], sort_keys=True)))
    for k in ("txnlog_servers", "txnlog_txns", "txnlog_diverged", "txnlog_missing",
              "txnlog_lost_item_deletes", "txnlog_late_requests", "txnlog_after_close"):
        if k in fig:
            print("  %-28s %s" % (k, json.dumps(fig[k])))
    if txn_lines:
        print("ZooKeeper's transaction logs (test/faults/txnlogs.py; ZOOKEEPER lines are the replicas'"
              " logs disagreeing, evidence to weigh against the canary; zklock lines are an old"
              " session's writes applied after its successor began):")
    for line in txn_lines[:200]:
        print("  " + line)
    for what, pairs in (("OVERLAP", overlaps), ("INVERSION", inversions)):
        for a, b in pairs[:10]:
            print("%s on %r:\n  %s\n  %s" % (what, a["name"], section_str(a, t0), section_str(b, t0)))
            lo = min(a["started"], b["started"]) - 2 * run["session_timeout_s"] - 2
            hi = max(a["ended"], b["ended"]) + 1
            ev = faults_near(faults, lo, hi, t0)
            print("  faults from %s to %s:" % (fmt_t(lo, t0), fmt_t(hi, t0)))
            print("\n".join(ev) if ev else "    (none)")
        if len(pairs) > 10:
            print("... and %d more %s" % (len(pairs) - 10, what))
    for s in sections:
        if s.get("token_end") is not None and s["token_end"] != s["token"]:
            print("TOKEN CHANGED: %s, zk_lock_token at the end %s" % (section_str(s, t0), s["token_end"]))
    if obs.get("orphan_nodes"):
        print("ORPHAN NODES:\n  " + "\n  ".join(obs["orphan_nodes"][:20]))
    if obs.get("watch_lines"):
        print("LEFTOVER WATCHES:\n  " + "\n  ".join(obs["watch_lines"][:20]))
    for o in stmt_timeouts[:10]:
        print("HANG: %s %s stage %s %s at %s" % (o["client"], o.get("name"), o["stage"], o["msg"],
                                                 fmt_t(o["t0"], t0)))
    for took, o in sorted(slow_calls, key=lambda x: -x[0])[:10]:
        print("SLOW LOCK CALL: %s pid %s %s %s timeout %ss took %.2fs (%s %s) at %s"
              % (o["client"], o.get("pid"), o.get("mode"), o.get("name"), o["timeout"], took,
                 o["outcome"], o.get("sqlstate") or "", fmt_t(o["t_lock"], t0)))
        ev = faults_near(faults, o["t_lock"] - 10, o["t_lock"] + took, t0)
        print("\n".join(ev) if ev else "    (no fault nearby)")
    for lat, f, o in sorted(slow_cancels, key=lambda x: -x[0])[:10]:
        print("SLOW CANCEL: %s pid %s (state %s) cancelled at %s, statement ended %.2fs later"
              % (f["target"], f.get("pid"), f.get("state"), fmt_t(f["t"], t0), lat))
        ev = faults_near(faults, f["t"] - 10, f["t"] + lat, t0)
        print("\n".join(ev) if ev else "    (no fault nearby)")
    if crashes or exits:
        for name, lr in sorted(logs.items()):
            for line in lr["lines"][:20]:
                print("LOG %s: %s" % (name, line))
    for line in dlines:
        print(line)
    for a in banom[:10]:
        print("BARRIER: " + a)
    for a in eanom[:10]:
        print("ELECTION: " + a)
    for a in sanom[:10]:
        print("SEMAPHORE: " + a)
    for a in canom[:10]:
        print("CAMPAIGN: " + a)
    for a in kanom[:10]:
        print("COUNTER: " + a)
    for h, paths in sorted(((canary or {}).get("diverged_paths") or {}).items()):
        for m in paths:
            print("ZOOKEEPER DIVERGED: %s lacks %s, acknowledged at %s" % (h, m["path"], fmt_t(m["acked_at"], t0)))
        if paths:
            ev = faults_near(faults, paths[0]["acked_at"] - 10, paths[-1]["acked_at"] + 10, t0)
            print("\n".join(ev) if ev else "    (no fault nearby)")
    if canary and canary["missing"]:
        for m in canary["first_missing"]:
            print("ZOOKEEPER LOST: %s, acknowledged at %s" % (m["path"], fmt_t(m["acked_at"], t0)))
        ev = faults_near(faults, canary["missing_from"] - 10, canary["missing_to"] + 10, t0)
        print("\n".join(ev) if ev else "    (no fault nearby)")
    print("verdict: %s%s" % (fig["verdict"], (": " + "; ".join(anomalies)) if anomalies else ""))
    print("FAULTRUN-FIGURES " + json.dumps(fig, sort_keys=True))
    return 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
