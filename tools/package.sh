#!/usr/bin/env bash
# tools/package.sh - zklock's packages, built out of a clean copy of the tree
# (the checkout gets no build products).
#
#   tools/package.sh deb [--out DIR]    the Debian packages postgresql-NN-zklock, one for each
#                                       PostgreSQL version of debian/pgversions that this Debian
#                                       release supports (pg_buildext; on Debian 12: 15), with
#                                       `dpkg-buildpackage -us -uc -b`.  As root it first installs
#                                       the build dependencies with apt-get: dpkg-dev and
#                                       postgresql-common, then what debian/control asks for
#                                       (debhelper, postgresql-server-dev-all, libzookeeper-st-dev).
#   tools/package.sh dist [--out DIR]   the PGXN distribution zklock-X.Y.Z.zip: `git archive` of
#                                       HEAD, once test/pgxn_meta.py finds META.json valid
#                                       (needs git and python3-jsonschema)
#
# DIR defaults to /tmp/zklock-packages.  The copy is the working tree as it
# is (uncommitted changes included, no .git, no build products) for deb, HEAD
# for dist.  The last lines name the files made, one per line; exit 0 when
# everything was made.  tools/deb-test.sh installs the .deb into a fresh
# cluster and smoke-tests it.

set -u
set -o pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODE=${1:-}
[ $# -gt 0 ] && shift
OUT=/tmp/zklock-packages
while [ $# -gt 0 ]; do
    case $1 in
        --out) [ $# -ge 2 ] || { echo "package.sh: --out needs a directory" >&2; exit 2; }
               OUT=$2; shift 2 ;;
        *) echo "usage: tools/package.sh deb|dist [--out DIR]" >&2; exit 2 ;;
    esac
done
case $MODE in
    deb|dist) ;;
    -h|--help|help) sed -n '2,21s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "usage: tools/package.sh deb|dist [--out DIR]" >&2; exit 2 ;;
esac
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)

# the distribution's version: META.json's (1.1.0)
VERSION=$(sed -n 's/^   "version": "\([^"]*\)",$/\1/p' "$SRC/META.json" | head -n 1)
[ -n "$VERSION" ] || { echo "package.sh: no version in META.json" >&2; exit 1; }

installed() {
    [ "$(dpkg-query -W -f '${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

# apt-get install PKG... as root, quietly; the log on failure
apt_install() {
    local log
    log=$(mktemp /tmp/zklock-package-apt.XXXXXX.log)
    echo "package.sh: installing $* (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" \
            </dev/null >"$log" 2>&1; then
        # an old package list: update once, then try again
        apt-get -q update </dev/null >>"$log" 2>&1
        if ! apt-get install -y -q --no-install-recommends \
                -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" \
                </dev/null >>"$log" 2>&1; then
            echo "package.sh: apt-get install $* failed; log follows" >&2
            cat "$log" >&2
            rm -f "$log"
            return 1
        fi
    fi
    rm -f "$log"
}

build_deb() {
    local work tree missing unmet start
    start=$(date +%s)
    # what it takes to read debian/ at all: pg_buildext and dpkg-checkbuilddeps
    missing=()
    for p in dpkg-dev postgresql-common; do
        installed "$p" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        [ "$(id -u)" -eq 0 ] || { echo "package.sh: missing ${missing[*]}; run as root to install them" >&2; return 1; }
        apt_install "${missing[@]}" || return 1
    fi

    work=$(mktemp -d /tmp/zklock-deb.XXXXXX)
    tree=$work/zklock-$VERSION
    mkdir "$tree"
    tar -C "$SRC" -cf - \
        --exclude=./.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
        --exclude=./tmp_check --exclude='./failed-logs.*' --exclude=./tmp_regress --exclude=./results \
        --exclude=./regression.diffs --exclude=./regression.out --exclude=__pycache__ \
        --exclude='./debian/postgresql-*-zklock' --exclude=./debian/.debhelper \
        --exclude='./debian/*.substvars' --exclude=./debian/files --exclude='./debian/*.log' \
        --exclude='./build-*' . | tar -C "$tree" -xf - ||
        { echo "package.sh: cannot copy the tree to $tree" >&2; rm -rf "$work"; return 1; }

    # debian/control for this Debian release's PostgreSQL versions (the
    # committed one is Debian 12's; on Debian 13 it names 17)
    if ! (cd "$tree" && pg_buildext updatecontrol); then
        echo "package.sh: pg_buildext updatecontrol failed: no version of debian/pgversions is supported here ($(/usr/share/postgresql-common/supported-versions | tr '\n' ' '))" >&2
        rm -rf "$work"
        return 1
    fi
    echo "package.sh: packages: $(sed -n 's/^Package: //p' "$tree/debian/control" | tr '\n' ' ')"

    # the build dependencies debian/control names
    if ! unmet=$(cd "$tree" && dpkg-checkbuilddeps 2>&1); then
        unmet=$(sed -n 's/.*Unmet build dependencies: //p' <<<"$unmet")
        [ -n "$unmet" ] || { echo "package.sh: dpkg-checkbuilddeps failed" >&2; rm -rf "$work"; return 1; }
        [ "$(id -u)" -eq 0 ] || { echo "package.sh: unmet build dependencies: $unmet; run as root to install them" >&2; rm -rf "$work"; return 1; }
        # "a (>= 1) | b, c" -> a c: the first of each alternative, no version
        # (apt-get installs the candidate, which dpkg-checkbuilddeps checks again)
        mapfile -t missing < <(sed -e 's/([^)]*)//g; s/\[[^]]*\]//g' <<<"$unmet" |
            tr ' ' '\n' | awk 'NF { if (skip) { skip = 0; next } if ($0 == "|") { skip = 1; next } print }')
        apt_install "${missing[@]}" || { rm -rf "$work"; return 1; }
        if ! (cd "$tree" && dpkg-checkbuilddeps); then
            echo "package.sh: build dependencies still unmet after apt-get" >&2
            rm -rf "$work"
            return 1
        fi
    fi

    echo "package.sh: dpkg-buildpackage -us -uc -b in $tree"
    if ! (cd "$tree" && dpkg-buildpackage -us -uc -b -j2 </dev/null >"$work/build.log" 2>&1); then
        tail -n 80 "$work/build.log" >&2
        echo "package.sh: dpkg-buildpackage failed; the copy and its log are kept in $work" >&2
        return 1
    fi
    grep -E '^dpkg-deb: building package' "$work/build.log"
    local made=()
    for f in "$work"/*.deb "$work"/*.buildinfo "$work"/*.changes; do
        [ -f "$f" ] || continue
        cp "$f" "$OUT/" && made+=("$OUT/${f##*/}")
    done
    rm -rf "$work"
    echo "package.sh: built in $(( $(date +%s) - start )) s"
    printf '%s\n' "${made[@]}" | grep '\.deb$'
}

build_dist() {
    local zip=$OUT/zklock-$VERSION.zip
    command -v git >/dev/null 2>&1 && git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1 ||
        { echo "package.sh: dist needs git and a checkout (it archives HEAD)" >&2; return 1; }
    if ! git -C "$SRC" diff --quiet HEAD -- 2>/dev/null; then
        echo "package.sh: warning: uncommitted changes are not in the archive (it is HEAD's)" >&2
    fi
    # META.json as it is in HEAD, checked in HEAD's tree
    local work
    work=$(mktemp -d /tmp/zklock-dist.XXXXXX)
    git -C "$SRC" archive --format=tar --prefix="zklock-$VERSION/" HEAD | tar -C "$work" -xf - ||
        { rm -rf "$work"; return 1; }
    if ! python3 "$work/zklock-$VERSION/test/pgxn_meta.py" --root "$work/zklock-$VERSION"; then
        echo "package.sh: META.json of HEAD is not valid; no archive" >&2
        rm -rf "$work"
        return 1
    fi
    rm -rf "$work"
    git -C "$SRC" archive --format=zip --prefix="zklock-$VERSION/" -o "$zip" HEAD || return 1
    echo "$zip"
}

case $MODE in
    deb) build_deb ;;
    dist) build_dist ;;
esac
