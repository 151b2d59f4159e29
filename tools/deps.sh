#!/usr/bin/env bash
# tools/deps.sh - install the Debian 12 packages zklock needs to build, test and
# run its demo.  Idempotent: does nothing (and prints nothing) when everything
# is installed; otherwise runs `apt-get update` once and installs what is
# missing.  Must run as root to install anything.
#
#   PostgreSQL 15 server, client and PGXS headers   postgresql-15 postgresql-client-15
#                                                   postgresql-server-dev-15
#   ZooKeeper C client (single-threaded)            libzookeeper-st-dev
#   ZooKeeper server (run by tools/zk.sh)          zookeeper, libzookeeper-java (+ default-jre-headless
#                                                   when there is no java on PATH)
#   ZooKeeper 3.9.6 server (tools/zk.sh, ZK_VERSION=3.9)  libcommons-io-java (its jars: tools/pg.sh zk3.9)
#   TAP tests                                       libipc-run-perl perl
#   test/zkq.py                                     python3-kazoo
#   fault run clients (test/faults)                 python3-psycopg2
#   META.json check (test/pgxn_meta.py)             python3-jsonschema
#   benchmarks (bench/): Curator's recipes           libcurator-recipes-java
#   sequence-wrap snapshot (test/java)              default-jdk-headless, when there is no javac
#   build and scripts                               make gcc libc6-dev procps
#
# ZooKeeper is Debian's `zookeeper` package (its jars are libzookeeper-java).
# Nothing is started: zookeeperd is not installed, tools/zk.sh runs ZooKeeper
# servers on demand, on loopback only.

set -u

pkgs=(postgresql-15 postgresql-client-15 postgresql-server-dev-15
      libzookeeper-st-dev zookeeper libzookeeper-java
      libipc-run-perl perl python3-kazoo python3-psycopg2 python3-jsonschema postgresql-15-cron
      libcurator-recipes-java libcommons-io-java make gcc libc6-dev procps)
command -v java >/dev/null 2>&1 || pkgs+=(default-jre-headless)
# javac compiles test/java/MakeWrapSnapshot.java (the sequence-wrap test)
command -v javac >/dev/null 2>&1 || pkgs+=(default-jdk-headless)

installed() {
    [ "$(dpkg-query -W -f '${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

missing=()
for p in "${pkgs[@]}"; do
    installed "$p" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "deps.sh: missing packages: ${missing[*]}" >&2
    echo "deps.sh: run tools/deps.sh as root to install them" >&2
    exit 1
fi

log=$(mktemp /tmp/zklock-deps.XXXXXX.log)
echo "deps.sh: installing ${missing[*]} (log: $log)"
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
# a failing update (say one unreachable third-party source) is not fatal by
# itself: the install below decides
apt-get -q update </dev/null >"$log" 2>&1 || echo "deps.sh: warning: apt-get update failed (see below if the install fails)" >>"$log"
if ! apt-get install "${apt_opts[@]}" "${missing[@]}" </dev/null >>"$log" 2>&1; then
    echo "deps.sh: apt-get failed; log follows" >&2
    cat "$log" >&2
    exit 1
fi
# check that apt really installed everything (and that java works)
still=()
for p in "${missing[@]}"; do
    installed "$p" || still+=("$p")
done
if [ ${#still[@]} -ne 0 ] || ! command -v java >/dev/null 2>&1; then
    echo "deps.sh: still missing after apt-get: ${still[*]:-java}; log follows" >&2
    cat "$log" >&2
    exit 1
fi
rm -f "$log"
exit 0
