# shellcheck shell=bash
# bench/lib.sh - what the benchmark scripts share (sourced by bench/run.sh and
# bench/queue/run.sh): messages, the exit trap that stops everything they
# started, running a child so that signals reach the trap, and starting a
# throwaway ZooKeeper and a throwaway PostgreSQL 15 cluster with zklock.
#
# The caller sets: me, REPO, BENCH_OUT, LOG (after bench_init_out), PGBIN,
# PGUSER_OS, ZKSH; and opens fd 9 on its stderr.
# shellcheck disable=SC2154  # me, BENCH_OUT, PGBIN...: set by the caller  The state below is this
# file's; SAMPLER_PID may be set by the caller for a background sampler.

TMPD=""
PGDATA_DIR=""
PG_STARTED=0
ZK_DIR=""
ZK_STARTED=0
CHILD_PID=""
SAMPLER_PID=""

say() { echo "[$(date +%T)] $*" >&9; }
die() { echo "$me: error: $*" >&9; exit 1; }

stop_pid() {  # stop_pid PID: TERM and reap a background process, if alive
    if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
        kill -TERM "$1" 2>/dev/null
        wait "$1" 2>/dev/null
    fi
}

# shellcheck disable=SC2317  # invoked by the trap
bench_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_pid "$CHILD_PID"      # a `timeout` child passes it on to its group
    stop_pid "$SAMPLER_PID"
    if [ "$PG_STARTED" = 1 ]; then
        (cd / && runuser -u "$PGUSER_OS" -- "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -m fast -t 30 -w stop) >/dev/null 2>&1 ||
            (cd / && runuser -u "$PGUSER_OS" -- "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -m immediate -w stop) >/dev/null 2>&1 ||
            echo "$me: warning: could not stop PostgreSQL in $PGDATA_DIR" >&9
    fi
    if [ "$ZK_STARTED" = 1 ]; then
        bash "$ZKSH" stop "$ZK_DIR" >/dev/null 2>&1 ||
            bash "$ZKSH" kill "$ZK_DIR" >/dev/null 2>&1 ||
            echo "$me: warning: could not stop ZooKeeper in $ZK_DIR" >&9
    fi
    if [ -n "$TMPD" ] && [ -d "$TMPD" ]; then
        # keep the server logs with the results
        if [ -d "$BENCH_OUT" ]; then
            [ -f "$TMPD/postgresql.log" ] && cp "$TMPD/postgresql.log" "$BENCH_OUT/" 2>/dev/null
            [ -n "$ZK_DIR" ] && [ -f "$ZK_DIR/zk.log" ] && cp "$ZK_DIR/zk.log" "$BENCH_OUT/zookeeper.log" 2>/dev/null
        fi
        rm -rf "$TMPD"
    fi
    if [ "$rc" -ne 0 ] && [ -d "$BENCH_OUT" ]; then
        echo "$me: failed (exit $rc); logs in $BENCH_OUT" >&9
    fi
    exit "$rc"
}
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run a command in the background and wait for it, so that a signal to this
# script reaches the trap at once and the trap can stop the command
run_child() {
    "$@" &
    CHILD_PID=$!
    wait "$CHILD_PID"
    local rc=$?
    CHILD_PID=""
    return $rc
}

bench_init_out() {  # the results directory and its run.log (LOG)
    mkdir -p "$BENCH_OUT" || die "cannot create $BENCH_OUT"
    LOG=$BENCH_OUT/run.log
    : >"$LOG"
}

bench_tmpdir() {  # TMPD: a temp dir the postgres user can enter
    TMPD=$(mktemp -d /tmp/zklock-bench.XXXXXX) || die "mktemp failed"
    chmod 755 "$TMPD"
}

port_in_use() {  # something accepts connections on 127.0.0.1:$1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

bench_start_zk() {  # a standalone ZooKeeper on a free loopback port: ZKPORT, ZK_DIR
    local p
    ZKPORT=""
    for _ in $(seq 1 200); do
        p=$((21000 + RANDOM % 20000))
        if ! port_in_use "$p"; then ZKPORT=$p; break; fi
    done
    [ -n "$ZKPORT" ] || die "no free loopback port found for ZooKeeper"
    ZK_DIR=$TMPD/zk
    say "starting ZooKeeper on 127.0.0.1:$ZKPORT"
    ZK_STARTED=1
    # the JVM's full JIT, as a production server runs (tests use the quick one)
    # BENCH_ZK_FORCESYNC=yes (the default here): ZooKeeper fsyncs its log
    # before replying, its own default and what production runs; no: it
    # does not, as in the tests (tools/zk.sh's default)
    ZK_FORCESYNC=${BENCH_ZK_FORCESYNC:-yes} ZK_JIT=full bash "$ZKSH" start "$ZK_DIR" "$ZKPORT" >>"$LOG" 2>&1 || { tail -n 20 "$LOG" >&2; die "ZooKeeper did not start"; }
}

# bench_start_pg PORT MAXCONN WITH_ZKLOCK(0/1): a cluster on a unix socket in
# $TMPD/sock only, zklock preloaded and pointed at ZKPORT when asked; sets
# PGDATA_DIR, SOCKDIR, PSQL and sql(); with zklock, creates the extension and
# waits until its worker is connected.
bench_start_pg() {
    local port=$1 maxconn=$2 with_zklock=$3 state
    PGDATA_DIR=$TMPD/pgdata
    SOCKDIR=$TMPD/sock
    mkdir -p "$PGDATA_DIR" "$SOCKDIR"
    chown "$PGUSER_OS": "$PGDATA_DIR" "$SOCKDIR"
    chmod 700 "$PGDATA_DIR"
    touch "$TMPD/postgresql.log"
    chown "$PGUSER_OS": "$TMPD/postgresql.log"

    say "initdb ($PGDATA_DIR)"
    (cd / && runuser -u "$PGUSER_OS" -- "$PGBIN/initdb" -D "$PGDATA_DIR" -U postgres -A trust \
        -E UTF8 --locale=C --no-sync) >>"$LOG" 2>&1 || { tail -n 20 "$LOG" >&2; die "initdb failed"; }
    {
        echo "# $me"
        echo "listen_addresses = ''"
        echo "port = $port"
        echo "unix_socket_directories = '$SOCKDIR'"
        echo "max_connections = $maxconn"
        echo "shared_buffers = 128MB"
        echo "log_min_messages = warning"
        echo "log_line_prefix = '%m [%p] '"
        # durable, as PostgreSQL's defaults are (said explicitly: the
        # benchmarks compare durable systems)
        echo "fsync = on"
        echo "synchronous_commit = on"
        # extra settings asked for (BENCH_PG_CONF, see bench/queue/run.sh)
        [ -n "${BENCH_PG_CONF:-}" ] && printf '%s\n' "$BENCH_PG_CONF"
        if [ "$with_zklock" = 1 ]; then
            echo "shared_preload_libraries = 'zklock'"
            echo "zklock.hosts = '127.0.0.1:$ZKPORT'"
        fi
    } >>"$PGDATA_DIR/postgresql.conf"

    say "starting PostgreSQL (socket $SOCKDIR, port $port)"
    PG_STARTED=1
    if ! (cd / && runuser -u "$PGUSER_OS" -- "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -l "$TMPD/postgresql.log" \
            -t 60 -w start) >>"$LOG" 2>&1; then
        tail -n 30 "$TMPD/postgresql.log" >&2
        die "PostgreSQL did not start"
    fi
    bench_psql "$SOCKDIR" "$port"
    [ "$with_zklock" = 1 ] || return 0
    bench_wait_zklock
}

bench_psql() {  # bench_psql HOST PORT: PSQL and sql() for that server
    PSQL=("$PGBIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$1" -p "$2" -U postgres -d postgres)
}
sql() { "${PSQL[@]}" -c "$1"; }

bench_wait_zklock() {  # CREATE EXTENSION zklock, then wait for 'connected'
    local state=""
    sql "CREATE EXTENSION IF NOT EXISTS zklock" >>"$LOG" 2>&1 ||
        { tail -n 20 "$LOG" >&2; die "CREATE EXTENSION zklock failed"; }
    say "waiting for zklock's worker to connect to ZooKeeper"
    for _ in $(seq 1 150); do
        state=$(sql "SELECT state FROM zk_status()" 2>>"$LOG")
        [ "$state" = connected ] && break
        sleep 0.2
    done
    if [ "$state" != connected ]; then
        [ -f "$TMPD/postgresql.log" ] && tail -n 30 "$TMPD/postgresql.log" >&2
        die "zk_status().state is '$state', not 'connected', after 30 s"
    fi
}
