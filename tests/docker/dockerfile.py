"""A small Dockerfile reader for the docker tests: instructions with their
continuation lines joined and comments dropped, grouped into stages."""
import json
import re


def instructions(text):
    """[(lineno, KEYWORD, args)] for a Dockerfile's text."""
    out, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue                       # a comment inside a continuation
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        kw, _, args = buf.partition(" ")
        out.append((start, kw.upper(), args.strip()))
        buf = ""
    if buf:
        raise ValueError(f"line {start}: the file ends inside a continuation")
    return out


def stages(text):
    """[{'from': image, 'name': alias or None, 'line': n, 'ins': [...]}]."""
    result = []
    for n, kw, args in instructions(text):
        if kw == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            if not words:
                raise ValueError(f"line {n}: FROM names no image")
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            result.append({"from": words[0], "name": name, "line": n, "ins": []})
        elif not result:
            if kw not in ("ARG",):
                raise ValueError(f"line {n}: {kw} before the first FROM")
        else:
            result[-1]["ins"].append((n, kw, args))
    if not result:
        raise ValueError("no FROM instruction")
    return result


def last(stage, kw):
    found = [a for _, k, a in stage["ins"] if k == kw]
    return found[-1] if found else None


def exec_form(args, what):
    """The JSON array of an exec-form CMD/ENTRYPOINT/HEALTHCHECK CMD."""
    try:
        v = json.loads(args)
    except ValueError:
        raise ValueError(f"{what} is not in JSON (exec) form: {args}")
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError(f"{what} is not a JSON array of strings: {args}")
    return v


def healthcheck(stage):
    """(options, command list) of the stage's HEALTHCHECK, or None."""
    args = last(stage, "HEALTHCHECK")
    if args is None:
        return None
    m = re.match(r"((?:--\S+\s+)*)CMD\s+(.*)$", args)
    if not m:
        raise ValueError(f"HEALTHCHECK without CMD: {args}")
    return m.group(1).split(), exec_form(m.group(2), "HEALTHCHECK CMD")


def problems(text):
    """What the image rules forbid, as messages (empty when all is well):
    every FROM names a pinned tag (not latest, no variable, no bare name)
    unless it names an earlier stage; COPY --from names an earlier stage;
    the final stage ends as a non-root USER."""
    errs = []
    try:
        st = stages(text)
    except ValueError as e:
        return [str(e)]
    names = set()
    for s in st:
        img, n = s["from"], s["line"]
        if img in names:
            pass
        elif "$" in img:
            errs.append(f"line {n}: FROM {img}: a variable base image cannot be checked; name the tag")
        elif img == "scratch":
            pass
        else:
            ref = img.split("@", 1)[0]
            tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else None
            if tag is None and "@" not in img:
                errs.append(f"line {n}: FROM {img}: no tag (that is :latest); pin one")
            elif tag == "latest":
                errs.append(f"line {n}: FROM {img}: uses latest; pin a version tag")
        for ln, kw, args in s["ins"]:
            if kw == "COPY":
                m = re.search(r"--from=(\S+)", args)
                if m and m.group(1) not in names and not re.match(r"^[\w.-]+[/:]", m.group(1)):
                    errs.append(f"line {ln}: COPY --from={m.group(1)} names no earlier stage")
        if s["name"]:
            names.add(s["name"])
    final = st[-1]
    user = last(final, "USER")
    if user is None:
        errs.append("the final stage has no USER: the image would run as root")
    else:
        u = user.split(":", 1)[0].strip()
        if u in ("root", "0", ""):
            errs.append(f"the final stage's last USER is {user}: root")
    return errs
