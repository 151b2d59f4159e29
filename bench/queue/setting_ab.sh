#!/bin/bash
# bench/queue/setting_ab.sh - one zklock setting at several values, side by
# side on one ZooKeeper and one PostgreSQL (both durable), on zklock's queue.
#
# Builds and installs this tree's zklock with PostgreSQL 15's pg_config,
# starts a throwaway ZooKeeper and cluster (bench/lib.sh, as bench/run.sh
# does), then for each round and each shape runs bench/queue/queue_bench.py
# --driver zklock once per value, the values in turn (ALTER SYSTEM SET and a
# reload before each), and prints items/s, ZooKeeper requests per item and
# the p50 enqueue-to-dequeue latency of each run; every run checks its items
# through ZooKeeper (none lost, none twice, nothing left).
#
#   SETTING=zklock.batch_inflight VALUES="1 2" SHAPES="1:1 1:8 8:8" ROUNDS=3 \
#       flock /tmp/zklock-test.lock bash bench/queue/setting_ab.sh
#
# As root.  SECS (default 6) per run, after a 1 s warm-up.
set -u
export LC_ALL=C
# shellcheck disable=SC2034  # me, ZKSH, PGUSER_OS: read by bench/lib.sh
me=setting_ab.sh
exec 9>&2
QDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || exit 1
BENCH_DIR=$(cd "$QDIR/.." && pwd) || exit 1
REPO=$(cd "$BENCH_DIR/.." && pwd) || exit 1
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
SETTING=${SETTING:-zklock.batch_inflight}
VALUES=${VALUES:-1 2}
SHAPES=${SHAPES:-1:1}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-6}
PGBIN=${BENCH_PGBIN:-/usr/lib/postgresql/15/bin}
PG_CONFIG=$PGBIN/pg_config
ZKSH=$REPO/tools/zk.sh
PGUSER_OS=postgres
BENCH_OUT=${BENCH_OUT:-$BENCH_DIR/out/setting-$(date +%Y%m%d-%H%M%S)}
case $SETTING in zklock.[a-z_]*) ;; *) die "SETTING must be a zklock.* setting (got '$SETTING')" ;; esac
for v in $VALUES; do
    case $v in ''|*[!0-9A-Za-z._]*) die "VALUES: '$v' is not a plain value" ;; esac
done
for sh in $SHAPES; do
    case $sh in [0-9]*:[0-9]*) ;; *) die "SHAPES: '$sh' is not PRODUCERS:CONSUMERS" ;; esac
done
[ "$(id -u)" -eq 0 ] || die "run me as root"
bench_init_out
cd "$REPO" || die "cannot cd to $REPO"
{ make PG_CONFIG="$PG_CONFIG" -j2 && make PG_CONFIG="$PG_CONFIG" install; } >"$BENCH_OUT/build.log" 2>&1 ||
    die "build failed ($BENCH_OUT/build.log)"
bench_tmpdir
bench_start_zk
bench_start_pg 5497 50 1
for r in $(seq 1 "$ROUNDS"); do
    for sh in $SHAPES; do
        for v in $VALUES; do
            sql "ALTER SYSTEM SET $SETTING = '$v'" >/dev/null || die "cannot set $SETTING = $v"
            sql "SELECT pg_reload_conf()" >/dev/null
            sleep 0.5
            line=$(/usr/bin/python3 "$QDIR/queue_bench.py" --driver zklock --queue "ab-$r-${sh/:/x}-$v" \
                --pg-host "$TMPD/sock" --pg-port 5497 --producers "${sh%%:*}" --consumers "${sh##*:}" \
                --zk-port "$ZKPORT" --seconds "$SECS" --warmup 1 2>>"$BENCH_OUT/run.log" | grep '^driver=' | tail -n 1)
            ips=$(sed -n 's/.* items_per_sec=\([0-9.]*\).*/\1/p' <<<"$line")
            ppi=$(sed -n 's/.* packets_per_item=\([0-9.]*\).*/\1/p' <<<"$line")
            p50=$(sed -n 's/.* lat_p50_us=\([0-9]*\).*/\1/p' <<<"$line")
            ver=$(sed -n 's/.* verify=\([a-z]*\).*/\1/p' <<<"$line")
            printf 'round %d  %-5s  %s = %-6s  items/s %8s  req/item %6s  p50 ms %7s  check %s\n' \
                "$r" "$sh" "$SETTING" "$v" "${ips:-?}" "${ppi:-?}" \
                "$(awk -v u="${p50:-0}" 'BEGIN { printf "%.1f", u / 1000 }')" "${ver:-FAILED}" | tee -a "$BENCH_OUT/results.txt"
        done
    done
done
say "done; results in $BENCH_OUT/results.txt"
