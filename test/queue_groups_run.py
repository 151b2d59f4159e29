#!/usr/bin/python3
"""queue_groups_run.py - the load and the checker of the message groups'
order and exclusivity test (test/t/360_queue_groups.pl).

usage:
  queue_groups_run.py setup --host HOST --port PORT
  queue_groups_run.py load  --dir DIR --host HOST --a PORT --b PORT --zk HOSTS --queue Q
                            [--groups 6] [--per-group 25] [--ungrouped 40] [--consumers 4]
                            [--rollback 0.25] [--seconds 20] [--max-seconds 300] [--seed N]
  queue_groups_run.py check --dir DIR --host HOST --a PORT --b PORT [--mutate]

setup: creates, in database postgres, the tables
  g_produced(id, grp, seq, tx, cluster)   one row per item, in the producer's transaction
  g_consumed(tx, id, msg_id, attempts)     one row per item, in the consumer's transaction
  g_handouts(...)                          every hand-out the consumers saw (written by load
                                           at its end, on A only)

load: one producer and --consumers consumers on each of clusters A and B,
and a sampler of ZooKeeper, until every item produced is consumed (or
--max-seconds).  Every payload is JSON {"id": ..., "g": group or null,
"s": its sequence number in its group (1, 2, ...)}: zk_message has no group.

  producer (one, so its order is the publication order): the items of
      --groups groups (--per-group each) and --ungrouped ungrouped items,
      drawn in a random order that keeps each group's sequence numbers
      ascending, go out in transactions of 1 to 4 items, each on A or B at
      random, spread over --seconds: BEGIN; per item zk_enqueue_grouped(q,
      group, payload) (runs of one group's items sometimes as one array
      call), zk_enqueue(q, payload) for an ungrouped one, and an INSERT
      into g_produced; COMMIT (or, 10 %, ROLLBACK and the same items again).
      Each COMMIT returns once ZooKeeper holds the items, so the producer's
      order is their publication order.  While DIR/pause exists the producer
      waits between transactions (and says so with DIR/paused): the test's
      faults never hit a producer's COMMIT, whose fate and publication time
      would then be unknown.  A failed transaction is looked up in g_produced
      (by its tx) and done again only if it did not commit.
  consumer: BEGIN; SELECT msg_id, attempts, body, clock_timestamp() FROM
      zk_dequeue(q, '1s', k) (k 1, or 1 to 3 for one consumer in two); holds
      the items 20 to 200 ms; then either (75 %) INSERT each into g_consumed,
      SELECT clock_timestamp(); COMMIT, or (25 %) SELECT clock_timestamp();
      ROLLBACK.  Every hand-out is recorded: its items, the server's clock
      after zk_dequeue returned (start) and just before COMMIT or ROLLBACK
      (end; on an error the last clock the transaction read, at least the
      start), and the outcome.  Errors are tolerated (reconnect, go on).
  sampler: lists <queue>/entries through kazoo every 20 ms and reads each
      item listed: the items of one group listed together in one listing
      (an atomic snapshot) break the exclusivity.

check: reads g_handouts (A), g_produced and g_consumed (A and B) and
counts, printing "GROUPS-CHECK <json>" (exit 1 when an anomaly is found):
  lost, duplicated, phantom   produced ids consumed never, twice, never produced
  order_violations   groups whose committed hand-outs, in time order, are not
                     the sequence 1..N
  head_violations    hand-outs of a grouped item whose sequence number is not
                     one more than the committed hand-outs of its group before it
                     (a rollback must leave the item at the head)
  overlaps           two hand-outs of one group overlapping in time (one
                     started before the other's end)
  same_group_batch   one dequeue that returned two items of one group
  attempts_undercount  a hand-out whose attempts is below its rank among the
                     hand-outs of its item
and the figures: handouts, rollbacks, parallel (pairs of hand-outs of
different groups that overlap in time), by_cluster...  With --mutate the data
read is altered first (one hand-out moved into its predecessor's, two
committed sequence numbers swapped, one consumed row removed, one
duplicated): the checker must then report each.

Every time is a server's clock_timestamp() in seconds; both clusters run on
this machine (one clock).  The start of a hand-out is read after zk_dequeue
returned (no earlier than the item's claim), its end before COMMIT or
ROLLBACK is sent (no later than the claim's end), so a correct queue never
shows an overlap, whatever the latencies.
"""

import argparse
import collections
import json
import os
import random
import sys
import threading
import time
import traceback

sys.dont_write_bytecode = True

import psycopg2  # noqa: E402

SETUP_SQL = """
CREATE TABLE IF NOT EXISTS g_produced(id text PRIMARY KEY, grp text, seq int, tx text, cluster text);
CREATE TABLE IF NOT EXISTS g_consumed(tx text, id text, msg_id bigint, attempts int);
CREATE TABLE IF NOT EXISTS g_handouts(tx text, consumer text, cluster text, id text, grp text,
    seq int, msg_id bigint, attempts int, t_start float8, t_end float8, outcome text, nitems int);
"""


def connect(host, port, autocommit=False, app="groups"):
    c = psycopg2.connect(host=host, port=port, dbname="postgres", application_name=app,
                         connect_timeout=10)
    c.autocommit = autocommit
    return c


def close_quietly(c):
    if c is not None:
        try:
            c.close()
        except Exception:
            pass


def payload(item):
    return json.dumps({"id": item["id"], "g": item["g"], "s": item["s"]}, ensure_ascii=False)


def group_keys(n):
    base = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    keys = base[:n]
    # one at the 64-byte limit
    if n >= 4:
        keys[3] = "k" * 64
    while len(keys) < n:
        keys.append("g%d" % len(keys))
    return keys


# ---------------------------------------------------------------------------
# load


class Load:
    def __init__(self, args):
        self.a = args
        self.dir = args.dir
        self.rng = random.Random(args.seed)
        self.ports = {"A": args.a, "B": args.b}
        self.lock = threading.Lock()
        self.handouts = []
        self.errors = collections.Counter()
        self.error_samples = []
        self.deaths = []
        self.producer_done = threading.Event()
        self.stop = threading.Event()
        self.produced = 0
        self.total = 0
        self.prod_rollbacks = 0
        self.prod_retries = 0
        self.samples = 0
        self.sample_errors = 0
        self.max_in_entries = 0
        self.grouped_listed = 0
        self.sample_violations = []

    def err(self, who, e):
        with self.lock:
            self.errors[type(e).__name__] += 1
            if len(self.error_samples) < 30:
                self.error_samples.append("%.3f %s: %s: %s" % (time.time(), who, type(e).__name__,
                                                                str(e).strip()[:200]))

    # the items, in an order that keeps each group's sequence ascending
    def items(self):
        keys = group_keys(self.a.groups)
        left = {k: list(range(1, self.a.per_group + 1)) for k in keys}
        pool = []
        for gi, k in enumerate(keys):
            pool += [("g", gi, k)] * self.a.per_group
        pool += [("u", None, None)] * self.a.ungrouped
        self.rng.shuffle(pool)
        out = []
        un = 0
        for kind, gi, k in pool:
            if kind == "g":
                s = left[k].pop(0)
                out.append({"id": "g%d-%d" % (gi, s), "g": k, "s": s})
            else:
                un += 1
                out.append({"id": "u-%d" % un, "g": None, "s": un})
        return out

    def producer(self):
        items = self.items()
        self.total = len(items)
        txs = []
        i = 0
        while i < len(items):
            n = self.rng.randint(1, 4)
            txs.append(items[i:i + n])
            i += n
        gap = self.a.seconds / max(1, len(txs))
        conns = {}
        pause = os.path.join(self.dir, "pause")
        paused = os.path.join(self.dir, "paused")
        try:
            for ti, tx in enumerate(txs):
                txid = "p%d" % ti
                cl = self.rng.choice(["A", "B"])
                rollback_first = self.rng.random() < 0.10
                while True:
                    while os.path.exists(pause):
                        if not os.path.exists(paused):
                            open(paused, "w").close()
                        time.sleep(0.05)
                    if os.path.exists(paused):
                        os.unlink(paused)
                    c = conns.get(cl)
                    try:
                        if c is None or c.closed:
                            c = conns[cl] = connect(self.a.host, self.ports[cl], app="groups-producer")
                        cur = c.cursor()
                        j = 0
                        while j < len(tx):
                            it = tx[j]
                            if it["g"] is None or self.a.plain:
                                cur.execute("SELECT zk_enqueue(%s, %s::text)", (self.a.queue, payload(it)))
                                j += 1
                                continue
                            # a run of one group's items: sometimes one array call
                            k = j
                            while k < len(tx) and tx[k]["g"] == it["g"]:
                                k += 1
                            if k - j > 1 and self.rng.random() < 0.5:
                                cur.execute("SELECT zk_enqueue_grouped(%s, %s, %s::text[])",
                                            (self.a.queue, it["g"], [payload(x) for x in tx[j:k]]))
                                j = k
                            else:
                                cur.execute("SELECT zk_enqueue_grouped(%s, %s, %s::text)",
                                            (self.a.queue, it["g"], payload(it)))
                                j += 1
                        for it in tx:
                            cur.execute("INSERT INTO g_produced VALUES (%s, %s, %s, %s, %s)",
                                        (it["id"], it["g"], it["s"], txid, cl))
                        if rollback_first:
                            c.rollback()
                            rollback_first = False
                            self.prod_rollbacks += 1
                            continue
                        c.commit()
                        break
                    except Exception as e:
                        self.err("producer", e)
                        close_quietly(c)
                        conns[cl] = None
                        # did it commit?  (asked again until the cluster answers)
                        done = None
                        while done is None:
                            try:
                                q = connect(self.a.host, self.ports[cl], autocommit=True,
                                            app="groups-producer")
                                cur = q.cursor()
                                cur.execute("SELECT count(*) FROM g_produced WHERE tx = %s", (txid,))
                                done = cur.fetchone()[0] > 0
                                q.close()
                            except Exception as e2:
                                self.err("producer-check", e2)
                                time.sleep(0.3)
                        if done:
                            break
                        self.prod_retries += 1
                        time.sleep(0.2)
                self.produced += len(tx)
                time.sleep(gap * self.rng.uniform(0.5, 1.5))
        except Exception as e:
            self.deaths.append("producer: " + traceback.format_exc())
            raise e
        finally:
            for c in conns.values():
                close_quietly(c)
            if os.path.exists(paused):
                os.unlink(paused)
            self.producer_done.set()

    def consumer(self, cl, idx):
        name = "%s%d" % (cl, idx)
        batch = idx % 2 == 1
        c = None
        n = 0
        try:
            while not self.stop.is_set():
                if c is None:
                    try:
                        c = connect(self.a.host, self.ports[cl], app="groups-" + name)
                    except Exception as e:
                        self.err(name, e)
                        time.sleep(0.3)
                        continue
                n += 1
                tx = "%s-%d" % (name, n)
                rows = []
                t_last = None
                outcome = "error"
                try:
                    cur = c.cursor()
                    k = self.rng.randint(1, 3) if batch else 1
                    cur.execute("SELECT msg_id, attempts, body, extract(epoch FROM clock_timestamp())::float8"
                                " FROM zk_dequeue(%s, '1s', %s)", (self.a.queue, k))
                    rows = cur.fetchall()
                    if not rows:
                        c.rollback()
                        continue
                    t_last = rows[0][3]
                    time.sleep(self.rng.uniform(0.02, 0.2))
                    if self.rng.random() < self.a.rollback:
                        outcome = "rolled_back"
                        cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
                        t_last = cur.fetchone()[0]
                        c.rollback()
                    else:
                        for msg_id, attempts, body, _t in rows:
                            p = json.loads(body)
                            cur.execute("INSERT INTO g_consumed VALUES (%s, %s, %s, %s)",
                                        (tx, p["id"], msg_id, attempts))
                        cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
                        t_last = cur.fetchone()[0]
                        outcome = "commit_failed"
                        c.commit()
                        outcome = "committed"
                except Exception as e:
                    self.err(name, e)
                    close_quietly(c)
                    c = None
                    time.sleep(0.1)
                finally:
                    with self.lock:
                        for msg_id, attempts, body, t0 in rows:
                            try:
                                p = json.loads(body)
                            except Exception:
                                p = {"id": "unparsable:" + repr(body), "g": None, "s": None}
                            self.handouts.append({
                                "tx": tx, "consumer": name, "cluster": cl, "id": p["id"],
                                "grp": p["g"], "seq": p["s"], "msg_id": msg_id, "attempts": attempts,
                                "t_start": t0, "t_end": t_last if t_last is not None else t0,
                                "outcome": outcome, "nitems": len(rows)})
        except Exception:
            self.deaths.append(name + ": " + traceback.format_exc())
        finally:
            close_quietly(c)

    def sampler(self):
        from kazoo.client import KazooClient
        import logging
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        zk = KazooClient(hosts=self.a.zk, timeout=10.0)
        zk.start(timeout=30)
        path = self.a.zk_path + "/entries"
        data_of = {}
        try:
            while not self.stop.is_set():
                try:
                    names = zk.get_children(path) if zk.exists(path) else []
                    per = collections.Counter()
                    listed = {}
                    for n in names:
                        if n not in data_of:
                            try:
                                d, _ = zk.get(path + "/" + n)
                                data_of[n] = json.loads(d.decode())
                            except Exception:
                                continue     # gone since the listing: it counts for nothing
                        g = data_of[n].get("g")
                        if g is not None:
                            per[g] += 1
                            listed.setdefault(g, []).append(n)
                    self.samples += 1
                    self.grouped_listed += sum(per.values())
                    if per:
                        self.max_in_entries = max(self.max_in_entries, max(per.values()))
                    for g, cnt in per.items():
                        if cnt > 1 and len(self.sample_violations) < 20:
                            self.sample_violations.append({"t": time.time(), "group": g,
                                                           "entries": listed[g]})
                except Exception:
                    self.sample_errors += 1
                    time.sleep(0.2)
                time.sleep(0.02)
        finally:
            try:
                zk.stop()
                zk.close()
            except Exception:
                pass

    def consumed_ids(self):
        """distinct ids in g_consumed on A and B, None when a cluster does not answer"""
        ids = set()
        for cl in ("A", "B"):
            try:
                c = connect(self.a.host, self.ports[cl], autocommit=True, app="groups-monitor")
                cur = c.cursor()
                cur.execute("SELECT DISTINCT id FROM g_consumed")
                ids |= {r[0] for r in cur.fetchall()}
                c.close()
            except Exception:
                return None
        return ids

    def run(self):
        t0 = time.time()
        try:
            c = connect(self.a.host, self.a.a, autocommit=True)
            cur = c.cursor()
            cur.execute("SELECT zk_path('queue', %s)", (self.a.queue,))
            self.a.zk_path = cur.fetchone()[0]
            c.close()
        except Exception as e:
            print("cannot read the queue's path: %s" % e, file=sys.stderr)
            return 2
        threads = [threading.Thread(target=self.producer, name="producer")]
        threads += [threading.Thread(target=self.consumer, args=(cl, i), name="%s%d" % (cl, i))
                    for cl in ("A", "B") for i in range(self.a.consumers)]
        sampler = threading.Thread(target=self.sampler, name="sampler")
        sampler.start()
        for t in threads:
            t.start()
        done = False
        progress = os.path.join(self.dir, "progress")
        while time.time() - t0 < self.a.max_seconds:
            time.sleep(0.5)
            ids = self.consumed_ids()
            if ids is not None:
                with open(progress + ".tmp", "w") as f:
                    f.write("%d %d %d\n" % (len(ids), self.produced, self.total))
                os.replace(progress + ".tmp", progress)
            if self.producer_done.is_set() and ids is not None and self.total and len(ids) >= self.total:
                done = True
                break
        self.stop.set()
        for t in threads:
            t.join(60)
        sampler.join(60)
        hung = [t.name for t in threads + [sampler] if t.is_alive()]
        # the hand-outs into g_handouts on A
        wrote = False
        for _ in range(60):
            try:
                c = connect(self.a.host, self.a.a, app="groups-writer")
                cur = c.cursor()
                cur.execute("DELETE FROM g_handouts")
                for h in self.handouts:
                    cur.execute("INSERT INTO g_handouts VALUES (%(tx)s, %(consumer)s, %(cluster)s, %(id)s,"
                                " %(grp)s, %(seq)s, %(msg_id)s, %(attempts)s, %(t_start)s, %(t_end)s,"
                                " %(outcome)s, %(nitems)s)", h)
                c.commit()
                c.close()
                wrote = True
                break
            except Exception as e:
                self.err("writer", e)
                time.sleep(1)
        report = {
            "done": done, "seconds": round(time.time() - t0, 1), "total": self.total,
            "produced": self.produced, "producer_rollbacks": self.prod_rollbacks,
            "producer_retries": self.prod_retries, "handouts": len(self.handouts),
            "outcomes": dict(collections.Counter(h["outcome"] for h in self.handouts)),
            "errors": dict(self.errors), "error_samples": self.error_samples,
            "deaths": self.deaths, "hung": hung, "handouts_written": wrote,
            "samples": self.samples, "sample_errors": self.sample_errors,
            "grouped_listed": self.grouped_listed, "max_in_entries": self.max_in_entries,
            "sample_violations": self.sample_violations,
        }
        print("GROUPS-LOAD " + json.dumps(report), flush=True)
        return 0 if done and wrote and not self.deaths and not hung else 1


# ---------------------------------------------------------------------------
# check


def fetch(host, port, sql):
    c = connect(host, port, autocommit=True, app="groups-check")
    try:
        cur = c.cursor()
        cur.execute(sql)
        return cur.fetchall()
    finally:
        c.close()


def check(args):
    produced = {}
    consumed = []
    for cl, port in (("A", args.a), ("B", args.b)):
        for id_, grp, seq in fetch(args.host, port, "SELECT id, grp, seq FROM g_produced"):
            produced[id_] = (grp, seq)
        for tx, id_, msg_id, attempts in fetch(args.host, port,
                                               "SELECT tx, id, msg_id, attempts FROM g_consumed"):
            consumed.append({"tx": tx, "id": id_, "msg_id": msg_id, "attempts": attempts, "cluster": cl})
    cols = ["tx", "consumer", "cluster", "id", "grp", "seq", "msg_id", "attempts", "t_start", "t_end",
            "outcome", "nitems"]
    handouts = [dict(zip(cols, r)) for r in fetch(args.host, args.a, "SELECT * FROM g_handouts")]
    mutations = []
    if args.mutate:
        mutations = mutate(handouts, consumed)
    committed_tx = {(c["tx"], c["id"]) for c in consumed}
    for h in handouts:
        h["committed"] = (h["tx"], h["id"]) in committed_tx
    f = collections.OrderedDict()
    f["produced"] = len(produced)
    f["grouped_produced"] = sum(1 for g, s in produced.values() if g is not None)
    cnt = collections.Counter(c["id"] for c in consumed)
    f["consumed_rows"] = len(consumed)
    f["lost"] = sum(1 for i in produced if cnt[i] == 0)
    f["duplicated"] = sum(1 for i, n in cnt.items() if n > 1)
    f["phantom"] = sum(1 for i in cnt if i not in produced)
    # hand-outs of a committed transaction that are not in g_consumed (the
    # client saw it commit): a mismatch of the bookkeeping
    f["committed_not_recorded"] = sum(1 for h in handouts if h["outcome"] == "committed" and not h["committed"])
    f["handouts"] = len(handouts)
    f["rollbacks"] = sum(1 for h in handouts if h["outcome"] == "rolled_back")
    f["errors"] = sum(1 for h in handouts if h["outcome"] in ("error", "commit_failed"))
    f["by_cluster"] = dict(collections.Counter(c["cluster"] for c in consumed))
    f["ungrouped_consumed"] = sum(1 for c in consumed if c["id"] in produced and produced[c["id"]][0] is None)
    groups = collections.defaultdict(list)
    for h in handouts:
        if h["grp"] is not None:
            groups[h["grp"]].append(h)
    f["groups"] = len(groups)
    order_v, head_v, overlaps = 0, 0, 0
    examples = collections.defaultdict(list)
    for g, hs in groups.items():
        hs.sort(key=lambda h: (h["t_start"], h["t_end"]))
        seqs = [h["seq"] for h in hs if h["committed"]]
        if seqs != list(range(1, len(seqs) + 1)) or \
                len(seqs) != sum(1 for s in produced.values() if s[0] == g):
            order_v += 1
            examples["order"].append("group %s: committed in the order %s" % (g, seqs))
        done = 0
        for h in hs:
            if h["seq"] != done + 1:
                head_v += 1
                if len(examples["head"]) < 10:
                    examples["head"].append("group %s: %s handed out (tx %s, %s) after %d committed"
                                    % (g, h["id"], h["tx"], h["outcome"], done))
            if h["committed"]:
                done = max(done, h["seq"])
        end = None
        prev = None
        for h in hs:
            if end is not None and h["t_start"] < end:
                overlaps += 1
                if len(examples["overlap"]) < 10:
                    examples["overlap"].append("group %s: %s (tx %s) started at %.6f, before %s (tx %s, %s) ended at %.6f"
                                    % (g, h["id"], h["tx"], h["t_start"], prev["id"], prev["tx"],
                                       prev["outcome"], end))
            if end is None or h["t_end"] > end:
                end, prev = h["t_end"], h
    f["order_violations"] = order_v
    f["head_violations"] = head_v
    f["overlaps"] = overlaps
    by_tx = collections.defaultdict(list)
    for h in handouts:
        by_tx[h["tx"]].append(h)
    f["same_group_batch"] = sum(1 for hs in by_tx.values()
                                if len([h for h in hs if h["grp"] is not None])
                                != len({h["grp"] for h in hs if h["grp"] is not None}))
    f["batches"] = sum(1 for hs in by_tx.values() if len(hs) > 1)
    # attempts: at least the rank of the hand-out among its item's
    per_item = collections.defaultdict(list)
    for h in handouts:
        per_item[h["id"]].append(h)
    under = 0
    again = 0
    for i, hs in per_item.items():
        hs.sort(key=lambda h: h["t_start"])
        for rank, h in enumerate(hs, 1):
            if h["attempts"] is not None and h["attempts"] < rank:
                under += 1
        if len(hs) > 1:
            again += 1
    f["attempts_undercount"] = under
    f["handed_out_again"] = again
    # parallelism: hand-outs of different groups overlapping in time
    gh = sorted((h for h in handouts if h["grp"] is not None), key=lambda h: h["t_start"])
    par = 0
    for i, h in enumerate(gh):
        for h2 in gh[i + 1:]:
            if h2["t_start"] >= h["t_end"]:
                break
            if h2["grp"] != h["grp"]:
                par += 1
    f["parallel"] = par
    f["max_group_parallel"] = 0
    # how many groups were out at once, at most
    ev = sorted([(h["t_start"], 1, h["grp"]) for h in gh] + [(h["t_end"], -1, h["grp"]) for h in gh])
    out = collections.Counter()
    for t, d, g in ev:
        out[g] += d
        f["max_group_parallel"] = max(f["max_group_parallel"], sum(1 for v in out.values() if v > 0))
    f["mutations"] = mutations
    f["examples"] = examples
    bad = any(f[k] for k in ("lost", "duplicated", "phantom", "order_violations", "head_violations",
                             "overlaps", "same_group_batch", "attempts_undercount", "committed_not_recorded"))
    f["verdict"] = "anomalies" if bad else "ok"
    print("GROUPS-CHECK " + json.dumps(f), flush=True)
    return 1 if bad else 0


def mutate(handouts, consumed):
    done = []
    com = {(c["tx"], c["id"]) for c in consumed}
    by_g = collections.defaultdict(list)
    for h in handouts:
        if h["grp"] is not None and (h["tx"], h["id"]) in com:
            by_g[h["grp"]].append(h)
    gs = [g for g in sorted(by_g) if len(by_g[g]) >= 3]
    if gs:
        hs = sorted(by_g[gs[0]], key=lambda h: h["t_start"])
        # the second committed hand-out starts inside the first
        hs[1]["t_start"] = (hs[0]["t_start"] + hs[0]["t_end"]) / 2
        done.append("overlap")
    if len(gs) > 1:
        hs = sorted(by_g[gs[1]], key=lambda h: h["t_start"])
        hs[1]["seq"], hs[2]["seq"] = hs[2]["seq"], hs[1]["seq"]
        done.append("swap")
    if consumed:
        consumed.append(dict(consumed[0]))
        done.append("duplicate")
        consumed.pop(len(consumed) // 2)
        done.append("remove")
    return done


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=["setup", "load", "check"])
    ap.add_argument("--dir", default=".")
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int)
    ap.add_argument("--a", type=int)
    ap.add_argument("--b", type=int)
    ap.add_argument("--zk")
    ap.add_argument("--queue", default="gq")
    ap.add_argument("--groups", type=int, default=6)
    ap.add_argument("--per-group", type=int, default=25)
    ap.add_argument("--ungrouped", type=int, default=40)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--rollback", type=float, default=0.25)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--mutate", action="store_true")
    ap.add_argument("--plain", action="store_true",
                    help="load: enqueue every item with zk_enqueue, without its group (the checker must "
                    "then find the groups' order and exclusivity broken)")
    args = ap.parse_args()
    if args.cmd == "setup":
        c = connect(args.host, args.port, autocommit=True)
        c.cursor().execute(SETUP_SQL)
        c.close()
        return 0
    if args.cmd == "load":
        if args.seed is None:
            args.seed = random.randrange(1 << 30)
        print("seed %d" % args.seed, flush=True)
        return Load(args).run()
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
