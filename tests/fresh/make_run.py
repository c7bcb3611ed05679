#!/usr/bin/env python3
"""`make run` on a fresh Debian 12 machine, as the README's first command.

In a fresh Debian 12 minbase root made by debootstrap (from this machine's
own apt mirror), with only make, git and ca-certificates added, this
clones the working tree (a snapshot of it, uncommitted changes included,
served as a bare repository inside the root), runs `make run` as root the
way a new user would, waits for /healthz, and checks that:

* the admin key that `make run` printed opens GET /v1/datasets (and that
  a wrong key does not: the check can fail);
* it is the key saved in var/admin.key;
* nothing of the test suite was installed (CMocka, Chromium, PyTorch,
  Selenium, Python), and the build said in one line that tests were not
  built;
* scripts/setup.sh waited for the package lock: as on a freshly booted
  cloud instance where unattended-upgrades holds it, the test holds the
  root's apt and dpkg locks (the same fcntl locks apt takes) for the first
  LOCK_HOLD_S seconds of `make run`, and the output must say that another
  package manager is running before the installs go on.

The debootstrap base is cached (tests/fresh/chroot.py) so that a rerun
costs the package installs and the build, not the debootstrap. Every
process started in the root is stopped and every mount undone however
the test ends; a run killed outright is cleaned up by the next one.

Without root, debootstrap or a reachable mirror it FAILS saying which:
it never passes by skipping.

    sudo tests/fresh/make_run.py [--keep] [REPO]
"""
import argparse
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chroot  # noqa: E402

SUITE = "bookworm"
INCLUDE = ("make", "git", "ca-certificates")
READY_WITHIN_S = 1800  # install + build + start, generous for a slow mirror
LOCK_HOLD_S = 8        # the package locks held at the start of make run
LOCKS = ("/var/lib/apt/lists/lock", "/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock")
TEST_ONLY_PACKAGES = ("libcmocka-dev", "chromium", "chromium-driver", "python3-torch",
                      "python3-selenium", "python3-tinycss2", "python3")
log = chroot.log


def snapshot_into(repo, bare):
    """A commit of the working tree as it is (tracked and untracked files that
    git does not ignore), pushed as `main` to a new bare repository `bare`,
    without touching the repository's index or refs."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, GIT_INDEX_FILE=os.path.join(tmp, "index"),
                   GIT_AUTHOR_NAME="trainyard test", GIT_AUTHOR_EMAIL="test@localhost",
                   GIT_COMMITTER_NAME="trainyard test", GIT_COMMITTER_EMAIL="test@localhost")

        def git(*args):
            return subprocess.run(["git", "-C", repo, *args], env=env, check=True,
                                  capture_output=True, text=True).stdout.strip()
        git("read-tree", "HEAD")
        git("add", "-A")
        tree = git("write-tree")
        commit = git("commit-tree", tree, "-p", "HEAD", "-m", "working tree for the fresh-root test")
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", bare], check=True)
    subprocess.run(["git", "-C", repo, "push", "-q", bare, f"{commit}:refs/heads/main"], check=True)
    return commit


def http_get(url, key=None):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Phases:
    """When each step of `make run` first shows in its output."""
    MARKS = (("packages", "Installing: "), ("lock wait", "Another package manager is running"), ("configure", "-- The C compiler identification"),
             ("compile", "Building C object"), ("serving", "listening on http"))

    def __init__(self, t0):
        self.t0, self.seen = t0, {}

    def scan(self, text):
        for name, mark in self.MARKS:
            if name not in self.seen and mark in text:
                self.seen[name] = time.time() - self.t0
                log(f"make run: {name} (+{self.seen[name]:.0f} s)")


def run(repo, keep):
    failed = []
    port = chroot.free_port()
    t_all = time.time()
    base = chroot.base_root(SUITE, INCLUDE)
    work = os.path.join(chroot.cache_dir(), "fresh-make-run")
    with chroot.Lock("fresh-make-run"):
        root = chroot.Root(base, work)
        proc = None
        out_path = os.path.join(tempfile.gettempdir(), f"ty-fresh-make-run-{os.getpid()}.log")
        out = open(out_path, "w+")
        try:
            root.mount()
            commit = snapshot_into(repo, root.file("/srv/trainyard.git"))
            log(f"working tree snapshot {commit[:12]} served at /srv/trainyard.git in the root")
            env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                   "HOME=/root", "TERM=dumb", f"LISTEN=127.0.0.1:{port}"]
            env += [f"{k}={v}" for k, v in os.environ.items()
                    if k.lower() in ("http_proxy", "https_proxy", "no_proxy")]
            script = ("cd /root && git clone -q /srv/trainyard.git trainyard && "
                      "cd trainyard && exec make run")
            held = []
            for lock in LOCKS:
                f = open(root.file(lock), "a")
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(f)
            log(f"holding the root's apt and dpkg locks for {LOCK_HOLD_S} s, as another "
                "package manager would")
            log(f"in the fresh root: {script}")
            t0 = time.time()
            proc = subprocess.Popen(["chroot", root.path, "/usr/bin/env", "-i", *env,
                                     "/bin/sh", "-c", script],
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            phases = Phases(t0)
            healthy = False
            while time.time() - t0 < READY_WITHIN_S:
                if held and time.time() - t0 >= LOCK_HOLD_S:
                    for f in held:
                        f.close()  # closing releases the fcntl lock
                    held = []
                    log(f"released the package locks (+{time.time() - t0:.0f} s)")
                out.seek(0)
                text = out.read()
                phases.scan(text)
                if proc.poll() is not None:
                    break
                try:
                    if http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200:
                        healthy = True
                        break
                except OSError:
                    pass
                time.sleep(1)
            out.seek(0)
            text = out.read()
            if not healthy:
                why = (f"exited {proc.returncode}" if proc.poll() is not None
                       else f"was not serving /healthz after {READY_WITHIN_S} s")
                tail = "\n".join(text.splitlines()[-60:])
                failed.append(f"make run {why}; the last of its output:\n{tail}")
                return failed, None
            t_ready = time.time() - t0
            log(f"make run served /healthz {t_ready:.0f} s after it started; the last of its output:")
            print("\n".join("    " + l for l in text.splitlines()[-16:]), flush=True)

            keys = re.findall(r"^\s+(ty_[a-z0-9]+_[a-z0-9]+)\s*$", text, re.M)
            if len(keys) != 1:
                failed.append(f"make run printed {len(keys)} admin keys, not one")
                return failed, t_ready
            key = keys[0]
            saved = open(root.file("/root/trainyard/var/admin.key")).read().strip()
            if saved != key:
                failed.append("the printed admin key is not the one saved in var/admin.key")
            status, body = http_get(f"http://127.0.0.1:{port}/v1/datasets", key)
            log(f"GET /v1/datasets with the printed key: {status} {body[:80]}")
            if status != 200 or not isinstance(json.loads(body).get("items"), list):
                failed.append(f"GET /v1/datasets with the printed key answered {status}: {body[:200]}")
            wrong = key[:-1] + ("a" if key[-1] != "a" else "b")
            status, _ = http_get(f"http://127.0.0.1:{port}/v1/datasets", wrong)
            if status != 401:
                failed.append(f"GET /v1/datasets with a wrong key answered {status}, not 401")

            r = subprocess.run(["chroot", root.path, "dpkg-query", "-W", "-f",
                                "${Package} ${Status}\n", *TEST_ONLY_PACKAGES],
                               capture_output=True, text=True)
            installed = [l.split()[0] for l in r.stdout.splitlines() if l.endswith("install ok installed")]
            if installed:
                failed.append("make run installed test-suite packages: " + ", ".join(installed))
            else:
                log("none of " + ", ".join(TEST_ONLY_PACKAGES) + " is installed in the root")
            if "tests not built" not in text:
                failed.append("the build did not say that the tests were not built")
            if "Another package manager is running" not in text:
                failed.append("make run did not say that it waited for the package lock "
                              f"held for its first {LOCK_HOLD_S} s")
            else:
                log("make run said it waited for the package lock, then went on")
            return failed, t_ready
        finally:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                    log("make run stopped on SIGTERM")
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    failed.append("make run's server did not stop within 30 s of SIGTERM")
            out.close()
            if failed:
                log(f"make run's whole output is in {out_path}")
            else:
                os.remove(out_path)
            root.close(keep=keep)
            log(f"the whole test took {time.time() - t_all:.0f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--keep", action="store_true", help="keep the root afterwards (debugging)")
    a = ap.parse_args()
    # A ctest timeout or Ctrl-C still goes through the cleanup.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(f"make_run: stopped by signal {s}"))
    repo = subprocess.run(["git", "-C", a.repo, "rev-parse", "--show-toplevel"],
                          check=True, capture_output=True, text=True).stdout.strip()
    try:
        failed, t_ready = run(repo, a.keep)
    except chroot.Unavailable as e:
        print(f"FAIL: this machine cannot make a fresh Debian root: {e}")
        return 1
    for f in failed:
        print("FAIL:", f)
    if not failed:
        print(f"ok: make run on a fresh Debian 12 minbase root served /healthz after "
              f"{t_ready:.0f} s and its printed key opened /v1/datasets")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
