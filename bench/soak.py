#!/usr/bin/env python3
"""A bounded soak of a live `trainyard serve`: predict, list and upload load
together for a while, with the server's memory, open files and threads
sampled, to show that nothing grows without bound. Not a test: it prints
figures (bench/soak.py BINARY [SECONDS], default 600).

The load, from client threads on this machine:
  * predict: POST /v1/models/{id}/predict with 64 examples of a small MLP;
  * list:    GET /v1/datasets, /v1/jobs, /v1/models in turn;
  * upload:  POST /v1/datasets (a 200-row CSV), then DELETE it, so the disk
             stays bounded while the store and blob paths keep working.
Every 5 s the server's VmRSS, open file descriptors and threads are read
from /proc; at the end a table gives them at the start, their peak and at
the end, and per kind of request the count, errors and p50 / p99 latency.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid


class Server:
    def __init__(self, binary):
        self.data = tempfile.mkdtemp(prefix="ty-soak-")
        self.out = open(os.path.join(self.data, "stdout"), "w+")
        self.err = open(os.path.join(self.data, "stderr"), "w+")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data", self.data,
             "--train-device", "cpu"], stdout=self.out, stderr=self.err)
        t0 = time.time()
        port = None
        while time.time() - t0 < 60 and self.proc.poll() is None:
            self.out.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.out.read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.05)
        if port is None:
            self.err.seek(0)
            raise SystemExit("the server did not start:\n" + self.err.read())
        self.base = "http://127.0.0.1:%d" % port
        with open(os.path.join(self.data, "admin.key")) as f:
            self.key = f.read().strip()

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.data, ignore_errors=True)

    def request(self, method, path, body=None, ctype=None):
        req = urllib.request.Request(self.base + path, data=body, method=method)
        req.add_header("Authorization", "Bearer " + self.key)
        if ctype:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def json(self, method, path, doc=None):
        body = json.dumps(doc).encode() if doc is not None else None
        status, data = self.request(method, path, body,
                                    "application/json" if body else None)
        return status, json.loads(data) if data else None

    def upload(self, fields, files):
        b = uuid.uuid4().hex
        parts = []
        for k, v in fields.items():
            parts.append(('--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n'
                          % (b, k)).encode() + v.encode() + b"\r\n")
        for k, v in files.items():
            parts.append(('--%s\r\nContent-Disposition: form-data; name="%s"; '
                          'filename="%s"\r\nContent-Type: application/octet-stream'
                          '\r\n\r\n' % (b, k, k)).encode() + v + b"\r\n")
        body = b"".join(parts) + ("--%s--\r\n" % b).encode()
        status, data = self.request("POST", "/v1/datasets", body,
                                    "multipart/form-data; boundary=" + b)
        return status, json.loads(data) if data else None


def csv_rows(n, seed):
    rng = random.Random(seed)
    lines = ["a,b,c,d,label"]
    for _ in range(n):
        x = [rng.uniform(-1, 1) for _ in range(4)]
        lines.append("%.4f,%.4f,%.4f,%.4f,%s" % (*x, "p" if sum(x) > 0 else "n"))
    return ("\n".join(lines) + "\n").encode()


def proc_sample(pid):
    with open("/proc/%d/status" % pid) as f:
        status = f.read()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) * 1024
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    fds = len(os.listdir("/proc/%d/fd" % pid))
    return rss, fds, threads


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    binary = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 600
    srv = Server(binary)
    try:
        st, ds = srv.upload({"name": "soak", "format": "csv", "label_column": "label"},
                            {"file": csv_rows(2000, 1)})
        assert st == 201, (st, ds)
        spec = {"layers": [{"type": "dense", "units": 32}, {"type": "relu"},
                           {"type": "dense", "units": 2}]}
        st, job = srv.json("POST", "/v1/jobs", {"dataset": ds["id"], "model": spec,
                                                "hyperparameters": {"epochs": 2}})
        assert st == 202, (st, job)
        while True:
            st, j = srv.json("GET", "/v1/jobs/" + job["id"])
            if j["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.2)
        assert j["status"] == "succeeded", j
        model = j["model"]
        examples = [[random.uniform(-1, 1) for _ in range(4)] for _ in range(64)]

        stop = time.time() + seconds
        lat = {"predict": [], "list": [], "upload": []}
        errors = {k: 0 for k in lat}
        lock = threading.Lock()

        def record(kind, t0, ok):
            dt = time.time() - t0
            with lock:
                lat[kind].append(dt)
                if not ok:
                    errors[kind] += 1

        def predict_loop():
            while time.time() < stop:
                t0 = time.time()
                st, _ = srv.json("POST", "/v1/models/%s/predict" % model,
                                 {"inputs": examples})
                record("predict", t0, st == 200)

        def list_loop():
            paths = ["/v1/datasets", "/v1/jobs", "/v1/models"]
            i = 0
            while time.time() < stop:
                t0 = time.time()
                st, _ = srv.request("GET", paths[i % 3])
                record("list", t0, st == 200)
                i += 1

        def upload_loop():
            i = 0
            while time.time() < stop:
                t0 = time.time()
                st, d = srv.upload({"name": "u%d" % i, "format": "csv",
                                    "label_column": "label"},
                                   {"file": csv_rows(200, i)})
                ok = st == 201
                if ok:
                    st2, _ = srv.request("DELETE", "/v1/datasets/" + d["id"])
                    ok = st2 == 204
                record("upload", t0, ok)
                i += 1

        workers = [threading.Thread(target=f) for f in
                   [predict_loop, predict_loop, list_loop, upload_loop]]
        samples = [(0.0,) + proc_sample(srv.proc.pid)]
        t_start = time.time()
        for w in workers:
            w.start()
        while time.time() < stop:
            time.sleep(min(5, max(0.1, stop - time.time())))
            samples.append((time.time() - t_start,) + proc_sample(srv.proc.pid))
        for w in workers:
            w.join()
        samples.append((time.time() - t_start,) + proc_sample(srv.proc.pid))

        print("soak: %.0f s of predict (2 clients), list and upload+delete load "
              "on %s" % (seconds, binary))
        print("%-10s %12s %12s %12s" % ("", "start", "peak", "end"))
        for i, name in [(1, "RSS MiB"), (2, "open fds"), (3, "threads")]:
            vals = [s[i] for s in samples]
            scale = 1 / 2**20 if i == 1 else 1
            print("%-10s %12.1f %12.1f %12.1f" % (name, vals[0] * scale,
                                                  max(vals) * scale, vals[-1] * scale))
        print("RSS over time (s: MiB): " + ", ".join(
            "%.0f: %.1f" % (s[0], s[1] / 2**20) for s in samples[::max(1, len(samples) // 12)]))
        print("%-8s %9s %7s %9s %9s" % ("kind", "requests", "errors", "p50 ms", "p99 ms"))
        for kind, v in lat.items():
            v = sorted(v)
            if not v:
                continue
            print("%-8s %9d %7d %9.2f %9.2f" % (kind, len(v), errors[kind],
                                                v[len(v) // 2] * 1e3,
                                                v[min(len(v) - 1, int(len(v) * 0.99))] * 1e3))
    finally:
        srv.close()


if __name__ == "__main__":
    main()
