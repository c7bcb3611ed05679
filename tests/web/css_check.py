#!/usr/bin/env python3
"""The dashboard's stylesheets parse, and every block they open they close.

A browser forgives a stylesheet everything: a `{` that is never closed is
closed at the end of the file, so a forgotten `}` after an @media block
silently moves every later rule inside it (issue 30: at desktop widths the
class-balance bars and Try it's marks vanished, and no test saw it). This
check reads each web/*.css with tinycss2 (Debian's python3-tinycss2) and
fails on:

* a block ({}, (), []) or function still open at the end of the file,
  naming the line where it opened;
* a `}`, `)` or `]` that closes nothing;
* a parse error in a rule, an at-rule's rules or a rule's declarations
  (a rule inside a rule's declarations counts: the dashboard does not nest).

Usage: css_check.py [FILE.css or FOLDER ...]   (default: the repository's web/)
Exit 0 when every file is clean, 1 listing the problems, 2 on bad usage,
77 (ctest's skip) never: without tinycss2 it fails, since `make test`
installs it.
"""
import glob
import os
import sys

try:
    import tinycss2
except ImportError:
    sys.exit("css_check: python3-tinycss2 is missing (apt-get install python3-tinycss2; "
             "scripts/setup.sh test installs it)")

# At-rules whose block holds rules; any other at-rule's block holds declarations.
RULE_BLOCKS = {"media", "supports", "layer", "container", "document"}
CLOSER = {"{} block": "}", "() block": ")", "[] block": "]", "function": ")"}


def line_starts(text):
    """The offset of each line's first character (index 0 is line 1)."""
    starts = [0]
    for i, c in enumerate(text):
        if c == "\n":
            starts.append(i + 1)
    return starts


def unbalanced(text):
    """(line, message) for each unclosed block and each stray closer."""
    starts = line_starts(text)
    problems = []

    def walk(nodes):
        for n in nodes:
            if n.type == "error":
                problems.append((n.source_line, f"{n.message}: closes nothing"))
            if n.type in CLOSER:
                at = starts[n.source_line - 1] + n.source_column - 1
                # serialize() writes the closer a block's source omits, so an
                # unclosed block's text would run past the end of the file.
                end = at + len(tinycss2.serialize([n]))
                if end > len(text) or text[end - 1] != CLOSER[n.type]:
                    opener = "function " + n.name + "(" if n.type == "function" else n.type[0]
                    problems.append((n.source_line, f"'{opener}' opened here is never closed"))
                walk(n.arguments if n.type == "function" else n.content)

    walk(tinycss2.parse_component_value_list(text, skip_comments=False))
    return problems


def parse_errors(text):
    """(line, message) for each parse error in the rules and declarations."""
    problems = []

    def declarations(content):
        for d in tinycss2.parse_declaration_list(content, skip_comments=True, skip_whitespace=True):
            if d.type == "error":
                problems.append((d.source_line, f"declaration: {d.message}"))
            elif d.type == "declaration" and not tinycss2.serialize(d.value).strip():
                problems.append((d.source_line, f"declaration: '{d.name}' has no value"))
            elif d.type in ("at-rule", "qualified-rule"):
                problems.append((d.source_line, "a rule inside a rule's declarations (a missing '}'?)"))

    def rules(nodes):
        for r in nodes:
            if r.type == "error":
                problems.append((r.source_line, f"rule: {r.message}"))
            elif r.type == "qualified-rule":
                if not tinycss2.serialize(r.prelude).strip():
                    problems.append((r.source_line, "rule: a block with no selector"))
                declarations(r.content)
            elif r.type == "at-rule" and r.content is not None:
                if r.lower_at_keyword in RULE_BLOCKS or r.lower_at_keyword.endswith("keyframes"):
                    rules(tinycss2.parse_rule_list(r.content, skip_comments=True, skip_whitespace=True))
                else:
                    declarations(r.content)

    rules(tinycss2.parse_stylesheet(text, skip_comments=True, skip_whitespace=True))
    return problems


def check_file(path):
    """The problems of one file, as 'path:line: message' lines, in line order."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        return [f"{path}: cannot read: {e}"]
    found = sorted(set(unbalanced(text) + parse_errors(text)))
    return [f"{path}:{line}: {msg}" for line, msg in found]


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    targets = argv[1:] or [os.path.normpath(os.path.join(here, "..", "..", "web"))]
    files = []
    for t in targets:
        files += sorted(glob.glob(os.path.join(t, "*.css"))) if os.path.isdir(t) else [t]
    if not files:
        print(f"css_check: no .css files in {' '.join(targets)}", file=sys.stderr)
        return 2
    problems = [p for f in files for p in check_file(f)]
    for p in problems:
        print(p)
    if problems:
        print(f"css_check: {len(problems)} problems in {len(files)} stylesheets")
        return 1
    print(f"css_check: {len(files)} stylesheets parse and close every block: {' '.join(files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
