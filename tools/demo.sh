#!/usr/bin/env bash
# tools/demo.sh - see zklock work: one ZooKeeper, one PostgreSQL 15 with
# zklock; two sessions contend for the same lock, a queue item goes from one
# session to another (committed, then consumed once), and an ETL load step
# waits (zk_await) until the extract steps of two databases have arrived.
#
#   tools/demo.sh          install what is needed (as root: packages, build,
#                          make install), start ZooKeeper and PostgreSQL (or
#                          reuse them if they run), run the demo, leave both
#                          running and print how to connect
#   tools/demo.sh start    start ZooKeeper and PostgreSQL only (no demo)
#   tools/demo.sh stop     stop PostgreSQL and ZooKeeper
#   tools/demo.sh status   show what runs
#
# Everything lives in /var/tmp/zklock-demo: ZooKeeper on 127.0.0.1:2181
# (state in zk/), PostgreSQL on port 5499 with its socket in
# /var/tmp/zklock-demo (data in pg/, log pg.log), no TCP listener.  The ETL
# part uses the databases demo_sales, demo_billing and demo_warehouse (made
# at the first run, in zklock.namespace 'etl').
# As root the servers run as the `postgres` user.  As another user the
# packages and the extension must already be installed, and the servers run
# as that user.
#
#   psql -h /var/tmp/zklock-demo -p 5499 -U postgres

set -u
set -o pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEMO=/var/tmp/zklock-demo
ZKDIR=$DEMO/zk
PGDATA_DIR=$DEMO/pg
PGLOG=$DEMO/pg.log
ZKPORT=2181
PGPORT_DEMO=5499
PGBIN=$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)
PSQL_NODB=(psql -X -q -h "$DEMO" -p "$PGPORT_DEMO" -U postgres)
PSQL=("${PSQL_NODB[@]}" -d postgres)

die() { echo "demo.sh: $*" >&2; exit 1; }
step() { printf '%s  %s\n' "$(date +%T.%3N)" "$*"; }

if [ "$(id -u)" -eq 0 ]; then
    RUNAS=postgres
    as_owner() { (cd / && runuser -u postgres -- "$@"); }
else
    RUNAS=$(id -un)
    as_owner() { "$@"; }
fi

setup_dirs() {
    mkdir -p "$DEMO" || die "cannot create $DEMO"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres:postgres "$DEMO"
        # the servers run as postgres, with a copy of zk.sh it can read
        install -m 755 "$SRC/tools/zk.sh" "$DEMO/zk.sh"
        [ -d "$ZKDIR" ] || install -d -o postgres -g postgres "$ZKDIR"
    else
        install -m 755 "$SRC/tools/zk.sh" "$DEMO/zk.sh"
        mkdir -p "$ZKDIR"
    fi
}

prepare() {
    if [ "$(id -u)" -eq 0 ]; then
        step "checking packages (tools/deps.sh)"
        bash "$SRC/tools/deps.sh" || die "could not install the packages"
        step "building zklock (make)"
        local log
        log=$(mktemp /tmp/zklock-demo-build.XXXXXX.log)
        if ! make -C "$SRC" -s -j2 </dev/null >"$log" 2>&1 || ! make -C "$SRC" -s install </dev/null >>"$log" 2>&1; then
            cat "$log" >&2
            rm -f "$log"
            die "build or install failed"
        fi
        rm -f "$log"
        step "installed zklock into $(pg_config --pkglibdir)"
    else
        bash "$SRC/tools/deps.sh" || die "packages missing (run tools/demo.sh as root once)"
        [ -f "$(pg_config --pkglibdir)/zklock.so" ] ||
            die "zklock is not installed (run tools/demo.sh as root, or make install as root)"
    fi
}

start_zk() {
    local out
    if ! out=$(as_owner bash "$DEMO/zk.sh" start "$ZKDIR" "$ZKPORT" 2>&1); then
        echo "$out" >&2
        die "could not start ZooKeeper on 127.0.0.1:$ZKPORT (is the port taken by another server?)"
    fi
    step "$out"
}

pg_running() {
    as_owner "$PGBIN/pg_ctl" status -D "$PGDATA_DIR" >/dev/null 2>&1
}

lib_sum() { md5sum "$(pg_config --pkglibdir)/zklock.so" 2>/dev/null | cut -d' ' -f1; }

start_pg() {
    if [ ! -f "$PGDATA_DIR/PG_VERSION" ]; then
        step "creating a PostgreSQL 15 cluster in $PGDATA_DIR (initdb)"
        local out
        out=$(as_owner "$PGBIN/initdb" -D "$PGDATA_DIR" -U postgres -A trust -E UTF8 --locale=C.UTF-8 2>&1) ||
            { echo "$out" >&2; die "initdb failed"; }
        echo "include_if_exists = 'zklock-demo.conf'" >>"$PGDATA_DIR/postgresql.conf"
    fi
    # settings of the demo, rewritten at every start
    cat >"$DEMO/zklock-demo.conf.tmp" <<EOF
# written by tools/demo.sh
port = $PGPORT_DEMO
listen_addresses = ''
unix_socket_directories = '$DEMO'
shared_preload_libraries = 'zklock'
zklock.hosts = '127.0.0.1:$ZKPORT'
log_line_prefix = '%m [%p] %b '
EOF
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$DEMO/zklock-demo.conf.tmp"
    mv "$DEMO/zklock-demo.conf.tmp" "$PGDATA_DIR/zklock-demo.conf"

    if pg_running; then
        # a rebuilt zklock.so only takes effect after a restart
        if [ "$(cat "$DEMO/pg.lib.md5" 2>/dev/null)" != "$(lib_sum)" ]; then
            step "zklock.so changed since PostgreSQL started: restarting it"
            as_owner "$PGBIN/pg_ctl" stop -D "$PGDATA_DIR" -m fast -w >/dev/null 2>&1 ||
                die "could not stop PostgreSQL"
        else
            step "PostgreSQL already running on port $PGPORT_DEMO ($PGDATA_DIR)"
            return 0
        fi
    fi
    lib_sum >"$DEMO/pg.lib.md5"
    if ! as_owner "$PGBIN/pg_ctl" start -D "$PGDATA_DIR" -l "$PGLOG" -w -t 60 >/dev/null 2>&1; then
        tail -n 30 "$PGLOG" >&2
        die "PostgreSQL did not start (log: $PGLOG)"
    fi
    step "PostgreSQL running on port $PGPORT_DEMO, socket in $DEMO ($PGDATA_DIR)"
}

sql() { "${PSQL[@]}" -At -v ON_ERROR_STOP=1 -c "$1" </dev/null; }

wait_connected() {
    local out state i
    if ! out=$(sql "CREATE EXTENSION IF NOT EXISTS zklock" 2>&1); then
        echo "$out" >&2
        die "CREATE EXTENSION zklock failed"
    fi
    for i in $(seq 1 150); do
        state=$(sql "SELECT state FROM zk_status()" 2>/dev/null)
        [ "$state" = connected ] && break
        sleep 0.2
    done
    [ "$state" = connected ] || {
        tail -n 20 "$PGLOG" >&2
        die "zklock did not connect to ZooKeeper (state: ${state:-?}); see $PGLOG"
    }
    step "zklock worker connected to ZooKeeper 127.0.0.1:$ZKPORT (zk_status().state = connected)"
}

up() {
    setup_dirs
    start_zk
    start_pg
    wait_connected
}

TS="to_char(clock_timestamp(), 'HH24:MI:SS.MS')"

session_a() {
    "${PSQL[@]}" -At -v ON_ERROR_STOP=1 <<EOF
SELECT $TS || '  [A] BEGIN; SELECT zk_lock(''job'');';
BEGIN;
SELECT zk_lock('job') AS token \gset
SELECT $TS || '  [A] holds lock ''job'', fencing token ' || :token || '; works for 3 s';
DO \$\$ BEGIN PERFORM pg_sleep(3); END \$\$;
SELECT $TS || '  [A] COMMIT;';
COMMIT;
SELECT $TS || '  [A] committed: lock ''job'' released';
EOF
}

session_b() {
    "${PSQL[@]}" -At -v ON_ERROR_STOP=1 <<EOF
SELECT $TS || '  [B] BEGIN; SELECT zk_lock(''job'');   -- A holds it: B waits';
BEGIN;
SELECT clock_timestamp() AS t0 \gset
SELECT zk_lock('job') AS token \gset
SELECT $TS || '  [B] got lock ''job'' after waiting '
       || round(extract(epoch FROM clock_timestamp() - :'t0'::timestamptz)::numeric, 2)
       || ' s, fencing token ' || :token;
SELECT $TS || '  [B] COMMIT;';
COMMIT;
SELECT $TS || '  [B] committed: lock ''job'' released';
EOF
}

demo() {
    local tmp pa pb ta tb rc=0
    tmp=$(mktemp -d /tmp/zklock-demo-run.XXXXXX)
    echo
    echo "--- demo: two sessions want the same lock 'job' (zk_lock, released at COMMIT) ---"
    echo
    session_a 2>&1 | tee "$tmp/a" &
    pa=$!
    sleep 1
    session_b 2>&1 | tee "$tmp/b" &
    pb=$!
    wait "$pa" || rc=1
    wait "$pb" || rc=1
    ta=$(sed -n 's/.*\[A\] holds.*fencing token \([0-9]*\).*/\1/p' "$tmp/a")
    tb=$(sed -n 's/.*\[B\] got.*fencing token \([0-9]*\).*/\1/p' "$tmp/b")
    rm -rf "$tmp"
    echo
    [ "$rc" -eq 0 ] && [ -n "$ta" ] && [ -n "$tb" ] || die "the demo sessions failed (see above; log: $PGLOG)"
    if [ "$tb" -gt "$ta" ]; then
        echo "B's fencing token ($tb) is greater than A's ($ta): a resource guarded by these"
        echo "tokens can refuse a late write from a holder that has since lost the lock."
    else
        echo "demo.sh: unexpected: B's token ($tb) is not greater than A's ($ta)" >&2
        rc=1
    fi
    queue_demo || rc=1
    etl_demo || rc=1
    echo
    echo "--- SELECT * FROM zk_status(); ---"
    "${PSQL[@]}" -x -c "SELECT * FROM zk_status()" </dev/null
    return $rc
}

# A queue item from one session to another: P enqueues it and commits 2 s
# later; C1 finds nothing before that, then waits for it and consumes it; C2
# finds nothing after.  The queue's name is new at every run (dropped after).
queue_demo() {
    local q tmp pp rc=0
    q="demo-jobs-$(date +%s)"
    tmp=$(mktemp -d /tmp/zklock-demo-run.XXXXXX)
    echo
    echo "--- demo: a queue item handed over at COMMIT and consumed once (zk_enqueue, zk_dequeue) ---"
    echo
    "${PSQL[@]}" -At -v ON_ERROR_STOP=1 <<EOF 2>&1 | tee "$tmp/p" &
SELECT $TS || '  [P]  BEGIN; SELECT zk_enqueue(''$q'', ''invoice 42'');   -- commits in 2 s';
BEGIN;
SELECT zk_enqueue('$q', 'invoice 42') \gset
DO \$\$ BEGIN PERFORM pg_sleep(2); END \$\$;
COMMIT;
SELECT $TS || '  [P]  COMMIT: the item is visible now';
EOF
    pp=$!
    sleep 1
    "${PSQL[@]}" -At -v ON_ERROR_STOP=1 <<EOF 2>&1 | tee "$tmp/c" || rc=1
SELECT $TS || '  [C1] zk_try_dequeue(''$q''): ' || count(*) || ' items (P has not committed)'
  FROM zk_try_dequeue('$q');
SELECT $TS || '  [C1] BEGIN; SELECT body FROM zk_dequeue(''$q'', ''10 s'');   -- waits';
BEGIN;
SELECT body FROM zk_dequeue('$q', '10 s') \gset
SELECT $TS || '  [C1] got ''' || :'body' || '''; COMMIT consumes it';
COMMIT;
SELECT $TS || '  [C2] zk_try_dequeue(''$q''): ' || count(*) || ' items (consumed once)'
  FROM zk_try_dequeue('$q');
EOF
    wait "$pp" || rc=1
    "${PSQL[@]}" -c "SELECT zk_queue_drop('$q')" >/dev/null 2>&1 </dev/null
    grep -q "\[C1\] got 'invoice 42'" "$tmp/c" && grep -q '\[C2\].*: 0 items' "$tmp/c" &&
        grep -q '\[C1\].*: 0 items (P has not' "$tmp/c" || rc=1
    rm -rf "$tmp"
    [ "$rc" -eq 0 ] || echo "demo.sh: the queue demo failed (see above; log: $PGLOG)" >&2
    return $rc
}

# The ETL walkthrough in short: two extract steps in their own databases
# record their arrival in the transaction that does their work; the load
# step, in a third database, waits with zk_await until both arrived.  The
# three databases share zklock.namespace 'etl' (set by a superuser).
etl_demo() {
    local name db tmp pl rc=0
    name="etl-demo-$(date +%s)"
    tmp=$(mktemp -d /tmp/zklock-demo-run.XXXXXX)
    for db in demo_sales demo_billing demo_warehouse; do
        "${PSQL[@]}" -v ON_ERROR_STOP=1 >/dev/null 2>&1 <<EOF || die "could not create database $db"
SELECT 'CREATE DATABASE $db' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$db') \gexec
ALTER DATABASE $db SET zklock.namespace = 'etl';
EOF
        "${PSQL_NODB[@]}" -d "$db" -c "CREATE EXTENSION IF NOT EXISTS zklock" </dev/null >/dev/null 2>&1 ||
            die "CREATE EXTENSION zklock failed in database $db"
    done
    echo
    echo "--- demo: the load step waits for the extract steps of two databases (zk_arrive, zk_await) ---"
    echo
    "${PSQL_NODB[@]}" -d demo_warehouse -At -v ON_ERROR_STOP=1 <<EOF 2>&1 | tee "$tmp/load" &
SELECT $TS || '  [warehouse] SELECT zk_await(''$name'', 2, ''30 s'');   -- waits for 2 arrivals';
SELECT clock_timestamp() AS t0 \gset
SELECT zk_await('$name', 2, '30 s') AS ok \gset
SELECT $TS || '  [warehouse] zk_await returned ' || :'ok' || ' after '
       || round(extract(epoch FROM clock_timestamp() - :'t0'::timestamptz)::numeric, 2) || ' s: load';
EOF
    pl=$!
    for db in sales billing; do
        sleep 1
        "${PSQL_NODB[@]}" -d "demo_$db" -At -v ON_ERROR_STOP=1 <<EOF 2>&1 || rc=1
BEGIN;
SELECT zk_arrive('$name', '$db') \gset
COMMIT;
SELECT $TS || '  [$db] BEGIN; ...; SELECT zk_arrive(''$name'', ''$db''); COMMIT;   -- arrivals: '
       || count(*) FROM zk_arrivals('$name');
EOF
    done
    wait "$pl" || rc=1
    grep -q 'zk_await returned t after' "$tmp/load" || rc=1
    "${PSQL_NODB[@]}" -d demo_warehouse -c "SELECT zk_arrivals_reset('$name')" >/dev/null 2>&1 </dev/null
    rm -rf "$tmp"
    [ "$rc" -eq 0 ] || echo "demo.sh: the ETL demo failed (see above; log: $PGLOG)" >&2
    return $rc
}

how_to() {
    cat <<EOF
ZooKeeper and PostgreSQL keep running:
  ZooKeeper   127.0.0.1:$ZKPORT   state and log in $ZKDIR
  PostgreSQL  port $PGPORT_DEMO       data in $PGDATA_DIR, log in $PGLOG
Connect with:
  psql -h $DEMO -p $PGPORT_DEMO -U postgres
Stop both with:
  tools/demo.sh stop
Start them again later (without the demo) with:
  tools/demo.sh start
EOF
}

stop_all() {
    local rc=0
    if [ -f "$PGDATA_DIR/PG_VERSION" ] && pg_running; then
        if as_owner "$PGBIN/pg_ctl" stop -D "$PGDATA_DIR" -m fast -w >/dev/null 2>&1; then
            step "PostgreSQL stopped"
        else
            echo "demo.sh: could not stop PostgreSQL in $PGDATA_DIR" >&2
            rc=1
        fi
    else
        step "PostgreSQL not running"
    fi
    if [ -f "$ZKDIR/zoo.cfg" ] && bash "$SRC/tools/zk.sh" status "$ZKDIR" >/dev/null 2>&1; then
        if bash "$SRC/tools/zk.sh" stop "$ZKDIR" >/dev/null 2>&1; then
            step "ZooKeeper stopped"
        else
            echo "demo.sh: could not stop ZooKeeper in $ZKDIR" >&2
            rc=1
        fi
    else
        step "ZooKeeper not running"
    fi
    return $rc
}

status_all() {
    local rc=0
    if [ -f "$ZKDIR/zoo.cfg" ] && bash "$SRC/tools/zk.sh" status "$ZKDIR" >/dev/null 2>&1; then
        echo "ZooKeeper:  running on 127.0.0.1:$ZKPORT ($ZKDIR)"
    else
        echo "ZooKeeper:  not running"
        rc=1
    fi
    if [ -f "$PGDATA_DIR/PG_VERSION" ] && pg_running; then
        echo "PostgreSQL: running on port $PGPORT_DEMO ($PGDATA_DIR)"
        sql "SELECT 'zklock:     ' || state || ', session ' || coalesce(session_id::text, '-') FROM zk_status()" 2>/dev/null
    else
        echo "PostgreSQL: not running"
        rc=1
    fi
    return $rc
}

case ${1:-run} in
    run|demo)
        prepare
        up
        demo
        rc=$?
        echo
        how_to
        exit $rc
        ;;
    start)
        [ -f "$(pg_config --pkglibdir)/zklock.so" ] || die "zklock is not installed (run tools/demo.sh first)"
        up
        echo
        how_to
        ;;
    stop) stop_all ;;
    status) status_all ;;
    -h|--help|help) sed -n '2,25s/^# \{0,1\}//p' "$0" ;;
    *) echo "usage: tools/demo.sh [start|stop|status]" >&2; exit 2 ;;
esac
