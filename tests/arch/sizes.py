#!/usr/bin/env python3
"""The size check: no product file over 1,000 lines.

The product files are those layers.py walks, found the same way (its
code): every .c, .h, .cu and .cuh under the folders of the layer table of
ARCHITECTURE.md, not tests/, bench/ or build folders. (A file in a folder
the table lacks is measured too; layers.py fails on its folder.) A
file that must stay longer is on ALLOWED below AND says why in its head
comment: a line within its first 30 that contains "longer than 1,000 lines
because". An allowed file that is no longer over the limit, or no longer
exists, is a stale entry and fails too, so the list cannot rot.

Usage: sizes.py [repository root]   (exit 0: clean, the five largest files
printed; 1: problems, listed as file:line: message, one per line)
"""
import os
import re
import sys

import layers

LIMIT = 1000
HEAD = 30
REASON = re.compile(r'longer than 1,?000 lines because', re.I)

# Files allowed over LIMIT lines, relative to the repository root. Each must
# also say why in its head comment (see REASON). Keep it empty if you can.
ALLOWED = set()


def lines(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        return sum(1 for _ in f)


def has_reason(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        for i, line in enumerate(f):
            if i >= HEAD:
                return False
            if REASON.search(line):
                return True
    return False


def check(root, allowed=ALLOWED):
    """(problems, [(lines, file)] of every product file, largest first)"""
    levels = layers.read_table(root)
    sizes = sorted(((lines(os.path.join(root, rel)), rel)
                    for rel in layers.product_files(root, levels)),
                   key=lambda x: (-x[0], x[1]))
    found = {rel: n for n, rel in sizes}
    problems = []
    for n, rel in sizes:
        if n <= LIMIT:
            continue
        if rel not in allowed:
            problems.append(f'{rel}:{LIMIT + 1}: {n:,} lines, over the limit of '
                            f'{LIMIT:,}; split it (or, if it must stay longer, '
                            f'add it to ALLOWED in tests/arch/sizes.py and say '
                            f'why in its head comment)')
        elif not has_reason(os.path.join(root, rel)):
            problems.append(f'{rel}:1: {n:,} lines and allowed, but no line of '
                            f'its first {HEAD} says why ("longer than 1,000 '
                            f'lines because ...")')
    for rel in sorted(allowed):
        if rel not in found:
            problems.append(f'{rel}:1: allowed over {LIMIT:,} lines in '
                            f'tests/arch/sizes.py but not a product file: '
                            f'stale entry')
        elif found[rel] <= LIMIT:
            problems.append(f'{rel}:1: allowed over {LIMIT:,} lines in '
                            f'tests/arch/sizes.py but has {found[rel]:,}: '
                            f'stale entry')
    return problems, sizes


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), '..', '..')
    root = os.path.abspath(root)
    problems, sizes = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f'sizes: {len(problems)} problem(s); no product file over '
              f'{LIMIT:,} lines unless allowed, with its reason')
        return 1
    top = ', '.join(f'{rel} {n:,}' for n, rel in sizes[:5])
    print(f'sizes: {len(sizes)} product files, none over {LIMIT:,} lines '
          f'({len(ALLOWED)} allowed); the largest: {top}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
