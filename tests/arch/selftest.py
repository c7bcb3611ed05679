#!/usr/bin/env python3
"""layers.py on a made-up tree: it must name the upward include, the
sideways one, the circle and the folders missing from the table (a
top-level one and a sub-folder of a listed one), each with
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
        write(root, 'top/sub/n.h', '#include "common/a.h"\n')
        rc, out = run(root)
        want = ['common/b.c:3: includes "top/t.h"',
                'left/l.c:2: includes "right/r.h"',
                'include circle among common/c.h, common/d.h',
                'stray/s.c:1: its folder is not in the layer table',
                'top/sub/n.h:1: its folder is not in the layer table']
        missing = [w for w in want if w not in out.replace('common/c, common/d', 'common/c.h, common/d.h')]
        if rc != 1 or missing:
            print(f'selftest: rc {rc}, missing {missing}; output:\n{out}')
            return 1
        os.remove(os.path.join(root, 'common/b.c'))
        write(root, 'left/l.c', '#include "common/a.h"\n')
        write(root, 'common/d.h', '\n')
        os.remove(os.path.join(root, 'stray/s.c'))
        os.remove(os.path.join(root, 'top/sub/n.h'))
        rc, out = run(root)
        if rc != 0:
            print(f'selftest: the fixed tree fails (rc {rc}):\n{out}')
            return 1
    rc = calls_selftest()
    if rc:
        return rc
    print('selftest: layers.py names each kind of problem and passes a clean '
          'tree; calls.py finds a call circle and passes without it')
    return 0


def compile_objects(root, build, files):
    for rel in files:
        obj = os.path.join(build, 'CMakeFiles', 'ty_x.dir', rel + '.o')
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        subprocess.run(['cc', '-c', '-I', root, os.path.join(root, rel), '-o',
                        obj], check=True)


def calls_selftest():
    """Two files calling each other are a circle; two halves of one module
    (x_a.c and x_b.c sharing the private x_internal.h) are not."""
    with tempfile.TemporaryDirectory() as root:
        build = os.path.join(root, 'build')
        write(root, 'x/a.c', 'int b(void);\nint a(void) { return b(); }\n')
        write(root, 'x/b.c', 'int a(void);\nint b(void) { return a() + 1; }\n')
        write(root, 'y/p_internal.h', 'int p_one(void);\nint p_two(void);\n')
        write(root, 'y/p_one.c', '#include "y/p_internal.h"\n'
              'int p_one(void) { return p_two(); }\n')
        write(root, 'y/p_two.c', '#include "y/p_internal.h"\n'
              'int p_two(void) { return p_one(); }\n')
        compile_objects(root, build, ['x/a.c', 'x/b.c', 'y/p_one.c', 'y/p_two.c'])
        p = subprocess.run([sys.executable, os.path.join(HERE, 'calls.py'),
                            build, root], capture_output=True, text=True)
        if p.returncode != 1 or 'call circle among x/a, x/b' not in p.stdout \
                or 'y/' in p.stdout:
            print(f'selftest: calls.py rc {p.returncode}:\n{p.stdout}{p.stderr}')
            return 1
        write(root, 'x/b.c', 'int b(void) { return 1; }\n')
        compile_objects(root, build, ['x/b.c'])
        p = subprocess.run([sys.executable, os.path.join(HERE, 'calls.py'),
                            build, root], capture_output=True, text=True)
        if p.returncode != 0:
            print(f'selftest: calls.py fails a clean tree:\n{p.stdout}{p.stderr}')
            return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
