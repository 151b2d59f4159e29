#!/usr/bin/env python3
"""test/pgxn_meta.py - check META.json against the PGXN Meta Spec 1.0.0.

    test/pgxn_meta.py [--root DIR] [--meta FILE]

1. Validates META.json (default DIR/META.json) against test/pgxn-meta-schema.json,
   a JSON schema written for this project from the spec's text, with Debian's
   python3-jsonschema (no network, so not CPAN's PGXN::Meta::Validator).
2. Then what a JSON schema cannot say:
   - every Version is a semantic version 2.0.0, and every Version Range is
     made of comparisons of semantic versions (or 0), its lower bound below
     its upper bound;
   - the files and docfiles of "provides" exist in DIR, relative, no "..";
   - the distribution's version is the version of the extension zklock in
     "provides", and both are zklock.control's default_version (1.1 is
     1.1.0), whose install script zklock--<default_version>.sql is the
     "file" of zklock;
   - CHANGELOG.md has a section for the version, and debian/changelog's
     newest entry packages it (upstream part of 1.1.0-1).

Prints each problem and "META.json: N problems" (exit 1), or "META.json is
valid ..." (exit 0).  Exit 2 when python3-jsonschema is missing.
"""

import argparse
import json
import os
import re
import sys

SEMVER = re.compile(
    r'^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)'
    r'(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?'
    r'(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$')
COMPARISON = re.compile(r'^\s*(<=|>=|==|!=|<|>)?\s*(\S+)\s*$')


def semver_key(v):
    """A sort key of a semantic version (pre-releases before the release)."""
    m = SEMVER.match(v)
    pre = m.group(4)
    pre_key = (1,) if pre is None else (0,) + tuple(
        (0, int(p), '') if p.isdigit() else (1, 0, p) for p in pre.split('.'))
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) + pre_key


def check_range(where, rng, problems):
    """A Version Range: 0, or comparisons of semantic versions joined by commas."""
    if rng == 0 or rng == '0':
        return
    if not isinstance(rng, str):
        problems.append(f'{where}: version range {rng!r} is neither 0 nor a string')
        return
    lower, upper = [], []
    for part in rng.split(','):
        m = COMPARISON.match(part)
        if not m or not SEMVER.match(m.group(2)):
            problems.append(f'{where}: "{part.strip()}" of range "{rng}" is not a comparison '
                            'with a semantic version (for example ">= 15.0.0")')
            continue
        op, ver = m.group(1) or '>=', m.group(2)
        if op in ('>=', '>', '=='):
            lower.append((semver_key(ver), op != '>', ver))
        if op in ('<=', '<', '=='):
            upper.append((semver_key(ver), op != '<', ver))
    if lower and upper:
        lo, up = max(lower), min(upper)
        if lo[0] > up[0] or (lo[0] == up[0] and not (lo[1] and up[1])):
            problems.append(f'{where}: range "{rng}" admits no version ({lo[2]} to {up[2]})')


def check_path(where, path, root, problems):
    if not isinstance(path, str):
        return
    if path.startswith('/') or '\\' in path or '..' in path.split('/'):
        problems.append(f'{where}: "{path}" must be relative to the distribution, unix style, '
                        'without ".."')
    elif not os.path.isfile(os.path.join(root, path)):
        problems.append(f'{where}: "{path}" does not exist in {root}')


def control_default_version(root):
    with open(os.path.join(root, 'zklock.control'), encoding='utf-8') as f:
        for line in f:
            m = re.match(r"^\s*default_version\s*=\s*'([^']*)'", line)
            if m:
                return m.group(1)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root', default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help='the distribution root (default: this tree)')
    ap.add_argument('--meta', help='the META.json to check (default: ROOT/META.json)')
    ap.add_argument('--schema', help='the JSON schema (default: test/pgxn-meta-schema.json '
                    'beside this script)')
    args = ap.parse_args()
    root = args.root
    meta_path = args.meta or os.path.join(root, 'META.json')
    schema_path = args.schema or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              'pgxn-meta-schema.json')
    try:
        import jsonschema
    except ImportError:
        print('pgxn_meta.py: python3-jsonschema is missing (apt-get install python3-jsonschema; '
              'tools/deps.sh installs it)', file=sys.stderr)
        return 2

    problems = []
    try:
        with open(meta_path, encoding='utf-8') as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        print(f'{meta_path}: not readable JSON: {e}')
        return 1
    with open(schema_path, encoding='utf-8') as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    for e in sorted(validator.iter_errors(meta), key=lambda e: list(e.absolute_path)):
        where = '/'.join(str(p) for p in e.absolute_path) or '(top)'
        # a oneOf failure says little by itself: name the closest branch's reason
        detail = e.message
        if e.context:
            best = jsonschema.exceptions.best_match(e.context)
            detail += f' ({best.message})'
        problems.append(f'{where}: {detail}')

    if not problems:
        version = meta['version']
        for name, ext in meta['provides'].items():
            where = f'provides/{name}'
            check_path(f'{where}/file', ext.get('file'), root, problems)
            if 'docfile' in ext:
                check_path(f'{where}/docfile', ext['docfile'], root, problems)
        for phase, rels in meta.get('prereqs', {}).items():
            for rel, exts in rels.items():
                if phase.lower().startswith('x_') or rel.lower().startswith('x_'):
                    continue
                for ext, rng in exts.items():
                    check_range(f'prereqs/{phase}/{rel}/{ext}', rng, problems)

        default = control_default_version(root)
        zk = meta['provides'].get('zklock')
        if default is None:
            problems.append('zklock.control has no default_version')
        elif zk is None:
            problems.append('provides has no extension "zklock"')
        else:
            as_semver = default if default.count('.') == 2 else default + '.0'
            if zk['version'] != as_semver:
                problems.append(f'provides/zklock/version is {zk["version"]}, but zklock.control\'s '
                                f'default_version {default} is {as_semver}')
            if version != zk['version']:
                problems.append(f'version {version} is not the version of the extension zklock '
                                f'({zk["version"]})')
            if zk['file'] != f'zklock--{default}.sql':
                problems.append(f'provides/zklock/file is {zk["file"]}, but CREATE EXTENSION '
                                f'installs zklock--{default}.sql')

        changelog = os.path.join(root, 'CHANGELOG.md')
        if not os.path.isfile(changelog):
            problems.append('CHANGELOG.md is missing')
        else:
            with open(changelog, encoding='utf-8') as f:
                if not re.search(rf'^#+ \[?{re.escape(version)}\]?(\s|$)', f.read(), re.M):
                    problems.append(f'CHANGELOG.md has no section "## {version}"')
        debchangelog = os.path.join(root, 'debian', 'changelog')
        if os.path.isfile(debchangelog):
            with open(debchangelog, encoding='utf-8') as f:
                m = re.match(r'^\S+ \(([^)]+)\)', f.readline())
            upstream = m and re.sub(r'^\d+:', '', m.group(1)).rsplit('-', 1)[0]
            if upstream != version:
                problems.append(f'debian/changelog\'s newest entry packages '
                                f'{upstream or "nothing readable"}, not {version}')

    for p in problems:
        print(p)
    if problems:
        print(f'META.json: {len(problems)} problem{"s" if len(problems) > 1 else ""}')
        return 1
    print(f'META.json is valid (PGXN Meta Spec {meta["meta-spec"]["version"]}, '
          f'{meta["name"]} {meta["version"]})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
