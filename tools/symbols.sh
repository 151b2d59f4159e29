#!/usr/bin/env bash
# tools/symbols.sh [LIB] - check the symbols a build of zklock exports.
#
# Every symbol zklock.so (default: the one in this tree) exports is zk_ or is
# one of those PostgreSQL looks up by name (_PG_init, Pg_magic_func, and
# pg_finfo_zk_* of PG_FUNCTION_INFO_V1); everything else is static.  A
# symbol of another name could clash with PostgreSQL's or another
# library's.  tools/test.sh runs it after every build.  Exit status 1 and
# the list of offenders when one is found.

set -u
set -o pipefail

lib=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/zklock.so}
if ! syms=$(nm -D --defined-only "$lib" | awk '{print $NF}'); then
    echo "symbols.sh: cannot read the symbols of $lib (nm -D)" >&2
    exit 1
fi
bad=$(grep -Ev '^(zk_[A-Za-z0-9_]+|pg_finfo_zk_[A-Za-z0-9_]+|_PG_init|Pg_magic_func)$' <<<"$syms")
if [ -n "$bad" ]; then
    echo "symbols.sh: $lib exports symbols that are neither zk_ nor PostgreSQL's;" \
        "prefix them with zk_ or make them static:" >&2
    sed 's/^/  /' <<<"$bad" >&2
    exit 1
fi
echo "symbols: the $(wc -l <<<"$syms") symbols $lib exports are zk_ or PostgreSQL's"
