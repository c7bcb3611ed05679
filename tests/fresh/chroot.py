"""Fresh Debian roots made by debootstrap, for tests that need a new machine.

Used by tests/fresh/make_run.py (`make run` on a fresh Debian 12) and
tests/docker/chroot_image.py (the CPU image's Dockerfile without Docker).

* The mirror is the machine's own: read from its apt sources (one-line
  .list files and deb822 .sources files), never written here.
* A base root (debootstrap minbase of a suite, plus a few packages) is
  cached between runs under the cache folder (TRAINYARD_TEST_CACHE, default
  /var/cache/trainyard-tests, outside the tree), keyed by suite, mirror and
  packages; each run works on a copy of it.
* A Root mounts /proc, /dev and /dev/pts into the tree, runs commands in
  it with chroot, and on close kills every process whose root is inside it,
  unmounts, and removes the tree. A run that was killed outright (a ctest
  timeout) leaves its work folder behind; the next run's `clean_stale`
  does the same cleanup on it before starting.

Errors that are the machine's (no root, no debootstrap, no mirror) raise
Unavailable with a message that says so; the tests turn it into a failure,
never a skip.
"""
import fcntl
import glob
import hashlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time


class Unavailable(Exception):
    """The machine cannot make a fresh root (no root, no debootstrap, no mirror)."""


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(*args, **kw):
    log("$ " + " ".join(shlex.quote(str(a)) for a in args))
    return subprocess.run([str(a) for a in args], check=True, **kw)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (a root shares
    the machine's network)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cache_dir():
    d = os.environ.get("TRAINYARD_TEST_CACHE", "/var/cache/trainyard-tests")
    os.makedirs(d, exist_ok=True)
    return d


def _sources_entries():
    """(uris, suites, components) of each `deb` entry in this machine's apt
    sources, in the order apt reads them."""
    entries = []
    files = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
    for path in files:
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split("#", 1)[0].split()
            if not words or words[0] != "deb":
                continue
            words = words[1:]
            if words and words[0].startswith("["):  # [arch=... signed-by=...]
                while words and not words[0].endswith("]"):
                    words.pop(0)
                words = words[1:]
            if len(words) >= 2:
                entries.append(([words[0]], [words[1]], words[2:]))
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        try:
            text = open(path).read()
        except OSError:
            continue
        for para in text.split("\n\n"):
            fields = {}
            for line in para.splitlines():
                if line.startswith("#") or ":" not in line or line[0].isspace():
                    continue
                k, v = line.split(":", 1)
                fields[k.strip().lower()] = v.split()
            if "deb" not in fields.get("types", []) or \
                    fields.get("enabled", ["yes"])[0].lower() == "no":
                continue
            entries.append((fields.get("uris", []), fields.get("suites", []),
                            fields.get("components", [])))
    return entries


def apt_mirror(suite):
    """The URI this machine's apt sources use for `suite` with component main."""
    for uris, suites, comps in _sources_entries():
        if suite in suites and "main" in comps and uris:
            return uris[0].rstrip("/")
    raise Unavailable(f"no apt source of this machine serves '{suite} main' "
                      "(read /etc/apt/sources.list and sources.list.d); debootstrap needs one")


def apt_proxy_conf():
    """This machine's apt proxy settings (Acquire::*::Proxy), as apt.conf lines
    for a root that must reach the mirror the same way; '' when there are none."""
    try:
        out = subprocess.run(["apt-config", "dump"], capture_output=True, text=True).stdout
    except OSError:
        return ""
    return "".join(l + "\n" for l in out.splitlines() if "::proxy" in l.lower())


def check_can_make_roots():
    if os.geteuid() != 0:
        raise Unavailable("a fresh root needs root (debootstrap, chroot, mount)")
    if not shutil.which("debootstrap"):
        raise Unavailable("debootstrap is not installed (scripts/setup.sh test installs it)")


def mounts_under(path):
    real = os.path.realpath(path)
    with open("/proc/mounts") as f:
        points = [m.split()[1].replace("\\040", " ") for m in f]
    return [p for p in points if p == real or p.startswith(real + "/")]


def remove_tree(path):
    """Removes a root, refusing while anything is mounted inside it (a bound
    /dev would otherwise lose the host's device files)."""
    inside = mounts_under(path)
    if inside:
        raise RuntimeError(f"not removing {path}: {inside[0]} is mounted")
    shutil.rmtree(path, ignore_errors=True)


def processes_in(path):
    """PIDs of the processes whose root directory is `path` or inside it."""
    real = os.path.realpath(path)
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            root = os.readlink(f"/proc/{d}/root")
        except OSError:
            continue
        if root == real or root.startswith(real + "/"):
            pids.append(int(d))
    return pids


def kill_processes_in(path, grace=5.0):
    """SIGTERM, then SIGKILL, every process rooted inside `path`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = processes_in(path)
        if not pids:
            return
        log(f"stopping {len(pids)} process(es) left in {path} ({sig.name})")
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace
        while time.time() < deadline and processes_in(path):
            time.sleep(0.2)


def unmount_all_under(path):
    for point in sorted(mounts_under(path), key=len, reverse=True):
        subprocess.run(["umount", "-l", point])


def clean_stale(path):
    """Whatever an earlier, killed run left at `path`: its processes, mounts and files."""
    if not os.path.lexists(path):
        return
    kill_processes_in(path)
    unmount_all_under(path)
    remove_tree(path)


class Lock:
    """An exclusive lock on a file in the cache folder, so that two runs do not
    share a base or a work folder."""

    def __init__(self, name):
        self.f = open(os.path.join(cache_dir(), name + ".lock"), "w")

    def __enter__(self):
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("waiting for another run holding " + self.f.name)
            fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def base_root(suite, include=()):
    """A cached debootstrap minbase root of `suite` with `include` added, made
    on first use from this machine's mirror; returns its path. The caller
    copies it and never changes it."""
    check_can_make_roots()
    mirror = apt_mirror(suite)
    key = hashlib.sha256(f"{suite}|{mirror}|{','.join(sorted(include))}".encode()).hexdigest()[:12]
    name = f"base-{suite}-minbase-{key}"
    path = os.path.join(cache_dir(), name)
    with Lock(name):
        if os.path.exists(os.path.join(path, ".trainyard-base-complete")):
            log(f"debootstrap base from the cache: {path}")
            return path
        tmp = path + ".partial"
        clean_stale(tmp)
        args = ["debootstrap", "--variant=minbase"]
        if include:
            args.append("--include=" + ",".join(include))
        args += [suite, tmp, mirror]
        t0 = time.time()
        log(f"debootstrap {suite} minbase from this machine's apt mirror"
            f"{' with ' + ', '.join(include) if include else ''} (cached afterwards in {path})")
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            tail = "\n".join((r.stdout + r.stderr).splitlines()[-15:])
            clean_stale(tmp)
            raise Unavailable(f"debootstrap failed (exit {r.returncode}); is the mirror "
                              f"{mirror} reachable?\n{tail}")
        subprocess.run(["chroot", tmp, "apt-get", "clean"], check=False)
        open(os.path.join(tmp, ".trainyard-base-complete"), "w").write(mirror + "\n")
        clean_stale(path)
        os.rename(tmp, path)
        log(f"debootstrap took {time.time() - t0:.0f} s")
        return path


class Root:
    """A working copy of a base root with /proc, /dev and /dev/pts mounted and
    the machine's DNS and apt proxy settings; close() leaves nothing behind."""

    def __init__(self, base, path):
        self.path = path
        self.mounts = []
        clean_stale(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        sh("cp", "-a", base, path)
        os.remove(os.path.join(path, ".trainyard-base-complete"))

    def mount(self):
        for what, where, opts in (("proc", "proc", ["-t", "proc"]),
                                  ("/dev", "dev", ["--bind"]),
                                  ("/dev/pts", "dev/pts", ["--bind"])):
            target = os.path.join(self.path, where)
            os.makedirs(target, exist_ok=True)
            sh("mount", *opts, what, target)
            self.mounts.append(target)
        shutil.copy("/etc/resolv.conf", os.path.join(self.path, "etc/resolv.conf"))
        proxy = apt_proxy_conf()
        if proxy:
            with open(os.path.join(self.path, "etc/apt/apt.conf.d/01proxy"), "w") as f:
                f.write(proxy)
        return self

    def umount(self):
        for target in reversed(self.mounts):
            subprocess.run(["umount", "-l", target])
        self.mounts = []

    def file(self, p):
        """The host path of `p` inside the root."""
        return os.path.join(self.path, p.lstrip("/"))

    def close(self, keep=False):
        kill_processes_in(self.path)
        self.umount()
        unmount_all_under(self.path)
        if not keep:
            remove_tree(self.path)
