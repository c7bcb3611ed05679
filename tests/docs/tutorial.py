#!/usr/bin/env python3
"""The README's tutorial, run as a user runs it.

Takes the shell blocks (```sh or ```bash) of the README section that the
comment `<!-- tutorial... -->` marks (from the comment to the next heading of
the same or a higher level), joins them verbatim, in order, into one bash
session with `set -Eeuo pipefail`, and runs it against a live server that
this test starts on a free port with a temporary data folder: the way a user
pastes the blocks into a terminal after `make run`. The tutorial reads the
server's address and key from TRAINYARD_URL and TRAINYARD_KEY (defaulting to
what `make run` gives), so the test sets those and edits nothing.

It fails when any command of the tutorial fails (naming the README line),
when the whole run takes longer than the time limit, or when the checks
below, run in the same session after the tutorial, find its results wrong:
the job succeeded, the model predicts a class label for each of the four
examples with 10 probabilities summing to 1, and KServe's output is FP32
[4, 10].

    tutorial.py [path/to/trainyard [README.md]]

The binary defaults to $TRAINYARD_BIN (set by CMake, as for the integration
suite), the README to this checkout's.

Exit 1 with a message when the Fashion-MNIST files or jq are missing
(scripts/setup.sh test installs them): a tutorial that cannot run is a
failure here, not a skip.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mdtools  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MARK = re.compile(r"^<!--\s*tutorial\b")
FASHION = "/usr/share/datasets/fashion-mnist"
LIMIT_S = 110          # the whole tutorial, server start included

# Run after the tutorial, in its session: its variables are still set.
CHECKS = r'''
# ---- tests/docs/tutorial.py: the tutorial's results ----
trap - ERR
fail() { echo "tutorial check failed: $*" >&2; exit 1; }
[[ ${JOB:-} == job_* ]] || fail "JOB is '${JOB:-}', not a job id"
[[ ${MODEL:-} == mdl_* ]] || fail "MODEL is '${MODEL:-}', not a model id"
curl -fsS "${auth[@]}" "$TY/v1/jobs/$JOB" | jq -e '.status == "succeeded"' >/dev/null \
  || fail "job $JOB did not succeed"
jq '{inputs: [.items[].x]}' <<<"$EXAMPLES" \
  | curl -fsS "${auth[@]}" "$TY/v1/models/$MODEL/predict" -H 'Content-Type: application/json' -d @- \
  | jq -e '(.predictions | length) == 4
           and all(.predictions[]; type == "number")
           and all(.outputs[]; length == 10 and (add - 1 | fabs) < 1e-4)' >/dev/null \
  || fail "predict did not give 4 labels, each with 10 probabilities"
jq '{inputs: [{name: "input", datatype: "UINT8", shape: [4, 1, 28, 28], data: [.items[].x]}]}' <<<"$EXAMPLES" \
  | curl -fsS "${auth[@]}" "$TY/v2/models/fashion-mlp/infer" -H 'Content-Type: application/json' -d @- \
  | jq -e '.outputs[0].datatype == "FP32" and .outputs[0].shape == [4, 10]' >/dev/null \
  || fail "KServe infer did not give FP32 [4, 10]"
echo "tutorial checks: ok"
'''


def tutorial_blocks(readme):
    """[(README line of the block's first line, lines)] of the marked
    section's shell blocks."""
    text = mdtools.read(readme)
    lines = text.split("\n")
    start = next((i for i, l in enumerate(lines) if MARK.match(l)), None)
    if start is None:
        sys.exit(f"{readme}: no <!-- tutorial --> comment marks the tutorial")
    head = next((i for i in range(start + 1, len(lines)) if mdtools.HEADING.match(lines[i])), None)
    if head is None:
        sys.exit(f"{readme}: no heading follows the <!-- tutorial --> comment")
    level = len(mdtools.HEADING.match(lines[head]).group(1))
    end = len(lines)
    for n, line in mdtools.prose_lines(text):
        m = mdtools.HEADING.match(line)
        if n - 1 > head and m and len(m.group(1)) <= level:
            end = n - 1
            break
    out = [(first, body) for lang, first, body in mdtools.blocks(text)
           if lang in ("sh", "bash") and head < first - 1 < end]
    if not out:
        sys.exit(f"{readme}: the tutorial section (line {head + 1}) has no sh or bash blocks")
    return out


def script(blocks):
    """The session's text, and for each of its lines the README line it
    came from (0: added here)."""
    text = ["set -Eeuo pipefail",
            'trap \'echo "tutorial: exit status $? at script line $LINENO: $BASH_COMMAND" >&2\' ERR']
    origin = [0, 0]
    for first, body in blocks:
        text.append(f"echo '>>> README.md line {first}' >&2")
        origin.append(0)
        for k, line in enumerate(body):
            text.append(line)
            origin.append(first + k)
    for line in CHECKS.split("\n"):
        text.append(line)
        origin.append(0)
    return "\n".join(text) + "\n", origin


def start_server(binary, data, log):
    srv = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--data", data],
                           stdout=subprocess.PIPE, stderr=log, text=True,
                           start_new_session=True)
    for line in srv.stdout:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return srv, f"http://127.0.0.1:{m.group(1)}"
    srv.wait()
    return None, None


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TRAINYARD_BIN")
    if not binary:
        sys.exit(__doc__)
    binary = os.path.abspath(binary)
    readme = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "README.md")
    missing = [f for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
               if not os.path.exists(os.path.join(FASHION, f))]
    if missing:
        sys.exit(f"FAIL: {FASHION}/{missing[0]} is missing: apt-get install dataset-fashion-mnist "
                 "(scripts/setup.sh test)")
    for tool in ("jq", "curl", "bash"):
        if not shutil.which(tool):
            sys.exit(f"FAIL: {tool} is missing (scripts/setup.sh test installs it)")

    blocks = tutorial_blocks(readme)
    text, origin = script(blocks)
    tmp = tempfile.mkdtemp(prefix="ty-tutorial-")
    srv = None
    t0 = time.monotonic()
    try:
        log = open(os.path.join(tmp, "server.log"), "w")
        srv, url = start_server(binary, os.path.join(tmp, "var"), log)
        if not srv:
            sys.exit(f"FAIL: the server did not start:\n{open(log.name).read()[-3000:]}")
        with open(os.path.join(tmp, "var", "admin.key")) as f:
            key = f.read().strip()
        work = os.path.join(tmp, "work")
        os.mkdir(work)
        path = os.path.join(tmp, "tutorial.sh")
        with open(path, "w") as f:
            f.write(text)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
        env.update(TRAINYARD_URL=url, TRAINYARD_KEY=key, HOME=tmp,
                   XDG_CONFIG_HOME=os.path.join(tmp, "config"))
        print(f"tutorial: {len(blocks)} blocks of {readme} against {url}", flush=True)
        try:
            run = subprocess.run(["bash", "--noprofile", "--norc", path], cwd=work, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=max(1, LIMIT_S - (time.monotonic() - t0)))
            out, rc = run.stdout, run.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc = None
        print(out, end="" if out.endswith("\n") else "\n")
        took = time.monotonic() - t0
        if rc is None:
            print(f"FAIL: the tutorial took more than {LIMIT_S} s")
            return 1
        if rc != 0:
            m = None
            for m in re.finditer(r"at script line (\d+): (.*)", out):
                pass
            if m and origin[int(m.group(1)) - 1]:
                print(f"FAIL: README.md line {origin[int(m.group(1)) - 1]} failed "
                      f"(exit status {rc}): {m.group(2)}")
            else:
                print(f"FAIL: the tutorial exited with status {rc}")
            print("server log (tail):\n" + open(log.name).read()[-2000:])
            return 1
        print(f"PASS: the README tutorial ran in {took:.1f} s")
        return 0
    finally:
        if srv:
            os.killpg(srv.pid, signal.SIGTERM)
            try:
                srv.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(srv.pid, signal.SIGKILL)
                srv.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
