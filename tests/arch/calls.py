#!/usr/bin/env python3
"""The call-graph half of the layer test: no two modules of the product
call each other, directly or round a circle.

An include circle can hide behind a shared header (api/api.h declares what
a dozen files define), so this reads what the compiler produced instead:
`nm` on every object of the ty_* libraries gives each object's defined and
undefined symbols, hence which module calls (or reads) which. A module is
x.c / x.cu with x.h and x_internal.h, as in layers.py, plus the files
x_<part>.c that include x_internal.h: one module split over several files
for size (jobs/sched_*.c, jobs/service_lifecycle.c), whose halves may call
each other. Any circle among modules is reported with one symbol per edge. (Calls between the folders'
libraries are held to the layer table by the link itself: each ty_<folder>
library links only the folders below it, so an upward call does not link.)

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


def private_headers(root, sources):
    """The x_internal.h headers that only files of their own folder include
    (a module's private header, not a layer's shared one)."""
    users = {}
    for src in sources:
        for inc in includes(os.path.join(root, src)):
            if inc.endswith('_internal.h'):
                users.setdefault(inc, set()).add(os.path.dirname(src))
    return {h for h, folders in users.items()
            if folders == {os.path.dirname(h)}}


def module_of(src, private, root):
    """api/common.c -> api/common; jobs/sched_core.c, which includes the
    private jobs/sched_internal.h, -> jobs/sched"""
    base = os.path.splitext(src)[0]
    folder, name = os.path.split(base)
    if '_' in name:
        owner = f'{folder}/{name.split("_")[0]}'
        if f'{owner}_internal.h' in private and \
                f'{owner}_internal.h' in includes(os.path.join(root, src)):
            return owner
    return base


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
    m = re.match(r'CMakeFiles/ty_[a-z]+\.dir/(.+\.(c|cu))\.o$', rel)
    if not m or not os.path.exists(os.path.join(root, m.group(1))):
        return None
    return m.group(1)


def graph(build, root):
    objs = {}
    for obj in objects(build):
        src = source_of(obj, build, root)
        if src:
            objs[obj] = src
    private = private_headers(root, objs.values())
    owner, uses = {}, {}
    for obj, src in sorted(objs.items()):
        mod = module_of(src, private, root)
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
    nodes, edges = graph(build, root)
    if not nodes:
        print(f'calls: no ty_* objects under {build}/CMakeFiles; build first')
        return 1
    problems = circles(nodes, edges)
    for p in problems:
        print(p)
    if problems:
        print(f'calls: {len(problems)} call circle(s) among the modules')
        return 1
    print(f'calls: {len(list(nodes))} modules, no call circle')
    return 0


if __name__ == '__main__':
    sys.exit(main())
