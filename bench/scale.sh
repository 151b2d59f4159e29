#!/usr/bin/env bash
# bench/scale.sh - does zklock's cost per operation stay flat as things grow?
# One throwaway ZooKeeper and PostgreSQL cluster (bench/lib.sh), four parts:
#
#   hold      one session takes N locks (distinct names) in one transaction
#             and then as session locks, for each N of SCALE_SIZES: acquire
#             and release time per lock, ZooKeeper packets per lock
#   herd      SCALE_WAITERS waiters on one lock (SCALE_HERD_ZKLOCK zklock
#             sessions, the rest kazoo-recipe contenders, bench/scale_herd.py):
#             watches held, wakes and listings per release (counted)
#   backends  SCALE_BACKENDS pgbench clients on distinct names and on one
#             shared name: tx/s, and where the backends wait (pg_stat_activity
#             sampled) and, with perf, the CPU share of zklock's shared lock
#   views     zk_locks with SCALE_ENTRIES locks held, zk_queues with
#             SCALE_QUEUES queues: time per row, and the backend's peak
#             private memory
#
# Every part prints per-size figures and the ratio of the largest size's
# per-operation cost to the smallest's (1.0 = flat).
#
#   flock /tmp/zk-bench.lock bash bench/scale.sh       (as root; bench/README.md)
#
# Environment (defaults in brackets):
#   SCALE_PARTS        parts to run ["hold herd backends views"]
#   SCALE_SIZES        locks held by one session ["10 100 1000 10000"]
#   SCALE_ROUNDS       rounds of the hold part, sizes interleaved [2]
#   SCALE_WAITERS      waiters on one lock ["100 1000"]
#   SCALE_HERD_ZKLOCK  how many of them are zklock sessions [20]
#   SCALE_BACKENDS     pgbench clients ["20 200"]
#   BENCH_SECONDS      duration of each pgbench case [10]
#   SCALE_ENTRIES      locks held while zk_locks is read ["1000 10000 100000"]
#   SCALE_QUEUES       queues while zk_queues is read ["100 1000 10000"]
#   SCALE_PERF         1: sample the backends part with perf (installs
#                      linux-perf if missing) [1]
#   BENCH_PGBIN        PostgreSQL 15's bin directory [/usr/lib/postgresql/15/bin]
#   BENCH_PGPORT       port number of the throwaway cluster [5499]
#   BENCH_SKIP_DEPS=1  do not run tools/deps.sh
#   BENCH_SKIP_BUILD=1 do not build and install zklock
#   BENCH_OUT          where results and logs go [bench/out/scale-<timestamp>]

set -u
set -o pipefail
export LC_ALL=C

# shellcheck disable=SC2034  # read by bench/lib.sh
me=scale.sh
exec 9>&2

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || exit 1
REPO=$(cd "$BENCH_DIR/.." && pwd) || exit 1
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"

SCALE_PARTS=${SCALE_PARTS:-hold herd backends views}
SCALE_SIZES=${SCALE_SIZES:-10 100 1000 10000}
SCALE_ROUNDS=${SCALE_ROUNDS:-2}
SCALE_WAITERS=${SCALE_WAITERS:-100 1000}
SCALE_HERD_ZKLOCK=${SCALE_HERD_ZKLOCK:-20}
SCALE_BACKENDS=${SCALE_BACKENDS:-20 200}
SCALE_ENTRIES=${SCALE_ENTRIES:-1000 10000 100000}
SCALE_QUEUES=${SCALE_QUEUES:-100 1000 10000}
SCALE_PERF=${SCALE_PERF:-1}
BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_PGPORT=${BENCH_PGPORT:-5499}
BENCH_SKIP_DEPS=${BENCH_SKIP_DEPS:-0}
BENCH_SKIP_BUILD=${BENCH_SKIP_BUILD:-0}
BENCH_OUT=${BENCH_OUT:-$BENCH_DIR/out/scale-$(date +%Y%m%d-%H%M%S)}
PGBIN=${BENCH_PGBIN:-/usr/lib/postgresql/15/bin}
PG_CONFIG=$PGBIN/pg_config
ZKSH=$REPO/tools/zk.sh
PGUSER_OS=postgres
PY=/usr/bin/python3

for n in $SCALE_SIZES $SCALE_WAITERS $SCALE_BACKENDS $SCALE_ENTRIES $SCALE_QUEUES \
         "$SCALE_ROUNDS" "$BENCH_SECONDS" "$SCALE_HERD_ZKLOCK"; do
    case $n in ''|*[!0-9]*) die "sizes, rounds and seconds must be integers (got '$n')" ;; esac
done
[ "$(id -u)" -eq 0 ] || die "run me as root (tools/deps.sh, make install and initdb as '$PGUSER_OS' need it)"
has_part() { case " $SCALE_PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
max_of() { printf '%s\n' "$@" | sort -n | tail -n 1; }

bench_init_out
RESULTS=$BENCH_OUT/results.txt
: >"$RESULTS"
out() { echo "$*" | tee -a "$RESULTS"; }

cd "$REPO" || die "cannot cd to $REPO"
if [ "$BENCH_SKIP_DEPS" != 1 ]; then
    say "installing dependencies (tools/deps.sh)"
    bash tools/deps.sh >>"$LOG" 2>&1 || die "tools/deps.sh failed (see $LOG)"
fi
if [ "$SCALE_PERF" = 1 ] && has_part backends && ! command -v perf >/dev/null 2>&1; then
    say "installing linux-perf (SCALE_PERF=1)"
    apt-get install -y linux-perf >>"$LOG" 2>&1 || say "linux-perf not installed: no perf figures"
fi
if [ "$BENCH_SKIP_BUILD" != 1 ]; then
    say "building zklock (log $BENCH_OUT/build.log)"
    { make PG_CONFIG="$PG_CONFIG" && make PG_CONFIG="$PG_CONFIG" install; } >"$BENCH_OUT/build.log" 2>&1 ||
        { tail -n 30 "$BENCH_OUT/build.log" >&2; die "zklock build failed"; }
fi
"$PY" -c 'import kazoo' 2>/dev/null || die "$PY cannot import kazoo (python3-kazoo)"

bench_tmpdir
bench_start_zk

# the table must hold the largest of: the views' locks, one session's, the
# waiters, the backends (plus the worker's reserve); one backend may use it all
biggest=$(max_of $SCALE_SIZES $SCALE_ENTRIES $SCALE_WAITERS $SCALE_BACKENDS)
MAXLOCKS=$((biggest + biggest / 5 + 1000))
MAXCONN=$(( $(max_of $SCALE_BACKENDS "$SCALE_HERD_ZKLOCK") + 30 ))
BENCH_PG_CONF="zklock.max_locks = $MAXLOCKS
zklock.max_locks_per_backend = $MAXLOCKS
max_locks_per_transaction = 128
${BENCH_PG_CONF:-}"
export BENCH_PG_CONF
bench_start_pg "$BENCH_PGPORT" "$MAXCONN" 1
PSQLW="${PSQL[*]}"

mntr_field() { bash "$ZKSH" cmd "$ZKPORT" mntr 2>/dev/null | awk -v f="$1" '$1 == f { print $2; exit }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
entries_used() { sql "SELECT entries_used FROM zk_status()"; }
wait_entries() {  # wait_entries N: until the worker has freed all but N entries (60 s)

    for _ in $(seq 1 600); do
        [ "$(entries_used)" -le "$1" ] && return 0
        sleep 0.1
    done
    say "warning: entries_used is still $(entries_used), not $1"
}

out "zklock scale benchmark, $(date -u +%FT%TZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
out "commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')$([ "$BENCH_SKIP_BUILD" = 1 ] && echo ' (BENCH_SKIP_BUILD=1: the zklock installed before, maybe not this commit)'), PostgreSQL $("$PGBIN/postgres" -V | awk '{print $3}'), zklock.max_locks $MAXLOCKS"

# ---------------------------------------------------------------------------
# hold: one session, N locks

# the worker has freed every entry: polled from SQL every millisecond
DRAIN="DO \$\$ BEGIN WHILE (SELECT entries_used FROM zk_status()) > 0 LOOP PERFORM pg_sleep(0.001); END LOOP; END \$\$;"
# a point in time and this backend's CPU time so far (ns, /proc/self/schedstat), as psql variables
mark() { echo "SELECT clock_timestamp() AS t$1, split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint AS c$1 \\gset"; }
# the CPU time (ns) of process $1 so far
proc_cpu() { awk '{ print $1 }' "/proc/$1/schedstat" 2>/dev/null || echo 0; }

# hold_case SCOPE N: prints "acquire_ms release_ms drain_ms acquire_cpu_us
# release_cpu_us worker_cpu_us pkts": the wall time of the statement that
# takes the N locks and of the COMMIT (of the statement of N zk_unlock
# calls), each less that of the same statement with no lock (so that the
# figures per lock are what one more lock costs); the time until the worker
# has freed every entry; the backend's CPU time of the first two (less the
# same); the worker's CPU time from before the first to the end
hold_case() {
    local scope=$1 n=$2 f=$TMPD/hold.sql p0 p1 w0 w1 wpid r
    {
        # the statements with no lock once first: their plans and the
        # functions' lookups are then cached for both
        echo "SELECT count(zk_session_lock('h-' || i)) FROM generate_series(1, 0) i;"
        echo "SELECT count(*) FILTER (WHERE zk_unlock('h-' || i)) FROM generate_series(1, 0) i;"
        echo "SELECT count(zk_lock('h-' || i)) FROM generate_series(1, 0) i;"
        mark 0
        if [ "$scope" = xact ]; then
            echo "BEGIN; SELECT count(zk_lock('h-' || i)) FROM generate_series(1, 0) i;"
            mark 1
            echo "SELECT count(zk_lock('h-' || i)) FROM generate_series(1, $n) i;"
            mark 2; echo 'COMMIT;'; mark 3; echo 'BEGIN;'; mark 4; echo 'COMMIT;'; mark 5
        else
            echo "SELECT count(zk_session_lock('h-' || i)) FROM generate_series(1, 0) i;"
            mark 1
            echo "SELECT count(zk_session_lock('h-' || i)) FROM generate_series(1, $n) i;"
            mark 2
            echo "SELECT count(*) FILTER (WHERE zk_unlock('h-' || i)) FROM generate_series(1, $n) i;"
            mark 3; mark 4
            echo "SELECT count(*) FILTER (WHERE zk_unlock('h-' || i)) FROM generate_series(1, 0) i;"
            mark 5
        fi
        echo "$DRAIN"
        mark 6
        echo "SELECT 'R', (extract(epoch FROM (:'t2'::timestamptz - :'t1'::timestamptz) - (:'t1'::timestamptz - :'t0'::timestamptz))) * 1000,
                     (extract(epoch FROM (:'t3'::timestamptz - :'t2'::timestamptz) - (:'t5'::timestamptz - :'t4'::timestamptz))) * 1000,
                     extract(epoch FROM :'t6'::timestamptz - :'t5'::timestamptz) * 1000,
                     ((:c2 - :c1) - (:c1 - :c0)) / 1000.0, ((:c3 - :c2) - (:c5 - :c4)) / 1000.0;"
    } >"$f"
    wpid=$(sql "SELECT worker_pid FROM zk_status()")
    p0=$(mntr_field zk_packets_received)
    w0=$(proc_cpu "$wpid")
    r=$("${PSQL[@]}" -F ' ' -f "$f" 2>>"$LOG" | awk '$1 == "R" { print $2, $3, $4, $5, $6 }')
    w1=$(proc_cpu "$wpid")
    wait_entries 0
    p1=$(mntr_field zk_packets_received)
    echo "${r:-0 0 0 0 0} $(( (w1 - w0) / 1000 )) $((p1 - p0 - 1))"
}

# the names' parent nodes stay (a child that is no contender): every case
# measures the lock, not the creation of its name's container node
warm_names() {  # warm_names N
    local node
    node=$(printf '%s\n' "SELECT zk_session_lock('h-0');" "SELECT node FROM zk_locks WHERE name = 'h-0';" \
        'SELECT zk_unlock_all();' | "${PSQL[@]}" 2>>"$LOG" | grep '^/')
    [ -n "$node" ] || die "warm_names: no node for the lock h-0"
    # the parent of h-0 with its namespace (e.g. /zklock/locks/postgres:h-0), less "0"
    node=${node%/*}
    "$PY" - "127.0.0.1:$ZKPORT" "${node%0}" "$1" <<'PYEOF' >>"$LOG" 2>&1
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1]); zk.start()
base, n = sys.argv[2], int(sys.argv[3])
def failures(rs):
    bad = 0
    for r in rs:
        try:
            r.get()
        except Exception:
            bad += 1
    return bad
failures([zk.create_async("%s%d" % (base, i), b"") for i in range(1, n + 1)])
bad = failures([zk.create_async("%s%d/keep" % (base, i), b"") for i in range(1, n + 1)])
print("warm_names: %d parents, %d failures" % (n, bad))
zk.stop()
PYEOF
}

# awk helpers, put before a program: add(key, value) and median(key)
MEDIAN='function add(key, v) { vals[key, ++nv[key]] = v }
function median(key,    i, j, t, n, a) {
    n = nv[key]
    if (n == 0) return 0
    for (i = 1; i <= n; i++) a[i] = vals[key, i]
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
'

if has_part hold; then
    say "hold: one session takes N locks, sizes $SCALE_SIZES, $SCALE_ROUNDS rounds"
    H=$BENCH_OUT/hold.txt
    : >"$H"
    warm_names "$(max_of $SCALE_SIZES)"
    for r in $(seq 1 "$SCALE_ROUNDS"); do
        for n in $SCALE_SIZES; do
            for scope in xact session; do
                echo "$scope $n $(hold_case "$scope" "$n")" >>"$H"
            done
        done
    done
    out ""
    out "== hold: one session, N locks (distinct names); per lock, median of $SCALE_ROUNDS rounds"
    out "scope    locks  acquire_us  release_us  drain_us  acquire_cpu_us  release_cpu_us  worker_cpu_us  zk_pkts   (per lock)"
    for scope in xact session; do
        for n in $SCALE_SIZES; do
            awk -v s="$scope" -v n="$n" "$MEDIAN"'$1 == s && $2 == n {
                for (k = 3; k <= 8; k++) add(k, k > 5 ? $k / n : $k * 1000 / n)
                p = $9 / n }
                END { printf "%-8s %6d %11.1f %11.1f %9.1f %15.1f %15.1f %14.1f %8.2f\n", s, n,
                      median(3), median(4), median(5), median(6), median(7), median(8), p }' "$H" | tee -a "$RESULTS"
        done
    done
    small=$(printf '%s\n' $SCALE_SIZES | sort -n | head -n 1)
    large=$(max_of $SCALE_SIZES)
    for scope in xact session; do
        awk -v s="$scope" -v lo="$small" -v hi="$large" "$MEDIAN"'$1 == s && ($2 == lo || $2 == hi) {
            for (k = 3; k <= 8; k++) add($2 "," k, $k / $2) }
            function r(k) { return median(lo "," k) > 0 ? median(hi "," k) / median(lo "," k) : 0 }
            END { printf "ratio %s %d/%d locks, per lock: acquire %.2f, release %.2f, backend CPU acquire %.2f, release %.2f, worker CPU %.2f (1.00 = flat)\n",
                  s, hi, lo, r(3), r(4), r(6), r(7), r(8) }' "$H" | tee -a "$RESULTS"
    done
fi

# ---------------------------------------------------------------------------
# herd: many waiters on one lock

if has_part herd; then
    say "herd: waiters $SCALE_WAITERS on one lock"
    out ""
    out "== herd: W waiters on one lock ($SCALE_HERD_ZKLOCK zklock sessions, the rest kazoo-recipe contenders on one client)"
    first=""
    last=""
    for w in $SCALE_WAITERS; do
        line=$(run_child "$PY" "$BENCH_DIR/scale_herd.py" --zk "127.0.0.1:$ZKPORT" --name "herd-$w" \
            --waiters "$w" --zklock "$SCALE_HERD_ZKLOCK" --psql "$PSQLW" 2>>"$LOG") ||
            { out "waiters=$w FAILED (see $LOG)"; continue; }
        out "$line"
        [ -z "$first" ] && first=$line
        last=$line
    done
    if [ -n "$first" ] && [ "$first" != "$last" ]; then
        f() { echo "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { print $2 }'; }
        out "ratio $(f "$last" waiters)/$(f "$first" waiters) waiters: wakes per release $(ratio "$(f "$last" wakes_per_release)" "$(f "$first" wakes_per_release)"), packets per release $(ratio "$(f "$last" packets_per_release)" "$(f "$first" packets_per_release)"), ms per release $(ratio "$(f "$last" ms_per_release)" "$(f "$first" ms_per_release)")"
    fi
fi

# ---------------------------------------------------------------------------
# backends: many backends, distinct and shared names

# sample what the pgbench backends wait for, every 0.2 s, into FILE
sample_waits() {  # sample_waits FILE STOPFILE
    local file=$1 stop=$2
    : >"$file"
    rm -f "$stop"
    (
        trap '' INT
        while [ ! -e "$stop" ]; do
            sql "SELECT coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, '-')
                   FROM pg_stat_activity WHERE application_name = 'pgbench' AND state = 'active'" >>"$file" 2>/dev/null
            sleep 0.2
        done
    ) &
    SAMPLER_PID=$!
}

perf_share() {  # perf_share DATA: CPU share (children) of zklock's lock path, in postgres
    [ -s "$1" ] || { echo "-"; return; }
    perf report -i "$1" --children --stdio -g none --comm postgres --sort symbol 2>/dev/null |
        awk '$3 ~ /^\[/ && ($4 == "zk_backend_lock_timed" || $4 == "zk_worker_enter") {
                 gsub("%", "", $1); s[$4] += $1 }
             END { printf "%.1f%%", s["zk_backend_lock_timed"] + s["zk_worker_enter"] }'
}

if has_part backends; then
    say "backends: pgbench clients $SCALE_BACKENDS, distinct and shared names, ${BENCH_SECONDS}s each"
    out ""
    out "== backends: pgbench -c C (BEGIN; zk_lock; COMMIT), ${BENCH_SECONDS}s each; waits sampled from pg_stat_activity"
    out "names     clients     tx/s  tx/s/client  LWLock:zklock  Extension  CPU    other  perf:lock-path"
    BR=$BENCH_OUT/backends.txt
    : >"$BR"
    for shape in distinct shared; do
        script=$BENCH_DIR/pgbench_zk_lock.sql
        [ "$shape" = shared ] && script=$BENCH_DIR/pgbench_zk_lock_shared.sql
        for c in $SCALE_BACKENDS; do
            key=$shape-$c
            sample_waits "$BENCH_OUT/$key.waits" "$TMPD/stop"
            perfdata=""
            if [ "$SCALE_PERF" = 1 ] && command -v perf >/dev/null 2>&1; then
                perfdata=$BENCH_OUT/$key.perf.data
                perf record -F 199 -a -g -o "$perfdata" -- sleep "$BENCH_SECONDS" >>"$LOG" 2>&1 &
                PERF_PID=$!
            fi
            j=2
            [ "$c" -lt 2 ] && j=1
            PGAPPNAME=pgbench run_child "$PGBIN/pgbench" -h "$SOCKDIR" -p "$BENCH_PGPORT" -U postgres -n \
                -T "$BENCH_SECONDS" -M prepared -c "$c" -j "$j" -f "$script" postgres \
                >"$BENCH_OUT/$key.pgbench.txt" 2>&1
            touch "$TMPD/stop"
            wait "$SAMPLER_PID" 2>/dev/null
            SAMPLER_PID=""
            [ -n "$perfdata" ] && wait "$PERF_PID" 2>/dev/null
            tps=$(awk '/^tps = / { print $3; exit }' "$BENCH_OUT/$key.pgbench.txt")
            [ -n "$tps" ] || tps=0
            w=$BENCH_OUT/$key.waits
            lw=$(awk '$0 == "LWLock:zklock" { n++ } END { print n + 0 }' "$w")
            ex=$(awk '$0 ~ /^Extension:/ { n++ } END { print n + 0 }' "$w")
            cpu=$(awk '$0 ~ /^CPU:/ { n++ } END { print n + 0 }' "$w")
            all=$(wc -l <"$w")
            ps=$(perf_share "$perfdata")
            rm -f "$perfdata"
            echo "$shape $c $tps" >>"$BR"
            awk -v s="$shape" -v c="$c" -v t="$tps" -v lw="$lw" -v ex="$ex" -v cpu="$cpu" -v all="$all" -v ps="$ps" \
                'BEGIN { d = all > 0 ? all : 1
                         printf "%-9s %7d %8.1f %12.2f %13.1f%% %9.1f%% %5.1f%% %6.1f%%  %s\n", s, c, t, t / c,
                                100 * lw / d, 100 * ex / d, 100 * cpu / d, 100 * (all - lw - ex - cpu) / d, ps }' |
                tee -a "$RESULTS"
        done
    done
    lo=$(printf '%s\n' $SCALE_BACKENDS | sort -n | head -n 1)
    hi=$(max_of $SCALE_BACKENDS)
    for shape in distinct shared; do
        awk -v s="$shape" -v lo="$lo" -v hi="$hi" '$1 == s { t[$2] = $3 }
            END { printf "ratio %s %d/%d clients: tx/s %.2f (1.00 = no collapse; the machine has 2 cores)\n",
                  s, hi, lo, (t[lo] > 0 ? t[hi] / t[lo] : 0) }' "$BR" | tee -a "$RESULTS"
    done
    out "(Extension: a zklock wait -- on PostgreSQL 15 the lock, an answer and zklock's shared lock all show as"
    out " Extension; LWLock:zklock: a process blocked in LWLockAcquire on zklock's shared lock; perf: the CPU"
    out " share of all CPU samples inside zk_backend_lock_timed (backends) or zk_worker_enter (the worker), callees included)"
fi

# ---------------------------------------------------------------------------
# views: zk_locks and zk_queues with many entries

# run QUERY in a fresh backend; prints "ms peak_private_kB"
view_query() {  # view_query QUERY
    local f=$TMPD/view.out s=$TMPD/view.sql pid t hwm shm file
    : >"$f"
    printf '%s\n' '\timing on' 'SELECT pg_backend_pid();' "$1" "SELECT 'done';" 'SELECT pg_sleep(3);' >"$s"
    "${PSQL[@]}" -f "$s" >"$f" 2>>"$LOG" &
    local p=$!
    for _ in $(seq 1 3000); do
        grep -qx 'done' "$f" && break
        sleep 0.05
    done
    pid=$(sed -n 1p "$f")
    hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
    shm=$(awk '/^RssShmem:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
    file=$(awk '/^RssFile:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
    t=$(awk '/^Time: / { n++; if (n == 2) print $2 }' "$f")
    wait "$p" 2>/dev/null
    echo "${t:-0} $(( ${hwm:-0} - ${shm:-0} - ${file:-0} ))"
}

HOLDERS=0
hold_more() {  # hold_more FROM TO: a session that holds session locks v-FROM..v-TO
    local f=$TMPD/holder.$1
    printf '%s\n' "SELECT count(zk_session_lock('v-' || i)) FROM generate_series($1, $2) i;" \
        "SELECT 'ready';" 'SELECT pg_sleep(3600);' >"$f.sql"
    PGAPPNAME=scale-holder "${PSQL[@]}" -f "$f.sql" >"$f" 2>>"$LOG" &
    HOLDERS=$((HOLDERS + 1))
}

if has_part views; then
    say "views: zk_locks with $SCALE_ENTRIES locks, zk_queues with $SCALE_QUEUES queues"
    out ""
    out "== views: one fresh backend reads the view (time, and peak private memory: VmHWM - RssShmem - RssFile)"
    out "view       entries     rows    ms   us/row  peak_kB"
    V=$BENCH_OUT/views.txt
    : >"$V"
    have=0
    for e in $(printf '%s\n' $SCALE_ENTRIES | sort -n); do
        # 4 sessions at a time add the locks that are missing
        step=$(( (e - have + 3) / 4 ))
        k=0
        while [ "$have" -lt "$e" ]; do
            to=$((have + step)); [ "$to" -gt "$e" ] && to=$e
            hold_more $((have + 1)) "$to"
            have=$to
            k=$((k + 1))
        done
        for _ in $(seq 1 6000); do
            [ "$(grep -lx ready "$TMPD"/holder.* 2>/dev/null | wc -l)" -ge "$HOLDERS" ] && break
            sleep 0.1
        done
        rows=$(sql "SELECT count(*) FROM zk_locks")
        r=$(view_query "SELECT count(*) FROM zk_locks;")
        echo "zk_locks $e $rows $r" >>"$V"
        echo "zk_locks $e $rows $r" | awk '{ printf "%-9s %8d %8d %6.1f %8.2f %8d\n", $1, $2, $3, $4, ($3 > 0 ? $4 * 1000 / $3 : 0), $5 }' |
            tee -a "$RESULTS"
    done
    sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'scale-holder'" >>"$LOG"
    wait
    wait_entries 0
    have=0
    for q in $(printf '%s\n' $SCALE_QUEUES | sort -n); do
        # a transaction publishes at most 1 MB: 1,000 queues per COMMIT
        while [ "$have" -lt "$q" ]; do
            to=$((have + 1000)); [ "$to" -gt "$q" ] && to=$q
            sql "BEGIN; SELECT count(zk_enqueue('q-' || i, 'x')) FROM generate_series($((have + 1)), $to) i; COMMIT;" \
                >>"$LOG" 2>&1 || say "warning: the enqueues up to $to failed"
            have=$to
        done
        rows=$(sql "SELECT count(*) FROM zk_queues")
        r=$(view_query "SELECT count(*) FROM zk_queues;")
        echo "zk_queues $q $rows $r" >>"$V"
        echo "zk_queues $q $rows $r" | awk '{ printf "%-9s %8d %8d %6.1f %8.2f %8d\n", $1, $2, $3, $4, ($3 > 0 ? $4 * 1000 / $3 : 0), $5 }' |
            tee -a "$RESULTS"
    done
    for v in zk_locks zk_queues; do
        awk -v v="$v" '$1 == v && $3 > 0 { u = $4 / $3; if (!n++) { f = u; fn = $3 } l = u; ln = $3 }
            END { if (n > 1) printf "ratio %s %d/%d rows: time per row %.2f (1.00 = linear)\n", v, ln, fn, l / f }' "$V" |
            tee -a "$RESULTS"
    done
fi

out ""
out "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
say "results in $RESULTS"
