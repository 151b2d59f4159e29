#!/usr/bin/env bash
# bench/counter/run.sh - counter benchmark: zklock's zk_counter_add, kazoo's
# Counter and Apache Curator's DistributedAtomicLong, side by side on one
# throwaway ZooKeeper, durable on both sides, every client adding 1 to ONE
# shared counter, with 1 client and with 32.  After every case the counter's
# final value must equal the increments acknowledged, and the values the
# increments returned must be distinct.  See bench/counter/README.md.
#
#   bash bench/counter/run.sh      (as root on Debian 12, from anywhere)
#   BENCH_SECONDS=3 BENCH_ROUNDS=1 bash bench/counter/run.sh   (smoke, ~1.5 min)
#
# Environment:
#   BENCH_SECONDS          measured seconds of every case (default 5)
#   BENCH_ROUNDS           rounds of all cases, each round in another order;
#                          the table shows each case's median round (default 3)
#   BENCH_WARMUP           seconds of uncounted increments before each window
#                          (default 2)
#   BENCH_COUNTER_CLIENTS  the shapes: numbers of clients (default "1 32")
#   BENCH_COUNTER_ZKPORT   use the ZooKeeper already running on 127.0.0.1:PORT
#                          instead of starting one (it is not stopped)
#   BENCH_COUNTER_PGHOST, BENCH_COUNTER_PGPORT
#                          use the PostgreSQL already running there (socket
#                          directory and port; zklock loaded and connected to
#                          the same ZooKeeper) instead of building zklock and
#                          creating a cluster (it is not stopped)
#   BENCH_PGPORT           port number of the throwaway cluster (default 5496;
#                          unix socket in the temp dir only, no TCP)
#   BENCH_PG_CONF          settings added to the throwaway cluster's postgresql.conf
#   BENCH_ZK_FORCESYNC     yes (default): the throwaway ZooKeeper fsyncs its
#                          log before it replies; no: it does not
#   BENCH_PGBIN            PostgreSQL 15's bin directory (default
#                          /usr/lib/postgresql/15/bin)
#   BENCH_SKIP_DEPS=1      do not run tools/deps.sh
#   BENCH_WITHOUT_ZKLOCK=1 only the kazoo and Curator cases
#   BENCH_OUT              results and logs (default bench/out/<timestamp>/counter)
#
# Everything started is stopped and the temp dir removed on exit, also on
# failure or Ctrl-C.  Exit status 1 when a case failed or its check failed.

set -u
set -o pipefail
export LC_ALL=C

me=counter/run.sh
exec 9>&2

CDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || exit 1
REPO=$(cd "$CDIR/../.." && pwd) || exit 1
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

BENCH_SECONDS=${BENCH_SECONDS:-5}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_WARMUP=${BENCH_WARMUP:-2}
BENCH_COUNTER_CLIENTS=${BENCH_COUNTER_CLIENTS:-1 32}
BENCH_COUNTER_ZKPORT=${BENCH_COUNTER_ZKPORT:-}
BENCH_COUNTER_PGHOST=${BENCH_COUNTER_PGHOST:-}
BENCH_COUNTER_PGPORT=${BENCH_COUNTER_PGPORT:-}
BENCH_PGPORT=${BENCH_PGPORT:-5496}
BENCH_SKIP_DEPS=${BENCH_SKIP_DEPS:-0}
BENCH_WITHOUT_ZKLOCK=${BENCH_WITHOUT_ZKLOCK:-0}
BENCH_OUT=${BENCH_OUT:-$REPO/bench/out/$(date +%Y%m%d-%H%M%S)/counter}

for v in BENCH_SECONDS BENCH_ROUNDS BENCH_PGPORT; do
    case ${!v} in ''|*[!0-9]*|0) die "$v must be a positive integer (got '${!v}')" ;; esac
done
case $BENCH_WARMUP in ''|*[!0-9]*) die "BENCH_WARMUP must be an integer (got '$BENCH_WARMUP')" ;; esac
SHAPES=()
MAXCLIENTS=1
for n in $BENCH_COUNTER_CLIENTS; do
    case $n in ''|*[!0-9]*|0) die "BENCH_COUNTER_CLIENTS: '$n' is not a positive integer" ;; esac
    case " ${SHAPES[*]} " in *" $n "*) continue ;; esac
    SHAPES+=("$n")
    [ "$n" -gt "$MAXCLIENTS" ] && MAXCLIENTS=$n
done
[ ${#SHAPES[@]} -gt 0 ] || die "BENCH_COUNTER_CLIENTS is empty"
if [ -n "$BENCH_COUNTER_PGHOST$BENCH_COUNTER_PGPORT" ]; then
    if [ -z "$BENCH_COUNTER_PGHOST" ] || [ -z "$BENCH_COUNTER_PGPORT" ]; then
        die "set both BENCH_COUNTER_PGHOST and BENCH_COUNTER_PGPORT"
    fi
    [ -n "$BENCH_COUNTER_ZKPORT" ] || die "BENCH_COUNTER_PGHOST needs BENCH_COUNTER_ZKPORT (the ZooKeeper that cluster uses)"
fi

PGBIN=${BENCH_PGBIN:-/usr/lib/postgresql/15/bin}
PG_CONFIG=$PGBIN/pg_config
PY=/usr/bin/python3
ZKSH=$REPO/tools/zk.sh
J=/usr/share/java
CURATOR_CP=$J/curator-recipes.jar:$J/curator-framework.jar:$J/curator-client.jar:$J/zookeeper.jar:$J/zookeeper-jute.jar:$J/guava.jar:$J/slf4j-api.jar:$J/slf4j-simple.jar
PGUSER_OS=postgres
CTR_NAME=bench-ctr

[ "$(id -u)" -eq 0 ] || die "run me as root (tools/deps.sh, make install and initdb as '$PGUSER_OS' need it)"
[ -f "$ZKSH" ] || die "tools/zk.sh not found in $REPO"

# Does this tree's zklock have counters?  The extension script decides.
ZKLOCK_CTR=0
ZKLOCK_NOTE="zklock counters: not available (no zk_counter_add in zklock--*.sql)"
if [ "$BENCH_WITHOUT_ZKLOCK" = 1 ]; then
    ZKLOCK_NOTE="zklock: skipped (BENCH_WITHOUT_ZKLOCK=1)"
elif [ -n "$BENCH_COUNTER_PGHOST" ]; then
    ZKLOCK_CTR=1        # checked in that cluster's pg_proc below
elif grep -qiE 'function[[:space:]]+(public\.)?zk_counter_add[[:space:]]*\(' "$REPO"/zklock--*.sql 2>/dev/null; then
    ZKLOCK_CTR=1
fi

bench_init_out
say "results and logs: $BENCH_OUT"

# ---------------------------------------------------------------------------
# (a) dependencies, zklock's build, the Curator driver

if [ "$BENCH_SKIP_DEPS" != 1 ]; then
    say "checking dependencies (tools/deps.sh)"
    bash "$REPO/tools/deps.sh" || die "tools/deps.sh failed"
fi
for f in ${CURATOR_CP//:/ }; do
    [ -r "$f" ] || die "$f not found (Debian packages libcurator-recipes-java, libzookeeper-java, libguava-java, libslf4j-java; tools/deps.sh)"
done
command -v javac >/dev/null 2>&1 || die "javac not found (default-jdk-headless; tools/deps.sh)"
"$PY" -c 'import kazoo' 2>/dev/null || die "$PY cannot import kazoo (python3-kazoo; tools/deps.sh)"
[ "$ZKLOCK_CTR" = 1 ] && { "$PY" -c 'import psycopg2' 2>/dev/null || die "$PY cannot import psycopg2 (python3-psycopg2; tools/deps.sh)"; }

bench_tmpdir
say "compiling bench/counter/CuratorCounterBench.java"
mkdir -p "$TMPD/classes"
javac -nowarn -d "$TMPD/classes" -cp "$CURATOR_CP" "$CDIR/CuratorCounterBench.java" "$CDIR/../BenchUtil.java" >>"$LOG" 2>&1 ||
    { tail -n 20 "$LOG" >&2; die "javac CuratorCounterBench.java failed"; }

# ---------------------------------------------------------------------------
# (b) ZooKeeper

if [ -n "$BENCH_COUNTER_ZKPORT" ]; then
    ZKPORT=$BENCH_COUNTER_ZKPORT
    bash "$ZKSH" cmd "$ZKPORT" ruok >/dev/null 2>&1 || die "no ZooKeeper answers on 127.0.0.1:$ZKPORT (BENCH_COUNTER_ZKPORT)"
    ZK_WHAT="127.0.0.1:$ZKPORT (given)"
else
    bench_start_zk
    ZK_WHAT="127.0.0.1:$ZKPORT (standalone, full JIT)"
fi

# ---------------------------------------------------------------------------
# (c) PostgreSQL with zklock

if [ "$ZKLOCK_CTR" = 1 ] && [ -n "$BENCH_COUNTER_PGHOST" ]; then
    PGHOST_C=$BENCH_COUNTER_PGHOST
    PGPORT_C=$BENCH_COUNTER_PGPORT
    bench_psql "$PGHOST_C" "$PGPORT_C"
    bench_wait_zklock
elif [ "$ZKLOCK_CTR" = 1 ]; then
    say "building zklock (make && make install; log $BENCH_OUT/build.log)"
    if ! (cd "$REPO" && make PG_CONFIG="$PG_CONFIG" && make PG_CONFIG="$PG_CONFIG" install) >"$BENCH_OUT/build.log" 2>&1; then
        tail -n 40 "$BENCH_OUT/build.log" >&2
        die "zklock build failed (make && make install in $REPO)"
    fi
    git -C "$REPO" log -1 --format='zklock commit %h %cd %s' --date=short >>"$LOG" 2>/dev/null
    bench_start_pg "$BENCH_PGPORT" "$((MAXCLIENTS + 20 > 50 ? MAXCLIENTS + 20 : 50))" 1
    PGHOST_C=$SOCKDIR
    PGPORT_C=$BENCH_PGPORT
fi
if [ "$ZKLOCK_CTR" = 1 ]; then
    n=$(sql "SELECT count(*) FROM pg_proc WHERE proname IN ('zk_counter_add', 'zk_counter_get', 'zk_counter_drop')" 2>>"$LOG")
    if [ "${n:-0}" -lt 3 ]; then
        ZKLOCK_CTR=0
        ZKLOCK_NOTE="zklock counters: not available (no zk_counter_add/get/drop in pg_proc)"
    fi
fi
[ "$ZKLOCK_CTR" = 1 ] || say "$ZKLOCK_NOTE"

# durability of both sides, as they run
if [ -n "${BENCH_COUNTER_DURABLE:-}" ]; then
    DURABLE=$BENCH_COUNTER_DURABLE
else
    zs="?"
    [ -n "$ZK_DIR" ] && zs=$(sed -n 's/^forceSync=//p' "$ZK_DIR/zoo.cfg" | tail -n 1)
    pf=- ps=-
    if [ "$ZKLOCK_CTR" = 1 ]; then
        pf=$(sql "SHOW fsync" 2>>"$LOG")
        ps=$(sql "SHOW synchronous_commit" 2>>"$LOG")
    fi
    if [ "$zs" = yes ] && { [ "$ZKLOCK_CTR" != 1 ] || { [ "$pf" = on ] && [ "$ps" = on ]; }; }; then
        DURABLE="durable: ZooKeeper forceSync=yes, PostgreSQL fsync=$pf synchronous_commit=$ps"
    else
        DURABLE="NOT durable: ZooKeeper forceSync=$zs, PostgreSQL fsync=$pf synchronous_commit=$ps"
    fi
fi
say "$DURABLE"

# ---------------------------------------------------------------------------
# (d) the cases

# one line per case in $RES:  round|contender|clients|line of the driver|rc
RES=$BENCH_OUT/results.psv
: >"$RES"
FAILED_CASES=()
RUNID=$(date +%H%M%S)-$$
CASE_LIMIT=$((BENCH_SECONDS + BENCH_WARMUP + 120))

DRIVERS=()
[ "$ZKLOCK_CTR" = 1 ] && DRIVERS+=(zklock)
DRIVERS+=(kazoo curator)

run_case() {  # run_case ROUND CONTENDER CLIENTS
    local r=$1 d=$2 c=$3
    local key="${d}_c${c}_r$r"
    local out=$BENCH_OUT/$key.out err=$BENCH_OUT/$key.err rc line cmd
    case $d in
        zklock)
            cmd=("$PY" "$CDIR/counter_bench.py" --driver zklock --name "$CTR_NAME"
                 --pg-host "$PGHOST_C" --pg-port "$PGPORT_C") ;;
        kazoo)
            cmd=("$PY" "$CDIR/counter_bench.py" --driver kazoo --path "/bench-counter/$RUNID/kazoo-c$c-r$r") ;;
        curator)
            cmd=(java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn
                 -Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn=error
                 -cp "$TMPD/classes:$CURATOR_CP" CuratorCounterBench
                 "$ZKPORT" "/bench-counter/$RUNID/curator-c$c-r$r" "$c" "$BENCH_SECONDS" "$BENCH_WARMUP") ;;
    esac
    [ "$d" = curator ] || cmd+=(--zk-port "$ZKPORT" --clients "$c" --seconds "$BENCH_SECONDS" --warmup "$BENCH_WARMUP")
    say "round $r, $c client(s): $d"
    echo "== $key: ${cmd[*]}" >>"$LOG"
    run_child timeout -k 10 "$CASE_LIMIT" "${cmd[@]}" >"$out" 2>"$err"
    rc=$?
    line=$(grep '^driver=' "$out" | tail -n 1)
    if [ $rc -ne 0 ] || [ -z "$line" ] || ! grep -q ' verify=ok ' <<<"$line"; then
        FAILED_CASES+=("$key")
        echo "$me: case $key FAILED (exit $rc): $line" >&2
        tail -n 5 "$err" >&2
    fi
    echo "$r|$d|$c|$line|$rc" >>"$RES"
    { cat "$out"; sed 's/^/  stderr: /' "$err" | tail -n 20; echo "  exit $rc"; } >>"$LOG"
}

# Every round runs every case; each round starts with another contender, so
# that none always runs first or right after the same neighbour.
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
nd=${#DRIVERS[@]}
for r in $(seq 1 "$BENCH_ROUNDS"); do
    for c in "${SHAPES[@]}"; do
        for i in $(seq 0 $((nd - 1))); do
            run_case "$r" "${DRIVERS[$(( (i + r - 1) % nd ))]}" "$c"
        done
    done
done

# ---------------------------------------------------------------------------
# (e) report

{
    echo
    echo "zklock counter benchmark  $(date '+%F %T')  $(git -C "$REPO" log -1 --format='commit %h' 2>/dev/null)  $(nproc) CPUs"
    echo "$DURABLE"
    [ -n "${BENCH_PG_CONF:-}" ] && [ -z "$BENCH_COUNTER_PGHOST" ] && echo "PostgreSQL settings added (BENCH_PG_CONF): $BENCH_PG_CONF"
    echo "ZooKeeper $ZK_WHAT; ${BENCH_SECONDS}s per case after ${BENCH_WARMUP}s warm-up, $BENCH_ROUNDS round(s), rounds interleaved"
    [ "$ZKLOCK_CTR" = 1 ] || echo "$ZKLOCK_NOTE"
    "$PY" "$CDIR/report.py" "$RES" "${SHAPES[@]}"
    echo "  load average at the start: $LOAD_START; at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "    (everything shares this machine's CPUs; ratios within one run count)."
    echo "  every round's line: $RES; raw outputs and logs: $BENCH_OUT"
} | tee "$BENCH_OUT/results.txt"

if [ ${#FAILED_CASES[@]} -gt 0 ]; then
    echo "$me: FAILED: ${#FAILED_CASES[@]} case(s) failed or lost/duplicated increments: ${FAILED_CASES[*]}" >&2
    echo "$me: their outputs are in $BENCH_OUT (<case>.out, <case>.err, run.log)" >&2
    exit 1
fi
exit 0
