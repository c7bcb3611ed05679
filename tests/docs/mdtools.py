"""Markdown as the docs checks read it: fenced code blocks, headings and
their GitHub anchors, links, inline code. A small reader for the subset the
docs use (ATX headings, fenced blocks, inline links), not a full CommonMark
parser; what it does not understand it leaves alone rather than guesses.
"""
import os
import re

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target "title") and ![alt](target); the text may hold `code` and
# one level of brackets.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"<(?:a|img)\s[^>]*?(?:href|src)=\"([^\"]+)\"", re.I)
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def blocks(text):
    """Fenced code blocks: (language, line of the first content line
    (1-based), content lines)."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        close = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence))
        start = i + 1
        j = start
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        out.append((lang, start + 1, lines[start:j]))
        i = j + 1
    return out


def prose_lines(text):
    """(line number, line) of every line outside fenced code blocks."""
    inside = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if inside is None and m:
            inside = m.group(1)
            continue
        if inside is not None:
            if re.match(r"^ {0,3}" + re.escape(inside[0]) + "{%d,}\\s*$" % len(inside), line):
                inside = None
            continue
        yield n, line


def inline_code(line):
    """The inline code spans of one line."""
    return [m.group(2).strip() for m in INLINE_CODE.finditer(line)]


def strip_inline_code(line):
    return INLINE_CODE.sub("", line)


def slug(heading):
    """GitHub's anchor for a heading's text: the rendered text (code spans,
    links and emphasis reduced to their words), lower case, every character
    that is not a letter, digit, space, hyphen or underscore dropped, spaces
    made hyphens."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links: their text
    parts = []
    for k, piece in enumerate(re.split(r"(`+[^`]*`+)", t)):
        if k % 2:                                           # a code span: as written
            parts.append(piece.strip("`"))
        else:                                               # HTML and emphasis go
            piece = re.sub(r"<[^>]+>", "", piece)
            parts.append(re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", piece))
    t = "".join(parts).strip().lower()
    t = "".join(c for c in t if c.isalnum() or c in " -_")
    return t.replace(" ", "-")


def anchors(text):
    """Every heading's anchor, numbered -1, -2 ... when repeated, as GitHub
    numbers them; and the ids of explicit <a name|id="..."> tags."""
    seen = {}
    out = set()
    for _, line in prose_lines(text):
        m = HEADING.match(line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            out.add(s if n == 0 else f"{s}-{n}")
            seen[s] = n + 1
        for a in re.finditer(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"", line, re.I):
            out.add(a.group(1))
    return out


def links(text):
    """(line number, target) of every link and image outside code: inline
    links, reference definitions, and <a href> / <img src>."""
    out = []
    for n, line in prose_lines(text):
        m = REF_DEF.match(line)
        if m:
            out.append((n, m.group(1)))
            continue
        bare = strip_inline_code(line)
        out += [(n, m.group(1)) for m in LINK.finditer(bare)]
        out += [(n, m.group(1)) for m in HTML_LINK.finditer(bare)]
    return out


def doc_files(root):
    """The documents the checks read: README.md, ARCHITECTURE.md and every
    .md under docs/, as paths relative to root."""
    files = [f for f in ("README.md", "ARCHITECTURE.md") if os.path.exists(os.path.join(root, f))]
    for d, _, names in sorted(os.walk(os.path.join(root, "docs"))):
        for name in sorted(names):
            if name.endswith(".md"):
                files.append(os.path.relpath(os.path.join(d, name), root))
    return files
