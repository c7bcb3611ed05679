#!/usr/bin/env python3
"""Every `trainyard` command the docs show exists in the binary's help.

Reads README.md and every .md under docs/ and finds each invocation of
`trainyard` (or a path ending in /trainyard) in their code: fenced blocks,
and inline code spans. For each it checks, against the help the binary
prints itself:

* the command (the first word after the global options) is one that
  `trainyard --help` lists, under "Commands" (serve, version, keygen,
  worker, replica, help: the server side) or "Client commands";
* when `trainyard <command> --help` shows subcommands (its usage lines,
  `trainyard jobs submit ...`, name lower-case words after the command), the
  next word is one of them. In a fenced block the subcommand is required;
  inline code may name a command group alone (`trainyard tenants`);
* every option on the line (`--limit`, `-o`) is one that command's help
  shows, or a global option of `trainyard --help` for the client commands;
* every upload field of `trainyard datasets upload` (`FIELD=@FILE`,
  `FIELD=VALUE`: `max_categories=200`) is one `trainyard datasets --help`
  names as `FIELD=`, so a field the docs teach is in the help too.
  The options of commands whose help says they are started by the server
  (worker, replica: "not meant to be run by hand") are not checked: the
  server, not a person, passes them.

An invocation is a `trainyard` in a command's place: the first word of a
line or after a shell operator (`|`, `;`, `&&`, `$(`), past variable
assignments and wrappers (sudo, exec, env, time, nohup, setpriv and their
options). So `docker compose ... stop trainyard`, `--target trainyard` or
`bench/soak.py build/trainyard` are not invocations. The shell around one
(pipes, `;`, `&&`, comments) ends it. Prints each wrong one with its file and
line; exit 1 when there is one.

    cli_commands.py [path/to/trainyard [ROOT]]

The binary defaults to $TRAINYARD_BIN (set by CMake, as for the integration
suite), ROOT to this checkout.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mdtools  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
INVOKE = re.compile(r"^(?:[\w.~-]*/)*trainyard$")
OPTION = re.compile(r"^(--?[A-Za-z][\w-]*)")
INTERNAL = "not meant to be run by hand"
VALUE_OPTIONS = {"--url", "--key-file", "--cacert"}      # global options taking a value
SHELL_ENDS = {"|", "||", "&", "&&", ";", ";;", "(", ")", "<", ">", ">>", "<<", "<<<", "2>", "2>&1", "$("}
WRAPPERS = {"sudo", "exec", "env", "time", "nohup", "setpriv", "command", "then", "do", "!"}


class Help:
    """What the binary's help says: its commands, their subcommands and
    options."""

    def __init__(self, binary):
        self.binary = binary
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
        self.env["HOME"] = tempfile.mkdtemp(prefix="ty-cli-help-")
        self.env["XDG_CONFIG_HOME"] = os.path.join(self.env["HOME"], "config")
        top = self.run("--help")
        self.server, self.client, self.globals = set(), set(), set()
        section = None
        for line in top.split("\n"):
            if re.match(r"^Commands:", line):
                section = self.server
            elif re.match(r"^Client commands", line):
                section = self.client
            elif re.match(r"^Global options", line):
                section = self.globals
            elif not line.strip():
                section = None
            elif section is self.globals:
                self.globals.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", line))
            elif section is not None:
                m = re.match(r"^  ([a-z][\w-]*)\s", line)
                if m:
                    section.add(m.group(1))
        if not self.server or not self.client or "--json" not in self.globals:
            sys.exit(f"FAIL: cannot read the commands from `{binary} --help`:\n{top}")
        self.commands = self.server | self.client
        self.subs, self.options, self.internal, self.texts = {}, {}, set(), {}
        for cmd in sorted(self.commands - {"help"}):
            text = self.run(cmd, "--help")
            self.texts[cmd] = text
            subs = set()
            for m in re.finditer(r"(?im)^(?:usage:)?[ \t]*trainyard[ \t]+" + re.escape(cmd) + r"[ \t]+(\S+)", text):
                if re.match(r"^[a-z][a-z0-9-]*$", m.group(1)):
                    subs.add(m.group(1))
            self.subs[cmd] = subs
            self.options[cmd] = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text)) | {"--help", "-h"}
            if cmd in self.client:
                self.options[cmd] |= self.globals
            if INTERNAL in text:
                self.internal.add(cmd)
        self.options["help"] = {"--help", "-h"}
        self.subs["help"] = set()

    def run(self, *args):
        r = subprocess.run([self.binary, *args], env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        return r.stdout


def shell_words(text):
    """The words of a shell line, quotes removed, with the operators that
    end a command as words of their own; None when it does not parse."""
    lex = shlex.shlex(text, posix=True, punctuation_chars="|&;()<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        return list(lex)
    except ValueError:
        return None


def logical_lines(lines):
    """Lines of a code block with backslash continuations joined: (index of
    the first line, text)."""
    out, buf, first = [], "", None
    for k, line in enumerate(lines):
        if first is None:
            first = k
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((first, buf + line))
        buf, first = "", None
    if buf:
        out.append((first, buf))
    return out


def check_words(words, help_, block):
    """The problems of each trainyard invocation among a line's words, and
    how many invocations there were."""
    problems = []
    count = 0
    at_command = True                     # this word is in a command's place
    wrapped = False                       # ... after a wrapper (its options may follow)
    for i, w in enumerate(words):
        if w in SHELL_ENDS or w.endswith("$("):
            at_command, wrapped = True, False
            continue
        if not at_command:
            continue
        if re.match(r"^[A-Za-z_]\w*=", w) or w in WRAPPERS:
            wrapped = wrapped or w in WRAPPERS
            continue
        if wrapped and w.startswith("-"):
            continue
        at_command = False
        if not INVOKE.match(w):
            continue
        count += 1
        args = []
        for a in words[i + 1:]:
            if a in SHELL_ENDS or a.startswith("$(") or a in ("|", ";"):
                break
            args.append(a.strip("[]"))
        # The global options first, then the command.
        k = 0
        while k < len(args) and args[k].startswith("-"):
            name = args[k].split("=")[0]
            if name not in help_.globals:
                break
            k += 2 if name in VALUE_OPTIONS and "=" not in args[k] else 1
        if k >= len(args):
            if block and k == 0:
                problems.append(f"`{w}` without a command")
            continue
        cmd = args[k]
        if cmd not in help_.commands:
            problems.append(f"`trainyard {cmd}`: no such command in `trainyard --help` "
                            f"(commands: {', '.join(sorted(help_.commands))})")
            continue
        rest = args[k + 1:]
        subs = help_.subs.get(cmd, set())
        if subs:
            words_left = [a for a in rest if not a.startswith("-")]
            asks_help = any(a in ("--help", "-h") for a in rest) or any(a in ("--help", "-h") for a in args[:k])
            if words_left and words_left[0] not in subs and rest and not rest[0].startswith("-"):
                problems.append(f"`trainyard {cmd} {rest[0]}`: `trainyard {cmd} --help` has no "
                                f"subcommand {rest[0]} ({', '.join(sorted(subs))})")
                continue
            if block and not asks_help and (not rest or rest[0].startswith("-")):
                problems.append(f"`trainyard {cmd}` without a subcommand ({', '.join(sorted(subs))})")
                continue
        if cmd in help_.internal:
            continue
        if cmd == "datasets" and rest[:1] == ["upload"]:
            for a in rest[2:]:
                m = re.match(r"^([a-z_]+)=", a)
                if m and f"{m.group(1)}=" not in help_.texts.get(cmd, ""):
                    problems.append(f"`trainyard datasets upload`: field {m.group(1)} is not "
                                    f"in `trainyard datasets --help`")
        known = help_.options[cmd]
        for a in args[:k] + rest:
            m = OPTION.match(a)
            if m and a != "-" and m.group(1) not in known:
                problems.append(f"`trainyard {cmd}`: option {m.group(1)} is not in "
                                f"`trainyard {cmd} --help`")
    return problems, count


def check(binary, root):
    help_ = Help(binary)
    files = [f for f in mdtools.doc_files(root) if f != "ARCHITECTURE.md"]
    problems, seen = [], 0
    for rel in files:
        text = mdtools.read(os.path.join(root, rel))
        for _, first, lines in mdtools.blocks(text):
            for k, line in logical_lines(lines):
                if "trainyard" not in line:
                    continue
                words = shell_words(line)
                if words is None:
                    continue
                found, n = check_words(words, help_, block=True)
                seen += n
                problems += [(rel, first + k, p) for p in found]
        for n, line in mdtools.prose_lines(text):
            for span in mdtools.inline_code(line):
                if "trainyard" not in span:
                    continue
                words = shell_words(span)
                if words is None:
                    continue
                found, count = check_words(words, help_, block=False)
                seen += count
                problems += [(rel, n, p) for p in found]
    return files, seen, problems


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TRAINYARD_BIN")
    if not binary:
        sys.exit(__doc__)
    binary = os.path.abspath(binary)
    root = sys.argv[2] if len(sys.argv) > 2 else ROOT
    files, seen, problems = check(binary, root)
    for rel, line, p in problems:
        print(f"{rel}:{line}: {p}")
    if problems:
        print(f"FAIL: {len(problems)} of the commands shown in {len(files)} files are not in the CLI's help")
        return 1
    print(f"PASS: {seen} `trainyard` invocations in {len(files)} files match the CLI's help")
    return 0


if __name__ == "__main__":
    sys.exit(main())
