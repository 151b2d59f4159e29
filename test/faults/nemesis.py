"""nemesis.py - the faults of a fault run.

At random intervals the nemesis starts one fault, each in a thread of its own
that injects it, waits, and heals it:

  zk_kill_leader, zk_kill_follower   SIGKILL a server (the leader per `srvr`), restart it later
  zk_freeze                          SIGSTOP a server, SIGCONT later (sometimes past the session timeout)
  zk_quorum_loss                     SIGSTOP two servers (no quorum), SIGCONT later
  zk_partition                       cut a server (a follower when there is one) off from the
                                     other two (test/blackhole.py drops its quorum and election
                                     traffic) while its clients still reach it; heal later
  worker_freeze                      SIGSTOP a cluster's zklock worker, SIGCONT later (short, or past
                                     the session timeout so ZooKeeper expires the session)
  expiry_probe                       worker_freeze aimed at a client inside a long critical section,
                                     past the session timeout: proves the COMMIT refusal path runs
  worker_kill                        SIGKILL the worker: PostgreSQL restarts the whole cluster
  worker_terminate                   pg_terminate_backend(worker)
  worker_cancel                      pg_cancel_backend(worker) (a "cancel everything" script)
  worker_reload_hosts                zklock.hosts rotated (same servers, another order) and reloaded:
                                     the worker opens a new session, held locks are lost
  client_cancel, client_terminate    pg_cancel_backend / pg_terminate_backend of a client backend
                                     (lock, semaphore, deadlock-workload, campaign or counter
                                     client; a busy one when there is one)
  zk_link_switch                     the late requests of issue 36: a cluster's worker sends its
                                     requests to server S; S's link to the leader is held
                                     (shorter than syncLimit x tickTime, so S stays in the quorum
                                     and what it forwarded lands later); meanwhile that worker's
                                     session ends (hosts rotated and reloaded, or the worker
                                     terminated or killed) and its successor settles what was in
                                     flight; then the link heals and the old requests land
  pg_clone                           a copy of a cluster (same system identifier), made by
                                     pg_basebackup now or restored from an older backup of
                                     this run, runs beside it against the same ensemble for a
                                     while: its worker must leave the original's queue claims
                                     and transaction nodes alone

At most one ZooKeeper fault and one worker fault per cluster at a time.
heal_all() heals everything and waits until every server serves and every
worker is connected again.  Every step is logged to the run's nemesis log.
"""

import os
import signal
import threading
import time

KINDS = {
    # kind: weight
    "zk_kill_follower": 2,
    "zk_kill_leader": 1,
    "zk_freeze": 2,
    "zk_quorum_loss": 1,
    "zk_partition": 2,
    "worker_freeze": 2,
    "worker_kill": 1,
    "worker_terminate": 1,
    "worker_cancel": 1,
    "worker_reload_hosts": 1,
    "client_cancel": 3,
    "client_terminate": 2,
    "pg_clone": 1,
    "zk_link_switch": 2,
}

LINK_HOLD_MAX = 3.5   # seconds; the fault run's servers drop a follower after syncLimit x tickTime = 5 s


class Nemesis(threading.Thread):
    def __init__(self, run, ensemble, clusters, rnd):
        super().__init__(name="nemesis", daemon=True)
        self.run_ = run
        self.ens = ensemble
        self.clusters = {c.name: c for c in clusters}
        self.rnd = rnd
        self.st = run.session_timeout_s
        self.lock = threading.Lock()
        self.busy = set()           # "zk", "pg:A", "pg:B"
        self.frozen = {}            # pid -> what, for the final thaw
        self.down = set()           # ZooKeeper servers killed and not restarted
        self.heal_now = threading.Event()
        self.threads = []
        self.injected = set()       # kinds injected so far
        self.probe_every = run.probe_every
        self.partitioned = set()    # ZooKeeper servers cut off now
        self.backups = {}           # cluster name -> directory of its last base backup
        self.clones = 0
        self.copies = []            # copies running now

    # -- log --

    def event(self, kind, action, target="", **detail):
        if action == "inject":
            self.injected.add(kind)
        rec = {"t": time.time(), "kind": kind, "action": action, "target": target}
        rec.update(detail)
        self.run_.record_fault(rec)

    # -- the loop --

    def run(self):
        r = self.run_
        next_probe = time.monotonic() + min(3.0, self.probe_every)
        probe_hold_until = next_probe + 15.0
        # every kind once first, then at random by weight; ZooKeeper faults run
        # one at a time, so they come first (the others start beside them)
        todo = list(KINDS)
        self.rnd.shuffle(todo)
        todo.sort(key=lambda k: not k.startswith("zk_"))
        while not r.faults_over.is_set():
            # a probe waiting for a fresh long critical section looks often
            pause = 0.2 if r.want_long.is_set() else self.rnd.uniform(0.4, 2.5)
            if r.faults_over.wait(pause):
                break
            if time.monotonic() >= next_probe:
                if self.start_fault("expiry_probe"):
                    r.want_long.clear()
                    next_probe = time.monotonic() + self.probe_every
                    continue
                # no client in a fresh long critical section on a cluster
                # free of faults: ask the next one for one, and keep the
                # clusters free of other faults until the first probe went in
                # (at most 15 s), so that a short run gets one
                r.want_long.set()
                next_probe = time.monotonic() + 0.3
                if "expiry_probe" not in self.injected and time.monotonic() < probe_hold_until:
                    continue
            todo = [k for k in todo if k not in self.injected]
            if todo:
                for kind in todo:
                    if self.start_fault(kind):
                        break
                continue
            kinds = list(KINDS)
            weights = [KINDS[k] for k in kinds]
            self.start_fault(self.rnd.choices(kinds, weights)[0])

    def start_fault(self, kind):
        """Reserve what the fault needs and start its thread; False if not possible now."""
        target = None
        with self.lock:
            if kind == "zk_link_switch":
                free = [n for n in self.clusters if "pg:" + n not in self.busy]
                if "zk" in self.busy or not free:
                    return False
                name = self.rnd.choice(free)
                self.busy.update(("zk", "pg:" + name))
                target = name
            elif kind.startswith("zk_"):
                if "zk" in self.busy:
                    return False
                self.busy.add("zk")
                target = "zk"
            elif kind.startswith("worker_"):
                free = [n for n in self.clusters if "pg:" + n not in self.busy]
                if not free:
                    return False
                name = self.rnd.choice(free)
                self.busy.add("pg:" + name)
                target = name
            elif kind == "pg_clone":
                if "clone" in self.busy:
                    return False
                self.busy.add("clone")
                target = self.rnd.choice(sorted(self.clusters))
            elif kind == "expiry_probe":
                c = self._long_client()
                if c is None or "pg:" + c.cluster.name in self.busy:
                    return False
                self.busy.add("pg:" + c.cluster.name)
                c.probed = True
                target = c
        t = threading.Thread(target=self._fault, args=(kind, target), daemon=True,
                             name="fault-" + kind)
        self.threads.append(t)
        t.start()
        return True

    def _long_client(self):
        """A client that entered a long critical section less than a second ago."""
        now = time.monotonic()
        cands = [c for c in self.run_.clients
                 if c.state == "long_cs" and c.cs_t0 is not None and now - c.cs_t0 < 1.0]
        return self.rnd.choice(cands) if cands else None

    def _release(self, key):
        with self.lock:
            self.busy.discard(key)

    def _dur(self, kind, lo, hi):
        """A duration in [lo, hi]; the first fault of a kind stays in the lower
        half, so that every kind gets its turn early in a short run."""
        if kind not in self.injected:
            hi = (lo + hi) / 2
        return self.rnd.uniform(lo, hi)

    def _wait(self, secs):
        """Sleep up to secs; returns early when everything must be healed."""
        self.heal_now.wait(secs)

    def _fault(self, kind, target):
        try:
            getattr(self, "f_" + kind)(target)
        except Exception as e:  # a fault that failed must not stop the run
            self.event(kind, "error", str(target), error=repr(e))
        finally:
            if kind == "zk_link_switch":
                self._release("zk")
                self._release("pg:" + target)
            elif kind.startswith("zk_"):
                self._release("zk")
            elif kind.startswith("worker_"):
                self._release("pg:" + target)
            elif kind == "expiry_probe":
                self._release("pg:" + target.cluster.name)
            elif kind == "pg_clone":
                self._release("clone")

    # -- ZooKeeper faults --

    def _pick_server(self, want):
        modes = self.ens.modes()
        cands = [i for i, m in modes.items() if m == want]
        return (self.rnd.choice(cands) if cands else None), modes

    def _kill_restart(self, kind, want):
        i, modes = self._pick_server(want)
        if i is None:
            self.event(kind, "skip", "", modes=str(modes))
            return
        if not self.ens.kill(i):
            self.event(kind, "error", "s%d" % i, error="kill failed")
        self.down.add(i)
        secs = self._dur(kind, 2, 8)
        self.event(kind, "inject", "s%d" % i, mode=want, secs=round(secs, 1))
        self._wait(secs)
        self._restart(kind, i)

    def _restart(self, kind, i):
        for attempt in range(3):
            ok, out = self.ens.start_server(i)
            if ok:
                self.down.discard(i)
                self.event(kind, "heal", "s%d" % i)
                return True
            self.event(kind, "error", "s%d" % i, error="restart failed: " + out[-300:])
            time.sleep(1)
        return False

    def f_zk_kill_leader(self, _):
        self._kill_restart("zk_kill_leader", "leader")

    def f_zk_kill_follower(self, _):
        self._kill_restart("zk_kill_follower", "follower")

    def f_zk_freeze(self, _):
        i = self.rnd.choice([1, 2, 3])
        mode = self.ens.mode(i)
        pid = self.ens.pid(i)
        if pid is None or not self.ens.freeze(i):
            self.event("zk_freeze", "skip", "s%d" % i)
            return
        self.frozen[pid] = "zk s%d" % i
        secs = self._dur("zk_freeze", 1, 2.5 * self.st)
        self.event("zk_freeze", "inject", "s%d" % i, mode=mode, secs=round(secs, 1))
        self._wait(secs)
        self.ens.thaw(i)
        self.frozen.pop(pid, None)
        self.event("zk_freeze", "heal", "s%d" % i)

    def f_zk_quorum_loss(self, _):
        ids = sorted(self.rnd.sample([1, 2, 3], 2))
        modes = self.ens.modes()
        frozen = []
        for i in ids:
            pid = self.ens.pid(i)
            if pid is not None and self.ens.freeze(i):
                self.frozen[pid] = "zk s%d" % i
                frozen.append((i, pid))
        secs = self._dur("zk_quorum_loss", 2, 8)
        self.event("zk_quorum_loss", "inject", ",".join("s%d" % i for i, _ in frozen),
                   modes=" ".join("s%d=%s" % (i, modes.get(i)) for i, _ in frozen), secs=round(secs, 1))
        self._wait(secs)
        for i, pid in frozen:
            self.ens.thaw(i)
            self.frozen.pop(pid, None)
        self.event("zk_quorum_loss", "heal", ",".join("s%d" % i for i, _ in frozen))

    def f_zk_partition(self, _):
        i, modes = self._pick_server("follower")
        if i is None:
            i = self.rnd.choice([1, 2, 3])
        if not self.ens.partition(i):
            self.event("zk_partition", "skip", "s%d" % i, why="no blackhole proxy")
            return
        self.partitioned.add(i)
        secs = self._dur("zk_partition", 2, 2.5 * self.st)
        self.event("zk_partition", "inject", "s%d" % i, mode=modes.get(i), secs=round(secs, 1))
        self._wait(secs)
        self.ens.heal_partition(i)
        self.partitioned.discard(i)
        self.event("zk_partition", "heal", "s%d" % i)

    def _server_of(self, session_id):
        """The server (1..3) a session is connected to, from the servers' `cons`."""
        if not session_id:
            return None
        try:
            sid = int(str(session_id), 0)
        except ValueError:
            return None
        for i in (1, 2, 3):
            out = self.ens.cmd(i, "cons", timeout=8) or ""
            if ("sid=0x%x" % sid) in out:
                return i
        return None

    def f_zk_link_switch(self, name):
        c = self.clusters[name]
        before = c.status() or {}
        i = self._server_of(before.get("session_id"))
        if i is None or before.get("state") != "connected":
            self.event("zk_link_switch", "skip", name, why="no session found on a server")
            return
        if not self.ens.partition(i):
            self.event("zk_link_switch", "skip", name, why="no blackhole proxy")
            return
        self.partitioned.add(i)
        t0 = time.monotonic()
        how = self.rnd.choice(["reload_hosts", "reload_hosts", "terminate", "kill"])
        self.event("zk_link_switch", "inject", "s%d" % i, cluster=name, how=how,
                   session_before=before.get("session_id"))
        # let the worker send into the held link for a moment
        self._wait(self.rnd.uniform(0.2, 1.0))
        pid = c.worker_pid()
        if how == "reload_hosts":
            # the held server last: the new session is made elsewhere
            hosts = self.ens.hosts.split(",")
            held = hosts[i - 1]
            new = ",".join([h for h in hosts if h != held] + [held])
            c.try_query("ALTER SYSTEM SET zklock.hosts = '%s'" % new)
            c.try_query("SELECT pg_reload_conf()")
        elif how == "terminate" and pid is not None:
            c.try_query("SELECT pg_terminate_backend(%s)", (pid,))
        elif how == "kill" and pid is not None:
            os.kill(pid, signal.SIGKILL)
        # heal while the held server is still in the quorum
        self._wait(max(0.0, self.rnd.uniform(1.5, LINK_HOLD_MAX) - (time.monotonic() - t0)))
        self.ens.heal_partition(i)
        self.partitioned.discard(i)
        # ZooKeeper is whole again: the other faults (ZooKeeper's, this
        # cluster's, the expiry probe) may start while it reconnects
        self._release("zk")
        self._release("pg:" + name)
        st = c.wait_connected(60, not_session=before.get("session_id"))
        self.event("zk_link_switch", "heal", "s%d" % i, cluster=name,
                   held_s=round(time.monotonic() - t0, 1),
                   session_after=(st or {}).get("session_id"))

    # -- copies of a cluster --

    def f_pg_clone(self, name):
        c = self.clusters[name]
        fresh = name not in self.backups or self.rnd.random() < 0.5
        self.clones += 1
        copy = c.copy_cluster("%s%d" % (name, self.clones), fresh, self.backups.get(name))
        if copy is None:
            self.event("pg_clone", "skip", name, why="no base backup")
            return
        self.copies.append(copy)
        self.backups[name] = copy.backup
        self.event("pg_clone", "inject", copy.name, of=name, fresh=fresh, port=copy.port)
        # the copy finds the original's run alive and (once it stayed so for
        # its window, counted from its last reconnection) says it is a copy
        window = 1.5 * self.st + 5
        said = copy.wait_log("this server is a copy of it", window + 15, self.heal_now)
        live_run = c.current_run()
        copy.stop()
        self.copies.remove(copy)
        took = copy.log_lines("took over run")
        self.event("pg_clone", "heal", copy.name, said_copy=said, log=copy.logfile,
                   original_run=live_run, took=len(took))
        # it must never take over the run the original is running
        if live_run and any(live_run in line for line in took):
            self.event("pg_clone", "error", copy.name,
                       error="the copy took over %s's live run %s" % (name, live_run))

    # -- worker faults --

    def _freeze_worker(self, kind, name, secs, **detail):
        c = self.clusters[name]
        pid = c.worker_pid()
        if pid is None:
            self.event(kind, "skip", name, why="no worker")
            return
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError as e:
            self.event(kind, "skip", name, why=repr(e))
            return
        self.frozen[pid] = "worker of %s" % name
        self.event(kind, "inject", name, pid=pid, secs=round(secs, 1), **detail)
        self._wait(secs)
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
        self.frozen.pop(pid, None)
        self.event(kind, "heal", name, pid=pid)

    def f_worker_freeze(self, name):
        if self.rnd.random() < 0.5:
            secs = self.rnd.uniform(0.5, 0.5 * self.st)
        else:
            secs = self.st + self.rnd.uniform(1, 3)
        self._freeze_worker("worker_freeze", name, secs)

    def f_expiry_probe(self, client):
        # client.probed (set when the probe was chosen) keeps client faults off
        # this client until its attempt ends
        self._freeze_worker("expiry_probe", client.cluster.name, self.st + 2.5,
                            client=client.label, client_pid=client.pid)

    def _wait_worker(self, c, old, secs=60):
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            pid = c.worker_pid()
            if pid is not None and pid != old:
                return pid
            time.sleep(0.3)
        return None

    def _hit_worker(self, fault, name, hit):
        """hit(c, pid) the worker of cluster name (the event fault: "skip"
        when there is none, else "inject"); returns (c, pid) or None."""
        c = self.clusters[name]
        pid = c.worker_pid()
        if pid is None:
            self.event(fault, "skip", name, why="no worker")
            return None
        hit(c, pid)
        self.event(fault, "inject", name, pid=pid)
        return c, pid

    def _worker_replaced(self, fault, name, hit):
        """The worker, hit, ends: "heal" once another one runs."""
        got = self._hit_worker(fault, name, hit)
        if got is not None:
            c, pid = got
            self.event(fault, "heal", name, new_pid=self._wait_worker(c, pid))

    def f_worker_kill(self, name):
        self._worker_replaced("worker_kill", name, lambda c, pid: os.kill(pid, signal.SIGKILL))

    def f_worker_terminate(self, name):
        self._worker_replaced("worker_terminate", name,
                              lambda c, pid: c.try_query("SELECT pg_terminate_backend(%s)", (pid,)))

    def f_worker_cancel(self, name):
        got = self._hit_worker("worker_cancel", name,
                               lambda c, pid: c.try_query("SELECT pg_cancel_backend(%s)", (pid,)))
        if got is None:
            return
        c, pid = got
        self._wait(1.0)
        after = c.worker_pid()
        if after != pid:
            after = self._wait_worker(c, pid, 30)
        self.event("worker_cancel", "heal", name, pid_after=after, worker_survived=(after == pid))

    def f_worker_reload_hosts(self, name):
        c = self.clusters[name]
        hosts = self.ens.hosts.split(",")
        k = self.rnd.randrange(1, len(hosts))
        new = ",".join(hosts[k:] + hosts[:k])
        before = c.status() or {}
        if c.try_query("ALTER SYSTEM SET zklock.hosts = '%s'" % new) is None \
                or c.try_query("SELECT pg_reload_conf()") is None:
            self.event("worker_reload_hosts", "skip", name, why="ALTER SYSTEM failed")
            return
        self.event("worker_reload_hosts", "inject", name, hosts=new,
                   session_before=before.get("session_id"))
        st = c.wait_connected(20, not_session=before.get("session_id"))
        self.event("worker_reload_hosts", "heal", name,
                   session_after=(st or {}).get("session_id"), servers=(st or {}).get("servers"))

    # -- client faults --

    def _client_fault(self, kind, func):
        # never the client an expiry probe is waiting for
        r = self.run_
        clients = [c for c in r.clients + r.sclients + r.dclients + r.cclients + r.kclients
                   if c.pid is not None and not c.probed]
        busy = [c for c in clients if c.state != "idle"]
        cands = busy or clients
        if not cands:
            return
        cl = self.rnd.choice(cands)
        pid, state = cl.pid, cl.state
        t_sent = time.time()
        self.clusters[cl.cluster.name].try_query("SELECT %s(%%s)" % func, (pid,))
        self.event(kind, "inject", cl.label, pid=pid, state=state, t_sent=t_sent)

    def f_client_cancel(self, _):
        self._client_fault("client_cancel", "pg_cancel_backend")

    def f_client_terminate(self, _):
        self._client_fault("client_terminate", "pg_terminate_backend")

    # -- the end --

    def thaw_everything(self):
        for copy in list(self.copies):
            copy.stop()
            self.copies.remove(copy)
        for pid in list(self.frozen):
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
            self.frozen.pop(pid, None)

    def heal_all(self, timeout=120):
        """Heal every fault; wait until every server serves and every worker is
        connected.  Returns a list of problems (empty when all is well)."""
        self.heal_now.set()
        self.join(30)
        deadline = time.monotonic() + timeout
        for t in list(self.threads):
            t.join(max(1, deadline - time.monotonic()))
        self.thaw_everything()
        self.ens.heal_partition()
        self.partitioned.clear()
        problems = []
        for t in self.threads:
            if t.is_alive():
                problems.append("fault thread %s did not finish" % t.name)
        for i in (1, 2, 3):
            if not self.ens.running(i) or i in self.down:
                if not self._restart("heal_all", i):
                    problems.append("ZooKeeper s%d could not be restarted" % i)
        while time.monotonic() < deadline:
            modes = self.ens.modes()
            if all(m in ("leader", "follower") for m in modes.values()):
                break
            time.sleep(0.3)
        else:
            problems.append("ensemble not serving after heal: %s" % self.ens.modes())
        for c in self.clusters.values():
            st = c.wait_connected(max(5, deadline - time.monotonic()))
            if not st or st.get("state") != "connected":
                problems.append("worker of %s not connected after heal: %s" % (c.name, st))
        return problems
