#!/usr/bin/env bash
# tools/frozen.sh [DIR] - released SQL scripts stay as they were released.
#
# A released version's install script (zklock--X.Y.sql) and the update scripts
# that lead to it (zklock--W--X.Y.sql) are what users' databases were made
# from: they ship unchanged in every later release.  For every tag vX.Y of the
# repository in DIR (default: this tree), each such script in the tree must be
# byte-identical to the tag's copy (`git show vX.Y:FILE`).
#
# Skips, with a message and exit 0, where git, the repository (a copy without
# .git, as tools/test.sh's) or the tags are missing.  Exit 1 when a script
# differs from its release, or a released script is gone from the tree.

set -u
dir=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

skip() { echo "frozen.sh: skipped: $*"; exit 0; }
command -v git >/dev/null 2>&1 || skip "no git"
git -C "$dir" rev-parse --git-dir >/dev/null 2>&1 || skip "$dir is not a git checkout"
mapfile -t tags < <(git -C "$dir" tag -l 'v[0-9]*.[0-9]*' | grep -E '^v[0-9]+\.[0-9]+$')
[ ${#tags[@]} -gt 0 ] || skip "no release tag (vX.Y) in $dir"

bad=0 n=0
for tag in "${tags[@]}"; do
    ver=${tag#v}
    # the tag's own install script and the update scripts into its version
    mapfile -t files < <(git -C "$dir" ls-tree --name-only "$tag" |
        grep -E "^zklock--([0-9.]+--)?${ver//./\\.}\.sql$")
    if [ ${#files[@]} -eq 0 ]; then
        echo "frozen.sh: tag $tag has no zklock--$ver.sql" >&2
        bad=1
        continue
    fi
    for f in "${files[@]}"; do
        n=$((n + 1))
        if [ ! -f "$dir/$f" ]; then
            echo "frozen.sh: $f (released in $tag) is missing from the tree: keep it, users' databases were made from it" >&2
            bad=1
        elif ! git -C "$dir" show "$tag:$f" | cmp -s - "$dir/$f"; then
            echo "frozen.sh: $f differs from its release $tag; a released script never changes: put the change into a new version's scripts" >&2
            git -C "$dir" show "$tag:$f" | diff -u --label "$tag:$f" - --label "$f" "$dir/$f" | head -n 40 >&2
            bad=1
        fi
    done
done
[ "$bad" -eq 0 ] || exit 1
echo "frozen.sh: $n released SQL script(s) unchanged (${tags[*]})"
