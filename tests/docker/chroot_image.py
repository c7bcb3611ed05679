#!/usr/bin/env python3
"""Builds and runs a Dockerfile without Docker, in debootstrap chroots.

Where no Docker engine runs (the machines trainyard is developed and tested
on), this is the closest check of what an image does: each stage starts
from a fresh Debian root made by debootstrap (the slim image's minbase
variant), and the Dockerfile's own instructions run in it: WORKDIR, ARG,
ENV, COPY (from the build context, the working tree's files that git does
not ignore, or --from an earlier stage) and RUN through the stage's SHELL.
Then the final stage is started as the image would start it: ENTRYPOINT +
CMD as its USER, its HEALTHCHECK must pass, the admin key it wrote to its
VOLUME must open the API, the image's own `trainyard` must work as a
client, and SIGTERM must stop it cleanly; the HEALTHCHECK must then fail.

Only `debian:12*-slim` bases can be emulated (NVIDIA's CUDA images cannot
be rebuilt this way), so this is a check of docker/Dockerfile.cpu. It needs
root, debootstrap and this machine's apt mirror, and takes a minute or two
(the debootstrap base is cached, see tests/fresh/chroot.py): it is a
manual check, not part of `make test`.

    sudo tests/docker/chroot_image.py [--keep] [--work DIR] docker/Dockerfile.cpu
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _here)
sys.path.insert(0, os.path.join(_here, "..", "fresh"))
import dockerfile as df  # noqa: E402
import chroot  # noqa: E402

log, sh = chroot.log, chroot.sh


def suite_of(image):
    if re.fullmatch(r"debian:12(\.\d+)*-slim", image):
        return "bookworm"
    raise SystemExit(f"chroot_image: cannot emulate the base image {image}: only "
                     "debian:12*-slim (debootstrap minbase bookworm) can be")


class Stage:
    """One stage's root (a chroot.Root copied from the debootstrap base) and
    the Dockerfile state that its instructions change."""

    def __init__(self, base, root, name):
        self.chroot = chroot.Root(base, root)
        self.root, self.name = root, name
        self.workdir, self.shell = "/", ["/bin/sh", "-c"]
        self.env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": "/root", "DEBIAN_FRONTEND": "noninteractive"}
        self.meta = {}

    def mount(self):
        self.chroot.mount()

    def close(self, keep):
        self.chroot.close(keep=keep)

    def path(self, p):
        if not p.startswith("/"):
            p = os.path.join(self.workdir, p)
        return os.path.join(self.root, p.lstrip("/"))


def context_files(repo):
    out = subprocess.run(["git", "-C", repo, "ls-files", "-co", "--exclude-standard", "-z"],
                         check=True, capture_output=True).stdout.decode()
    ignore = [l.strip() for l in open(os.path.join(repo, ".dockerignore"))
              if l.strip() and not l.startswith("#")]

    def ignored(f):
        for pat in ignore:
            pat = pat.replace("**/", "")
            if f == pat or f.startswith(pat.rstrip("/") + "/") or \
                    re.fullmatch(pat.replace(".", r"\.").replace("*", ".*"), os.path.basename(f)):
                return True
        return False
    return [f for f in out.split("\0") if f and not ignored(f) and os.path.exists(os.path.join(repo, f))]


def make_context(repo, dest):
    for f in context_files(repo):
        target = os.path.join(dest, f)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(repo, f), target, follow_symlinks=False)


def copy_into(srcs, base, stage, dst):
    dst_path = stage.path(dst)
    many = len(srcs) > 1 or dst.endswith("/")
    for src in srcs:
        s = os.path.join(base, src.lstrip("/")) if not src.startswith("/") or base != "/" else src
        if os.path.isdir(s):
            os.makedirs(dst_path, exist_ok=True)
            sh("cp", "-a", s + "/.", dst_path)
        else:
            target = os.path.join(dst_path, os.path.basename(s)) if many else dst_path
            os.makedirs(os.path.dirname(target.rstrip("/")) if not many else dst_path, exist_ok=True)
            sh("cp", "-a", s, target)


def run_stage(spec, stages, base_root, context, work):
    name = spec["name"] or f"stage{len(stages)}"
    root = os.path.join(work, name)
    log(f"stage {name}: FROM {spec['from']} (a copy of the debootstrap root)")
    st = Stage(base_root, root, name)
    st.mount()
    try:
        for n, kw, args in spec["ins"]:
            if kw == "SHELL":
                st.shell = json.loads(args)
            elif kw == "WORKDIR":
                st.workdir = args if args.startswith("/") else os.path.join(st.workdir, args)
                os.makedirs(st.path("."), exist_ok=True)
            elif kw in ("ARG", "ENV"):
                for word in shlex.split(args):
                    k, eq, v = word.partition("=")
                    if eq or kw == "ENV":
                        st.env[k] = v
            elif kw == "COPY":
                words = shlex.split(args)
                frm = [w for w in words if w.startswith("--from=")]
                words = [w for w in words if not w.startswith("--")]
                if frm:
                    src_stage = stages[frm[0].split("=", 1)[1]]
                    copy_into(words[:-1], src_stage.root, st, words[-1])
                else:
                    copy_into(words[:-1], context, st, words[-1])
            elif kw == "RUN":
                script = f"cd {shlex.quote(st.workdir)} && {args}"
                log(f"line {n}: RUN {args[:100]}{'...' if len(args) > 100 else ''}")
                subprocess.run(["chroot", root, "/usr/bin/env", "-i",
                                *[f"{k}={v}" for k, v in st.env.items()],
                                *st.shell, script], check=True)
            elif kw in ("USER", "VOLUME", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT", "CMD", "LABEL"):
                st.meta[kw] = args
            else:
                raise SystemExit(f"chroot_image: line {n}: {kw} is not emulated")
    except BaseException:
        st.close(keep=False)
        raise
    return st


def check_final(st):
    """Starts the final stage as the image would and checks it."""
    failed = []
    argv = json.loads(st.meta["ENTRYPOINT"]) + json.loads(st.meta["CMD"])
    user = st.meta["USER"]
    volume = json.loads(st.meta["VOLUME"])[0]
    port = chroot.free_port()
    argv = [a.replace("0.0.0.0:8080", f"0.0.0.0:{port}") for a in argv]
    health = df.exec_form(re.match(r"(?:--\S+\s+)*CMD\s+(.*)$", st.meta["HEALTHCHECK"]).group(1),
                          "HEALTHCHECK")
    health = [a.replace("127.0.0.1:8080", f"127.0.0.1:{port}") for a in health]
    env = ["/usr/bin/env", "-i", *[f"{k}={v}" for k, v in st.env.items() if k != "HOME"],
           "HOME=/nonexistent"]

    def in_image(cmd, **kw):
        return subprocess.run(["chroot", f"--userspec={user}", st.root, *env, *cmd], **kw)

    log(f"starting the image's command as {user}: {' '.join(argv)}")
    out = open(os.path.join(st.root, "..", "server.out"), "w+")
    proc = subprocess.Popen(["chroot", f"--userspec={user}", st.root, *env, *argv],
                            stdout=out, stderr=subprocess.STDOUT)
    try:
        healthy = False
        for _ in range(100):
            if in_image(health, capture_output=True).returncode == 0:
                healthy = True
                break
            if proc.poll() is not None:
                break
            time.sleep(0.3)
        if not healthy:
            out.seek(0)
            failed.append(f"the HEALTHCHECK never passed; the server said:\n{out.read()}")
            return failed
        log("HEALTHCHECK passed: " + " ".join(health))
        keyfile = os.path.join(st.root, volume.lstrip("/"), "admin.key")
        key = open(keyfile).read().strip()
        owner = os.stat(keyfile).st_uid
        if str(owner) != user.split(":")[0]:
            failed.append(f"admin.key is owned by {owner}, not the image's user {user}")
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/tenants",
                                     headers={"Authorization": "Bearer " + key})
        with urllib.request.urlopen(req, timeout=10) as r:
            log(f"GET /v1/tenants with the key from the volume: {r.status}")
        with open(os.path.join(st.root, "tmp", "key"), "w") as f:
            f.write(key + "\n")
        os.chmod(os.path.join(st.root, "tmp", "key"), 0o644)
        r = in_image(["trainyard", "--url", f"http://127.0.0.1:{port}", "--key-file", "/tmp/key",
                      "devices"], capture_output=True, text=True)
        log(f"the image's client: trainyard devices -> exit {r.returncode}: {r.stdout.strip()}")
        if r.returncode != 0:
            failed.append(f"trainyard devices inside the image failed: {r.stderr}")
        r = in_image(["trainyard", "version"], capture_output=True, text=True)
        log("trainyard version: " + r.stdout.strip().replace("\n", " | "))
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        log(f"SIGTERM: the server exited {code}")
        if code != 0:
            failed.append(f"the server exited {code} on SIGTERM")
    if in_image(health, capture_output=True).returncode == 0:
        failed.append("the HEALTHCHECK passed with the server stopped")
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dockerfile")
    ap.add_argument("--work", help="folder for the roots (default: a new temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the roots afterwards")
    a = ap.parse_args()
    repo = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(a.dockerfile)),
                           "rev-parse", "--show-toplevel"], check=True, capture_output=True,
                          text=True).stdout.strip()
    specs = df.stages(open(a.dockerfile).read())
    suites = {suite_of(s["from"]) for s in specs if s["from"] not in
              {t["name"] for t in specs}}
    try:
        base = chroot.base_root(suites.pop())
    except chroot.Unavailable as e:
        raise SystemExit(f"chroot_image: {e}")
    work = a.work or tempfile.mkdtemp(prefix="ty-chroot-")
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    stages = {}
    try:
        context = os.path.join(work, "context")
        shutil.rmtree(context, ignore_errors=True)
        make_context(repo, context)
        for spec in specs:
            st = run_stage(spec, stages, base, context, work)
            stages[st.name] = st
        failed = check_final(st)
    finally:
        for st in stages.values():
            st.close(keep=a.keep)
        if not a.keep:
            chroot.remove_tree(work)
    log(f"took {time.time() - t0:.0f} s")
    for f in failed:
        print("FAIL:", f)
    if not failed:
        print(f"ok: {os.path.relpath(a.dockerfile, repo)} built and ran in debootstrap chroots")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
