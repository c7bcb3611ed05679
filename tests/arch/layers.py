#!/usr/bin/env python3
"""The layer test: every #include of the product code runs down the layer
table of ARCHITECTURE.md, never up or sideways, and the include graph has no
circle.

The table is read from ARCHITECTURE.md (the rows of its "Layers" table whose
first cell is a level number), so the rule lives in one place. A folder may
include its own files, any folder on a lower level, and nothing else; a
sub-folder listed on its own row (models/cpu) is a folder of its own. A
file in a folder that the table does not list is an error too, top-level
(sched/) or nested (jobs/node/: a sub-folder is never counted as part of
the folder above it), so a new folder has to take a place in the table.

Usage: layers.py [repository root]   (exit 0: clean; 1: violations, listed
as file:line: message, one per line)
"""
import os
import re
import sys

import scc

PRODUCT_EXT = ('.c', '.h', '.cu', '.cuh')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_table(root):
    """{folder: level} from the Layers table of ARCHITECTURE.md."""
    path = os.path.join(root, 'ARCHITECTURE.md')
    levels = {}
    in_layers = False
    with open(path, encoding='utf-8') as f:
        for line in f:
            if line.startswith('## '):
                in_layers = line.strip().lower().startswith('## layers')
                continue
            if not in_layers or not line.startswith('|'):
                continue
            cells = [c.strip() for c in line.strip().strip('|').split('|')]
            if len(cells) < 2 or not cells[0].isdigit():
                continue
            for folder in re.findall(r'`([a-z0-9_/]+)/`', cells[1]):
                if folder in levels:
                    raise SystemExit(f'ARCHITECTURE.md: {folder}/ is listed twice')
                levels[folder] = int(cells[0])
    if not levels:
        raise SystemExit('ARCHITECTURE.md: no "## Layers" table with numbered rows')
    return levels


def folder_of(path, levels):
    """The table folder of path: the folder it is in, exactly. A sub-folder
    is not part of the folder above it (models/cpu/ has a row of its own;
    an unlisted jobs/node/ is not jobs/), so every folder that holds product
    code needs its own row."""
    d = os.path.dirname(path)
    return d if d in levels else None


# Top-level folders that are not product code (and build folders: any name
# starting with "build", and hidden ones).
NOT_PRODUCT = {'tests', 'bench', 'docker', 'web', 'scripts', 'var', 'shared'}


def product_files(root, levels):
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root:
            dirnames[:] = [d for d in dirnames if d not in NOT_PRODUCT and
                           not d.startswith(('.', 'build'))]
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(PRODUCT_EXT) and dirpath != root:
                yield os.path.relpath(os.path.join(dirpath, name), root)


def check(root):
    levels = read_table(root)
    problems = []
    graph = {}
    for rel in product_files(root, levels):
        src = folder_of(rel, levels)
        if src is None:
            problems.append(f'{rel}:1: its folder is not in the layer table of '
                            f'ARCHITECTURE.md ({os.path.dirname(rel)}/ needs a row of its own)')
            continue
        graph.setdefault(rel, [])
        with open(os.path.join(root, rel), encoding='utf-8', errors='replace') as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                if not os.path.exists(os.path.join(root, target)):
                    # generated or system-relative headers are not layers
                    continue
                graph[rel].append((target, lineno))
                dst = folder_of(target, levels)
                if dst is None or dst == src:
                    continue
                if levels[dst] > levels[src]:
                    problems.append(f'{rel}:{lineno}: includes "{target}": '
                                    f'{dst}/ (level {levels[dst]}) is above '
                                    f'{src}/ (level {levels[src]})')
                elif levels[dst] == levels[src]:
                    problems.append(f'{rel}:{lineno}: includes "{target}": '
                                    f'{dst}/ sits beside {src}/ (both level '
                                    f'{levels[src]}); a level\'s folders do not '
                                    f'include each other')
    problems += circles(graph)
    return problems, levels


def module(path):
    """x.c, x.h and x_internal.h (the private header of a module split over
    several files) are one module; a .cuh is its own."""
    base, ext = os.path.splitext(path)
    if ext not in ('.c', '.h', '.cu'):
        return path
    return base[:-len('_internal')] if base.endswith('_internal') else base


def circles(graph):
    """Circles among modules (x.c + x.h), by Tarjan's algorithm."""
    edges = {}
    where = {}
    for src, targets in graph.items():
        a = module(src)
        edges.setdefault(a, set())
        for target, lineno in targets:
            b = module(target)
            if a != b:
                edges[a].add(b)
                edges.setdefault(b, set())
                where.setdefault((a, b), f'{src}:{lineno}')
    out = []
    for comp in scc.circles(edges):
        links = [where[(a, b)] for a in comp for b in sorted(edges[a])
                 if b in comp]
        out.append(f'{links[0]}: include circle among '
                   f'{", ".join(comp)} (includes at {", ".join(links)})')
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), '..', '..')
    root = os.path.abspath(root)
    problems, levels = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f'layers: {len(problems)} problem(s); the table is in ARCHITECTURE.md')
        return 1
    print(f'layers: every include runs down the table ({len(levels)} folders), no circles')
    return 0


if __name__ == '__main__':
    sys.exit(main())
