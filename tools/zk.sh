#!/usr/bin/env bash
# tools/zk.sh - run Apache ZooKeeper servers on 127.0.0.1 for zklock's tests and demo.
#
# Uses Debian's jars (package libzookeeper-java, see tools/deps.sh) and runs the
# server class directly with java; nothing is installed or started system-wide.
#
#   tools/zk.sh start DIR [PORT]            standalone server; config DIR/zoo.cfg, data DIR/data,
#                                           log DIR/zk.log, pid DIR/zk.pid.  If DIR/zoo.cfg exists
#                                           it is reused (start after stop = restart, same data);
#                                           PORT is then optional.  Waits until it serves.
#   tools/zk.sh start-ensemble DIR P1 P2 P3 three servers in DIR/s1..s3 on client ports P1..P3
#                                           (quorum port P+1000, election port P+2000); waits
#                                           until all answer and one of them is the leader.
#                                           Each server is then controlled as DIR/sN.
#   tools/zk.sh stop DIR                    SIGTERM, wait until gone (SIGKILL after 20 s)
#   tools/zk.sh kill DIR                    SIGKILL, wait until gone
#   tools/zk.sh freeze DIR                  SIGSTOP
#   tools/zk.sh thaw DIR                    SIGCONT
#   tools/zk.sh status DIR                  exit 0 if the server of DIR is running
#   tools/zk.sh port DIR                    print the client port of DIR
#   tools/zk.sh cmd PORT WORD               send a four-letter word (ruok, srvr, mntr, stat,
#                                           cons, ...) to 127.0.0.1:PORT, print the answer
#   tools/zk.sh classpath                   print the class path the server runs with (ZK_VERSION)
#   (DIR may also be an ensemble directory for stop, kill and status: applies to s1..s3.)
#
# Environment: ZK_VERSION (3.8, the default: Debian 12's zookeeper package; 3.9:
# ZooKeeper 3.9.6, Debian unstable's jars that `tools/pg.sh zk3.9` fetched into
# its cache, run on Debian 12's Java and libraries), ZK_HEAP (default 256m), ZK_START_TIMEOUT (seconds, default 30),
# ZK_CMD_TIMEOUT (seconds to wait for a four-letter word answer, default 5),
# ZK_JAVA (default: java on PATH), ZK_CLASSPATH (default: Debian's jars),
# ZK_JIT (quick: the JVM's first-tier compiler only, fast to start, for tests
# (default); full: the JVM's default tiered JIT, as a production server runs;
# the benchmarks use it), ZK_FORCESYNC (no: the transaction log is not fsynced,
# fast for tests (default); yes: fsync before every reply, ZooKeeper's own
# default and what a production server runs).  Both apply to a new DIR only.
# Works as root and as an unprivileged user (DIR must be writable by the caller).

set -u

ZK_HEAP=${ZK_HEAP:-256m}
ZK_START_TIMEOUT=${ZK_START_TIMEOUT:-30}
ZK_JAVA=${ZK_JAVA:-java}
ZK_JIT=${ZK_JIT:-quick}
ZK_FORCESYNC=${ZK_FORCESYNC:-no}
case $ZK_FORCESYNC in yes|no) ;; *) echo "$(basename "$0"): ZK_FORCESYNC must be yes or no, not '$ZK_FORCESYNC'" >&2; exit 1 ;; esac
J=/usr/share/java
ZK_VERSION=${ZK_VERSION:-3.8}
ZK_LIBS=$J/slf4j-api.jar:$J/slf4j-simple.jar:$J/netty-all.jar:$J/metrics-core.jar:$J/commons-cli.jar:$J/snappy-java.jar
case $ZK_VERSION in
    3.8) ZK_CLASSPATH=${ZK_CLASSPATH:-$J/zookeeper.jar:$J/zookeeper-jute.jar:$ZK_LIBS} ;;
    3.9)
        # the jars of tools/pg.sh zk3.9; jute first: the server jar's manifest
        # names /usr/share/java/zookeeper-jute.jar (3.8's), which the JVM puts
        # right behind it on the class path
        ZK39_JARS=${ZKLOCK_PG_CACHE:-/var/cache/zklock}/zookeeper-3.9/java
        ZK_CLASSPATH=${ZK_CLASSPATH:-$ZK39_JARS/zookeeper-jute.jar:$ZK39_JARS/zookeeper.jar:$ZK_LIBS:$J/commons-io.jar}
        ;;
    *) echo "$(basename "$0"): ZK_VERSION must be 3.8 or 3.9, not '$ZK_VERSION'" >&2; exit 1 ;;
esac

me=$(basename "$0")

die() { echo "$me: $*" >&2; exit 1; }

usage() {
    sed -n '4,/^# Works as root/s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

absdir() {  # canonical absolute path of a directory that may not exist yet
    realpath -m -- "$1"
}

# four-letter word; prints the answer, fails if nothing came back
fourlw() {
    local port=$1 word=$2 out
    out=$(timeout "${ZK_CMD_TIMEOUT:-5}" bash -c '
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf "%s" "$2" >&3
        cat <&3
    ' _ "$port" "$word" 2>/dev/null) || true
    [ -n "$out" ] || return 1
    printf '%s\n' "$out"
}

cfg_get() {  # cfg_get FILE KEY
    sed -n "s/^$2=//p" "$1" | tail -n 1
}

# pid of the running server of DIR, or fail
running_pid() {
    local dir=$1 pid
    [ -f "$dir/zk.pid" ] || return 1
    pid=$(cat "$dir/zk.pid" 2>/dev/null) || return 1
    case $pid in ''|*[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/cmdline" ] || return 1
    # guard against pid reuse: the process must be our java with our config
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF "$dir/zoo.cfg" || return 1
    # a zombie is not running
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
    printf '%s\n' "$pid"
}

# the interesting end of a server's log: its last errors, else its last lines
# (of its latest start only)
log_tail() {
    local last
    last=$(awk '/^===== .* starting ZooKeeper/ { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' \
        "$1/zk.log" 2>/dev/null)
    if grep -q ' ERROR ' <<<"$last"; then
        grep -A 1 ' ERROR ' <<<"$last" | grep -v '^--$' | tail -n 8
    else
        tail -n 20 <<<"$last"
    fi
}

is_ensemble() { [ ! -f "$1/zoo.cfg" ] && [ -f "$1/s1/zoo.cfg" ]; }

write_cfg() {  # write_cfg DIR PORT [extra lines...]
    local dir=$1 port=$2
    shift 2
    mkdir -p "$dir/data" || die "cannot create $dir/data"
    {
        echo "# written by tools/zk.sh"
        echo "tickTime=500"
        echo "initLimit=20"
        echo "syncLimit=10"
        echo "dataDir=$dir/data"
        echo "clientPort=$port"
        echo "clientPortAddress=127.0.0.1"
        echo "minSessionTimeout=1000"
        echo "maxSessionTimeout=60000"
        echo "maxClientCnxns=0"
        echo "4lw.commands.whitelist=*"
        echo "admin.enableServer=false"
        echo "forceSync=$ZK_FORCESYNC"
        echo "preAllocSize=4096"
        echo "autopurge.purgeInterval=0"
        for l in "$@"; do echo "$l"; done
    } >"$dir/zoo.cfg.tmp" && mv "$dir/zoo.cfg.tmp" "$dir/zoo.cfg" || die "cannot write $dir/zoo.cfg"
}

# launch the JVM for DIR (config must exist); does not wait
launch() {
    local dir=$1
    command -v "$ZK_JAVA" >/dev/null 2>&1 || die "java not found (run tools/deps.sh)"
    case $ZK_CLASSPATH in
        $J/zookeeper.jar:*) [ -r "$J/zookeeper.jar" ] || die "$J/zookeeper.jar not found (run tools/deps.sh)" ;;
        "${ZK39_JARS:-/nonexistent}"/*) [ -r "$ZK39_JARS/zookeeper.jar" ] || die "$ZK39_JARS/zookeeper.jar not found (run tools/pg.sh zk3.9 as root)" ;;
    esac
    local jit
    case $ZK_JIT in
        quick) jit=-XX:TieredStopAtLevel=1 ;;
        full) jit=-XX:+TieredCompilation ;;
        *) die "ZK_JIT must be quick or full, not '$ZK_JIT'" ;;
    esac
    rm -f "$dir/zk.pid"
    {
        echo "===== $(date '+%F %T') starting ZooKeeper ($dir/zoo.cfg)"
    } >>"$dir/zk.log"
    # New session so that the server outlives the caller's terminal and process
    # group; stdin/stdout/stderr detached so that callers capturing our output
    # (backticks, IPC::Run) do not wait for the JVM.  The pid file is written by
    # the process that then becomes the JVM.
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$dir/zk.pid" \
        "$ZK_JAVA" -Xmx"$ZK_HEAP" -Xms32m -Xss512k -XX:+UseSerialGC "$jit" \
        -XX:-UsePerfData -Djava.net.preferIPv4Stack=true \
        -Dznode.container.checkIntervalMs=1000 \
        -Dznode.container.maxPerMinute=100000 \
        -Dzookeeper.admin.enableServer=false \
        -Dzookeeper.jmx.log4j.disable=true \
        -Dorg.slf4j.simpleLogger.showDateTime=true \
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS" \
        -Dzookeeper.log.dir="$dir" \
        -cp "$ZK_CLASSPATH" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
        </dev/null >>"$dir/zk.log" 2>&1 &
    local i
    for i in $(seq 1 100); do
        [ -s "$dir/zk.pid" ] && return 0
        sleep 0.05
    done
    die "ZooKeeper in $dir did not start (no pid file)"
}

# wait until the server of DIR serves requests (srvr shows its Mode).  A member of an ensemble that cannot reach a quorum only gets a
# warning after the timeout.
wait_up() {
    local dir=$1 port=$2 deadline=$((SECONDS + ZK_START_TIMEOUT)) alive=""
    while [ $SECONDS -lt $deadline ]; do
        # looked at twice: while the shell that wrote the pid file execs
        # the JVM, /proc/PID/cmdline can read empty for a moment (seen
        # under load: a server "exited" with nothing in its log)
        if ! running_pid "$dir" >/dev/null && { sleep 0.5; ! running_pid "$dir" >/dev/null; }; then
            echo "$me: ZooKeeper in $dir exited during startup; last log lines:" >&2
            log_tail "$dir" >&2
            return 1
        fi
        # `conf` shows the dataDir: make sure the server answering on the
        # port is this one and not another one that holds the port
        case $(fourlw "$port" conf) in
            *"dataDir=$dir/data/version-2"*)
                fourlw "$port" srvr | grep -q '^Mode: ' && return 0
                ;;
            *"not currently serving"*)
                alive=1
                ;;
        esac
        sleep 0.2
    done
    if [ -n "$alive" ] && grep -q '^server\.' "$dir/zoo.cfg"; then
        echo "$me: warning: ZooKeeper in $dir (port $port) runs but does not serve (no quorum?)" >&2
        return 0
    fi
    echo "$me: ZooKeeper in $dir (port $port) did not serve within ${ZK_START_TIMEOUT}s; last log lines:" >&2
    log_tail "$dir" >&2
    return 1
}

do_start() {
    [ $# -ge 1 ] && [ $# -le 2 ] || usage
    local dir port cport pid
    dir=$(absdir "$1")
    port=${2:-}
    mkdir -p "$dir" || die "cannot create $dir"
    if [ -f "$dir/zoo.cfg" ]; then
        cport=$(cfg_get "$dir/zoo.cfg" clientPort)
        if [ -n "$port" ] && [ "$port" != "$cport" ]; then
            echo "$me: note: $dir/zoo.cfg exists, keeping its clientPort $cport (not $port)" >&2
        fi
        port=$cport
    else
        [ -n "$port" ] || die "start: PORT needed for a new server in $dir"
        case $port in *[!0-9]*) die "bad port: $port" ;; esac
        write_cfg "$dir" "$port"
    fi
    if pid=$(running_pid "$dir"); then
        wait_up "$dir" "$port" || exit 1
        echo "ZooKeeper already running on 127.0.0.1:$port (pid $pid, $dir)"
        return 0
    fi
    launch "$dir"
    wait_up "$dir" "$port" || { do_signal_wait "$dir" KILL 5 >/dev/null 2>&1; exit 1; }
    echo "ZooKeeper running on 127.0.0.1:$port (pid $(cat "$dir/zk.pid"), $dir)"
}

do_start_ensemble() {
    [ $# -eq 4 ] || usage
    local dir p i n port pids=() servers=()
    dir=$(absdir "$1")
    shift
    for p in "$@"; do
        case $p in ''|*[!0-9]*) die "bad port: $p" ;; esac
        [ "$p" -le 63535 ] || die "port $p too high (need room for +2000)"
    done
    mkdir -p "$dir" || die "cannot create $dir"
    i=1
    for p in "$@"; do
        servers+=("server.$i=127.0.0.1:$((p + 1000)):$((p + 2000))")
        i=$((i + 1))
    done
    i=1
    for p in "$@"; do
        if [ ! -f "$dir/s$i/zoo.cfg" ]; then
            write_cfg "$dir/s$i" "$p" "${servers[@]}" "electionPortBindRetry=20"
            echo "$i" >"$dir/s$i/data/myid"
        fi
        i=$((i + 1))
    done
    for i in 1 2 3; do
        running_pid "$dir/s$i" >/dev/null || launch "$dir/s$i"
    done
    for i in 1 2 3; do
        port=$(cfg_get "$dir/s$i/zoo.cfg" clientPort)
        wait_up "$dir/s$i" "$port" || { do_stop_dir "$dir" KILL >/dev/null 2>&1; exit 1; }
    done
    # wait for a leader and for every server to serve
    local deadline=$((SECONDS + ZK_START_TIMEOUT)) modes leader
    while :; do
        modes=""
        leader=""
        for i in 1 2 3; do
            port=$(cfg_get "$dir/s$i/zoo.cfg" clientPort)
            n=$(fourlw "$port" srvr | sed -n 's/^Mode: //p')
            modes="$modes s$i=${n:-none}"
            [ "$n" = leader ] && leader=s$i
        done
        case $modes in *none*) ;; *) [ -n "$leader" ] && break ;; esac
        if [ $SECONDS -ge $deadline ]; then
            echo "$me: ensemble in $dir has no leader after ${ZK_START_TIMEOUT}s ($modes)" >&2
            for i in 1 2 3; do
                echo "--- $dir/s$i/zk.log" >&2
                log_tail "$dir/s$i" >&2
            done
            do_stop_dir "$dir" KILL >/dev/null 2>&1
            exit 1
        fi
        sleep 0.2
    done
    echo "ZooKeeper ensemble running on 127.0.0.1:$1,$2,$3 (leader $leader;$modes)"
}

# send SIG to the server of DIR and wait up to T seconds until it is gone
do_signal_wait() {
    local dir=$1 sig=$2 t=$3 pid deadline
    pid=$(running_pid "$dir") || { rm -f "$dir/zk.pid"; return 0; }
    kill -s "$sig" "$pid" 2>/dev/null
    # a frozen JVM must run again to handle SIGTERM
    [ "$sig" = KILL ] || kill -s CONT "$pid" 2>/dev/null
    deadline=$((SECONDS + t))
    while running_pid "$dir" >/dev/null; do
        if [ $SECONDS -ge $deadline ]; then
            [ "$sig" = KILL ] && return 1
            echo "$me: ZooKeeper in $dir (pid $pid) ignored SIG$sig for ${t}s, killing it" >&2
            kill -s KILL "$pid" 2>/dev/null
            kill -s CONT "$pid" 2>/dev/null
            sig=KILL
            deadline=$((SECONDS + 10))
        fi
        sleep 0.1
    done
    rm -f "$dir/zk.pid"
    return 0
}

do_stop_dir() {  # DIR SIG; handles ensemble directories
    local dir=$1 sig=$2 i rc=0
    if is_ensemble "$dir"; then
        for i in 1 2 3; do
            [ -d "$dir/s$i" ] && { do_stop_dir "$dir/s$i" "$sig" || rc=1; }
        done
        return $rc
    fi
    [ -f "$dir/zoo.cfg" ] || { echo "$me: no ZooKeeper in $dir" >&2; return 1; }
    if ! running_pid "$dir" >/dev/null; then
        rm -f "$dir/zk.pid"
        echo "ZooKeeper in $dir not running"
        return 0
    fi
    local pid
    pid=$(running_pid "$dir")
    if [ "$sig" = KILL ]; then
        do_signal_wait "$dir" KILL 10 || { echo "$me: could not kill pid $pid" >&2; return 1; }
        echo "ZooKeeper in $dir killed (pid $pid)"
    else
        do_signal_wait "$dir" TERM 20 || return 1
        echo "ZooKeeper in $dir stopped (pid $pid)"
    fi
}

do_pause() {  # DIR STOP|CONT
    local dir pid
    dir=$(absdir "$1")
    pid=$(running_pid "$dir") || die "ZooKeeper in $dir is not running"
    kill -s "$2" "$pid" || die "cannot send SIG$2 to $pid"
}

do_status() {
    local dir pid i rc=0 port
    dir=$(absdir "$1")
    if is_ensemble "$dir"; then
        for i in 1 2 3; do
            if pid=$(running_pid "$dir/s$i"); then
                port=$(cfg_get "$dir/s$i/zoo.cfg" clientPort)
                if [ "$(awk '{print $3}' /proc/$pid/stat)" = T ]; then
                    echo "s$i: running, pid $pid, port $port, frozen"
                else
                    echo "s$i: running, pid $pid, port $port, $(fourlw "$port" srvr | sed -n 's/^Mode: /mode /p')"
                fi
            else
                echo "s$i: not running"
                rc=1
            fi
        done
        return $rc
    fi
    if pid=$(running_pid "$dir"); then
        echo "running, pid $pid, port $(cfg_get "$dir/zoo.cfg" clientPort)$(awk '{print ($3=="T"?", frozen":"")}' /proc/$pid/stat)"
        return 0
    fi
    echo "not running"
    return 1
}

[ $# -ge 1 ] || usage
verb=$1
shift
case $verb in
    start) do_start "$@" ;;
    start-ensemble) do_start_ensemble "$@" ;;
    stop) [ $# -eq 1 ] || usage; do_stop_dir "$(absdir "$1")" TERM ;;
    kill) [ $# -eq 1 ] || usage; do_stop_dir "$(absdir "$1")" KILL ;;
    freeze) [ $# -eq 1 ] || usage; do_pause "$1" STOP ;;
    thaw) [ $# -eq 1 ] || usage; do_pause "$1" CONT ;;
    status) [ $# -eq 1 ] || usage; do_status "$1" ;;
    port)
        [ $# -eq 1 ] || usage
        d=$(absdir "$1")
        [ -f "$d/zoo.cfg" ] || die "no ZooKeeper in $d"
        cfg_get "$d/zoo.cfg" clientPort
        ;;
    cmd)
        [ $# -eq 2 ] || usage
        fourlw "$1" "$2" || die "no answer from 127.0.0.1:$1 to '$2'"
        ;;
    classpath) [ $# -eq 0 ] || usage; printf '%s\n' "$ZK_CLASSPATH" ;;
    -h|--help|help) usage ;;
    *) usage ;;
esac
