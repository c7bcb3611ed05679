#!/usr/bin/env python3
"""Every relative link and #anchor of the docs resolves.

Reads README.md, ARCHITECTURE.md and every .md under docs/ (from the
repository root given, default this checkout) and checks each link and
image outside code: a relative path must name a file or folder of the
repository (resolved from the linking file's folder, never outside the
repository); an #anchor, alone or after a .md path, must be one of the
target's headings as GitHub makes anchors of them (lower case, punctuation
dropped, spaces made hyphens, -1, -2 for repeats). Links with a scheme
(https:, mailto:) are not followed. Prints each broken link with its file
and line; exit 1 when there is one.

    links.py [ROOT]
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mdtools  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def check(root):
    root = os.path.realpath(root)
    files = mdtools.doc_files(root)
    anchor_cache = {}

    def anchors_of(path):
        if path not in anchor_cache:
            anchor_cache[path] = mdtools.anchors(mdtools.read(path))
        return anchor_cache[path]

    broken = []
    count = 0
    for rel in files:
        path = os.path.join(root, rel)
        for line, target in mdtools.links(mdtools.read(path)):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
                continue
            count += 1
            where, _, anchor = target.partition("#")
            where = re.sub(r"%20", " ", where.split("?")[0])
            dest = os.path.realpath(os.path.join(os.path.dirname(path), where)) if where else path
            if os.path.relpath(dest, root).startswith(".."):
                broken.append((rel, line, target, "points outside the repository"))
                continue
            if not os.path.exists(dest):
                broken.append((rel, line, target, f"no such file: {os.path.relpath(dest, root)}"))
                continue
            if anchor:
                if not dest.endswith(".md"):
                    broken.append((rel, line, target, "an anchor into a file that is not Markdown"))
                elif anchor not in anchors_of(dest):
                    near = sorted(a for a in anchors_of(dest) if a[:4] == anchor[:4])[:5]
                    hint = f" (headings there: {', '.join(near)})" if near else ""
                    broken.append((rel, line, target,
                                   f"no heading of {os.path.relpath(dest, root)} makes #{anchor}{hint}"))
    return files, count, broken


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else ROOT
    files, count, broken = check(root)
    for rel, line, target, why in broken:
        print(f"{rel}:{line}: broken link ({target}): {why}")
    if broken:
        print(f"FAIL: {len(broken)} of {count} relative links in {len(files)} files are broken")
        return 1
    print(f"PASS: {count} relative links and anchors in {len(files)} files resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
