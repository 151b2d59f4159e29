#!/usr/bin/env bash
# bench/run.sh - zklock benchmark: zk_lock vs. pg_advisory_xact_lock vs. the
# same ZooKeeper lock recipe driven directly from C (bench/zkbench), all in one
# run against one throwaway ZooKeeper and one throwaway PostgreSQL 15 cluster.
#
#   bash bench/run.sh            (as root, from anywhere; see bench/README.md)
#
# Environment:
#   BENCH_SECONDS   duration of every measured case in seconds (default 10)
#   BENCH_CLIENTS   client count of the "many clients" cases (default 32)
#   BENCH_THREADS   pgbench -j for the many-clients cases (default 2)
#   BENCH_PGPORT    port number of the throwaway cluster (default 5498; it
#                   listens on a unix socket in its temp dir only, no TCP)
#   BENCH_SHARED=1  also run the contended cases: all clients on ONE name
#   BENCH_ZKBENCH_FLAGS    extra zkbench flags for every direct-C case,
#                   e.g. "-R -1" (no host re-resolution at every poll)
#   BENCH_SKIP_DEPS=1      do not run tools/deps.sh
#   BENCH_QUEUE=0   skip the queue benchmark (bench/queue/run.sh) at the end
#   BENCH_WITHOUT_ZKLOCK=1 do not build/load zklock; only the advisory and
#                          direct-C cases (to check the harness or ZooKeeper)
#   BENCH_OUT       where the results and logs are kept
#                   (default bench/out/<timestamp>)
#
# Steps: tools/deps.sh; make && make install (zklock) and make -C bench;
# ZooKeeper via tools/zk.sh on a free loopback port in a temp dir; initdb +
# pg_ctl start as user postgres; CREATE EXTENSION zklock and wait for
# zk_status().state = 'connected'; the cases; a table; everything started is
# stopped and the temp dir removed on exit (also on failure or Ctrl-C).

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

BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_CLIENTS=${BENCH_CLIENTS:-32}
BENCH_THREADS=${BENCH_THREADS:-2}
BENCH_PGPORT=${BENCH_PGPORT:-5498}
BENCH_SHARED=${BENCH_SHARED:-0}
BENCH_SKIP_DEPS=${BENCH_SKIP_DEPS:-0}
BENCH_ZKBENCH_FLAGS=${BENCH_ZKBENCH_FLAGS:-}
BENCH_WITHOUT_ZKLOCK=${BENCH_WITHOUT_ZKLOCK:-0}
BENCH_OUT=${BENCH_OUT:-$BENCH_DIR/out/$(date +%Y%m%d-%H%M%S)}

for v in BENCH_SECONDS BENCH_CLIENTS BENCH_THREADS BENCH_PGPORT; do
    case ${!v} in ''|*[!0-9]*|0) die "$v must be a positive integer (got '${!v}')" ;; esac
done

PGBIN=/usr/lib/postgresql/15/bin
PG_CONFIG=$PGBIN/pg_config
ZKSH=$REPO/tools/zk.sh
ZKBENCH=$BENCH_DIR/zkbench
PGUSER_OS=postgres

[ "$(id -u)" -eq 0 ] || die "run me as root (tools/deps.sh, make install and initdb as '$PGUSER_OS' need it)"

bench_init_out

# ---------------------------------------------------------------------------
# (a) dependencies and build

cd "$REPO" || die "cannot cd to $REPO"
if [ "$BENCH_SKIP_DEPS" != 1 ]; then
    [ -f tools/deps.sh ] || die "tools/deps.sh not found in $REPO"
    say "installing dependencies (tools/deps.sh)"
    bash tools/deps.sh || die "tools/deps.sh failed"
fi
[ -x "$PGBIN/pgbench" ] || die "$PGBIN/pgbench not found (postgresql-15 / postgresql-client-15)"
[ -f "$ZKSH" ] || die "tools/zk.sh not found in $REPO"

if [ "$BENCH_WITHOUT_ZKLOCK" != 1 ]; then
    say "building zklock (make && make install; log $BENCH_OUT/build.log)"
    if ! { make PG_CONFIG="$PG_CONFIG" && make PG_CONFIG="$PG_CONFIG" install; } >"$BENCH_OUT/build.log" 2>&1; then
        tail -n 40 "$BENCH_OUT/build.log" >&2
        echo "$me: zklock build failed (make && make install in $REPO); full log: $BENCH_OUT/build.log" >&2
        exit 1
    fi
fi
say "building bench/zkbench"
if ! make -C "$BENCH_DIR" >>"$BENCH_OUT/build.log" 2>&1; then
    tail -n 20 "$BENCH_OUT/build.log" >&2
    die "building bench/zkbench failed"
fi

# ---------------------------------------------------------------------------
# (b) ZooKeeper

bench_tmpdir
bench_start_zk

# value of one mntr field (empty if the server did not answer)
mntr_field() {  # mntr_field FIELD
    bash "$ZKSH" cmd "$ZKPORT" mntr 2>/dev/null | awk -v f="$1" '$1 == f { print $2; exit }'
}

# ---------------------------------------------------------------------------
# (c) PostgreSQL

bench_start_pg "$BENCH_PGPORT" "$((BENCH_CLIENTS + 20 > 50 ? BENCH_CLIENTS + 20 : 50))" \
    "$([ "$BENCH_WITHOUT_ZKLOCK" = 1 ] && echo 0 || echo 1)"

# ---------------------------------------------------------------------------
# measurement helpers

# Results: one line per case in $RES:
#   key|label|clients|tx_per_sec|transactions|zk_packets|pkts_per_cycle|outstanding_max|note
RES=$BENCH_OUT/results.psv
: >"$RES"
FAILED_CASES=0

# Background sampler of zk_outstanding_requests (every 0.5 s).  Every sample is
# itself one packet at the server; the samples are counted and subtracted.
start_sampler() {  # start_sampler FILE STOPFILE
    local file=$1 stop=$2
    : >"$file"
    rm -f "$stop"
    (
        trap '' INT
        while [ ! -e "$stop" ]; do
            v=$(bash "$ZKSH" cmd "$ZKPORT" mntr 2>/dev/null | awk '$1 == "zk_outstanding_requests" { print $2; exit }')
            # an answer counts as a packet even if the field were missing
            [ -n "$v" ] && echo "$v" >>"$file"
            sleep 0.5
        done
    ) &
    SAMPLER_PID=$!
}
stop_sampler() {  # stop_sampler STOPFILE
    touch "$1"
    [ -n "$SAMPLER_PID" ] && wait "$SAMPLER_PID" 2>/dev/null
    SAMPLER_PID=""
}

# zk_status() counters (empty when zklock is not loaded or the query fails)
zkstatus_counters() {
    [ "$BENCH_WITHOUT_ZKLOCK" = 1 ] && return 0
    sql "SELECT grants, releases, zk_errors, reconnects, lost FROM zk_status()" 2>/dev/null | tr '|' ' '
}

# Measure ZooKeeper packets around a command: before, the command, a short
# pause (zklock's deletes at COMMIT are asynchronous), after.
# Sets PKT_DELTA (packets received minus our own mntr requests) and OUT_MAX.
measure_zk() {  # measure_zk TAG CMD...
    local tag=$1
    shift
    local samples=$BENCH_OUT/$tag.outstanding stop=$TMPD/$tag.stop before after n rc
    # the full mntr answers are kept as $tag.mntr.before / $tag.mntr.after
    bash "$ZKSH" cmd "$ZKPORT" mntr >"$BENCH_OUT/$tag.mntr.before" 2>/dev/null
    before=$(awk '$1 == "zk_packets_received" { print $2; exit }' "$BENCH_OUT/$tag.mntr.before")
    start_sampler "$samples" "$stop"
    run_child "$@"
    rc=$?
    sleep 0.3
    stop_sampler "$stop"
    bash "$ZKSH" cmd "$ZKPORT" mntr >"$BENCH_OUT/$tag.mntr.after" 2>/dev/null
    after=$(awk '$1 == "zk_packets_received" { print $2; exit }' "$BENCH_OUT/$tag.mntr.after")
    n=$(wc -l <"$samples")
    OUT_MAX=$(sort -n "$samples" | tail -n 1)
    OUT_MAX=${OUT_MAX:-?}
    if [ -n "$before" ] && [ -n "$after" ]; then
        # "after" counts itself; every sample counted one
        PKT_DELTA=$((after - before - 1 - n))
    else
        PKT_DELTA=""
    fi
    echo "  mntr: zk_packets_received $before -> $after, $n samples, zk_outstanding_requests max $OUT_MAX" >>"$LOG"
    return $rc
}

ratio3() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.3f", a / b }'; }

# pgbench case
run_pgbench_case() {  # key label clients threads script
    local key=$1 label=$2 c=$3 j=$4 script=$5 out=$BENCH_OUT/$1.pgbench.txt
    local tx tps failed pkts note="" st_before st_after
    say "case $key: $label, $c client(s), ${BENCH_SECONDS}s"
    echo "== $key: $label, clients=$c" >>"$LOG"
    st_before=$(zkstatus_counters)
    measure_zk "$key" "$PGBIN/pgbench" -n -T "$BENCH_SECONDS" -M prepared -c "$c" -j "$j" \
        -f "$script" -h "$SOCKDIR" -p "$BENCH_PGPORT" -U postgres postgres >"$out" 2>&1
    local rc=$?
    st_after=$(zkstatus_counters)
    tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time).*/\1/p' "$out")
    failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$out")
    if [ $rc -ne 0 ] || [ -z "$tx" ] || [ -z "$tps" ] || [ "${failed:-0}" != 0 ]; then
        note="FAILED (pgbench exit $rc, failed tx ${failed:-?}; see $out)"
        FAILED_CASES=$((FAILED_CASES + 1))
        grep -E 'ERROR|FATAL|aborted' "$out" | head -n 3 >&2
    fi
    if [ -n "$st_before" ] && [ -n "$st_after" ]; then
        # grants releases zk_errors reconnects lost
        local d
        read -r -a d < <(paste -d' ' <(echo "$st_before" | tr ' ' '\n') <(echo "$st_after" | tr ' ' '\n') |
            awk '{ printf "%s%d", (NR > 1 ? " " : ""), $2 - $1 } END { print "" }')
        echo "  zk_status delta: grants ${d[0]:-?} releases ${d[1]:-?} zk_errors ${d[2]:-?} reconnects ${d[3]:-?} lost ${d[4]:-?}" >>"$LOG"
        if [ "${d[2]:-0}" != 0 ] || [ "${d[3]:-0}" != 0 ] || [ "${d[4]:-0}" != 0 ]; then
            note="${note:+$note; }zk_status: zk_errors +${d[2]} reconnects +${d[3]} lost +${d[4]}"
        fi
    fi
    if [ -n "$tx" ] && [ "$tx" -gt 0 ] && [ -n "$PKT_DELTA" ]; then
        pkts=$(awk -v p="$PKT_DELTA" -v t="$tx" 'BEGIN { printf "%.3f", p / t }')
    else
        pkts="-"
    fi
    echo "$key|$label|$c|${tps:-}|${tx:-}|${PKT_DELTA:-}|$pkts|$OUT_MAX|$note" >>"$RES"
    cat "$out" >>"$LOG"
}

# zkbench case
run_zkbench_case() {  # key label clients flags...
    local key=$1 label=$2 c=$3
    shift 3
    local out=$BENCH_OUT/$key.zkbench.txt line cycles cps rpc pkts note=""
    say "case $key: $label, $c client(s), ${BENCH_SECONDS}s"
    echo "== $key: $label, clients=$c, zkbench $*" >>"$LOG"
    # shellcheck disable=SC2086  # BENCH_ZKBENCH_FLAGS is split on purpose
    measure_zk "$key" "$ZKBENCH" -h "127.0.0.1:$ZKPORT" -c "$c" -T "$BENCH_SECONDS" $BENCH_ZKBENCH_FLAGS "$@" >"$out" 2>&1
    local rc=$?
    line=$(grep '^mode=' "$out" | tail -n 1)
    cycles=$(sed -n 's/.* cycles=\([0-9]*\) .*/\1/p' <<<"$line")
    cps=$(sed -n 's/.* cycles_per_sec=\([0-9.]*\) .*/\1/p' <<<"$line")
    rpc=$(sed -n 's/.* requests_per_cycle=\([0-9.]*\) .*/\1/p' <<<"$line")
    if [ $rc -ne 0 ] || [ -z "$cycles" ] || [ -z "$cps" ]; then
        note="FAILED (zkbench exit $rc; see $out)"
        FAILED_CASES=$((FAILED_CASES + 1))
        tail -n 3 "$out" >&2
    else
        note="client counts ${rpc} req/cycle"
    fi
    if [ -n "$cycles" ] && [ "$cycles" -gt 0 ] && [ -n "$PKT_DELTA" ]; then
        pkts=$(awk -v p="$PKT_DELTA" -v t="$cycles" 'BEGIN { printf "%.3f", p / t }')
    else
        pkts="-"
    fi
    echo "$key|$label|$c|${cps:-}|${cycles:-}|${PKT_DELTA:-}|$pkts|$OUT_MAX|$note" >>"$RES"
    { echo "  zkbench $BENCH_ZKBENCH_FLAGS $*"; cat "$out"; } >>"$LOG"
}

# ---------------------------------------------------------------------------
# idle traffic (pings) as the noise floor of the packet counts

say "measuring idle ZooKeeper traffic (5 s)"
b=$(mntr_field zk_packets_received)
sleep 5
a=$(mntr_field zk_packets_received)
IDLE_RATE=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a == "" || b == "") print "?"; else printf "%.2f", (a - b - 1) / 5 }')
echo "idle: zk_packets_received $b -> $a in 5 s" >>"$LOG"

# ---------------------------------------------------------------------------
# (d) the cases

N=$BENCH_CLIENTS
S=$BENCH_DIR

CLIENT_COUNTS=1
[ "$N" -gt 1 ] && CLIENT_COUNTS="1 $N"
for clients in $CLIENT_COUNTS; do
    if [ "$clients" = 1 ]; then j=1; sfx=1; else j=$BENCH_THREADS; sfx=N; fi
    if [ "$BENCH_WITHOUT_ZKLOCK" != 1 ]; then
        run_pgbench_case "zklock_$sfx" "zk_lock (pgbench)" "$clients" "$j" "$S/pgbench_zk_lock.sql"
    fi
    run_pgbench_case "advisory_$sfx" "pg_advisory_xact_lock (pgbench)" "$clients" "$j" "$S/pgbench_advisory.sql"
    run_zkbench_case "direct_sync_$sfx" "direct C, synchronous" "$clients"
    run_zkbench_case "direct_pipe_$sfx" "direct C, pipelined (-p)" "$clients" -p
    run_zkbench_case "direct_pipe_async_$sfx" "direct C, -p + async release (-a)" "$clients" -p -a
done

if [ "$BENCH_SHARED" = 1 ]; then
    if [ "$BENCH_WITHOUT_ZKLOCK" != 1 ]; then
        run_pgbench_case "zklock_shared" "zk_lock, one shared name" "$N" "$BENCH_THREADS" "$S/pgbench_zk_lock_shared.sql"
    fi
    run_pgbench_case "advisory_shared" "advisory, one shared name" "$N" "$BENCH_THREADS" "$S/pgbench_advisory_shared.sql"
    run_zkbench_case "direct_sync_shared" "direct C sync, one shared name" "$N" -s
    run_zkbench_case "direct_pipe_shared" "direct C -p, one shared name" "$N" -s -p
fi

# ---------------------------------------------------------------------------
# (f) report

field() {  # field KEY COLUMN(1-based)
    awk -F'|' -v k="$1" -v c="$2" '$1 == k { print $c; exit }' "$RES"
}

{
    echo
    echo "zklock benchmark  $(date '+%F %T')  ${BENCH_SECONDS}s per case  $(nproc) CPUs  ZooKeeper 127.0.0.1:$ZKPORT (standalone, forceSync=no)"
    echo
    printf '%-36s %7s %11s %13s %8s  %s\n' "case" "clients" "tx/s" "ZK pkts/cycle" "ZK outst" "notes"
    printf '%-36s %7s %11s %13s %8s  %s\n' "----" "-------" "----" "-------------" "--------" "-----"
    while IFS='|' read -r key label c tps _tx _pk ppc om note; do
        [ -n "$key" ] || continue
        case $key in advisory*) ppc="($ppc)" ;; esac
        [ -n "$tps" ] && tps=$(awk -v t="$tps" 'BEGIN { printf "%.1f", t }')
        printf '%-36s %7s %11s %13s %8s  %s\n' "$label" "$c" "${tps:--}" "$ppc" "$om" "$note"
    done <"$RES"
    echo
    if [ "$BENCH_WITHOUT_ZKLOCK" != 1 ]; then
        echo "ratios (tx/s of zk_lock divided by tx/s of the other case):"
        printf '  %-40s %10s %10s\n' "" "1 client" "$N clients"
        printf '  %-40s %10s %10s\n' "zklock / pg_advisory_xact_lock" \
            "$(ratio3 "$(field zklock_1 4)" "$(field advisory_1 4)")" "$(ratio3 "$(field zklock_N 4)" "$(field advisory_N 4)")"
        printf '  %-40s %10s %10s\n' "zklock / direct C synchronous" \
            "$(ratio3 "$(field zklock_1 4)" "$(field direct_sync_1 4)")" "$(ratio3 "$(field zklock_N 4)" "$(field direct_sync_N 4)")"
        printf '  %-40s %10s %10s\n' "zklock / direct C pipelined (-p)" \
            "$(ratio3 "$(field zklock_1 4)" "$(field direct_pipe_1 4)")" "$(ratio3 "$(field zklock_N 4)" "$(field direct_pipe_N 4)")"
        printf '  %-40s %10s %10s\n' "zklock / direct C -p + async release" \
            "$(ratio3 "$(field zklock_1 4)" "$(field direct_pipe_async_1 4)")" "$(ratio3 "$(field zklock_N 4)" "$(field direct_pipe_async_N 4)")"
        if [ "$BENCH_SHARED" = 1 ]; then
            printf '  %-40s %10s %10s\n' "shared name: zklock / advisory" "" \
                "$(ratio3 "$(field zklock_shared 4)" "$(field advisory_shared 4)")"
            printf '  %-40s %10s %10s\n' "shared name: zklock / direct C -p" "" \
                "$(ratio3 "$(field zklock_shared 4)" "$(field direct_pipe_shared 4)")"
        fi
        echo
    fi
    echo "notes:"
    echo "  tx/s: pgbench 'tps (without initial connection time)'; for direct C: lock cycles per second"
    echo "    of bench/zkbench, all clients together.  One cycle = acquire + release of one lock."
    echo "  ZK pkts/cycle: delta of mntr zk_packets_received over the case (minus the benchmark's own"
    echo "    mntr requests) divided by the transactions / cycles.  The uncontended recipe is 3"
    echo "    requests (create, get_children, delete).  The count also includes pings and, for"
    echo "    direct C, each client's connect, parent-node setup and close; idle traffic measured"
    echo "    before the cases: $IDLE_RATE packets/s.  Advisory-lock rows show only that noise (in"
    echo "    parentheses): they send nothing to ZooKeeper."
    echo "  ZK outst: highest zk_outstanding_requests seen by sampling mntr every 0.5 s."
    echo "  direct C 'client counts': requests per cycle as counted by zkbench itself (timed loop only)."
    [ -n "$BENCH_ZKBENCH_FLAGS" ] && echo "  direct C cases ran with extra zkbench flags: $BENCH_ZKBENCH_FLAGS"
    echo "  All processes (ZooKeeper, PostgreSQL, pgbench, zkbench) share this machine's CPUs;"
    echo "    load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews the figures)."
    echo
    echo "raw outputs and logs: $BENCH_OUT"
} | tee "$BENCH_OUT/results.txt"

# ---------------------------------------------------------------------------
# (g) the queue benchmark on the same ZooKeeper and cluster (bench/queue/run.sh):
# kazoo's LockingQueue, Curator's DistributedQueue and zklock's queue
if [ "${BENCH_QUEUE:-1}" = 1 ]; then
    say "queue benchmark (bench/queue/run.sh; results in $BENCH_OUT/queue)"
    qenv=(BENCH_SECONDS="$BENCH_SECONDS" BENCH_SKIP_DEPS="$BENCH_SKIP_DEPS" BENCH_QUEUE_ZKPORT="$ZKPORT"
          BENCH_WITHOUT_ZKLOCK="$BENCH_WITHOUT_ZKLOCK" BENCH_OUT="$BENCH_OUT/queue")
    [ "$BENCH_WITHOUT_ZKLOCK" = 1 ] || qenv+=(BENCH_QUEUE_PGHOST="$SOCKDIR" BENCH_QUEUE_PGPORT="$BENCH_PGPORT")
    run_child env "${qenv[@]}" bash "$BENCH_DIR/queue/run.sh" || FAILED_CASES=$((FAILED_CASES + 1))
fi

if [ "$FAILED_CASES" -gt 0 ]; then
    echo "$me: $FAILED_CASES case(s) failed" >&2
    exit 1
fi
exit 0
