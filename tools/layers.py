#!/usr/bin/env python3
"""tools/layers.py [--graph] [--src DIR] - check that zklock's layers only point down.

The rules (src/README, "Layers"):

  1. The base (src/core) names no recipe.  None of its objects uses a
     symbol that a recipe's objects or the module's entry define, none of
     its files includes a recipe's header ("lock/lock.h", ...), and none of
     its files names a recipe's symbol or kind (ZKK_LOCK, ...) outside a
     comment.  The base reaches the recipes only through the tables the
     module's entry hands it at load (zk_register_recipes).
  2. Between folders, no circle: the graph of "a file of folder A uses a
     symbol defined in folder B" has no cycle.
  3. Inside a folder whose README has a "Stack:" line (file names, bottom
     first), a file uses only symbols defined by itself or by files below
     it: no call back up.  Files in parentheses share a place and may call
     each other: a knot the README owns up to.

Symbols come from nm on the built objects (run after make); included
headers and named identifiers from the sources.  Exit status 1 with one
line per offence; --graph prints the folder graph and the counts; --src
checks another tree than this checkout's src (test/t/011_layers.pl).
"""

import os
import re
import subprocess
import sys
from collections import defaultdict

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
SRC = os.path.join(TOP, 'src')
BASE = 'core'


def folder_of(path):
    rel = os.path.relpath(path, SRC)
    parts = rel.split(os.sep)
    return parts[0] if len(parts) > 1 else '.'


def objects():
    out = []
    for d, _, files in os.walk(SRC):
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith('.o')]
    return sorted(out)


def sources():
    out = []
    for d, _, files in os.walk(SRC):
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(('.c', '.h'))]
    return sorted(out)


def nm(obj):
    r = subprocess.run(['nm', obj], capture_output=True, text=True, check=True)
    defined, used = set(), set()
    for line in r.stdout.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] in 'TDBRV':
            defined.add(p[2])
        elif len(p) == 2 and p[0] == 'U':
            used.add(p[1])
    return defined, used


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def stack_of(folder):
    """The "Stack:" line of the folder's README: {file: rank}, bottom first.

    Files in parentheses share a rank: they may call each other (a knot the
    README names); otherwise a file calls only files of lower rank.
    """
    readme = os.path.join(SRC, folder, 'README')
    if not os.path.exists(readme):
        return None
    with open(readme, encoding='utf-8') as f:
        text = f.read()
    m = re.search(r'^Stack:((?:.*\n)(?:[ \t]+\S.*\n)*)', text, flags=re.M)
    if not m:
        return None
    rank, r, group = {}, 0, False
    for w in re.findall(r'\(|\)|[\w.]+\.c', m.group(1)):
        if w == '(':
            group = True
        elif w == ')':
            group = False
            r += 1
        else:
            rank[w] = r
            if not group:
                r += 1
    return rank


def main():
    global SRC
    if '--src' in sys.argv:
        SRC = os.path.abspath(sys.argv[sys.argv.index('--src') + 1])
    objs = objects()
    if not objs:
        print('layers.py: no objects under src/: run make first', file=sys.stderr)
        return 1
    owner = {}                      # symbol -> object that defines it
    uses = {}
    for o in objs:
        d, u = nm(o)
        for s in d:
            owner[s] = o
        uses[o] = u
    bad = []

    # kinds of entry of the recipes (recipelist.h): a ZK_KIND belongs to
    # the ZK_RECIPE above it, which is the base's own when the base defines
    # its worker half (zk_<id>_recipe: the registry of namespace claims)
    recipe_kinds = set()
    with open(os.path.join(SRC, 'recipelist.h'), encoding='utf-8') as f:
        rid = None
        for m in re.finditer(r'^ZK_(RECIPE|KIND)\((\w+)', strip_comments(f.read()), flags=re.M):
            if m.group(1) == 'RECIPE':
                rid = m.group(2)
            elif folder_of(owner.get('zk_%s_recipe' % rid, SRC)) != BASE:
                recipe_kinds.add(m.group(2))

    # 1 and 2: arrows between folders, from the objects
    arrows = defaultdict(set)       # (from folder, to folder) -> {file:symbol}
    for o, used in uses.items():
        fa = folder_of(o)
        for s in used:
            if s in owner and owner[s] != o:
                fb = folder_of(owner[s])
                if fa != fb:
                    arrows[(fa, fb)].add('%s uses %s (%s)' % (
                        os.path.relpath(o, SRC)[:-2] + '.c', s,
                        os.path.relpath(owner[s], SRC)[:-2] + '.c'))
    for (fa, fb), what in sorted(arrows.items()):
        if fa == BASE:
            for w in sorted(what):
                bad.append('the base calls up: ' + w)

    recipe_syms = {s for s, o in owner.items() if folder_of(o) not in (BASE,)}
    for s in sources():
        if folder_of(s) != BASE:
            continue
        with open(s, encoding='utf-8') as f:
            raw = f.read()
        for m in re.finditer(r'#include "([a-z_]+)/[a-z_]+\.h"', raw):
            if os.path.isdir(os.path.join(SRC, m.group(1))) and m.group(1) != BASE:
                bad.append('the base includes a recipe header: %s includes %s' % (
                    os.path.relpath(s, SRC), m.group(0)[10:-1]))
        code = strip_comments(raw)
        names = set(re.findall(r'\b[A-Za-z_]\w*\b', code))
        for n in sorted(names & (recipe_syms | recipe_kinds)):
            bad.append('the base names a recipe symbol: %s names %s' % (os.path.relpath(s, SRC), n))

    # 2: no circle between folders
    graph = defaultdict(set)
    for (fa, fb) in arrows:
        graph[fa].add(fb)
    state = {}

    def visit(n, path):
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cyc = path[path.index(m):] + [m]
                bad.append('a circle between folders: ' + ' -> '.join(cyc))
            elif m not in state:
                visit(m, path + [m])
        state[n] = 2
    for n in sorted(graph):
        if n not in state:
            visit(n, [n])

    # 3: one direction inside a folder that declares its stack
    folders = sorted({folder_of(o) for o in objs})
    for fo in folders:
        stack = stack_of(fo)
        if stack is None:
            continue
        files = {os.path.basename(o)[:-2] + '.c' for o in objs if folder_of(o) == fo}
        missing = files - set(stack)
        for m in sorted(missing):
            bad.append('src/%s/README: Stack: does not place %s' % (fo, m))
        for o in objs:
            if folder_of(o) != fo:
                continue
            me = os.path.basename(o)[:-2] + '.c'
            for s in sorted(uses[o]):
                if s in owner and folder_of(owner[s]) == fo:
                    other = os.path.basename(owner[s])[:-2] + '.c'
                    if other != me and stack.get(other, -1) > stack.get(me, -1):
                        bad.append('%s calls up its stack: %s uses %s (%s)' % (fo, me, s, other))

    if '--graph' in sys.argv:
        for (fa, fb), what in sorted(arrows.items()):
            print('%-10s -> %-10s %4d symbols' % (fa, fb, len(what)))
    for b in bad:
        print('layers: ' + b, file=sys.stderr)
    if bad:
        print('layers.py: %d offences against the layering (src/README, "Layers")' % len(bad),
              file=sys.stderr)
        return 1
    print('layers: %d folders, no circle between them, the base names no recipe, %d stacks kept'
          % (len(folders), sum(1 for fo in folders if stack_of(fo) is not None)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
