#!/bin/bash
# bench/hop_trace.sh - where the 1-client lock cycle's hop goes (issue 40).
#
# Builds and installs this tree's zklock with PostgreSQL 15's pg_config,
# starts a throwaway ZooKeeper and cluster (bench/lib.sh, as bench/run.sh
# does), prints what the machine charges for a system call and for a
# round trip between two processes (bench/pingpong), runs the 1-client
# cycle of zklock, pg_advisory_xact_lock and the raw C client
# (bench/zkbench -p -a) side by side, ROUNDS rounds of SECS seconds, then, during another zklock run: perf stat (context switches,
# CPU) of the worker and of the pgbench backend, strace -c of each for 2 s,
# the worker's hottest functions (perf record, 3 s), and a 1 s strace -tt -T
# of both (seq_worker.txt, seq_backend.txt in the
# output directory) to read one cycle's system calls in order.  strace
# slows the traced process down: read its counts per cycle, not its times.
#
#   flock /tmp/zklock-test.lock env BENCH_ZK_FORCESYNC=no SECS=4 ROUNDS=3 bash bench/hop_trace.sh
#
# As root; needs perf and strace.  BENCH_ZK_FORCESYNC=no takes ZooKeeper's
# fsync out (less noise in the hop, which does not depend on it).
set -u
export LC_ALL=C
# shellcheck disable=SC2034  # me, ZKSH, PGUSER_OS: read by bench/lib.sh
me=hop_trace.sh
exec 9>&2
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || exit 1
REPO=$(cd "$BENCH_DIR/.." && pwd) || exit 1
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
SECS=${SECS:-5}
ROUNDS=${ROUNDS:-3}
PGBIN=${BENCH_PGBIN:-/usr/lib/postgresql/15/bin}
PG_CONFIG=$PGBIN/pg_config
ZKSH=$REPO/tools/zk.sh
PGUSER_OS=postgres
BENCH_OUT=${BENCH_OUT:-$BENCH_DIR/out/hop-$(date +%Y%m%d-%H%M%S)}
bench_init_out
cd "$REPO" || die "cannot cd to $REPO"
make clean >/dev/null 2>&1
{ make PG_CONFIG="$PG_CONFIG" -j2 && make PG_CONFIG="$PG_CONFIG" install; } >"$BENCH_OUT/build.log" 2>&1 || die "build failed ($BENCH_OUT/build.log)"
make -C bench >>"$BENCH_OUT/build.log" 2>&1 || die "building bench/zkbench failed"
bench_tmpdir
bench_start_zk
bench_start_pg 5498 50 1
S=$TMPD/sock
pgb() { "$PGBIN/pgbench" -n -T "$1" -M prepared -c 1 -j 1 -f "$2" -h "$S" -p 5498 -U postgres postgres 2>&1; }
# what the machine charges for a system call and a wake-up between processes
bench/pingpong 5
for r in $(seq 1 "$ROUNDS"); do
    z=$(pgb "$SECS" bench/pgbench_zk_lock.sql | sed -n 's/^latency average = //p')
    a=$(pgb "$SECS" bench/pgbench_advisory.sql | sed -n 's/^latency average = //p')
    k=$(bench/zkbench -h "127.0.0.1:$ZKPORT" -r /bench-zkbench -c 1 -T "$SECS" -p -a 2>&1 | grep '^mode=' | tail -n 1)
    echo "round $r: zklock $z | advisory $a | zkbench $k"
done
WPID=$(sql "SELECT pid FROM pg_stat_activity WHERE backend_type LIKE '%zklock%'" | head -n 1)
echo "worker pid $WPID"
pgb 8 bench/pgbench_zk_lock.sql >"$BENCH_OUT/pgb_trace.out" &
PGBP=$!
sleep 1.5
BPID=$(sql "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'" | head -n 1)
echo "backend pid $BPID"
perf stat -e context-switches,task-clock -p "$WPID" -- sleep 2 2>&1 | grep -E "context|clock" | sed 's/^/worker: /'
perf stat -e context-switches,task-clock -p "$BPID" -- sleep 2 2>&1 | grep -E "context|clock" | sed 's/^/backend: /'
timeout 2 strace -c -p "$WPID" -o "$BENCH_OUT/strace_worker.txt" 2>/dev/null
timeout 2 strace -c -p "$BPID" -o "$BENCH_OUT/strace_backend.txt" 2>/dev/null
wait "$PGBP"
grep -E "^tps|latency average|transactions actually" "$BENCH_OUT/pgb_trace.out"
echo "--- worker strace -c (2 s)"; cat "$BENCH_OUT/strace_worker.txt"
echo "--- backend strace -c (2 s)"; cat "$BENCH_OUT/strace_backend.txt"
# where the worker's CPU goes: its hottest functions during 3 s of cycles
pgb 5 bench/pgbench_zk_lock.sql >/dev/null &
PGBP=$!
sleep 1
if perf record -q -g -p "$WPID" -o "$BENCH_OUT/perf_worker.data" -- sleep 3 >/dev/null 2>&1; then
    perf report -i "$BENCH_OUT/perf_worker.data" --no-children --sort symbol --stdio 2>/dev/null |
        grep -E '^ +[0-9]' | head -n 25 >"$BENCH_OUT/perf_worker.txt"
    echo "--- the worker's hottest functions (perf, 3 s; $BENCH_OUT/perf_worker.txt)"
    cat "$BENCH_OUT/perf_worker.txt"
fi
wait "$PGBP"
pgb 4 bench/pgbench_zk_lock.sql >/dev/null &
PGBP=$!
sleep 1
BPID=$(sql "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'" | head -n 1)
timeout 1 strace -tt -T -p "$WPID" -o "$BENCH_OUT/seq_worker.txt" 2>/dev/null &
timeout 1 strace -tt -T -p "$BPID" -o "$BENCH_OUT/seq_backend.txt" 2>/dev/null
wait
echo "--- system calls in 1 s, in order: $BENCH_OUT/seq_worker.txt, seq_backend.txt (one kill per cycle in the worker)"
for f in seq_worker seq_backend; do
    echo "$f:"; awk '{ s = $2; sub(/\(.*/, "", s); print s }' "$BENCH_OUT/$f.txt" | sort | uniq -c
done
