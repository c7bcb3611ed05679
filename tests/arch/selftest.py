#!/usr/bin/env python3
"""The arch checks on made-up trees, so none can pass by failing to look.

layers.py must name the upward include, the sideways one, the circle and
the folders missing from the table (top-level and nested), each with its
file and line, and pass the same tree once they are fixed. calls.py (on
objects compiled here) must find a call circle between two files, and one
between two files sharing an undeclared x_internal.h; pass that tree once
the module is declared split for size; and fail a stale or malformed
declaration. sizes.py must fail a 1,001-line file, pass a 1,000-line one,
and fail an allowed file without its reason or an allowed file that is
short again."""
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
    print('selftest: layers.py names each kind of problem (the unlisted '
          'folders top-level and nested) and passes a clean tree')
    failed = calls_selftest() + sizes_selftest()
    for f in failed:
        print(f)
    if failed:
        print(f'selftest: {len(failed)} case(s) failed')
        return 1
    return 0


def compile_objects(root, build, files):
    for rel in files:
        obj = os.path.join(build, 'CMakeFiles', 'ty_x.dir', rel + '.o')
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        subprocess.run(['cc', '-c', '-I', root, os.path.join(root, rel), '-o',
                        obj], check=True)


def split_doc(*bullets):
    """An ARCHITECTURE.md whose "Modules split for size" section has these
    bullets (each followed by an indented continuation line, as people
    write them), with a heading after it that ends the section."""
    body = ''.join(f'{b}\n  its reason, on a second line.\n' for b in bullets)
    return (f'# x\n\n## Layers\n\nThe table.\n\n### Modules split for size\n\n'
            f'{body}\n## Checks\n\n* `tests/arch/calls.py`: not a declaration.\n')


def calls(root, build):
    p = subprocess.run([sys.executable, os.path.join(HERE, 'calls.py'),
                        build, root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def case(failed, name, ok, rc, out):
    print(f'selftest: {"ok  " if ok else "FAIL"} {name}')
    if not ok:
        failed.append(f'selftest: {name}: rc {rc}, output:\n{out}')


def calls_selftest():
    """Two files calling each other are a circle; so are two files sharing
    the private x_internal.h, unless ARCHITECTURE.md declares x split for
    size; a stale or malformed declaration fails."""
    failed = []
    with tempfile.TemporaryDirectory() as root:
        build = os.path.join(root, 'build')
        write(root, 'x/a.c', 'int b(void);\nint a(void) { return b(); }\n')
        write(root, 'x/b.c', 'int a(void);\nint b(void) { return a() + 1; }\n')
        write(root, 'y/p_internal.h', 'int p_one(void);\nint p_two(void);\n')
        write(root, 'y/p_one.c', '#include "y/p_internal.h"\n'
              'int p_one(void) { return p_two(); }\n')
        write(root, 'y/p_two.c', '#include "y/p_internal.h"\n'
              'int p_two(void) { return p_one(); }\n')
        write(root, 'z/q_internal.h', 'int q_one(void);\n')
        write(root, 'z/q_one.c', 'int q_one(void) { return 1; }\n')
        compile_objects(root, build, ['x/a.c', 'x/b.c', 'y/p_one.c',
                                      'y/p_two.c', 'z/q_one.c'])

        write(root, 'ARCHITECTURE.md', split_doc())
        rc, out = calls(root, build)
        case(failed, 'calls: a circle between two files is reported, one '
             'symbol per edge', rc == 1 and 'call circle among x/a, x/b: '
             'x/a -> x/b (b); x/b -> x/a (a)' in out, rc, out)
        case(failed, 'calls: a circle between two files sharing an undeclared '
             'y/p_internal.h is reported', rc == 1 and
             'call circle among y/p_one, y/p_two' in out, rc, out)

        write(root, 'ARCHITECTURE.md', split_doc('* `y/p` (p_one.c, p_two.c)'))
        rc, out = calls(root, build)
        case(failed, 'calls: the same tree with y/p declared split for size '
             'reports only the x circle', rc == 1 and 'circle among x/a, x/b'
             in out and 'circle among y/' not in out and
             'y/p' not in out, rc, out)

        write(root, 'x/b.c', 'int b(void) { return 1; }\n')
        compile_objects(root, build, ['x/b.c'])
        rc, out = calls(root, build)
        case(failed, 'calls: the tree without the x circle, y/p declared, '
             'passes', rc == 0 and 'split for size: y/p (p_one.c, p_two.c)'
             in out, rc, out)

        for name, doc, want in [
                ('a declared module with no x_internal.h',
                 split_doc('* `y/p`', '- `y/gone` (gone_a.c)'),
                 'y/gone is declared split for size, but there is no '
                 'y/gone_internal.h: stale declaration'),
                ('a declared module whose x_internal.h no x_<part> file '
                 'includes', split_doc('* `y/p`', '* `z/q`'),
                 'no z/q_<part>.c includes z/q_internal.h: stale declaration'),
                ('a bullet not starting with the module in backticks',
                 split_doc('* `y/p`', '* y/p.c is split'),
                 'must start with the module in backticks'),
                ('a module declared twice', split_doc('* `y/p`', '* `y/p`'),
                 'y/p is declared split for size twice')]:
            write(root, 'ARCHITECTURE.md', doc)
            rc, out = calls(root, build)
            case(failed, f'calls: {name} fails', rc == 1 and want in out,
                 rc, out)

        write(root, 'z/q_one.c', '#include "y/p_internal.h"\n'
              'int q_one(void) { return p_one(); }\n')
        compile_objects(root, build, ['z/q_one.c'])
        write(root, 'ARCHITECTURE.md', split_doc('* `y/p`'))
        rc, out = calls(root, build)
        case(failed, 'calls: a declared module whose x_internal.h is included '
             'from another folder fails', rc == 1 and 'y/p_internal.h is '
             'included from outside its folder (z/q_one.c)' in out, rc, out)
    return failed


def numbered(n, head=''):
    return head + ''.join(f'int v{i};\n' for i in range(n - head.count('\n')))


def sizes_selftest():
    """1,001 lines fail, 1,000 pass; an allowed file needs its reason in
    its head comment and must still be long."""
    sys.path.insert(0, HERE)
    import sizes
    failed = []

    def script(root):
        p = subprocess.run([sys.executable, os.path.join(HERE, 'sizes.py'),
                            root], capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr

    def checked(root, allowed):
        problems, _ = sizes.check(root, allowed)
        return (1 if problems else 0), '\n'.join(problems)

    with tempfile.TemporaryDirectory() as root:
        write(root, 'ARCHITECTURE.md', TABLE)
        write(root, 'common/small.h', numbered(10))
        write(root, 'top/edge.c', numbered(1000))
        write(root, 'left/big.cu', numbered(1001))
        write(root, 'tests/huge.c', numbered(3000))
        write(root, 'bench/huge.c', numbered(3000))
        write(root, 'build/huge.c', numbered(3000))
        rc, out = script(root)
        case(failed, 'sizes: a 1,001-line file fails (named with its count), '
             'a 1,000-line one and tests/, bench/, build/ do not',
             rc == 1 and 'left/big.cu:1001: 1,001 lines' in out and
             'edge.c' not in out and 'huge' not in out, rc, out)

        write(root, 'left/big.cu', numbered(1000))
        rc, out = script(root)
        case(failed, 'sizes: the tree at 1,000 lines passes and names the '
             'largest files', rc == 0 and 'the largest: left/big.cu 1,000, '
             'top/edge.c 1,000, common/small.h 10' in out, rc, out)

        write(root, 'left/big.cu', numbered(1200, '/* big.cu: kernels.\n *\n'
                                            ' */\n'))
        rc, out = checked(root, {'left/big.cu'})
        case(failed, 'sizes: an allowed file without its reason fails',
             rc == 1 and 'left/big.cu:1: 1,200 lines and allowed, but no line'
             in out, rc, out)

        write(root, 'left/big.cu', numbered(1200, '/* big.cu: kernels.\n *\n'
                                            ' * It is longer than 1,000 lines '
                                            'because the kernels share one\n'
                                            ' * launch table.\n */\n'))
        rc, out = checked(root, {'left/big.cu'})
        case(failed, 'sizes: an allowed file with its reason passes',
             rc == 0, rc, out)

        rc, out = checked(root, {'left/big.cu', 'top/edge.c', 'top/gone.c'})
        case(failed, 'sizes: an allowed file no longer over the limit, or '
             'gone, is a stale entry', rc == 1 and
             'top/edge.c:1: allowed over 1,000 lines in tests/arch/sizes.py '
             'but has 1,000: stale entry' in out and
             'top/gone.c:1: allowed' in out and 'big.cu' not in out, rc, out)
    return failed


if __name__ == '__main__':
    sys.exit(main())
