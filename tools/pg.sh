#!/usr/bin/env bash
# tools/pg.sh - provide PostgreSQL 17 or 18 for zklock's tests, from Debian's
# archive, built or installed once and cached outside the checkout.  Run as
# root on Debian 12 (tools/test.sh --pg 17|18 calls it).
#
#   tools/pg.sh 17          a Debian 13 "trixie" root (debootstrap --variant=minbase)
#                           with Debian's own postgresql-17, postgresql-server-dev-17,
#                           libzookeeper-st-dev, zookeeper (3.9), python3-kazoo,
#                           python3-jsonschema, postgresql-17-cron and the rest of what the suites need,
#                           installed with apt inside the root.  Prints the root's
#                           path (last line of stdout).
#   tools/pg.sh 18          PostgreSQL 18 built from Debian unstable "sid"'s source
#                           package (apt-get source postgresql-18, with a private
#                           source list and private apt state: the machine's apt
#                           configuration is not touched), configured with
#                           --enable-tap-tests --without-icu --without-readline,
#                           installed into a prefix with contrib's dblink (no
#                           pg_cron: the archive serves no pg-cron source here, and
#                           sid's binary needs a newer libc than Debian 12's).  Debian's
#                           patches are not applied (they move the install
#                           directories out of the prefix).  Build dependencies
#                           come from the host's own archive (apt-get install).
#                           Prints the prefix's bin directory (last line of stdout).
#   tools/pg.sh zk3.9       ZooKeeper 3.9.6, the server release that keeps acknowledged
#                           writes (README, "ZooKeeper releases"): Debian unstable's
#                           libzookeeper-java (a Java package: its jars run on Debian
#                           12's Java with Debian 12's netty, slf4j, metrics,
#                           commons-cli, commons-io and snappy jars), downloaded with
#                           the private sid lists and unpacked into the cache; nothing
#                           is installed.  Prints the directory of its jars (last line
#                           of stdout); tools/zk.sh runs it with ZK_VERSION=3.9.
#   tools/pg.sh mount ROOT  bind-mount /proc, /dev and /dev/pts into ROOT (idempotent)
#   tools/pg.sh umount ROOT undo that (idempotent; lazily if busy)
#
# Cached: a finished root or prefix carries a stamp file (.zklock-ready) and
# a second run prints the path and does nothing else.  An interrupted run is
# resumed or redone by the next one (the stamp is written last; a half-made
# root is removed and made again, a half-made build is unpacked and built
# again, an installed PostgreSQL 18 (.zklock-built) is kept).  The chroot's
# mounts are always undone on exit.
#
# Environment: ZKLOCK_PG_CACHE (default /var/cache/zklock): the cache
# directory; trixie-root/, pg18/ and zookeeper-3.9/ live in it.  ZKLOCK_DEBIAN_MIRROR
# (default http://deb.debian.org/debian).  ZKLOCK_PG_JOBS (make -j, default 2).
# Logs of each step go to ZKLOCK_PG_CACHE/*.log; on failure the tail is shown.

set -u
set -o pipefail

CACHE=${ZKLOCK_PG_CACHE:-/var/cache/zklock}
MIRROR=${ZKLOCK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
JOBS=${ZKLOCK_PG_JOBS:-2}
me=pg.sh

die() { echo "$me: $*" >&2; exit 1; }
say() { printf '%s  %s\n' "$(date +%T)" "$*" >&2; }

# run CMD... with output to LOG; on failure show the log's tail and die
logged() {
    local log=$1
    shift
    if ! "$@" </dev/null >>"$log" 2>&1; then
        echo "$me: failed: $*" >&2
        echo "----- tail of $log -----" >&2
        tail -n 40 "$log" >&2
        exit 1
    fi
}

need_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and builds into $CACHE)"
}

apt_host_install() {  # install missing host packages (Debian 12's archive)
    local p missing=() log
    for p in "$@"; do
        [ "$(dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log=$CACHE/host-apt.log
    say "installing on the host: ${missing[*]} (log: $log)"
    export DEBIAN_FRONTEND=noninteractive
    # one apt at a time (17 and 18 may be provisioned at once; another apt
    # may hold dpkg's lock: wait for it)
    (
        flock 7
        apt-get -q update </dev/null >>"$log" 2>&1 || true
        logged "$log" apt-get install -y -q --no-install-recommends \
            -o DPkg::Lock::Timeout=600 "${missing[@]}"
    ) 7>"$CACHE/.host-apt.lock" || exit 1
}

#
# The chroot's mounts
#

is_mounted() { mountpoint -q -- "$1" 2>/dev/null; }

do_mount() {
    local root=$1 m
    for m in proc dev dev/pts; do
        mkdir -p "$root/$m"
    done
    is_mounted "$root/proc" || mount -t proc proc "$root/proc" || return 1
    is_mounted "$root/dev" || mount --bind /dev "$root/dev" || return 1
    is_mounted "$root/dev/pts" || mount --bind /dev/pts "$root/dev/pts" || return 1
}

do_umount() {
    local root=$1 m
    for m in dev/pts dev proc; do
        if is_mounted "$root/$m"; then
            umount "$root/$m" 2>/dev/null || umount -l "$root/$m"
        fi
    done
}

#
# PostgreSQL 17: a Debian 13 root
#

TRIXIE_PKGS=(postgresql-17 postgresql-client-17 postgresql-server-dev-17 postgresql-17-cron
    libzookeeper-st-dev zookeeper libzookeeper-java default-jre-headless
    default-jdk-headless libipc-run-perl perl python3 python3-kazoo python3-psycopg2
    python3-jsonschema make gcc libc6-dev procps util-linux ca-certificates)

pg17() {
    local root=$CACHE/trixie-root log=$CACHE/trixie.log stamp want
    stamp=$root/.zklock-ready
    want="${TRIXIE_PKGS[*]}"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        echo "$root"
        return 0
    fi
    need_root
    mkdir -p "$CACHE"
    : >"$log"
    apt_host_install debootstrap
    trap 'do_umount "$root"' EXIT
    trap 'exit 130' INT TERM
    if [ ! -f "$root/.zklock-bootstrapped" ]; then
        if [ -e "$root" ]; then
            say "removing the unfinished root $root"
            do_umount "$root"
            rm -rf --one-file-system "$root"
        fi
        say "debootstrap --variant=minbase trixie $root (log: $log)"
        logged "$log" debootstrap --variant=minbase trixie "$root" "$MIRROR"
        : >"$root/.zklock-bootstrapped"
    fi
    do_mount "$root" || die "could not mount /proc, /dev, /dev/pts in $root"
    # the root's apt knows only trixie; no service starts inside it
    printf 'deb %s trixie main\n' "$MIRROR" >"$root/etc/apt/sources.list"
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 755 "$root/usr/sbin/policy-rc.d"
    # postgresql-common must not create a cluster (the tests make their own)
    mkdir -p "$root/etc/postgresql-common/createcluster.d"
    printf 'create_main_cluster = false\n' >"$root/etc/postgresql-common/createcluster.d/zklock.conf"
    say "apt-get install in the root: $want (log: $log)"
    logged "$log" chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 apt-get -q update
    logged "$log" chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
        apt-get install -y -q --no-install-recommends "${TRIXIE_PKGS[@]}"
    logged "$log" chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin apt-get clean
    # the suites run as postgres (the package made the user); locale C.UTF-8 is built in
    chroot "$root" id postgres >/dev/null 2>&1 || die "no postgres user in $root"
    do_umount "$root"
    trap - EXIT INT TERM
    printf '%s' "$want" >"$stamp"
    say "Debian 13 root ready: $root"
    echo "$root"
}

#
# PostgreSQL 18: built from sid's source package
#

PG18_BUILD_DEPS=(dpkg-dev xz-utils gcc make bison flex perl libipc-run-perl zlib1g-dev pkg-config)
PG18_CONFIGURE=(--enable-tap-tests --without-icu --without-readline)

# apt-get with a private source list (sid's deb-src only) and private state and cache
sid_apt() {
    local d=$CACHE/sid-apt
    apt-get -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts="$d/sources.list.d" \
        -o Dir::State="$d/state" -o Dir::Cache="$d/cache" -o Dir::Etc::Preferences=/dev/null \
        -o Dir::Etc::PreferencesParts="$d/preferences.d" "$@"
}

# fetch source package $1 (of release $4 if given: by default the newest,
# sid's) into $2 (fresh) and unpack it there without Debian's patches (they
# move the install directories out of the prefix); print the unpacked
# directory
sid_source() {
    local pkg=$1 dir=$2 log=$3 rel=${4:-}
    sid_update "$log" || return 1
    rm -rf "$dir"
    mkdir -p "$dir"
    (cd "$dir" && logged "$log" sid_apt -q source --download-only "$pkg${rel:+/$rel}") || return 1
    (cd "$dir" && logged "$log" dpkg-source -x --skip-patches ./*.dsc) || return 1
    find "$dir" -mindepth 1 -maxdepth 1 -type d | head -n 1
}

# the private lists of sid (binary and source), fetched once
sid_update() {
    local log=$1 d=$CACHE/sid-apt
    mkdir -p "$d/sources.list.d" "$d/preferences.d" "$d/state/lists/partial" "$d/cache/archives/partial"
    printf 'deb %s sid main\ndeb-src %s sid main\n' "$MIRROR" "$MIRROR" >"$d/sources.list.new"
    if [ ! -f "$d/.updated" ] || ! cmp -s "$d/sources.list" "$d/sources.list.new"; then
        mv "$d/sources.list.new" "$d/sources.list"
        logged "$log" sid_apt -q update
        : >"$d/.updated"
    fi
    rm -f "$d/sources.list.new"
}

pg18() {
    local top=$CACHE/pg18 prefix log stamp src want
    prefix=$top/install
    log=$CACHE/pg18.log
    stamp=$prefix/.zklock-ready
    want="postgresql-18 ${PG18_CONFIGURE[*]} +dblink"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        echo "$prefix/bin"
        return 0
    fi
    need_root
    mkdir -p "$top"
    : >>"$log"
    apt_host_install "${PG18_BUILD_DEPS[@]}"
    # PostgreSQL itself, unless an earlier run built and installed it
    # (.zklock-built: written once it is installed)
    if [ "$(cat "$prefix/.zklock-built" 2>/dev/null)" != "${PG18_CONFIGURE[*]} +dblink" ]; then
        rm -rf "$prefix"
        say "apt-get source postgresql-18 (Debian sid) (log: $log)"
        src=$(sid_source postgresql-18 "$top/src" "$log") || exit 1
        [ -n "$src" ] && [ -x "$src/configure" ] || die "no PostgreSQL source unpacked in $top/src"
        say "configure and build $(basename "$src") into $prefix (make -j$JOBS; about 10 minutes)"
        (cd "$src" && logged "$log" ./configure --prefix="$prefix" "${PG18_CONFIGURE[@]}") || exit 1
        (cd "$src" && logged "$log" make -j"$JOBS") || exit 1
        (cd "$src" && logged "$log" make install) || exit 1
        (cd "$src/contrib/dblink" && logged "$log" make -j"$JOBS" && logged "$log" make install) || exit 1
        printf '%s' "${PG18_CONFIGURE[*]} +dblink" >"$prefix/.zklock-built"
        # the sources are not needed any more (--enable-tap-tests installed
        # the TAP modules under lib/postgresql/pgxs)
        rm -rf "$top/src"
    fi
    # no pg_cron: Debian's archive here serves no pg-cron source package, and
    # sid's binary postgresql-18-cron needs a newer C library than Debian 12's
    # (440_pg_cron.pl skips without it)
    # the suites run as postgres: it must be able to read and run everything
    chmod -R a+rX "$top"
    printf '%s' "$want" >"$stamp"
    say "PostgreSQL 18 ready: $prefix"
    echo "$prefix/bin"
}

#
# ZooKeeper 3.9.6: sid's libzookeeper-java, unpacked (not installed)
#

ZK39_VERSION=3.9.6
zk39() {
    local top=$CACHE/zookeeper-3.9 log=$CACHE/zookeeper-3.9.log stamp deb ver
    stamp=$top/.zklock-ready
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$ZK39_VERSION" ]; then
        echo "$top/java"
        return 0
    fi
    need_root
    rm -rf "$top"
    mkdir -p "$top/deb" || exit 1
    : >"$log"
    sid_update "$log" || exit 1
    say "apt-get download libzookeeper-java (Debian sid) (log: $log)"
    # apt's _apt user cannot write into the cache: download as root, quietly
    (cd "$top/deb" && logged "$log" sid_apt -q -o APT::Sandbox::User=root download libzookeeper-java) || exit 1
    deb=$(find "$top/deb" -name 'libzookeeper-java_*.deb' | head -n 1)
    [ -n "$deb" ] || die "no libzookeeper-java package downloaded (see $log)"
    ver=$(dpkg-deb -f "$deb" Version)
    case $ver in
        "$ZK39_VERSION"-*) ;;
        *) die "Debian sid serves libzookeeper-java $ver, not $ZK39_VERSION: update ZK39_VERSION in tools/pg.sh after checking the release's fixes" ;;
    esac
    logged "$log" dpkg-deb -x "$deb" "$top/x"
    mkdir -p "$top/java"
    cp -L "$top/x/usr/share/java/zookeeper.jar" "$top/x/usr/share/java/zookeeper-jute.jar" "$top/java/" || exit 1
    rm -rf "$top/x" "$top/deb"
    chmod -R a+rX "$top"
    printf '%s' "$ZK39_VERSION" >"$stamp"
    say "ZooKeeper $ZK39_VERSION ready: $top/java"
    echo "$top/java"
}

# one provisioning of a version at a time (a second caller waits, then finds it cached)
locked() {
    need_root
    mkdir -p "$CACHE" || exit 1
    exec 8>"$CACHE/.pg$1.lock"
    flock 8
}

case ${1:-} in
    17) [ -f "$CACHE/trixie-root/.zklock-ready" ] || locked 17; pg17 ;;
    18) [ -f "$CACHE/pg18/install/.zklock-ready" ] || locked 18; pg18 ;;
    zk3.9) [ -f "$CACHE/zookeeper-3.9/.zklock-ready" ] || locked zk3.9; zk39 ;;
    mount) [ $# -eq 2 ] || die "usage: tools/pg.sh mount ROOT"; need_root; do_mount "$2" ;;
    umount) [ $# -eq 2 ] || die "usage: tools/pg.sh umount ROOT"; need_root; do_umount "$2" ;;
    *) sed -n '2,46s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
