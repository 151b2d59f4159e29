"""conc.py - the concurrent mode of the model-based tester: threads race on
the same queue and lock names from both clusters and kazoo, while a nemesis
thread cancels and terminates their backends and statement timeouts cut
waits short.  The checks are the ones that hold whatever the interleaving:

queue  every item of a transaction whose COMMIT was acknowledged is consumed
       exactly once (by committed consumers, kazoo, or the final drain); no
       item is consumed twice; nothing consumed was never committed (a
       rolled-back enqueue, one rolled back to a savepoint); a try answers
       within 2 s.
semaphore  the leases of the intervals that certainly lie inside a hold
       never add up to more than max_leases at any instant (SQL sessions
       taking 1 or 2 permits at once, each its own number; kazoo's
       Semaphore one).
lock   intervals that certainly lie inside a hold (from the grant's answer to
       the release's start, or to the terminate that ended the backend) never
       overlap when one of them is exclusive; fencing tokens of exclusive
       holds grow with their order in time; a try answers within 2 s.
       Two crossed lockers (one per cluster) take the lock and a second name
       one by one, each in a random order, in one transaction, with waits
       longer than deadlock_timeout: a 40P01 is accepted only from them and
       only when their records show a circle of waits at its time (each
       member waiting for a name the next one holds, SLACK_S either way);
       any other 40P01 is unexpected.  The second name's holds are checked
       like the first's.
counter  sessions of both clusters and kazoo's Counter add 1 to one
       counter: the values the adds returned are all distinct; the final
       value lies between the adds acknowledged and those plus the adds
       whose outcome is unknown (an error: cancelled, terminated, each may
       or may not have been applied), and no value returned is above it.
campaign  sessions of both clusters (zk_campaign, zk_try_campaign,
       zk_session_campaign ... zk_resign) and kazoo's Lock on the campaign's
       path stand for one name: the intervals that certainly lie inside a
       leadership never overlap, and the fencing tokens grow with their
       order in time (the lock's check).
"""

import collections
import contextlib
import random
import threading
import time

import psycopg2

from driver import FAST, first_line, now

# --control (model.py): the lockers count every attempt as a hold and the
# consumers count rolled-back dequeues as consumed, so the checks must
# report overlaps and duplicates (the checker can fail)

SECONDS = 6.0
SLACK_S = 0.25      # crossed lockers: client clocks vs grants and releases


class Conc:
    """Looks like a History to model.py (calls, anomalies, trace)."""

    def __init__(self, env, seed, ns, control=False):
        self.control = control
        self.env = env
        self.seed = seed
        self.ns = ns
        self.rnd = random.Random(seed)
        self.lock = threading.Lock()
        self.calls = collections.Counter()
        self.anomalies = []
        self.trace = []
        self.stop = threading.Event()
        self.pids = {}                 # thread name -> backend pid
        self.terminated = []           # (pid, time)
        self.events = []               # nemesis: (time, what, thread/pid)
        self.t_start = now()
        r = self.rnd
        self.recipes = [x for x in ("queue", "lock", "semaphore", "counter", "campaign") if x in env.recipes]
        if not self.recipes:
            self.recipes = []
        self.recipe = r.choice(self.recipes) if self.recipes else None
        self.q = "%s-cq" % ns
        self.lname = "%s-cl" % ns
        self.sname = "%s-cs" % ns
        self.smax = r.choice([1, 2, 3])
        self.sem_k = {}                # a SQL taker's permits (kazoo's: 1)
        # queue records
        self.produced = {}             # body -> "committed" | "aborted" | "unknown"
        self.consumed = collections.defaultdict(list)   # body -> [who] (committed)
        self.consumed_unknown = collections.defaultdict(list)
        # lock records
        self.holds = []                # (start, end_or_None, mode, token, owner, pid)
        self.lname2 = "%s-cl2" % ns
        self.holds2 = []               # the same, of lname2 (crossed lockers)
        self.crossed = []              # crossed lockers' attempts (see crossed_locker)
        self.crossed_names = set()
        # counter records
        self.cname = "%s-cc" % ns
        self.added = []                # (value, who): adds acknowledged
        self.add_unknown = 0           # adds that failed: may or may not have been applied
        # campaign records (in holds, as the lock's)
        self.vname = "%s-cv" % ns
        self.tallies = collections.Counter()
        self.setup = {"recipes": [self.recipe]}

    def count(self, recipe, n=1):
        with self.lock:
            self.calls[recipe] += n

    def anomaly(self, kind, msg):
        with self.lock:
            self.anomalies.append((kind, msg, 0))

    # ---- SQL helpers
    def connect(self, label, name):
        c = self.env.cluster(label)
        conn = psycopg2.connect(host="127.0.0.1", port=c.port, user="postgres", dbname="postgres",
                                connect_timeout=5, application_name="model-conc-" + name,
                                options="-c statement_timeout=10s")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]
        with self.lock:
            self.pids[name] = (label, pid)
        return conn

    def ex(self, conn, recipe, sql, args=None, must_fast=False):
        self.count(recipe)
        t0 = now()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                rows = cur.fetchall() if cur.description else []
            err = None
        except psycopg2.Error as e:
            rows, err = None, e
        el = now() - t0
        if must_fast and el > FAST:
            self.anomaly("slow-call", "%s took %.2fs (concurrent mode)%s"
                         % (sql % tuple(repr(a) for a in (args or ())), el,
                            "" if err is None else ": " + first_line(err)))
        if err is not None:
            raise err
        return rows

    def sql_client(self, label, name, step, pause=None):
        """step(conn) again and again until the run stops, on a connection
        to cluster label (made again when lost); an error is recovered from
        (recover) and the connection dropped if it closed.  pause() after
        each step, unless the step returned True."""
        conn = None
        while not self.stop.is_set():
            skip = False
            try:
                if conn is None or conn.closed:
                    conn = self.connect(label, name)
                skip = step(conn)
            except psycopg2.Error as e:
                self.recover(conn, e, name)
                if conn is not None and conn.closed:
                    conn = None
            if pause is not None and not skip:
                pause()
        if conn is not None:
            conn.close()

    # ---- queue
    def producer(self, label, idx):
        name = "p%d%s" % (idx, label)
        r = random.Random(self.seed * 31 + idx)
        n = 0

        def step(conn):
            nonlocal n
            bodies = []
            self.ex(conn, "xact", "BEGIN")
            for _ in range(r.randint(1, 3)):
                n += 1
                b = "%s-%s-%d" % (self.ns, name, n)
                self.ex(conn, "queue", "SELECT zk_enqueue(%s, %s::text, %s)", (self.q, b, r.choice([100, 100, 0, 500])))
                bodies.append(b)
            if r.random() < 0.2:
                n += 1
                b = "%s-%s-%d" % (self.ns, name, n)
                self.ex(conn, "xact", "SAVEPOINT a")
                self.ex(conn, "queue", "SELECT zk_enqueue(%s, %s::text)", (self.q, b))
                self.ex(conn, "xact", "ROLLBACK TO SAVEPOINT a")
                with self.lock:
                    self.produced[b] = "aborted"
            for b in bodies:
                with self.lock:
                    self.produced[b] = "unknown"
            if r.random() < 0.2:
                self.ex(conn, "xact", "ROLLBACK")
                with self.lock:
                    for b in bodies:
                        self.produced[b] = "aborted"
                return True
            try:
                self.ex(conn, "xact", "COMMIT")
                with self.lock:
                    for b in bodies:
                        self.produced[b] = "committed"
            except psycopg2.Error as e:
                if e.pgcode is not None and not conn.closed:
                    with self.lock:
                        for b in bodies:
                            self.produced[b] = "aborted"
                raise
        self.sql_client(label, name, step, pause=lambda: self.stop.wait(r.random() * 0.02))

    def recover(self, conn, e, name=None):
        # 40P01: a crossed locker's, checked against its circle in check_crossed
        if e.pgcode == "40P01" and name in self.crossed_names:
            pass
        elif e.pgcode not in (None, "57014", "57P01", "55P03", "40001", "08006"):
            self.anomaly("unexpected-error", "concurrent: %s %s" % (e.pgcode, first_line(e)))
        if conn is not None and not conn.closed:
            try:
                with conn.cursor() as cur:
                    cur.execute("ROLLBACK")
            except psycopg2.Error:
                pass

    def consumer(self, label, idx):
        name = "c%d%s" % (idx, label)
        r = random.Random(self.seed * 37 + idx)

        def step(conn):
            got = []
            self.ex(conn, "xact", "BEGIN")
            how = r.choice(["try", "0", "200ms", "1s", "st"])
            m = r.choice([1, 1, 2, 3])
            if how == "try":
                rows = self.ex(conn, "queue", "SELECT body FROM zk_try_dequeue(%s, %s)", (self.q, m), must_fast=True)
            elif how == "st":
                self.ex(conn, "xact", "SET LOCAL statement_timeout = 300")
                rows = self.ex(conn, "queue", "SELECT body FROM zk_dequeue(%s, '5s', %s)", (self.q, m))
            else:
                rows = self.ex(conn, "queue", "SELECT body FROM zk_dequeue(%s, %s::interval, %s)", (self.q, how, m),
                               must_fast=(how == "0"))
            got = [x[0] for x in rows]
            if got and r.random() < 0.3:
                time.sleep(r.random() * 0.05)
            if r.random() < 0.25:
                self.ex(conn, "xact", "ROLLBACK")
                if self.control:             # the control: counts rolled-back dequeues too
                    with self.lock:
                        for b in got:
                            self.consumed[b].append(name)
                return
            try:
                self.ex(conn, "xact", "COMMIT")
                with self.lock:
                    for b in got:
                        self.consumed[b].append(name)
            except psycopg2.Error as e:
                if (e.pgcode is None or conn.closed) and got:
                    with self.lock:
                        for b in got:
                            self.consumed_unknown[b].append(name)
                raise
        self.sql_client(label, name, step)

    def kazoo_client(self, what, body):
        """body(zk) with a started kazoo client of the ensemble, closed after;
        what it raises is an anomaly (a concurrent kazoo WHAT client)."""
        from kazoo.client import KazooClient
        zk = KazooClient(hosts=self.env.zk.hosts, timeout=10.0)
        try:
            zk.start(timeout=15)
            body(zk)
        except Exception as e:
            self.anomaly("kazoo-error", "concurrent kazoo %s client: %r" % (what, e))
        finally:
            with contextlib.suppress(Exception):
                zk.stop()
                zk.close()

    def kazoo_hold(self, r, recipe, mode, idx, lk, timeouts):
        """One attempt of kazoo's lock or semaphore lk (0.3 s); a hold is
        kept for up to 30 ms and recorded, then released."""
        self.count(recipe)
        try:
            got = lk.acquire(timeout=0.3)
        except timeouts:
            got = False
        if got:
            a = now()
            time.sleep(r.random() * 0.03)
            with self.lock:
                self.holds.append((a, now(), mode, None, "k%d" % idx, None, "kazoo"))
            lk.release()
            self.count(recipe)

    def kazoo_queue(self, idx):
        r = random.Random(self.seed * 41 + idx)

        def body(zk):
            q = zk.LockingQueue("/zklock/queues/" + self.q)
            n = 0
            while not self.stop.is_set():
                self.count("queue")
                if r.random() < 0.4:
                    n += 1
                    b = "%s-k%d-%d" % (self.ns, idx, n)
                    q.put(b.encode(), priority=r.choice([100, 0]))
                    with self.lock:
                        self.produced[b] = "committed"
                    continue
                v = q.get(timeout=0.2)
                if v is None:
                    continue
                self.count("queue")
                if r.random() < 0.7:
                    if q.consume():
                        with self.lock:
                            self.consumed[v.decode()].append("k%d" % idx)
                else:
                    q.release()
        self.kazoo_client("queue", body)

    def drain_and_check(self):
        c = self.env.cluster("A")
        conn = self.connect("A", "drain")
        try:
            for _ in range(100):
                rows = self.ex(conn, "queue", "SELECT body FROM zk_dequeue(%s, '1s', 500)", (self.q,))
                for (b,) in rows:
                    self.consumed[b].append("drain")
                if not rows:
                    n = self.ex(conn, "queue", "SELECT zk_queue_length(%s)", (self.q,))[0][0]
                    if n == 0:
                        break
        finally:
            conn.close()
        del c
        lost = dup = phantom = 0
        for b, st in self.produced.items():
            k = len(self.consumed.get(b, []))
            if st == "committed" and k == 0 and not self.consumed_unknown.get(b):
                lost += 1
                if lost <= 3:
                    self.anomaly("queue-lost", "concurrent: committed item %s never consumed" % b)
            if k > 1:
                dup += 1
                if dup <= 3:
                    self.anomaly("queue-dup", "concurrent: item %s consumed by %s" % (b, self.consumed[b]))
        for b in list(self.consumed) + list(self.consumed_unknown):
            if self.produced.get(b) not in ("committed", "unknown"):
                phantom += 1
                if phantom <= 3:
                    self.anomaly("queue-phantom", "concurrent: item %s (%s) consumed by %s"
                                 % (b, self.produced.get(b), self.consumed.get(b) or self.consumed_unknown.get(b)))
        self.trace.append("queue: %d items produced (%d committed), %d consumed" % (
            len(self.produced), sum(1 for v in self.produced.values() if v == "committed"),
            sum(len(v) for v in self.consumed.values())))

    # ---- lock
    def locker(self, label, idx):
        name = "l%d%s" % (idx, label)
        r = random.Random(self.seed * 43 + idx)

        def step(conn):
            hold = None
            pid = self.pids[name][1]
            mode = r.choice(["x", "x", "s"])
            scope = r.choice(["xact", "sess"])
            how = r.choice(["try", "0", "200ms", "1s"])
            sfx = "" if mode == "x" else "_shared"
            if scope == "xact":
                self.ex(conn, "xact", "BEGIN")
            fn = None
            if how == "try":
                fn = ("zk_try_lock" if scope == "xact" else "zk_try_session_lock") + sfx
                row = self.ex(conn, "lock", "SELECT %s(%%s), zk_lock_token(%%s)" % fn,
                              (self.lname, self.lname), must_fast=True)[0]
                got, tok = row
            else:
                fn = ("zk_lock" if scope == "xact" else "zk_session_lock") + sfx
                try:
                    tok = self.ex(conn, "lock", "SELECT %s(%%s, %%s::interval)" % fn, (self.lname, how))[0][0]
                    got = True
                except psycopg2.Error as e:
                    if e.pgcode != "55P03":
                        raise
                    got = False
                    if scope == "xact":
                        self.ex(conn, "xact", "ROLLBACK")
                    return
            t_grant = now()
            if self.control:
                got, tok = True, None        # the control: every attempt "holds" the lock
            if got:
                hold = [t_grant, None, mode, tok, name, pid, "%s %s %s" % (scope, how, fn)]
                time.sleep(r.random() * 0.03)
                hold[1] = now()
                with self.lock:
                    self.holds.append(tuple(hold))
            if scope == "xact":
                self.ex(conn, "xact", r.choice(["COMMIT", "ROLLBACK"]))
            elif got:
                self.ex(conn, "lock", "SELECT zk_unlock%s(%%s)" % sfx, (self.lname,))
        self.sql_client(label, name, step)

    def crossed_locker(self, label, idx):
        """BEGIN; zk_lock(first, 1s or 2s); zk_lock(second, ...); hold a
        moment; COMMIT or ROLLBACK: first and second are lname and lname2
        in a random order, so two of these wait for each other in a circle
        that the deadlock detector (deadlock_timeout 500ms) must break."""
        name = "x%d%s" % (idx, label)
        self.crossed_names.add(name)
        r = random.Random(self.seed * 67 + idx)

        def step(conn):
            pid = self.pids[name][1]
            names = [self.lname, self.lname2]
            r.shuffle(names)
            rec = {"who": name, "pid": pid, "t0": now(), "calls": [], "held": {}, "t1": None}
            with self.lock:
                self.crossed.append(rec)
            got = {}
            try:
                self.ex(conn, "xact", "BEGIN")
                for n in names:
                    c = {"name": n, "t_call": now()}
                    rec["calls"].append(c)
                    try:
                        tok = self.ex(conn, "lock", "SELECT zk_lock(%s, %s::interval)",
                                      (n, r.choice(["1s", "2s"])))[0][0]
                    except psycopg2.Error as e:
                        c["t_ret"] = now()
                        c["code"] = e.pgcode
                        if e.pgcode == "40P01":
                            with self.lock:
                                self.tallies["concurrent deadlocks (40P01)"] += 1
                        raise
                    c["t_ret"] = rec["held"][n] = now()
                    got[n] = (c["t_ret"], tok)
                time.sleep(r.random() * 0.03)
                t_rel = now()
                with self.lock:
                    for n, (a, tok) in got.items():
                        (self.holds if n == self.lname else self.holds2).append(
                            (a, t_rel, "x", tok, name, pid, "crossed %s" % names))
                self.ex(conn, "xact", r.choice(["COMMIT", "ROLLBACK"]))
            finally:
                rec["t1"] = now()
        self.sql_client(label, name, step)

    def check_crossed(self):
        """Every 40P01 of a crossed locker closes a circle of waits: at its
        time te, it waits for a name another crossed locker holds, which
        waits for a name the next one holds ... back to it."""
        recs = [x for x in self.crossed if x["t1"] is not None]
        n40 = 0
        for v in recs:
            c = v["calls"][-1] if v["calls"] else None
            if c is None or c.get("code") != "40P01":
                continue
            n40 += 1
            te = c["t_ret"]
            lo, hi = te - SLACK_S, te + SLACK_S

            def waits(x):
                if x is v:
                    return [c["name"]]
                return [k["name"] for k in x["calls"] if k["t_call"] <= hi and k.get("t_ret", x["t1"]) >= lo]

            def holds(y, p):
                t = y["held"].get(p)
                return t is not None and t <= hi and y["t1"] >= lo

            live = [x for x in recs if x["t0"] <= hi and x["t1"] >= lo]
            todo, seen, found = [v], set(), False
            while todo and not found:
                x = todo.pop()
                for p in waits(x):
                    for y in live:
                        if y is x or not holds(y, p):
                            continue
                        if y is v:
                            found = True
                        elif id(y) not in seen:
                            seen.add(id(y))
                            todo.append(y)
            if not found:
                t0 = self.t_start
                self.anomaly("lock-deadlock", "concurrent: %s pid %s got 40P01 waiting for %s at %.3f with no"
                             " circle of waits in the crossed lockers' records (calls %s)"
                             % (v["who"], v["pid"], c["name"], te - t0,
                                [(k["name"], round(k["t_call"] - t0, 3), round(k.get("t_ret", 0) - t0, 3),
                                  k.get("code")) for k in v["calls"]]))
        self.trace.append("lock: %d crossed transactions, %d deadlocks (40P01)" % (len(recs), n40))

    # ---- semaphore
    def sem_taker(self, label, idx):
        name = "m%d%s" % (idx, label)
        r = random.Random(self.seed * 59 + idx)
        # each session its own number of permits (all its holds stack on one set)
        k = self.sem_k[name] = r.choice([1, 1, 2]) if self.smax >= 2 else 1

        def step(conn):
            pid = self.pids[name][1]
            scope = r.choice(["xact", "sess"])
            how = r.choice(["try", "0", "200ms", "1s"])
            if scope == "xact":
                self.ex(conn, "xact", "BEGIN")
            if how == "try":
                fn = "zk_try_semaphore" if scope == "xact" else "zk_try_session_semaphore"
                got = self.ex(conn, "semaphore", "SELECT %s(%%s, %%s, permits => %%s)" % fn,
                              (self.sname, self.smax, k), must_fast=True)[0][0]
            else:
                fn = "zk_semaphore" if scope == "xact" else "zk_session_semaphore"
                try:
                    self.ex(conn, "semaphore", "SELECT %s(%%s, %%s, %%s::interval, permits => %%s)" % fn,
                            (self.sname, self.smax, how, k))
                    got = True
                except psycopg2.Error as e:
                    if e.pgcode != "55P03":
                        raise
                    if scope == "xact":
                        self.ex(conn, "xact", "ROLLBACK")
                    return
            if self.control:
                got = True
            if got:
                a = now()
                time.sleep(r.random() * 0.03)
                with self.lock:
                    self.holds.append((a, now(), "lease", None, name, pid, "%s %s" % (scope, how)))
            if scope == "xact":
                self.ex(conn, "xact", r.choice(["COMMIT", "ROLLBACK"]))
            elif got:
                self.ex(conn, "semaphore", "SELECT zk_semaphore_release(%s)", (self.sname,))
        self.sql_client(label, name, step)

    def kazoo_sem(self, idx):
        from kazoo.exceptions import LockTimeout, NoNodeError
        r = random.Random(self.seed * 61 + idx)

        def body(zk):
            while not self.stop.is_set():
                # a new Semaphore object per acquisition (doc/semaphores.md)
                sem = zk.Semaphore("/zklock/semaphores/" + self.sname, identifier="k%d" % idx,
                                   max_leases=self.smax)
                # NoNodeError: the pool deleted as the acquisition began,
                # after 2 quiet seconds (doc/semaphores.md): retried
                self.kazoo_hold(r, "semaphore", "lease", idx, sem, (LockTimeout, NoNodeError))
        self.kazoo_client("semaphore", body)

    def certain_holds(self, holds=None):
        """The holds, each cut at the first terminate of its backend sent
        before its end (a terminate sent before the hold's end may end it at
        once, even one sent just before the grant's answer arrived); those
        left with no certain interval are left out."""
        term = {}
        for pid, t in self.terminated:
            term.setdefault(pid, []).append(t)
        hs = []
        for (a, b, mode, tok, owner, pid, how) in (self.holds if holds is None else holds):
            for t in term.get(pid, []):
                if t < b:
                    b = max(a, t)
            if b > a:
                hs.append((a, b, mode, tok, owner, pid, how))
        return hs

    def check_sem(self):
        ev = []
        for (a, b, _, _, owner, _, _) in self.certain_holds():
            ev.append((a, 1, owner))
            ev.append((b, -1, owner))
        ev.sort(key=lambda e: (e[0], e[1]))
        cur = {}
        worst = 0
        for (t, d, owner) in ev:
            cur[owner] = cur.get(owner, 0) + d
            n = sum(self.sem_k.get(o, 1) for o, v in cur.items() if v > 0)
            if n > self.smax and n > worst:
                worst = n
                self.anomaly("semaphore-overflow", "concurrent: %d leases of %s at once (max_leases %d): %s"
                             % (n, self.sname, self.smax,
                                sorted("%s x%d" % (o, self.sem_k.get(o, 1)) for o, v in cur.items() if v > 0)))
        self.trace.append("semaphore: %d leases held" % len(self.holds))

    def kazoo_lock(self, idx):
        from kazoo.exceptions import LockTimeout
        r = random.Random(self.seed * 47 + idx)

        def body(zk):
            path = "/zklock/locks/" + self.lname
            wl = zk.WriteLock(path, "k%d" % idx)
            rl = zk.ReadLock(path, "k%d" % idx)
            while not self.stop.is_set():
                mode = r.choice(["x", "s"])
                self.kazoo_hold(r, "lock", mode, idx, wl if mode == "x" else rl, LockTimeout)
        self.kazoo_client("lock", body)

    def check_locks(self, holds=None, lname=None):
        hs = self.certain_holds(holds)
        hs.sort()
        bad = 0
        for i, x in enumerate(hs):
            for y in hs[i + 1:]:
                if y[0] >= x[1]:
                    break
                if x[4] != y[4] and "x" in (x[2], y[2]):
                    bad += 1
                    if bad <= 3:
                        t0 = self.t_start
                        ev = [e for e in self.events if x[0] - 1.0 <= e[0] <= max(x[1], y[1]) + 0.2]
                        self.anomaly("lock-overlap", "concurrent: %s (%s) and %s (%s) overlap %.3fs: "
                                     "%s pid %s %s token %s held %.3f-%.3f; %s pid %s %s token %s held %.3f-%.3f; "
                                     "nemesis around: %s"
                                     % (x[4], x[2], y[4], y[2], min(x[1], y[1]) - y[0],
                                        x[4], x[5], x[6], x[3], x[0] - t0, x[1] - t0,
                                        y[4], y[5], y[6], y[3], y[0] - t0, y[1] - t0,
                                        ", ".join("%s %s at %.3f" % (e[1], e[2], e[0] - t0) for e in ev) or "none"))
        xs = [h for h in hs if h[2] == "x" and h[3] is not None]
        inv = 0
        for i, x in enumerate(xs):
            for y in xs[i + 1:]:
                if y[0] > x[1] and y[3] < x[3]:
                    inv += 1
                    if inv <= 3:
                        self.anomaly("lock-token", "concurrent: exclusive hold by %s token %s after %s token %s"
                                     % (y[4], y[3], x[4], x[3]))
        self.trace.append("lock %s: %d holds (%d exclusive)" % (lname or self.lname, len(hs),
                                                               len([h for h in hs if h[2] == "x"])))

    # ---- counter
    def adder(self, label, idx):
        name = "a%d%s" % (idx, label)

        def step(conn):
            if self.control:
                # the control: a read, then a write of one more at whatever
                # version (a compare-and-set whose answer is not looked at)
                v = self.ex(conn, "counter", "SELECT zk_counter_get(%s)", (self.cname,))[0][0]
                self.ex(conn, "counter", "SELECT zk_counter_set(%s, %s, %s)", (self.cname, v + 1, v))
                v += 1
            else:
                try:
                    v = self.ex(conn, "counter", "SELECT zk_counter_add(%s)", (self.cname,), must_fast=True)[0][0]
                except psycopg2.Error:
                    with self.lock:
                        self.add_unknown += 1
                    raise
            with self.lock:
                self.added.append((v, name))
        self.sql_client(label, name, step)

    def kazoo_adder(self, idx):
        def body(zk):
            c = zk.Counter("/zklock/counters/" + self.cname)
            while not self.stop.is_set():
                self.count("counter")
                c += 1
                with self.lock:
                    self.added.append((c.post_value, "k%d" % idx))
                self.stop.wait(0.005)
        self.kazoo_client("counter", body)

    def check_counter(self):
        rows = self.env.cluster("A").admin_query("SELECT zk_counter_get(%s)", (self.cname,))
        final = rows[0][0]
        vals = collections.Counter(v for v, _ in self.added)
        dup = sorted(v for v, n in vals.items() if n > 1)
        if dup:
            self.anomaly("counter-duplicate", "concurrent: %d values returned twice or more (%s ...)"
                         % (len(dup), dup[:5]))
        n = len(self.added)
        if not n <= final <= n + self.add_unknown:
            self.anomaly("counter-lost" if final < n else "counter-extra",
                         "concurrent: the counter is %d after %d adds acknowledged and %d unknown"
                         % (final, n, self.add_unknown))
        if vals and max(vals) > final:
            self.anomaly("counter-extra", "concurrent: an add returned %d, the counter is %d" % (max(vals), final))
        self.trace.append("counter: %d adds acknowledged, %d unknown, final %d" % (n, self.add_unknown, final))

    # ---- campaign
    def campaigner(self, label, idx):
        name = "v%d%s" % (idx, label)
        r = random.Random(self.seed * 67 + idx)

        def step(conn):
            pid = self.pids[name][1]
            scope = r.choice(["xact", "sess"])
            how = r.choice(["try", "0", "200ms", "1s"])
            if scope == "xact":
                self.ex(conn, "xact", "BEGIN")
            if how == "try":
                fn = "zk_try_campaign" if scope == "xact" else "zk_try_session_campaign"
                got, tok = self.ex(conn, "campaign", "SELECT %s(%%s), zk_campaign_token(%%s)" % fn,
                                   (self.vname, self.vname), must_fast=True)[0]
            else:
                fn = "zk_campaign" if scope == "xact" else "zk_session_campaign"
                try:
                    tok = self.ex(conn, "campaign", "SELECT %s(%%s, %%s::interval)" % fn, (self.vname, how))[0][0]
                    got = True
                except psycopg2.Error as e:
                    if e.pgcode != "55P03":
                        raise
                    if scope == "xact":
                        self.ex(conn, "xact", "ROLLBACK")
                    return
            if self.control:
                got, tok = True, None
            if got:
                a = now()
                time.sleep(r.random() * 0.03)
                with self.lock:
                    self.holds.append((a, now(), "x", tok, name, pid, "%s %s %s" % (scope, how, fn)))
            if scope == "xact":
                self.ex(conn, "xact", r.choice(["COMMIT", "ROLLBACK"]))
            elif got:
                self.ex(conn, "campaign", "SELECT zk_resign(%s)", (self.vname,))
        self.sql_client(label, name, step)

    def kazoo_campaigner(self, idx):
        from kazoo.exceptions import LockTimeout
        r = random.Random(self.seed * 71 + idx)

        def body(zk):
            while not self.stop.is_set():
                # a new Lock per attempt: one made before creates its path once
                lk = zk.Lock("/zklock/elections/" + self.vname, "k%d" % idx)
                self.kazoo_hold(r, "campaign", "x", idx, lk, LockTimeout)
        self.kazoo_client("campaign", body)

    # ---- nemesis
    def nemesis(self):
        r = random.Random(self.seed * 53)
        while not self.stop.wait(0.2 + r.random() * 0.6):
            with self.lock:
                cand = [(n, v) for n, v in self.pids.items() if n != "drain"]
            if not cand:
                continue
            n, (label, pid) = r.choice(cand)
            what = "terminate" if r.random() < 0.25 else "cancel"
            try:
                t = now()
                self.env.cluster(label).admin_query("SELECT pg_%s_backend(%%s)" % what, (pid,))
                self.count("xact")
                with self.lock:
                    self.events.append((t, what, "%s/%d" % (n, pid)))
                if what == "terminate":
                    with self.lock:
                        self.terminated.append((pid, t))
            except Exception:
                pass

    def run(self):
        r = self.rnd
        threads = []
        labels = "AB"
        if self.recipe == "queue":
            for i in range(r.randint(1, 2)):
                threads.append(threading.Thread(target=self.producer, args=(labels[i % 2], i)))
            for i in range(r.randint(2, 4)):
                threads.append(threading.Thread(target=self.consumer, args=(labels[(i + 1) % 2], i)))
            if r.random() < 0.5:
                threads.append(threading.Thread(target=self.kazoo_queue, args=(0,)))
        elif self.recipe == "lock":
            for i in range(r.randint(3, 5)):
                threads.append(threading.Thread(target=self.locker, args=(labels[i % 2], i)))
            if r.random() < 0.5:
                threads.append(threading.Thread(target=self.kazoo_lock, args=(0,)))
            if not self.control:
                for i in range(2):
                    threads.append(threading.Thread(target=self.crossed_locker, args=(labels[i % 2], i)))
        elif self.recipe == "semaphore":
            for i in range(r.randint(3, 5)):
                threads.append(threading.Thread(target=self.sem_taker, args=(labels[i % 2], i)))
            if r.random() < 0.5:
                threads.append(threading.Thread(target=self.kazoo_sem, args=(0,)))
        elif self.recipe == "counter":
            for i in range(r.randint(3, 6)):
                threads.append(threading.Thread(target=self.adder, args=(labels[i % 2], i)))
            if r.random() < 0.5:
                threads.append(threading.Thread(target=self.kazoo_adder, args=(0,)))
        elif self.recipe == "campaign":
            for i in range(r.randint(3, 5)):
                threads.append(threading.Thread(target=self.campaigner, args=(labels[i % 2], i)))
            if r.random() < 0.5:
                threads.append(threading.Thread(target=self.kazoo_campaigner, args=(0,)))
        else:
            return self
        threads.append(threading.Thread(target=self.nemesis))
        for t in threads:
            t.daemon = True
            t.start()
        self.stop.wait(SECONDS)
        self.stop.set()
        for t in threads:
            t.join(timeout=30)
            if t.is_alive():
                self.anomaly("hung", "concurrent: a client thread did not stop within 30 s")
        if self.recipe == "queue":
            self.drain_and_check()
        elif self.recipe == "semaphore":
            self.check_sem()
        elif self.recipe == "counter":
            self.check_counter()
        elif self.recipe == "campaign":
            self.check_locks(lname=self.vname)
        else:
            self.check_locks()
            self.check_locks(self.holds2, self.lname2)
            self.check_crossed()
        for (t, label, msg) in self.env.watchdog.take():
            if t >= self.t_start:
                self.anomaly("worker-unresponsive", msg)
        return self


def run(env, args, seed, ns):
    env.ensure_healthy()
    c = Conc(env, seed, ns, control=getattr(args, "control", False))
    try:
        c.run()
    except Exception as e:
        import traceback
        c.anomaly("harness", "concurrent history failed: %r\n%s" % (e, traceback.format_exc()))
    if any(a[0] in ("hung", "worker-unresponsive") for a in c.anomalies):
        env.ensure_healthy()
    return c
