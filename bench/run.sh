#!/usr/bin/env bash
# bench/run.sh - zklock benchmark, durable on both sides, side by side in one
# run: the lock cycle of zklock (pgbench), Apache Curator's InterProcessMutex,
# kazoo's Lock, the raw C client bench/zkbench and pg_advisory_xact_lock, in
# interleaved rounds; then the queue benchmark (bench/queue/run.sh) and the
# counter benchmark (bench/counter/run.sh) on the same ZooKeeper and
# PostgreSQL.  See bench/README.md.
#
#   bash bench/run.sh                                  (as root; ~11 minutes + ~2.5 for the counter)
#   BENCH_SECONDS=2 BENCH_ROUNDS=1 bash bench/run.sh   (smoke check, ~2 minutes)
#
# Environment:
#   BENCH_SECONDS   measured seconds of every case (default 5)
#   BENCH_ROUNDS    rounds of every case, each round in another order; the
#                   tables show medians (default 3); also the queue's rounds
#   BENCH_WARMUP    uncounted seconds before the window of the Curator and
#                   kazoo drivers (the JVM's JIT; default 2)
#   BENCH_CLIENTS   clients of the "distinct" and "shared" shapes (default 32)
#   BENCH_SHAPES    lock shapes to run (default "one distinct shared"):
#                   one = 1 client; distinct = BENCH_CLIENTS clients, a name
#                   each; shared = BENCH_CLIENTS clients on ONE name
#   BENCH_CONTENDERS lock contenders (default "zklock curator kazoo zkbench advisory")
#   BENCH_THREADS   pgbench -j for the many-clients shapes (default 2)
#   BENCH_PGPORT    port number of the throwaway cluster (default 5498; it
#                   listens on a unix socket in its temp dir only, no TCP)
#   BENCH_PGBIN     PostgreSQL 15's bin directory (default /usr/lib/postgresql/15/bin);
#                   zklock is built with its pg_config and installed there
#   BENCH_ZK_FORCESYNC     yes (default): ZooKeeper fsyncs its log before it
#                   replies; no: it does not (not durable; tests' setting)
#   BENCH_ZKBENCH_FLAGS    extra zkbench flags, e.g. "-R -1"
#   BENCH_SKIP_DEPS=1      do not run tools/deps.sh
#   BENCH_QUEUE=0   skip the queue benchmark at the end
#   BENCH_COUNTER=0 skip the counter benchmark at the end (bench/counter/run.sh)
#   BENCH_WITHOUT_ZKLOCK=1 do not build/load zklock; run the other contenders
#   BENCH_OUT       where the results and logs are kept
#                   (default bench/out/<timestamp>)
#
# Exit status 0 when every case of every contender ran; 1 (with the failed
# cases named on stderr) when one failed.  Everything started is stopped and
# the temp dir removed on exit, also on failure or Ctrl-C.

set -u
set -o pipefail
export LC_ALL=C

me=run.sh
# fd 9: the caller's stderr, also inside functions whose output is redirected
exec 9>&2

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || exit 1
REPO=$(cd "$BENCH_DIR/.." && pwd) || exit 1
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"

BENCH_SECONDS=${BENCH_SECONDS:-5}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_WARMUP=${BENCH_WARMUP:-2}
BENCH_CLIENTS=${BENCH_CLIENTS:-32}
BENCH_SHAPES=${BENCH_SHAPES:-one distinct shared}
BENCH_CONTENDERS=${BENCH_CONTENDERS:-zklock curator kazoo zkbench advisory}
BENCH_THREADS=${BENCH_THREADS:-2}
BENCH_PGPORT=${BENCH_PGPORT:-5498}
BENCH_SKIP_DEPS=${BENCH_SKIP_DEPS:-0}
BENCH_ZKBENCH_FLAGS=${BENCH_ZKBENCH_FLAGS:-}
BENCH_WITHOUT_ZKLOCK=${BENCH_WITHOUT_ZKLOCK:-0}
BENCH_ZK_FORCESYNC=${BENCH_ZK_FORCESYNC:-yes}
BENCH_OUT=${BENCH_OUT:-$BENCH_DIR/out/$(date +%Y%m%d-%H%M%S)}
export BENCH_ZK_FORCESYNC

for v in BENCH_SECONDS BENCH_ROUNDS BENCH_CLIENTS BENCH_THREADS BENCH_PGPORT; do
    case ${!v} in ''|*[!0-9]*|0) die "$v must be a positive integer (got '${!v}')" ;; esac
done
case $BENCH_WARMUP in ''|*[!0-9]*) die "BENCH_WARMUP must be an integer (got '$BENCH_WARMUP')" ;; esac
for s in $BENCH_SHAPES; do
    case $s in one|distinct|shared) ;; *) die "BENCH_SHAPES: unknown shape '$s' (one, distinct, shared)" ;; esac
done
CONTENDERS=()
for c in $BENCH_CONTENDERS; do
    case $c in
        zklock) [ "$BENCH_WITHOUT_ZKLOCK" = 1 ] || CONTENDERS+=("$c") ;;
        curator|kazoo|zkbench|advisory) CONTENDERS+=("$c") ;;
        *) die "BENCH_CONTENDERS: unknown contender '$c' (zklock curator kazoo zkbench advisory)" ;;
    esac
done
[ ${#CONTENDERS[@]} -gt 0 ] || die "no contender to run"

PGBIN=${BENCH_PGBIN:-/usr/lib/postgresql/15/bin}
PG_CONFIG=$PGBIN/pg_config
PY=/usr/bin/python3
ZKSH=$REPO/tools/zk.sh
ZKBENCH=$BENCH_DIR/zkbench
PGUSER_OS=postgres
J=/usr/share/java
CURATOR_CP=$J/curator-recipes.jar:$J/curator-framework.jar:$J/curator-client.jar:$J/zookeeper.jar:$J/zookeeper-jute.jar:$J/guava.jar:$J/slf4j-api.jar:$J/slf4j-simple.jar

[ "$(id -u)" -eq 0 ] || die "run me as root (tools/deps.sh, make install and initdb as '$PGUSER_OS' need it)"

bench_init_out
say "results and logs: $BENCH_OUT"

# ---------------------------------------------------------------------------
# (a) dependencies and builds

cd "$REPO" || die "cannot cd to $REPO"
if [ "$BENCH_SKIP_DEPS" != 1 ]; then
    [ -f tools/deps.sh ] || die "tools/deps.sh not found in $REPO"
    say "installing dependencies (tools/deps.sh)"
    bash tools/deps.sh || die "tools/deps.sh failed"
fi
[ -x "$PGBIN/pgbench" ] || die "$PGBIN/pgbench not found (postgresql-15 / postgresql-client-15, or set BENCH_PGBIN)"
[ -f "$ZKSH" ] || die "tools/zk.sh not found in $REPO"
for f in ${CURATOR_CP//:/ }; do
    [ -r "$f" ] || die "$f not found (Debian packages libcurator-recipes-java, libzookeeper-java, libguava-java, libslf4j-java; tools/deps.sh)"
done
command -v javac >/dev/null 2>&1 || die "javac not found (default-jdk-headless; tools/deps.sh)"
"$PY" -c 'import kazoo' 2>/dev/null || die "$PY cannot import kazoo (python3-kazoo; tools/deps.sh)"

if [ "$BENCH_WITHOUT_ZKLOCK" != 1 ]; then
    say "building zklock (make && make install with $PG_CONFIG; log $BENCH_OUT/build.log)"
    if ! { make PG_CONFIG="$PG_CONFIG" && make PG_CONFIG="$PG_CONFIG" install; } >"$BENCH_OUT/build.log" 2>&1; then
        tail -n 40 "$BENCH_OUT/build.log" >&2
        die "zklock build failed (make && make install in $REPO); full log: $BENCH_OUT/build.log"
    fi
    git -C "$REPO" log -1 --format='zklock commit %h %cd %s' --date=short >>"$LOG" 2>/dev/null
fi
say "building bench/zkbench"
if ! make -C "$BENCH_DIR" >>"$BENCH_OUT/build.log" 2>&1; then
    tail -n 20 "$BENCH_OUT/build.log" >&2
    die "building bench/zkbench failed"
fi

bench_tmpdir
say "compiling bench/CuratorLockBench.java"
mkdir -p "$TMPD/classes"
javac -nowarn -d "$TMPD/classes" -cp "$CURATOR_CP" "$BENCH_DIR/CuratorLockBench.java" "$BENCH_DIR/BenchUtil.java" >>"$LOG" 2>&1 ||
    { tail -n 20 "$LOG" >&2; die "javac CuratorLockBench.java failed"; }

# ---------------------------------------------------------------------------
# (b) ZooKeeper and PostgreSQL, both durable

bench_start_zk
MAXCONN=$((BENCH_CLIENTS + 20 > 50 ? BENCH_CLIENTS + 20 : 50))
bench_start_pg "$BENCH_PGPORT" "$MAXCONN" "$([ "$BENCH_WITHOUT_ZKLOCK" = 1 ] && echo 0 || echo 1)"

ZK_SYNC=$(sed -n 's/^forceSync=//p' "$ZK_DIR/zoo.cfg" | tail -n 1)
PG_FSYNC=$(sql "SHOW fsync") || die "SHOW fsync failed"
PG_SYNC=$(sql "SHOW synchronous_commit") || die "SHOW synchronous_commit failed"
if [ "$ZK_SYNC" = yes ] && [ "$PG_FSYNC" = on ] && [ "$PG_SYNC" = on ]; then
    DURABLE="durable: ZooKeeper forceSync=yes, PostgreSQL fsync=on synchronous_commit=on"
else
    DURABLE="NOT durable: ZooKeeper forceSync=$ZK_SYNC, PostgreSQL fsync=$PG_FSYNC synchronous_commit=$PG_SYNC"
fi
say "$DURABLE"

# ---------------------------------------------------------------------------
# (c) the cases

# One line per case and round in $RES (every round is kept):
#   round|shape|contender|clients|cycles|seconds|cycles_per_sec|zk_packets|p50_us|p99_us|max_us|status|note
RES=$BENCH_OUT/lock.psv
: >"$RES"
FAILED=()
CASE_LIMIT=$((BENCH_SECONDS + BENCH_WARMUP + 120))

mntr_packets() {  # zk_packets_received (empty when the server did not answer)
    bash "$ZKSH" cmd "$ZKPORT" mntr 2>/dev/null | awk '$1 == "zk_packets_received" { print $2; exit }'
}
kv() {  # kv LINE KEY: the value of KEY=... in a driver's line
    tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -n 1
}

# pgbench's per-transaction log (--log): p50, p99 and max of its third field,
# the transaction's latency in microseconds
txlog_stats() {  # txlog_stats PREFIX: prints "p50 p99 max"
    cat "$1".* 2>/dev/null | awk '{ print $3 }' | sort -n |
        awk '{ v[NR] = $1 } END {
            if (NR == 0) { print "- - -"; exit }
            i50 = int(NR * 0.50); if (i50 < NR * 0.50) i50++; if (i50 < 1) i50 = 1
            i99 = int(NR * 0.99); if (i99 < NR * 0.99) i99++; if (i99 < 1) i99 = 1
            print v[i50], v[i99], v[NR] }'
}

# CPU time, in clock ticks, of the PostgreSQL side of a pgbench case: the
# zklock worker's own (utime + stime; it outlives the case) and the backends'
# (they exit with the case: the postmaster's reaped children, cutime +
# cstime, which also holds the odd autovacuum worker's)
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
proc_ticks() {  # proc_ticks PID FIELD...: the sum of those fields of /proc/PID/stat
    local pid=$1
    shift
    if [ -z "$pid" ] || [ ! -r "/proc/$pid/stat" ]; then
        echo ""
        return
    fi
    # the fields after the command, which may hold spaces: field 3 is $2 here
    sed 's/^.*) //' "/proc/$pid/stat" | awk -v f="$*" '{ n = split(f, a, " "); s = 0
        for (i = 1; i <= n; i++) s += $(a[i] - 2); print s }'
}
pg_ticks() {  # pg_ticks: "backends worker" ticks so far
    local pm wk
    pm=$(head -n 1 "$PGDATA_DIR/postmaster.pid" 2>/dev/null)
    wk=$(pgrep -f '^postgres: zklock worker' | head -n 1)
    echo "$(proc_ticks "$pm" 16 17) $(proc_ticks "$wk" 14 15)"
}
# the backends of a finished pgbench exit and are reaped a moment later
pg_ticks_settled() {  # pg_ticks_settled: pg_ticks once no client backend is left
    local i
    for i in $(seq 1 50); do
        [ "$(pgrep -c -P "$(head -n 1 "$PGDATA_DIR/postmaster.pid")" -f '^postgres: postgres postgres')" = 0 ] && break
        sleep 0.1
    done
    pg_ticks
}
cpu_note() {  # cpu_note BEFORE AFTER CYCLES: "cpu_backend_us=.. cpu_worker_us=.." per cycle
    awk -v b="$1" -v a="$2" -v c="$3" -v hz="$CLK_TCK" 'BEGIN {
        split(b, x, " "); split(a, y, " ")
        if (c <= 0 || x[1] == "" || y[1] == "") exit
        printf "cpu_backend_us=%.1f", (y[1] - x[1]) * 1e6 / hz / c
        if (x[2] != "" && y[2] != "") printf " cpu_worker_us=%.1f", (y[2] - x[2]) * 1e6 / hz / c }'
}

run_case() {  # run_case ROUND SHAPE CONTENDER
    local r=$1 shape=$2 who=$3
    local c=1 key="$3_$2_r$1" out err rc line="" cycles="" secs="" cps="" pk="" p50="" p99="" mx=""
    local before after status=ok note="" tx tps failed script
    [ "$shape" = one ] || c=$BENCH_CLIENTS
    out=$BENCH_OUT/$key.out
    err=$BENCH_OUT/$key.err
    say "round $r, $shape ($c client(s)): $who"
    echo "== $key" >>"$LOG"
    before=$(mntr_packets)
    case $who in
        zklock|advisory)
            local j=1 lp=$TMPD/$key.txlog
            [ "$c" -gt 1 ] && j=$BENCH_THREADS
            [ "$c" -lt "$j" ] && j=$c
            local t0 t1
            t0=$(pg_ticks_settled)
            if [ "$shape" = shared ]; then script=$BENCH_DIR/pgbench_${who/zklock/zk_lock}_shared.sql
            else script=$BENCH_DIR/pgbench_${who/zklock/zk_lock}.sql; fi
            run_child timeout -k 10 "$CASE_LIMIT" "$PGBIN/pgbench" -n -T "$BENCH_SECONDS" -M prepared \
                -c "$c" -j "$j" --log --log-prefix="$lp" -f "$script" \
                -h "$SOCKDIR" -p "$BENCH_PGPORT" -U postgres postgres >"$out" 2>"$err"
            rc=$?
            tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
            tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time).*/\1/p' "$out")
            failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$out")
            if [ $rc -ne 0 ] || [ -z "$tx" ] || [ -z "$tps" ] || [ "${failed:-0}" != 0 ] || [ "$tx" = 0 ]; then
                status=FAILED
                note="pgbench exit $rc, failed transactions ${failed:-?}"
            else
                cycles=$tx
                cps=$tps
                secs=$(awk -v t="$tx" -v s="$tps" 'BEGIN { printf "%.3f", t / s }')
                read -r p50 p99 mx < <(txlog_stats "$lp")
                t1=$(pg_ticks_settled)
                note=$(cpu_note "$t0" "$t1" "$tx")
            fi
            rm -f "$lp".*
            ;;
        zkbench)
            local flags=(-p -a)
            [ "$shape" = shared ] && flags+=(-s)
            # shellcheck disable=SC2086  # BENCH_ZKBENCH_FLAGS is split on purpose
            run_child timeout -k 10 "$CASE_LIMIT" "$ZKBENCH" -h "127.0.0.1:$ZKPORT" -r /bench-zkbench \
                -c "$c" -T "$BENCH_SECONDS" "${flags[@]}" $BENCH_ZKBENCH_FLAGS >"$out" 2>"$err"
            rc=$?
            line=$(grep '^mode=' "$out" | tail -n 1)
            ;;
        curator)
            run_child timeout -k 10 "$CASE_LIMIT" java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
                -Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn=error \
                -cp "$TMPD/classes:$CURATOR_CP" CuratorLockBench "$ZKPORT" /bench-curator "$c" \
                "$([ "$shape" = shared ] && echo 1 || echo 0)" "$BENCH_SECONDS" "$BENCH_WARMUP" >"$out" 2>"$err"
            rc=$?
            line=$(grep '^driver=' "$out" | tail -n 1)
            ;;
        kazoo)
            local sh=()
            [ "$shape" = shared ] && sh=(--shared)
            run_child timeout -k 10 "$CASE_LIMIT" "$PY" "$BENCH_DIR/kazoo_lock_bench.py" --zk-port "$ZKPORT" \
                --root /bench-kazoo --clients "$c" "${sh[@]}" --seconds "$BENCH_SECONDS" \
                --warmup "$BENCH_WARMUP" >"$out" 2>"$err"
            rc=$?
            line=$(grep '^driver=' "$out" | tail -n 1)
            ;;
    esac
    after=$(mntr_packets)
    if [ "$who" = zkbench ] || [ "$who" = curator ] || [ "$who" = kazoo ]; then
        if [ $rc -ne 0 ] || [ -z "$line" ]; then
            status=FAILED
            note="exit $rc"
        else
            cycles=$(kv "$line" cycles)
            cps=$(kv "$line" cycles_per_sec)
            secs=$(kv "$line" seconds)
            p50=$(kv "$line" lat_p50_us)
            p99=$(kv "$line" lat_p99_us)
            mx=$(kv "$line" lat_max_us)
            pk=$(kv "$line" zk_packets)
            [ "$who" = zkbench ] && note="zkbench's own count: $(kv "$line" requests_per_cycle) req/cycle"
            if [ "$who" != zkbench ] && [ -n "$(kv "$line" cpu_ms)" ] && [ "${cycles:-0}" -gt 0 ]; then
                note=$(awk -v m="$(kv "$line" cpu_ms)" -v c="$cycles" 'BEGIN { if (m >= 0) printf "cpu_client_us=%.1f", m * 1000 / c }')
            fi
        fi
    fi
    # pgbench and zkbench: mntr around the whole case (the "after" request
    # counts itself); the Curator and kazoo drivers frame their window
    # themselves, after their warm-up
    if [ -z "$pk" ] && [ -n "$before" ] && [ -n "$after" ]; then
        pk=$((after - before - 1))
    fi
    if [ "$status" != ok ]; then
        FAILED+=("$key")
        echo "$me: case $key FAILED ($note); $out, $err:" >&2
        tail -n 5 "$err" >&2
        grep -E 'ERROR|FATAL|aborted' "$out" 2>/dev/null | head -n 3 >&2
    fi
    echo "$r|$shape|$who|$c|$cycles|$secs|$cps|$pk|$p50|$p99|$mx|$status|$note" >>"$RES"
    { cat "$out"; sed 's/^/  stderr: /' "$err" | tail -n 20; echo "  exit $rc"; } >>"$LOG"
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
say "idle ZooKeeper traffic (3 s)"
b=$(mntr_packets); sleep 3; a=$(mntr_packets)
IDLE_RATE=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a == "" || b == "") print "?"; else printf "%.1f", (a - b - 1) / 3 }')

# every round runs every shape and contender; each round starts with another
# contender, so that none always runs first or right after the same neighbour
nc=${#CONTENDERS[@]}
for r in $(seq 1 "$BENCH_ROUNDS"); do
    for shape in $BENCH_SHAPES; do
        for i in $(seq 0 $((nc - 1))); do
            run_case "$r" "$shape" "${CONTENDERS[$(( (i + r - 1) % nc ))]}"
        done
    done
done

# ---------------------------------------------------------------------------
# (d) report

{
    echo
    echo "zklock lock benchmark  $(date '+%F %T')  $(git -C "$REPO" log -1 --format='commit %h' 2>/dev/null)  $(nproc) CPUs"
    echo "$DURABLE"
    [ -n "${BENCH_PG_CONF:-}" ] && echo "PostgreSQL settings added (BENCH_PG_CONF): $BENCH_PG_CONF"
    echo "ZooKeeper 127.0.0.1:$ZKPORT standalone (full JIT); ${BENCH_SECONDS}s per case, $BENCH_ROUNDS round(s), rounds interleaved"
    "$PY" "$BENCH_DIR/report.py" lock "$RES" "$BENCH_CLIENTS"
    echo "  Idle ZooKeeper traffic before the cases: $IDLE_RATE packets/s (pings; part of every req/cycle)."
    echo "  load average at the start: $LOAD_START; at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "    (everything shares this machine's CPUs; other work skews the figures, ratios within one run count)."
    echo "  every round's figures: $RES; raw outputs and logs: $BENCH_OUT"
} | tee "$BENCH_OUT/results.txt"

# ---------------------------------------------------------------------------
# (e) the queue benchmark on the same ZooKeeper and cluster (bench/queue/run.sh)
if [ "${BENCH_QUEUE:-1}" = 1 ]; then
    say "queue benchmark (bench/queue/run.sh; results in $BENCH_OUT/queue)"
    qenv=(BENCH_SECONDS="$BENCH_SECONDS" BENCH_SKIP_DEPS=1 BENCH_QUEUE_ZKPORT="$ZKPORT"
          BENCH_QUEUE_ROUNDS="${BENCH_QUEUE_ROUNDS:-$BENCH_ROUNDS}" BENCH_PGBIN="$PGBIN"
          BENCH_WITHOUT_ZKLOCK="$BENCH_WITHOUT_ZKLOCK" BENCH_OUT="$BENCH_OUT/queue"
          BENCH_QUEUE_DURABLE="$DURABLE")
    [ "$BENCH_WITHOUT_ZKLOCK" = 1 ] || qenv+=(BENCH_QUEUE_PGHOST="$SOCKDIR" BENCH_QUEUE_PGPORT="$BENCH_PGPORT")
    if ! run_child env "${qenv[@]}" bash "$BENCH_DIR/queue/run.sh"; then
        FAILED+=("queue benchmark (see $BENCH_OUT/queue)")
    fi
fi

# ---------------------------------------------------------------------------
# (f) the counter benchmark on the same ZooKeeper and cluster (bench/counter/run.sh)
if [ "${BENCH_COUNTER:-1}" = 1 ]; then
    say "counter benchmark (bench/counter/run.sh; results in $BENCH_OUT/counter)"
    cenv=(BENCH_SECONDS="$BENCH_SECONDS" BENCH_ROUNDS="$BENCH_ROUNDS" BENCH_WARMUP="$BENCH_WARMUP"
          BENCH_SKIP_DEPS=1 BENCH_COUNTER_ZKPORT="$ZKPORT" BENCH_PGBIN="$PGBIN"
          BENCH_WITHOUT_ZKLOCK="$BENCH_WITHOUT_ZKLOCK" BENCH_OUT="$BENCH_OUT/counter"
          BENCH_COUNTER_DURABLE="$DURABLE")
    [ "$BENCH_WITHOUT_ZKLOCK" = 1 ] || cenv+=(BENCH_COUNTER_PGHOST="$SOCKDIR" BENCH_COUNTER_PGPORT="$BENCH_PGPORT")
    if ! run_child env "${cenv[@]}" bash "$BENCH_DIR/counter/run.sh"; then
        FAILED+=("counter benchmark (see $BENCH_OUT/counter)")
    fi
fi

if [ ${#FAILED[@]} -gt 0 ]; then
    echo "$me: FAILED: ${#FAILED[@]} case(s) did not run to the end: ${FAILED[*]}" >&2
    echo "$me: their outputs are in $BENCH_OUT (<case>.out, <case>.err, run.log)" >&2
    exit 1
fi
say "done; results in $BENCH_OUT/results.txt${BENCH_QUEUE:+}"
exit 0
