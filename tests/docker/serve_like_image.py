#!/usr/bin/env python3
"""Starts the built binary the way each image does, and runs the image's
HEALTHCHECK against it. From each Dockerfile's final stage it takes
ENTRYPOINT + CMD, USER, VOLUME and the HEALTHCHECK command, and runs:

  * the CMD with the entrypoint replaced by the built binary (copied to a
    world-readable folder), the volume by a fresh data folder owned by the
    running user, and port 8080 by 0 (a free port, read from the start
    line); the address stays 0.0.0.0;
  * as the image's USER (UID 10001) when this runs as root, as in CI;
  * with the admin key from TRAINYARD_ADMIN_KEY, again from
    --admin-key-file (as compose.yaml passes the secret), and once more
    with that file and HTTPS (--tls-cert/--tls-key with a throwaway CA made
    by openssl, as docs/docker.md's TLS variant of compose.yaml does);
  * the HEALTHCHECK command on the real port: it must pass while the server
    runs (over HTTP, and over HTTPS in the TLS run), and fail once it has
    stopped. Chart.js (a runtime package the dashboard needs) must be served
    too.

    serve_like_image.py REPO_ROOT TRAINYARD_BINARY
"""
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dockerfile as df  # noqa: E402

def image_spec(path):
    final = df.stages(open(path).read())[-1]
    argv = df.exec_form(df.last(final, "ENTRYPOINT"), "ENTRYPOINT") + \
        df.exec_form(df.last(final, "CMD"), "CMD")
    uid, _, gid = df.last(final, "USER").partition(":")
    volume = json.loads(df.last(final, "VOLUME"))[0]
    return argv, int(uid), int(gid or uid), volume, df.healthcheck(final)[1]


def make_key(binary):
    """A key from `trainyard keygen`, as docs/docker.md has users make it."""
    r = subprocess.run([binary, "keygen"], capture_output=True, text=True)
    key = r.stdout.strip()
    if r.returncode != 0 or not re.fullmatch(r"ty_[a-z2-7]{20}_[a-z2-7]{52}", key):
        raise RuntimeError(f"trainyard keygen failed ({r.returncode}): {r.stderr}")
    return key


def http(url, key=None, cafile=None):
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", "Bearer " + key)
    ctx = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Server:
    def __init__(self, argv, env, uid, gid, workdir):
        self.out = os.path.join(workdir, "stdout")
        self.err = os.path.join(workdir, "stderr")
        as_user = os.getuid() == 0

        def drop():
            if as_user:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
        self.proc = subprocess.Popen(argv, env=env, stdout=open(self.out, "w"),
                                     stderr=open(self.err, "w"), preexec_fn=drop,
                                     cwd=workdir)
        self.port = None
        for _ in range(300):
            m = re.search(r"listening on https?://0\.0\.0\.0:(\d+)", open(self.out).read())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        logs = re.sub(r"ty_[a-z2-7]{20}_[a-z2-7]{52}", "ty_<key>",
                      open(self.out).read() + open(self.err).read())
        raise RuntimeError("it printed no 'listening on http(s)://0.0.0.0:PORT' line "
                           f"(exit {self.proc.returncode}):\n{logs}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def make_tls(work, uid, gid):
    """A throwaway CA and a certificate it signs for 127.0.0.1, the key
    readable by uid only; returns (ca, cert, key) paths."""
    def sh(*args):
        subprocess.run(args, cwd=work, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    sh("openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem",
       "-days", "2", "-subj", "/CN=trainyard test CA")
    sh("openssl", "req", *ec, "-keyout", "tls.key", "-out", "tls.csr",
       "-subj", "/CN=127.0.0.1")
    with open(os.path.join(work, "san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    sh("openssl", "x509", "-req", "-in", "tls.csr", "-CA", "ca.pem", "-CAkey",
       "ca.key", "-CAcreateserial", "-out", "tls.pem", "-days", "2",
       "-extfile", "san.cnf")
    paths = [os.path.join(work, n) for n in ("ca.pem", "tls.pem", "tls.key")]
    os.chown(paths[2], uid, gid)
    os.chmod(paths[2], 0o400)
    return paths


def run_image(name, dockerfile, binary, key_mode, failed):
    argv, uid, gid, volume, health = image_spec(dockerfile)
    if os.getuid() != 0:
        uid, gid = os.getuid(), os.getgid()
    work = tempfile.mkdtemp(prefix="ty-docker-")
    os.chmod(work, 0o755)
    try:
        exe = os.path.join(work, "trainyard")
        shutil.copy(binary, exe)
        os.chmod(exe, 0o755)
        data = os.path.join(work, "data")
        os.mkdir(data, 0o750)
        os.chown(data, uid, gid)
        argv = [exe if a == argv[0] else a for a in argv]
        argv = [data if a == volume else a for a in argv]
        argv = [re.sub(r"^0\.0\.0\.0:8080$", "0.0.0.0:0", a) for a in argv]
        if "0.0.0.0:0" not in argv or data not in argv:
            failed.append(f"{name}: CMD does not listen on 0.0.0.0:8080 with --data {volume}: {argv}")
            return
        env = {k: v for k, v in os.environ.items() if k != "TRAINYARD_ADMIN_KEY"}
        env["OPENBLAS_NUM_THREADS"] = "1"
        key = make_key(binary)
        if key_mode == "env":
            env["TRAINYARD_ADMIN_KEY"] = key
        else:
            kf = os.path.join(work, "admin_key")
            with open(kf, "w") as f:
                f.write(key + "\n")              # as `trainyard keygen > file` leaves it
            os.chown(kf, uid, gid)
            os.chmod(kf, 0o400)
            argv += ["--admin-key-file", kf]
        scheme, ca = "http", None
        if key_mode == "file+tls":
            ca, cert, tls_key = make_tls(work, uid, gid)
            argv += ["--tls-cert", cert, "--tls-key", tls_key]
            scheme = "https"
        label = f"{name} (key from {key_mode})"

        before = len(failed)
        try:
            srv = Server(argv, env, uid, gid, work)
        except RuntimeError as e:
            failed.append(f"{label}: the server did not start as the image starts it: {e}")
            return
        try:
            st = os.stat(data)
            if (st.st_uid, srv_uid(srv)) != (uid, uid):
                failed.append(f"{label}: data folder or server not owned by/running as {uid}")
            hc = [a.replace("127.0.0.1:8080", f"127.0.0.1:{srv.port}") for a in health]
            if hc == health:
                failed.append(f"{label}: HEALTHCHECK does not name 127.0.0.1:8080: {health}")
            r = subprocess.run(hc, capture_output=True, text=True)
            if r.returncode != 0:
                failed.append(f"{label}: HEALTHCHECK {hc} failed ({r.returncode}): {r.stderr}")
            base = f"{scheme}://127.0.0.1:{srv.port}"
            if f"listening on {scheme}://" not in open(srv.out).read():
                failed.append(f"{label}: the server does not say it serves {scheme}")
            code, body = http(f"{base}/web/vendor/chart.min.js", cafile=ca)
            if code != 200 or len(body) < 10000:
                failed.append(f"{label}: Chart.js is not served ({code})")
            admin_file = os.path.join(data, "admin.key")
            if os.path.exists(admin_file):
                failed.append(f"{label}: admin.key was written although the key was given")
            code, _ = http(f"{base}/v1/tenants", key, ca)
            if code != 200:
                failed.append(f"{label}: GET /v1/tenants with the admin key answered {code}")
            code, _ = http(f"{base}/v1/tenants", None, ca)
            if code != 401:
                failed.append(f"{label}: GET /v1/tenants without a key answered {code}")
        finally:
            srv.stop()
        r = subprocess.run(hc, capture_output=True, text=True)
        if r.returncode == 0:
            failed.append(f"{label}: HEALTHCHECK passed with the server stopped")
        log = open(srv.err).read()
        if key in log + open(srv.out).read():
            failed.append(f"{label}: the given admin key appears in the server's output")
        if len(failed) == before:
            print(f"ok: {label}: ran as uid {uid} on 0.0.0.0:{srv.port}; HEALTHCHECK passed, "
                  f"then failed once stopped")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def srv_uid(srv):
    with open(f"/proc/{srv.proc.pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return -1


def main():
    root, binary = sys.argv[1], os.path.abspath(sys.argv[2])
    failed = []
    for name in ("Dockerfile", "Dockerfile.cpu"):
        path = os.path.join(root, "docker", name)
        for mode in ("env", "file", "file+tls"):
            run_image(name, path, binary, mode, failed)
    for f in failed:
        print("FAIL:", f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
