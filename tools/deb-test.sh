#!/usr/bin/env bash
# tools/deb-test.sh [DEB] - install the Debian package into a fresh cluster and
# smoke-test it; then remove it, leaving the machine as it was.
#
# As root, on the Debian release the package was built for (CI: Debian 12,
# from .ci/run).  Without DEB it builds postgresql-NN-zklock first
# (tools/package.sh deb, into a temporary directory).  Then:
#
#   1. refuses if the package is installed already (the test removes it at
#      the end);
#   2. saves the files of the system PostgreSQL that the package overwrites
#      (a `make install` of tools/test.sh wrote the same zklock.so, scripts
#      and bitcode) and restores them at the end, checked byte for byte, so a
#      test suite run afterwards still uses its own build;
#   3. dpkg -i DEB (its dependencies, PostgreSQL NN and libzookeeper-st2,
#      come from tools/deps.sh); dpkg --verify finds the files as packaged;
#   4. a ZooKeeper (tools/zk.sh) and a new cluster made with initdb of
#      /usr/lib/postgresql/NN, as postgres, with
#      shared_preload_libraries = 'zklock', on loopback ports of their own;
#   5. the smoke test: CREATE EXTENSION zklock (the default version, and
#      1.0 updated to it), zk_status() connected, a session lock held by one
#      session and refused to another until the first one's backend ends,
#      a queue item enqueued, dequeued once and gone;
#   6. stops both, dpkg -r, checks the package left nothing, puts the saved
#      files back.
#
# The last line is "deb-test: N passed, M failed"; exit 0 only if nothing
# failed.  ZKLOCK_KEEP=1 keeps the work directory (cluster and logs).

set -u
set -o pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PASSED=0
FAILED=0
WORK=""
PKG=""
INSTALLED_BY_US=0
PGBIN=""
PGDATA=""
ZKDIR=""

say() { printf '\n=== %s  %s\n' "$(date +%T)" "$*"; }
pass() { PASSED=$((PASSED + 1)); echo "ok - $*"; }
fail() { FAILED=$((FAILED + 1)); echo "not ok - $*"; }
# check NAME EXPECTED ACTUAL
check() {
    if [ "$2" = "$3" ]; then pass "$1"; else fail "$1 (expected '$2', got '$3')"; fi
}

finish() {
    local rc=$?
    set +e
    if [ -n "$PGDATA" ] && [ -f "$PGDATA/postmaster.pid" ]; then
        runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1
    fi
    if [ -n "$ZKDIR" ]; then
        bash "$SRC/tools/zk.sh" stop "$ZKDIR" >/dev/null 2>&1 || bash "$SRC/tools/zk.sh" kill "$ZKDIR" >/dev/null 2>&1
    fi
    if [ "$INSTALLED_BY_US" -eq 1 ]; then
        say "dpkg -r $PKG"
        if dpkg -r "$PKG" >"$WORK/dpkg-r.log" 2>&1; then
            pass "dpkg -r $PKG"
        else
            fail "dpkg -r $PKG: $(tail -n 3 "$WORK/dpkg-r.log")"
        fi
        check "the package is gone" "not-installed" \
            "$(dpkg-query -W -f '${db:Status-Status}' "$PKG" 2>/dev/null || echo not-installed)"
        restore_saved
    fi
    [ "$rc" -ne 0 ] && [ "$FAILED" -eq 0 ] && FAILED=1
    if [ -n "$WORK" ]; then
        if [ "$FAILED" -eq 0 ] && [ -z "${ZKLOCK_KEEP:-}" ]; then
            rm -rf "$WORK"
        else
            echo "deb-test: work directory kept in $WORK"
        fi
    fi
    echo
    echo "deb-test: $PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ] && exit 0
    exit 1
}
trap finish EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" -eq 0 ] || { echo "deb-test: run as root (it installs and removes a package)" >&2; FAILED=1; exit 1; }

WORK=$(mktemp -d /tmp/zklock-debtest.XXXXXX)
chmod 755 "$WORK"

say "dependencies (tools/deps.sh)"
bash "$SRC/tools/deps.sh" || { fail "tools/deps.sh"; exit 1; }

DEB=${1:-}
if [ -z "$DEB" ]; then
    say "build (tools/package.sh deb)"
    bash "$SRC/tools/package.sh" deb --out "$WORK/debs" || { fail "tools/package.sh deb"; exit 1; }
    DEB=$(ls "$WORK"/debs/postgresql-*-zklock_*.deb 2>/dev/null | head -n 1)
fi
[ -f "$DEB" ] || { fail "no package to test (${DEB:-none built})"; exit 1; }
PKG=$(dpkg-deb -f "$DEB" Package)
VERSION=$(dpkg-deb -f "$DEB" Version)
PGMAJOR=$(sed -n 's/^postgresql-\([0-9]*\)-zklock$/\1/p' <<<"$PKG")
[ -n "$PGMAJOR" ] || { fail "$DEB is not a postgresql-NN-zklock package"; exit 1; }
PGBIN=/usr/lib/postgresql/$PGMAJOR/bin
echo "deb-test: $PKG $VERSION (${DEB##*/}), PostgreSQL $PGMAJOR"
[ -x "$PGBIN/initdb" ] || { fail "PostgreSQL $PGMAJOR is not installed ($PGBIN)"; exit 1; }

if [ "$(dpkg-query -W -f '${db:Status-Status}' "$PKG" 2>/dev/null)" != "" ] &&
   [ "$(dpkg-query -W -f '${db:Status-Status}' "$PKG" 2>/dev/null)" != "not-installed" ]; then
    fail "$PKG is installed already; remove it (dpkg -r $PKG) before this test, which removes it at the end"
    exit 1
fi

# ---- 2. save what the package overwrites ----
mapfile -t FILES < <(dpkg-deb --fsys-tarfile "$DEB" | tar -tf - | sed -n 's|^\./|/|p' | grep -v '/$')
SAVED=$WORK/saved
mkdir -p "$SAVED"
: >"$WORK/saved.sha256"
: >"$WORK/absent"
for f in "${FILES[@]}"; do
    if [ -e "$f" ] || [ -L "$f" ]; then
        (cd / && cp -a --parents "${f#/}" "$SAVED/") || { fail "cannot save $f"; exit 1; }
        sha256sum "$f" >>"$WORK/saved.sha256"
    else
        echo "$f" >>"$WORK/absent"
    fi
done
echo "deb-test: ${#FILES[@]} files in the package; $(wc -l <"$WORK/saved.sha256") of them exist (saved, restored at the end)"

restore_saved() {
    local f missing=0
    while IFS= read -r f; do
        if [ -e "$f" ]; then
            echo "deb-test: $f is still there after dpkg -r" >&2
            missing=1
        fi
    done <"$WORK/absent"
    [ "$missing" -eq 0 ] && pass "dpkg -r left none of the package's own files" || fail "dpkg -r left files"
    if [ -s "$WORK/saved.sha256" ]; then
        cp -a "$SAVED"/. / || fail "restoring the saved files"
        if sha256sum --quiet -c "$WORK/saved.sha256"; then
            pass "the $(wc -l <"$WORK/saved.sha256") files the package overwrote are back, byte for byte"
        else
            fail "the saved files differ after the restore"
        fi
    fi
}

# ---- 3. install ----
say "dpkg -i ${DEB##*/}"
INSTALLED_BY_US=1
if dpkg -i "$DEB" >"$WORK/dpkg-i.log" 2>&1; then
    pass "dpkg -i $PKG"
else
    cat "$WORK/dpkg-i.log"
    fail "dpkg -i $PKG"
    exit 1
fi
check "dpkg --verify $PKG finds the files as packaged" "" "$(dpkg --verify "$PKG" 2>&1)"
check "$PKG is installed" "installed" "$(dpkg-query -W -f '${db:Status-Status}' "$PKG")"

# ---- 4. ZooKeeper and a new cluster ----
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ZKPORT=$(free_port)
PGPORT=$(free_port)
ZKDIR=$WORK/zk
PGHOME=$WORK/pg    # the cluster's directory, socket and log: the postgres user's
say "ZooKeeper on 127.0.0.1:$ZKPORT, PostgreSQL $PGMAJOR on $PGHOME port $PGPORT"
bash "$SRC/tools/zk.sh" start "$ZKDIR" "$ZKPORT" >"$WORK/zk-start.log" 2>&1 ||
    { cat "$WORK/zk-start.log"; fail "ZooKeeper did not start"; exit 1; }
install -d -o postgres -g postgres "$PGHOME" "$PGHOME/data"
PGDATA=$PGHOME/data
runuser -u postgres -- "$PGBIN/initdb" -D "$PGDATA" -A trust -U postgres >"$WORK/initdb.log" 2>&1 ||
    { cat "$WORK/initdb.log"; fail "initdb"; exit 1; }
cat >>"$PGDATA/postgresql.conf" <<EOF
listen_addresses = ''
port = $PGPORT
unix_socket_directories = '$PGHOME'
shared_preload_libraries = 'zklock'
zklock.hosts = '127.0.0.1:$ZKPORT'
zklock.connect_timeout = '10s'
EOF
if runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGHOME/postgresql.log" -w -t 60 start >/dev/null 2>&1; then
    pass "a new cluster starts with shared_preload_libraries = 'zklock'"
else
    tail -n 30 "$PGHOME/postgresql.log"
    fail "the cluster did not start"
    exit 1
fi

# psql [DB] SQL: one statement list in a fresh session, unaligned, no headers
psql_() {
    local db=$1
    shift
    runuser -u postgres -- "$PGBIN/psql" -h "$PGHOME" -p "$PGPORT" -U postgres -d "$db" \
        -XAtq -v ON_ERROR_STOP=1 -c "$*" 2>&1
}

# ---- 5. the smoke test ----
say "smoke test"
check "CREATE EXTENSION zklock" "" "$(psql_ postgres 'CREATE EXTENSION zklock')"
check "the default version is ${VERSION%%-*} without its patch level" \
    "$(sed -E 's/^([0-9]+\.[0-9]+)\..*/\1/' <<<"${VERSION%%-*}")" \
    "$(psql_ postgres "SELECT extversion FROM pg_extension WHERE extname = 'zklock'")"
state=""
for _ in $(seq 1 60); do
    state=$(psql_ postgres 'SELECT state FROM zk_status()')
    [ "$state" = connected ] && break
    sleep 0.5
done
check "zk_status(): the worker is connected to ZooKeeper" connected "$state"
check "zk_status(): its pid is the zklock worker's" "zklock worker" \
    "$(psql_ postgres "SELECT backend_type FROM pg_stat_activity WHERE pid = (SELECT worker_pid FROM zk_status())")"

# session A holds a session lock (psql kept open by the sleep)
( printf '%s\n' "SELECT zk_session_lock('deb-smoke', '20 seconds');" "SELECT pg_sleep(120);" |
    runuser -u postgres -- "$PGBIN/psql" -h "$PGHOME" -p "$PGPORT" -U postgres -d postgres -XAtq \
        >"$WORK/session-a.log" 2>&1 ) &
held=""
for _ in $(seq 1 60); do
    held=$(psql_ postgres "SELECT count(*) FROM zk_locks WHERE name = 'deb-smoke' AND state = 'held'")
    [ "$held" = 1 ] && break
    sleep 0.5
done
check "session A holds zk_session_lock('deb-smoke')" 1 "$held"
check "session B is refused it (zk_try_lock)" f "$(psql_ postgres "SELECT zk_try_lock('deb-smoke')")"
check "zk_lock_holders reads one holder from ZooKeeper" 1 \
    "$(psql_ postgres "SELECT count(*) FROM zk_lock_holders('deb-smoke') WHERE state = 'held'")"
psql_ postgres "SELECT pg_terminate_backend(pid) FROM zk_locks WHERE name = 'deb-smoke'" >/dev/null
got=""
for _ in $(seq 1 40); do
    got=$(psql_ postgres "SELECT zk_try_lock('deb-smoke')")
    [ "$got" = t ] && break
    sleep 0.25
done
check "once A's backend is gone, B gets the lock" t "$got"
wait

check "an item enqueued and committed" "" \
    "$(psql_ postgres "BEGIN; SELECT zk_enqueue('deb-smoke', 'hello from the package'); COMMIT;" | grep -v '^$')"
check "dequeued once" "hello from the package" \
    "$(psql_ postgres "SELECT body FROM zk_dequeue('deb-smoke', '10 seconds')")"
check "a second dequeue finds nothing" 0 "$(psql_ postgres "SELECT count(*) FROM zk_try_dequeue('deb-smoke')")"
check "the queue is empty" 0 "$(psql_ postgres "SELECT zk_queue_length('deb-smoke')")"
check "zk_status() counted the grants" t "$(psql_ postgres 'SELECT grants >= 2 FROM zk_status()')"

# the update path ships too: 1.0, then ALTER EXTENSION UPDATE
psql_ postgres 'CREATE DATABASE deb_update' >/dev/null
check "1.0 is installable from the package" "" "$(psql_ deb_update "CREATE EXTENSION zklock VERSION '1.0'")"
psql_ deb_update 'ALTER EXTENSION zklock UPDATE' >/dev/null
check "ALTER EXTENSION zklock UPDATE reaches the default version" t \
    "$(psql_ deb_update "SELECT extversion = default_version FROM pg_extension, pg_available_extensions WHERE extname = 'zklock' AND name = 'zklock'")"

if [ "$FAILED" -ne 0 ]; then
    echo "----- tail of the server log -----"
    tail -n 40 "$PGHOME/postgresql.log"
fi
exit 0
