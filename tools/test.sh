#!/usr/bin/env bash
# tools/test.sh - build zklock and run its test suites.
#
#   tools/test.sh            everything: pg_regress suite, the TAP suite, then the
#                            model-based tester (about 60 s, see below)
#   tools/test.sh --pg N [--subset] [MODE ...]
#                            the same (any mode below) against PostgreSQL N:
#                            15 (default) is the one on PATH (Debian 12's);
#                            17 runs the suites inside a Debian 13 root with its
#                            own postgresql-17 and ZooKeeper 3.9, 18 runs them on
#                            this machine with PostgreSQL 18 built from Debian
#                            sid's source; tools/pg.sh makes both once and caches
#                            them (/var/cache/zklock, ZKLOCK_PG_CACHE); root only
#   --zk 3.8|3.9             the ZooKeeper server of every suite: 3.8 (default) is
#                            Debian 12's 3.8.0; 3.9 is ZooKeeper 3.9.6, the release
#                            that keeps acknowledged writes (README, "ZooKeeper
#                            releases"), fetched once by tools/pg.sh zk3.9 (root
#                            only; not with --pg 17, whose root runs its own 3.9.3)
#   --subset                 the cross-version selection CI runs on 17 and 18: the
#                            pg_regress suite and the TAP files of SUBSET_TAP below
#                            (locks under faults, the queue's exactly-once run,
#                            barriers, crash restart, kazoo interoperability, wait
#                            events); no model run.  PROVE_TESTS still wins.
#   --load N                 N busy loops (0 to 16) keep the cores busy while the
#                            suites run; without PROVE_TESTS (or --subset) the TAP
#                            files are those of LOAD_TAP below, whose waits a slow
#                            machine stretches most: the tests must wait for
#                            conditions, never assume how long something takes.
#                            CI runs `tools/test.sh --load 2 tap`.
#   tools/test.sh regress    only the pg_regress suite (make installcheck)
#   tools/test.sh tap        only the TAP suite (test/t/*.pl)
#   PROVE_TESTS=test/t/010_lock_contention.pl tools/test.sh tap     one TAP file
#   tools/test.sh faults [SECONDS] [--seed N]
#                            only the randomized fault run (test/faults/run.py):
#                            SECONDS of faults (default 300), then 30 s without,
#                            with a fresh seed (printed) unless --seed; prints
#                            its figures and the checker's verdict
#   tools/test.sh model [SECONDS] [--seed N] [--steps K] [--recipes R,...]
#                            only the model-based random API tester
#                            (test/model/model.py): random histories of calls on
#                            two clusters and kazoo checked against reference
#                            models, for SECONDS (default 60), with a fresh seed
#                            (printed) unless --seed; --seed S --steps K replays
#                            the history a failure printed; prints the figures
#                            and any failing history shrunk
#
# As root (CI, fresh Debian 12): installs the packages (tools/deps.sh), copies
# the tree to a fresh directory under /tmp, builds it there (`make ZKLOCK_WERROR=1`:
# the Makefile's warning flags become errors), installs it (`make install`), gives the
# copy to the `postgres` user and runs the suites as that user (initdb refuses
# root).  The source tree itself is not modified.
#
# As another user: the packages and the extension must already be installed
# (`make install` as root); the suites run in place, in this tree.
#
# The pg_regress suite needs a ZooKeeper on the port of test/regress.conf
# (127.0.0.1:29181), which this script starts (tools/zk.sh) and stops.  The
# TAP tests start their own ZooKeepers and find the tree through ZKLOCK_SRC,
# ZKLOCK_ZK_SH and ZKLOCK_ZKQ.  Every ZooKeeper and PostgreSQL left behind
# under the test tree is stopped at the end, even after a failure.
#
# Everything (no argument) also runs the model-based tester for
# ZKLOCK_MODEL_SECONDS (default 60) with a fresh seed, after the TAP suite.
#
# The last line of output is always "zklock: N passed, M failed" (pg_regress
# tests plus TAP test files, plus one for the model-based tester and one for
# the fault run when they run; a build failure counts as one failed test);
# the exit status is 0 only if nothing failed.
#
# The fault run's servers, data and histories are in tmp_check/faults of the
# test tree, the model tester's in tmp_check/model (kept, like the tree, when
# the run fails).
#
# Environment: PROVE_TESTS (TAP files, relative to the tree or bare names),
# PROVE_FLAGS (extra flags for prove, e.g. --verbose),
# ZKLOCK_REGRESS_TIMEOUT (s, default 300), ZKLOCK_TAP_TIMEOUT (s, default 3000,
# for each of the two prove runs),
# ZKLOCK_TAP_JOBS (TAP files run at once, default 2; files marked
# "# zklock-tap: serial" run alone after the others; 1: all one at a time),
# ZKLOCK_QUEUE_FAULT_SECONDS (load seconds of 320_queue_exactly_once.pl, default 45),
# ZKLOCK_CRON_MINUTES (minute slots of 440_pg_cron.pl, default 2),
# ZKLOCK_FAULT_SECONDS (seconds of faults of 900_faults.pl, default 60),
# ZKLOCK_MODEL_SECONDS (seconds of the model-based tester in a full run, default 60),
# ZKLOCK_FAULTS_TXNLOGS (1: the fault run's checker reads ZooKeeper's transaction logs
# even when it found no anomaly; it always does when it found one),
# ZKLOCK_KEEP=1 keeps the /tmp copy even when everything passed.

set -u
set -o pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# --pg N and --subset, before the mode
PG_MAJOR=15
SUBSET=""
LOAD=0
LOAD_PIDS=""
# the TAP files of --load: those whose waits a slow machine stretches most
LOAD_TAP="020_lock_cancel_timeout.pl 210_short_timeouts.pl 230_lock_watches.pl 250_frozen_worker.pl
    255_liveness.pl 260_crash_restart.pl 320_queue_exactly_once.pl"
# the TAP files of --subset
SUBSET_TAP="040_lock_zookeeper_faults.pl 130_lock_kazoo.pl 155_wait_events.pl 260_crash_restart.pl
    310_queue_kazoo.pl 320_queue_exactly_once.pl 400_barrier.pl 420_barrier_faults.pl"
while [ $# -gt 0 ]; do
    case $1 in
        --pg)
            [ $# -ge 2 ] || { echo "tools/test.sh: --pg needs a version (15, 17 or 18)" >&2; exit 2; }
            PG_MAJOR=$2
            shift 2 ;;
        --pg=*) PG_MAJOR=${1#--pg=}; shift ;;
        --subset) SUBSET=1; shift ;;
        --zk)
            [ $# -ge 2 ] || { echo "tools/test.sh: --zk needs a version (3.8 or 3.9)" >&2; exit 2; }
            ZK_VERSION=$2
            shift 2 ;;
        --zk=*) ZK_VERSION=${1#--zk=}; shift ;;
        --load)
            [ $# -ge 2 ] || { echo "tools/test.sh: --load needs a number of busy loops" >&2; exit 2; }
            LOAD=$2
            shift 2 ;;
        --load=*) LOAD=${1#--load=}; shift ;;
        *) break ;;
    esac
done
case $PG_MAJOR in
    15|17|18) ;;
    *) echo "tools/test.sh: --pg $PG_MAJOR: PostgreSQL 15, 17 and 18 are supported" >&2; exit 2 ;;
esac
ZK_VERSION=${ZK_VERSION:-3.8}
case $ZK_VERSION in
    3.8|3.9) export ZK_VERSION ;;
    *) echo "tools/test.sh: --zk $ZK_VERSION: ZooKeeper 3.8 and 3.9 are supported" >&2; exit 2 ;;
esac
if [ "$ZK_VERSION" = 3.9 ] && [ "$PG_MAJOR" = 17 ]; then
    echo "tools/test.sh: --zk 3.9 with --pg 17: the Debian 13 root runs its own ZooKeeper 3.9.3; use --pg 15 or 18" >&2
    exit 2
fi
case $LOAD in
    ''|*[!0-9]*) echo "tools/test.sh: --load $LOAD: a number of busy loops (0 to 16)" >&2; exit 2 ;;
esac
[ "$LOAD" -le 16 ] || { echo "tools/test.sh: --load $LOAD: at most 16 busy loops" >&2; exit 2; }
PASS_OPTS=(--pg "$PG_MAJOR")
[ -n "$SUBSET" ] && PASS_OPTS+=(--subset)
[ "$ZK_VERSION" != 3.8 ] && PASS_OPTS+=(--zk "$ZK_VERSION")
[ "$LOAD" -gt 0 ] && PASS_OPTS+=(--load "$LOAD")
if [ "$LOAD" -gt 0 ] && [ -z "$SUBSET" ] && [ -z "${PROVE_TESTS:-}" ]; then
    PROVE_TESTS=$(echo $LOAD_TAP)
    export PROVE_TESTS
fi
if [ -n "$SUBSET" ] && [ -z "${PROVE_TESTS:-}" ]; then
    PROVE_TESTS=$(echo $SUBSET_TAP)
    export PROVE_TESTS
fi
ARGS=("$@")
MODE=${1:-all}
case $MODE in
    all|regress|tap) ;;
    faults) ;;
    model) ;;
    -h|--help|help) sed -n '2,77s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "usage: tools/test.sh [--pg 15|17|18] [--subset] [--load N] [regress|tap|faults [SECONDS] [--seed N]|model [SECONDS] [--seed N] [--steps K]]" >&2; exit 2 ;;
esac
FAULT_SECONDS=""
FAULT_ARGS=()
MODEL_ARGS=()
MODEL_SECONDS=${ZKLOCK_MODEL_SECONDS:-60}
if [ "$MODE" = model ]; then
    shift
    if [ $# -gt 0 ] && [[ $1 != -* ]]; then
        MODEL_SECONDS=$1
        shift
    fi
    MODEL_ARGS=("$@")
    case $MODEL_SECONDS in
        ''|*[!0-9]*|0) echo "usage: tools/test.sh model [SECONDS] [--seed N] [--steps K]  (SECONDS: a positive integer)" >&2; exit 2 ;;
    esac
    while [ $# -gt 0 ]; do
        case $1 in
            --seed|--steps|--recipes|--histories|--mode|--shrink-seconds)
                [ $# -ge 2 ] || { echo "tools/test.sh model: $1 needs a value" >&2; exit 2; }
                shift 2 ;;
            --verbose) shift ;;
            *) echo "tools/test.sh model: unknown option $1" >&2; exit 2 ;;
        esac
    done
elif [ "$MODE" = faults ]; then
    shift
    FAULT_SECONDS=300
    if [ $# -gt 0 ] && [[ $1 != -* ]]; then
        FAULT_SECONDS=$1
        shift
    fi
    case $FAULT_SECONDS in
        ''|*[!0-9]*|0) echo "usage: tools/test.sh faults [SECONDS] [--seed N]  (SECONDS: a positive integer)" >&2; exit 2 ;;
    esac
    if [ $# -eq 2 ] && [ "$1" = --seed ] && [[ $2 =~ ^[0-9]+$ ]]; then
        FAULT_ARGS=(--seed "$2")
    elif [ $# -ne 0 ]; then
        echo "usage: tools/test.sh faults [SECONDS] [--seed N]" >&2; exit 2
    fi
else
    [ $# -le 1 ] || { echo "usage: tools/test.sh [regress|tap]" >&2; exit 2; }
fi

REGRESS_TIMEOUT=${ZKLOCK_REGRESS_TIMEOUT:-300}
TAP_TIMEOUT=${ZKLOCK_TAP_TIMEOUT:-3000}
TAP_JOBS=${ZKLOCK_TAP_JOBS:-2}
case $TAP_JOBS in
    ""|*[!0-9]*|0) echo "test.sh: ZKLOCK_TAP_JOBS must be a positive integer" >&2; exit 2 ;;
esac
PYTHON=${ZKLOCK_PYTHON:-/usr/bin/python3}

PASSED=0
FAILED=0

say() { printf '\n=== %s  %s\n' "$(date +%T)" "$*"; }

summary() {
    echo
    echo "zklock: $PASSED passed, $FAILED failed"
}

# Stop every ZooKeeper (zk.pid) and PostgreSQL (postmaster.pid) left running
# below directory $1.  Both checks look at the process's command line, so a
# stale pid file never hits an unrelated process.
sweep() {
    local root=$1 f d pid
    [ -d "$root" ] || return 0
    while IFS= read -r f; do
        d=$(dirname "$f")
        bash "$SRC/tools/zk.sh" status "$d" >/dev/null 2>&1 || continue
        echo "test.sh: stopping leftover ZooKeeper in $d"
        bash "$SRC/tools/zk.sh" kill "$d" >/dev/null 2>&1
    done < <(find "$root" -name zk.pid -type f 2>/dev/null)
    while IFS= read -r f; do
        d=$(dirname "$f")
        pid=$(head -n 1 "$f" 2>/dev/null)
        case $pid in ''|*[!0-9]*) continue ;; esac
        [ -r "/proc/$pid/cmdline" ] || continue
        tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF "$d" || continue
        echo "test.sh: stopping leftover PostgreSQL in $d (pid $pid)"
        kill -QUIT "$pid" 2>/dev/null
        for _ in $(seq 1 50); do
            [ -d "/proc/$pid" ] || break
            sleep 0.1
        done
        [ -d "/proc/$pid" ] && kill -KILL "$pid" 2>/dev/null
    done < <(find "$root" -name postmaster.pid -type f 2>/dev/null)
}

# make, failing on any compiler warning: ZKLOCK_WERROR=1 makes the Makefile's
# warning flags errors (-Werror); then the exported symbols (tools/symbols.sh),
# the layers (tools/layers.py: no circle between src/'s folders, the base
# names no recipe) and the released SQL scripts (tools/frozen.sh)
build() {
    local dir=$1
    say "build (make ZKLOCK_WERROR=1 in $dir)"
    if ! make -C "$dir" -j2 ZKLOCK_WERROR=1 </dev/null 2>&1; then
        echo "test.sh: make failed (with -Werror: a compiler warning fails the build)" >&2
        return 1
    fi
    echo "build: no warnings"
    # every symbol the library exports is zk_ or PostgreSQL's
    if ! bash "$dir/tools/symbols.sh" "$dir/zklock.so"; then
        echo "test.sh: the build exports a symbol that is not zk_ (tools/symbols.sh)" >&2
        return 1
    fi
    # layers only point down (src/README, "Layers")
    if ! python3 "$dir/tools/layers.py"; then
        echo "test.sh: the code's layers point up or go round (tools/layers.py)" >&2
        return 1
    fi
    # released SQL scripts are byte-identical to their tags (in the checkout)
    bash "$dir/tools/frozen.sh" "$ORIG_SRC" || return 1
}

install_ext() {
    local dir=$1 log
    log=$(mktemp /tmp/zklock-install.XXXXXX.log)
    say "install (make install)"
    if ! make -C "$dir" install </dev/null >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "test.sh: make install failed" >&2
        return 1
    fi
    rm -f "$log"
    echo "installed into $(pg_config --pkglibdir) and $(pg_config --sharedir)/extension"
}

#
# The suites (run in $SRC, as a non-root user)
#

# run_timed LOG SECONDS CMD...: run CMD (in $SRC) with a time limit, output
# shown live and kept in LOG; returns CMD's status (124 on timeout).  CMD runs
# in the background under timeout(1), which gives it a process group of its
# own: on SIGINT/SIGTERM the trap below passes SIGTERM on to that group, and
# on timeout timeout(1) kills the group itself.
TIMED_PID=""
run_timed() {
    local log=$1 t=$2 rc tail_pid
    shift 2
    : >"$log"
    (cd "$SRC" && exec timeout -k 20 "$t" "$@") </dev/null >"$log" 2>&1 &
    TIMED_PID=$!
    tail -n +1 -f --pid="$TIMED_PID" "$log" &
    tail_pid=$!
    wait "$TIMED_PID"
    rc=$?
    TIMED_PID=""
    wait "$tail_pid" 2>/dev/null
    return $rc
}

on_signal() {
    if [ -n "$TIMED_PID" ]; then
        echo "test.sh: interrupted, stopping the running suite" >&2
        kill -TERM "$TIMED_PID" 2>/dev/null
        wait "$TIMED_PID" 2>/dev/null
        TIMED_PID=""
    fi
    exit 130
}

REGRESS_ZKDIR=""

stop_regress_zk() {
    if [ -n "$REGRESS_ZKDIR" ]; then
        bash "$SRC/tools/zk.sh" stop "$REGRESS_ZKDIR" >/dev/null 2>&1 ||
            bash "$SRC/tools/zk.sh" kill "$REGRESS_ZKDIR" >/dev/null 2>&1
        rm -rf "$REGRESS_ZKDIR"
        REGRESS_ZKDIR=""
    fi
}

run_regress() {
    local port log rc ok bad
    say "pg_regress suite (make installcheck)"
    port=$(sed -n "s/^[[:space:]]*zklock\.hosts[[:space:]]*=[[:space:]]*'[^:']*:\([0-9]*\).*/\1/p" \
        "$SRC/test/regress.conf" | head -n 1)
    port=${port:-29181}
    REGRESS_ZKDIR=$(mktemp -d /tmp/zklock-regress-zk.XXXXXX)
    if ! bash "$SRC/tools/zk.sh" start "$REGRESS_ZKDIR" "$port"; then
        echo "test.sh: could not start ZooKeeper on 127.0.0.1:$port for pg_regress" >&2
        stop_regress_zk
        FAILED=$((FAILED + 1))
        return
    fi
    log=$(mktemp /tmp/zklock-regress.XXXXXX.log)
    run_timed "$log" "$REGRESS_TIMEOUT" make installcheck TAP_TESTS=
    rc=$?
    stop_regress_zk
    [ "$rc" -eq 124 ] && echo "test.sh: pg_regress suite timed out after ${REGRESS_TIMEOUT}s" >&2
    # PostgreSQL 15 pg_regress: "test NAME ... ok  12 ms" (or "     NAME ..." in a group);
    # 16 and later print TAP: "ok 1  - NAME  12 ms" ("+ NAME" in a group), "not ok 2 - ..."
    ok=$(grep -cE '^(test| ) *[^ ]+ +\.\.\. +(ok|failed \(ignored\))|^ok [0-9]+ +[-+] ' "$log")
    bad=$(grep -cE '^(test| ) *[^ ]+ +\.\.\. +FAILED|^not ok [0-9]+ +[-+] ' "$log")
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
        bad=1  # the suite itself failed (temp instance, timeout...)
    fi
    PASSED=$((PASSED + ok))
    FAILED=$((FAILED + bad))
    if [ "$rc" -ne 0 ] || [ "$bad" -ne 0 ]; then
        if [ -s "$SRC/regression.diffs" ]; then
            echo
            echo "----- regression.diffs -----"
            head -n 400 "$SRC/regression.diffs"
        fi
        if [ -f "$SRC/tmp_regress/log/postmaster.log" ]; then
            echo "----- tail of tmp_regress/log/postmaster.log -----"
            tail -n 60 "$SRC/tmp_regress/log/postmaster.log"
        fi
    fi
    echo "pg_regress: $ok passed, $bad failed"
    rm -f "$log"
}

# TAP files to run, relative to $SRC
tap_files() {
    local t f out=()
    if [ -n "${PROVE_TESTS:-}" ]; then
        for t in $PROVE_TESTS; do
            case $t in "$ORIG_SRC"/*) t=${t#"$ORIG_SRC"/} ;; esac
            if [ -f "$SRC/$t" ]; then
                out+=("$t")
            elif [ -f "$SRC/test/t/$t" ]; then
                out+=("test/t/$t")
            elif [ -f "$SRC/test/t/$t.pl" ]; then
                out+=("test/t/$t.pl")
            else
                echo "test.sh: no TAP test $t" >&2
                return 1
            fi
        done
    else
        for f in "$SRC"/test/t/*.pl; do
            [ -f "$f" ] && out+=("test/t/${f##*/}")
        done
    fi
    echo "${out[*]:-}"
}

run_tap() {
    local files n f par=() ser=()
    say "TAP suite (prove test/t)"
    if ! files=$(tap_files); then
        FAILED=$((FAILED + 1))
        return
    fi
    if [ -z "$files" ]; then
        echo "no TAP tests in test/t"
        return
    fi
    n=$(wc -w <<<"$files")
    export ZKLOCK_SRC=$SRC
    export ZKLOCK_ZK_SH=$SRC/tools/zk.sh
    export ZKLOCK_ZKQ=$SRC/test/zkq.py
    export ZKLOCK_PYTHON=$PYTHON
    export PERL5LIB="$SRC/test/t${PERL5LIB:+:$PERL5LIB}"
    # Files marked "# zklock-tap: serial" load the machine or time their
    # faults against the session timeout: they run alone, after the others,
    # which run TAP_JOBS at a time (each test has its own servers on
    # reserved ports)
    for f in $files; do
        if [ "$TAP_JOBS" -gt 1 ] && grep -q '^# zklock-tap: serial' "$SRC/$f"; then
            ser+=("$f")
        else
            par+=("$f")
        fi
    done
    if [ ${#par[@]} -gt 0 ]; then
        tap_phase "$TAP_JOBS" "${par[@]}"
    fi
    if [ ${#ser[@]} -gt 0 ]; then
        say "TAP suite, one at a time: ${ser[*]}"
        tap_phase 1 "${ser[@]}"
    fi
    echo "TAP: $TAP_OK passed, $TAP_BAD failed ($n files)"
}

TAP_OK=0
TAP_BAD=0

# One prove run of the files $2...; $1 jobs at a time
tap_phase() {
    local jobs=$1 files n log rc ok bad total f name target
    shift
    files="$*"
    n=$#
    # PGXS has no prove_installcheck target of its own; `installcheck` with
    # REGRESS emptied runs just the TAP part
    if (cd "$SRC" && make -n prove_installcheck >/dev/null 2>&1); then
        target=(prove_installcheck)
    else
        target=(installcheck REGRESS=)
    fi
    # PGXS's Makefile.global (included at the end of our Makefile) resets
    # PROVE_FLAGS, so it is given on the command line, where it wins
    local pflags="-I ./test/t --timer"
    [ "$jobs" -gt 1 ] && pflags="$pflags -j$jobs"
    pflags="$pflags${PROVE_FLAGS:+ $PROVE_FLAGS}"
    log=$(mktemp /tmp/zklock-tap.XXXXXX.log)
    run_timed "$log" "$TAP_TIMEOUT" make "${target[@]}" "PROVE_TESTS=$files" "PROVE_FLAGS=$pflags"
    rc=$?
    [ "$rc" -eq 124 ] && echo "test.sh: TAP suite timed out after ${TAP_TIMEOUT}s" >&2
    sweep "$SRC/tmp_check"
    total=$(sed -n 's/^Files=\([0-9]*\),.*/\1/p' "$log" | tail -n 1)
    local failed_files=()
    if [ -n "$total" ]; then
        # prove's "Test Summary Report" names each failed file
        mapfile -t failed_files < <(sed -n 's/^\([^ ]*\.pl\) *(Wstat:.*/\1/p' "$log" | sort -u)
        bad=${#failed_files[@]}
        if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
            bad=1
        fi
        ok=$((total - bad))
        [ $ok -ge 0 ] || ok=0
    else
        # prove did not finish (timeout, crash): the files reported ok passed
        ok=$(grep -cE '^(\[[0-9:]+\] )?[^ ]+\.pl \.+ ok' "$log")
        bad=$((n - ok))
        [ $bad -ge 1 ] || bad=1
        for f in $files; do
            grep -qE "^(\\[[0-9:]+\\] )?$f \\.+ ok" "$log" || failed_files+=("$f")
        done
    fi
    PASSED=$((PASSED + ok))
    FAILED=$((FAILED + bad))
    TAP_OK=$((TAP_OK + ok))
    TAP_BAD=$((TAP_BAD + bad))
    if [ "$bad" -ne 0 ]; then
        if [ ${#failed_files[@]} -eq 0 ]; then
            # a bailout: prove names no file (and reports the one it stopped
            # in as "ok" without a time); those that wrote a log but were
            # never reported ok with their time are the ones it stopped in
            for l in "$SRC"/tmp_check/log/regress_log_*; do
                [ -f "$l" ] || continue
                name=${l##*/regress_log_}
                grep -qE "^(\\[[0-9:]+\\] )?test/t/$name\\.pl \\.+ ok +[0-9]+ ms" "$log" ||
                    failed_files+=("test/t/$name.pl")
            done
        fi
        for f in "${failed_files[@]}"; do
            name=${f##*/}
            name=${name%.pl}
            if [ -f "$SRC/tmp_check/log/regress_log_$name" ]; then
                echo
                echo "----- tail of tmp_check/log/regress_log_$name -----"
                tail -n 100 "$SRC/tmp_check/log/regress_log_$name"
            fi
            for l in "$SRC"/tmp_check/log/"${name}"_*.log; do
                [ -f "$l" ] || continue
                echo
                echo "----- tail of tmp_check/log/${l##*/} -----"
                tail -n 40 "$l"
            done
        done
        [ ${#failed_files[@]} -gt 0 ] || {
            echo "----- tmp_check/log -----"
            ls -l "$SRC/tmp_check/log" 2>/dev/null
        }
        # the next prove run starts by removing tmp_check: keep this one's
        # logs (every server's, ZooKeeper's) for whoever reads the failure
        TAP_PHASE_LOGS=$((${TAP_PHASE_LOGS:-0} + 1))
        if [ -d "$SRC/tmp_check/log" ]; then
            rm -rf "$SRC/failed-logs.$TAP_PHASE_LOGS"
            cp -a "$SRC/tmp_check/log" "$SRC/failed-logs.$TAP_PHASE_LOGS"
            echo "test.sh: the logs of this prove run are kept in $SRC/failed-logs.$TAP_PHASE_LOGS"
        fi
    fi
    rm -f "$log"
}

# The randomized fault run: $FAULT_SECONDS s of faults, 30 s quiet, then the
# checker; counts as one test (passed when the checker found no anomaly)
run_faults() {
    local dir log rc
    say "fault run (test/faults/run.py: ${FAULT_SECONDS}s of faults, 30s quiet)"
    dir=$SRC/tmp_check/faults
    rm -rf "$dir"
    mkdir -p "$dir" || { FAILED=$((FAILED + 1)); return; }
    export ZKLOCK_ZK_SH=$SRC/tools/zk.sh
    export ZKLOCK_ZKQ=$SRC/test/zkq.py
    export ZKLOCK_PYTHON=$PYTHON
    log=$(mktemp /tmp/zklock-faults.XXXXXX.log)
    run_timed "$log" $((FAULT_SECONDS + 900)) "$PYTHON" "$SRC/test/faults/run.py" \
        --dir "$dir" --seconds "$FAULT_SECONDS" --quiet 30 ${FAULT_ARGS[@]+"${FAULT_ARGS[@]}"}
    rc=$?
    sweep "$SRC/tmp_check"
    case $rc in
        0) PASSED=$((PASSED + 1)); echo "faults: no anomaly" ;;
        1) FAILED=$((FAILED + 1)); echo "faults: the checker found anomalies (run directory $dir)" ;;
        124) FAILED=$((FAILED + 1)); echo "test.sh: the fault run timed out" >&2 ;;
        *) FAILED=$((FAILED + 1)); echo "faults: the run did not complete (exit $rc, run directory $dir)" ;;
    esac
    rm -f "$log"
}

# The model-based random API tester: $MODEL_SECONDS s of random histories
# (plus the shrinking of a failing one); counts as one test (passed when no
# anomaly was found)
run_model() {
    local dir log rc
    say "model-based tester (test/model/model.py: ${MODEL_SECONDS}s${MODEL_ARGS[*]:+ ${MODEL_ARGS[*]}})"
    dir=$SRC/tmp_check/model
    rm -rf "$dir"
    mkdir -p "$dir" || { FAILED=$((FAILED + 1)); return; }
    export ZKLOCK_PYTHON=$PYTHON
    log=$(mktemp /tmp/zklock-model.XXXXXX.log)
    run_timed "$log" $((MODEL_SECONDS + 600)) "$PYTHON" "$SRC/test/model/model.py" \
        --dir "$dir" --seconds "$MODEL_SECONDS" ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"}
    rc=$?
    sweep "$SRC/tmp_check"
    case $rc in
        0) PASSED=$((PASSED + 1)); echo "model: no anomaly" ;;
        1) FAILED=$((FAILED + 1)); echo "model: anomalies found (run directory $dir)" ;;
        124) FAILED=$((FAILED + 1)); echo "test.sh: the model-based tester timed out" >&2 ;;
        *) FAILED=$((FAILED + 1)); echo "model: the run did not complete (exit $rc, run directory $dir)" ;;
    esac
    rm -f "$log"
}

# --load N: N busy loops (their own processes) for as long as the suites run
load_start() {
    local i
    [ "$LOAD" -gt 0 ] || return 0
    say "load: $LOAD busy loops while the suites run"
    for ((i = 0; i < LOAD; i++)); do
        bash -c 'while :; do :; done' &
        LOAD_PIDS="$LOAD_PIDS $!"
    done
}

load_stop() {
    [ -n "$LOAD_PIDS" ] || return 0
    kill $LOAD_PIDS 2>/dev/null
    wait $LOAD_PIDS 2>/dev/null
    LOAD_PIDS=""
}

run_suites() {
    load_start
    case $MODE in
        all) run_regress; run_tap; [ -n "$SUBSET" ] || run_model ;;
        regress) run_regress ;;
        tap) run_tap ;;
        faults) run_faults ;;
        model) run_model ;;
    esac
    load_stop
}

#
# Entry points
#

ORIG_SRC=${ZKLOCK_ORIG_SRC:-$SRC}

if [ -n "${ZKLOCK_TEST_INNER:-}" ]; then
    # re-invoked by the root part below, as postgres, in the copy
    trap 'load_stop; stop_regress_zk; sweep "$SRC"' EXIT
    trap on_signal INT TERM
    run_suites
    echo "$PASSED $FAILED" >"$ZKLOCK_TEST_RESULT"
    exit 0
fi

# --pg 17 on the host: the whole run (build, install, suites) happens inside
# the Debian 13 root of tools/pg.sh, with that system's PostgreSQL 17 and
# ZooKeeper, from a copy of this tree in the root's /tmp
CHILD_PID=""
run_in_root() {
    local root copy rc v envs=()
    if [ "$(id -u)" -ne 0 ]; then
        echo "test.sh: --pg 17 runs in a Debian 13 root (chroot): run it as root" >&2
        FAILED=1; summary; exit 1
    fi
    say "PostgreSQL 17: the Debian 13 root (tools/pg.sh 17)"
    if ! root=$(bash "$SRC/tools/pg.sh" 17); then
        FAILED=1; summary; exit 1
    fi
    root=$(tail -n 1 <<<"$root")
    # one run in the root at a time (they share its mounts)
    exec 9>"$root/.zklock-run.lock"
    flock 9
    copy=$(mktemp -d "$root/tmp/zklock-src.XXXXXX") || { FAILED=1; summary; exit 1; }
    trap 'rm -rf "$copy"; bash "$SRC/tools/pg.sh" umount "$root"' EXIT
    trap '[ -n "$CHILD_PID" ] && kill -TERM "$CHILD_PID" 2>/dev/null; wait; exit 130' INT TERM
    tar -C "$SRC" -cf - \
        --exclude=./.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
        --exclude=./tmp_check --exclude='./failed-logs.*' --exclude=./tmp_regress --exclude=./results \
        --exclude=./regression.diffs --exclude=./regression.out --exclude=__pycache__ \
        . | tar -C "$copy" -xf - || { echo "test.sh: cannot copy the tree to $copy" >&2; FAILED=1; summary; exit 1; }
    bash "$SRC/tools/pg.sh" mount "$root" || { FAILED=1; summary; exit 1; }
    # the settings of this run go in with it
    for v in $(compgen -e); do
        case $v in ZKLOCK_*|PROVE_*|ZK_*|CI) envs+=("$v=${!v}") ;; esac
    done
    echo "test.sh: running tools/test.sh ${PASS_OPTS[*]} ${ARGS[*]} in $root (chroot)"
    chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        ${envs[@]+"${envs[@]}"} ZKLOCK_IN_PG_ROOT=17 ZKLOCK_ORIG_SRC="$SRC" \
        bash "/tmp/${copy##*/}/tools/test.sh" "${PASS_OPTS[@]}" ${ARGS[@]+"${ARGS[@]}"} </dev/null &
    CHILD_PID=$!
    wait "$CHILD_PID"
    rc=$?
    CHILD_PID=""
    [ "$rc" -eq 0 ] || echo "test.sh: (paths above are inside the root $root)"
    exit "$rc"
}

if [ "$PG_MAJOR" = 17 ] && [ -z "${ZKLOCK_IN_PG_ROOT:-}" ]; then
    run_in_root
fi

# The PostgreSQL of this run: 15 is the one on PATH; 17 (inside its root)
# is Debian 13's; 18 is tools/pg.sh's build
select_pg() {
    PG_BIN=""
    case $PG_MAJOR in
        17) PG_BIN=/usr/lib/postgresql/17/bin ;;
        18)
            if [ "$(id -u)" -eq 0 ]; then
                say "PostgreSQL 18 (tools/pg.sh 18)"
                PG_BIN=$(bash "$SRC/tools/pg.sh" 18) || { FAILED=$((FAILED + 1)); exit 1; }
                PG_BIN=$(tail -n 1 <<<"$PG_BIN")
            else
                PG_BIN=${ZKLOCK_PG_CACHE:-/var/cache/zklock}/pg18/install/bin
            fi ;;
    esac
    if [ -n "$PG_BIN" ]; then
        if [ ! -x "$PG_BIN/pg_config" ]; then
            echo "test.sh: no PostgreSQL $PG_MAJOR in $PG_BIN (run tools/test.sh --pg $PG_MAJOR as root once)" >&2
            FAILED=$((FAILED + 1)); exit 1
        fi
        PATH=$PG_BIN:$PATH
        export PATH
    fi
    local v
    v=$(pg_config --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
    if [ "$v" != "$PG_MAJOR" ]; then
        echo "test.sh: pg_config on PATH is PostgreSQL ${v:-(none)}, not $PG_MAJOR (--pg $PG_MAJOR)" >&2
        FAILED=$((FAILED + 1)); exit 1
    fi
}

if [ "$(id -u)" -ne 0 ]; then
    # unprivileged: run in place, with what is installed
    trap 'rc=$?; load_stop; stop_regress_zk; sweep "$SRC"; [ $rc -ne 0 ] && [ "$FAILED" -eq 0 ] && FAILED=1; summary' EXIT
    trap on_signal INT TERM
    if [ -z "${ZKLOCK_IN_PG_ROOT:-}" ] && ! bash "$SRC/tools/deps.sh"; then
        FAILED=$((FAILED + 1))
        exit 1
    fi
    select_pg
    if ! build "$SRC"; then
        FAILED=$((FAILED + 1))
        exit 1
    fi
    lib=$(pg_config --pkglibdir)/zklock.so
    if [ ! -f "$lib" ] || [ ! -f "$(pg_config --sharedir)/extension/zklock.control" ]; then
        echo "test.sh: zklock is not installed; run tools/test.sh as root, or make install as root" >&2
        FAILED=$((FAILED + 1))
        exit 1
    fi
    if [ "$SRC/zklock.so" -nt "$lib" ]; then
        echo "test.sh: warning: this tree's zklock.so is newer than the installed $lib (make install as root?)" >&2
    fi
    run_suites
    [ "$FAILED" -eq 0 ]
    exit
fi

# root
WORK=""
cleanup_root() {
    local rc=$?
    # an interrupted or otherwise aborted run is not a success
    [ "$rc" -ne 0 ] && [ "$FAILED" -eq 0 ] && FAILED=1
    if [ -n "$WORK" ]; then
        sweep "$WORK"
        if [ "$FAILED" -eq 0 ] && [ "$rc" -eq 0 ] && [ -z "${ZKLOCK_KEEP:-}" ]; then
            rm -rf "$WORK"
        else
            echo "test.sh: test tree kept in $WORK"
        fi
    fi
    summary
    if [ "$FAILED" -ne 0 ]; then exit 1; fi
    exit "$rc"
}
trap cleanup_root EXIT
trap on_signal INT TERM

if [ -n "${ZKLOCK_IN_PG_ROOT:-}" ]; then
    : # inside the Debian 13 root: tools/pg.sh installed its packages
else
    say "dependencies (tools/deps.sh)"
    if ! bash "$SRC/tools/deps.sh"; then
        FAILED=$((FAILED + 1))
        exit 1
    fi
fi
select_pg
if [ "$ZK_VERSION" = 3.9 ]; then
    say "ZooKeeper 3.9.6 (tools/pg.sh zk3.9)"
    if ! bash "$SRC/tools/pg.sh" zk3.9 >/dev/null; then
        FAILED=$((FAILED + 1))
        exit 1
    fi
fi
id postgres >/dev/null 2>&1 || { echo "test.sh: no postgres user" >&2; FAILED=$((FAILED + 1)); exit 1; }

WORK=$(mktemp -d /tmp/zklock-test.XXXXXX)
# a clean copy: no VCS data, no build products or results of earlier runs
tar -C "$SRC" -cf - \
    --exclude=./.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
    --exclude=./tmp_check --exclude='./failed-logs.*' --exclude=./tmp_regress --exclude=./results \
    --exclude=./regression.diffs --exclude=./regression.out --exclude=__pycache__ \
    . | tar -C "$WORK" -xf - || { echo "test.sh: cannot copy the tree to $WORK" >&2; FAILED=$((FAILED + 1)); exit 1; }

if ! build "$WORK"; then
    FAILED=$((FAILED + 1))
    exit 1
fi
if ! install_ext "$WORK"; then
    FAILED=$((FAILED + 1))
    exit 1
fi

chown -R postgres:postgres "$WORK"
chmod 755 "$WORK"
result=$WORK/.zklock-test-result
rm -f "$result"
# the suites, as postgres, in the copy; a PATH without root's private dirs
inner_path=$(dirname "$(command -v pg_config)"):/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin
(cd "$WORK" && runuser -u postgres -- env \
    ZKLOCK_TEST_INNER=1 ZKLOCK_TEST_RESULT="$result" ZKLOCK_ORIG_SRC="$SRC" \
    HOME=/var/lib/postgresql PATH="$inner_path" \
    PROVE_TESTS="${PROVE_TESTS:-}" PROVE_FLAGS="${PROVE_FLAGS:-}" \
    ${ZKLOCK_QUEUE_FAULT_SECONDS:+ZKLOCK_QUEUE_FAULT_SECONDS="$ZKLOCK_QUEUE_FAULT_SECONDS"} \
    ${ZKLOCK_CRON_MINUTES:+ZKLOCK_CRON_MINUTES="$ZKLOCK_CRON_MINUTES"} \
    ${ZKLOCK_FAULT_SECONDS:+ZKLOCK_FAULT_SECONDS="$ZKLOCK_FAULT_SECONDS"} \
    ${ZKLOCK_MODEL_SECONDS:+ZKLOCK_MODEL_SECONDS="$ZKLOCK_MODEL_SECONDS"} \
    ${ZKLOCK_FAULTS_TXNLOGS:+ZKLOCK_FAULTS_TXNLOGS="$ZKLOCK_FAULTS_TXNLOGS"} \
    bash "$WORK/tools/test.sh" "${PASS_OPTS[@]}" "$MODE" ${FAULT_SECONDS:+"$FAULT_SECONDS"} \
        ${FAULT_ARGS[@]+"${FAULT_ARGS[@]}"} \
        $( [ "$MODE" = model ] && echo "$MODEL_SECONDS" ) ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} </dev/null)
inner_rc=$?
if [ -s "$result" ]; then
    read -r p f <"$result"
    PASSED=$((PASSED + p))
    FAILED=$((FAILED + f))
else
    echo "test.sh: the test run as postgres ended abnormally (exit $inner_rc)" >&2
    FAILED=$((FAILED + 1))
fi
[ "$FAILED" -eq 0 ]
exit
