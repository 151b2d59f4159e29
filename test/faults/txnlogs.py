"""txnlogs.py - what ZooKeeper's own transaction logs say about a fault run.

When the checker finds an anomaly (or ZKLOCK_FAULTS_TXNLOGS=1 asks for it
anyway), it reads every server's transaction logs (RUNDIR/zk/sN/data/version-2,
kept by the run) with ZooKeeper's TxnLogToolkit and tells the two causes of a
lost or duplicated item apart:

  ZooKeeper's    a zxid that two servers logged with different contents,
                 or a zxid inside one server's logged range that another
                 server logged and this one lacks (named with the queue
                 items it deleted, when it deleted any: had that server
                 led, the items came back): the replicas' logs
                 disagree.  That is evidence, not proof, of a lost write: a
                 deposed leader's proposals that were never committed stay
                 in its log too; the canary's read-back of every acknowledged
                 write (zk_canary.py) is what proves a loss
  zklock's       a request of an old zklock session applied after the
                 session that succeeded it in the same cluster was created
                 (a late request: what issue 36 is about); listed with its
                 path, so the anomaly's item can be looked up in it

The sessions of each cluster are read from its PostgreSQL log ("zookeeper
session 0x... established"), in order.  A session closed or expired
(closeSession) that still has a later transaction is listed too (ZooKeeper
must never do that).
"""

import glob
import os
import re
import subprocess

LINE = re.compile(r"session (0x[0-9a-f]+) cxid (0x[0-9a-f]+) zxid (0x[0-9a-f]+) (\w+)(.*)")
SESSION = re.compile(r"zookeeper session (0x[0-9a-f]+) established")
TOOL = "org.apache.zookeeper.server.persistence.TxnLogToolkit"
# in TxnLogToolkit's dump of a multi: "create:" or "delete:", the path's
# length (4 bytes), the path, and for a create the data's length and data
ITEM_MADE = re.compile(r"create:\x00\x00\x00[\s\S](/[^\x00;\s]*/entries/entry-[0-9a-z-]+)"
                       r"\x00\x00\x00[\s\S]([^\x00]*)")
ITEM_DELETED = re.compile(r"delete:\x00\x00\x00[\s\S](/[^\x00;\s]*/entries/entry-[0-9a-z-]+)(?=[\x00;\s]|$)")


def classpath(zk_sh):
    r = subprocess.run(["bash", zk_sh, "classpath"], capture_output=True, text=True, timeout=60)
    return r.stdout.strip() if r.returncode == 0 else None


def read_log(cp, path, timeout=300):
    """{zxid: (session, cxid, type, detail)} of one transaction log file."""
    r = subprocess.run(["java", "-cp", cp, TOOL, "-d", path], capture_output=True,
                       text=True, errors="replace", timeout=timeout)
    txns = {}
    for line in r.stdout.splitlines():
        m = LINE.search(line)
        if m is None:
            continue
        sess, cxid, zxid, typ, rest = m.groups()
        rest = rest.strip()
        # a refused request is logged too (an error, or a multi of errors):
        # it changed nothing
        if typ == "multi":
            ops = re.findall(r"(?:^|;)(\w+):", rest)
            changed = any(op != "error" and op != "check" for op in ops)
        else:
            changed = typ not in ("error", "createSession", "closeSession")
        detail = "".join(ch if ch.isprintable() else "." for ch in rest[:160])
        # a queue item's node: made (its body follows the path) or deleted
        items = {"made": dict(ITEM_MADE.findall(rest)) if "create" in rest else {},
                 "deleted": ITEM_DELETED.findall(rest) if "delete" in rest else []}
        txns[int(zxid, 16)] = (int(sess, 16), int(cxid, 16), typ, detail, changed, items)
    return txns


def cluster_sessions(logfile):
    """The zklock sessions of one cluster, in the order they were established."""
    out = []
    try:
        with open(logfile, errors="replace") as f:
            for line in f:
                m = SESSION.search(line)
                if m:
                    s = int(m.group(1), 16)
                    if s not in out:
                        out.append(s)
    except OSError:
        pass
    return out


def analyse(d, run, zk_sh, max_lines=40):
    """(figures, report lines) for run directory d.

    Only transactions that changed something count as applied: ZooKeeper logs
    a refused request (an error, a multi of errors) with a zxid of its own."""
    fig = {"txnlog_servers": 0, "txnlog_txns": 0, "txnlog_diverged": 0,
           "txnlog_missing": 0, "txnlog_late_requests": 0, "txnlog_after_close": 0,
           "txnlog_lost_item_deletes": []}
    lines = []
    cp = classpath(zk_sh)
    if not cp:
        return fig, ["txnlogs: no ZooKeeper class path (tools/zk.sh classpath failed)"]
    servers = {}
    ranges = {}
    for sdir in sorted(glob.glob(os.path.join(d, "zk", "s*"))):
        txns = {}
        for f in sorted(glob.glob(os.path.join(sdir, "data", "version-2", "log.*"))):
            try:
                one = read_log(cp, f)
            except (subprocess.SubprocessError, OSError) as e:
                lines.append("txnlogs: could not read %s: %r" % (f, e))
                continue
            txns.update(one)
            if one:
                # one file is one run of consecutive proposals; a server synced
                # by a snapshot starts a new file (a gap between files is no loss)
                ranges.setdefault(os.path.basename(sdir), []).append((min(one), max(one)))
        if txns:
            servers[os.path.basename(sdir)] = txns
    fig["txnlog_servers"] = len(servers)
    union = {}
    for name, txns in servers.items():
        fig["txnlog_txns"] = max(fig["txnlog_txns"], len(txns))
        for z, t in txns.items():
            union.setdefault(z, {})[name] = t
    # ZooKeeper's: divergence and holes inside a server's own range
    for z in sorted(union):
        seen = union[z]
        if len(set(t[:3] + (t[4],) for t in seen.values())) > 1:
            fig["txnlog_diverged"] += 1
            if fig["txnlog_diverged"] <= 10:
                lines.append("ZOOKEEPER: zxid 0x%x differs between servers: %s"
                             % (z, "; ".join("%s %s%s %s" % (n, t[2], "" if t[4] else " (refused)", t[3])
                                             for n, t in sorted(seen.items()))))
    # the bodies of the queue items whose nodes were made
    body_of = {}
    for z in sorted(union):
        for t in union[z].values():
            body_of.update(t[5]["made"])
    fig["txnlog_lost_item_deletes"] = []
    for name, txns in servers.items():
        holes = [z for z in union if z not in txns and
                 any(lo < z < hi for lo, hi in ranges.get(name, []))]
        fig["txnlog_missing"] += len(holes)
        for z in sorted(holes)[:10]:
            t = next(iter(union[z].values()))
            lines.append("ZOOKEEPER: %s lacks zxid 0x%x that %s logged: %s %s"
                         % (name, z, ",".join(sorted(union[z])), t[2], t[3]))
        # a hole that deleted queue items (a consumption, a move): were that
        # server to lead, the items would be back -- a duplicate ZooKeeper made
        for z in sorted(holes):
            t = next(iter(union[z].values()))
            if not t[4] or not t[5]["deleted"]:
                continue
            for path in t[5]["deleted"]:
                body = body_of.get(path, "?")
                fig["txnlog_lost_item_deletes"].append(body)
                lines.append("ZOOKEEPER: %s lacks zxid 0x%x (logged by %s), which deleted queue item %s"
                             " (%s): if %s led after it, ZooKeeper brought the item back"
                             % (name, z, ",".join(sorted(union[z])), body, path, name))
    # zklock's: requests of an old session applied after its successor began
    created = {}
    closed = {}
    by_session = {}
    for z in sorted(union):
        sess, _cxid, typ, detail, changed, _items = next(iter(union[z].values()))
        if typ == "createSession":
            created.setdefault(sess, z)
        elif typ == "closeSession":
            closed.setdefault(sess, z)
        elif changed:
            by_session.setdefault(sess, []).append((z, typ, detail))
    for sess, zs in by_session.items():
        c = closed.get(sess)
        late = [x for x in zs if c is not None and x[0] > c]
        fig["txnlog_after_close"] += len(late)
        for z, typ, detail in late[:5]:
            lines.append("ZOOKEEPER: session 0x%x closed at zxid 0x%x, yet zxid 0x%x %s %s"
                         % (sess, c, z, typ, detail))
    for cname in run.get("clusters", []):
        seq = cluster_sessions(run.get("logs", {}).get(cname, ""))
        for old, new in zip(seq, seq[1:]):
            start = created.get(new)
            if start is None:
                continue
            late = [x for x in by_session.get(old, []) if x[0] > start]
            fig["txnlog_late_requests"] += len(late)
            for z, typ, detail in late[:max_lines]:
                lines.append("zklock: cluster %s's old session 0x%x: zxid 0x%x %s %s, after its successor"
                             " 0x%x began (zxid 0x%x)" % (cname, old, z, typ, detail, new, start))
    return fig, lines
