#!/usr/bin/env bash
# bench/queue/run.sh - queue benchmark: kazoo's LockingQueue, Apache Curator's
# DistributedQueue (lock-safe mode) and zklock's zk_enqueue/zk_dequeue, side
# by side on one throwaway ZooKeeper, durable on both sides, in three shapes:
# 1 producer + 1 consumer, 1 + 8, 8 + 8.  See bench/queue/README.md.
#
#   bash bench/queue/run.sh      (as root on Debian 12, from anywhere)
#
# Environment:
#   BENCH_SECONDS          measured seconds of every case (default 10)
#   BENCH_QUEUE_CONSUMERS  consumers of the "many consumers" shapes (default 8)
#   BENCH_QUEUE_PRODUCERS  producers of the "many producers" shape (default 8)
#   BENCH_QUEUE_SHAPES     shapes as PRODUCERS:CONSUMERS (default
#                          "1:1 1:<consumers> <producers>:<consumers>")
#   BENCH_QUEUE_WARMUP     seconds of uncounted work before each window (default 2)
#   BENCH_QUEUE_BACKLOG    the producer pauses while this many items wait (default 100)
#   BENCH_QUEUE_DRAIN      at most this many seconds to drain the queue after
#                          the window, before the check (default 30)
#   BENCH_QUEUE_ROUNDS     rounds of all cases, each round in another order;
#                          the table shows each case's median round (default 3)
#   BENCH_QUEUE_ZKPORT     use the ZooKeeper already running on 127.0.0.1:PORT
#                          instead of starting one (it is not stopped)
#   BENCH_QUEUE_PGHOST, BENCH_QUEUE_PGPORT
#                          use the PostgreSQL already running there (socket
#                          directory and port; zklock loaded and connected to
#                          the same ZooKeeper) instead of building zklock and
#                          creating a cluster (it is not stopped)
#   BENCH_PGPORT           port number of the throwaway cluster (default 5497;
#                          unix socket in the temp dir only, no TCP)
#   BENCH_PG_CONF          settings added to the throwaway cluster's
#                          postgresql.conf, e.g. 'fsync = off' to see what the
#                          WAL flushes cost (default none)
#   BENCH_ZK_FORCESYNC     yes (default): the throwaway ZooKeeper fsyncs its
#                          transaction log before it replies (ZooKeeper's own
#                          default, and the durability PostgreSQL's defaults
#                          give zklock); no: it does not (as in the tests)
#   BENCH_PGBIN            PostgreSQL 15's bin directory (default
#                          /usr/lib/postgresql/15/bin)
#   BENCH_SKIP_DEPS=1      do not check or install Debian packages
#   BENCH_WITHOUT_ZKLOCK=1 only the kazoo and Curator cases
#   BENCH_QUEUE_VARIANTS=0 without zklock's delayed, retried and grouped cases
#                          (each shape runs zklock with every item delayed, and
#                          with every item backed off once, by
#                          BENCH_QUEUE_DELAY_MS, default 100; and with every
#                          item in one of BENCH_QUEUE_GROUPS message groups,
#                          default 64, round robin)
#   BENCH_OUT              results and logs (default bench/out/queue-<timestamp>)
#
# The zklock cases run only when zklock has a queue: the repository's
# zklock--*.sql defines zk_enqueue (else "zklock queue: not available yet" and
# no build, no cluster), and after CREATE EXTENSION pg_proc has zk_enqueue.
# Everything started is stopped and the temp dir removed on exit, also on
# failure or Ctrl-C.  Exit status 1 when a case failed or its check failed.

set -u
set -o pipefail
export LC_ALL=C

me=queue/run.sh
exec 9>&2

QDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || exit 1
REPO=$(cd "$QDIR/../.." && pwd) || exit 1
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_QUEUE_CONSUMERS=${BENCH_QUEUE_CONSUMERS:-8}
BENCH_QUEUE_PRODUCERS=${BENCH_QUEUE_PRODUCERS:-8}
BENCH_QUEUE_WARMUP=${BENCH_QUEUE_WARMUP:-2}
BENCH_QUEUE_BACKLOG=${BENCH_QUEUE_BACKLOG:-100}
BENCH_QUEUE_DRAIN=${BENCH_QUEUE_DRAIN:-30}
BENCH_QUEUE_ROUNDS=${BENCH_QUEUE_ROUNDS:-3}
BENCH_QUEUE_ZKPORT=${BENCH_QUEUE_ZKPORT:-}
BENCH_QUEUE_PGHOST=${BENCH_QUEUE_PGHOST:-}
BENCH_QUEUE_PGPORT=${BENCH_QUEUE_PGPORT:-}
BENCH_PGPORT=${BENCH_PGPORT:-5497}
BENCH_SKIP_DEPS=${BENCH_SKIP_DEPS:-0}
BENCH_WITHOUT_ZKLOCK=${BENCH_WITHOUT_ZKLOCK:-0}
BENCH_OUT=${BENCH_OUT:-$REPO/bench/out/queue-$(date +%Y%m%d-%H%M%S)}

BENCH_QUEUE_SHAPES=${BENCH_QUEUE_SHAPES:-1:1 1:$BENCH_QUEUE_CONSUMERS $BENCH_QUEUE_PRODUCERS:$BENCH_QUEUE_CONSUMERS}
for v in BENCH_SECONDS BENCH_QUEUE_CONSUMERS BENCH_QUEUE_PRODUCERS BENCH_QUEUE_BACKLOG BENCH_QUEUE_DRAIN BENCH_QUEUE_ROUNDS BENCH_PGPORT; do
    case ${!v} in ''|*[!0-9]*|0) die "$v must be a positive integer (got '${!v}')" ;; esac
done
SHAPES=()
MAXCLIENTS=1
for sh in $BENCH_QUEUE_SHAPES; do
    case $sh in
        [1-9]*:[1-9]*) case ${sh//:/} in *[!0-9]*) die "BENCH_QUEUE_SHAPES: '$sh' is not PRODUCERS:CONSUMERS" ;; esac ;;
        *) die "BENCH_QUEUE_SHAPES: '$sh' is not PRODUCERS:CONSUMERS" ;;
    esac
    # the same shape twice would run twice under one key
    case " ${SHAPES[*]} " in *" $sh "*) continue ;; esac
    SHAPES+=("$sh")
    [ $(( ${sh%:*} + ${sh#*:} )) -gt $MAXCLIENTS ] && MAXCLIENTS=$(( ${sh%:*} + ${sh#*:} ))
done
[ ${#SHAPES[@]} -gt 0 ] || die "BENCH_QUEUE_SHAPES is empty"
case $BENCH_QUEUE_WARMUP in ''|*[!0-9]*) die "BENCH_QUEUE_WARMUP must be an integer (got '$BENCH_QUEUE_WARMUP')" ;; esac
if [ -n "$BENCH_QUEUE_PGHOST$BENCH_QUEUE_PGPORT" ]; then
    if [ -z "$BENCH_QUEUE_PGHOST" ] || [ -z "$BENCH_QUEUE_PGPORT" ]; then
        die "set both BENCH_QUEUE_PGHOST and BENCH_QUEUE_PGPORT"
    fi
    [ -n "$BENCH_QUEUE_ZKPORT" ] || die "BENCH_QUEUE_PGHOST needs BENCH_QUEUE_ZKPORT (the ZooKeeper that cluster uses)"
fi

PGBIN=${BENCH_PGBIN:-/usr/lib/postgresql/15/bin}
PG_CONFIG=$PGBIN/pg_config
PY=/usr/bin/python3
ZKSH=$REPO/tools/zk.sh
J=/usr/share/java
# what the Curator driver needs (libcurator-recipes-java and its dependencies)
CURATOR_CP=$J/curator-recipes.jar:$J/curator-framework.jar:$J/curator-client.jar:$J/zookeeper.jar:$J/zookeeper-jute.jar:$J/guava.jar:$J/slf4j-api.jar:$J/slf4j-simple.jar
PGUSER_OS=postgres

[ "$(id -u)" -eq 0 ] || die "run me as root (apt-get, make install and initdb as '$PGUSER_OS' need it)"
[ -f "$ZKSH" ] || die "tools/zk.sh not found in $REPO"

# Does this tree's zklock have the queue?  The extension script decides, so a
# tree without it is neither built nor installed.
ZKLOCK_QUEUE=0
ZKLOCK_NOTE="zklock queue: not available yet"
if [ "$BENCH_WITHOUT_ZKLOCK" = 1 ]; then
    ZKLOCK_NOTE="zklock queue: skipped (BENCH_WITHOUT_ZKLOCK=1)"
elif [ -n "$BENCH_QUEUE_PGHOST" ]; then
    ZKLOCK_QUEUE=1      # checked in that cluster's pg_proc below
elif grep -qiE 'function[[:space:]]+(public\.)?zk_enqueue[[:space:]]*\(' "$REPO"/zklock--*.sql 2>/dev/null; then
    ZKLOCK_QUEUE=1
else
    ZKLOCK_NOTE="zklock queue: not available yet (no zk_enqueue in zklock--*.sql)"
fi

bench_init_out

# ---------------------------------------------------------------------------
# (a) Debian packages

installed() {
    [ "$(dpkg-query -W -f '${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

if [ "$BENCH_SKIP_DEPS" != 1 ]; then
    pkgs=(python3-kazoo libcurator-recipes-java zookeeper libzookeeper-java procps coreutils)
    command -v java >/dev/null 2>&1 || pkgs+=(default-jre-headless)
    command -v javac >/dev/null 2>&1 || pkgs+=(default-jdk-headless)
    if [ "$ZKLOCK_QUEUE" = 1 ]; then
        pkgs+=(python3-psycopg2)
        [ -z "$BENCH_QUEUE_PGHOST" ] &&
            pkgs+=(postgresql-15 postgresql-client-15 postgresql-server-dev-15 libzookeeper-st-dev make gcc libc6-dev)
    fi
    missing=()
    for p in "${pkgs[@]}"; do
        installed "$p" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]} (apt-get; log $BENCH_OUT/apt.log)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get -q update </dev/null >"$BENCH_OUT/apt.log" 2>&1 ||
            echo "$me: warning: apt-get update failed" >>"$BENCH_OUT/apt.log"
        apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef \
            -o Dpkg::Options::=--force-confold "${missing[@]}" </dev/null >>"$BENCH_OUT/apt.log" 2>&1 ||
            { tail -n 20 "$BENCH_OUT/apt.log" >&2; die "apt-get install ${missing[*]} failed"; }
        for p in "${missing[@]}"; do
            installed "$p" || die "package $p still missing after apt-get (see $BENCH_OUT/apt.log)"
        done
    fi
fi
for f in ${CURATOR_CP//:/ }; do
    [ -r "$f" ] || die "$f not found (Debian packages libcurator-recipes-java, libzookeeper-java, libguava-java, libslf4j-java)"
done
command -v javac >/dev/null 2>&1 || die "javac not found (default-jdk-headless)"
"$PY" -c 'import kazoo' 2>/dev/null || die "$PY cannot import kazoo (python3-kazoo)"

# ---------------------------------------------------------------------------
# (b) the Curator driver, compiled against Debian's jars

bench_tmpdir
say "compiling bench/queue/CuratorQueueBench.java"
mkdir -p "$TMPD/classes"
javac -nowarn -d "$TMPD/classes" -cp "$CURATOR_CP" "$QDIR/CuratorQueueBench.java" "$QDIR/../BenchUtil.java" >>"$LOG" 2>&1 ||
    { tail -n 20 "$LOG" >&2; die "javac CuratorQueueBench.java failed"; }

# ---------------------------------------------------------------------------
# (c) ZooKeeper

if [ -n "$BENCH_QUEUE_ZKPORT" ]; then
    ZKPORT=$BENCH_QUEUE_ZKPORT
    bash "$ZKSH" cmd "$ZKPORT" ruok >/dev/null 2>&1 || die "no ZooKeeper answers on 127.0.0.1:$ZKPORT (BENCH_QUEUE_ZKPORT)"
    ZK_WHAT="127.0.0.1:$ZKPORT (given)"
else
    bench_start_zk
    ZK_WHAT="127.0.0.1:$ZKPORT (standalone, forceSync=$(sed -n 's/^forceSync=//p' "$ZK_DIR/zoo.cfg" | tail -n 1))"
fi

# ---------------------------------------------------------------------------
# (d) PostgreSQL with zklock, when zklock has the queue

PGHOST_Q=""
PGPORT_Q=""
if [ "$ZKLOCK_QUEUE" = 1 ] && [ -n "$BENCH_QUEUE_PGHOST" ]; then
    PGHOST_Q=$BENCH_QUEUE_PGHOST
    PGPORT_Q=$BENCH_QUEUE_PGPORT
    bench_psql "$PGHOST_Q" "$PGPORT_Q"
    bench_wait_zklock
elif [ "$ZKLOCK_QUEUE" = 1 ]; then
    say "building zklock (make && make install; log $BENCH_OUT/build.log)"
    if ! (cd "$REPO" && make PG_CONFIG="$PG_CONFIG" && make PG_CONFIG="$PG_CONFIG" install) >"$BENCH_OUT/build.log" 2>&1; then
        tail -n 40 "$BENCH_OUT/build.log" >&2
        die "zklock build failed (make && make install in $REPO)"
    fi
    bench_start_pg "$BENCH_PGPORT" "$((MAXCLIENTS + 20 > 50 ? MAXCLIENTS + 20 : 50))" 1
    PGHOST_Q=$SOCKDIR
    PGPORT_Q=$BENCH_PGPORT
fi

if [ "$ZKLOCK_QUEUE" = 1 ]; then
    n=$(sql "SELECT count(*) FROM pg_proc WHERE proname IN ('zk_enqueue', 'zk_dequeue')" 2>>"$LOG")
    if [ "${n:-0}" -lt 2 ]; then
        ZKLOCK_QUEUE=0
        ZKLOCK_NOTE="zklock queue: not available yet (no zk_enqueue/zk_dequeue in pg_proc)"
    fi
fi
say "$([ "$ZKLOCK_QUEUE" = 1 ] && echo "zklock queue: available" || echo "$ZKLOCK_NOTE")"

# ---------------------------------------------------------------------------
# (e) the cases

# one line per case in $RES:  key|label|consumers|line of the driver|rc
RES=$BENCH_OUT/results.psv
: >"$RES"
FAILED_CASES=0
RUNID=$(date +%H%M%S)-$$
CASE_LIMIT=$((BENCH_SECONDS + BENCH_QUEUE_WARMUP + BENCH_QUEUE_DRAIN + 120))

run_case() {  # run_case KEY LABEL SHAPE(PxC) CMD...
    local key=$1 label=$2 shape=$3
    shift 3
    local out=$BENCH_OUT/$key.out err=$BENCH_OUT/$key.err rc line
    say "case $key: $label, ${shape%x*} producer(s) + ${shape#*x} consumer(s), ${BENCH_SECONDS}s (+${BENCH_QUEUE_WARMUP}s warm-up)"
    { echo "== $key: $*"; } >>"$LOG"
    run_child timeout -k 10 "$CASE_LIMIT" "$@" >"$out" 2>"$err"
    rc=$?
    line=$(grep '^driver=' "$out" | tail -n 1)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        FAILED_CASES=$((FAILED_CASES + 1))
        echo "$me: case $key FAILED (exit $rc); $out, $err:" >&2
        tail -n 5 "$err" >&2
    fi
    echo "$key|$label|$shape|$line|$rc" >>"$RES"
    { cat "$out"; echo "  exit $rc"; } >>"$LOG"
}

PYARGS=(--zk-port "$ZKPORT" --seconds "$BENCH_SECONDS" --warmup "$BENCH_QUEUE_WARMUP"
        --backlog "$BENCH_QUEUE_BACKLOG" --drain "$BENCH_QUEUE_DRAIN")
DRIVERS=(kazoo curator)
[ "$ZKLOCK_QUEUE" = 1 ] && DRIVERS+=(zklock)
# zklock's delayed items and backoffs on the same shapes (BENCH_QUEUE_VARIANTS=0: not)
VARIANTS=()
[ "$ZKLOCK_QUEUE" = 1 ] && [ "${BENCH_QUEUE_VARIANTS:-1}" != 0 ] && VARIANTS=(zklock-delayed zklock-retry)
BENCH_QUEUE_DELAY_MS=${BENCH_QUEUE_DELAY_MS:-100}
BENCH_QUEUE_GROUPS=${BENCH_QUEUE_GROUPS:-64}
# message groups, when this zklock has them
if [ ${#VARIANTS[@]} -gt 0 ]; then
    n=$(sql "SELECT count(*) FROM pg_proc WHERE proname = 'zk_enqueue_grouped'" 2>>"$LOG")
    if [ "${n:-0}" -gt 0 ]; then
        VARIANTS+=(zklock-grouped)
    else
        say "zklock-grouped: not run (no zk_enqueue_grouped in pg_proc)"
    fi
fi
label_of() {
    case $1 in
        kazoo) echo "kazoo LockingQueue" ;;
        curator) echo "Curator DistributedQueue" ;;
        zklock) echo "zklock zk_enqueue/zk_dequeue" ;;
        zklock-delayed) echo "zklock, delayed ${BENCH_QUEUE_DELAY_MS} ms" ;;
        zklock-retry) echo "zklock, retried once" ;;
        zklock-grouped) echo "zklock, ${BENCH_QUEUE_GROUPS} groups" ;;
    esac
}
run_driver() {  # run_driver DRIVER PRODUCERS CONSUMERS ROUND
    local d=$1 p=$2 c=$3 r=$4
    local sh="${p}x${c}"
    local key="${d}_${sh}_r$r"
    case $d in
        kazoo)
            run_case "$key" "$(label_of "$d")" "$sh" \
                "$PY" "$QDIR/queue_bench.py" --driver kazoo --path "/bench-queue/$RUNID/kazoo-$sh-$r" \
                --producers "$p" --consumers "$c" "${PYARGS[@]}" ;;
        curator)
            run_case "$key" "$(label_of "$d")" "$sh" \
                java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
                -Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn=error \
                -cp "$TMPD/classes:$CURATOR_CP" CuratorQueueBench \
                "$ZKPORT" "/bench-queue/$RUNID/curator-$sh-$r" "$c" "$BENCH_SECONDS" "$BENCH_QUEUE_WARMUP" \
                "$BENCH_QUEUE_BACKLOG" "$BENCH_QUEUE_DRAIN" "$p" ;;
        zklock|zklock-delayed|zklock-retry|zklock-grouped)
            run_case "$key" "$(label_of "$d")" "$sh" \
                "$PY" "$QDIR/queue_bench.py" --driver "$d" --queue "bench-$RUNID-$d-$sh-$r" \
                --delay-ms "$BENCH_QUEUE_DELAY_MS" --groups "$BENCH_QUEUE_GROUPS" \
                --pg-host "$PGHOST_Q" --pg-port "$PGPORT_Q" --producers "$p" --consumers "$c" "${PYARGS[@]}" ;;
    esac
}
# Every round runs every case; each round starts with another contender, so
# that none always runs first (cold) or right after the same neighbour.
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$BENCH_QUEUE_ROUNDS"); do
    say "round $r of $BENCH_QUEUE_ROUNDS"
    for sh in "${SHAPES[@]}"; do
        nd=${#DRIVERS[@]}
        for i in $(seq 0 $((nd - 1))); do
            run_driver "${DRIVERS[$(( (i + r - 1) % nd ))]}" "${sh%:*}" "${sh#*:}" "$r"
        done
        for v in ${VARIANTS[@]+"${VARIANTS[@]}"}; do
            run_driver "$v" "${sh%:*}" "${sh#*:}" "$r"
        done
    done
done

# ---------------------------------------------------------------------------
# (f) report

get() {  # get KEY FIELD: a field of the driver's line of case KEY
    awk -F'|' -v k="$1" '$1 == k { print $4; exit }' "$RES" | tr ' ' '\n' | sed -n "s/^$2=//p"
}
rounds_of() {  # rounds_of DRIVER SHAPE: "items/s key" of each round that ran, by items/s
    local r v
    for r in $(seq 1 "$BENCH_QUEUE_ROUNDS"); do
        v=$(get "${1}_${2}_r$r" items_per_sec)
        [ -n "$v" ] && echo "$v ${1}_${2}_r$r"
    done | sort -n
}
median_key() {  # median_key DRIVER SHAPE: the key of the median round
    local all n
    all=$(rounds_of "$1" "$2")
    n=$(printf '%s\n' "$all" | grep -c .)
    [ "$n" -gt 0 ] || return 0
    printf '%s\n' "$all" | sed -n "$(( (n + 1) / 2 ))p" | cut -d' ' -f2
}
sum_of() {  # sum_of DRIVER SHAPE FIELD: over the rounds
    local r t=0 v
    for r in $(seq 1 "$BENCH_QUEUE_ROUNDS"); do
        v=$(get "${1}_${2}_r$r" "$3")
        t=$((t + ${v:-0}))
    done
    echo "$t"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
msf() { awk -v v="$1" 'BEGIN { if (v == "") print "-"; else printf "%.1f", v / 1000 }'; }

# durability of both sides, as they run
if [ -n "${BENCH_QUEUE_DURABLE:-}" ]; then
    DURABLE=$BENCH_QUEUE_DURABLE
else
    zs="?"
    [ -n "$ZK_DIR" ] && zs=$(sed -n 's/^forceSync=//p' "$ZK_DIR/zoo.cfg" | tail -n 1)
    pf=- ps=-
    if [ "$ZKLOCK_QUEUE" = 1 ]; then
        pf=$(sql "SHOW fsync" 2>>"$LOG")
        ps=$(sql "SHOW synchronous_commit" 2>>"$LOG")
    fi
    if [ "$zs" = yes ] && { [ "$ZKLOCK_QUEUE" != 1 ] || { [ "$pf" = on ] && [ "$ps" = on ]; }; }; then
        DURABLE="durable: ZooKeeper forceSync=yes, PostgreSQL fsync=$pf synchronous_commit=$ps"
    else
        DURABLE="NOT durable: ZooKeeper forceSync=$zs, PostgreSQL fsync=$pf synchronous_commit=$ps"
    fi
fi

FMT='%-30s%s %9s %8s  %-22s %23s  %s\n'
{
    echo
    echo "zklock queue benchmark  $(date '+%F %T')  ${BENCH_SECONDS}s per case after ${BENCH_QUEUE_WARMUP}s warm-up, $BENCH_QUEUE_ROUNDS round(s), rounds interleaved  $(nproc) CPUs"
    echo "$DURABLE"
    echo "ZooKeeper $ZK_WHAT; payload 100 bytes; backlog at most $BENCH_QUEUE_BACKLOG items"
    [ -n "${BENCH_PG_CONF:-}" ] && [ -z "$BENCH_QUEUE_PGHOST" ] && echo "PostgreSQL settings added (BENCH_PG_CONF): $BENCH_PG_CONF"
    for sh in "${SHAPES[@]}"; do
        k=${sh/:/x}
        echo
        echo "queue, ${sh%:*} producer(s) + ${sh#*:} consumer(s)"
        # shellcheck disable=SC2059
        printf "  $FMT" "contender" "" "items/s" "req/item" "items/s of each round" "latency ms p50/p99/max" "check through ZooKeeper (all rounds)"
        # shellcheck disable=SC2059
        printf "  $FMT" "---------" "" "-------" "--------" "---------------------" "----------------------" "------------------------------------"
        for d in "${DRIVERS[@]}" ${VARIANTS[@]+"${VARIANTS[@]}"}; do
            mk=$(median_key "$d" "$k")
            each=$(for r in $(seq 1 "$BENCH_QUEUE_ROUNDS"); do v=$(get "${d}_${k}_r$r" items_per_sec); printf '%s ' "${v:-FAILED}"; done)
            bad=""
            for r in $(seq 1 "$BENCH_QUEUE_ROUNDS"); do
                kk="${d}_${k}_r$r"
                rc=$(awk -F'|' -v k="$kk" '$1 == k { print $5; exit }' "$RES")
                if [ -z "$(get "$kk" verify)" ]; then
                    bad="$bad round $r FAILED (exit ${rc:-?}; see $BENCH_OUT/$kk.err);"
                    continue
                fi
                [ "$(get "$kk" verify)" = ok ] || bad="$bad round $r: $(get "$kk" verify);"
                [ "$(get "$kk" drained)" = 1 ] || bad="$bad round $r not drained;"
                [ "${rc:-1}" = 0 ] || bad="$bad round $r exit $rc;"
            done
            chk="$(sum_of "$d" "$k" produced_total) put, $(sum_of "$d" "$k" consumed_total) consumed, lost $(sum_of "$d" "$k" lost), duplicated $(sum_of "$d" "$k" duplicated), left $(sum_of "$d" "$k" remaining) items $(sum_of "$d" "$k" claims_left) claims"
            if [ -n "$bad" ]; then chk="NOT OK:$bad $chk"; else chk="ok: $chk"; fi
            if [ -z "$mk" ]; then
                # shellcheck disable=SC2059
                printf "  $FMT" "$(label_of "$d")" "" FAILED - "$each" - "$chk"
            else
                # shellcheck disable=SC2059
                printf "  $FMT" "$(label_of "$d")" "" "$(get "$mk" items_per_sec)" \
                    "$(get "$mk" packets_per_item)" "$each" \
                    "$(msf "$(get "$mk" lat_p50_us)") / $(msf "$(get "$mk" lat_p99_us)") / $(msf "$(get "$mk" lat_max_us)")" "$chk"
            fi
        done
        if [ "$ZKLOCK_QUEUE" != 1 ]; then
            # shellcheck disable=SC2059
            printf "  $FMT" "zklock zk_enqueue/zk_dequeue" "" - - - - "not run: $ZKLOCK_NOTE"
        fi
    done
    echo
    echo "ratios of the median items/s:"
    printf '  %-30s %14s %14s %14s\n' "shape" "zklock/kazoo" "zklock/Curator" "Curator/kazoo"
    for sh in "${SHAPES[@]}"; do
        k=${sh/:/x}
        zk=$(get "$(median_key zklock "$k")" items_per_sec)
        ka=$(get "$(median_key kazoo "$k")" items_per_sec)
        cu=$(get "$(median_key curator "$k")" items_per_sec)
        printf '  %-30s %14s %14s %14s\n' "${sh%:*} producer(s) + ${sh#*:} consumer(s)" \
            "$(ratio "$zk" "$ka")" "$(ratio "$zk" "$cu")" "$(ratio "$cu" "$ka")"
    done
    if [ ${#VARIANTS[@]} -gt 0 ]; then
        echo
        echo "zklock's variants, ratios of the median items/s to plain zklock in the same run:"
        printf '  %-30s %14s %14s %14s\n' "shape" "delayed" "retried once" "grouped"
        for sh in "${SHAPES[@]}"; do
            k=${sh/:/x}
            zk=$(get "$(median_key zklock "$k")" items_per_sec)
            printf '  %-30s %14s %14s %14s\n' "${sh%:*} producer(s) + ${sh#*:} consumer(s)" \
                "$(ratio "$(get "$(median_key zklock-delayed "$k")" items_per_sec)" "$zk")" \
                "$(ratio "$(get "$(median_key zklock-retry "$k")" items_per_sec)" "$zk")" \
                "$(ratio "$(get "$(median_key zklock-grouped "$k")" items_per_sec)" "$zk")"
        done
        echo "  delayed: every item enqueued with delay => ${BENCH_QUEUE_DELAY_MS} ms (its latency includes the delay);"
        echo "  retried once: every item's first hand-out calls zk_retry_later(msg_id, ${BENCH_QUEUE_DELAY_MS} ms) and commits,"
        echo "    its second is consumed (two hand-outs, a hold and its end per item counted)."
        echo "  grouped: item n enqueued with zk_enqueue_grouped into group g<n mod ${BENCH_QUEUE_GROUPS}>: each group's"
        echo "    items one at a time, in order (each let into the queue after the one before is consumed)."
    fi
    echo
    echo "notes:"
    echo "  items/s: median over the rounds; req/item and latency: of the round with the median items/s."
    echo "  items/s: items consumed in the timed window (entry and claim deleted from ZooKeeper;"
    echo "    Curator: counted in consumeMessage, after which Curator deletes the node) / window length."
    echo "  req/item: mntr zk_packets_received delta over the window (minus one for the closing"
    echo "    mntr) / items of the window: the put, the take and the consume of an item, together."
    echo "  latency: enqueue to dequeue, of the items counted in the window: from the producer's clock"
    echo "    before the put (written into the payload) to the consumer's when the item counts.  It"
    echo "    includes the wait behind the items ahead: while the consumers are the bottleneck the"
    echo "    queue holds the backlog ($BENCH_QUEUE_BACKLOG items) and the latency is about backlog / items/s."
    echo "  check: after the window the producers stop, the consumers drain the queue, every session"
    echo "    closes; then the payloads' sequence numbers consumed and those still in ZooKeeper are"
    echo "    compared with those put (lost = put but neither consumed nor in ZooKeeper)."
    echo "  load average at the start: $LOAD_START; at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "    (everything shares this machine's CPUs; ratios within one run count)."
    echo
    echo "every round's line: $RES; raw outputs and logs: $BENCH_OUT"
} | tee "$BENCH_OUT/results.txt"

if [ "$FAILED_CASES" -gt 0 ]; then
    echo "$me: FAILED: $FAILED_CASES case(s) failed (their .out/.err in $BENCH_OUT)" >&2
    exit 1
fi
exit 0
