#!/usr/bin/python3
"""tools/reference.py - write doc/reference.md: every function, view and
setting of zklock on one page, with its signature, privilege group and the
page that documents it.

It is built from the pages themselves, so it cannot say what they do not:
the function and view headings of doc/*.md (### `zk_lock(...) → bigint`, ##
`zk_locks` (view over ...)), the groups table of doc/security.md
(| `lock` | `zk_lock`, ... |) and the settings rows of doc/*.md
(| `zklock.hosts` | default | context | meaning |).

    tools/reference.py            print what doc/reference.md should be
    tools/reference.py --write    write it
    tools/reference.py --check    exit 1 (and say so) when it differs

test/t/012_docs.pl runs --check, and checks the pages against the catalog.
"""

import glob
import os
import re
import sys

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(SRC, "doc", "reference.md")

HEADING = re.compile(r"^#+ `(zk_\w+)(\(.*?\))?(?: → (.*?))?`(.*)$")
VIEW_OVER = re.compile(r"\(view over `(zk_\w+)\(\)`\)")
GROUP_ROW = re.compile(r"^\| `(\w+)` \| (`zk_.*?) \| (.*?) \|\s*$")
SETTING_ROW = re.compile(r"^\| `(zklock\.\w+)` \| (.*?) \| (\w+) \| (.*?) \|\s*$")


def pages():
    for path in sorted(glob.glob(os.path.join(SRC, "doc", "*.md"))):
        if os.path.abspath(path) == OUT:
            continue
        with open(path, encoding="utf-8") as f:
            yield os.path.basename(path), f.read().splitlines()


def title(lines, page):
    for line in lines:
        if line.startswith("# "):
            return line[2:].strip()
    return page


def first_sentence(text, limit=140):
    """the first sentence of a table cell, cut at a word (never inside `code`)"""
    text = re.sub(r"\s+", " ", text).strip()
    safe = text.replace("e.g.", "e\x00g\x00").replace("i.e.", "i\x00e\x00")
    m = re.match(r"(.+?\.)(?=\s|$)", safe)
    s = (m.group(1) if m else safe).replace("\x00", ".")
    if len(s) > limit:
        s = s[:limit].rsplit(" ", 1)[0]
        if s.count("`") % 2:
            s = s[:s.rindex("`")].rstrip()
        s = s.rstrip(",;:(") + " …"
    return s.replace("|", "\\|")


def collect():
    functions = {}        # name -> [(signature, returns, page)]
    views = {}            # name -> (function, page)
    settings = {}         # name -> (default, context, meaning, page)
    groups = {}           # object name -> group
    titles = {}
    for page, lines in pages():
        titles[page] = title(lines, page)
        for line in lines:
            m = HEADING.match(line)
            if m:
                name, args, ret, rest = m.groups()
                v = VIEW_OVER.search(rest or "")
                if args is None and v:
                    views[name] = (v.group(1), page)
                elif args is not None:
                    functions.setdefault(name, []).append((name + args, ret or "", page))
                continue
            m = SETTING_ROW.match(line)
            # doc/settings.md's row is the setting's own; elsewhere the first
            if m and (m.group(1) not in settings or page == "settings.md"):
                settings[m.group(1)] = (m.group(2), m.group(3), first_sentence(m.group(4)), page)
                continue
            if page == "security.md":
                m = GROUP_ROW.match(line)
                if m:
                    for obj in re.findall(r"`(zk_\w+)`", m.group(2)):
                        groups.setdefault(obj, m.group(1))
    return functions, views, settings, groups, titles


def link(page, titles):
    return "[%s](%s)" % (titles.get(page, page), page)


def render():
    functions, views, settings, groups, titles = collect()
    out = []
    w = out.append
    w("# Reference")
    w("")
    w("Every function, view and setting of zklock, with the privilege group that may use it (see")
    w("[Privileges](security.md#privileges); `superuser` when no group grants it, `PUBLIC` for the")
    w("two everyone may call) and the page that documents it. This page is written by")
    w("`tools/reference.py` from the pages themselves; `test/t/012_docs.pl` fails when it is out of")
    w("date, and when a function, view or setting of the catalog is missing from the pages.")
    w("")
    w("## Functions")
    w("")
    w("| function | returns | group | page |")
    w("|---|---|---|---|")
    public = {"zk_path", "zk_privilege_groups"}
    for name in sorted(functions):
        for sig, ret, page in functions[name]:
            grp = "PUBLIC" if name in public else groups.get(name, "superuser")
            w("| `%s` | %s | %s | %s |" % (sig, ("`%s`" % ret) if ret else "", grp, link(page, titles)))
    w("")
    w("## Views")
    w("")
    w("| view | over | group | page |")
    w("|---|---|---|---|")
    for name in sorted(views):
        fn, page = views[name]
        w("| `%s` | `%s()` | %s | %s |" % (name, fn, groups.get(name, "superuser"), link(page, titles)))
    w("")
    w("## Settings")
    w("")
    w("Contexts: `restart` (the server), `reload` (`pg_reload_conf()`), `superuser` (any time, by")
    w("superusers only, also per role and database), `user` (any time, by anyone).")
    w("")
    w("| setting | default | context | what it is | page |")
    w("|---|---|---|---|---|")
    for name in sorted(settings):
        default, context, meaning, page = settings[name]
        w("| `%s` | %s | %s | %s | %s |" % (name, default, context, meaning, link(page, titles)))
    w("")
    return "\n".join(out)


def main():
    text = render()
    if "--write" in sys.argv:
        with open(OUT, "w", encoding="utf-8") as f:
            f.write(text)
    elif "--check" in sys.argv:
        try:
            with open(OUT, encoding="utf-8") as f:
                have = f.read()
        except OSError:
            have = ""
        if have != text:
            sys.stderr.write("doc/reference.md is out of date: run tools/reference.py --write\n")
            sys.exit(1)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
