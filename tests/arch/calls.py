#!/usr/bin/env python3
"""The call-graph half of the layer test: no two modules of the product
call each other, directly or round a circle.

An include circle can hide behind a shared header (api/api.h declares what
a dozen files define), so this reads what the compiler produced instead:
`nm` on every object of the ty_* libraries gives each object's defined and
undefined symbols, hence which module calls (or reads) which. Any circle
among modules is reported with one symbol per edge. (Calls between the
folders' libraries are held to the layer table by the link itself: each
ty_<folder> library links only the folders below it, so an upward call does
not link.)

A module is x.c / x.cu with x.h and x_internal.h, as in layers.py. Files
x_<part>.c / x_<part>.cu that include a folder-private x_internal.h are
merged into module x (and may call each other) ONLY when ARCHITECTURE.md
declares x split for size, in its section headed "Modules split for size":
one bullet per module, the module first in backticks, folder and name
without extension, then why, e.g.

    ### Modules split for size

    * `jobs/sched` (sched_core.c, sched_passes.c): one scheduler whose
      passes share its state; split only to keep files short.

Every other file is a module of its own, even when it shares a private
header with its neighbours: a header shared for convenience must not hide a
circle. A declaration fails when it is stale, so the list cannot rot: no
x_internal.h, an x_internal.h included from outside its folder, or no
x_<part> file that includes it.

Usage: calls.py <build folder> [repository root, default: two folders up]
"""
import os
import re
import subprocess
import sys

import scc

DEFINED = set('TDBRVWGSui')


def includes(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        return set(re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read(), re.M))


SPLIT_HEADING = 'modules split for size'
HEADING = re.compile(r'^#{1,6}\s')
SPLIT_BULLET = re.compile(r'^[*-]\s+(.*)$')
SPLIT_MODULE = re.compile(r'^`([a-z0-9_]+(?:/[a-z0-9_]+)+)`')


def split_modules(root):
    """{module: line number} of the modules ARCHITECTURE.md declares split
    for size: the bullets of the section headed "Modules split for size"
    (any heading level; it ends at the next heading). Each bullet starts with
    the module in backticks; a bullet that does not is an error, so a typo
    cannot drop a declaration unseen. No such section: no module is split."""
    path = os.path.join(root, 'ARCHITECTURE.md')
    if not os.path.exists(path):
        raise SystemExit(f'calls: no ARCHITECTURE.md in {root} (the repository root?)')
    declared, errors, sections = {}, [], 0
    inside = False
    with open(path, encoding='utf-8') as f:
        for lineno, line in enumerate(f, 1):
            if HEADING.match(line):
                inside = line.lstrip('#').strip().lower() == SPLIT_HEADING
                sections += inside
                continue
            m = SPLIT_BULLET.match(line) if inside else None
            if not m:
                continue
            mod = SPLIT_MODULE.match(m.group(1))
            if not mod:
                errors.append(f'ARCHITECTURE.md:{lineno}: a bullet under "Modules '
                              f'split for size" must start with the module in '
                              f'backticks, folder/name without extension '
                              f'(`jobs/sched`): {line.strip()}')
            elif mod.group(1) in declared:
                errors.append(f'ARCHITECTURE.md:{lineno}: {mod.group(1)} is '
                              f'declared split for size twice')
            else:
                declared[mod.group(1)] = lineno
    if sections > 1:
        errors.append('ARCHITECTURE.md: more than one "Modules split for size" section')
    return declared, errors


def split_owner(src, declared):
    """The declared module that src (x_<part>.c) would be a part of, by its
    name: the longest declared x in src's folder with src named x_<part>."""
    folder, name = os.path.split(os.path.splitext(src)[0])
    best = None
    for mod in declared:
        mfolder, mname = os.path.split(mod)
        if mfolder == folder and name.startswith(mname + '_') and \
                (best is None or len(mod) > len(best)):
            best = mod
    return best


def split_parts(root, sources, declared):
    """{source: module} for the x_<part> files merged into a declared module
    x, and the problems with the declarations (stale or not private)."""
    parts, problems = {}, []
    for mod, lineno in sorted(declared.items()):
        header = f'{mod}_internal.h'
        where = f'ARCHITECTURE.md:{lineno}: {mod} is declared split for size'
        if not os.path.exists(os.path.join(root, header)):
            problems.append(f'{where}, but there is no {header}: stale declaration')
            continue
        outside = sorted(s for s in sources
                         if os.path.dirname(s) != os.path.dirname(mod)
                         and header in includes(os.path.join(root, s)))
        if outside:
            problems.append(f'{where}, but {header} is included from outside '
                            f'its folder ({", ".join(outside)}), so it is not '
                            f'the private header of one module')
            continue
        mine = sorted(s for s in sources if split_owner(s, declared) == mod
                      and header in includes(os.path.join(root, s)))
        if not mine:
            problems.append(f'{where}, but no {mod}_<part>.c includes {header}: '
                            f'stale declaration')
            continue
        for s in mine:
            parts[s] = mod
    return parts, problems


def module_of(src, parts):
    """api/common.c -> api/common; jobs/sched_core.c -> jobs/sched when
    jobs/sched is declared split for size (and the file includes
    jobs/sched_internal.h), else jobs/sched_core"""
    return parts.get(src, os.path.splitext(src)[0])


def objects(build):
    root = os.path.join(build, 'CMakeFiles')
    for dirpath, dirnames, filenames in os.walk(root):
        if not os.path.basename(dirpath).startswith('ty_') and '/ty_' not in dirpath:
            continue
        for name in filenames:
            if name.endswith('.o'):
                yield os.path.join(dirpath, name)


def symbols(obj):
    out = subprocess.run(['nm', '-P', obj], capture_output=True, text=True,
                         check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == 'U':
            undefined.add(name)
        elif kind in DEFINED:
            defined.add(name)
    return defined, undefined


def source_of(obj, build, root):
    """CMakeFiles/ty_api.dir/api/common.c.o -> api/common.c, when that file
    still exists (an object left by a renamed file is not the product)."""
    rel = os.path.relpath(obj, build)
    m = re.match(r'CMakeFiles/ty_[a-z0-9_]+\.dir/(.+\.(c|cu))\.o$', rel)
    if not m or not os.path.exists(os.path.join(root, m.group(1))):
        return None
    return m.group(1)


def graph(build, root, parts):
    """The modules and the edges {module: {module: first symbol}} among
    them; parts maps the merged x_<part> files to their module."""
    owner, uses = {}, {}
    for obj, src in sorted(objects_of(build, root).items()):
        mod = module_of(src, parts)
        defined, undefined = symbols(obj)
        for s in defined:
            owner.setdefault(s, mod)
        uses.setdefault(mod, set()).update(undefined)
    edges = {}
    for mod, names in uses.items():
        for s in sorted(names):
            other = owner.get(s)
            if other and other != mod:
                edges.setdefault(mod, {}).setdefault(other, s)
    return uses.keys(), edges


def objects_of(build, root):
    """{object: its source} for the objects of existing product sources."""
    objs = {}
    for obj in objects(build):
        src = source_of(obj, build, root)
        if src:
            objs[obj] = src
    return objs


def circles(nodes, edges):
    graph = {v: set(edges.get(v, {})) for v in nodes}
    for targets in list(graph.values()):
        for w in targets:
            graph.setdefault(w, set())
    out = []
    for comp in scc.circles(graph):
        links = [f'{a} -> {b} ({edges[a][b]})' for a in comp
                 for b in sorted(edges.get(a, {})) if b in comp]
        out.append(f'call circle among {", ".join(comp)}: ' + '; '.join(links))
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    build = os.path.abspath(sys.argv[1])
    root = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), '..', '..'))
    declared, problems = split_modules(root)
    sources = sorted(set(objects_of(build, root).values()))
    if not sources:
        print(f'calls: no ty_* objects under {build}/CMakeFiles; build first')
        return 1
    parts, stale = split_parts(root, sources, declared)
    problems += stale
    nodes, edges = graph(build, root, parts)
    problems += circles(nodes, edges)
    for p in problems:
        print(p)
    if problems:
        print(f'calls: {len(problems)} problem(s) (call circles among the modules, '
              f'declarations of "Modules split for size" in ARCHITECTURE.md)')
        return 1
    split = '; '.join(
        f'{m} ({", ".join(os.path.basename(s) for s in sorted(parts) if parts[s] == m)})'
        for m in sorted(declared)) or 'none'
    print(f'calls: {len(list(nodes))} modules, no call circle; split for size: {split}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
