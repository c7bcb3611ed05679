#!/usr/bin/python3
"""Serving benchmark: trainyard's predict endpoints against Python serving
stacks, on this machine, with the same weights (not a test; `make
bench-serve`, or bench/serve/run.py [--binary build/trainyard]).

The model is the README's Fashion-MNIST MLP (flatten, dense 256, relu,
dense 128, relu, dense 10; inputs are pixels 0-255, scaled by 1/255). One
set of weights is made in PyTorch (a few hundred Adam steps on the
Fashion-MNIST training set when dataset-fashion-mnist is installed, the
default initialisation otherwise), imported into a fresh `trainyard serve`
(its own temporary data folder) through POST /v1/models, and loaded into
every baseline:

  ty-v1        trainyard POST /v1/models/{id}/predict (JSON)
  ty-v2        trainyard POST /v2/models/{id}/infer, KServe v2 JSON
  ty-v2bin     the same with the KServe binary tensor extension (a JSON
               header, Inference-Header-Content-Length, then the raw
               little-endian FP32 bytes); timed only when a check request
               gets 200 and the JSON's outputs
  fastapi-1w   FastAPI + uvicorn + PyTorch, 1 worker (app_fastapi.py)
  fastapi-2w   the same with 2 workers
  http.server  Python's ThreadingHTTPServer + numpy (app_numpy.py)
  healthz      trainyard GET /healthz: the HTTP ceiling, no model

Every baseline answers the body of /v1 predict ({"inputs": [[784 numbers],
...]}) with {"outputs", "predictions"}. Before any timing, each system's
outputs for the batch-1 and batch-64 requests must equal trainyard /v1's
within 1e-4, and every baseline must report TCP_NODELAY on the
connections it accepted (GET /_nodelay): uvicorn sets it only on sockets
it binds itself with one worker, and a reused connection without it waits
40 ms for the client's delayed ACK. Here uvicorn gets a listening socket
made with TCP_NODELAY (which Linux passes on to accepted connections) by
--fd, for both worker counts.

Load comes from wrk (Debian's `wrk`; scripts/setup.sh bench-serve installs
it) with post.lua, on this machine: batch 1 and batch 64, at 1, 8 and 32
connections (threads = min(c, 2)), each case running the systems in turn,
twice (after a short warm-up per system and case); /healthz at the same
connection counts. The table gives, per system and case, the mean of the
repetitions: requests/s, samples/s, p50 and p99 latency (wrk --latency),
and the server's resident memory after the run (VmRSS of the server's
processes, workers and supervisor summed; VmHWM, the peak, is in the
JSON), then trainyard /v1's req/s over each baseline's and over /healthz's
at the same connection count.

The Python stacks are installed by this script into a virtual environment
outside the repository: $XDG_CACHE_HOME/trainyard/bench-serve-venv (or
~/.cache/...; --venv DIR), made with /usr/bin/python3 -m venv
--system-site-packages so that Debian's python3-torch and numpy are used,
then `pip install fastapi uvicorn` (plain uvicorn: h11 and asyncio, no
uvloop or httptools).

wrk and the servers share this machine's cores; on a small machine the
figures are a comparison under the same conditions, not absolute capacity.
"""
import argparse
import gzip
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tools"))

SPEC = {"layers": [{"type": "flatten"},
                   {"type": "dense", "units": 256}, {"type": "relu"},
                   {"type": "dense", "units": 128}, {"type": "relu"},
                   {"type": "dense", "units": 10}]}
INPUT_SHAPE = [1, 28, 28]
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
           "Shirt", "Sneaker", "Bag", "Ankle boot"]
PREPROCESS = {"kind": "scale", "factor": 1 / 255}
FASHION = "/usr/share/datasets/fashion-mnist"

SYSTEMS = ["ty-v1", "ty-v2", "ty-v2bin", "fastapi-1w", "fastapi-2w", "http.server"]
BASELINES = ["fastapi-1w", "fastapi-2w", "http.server"]
LABEL = {"ty-v1": "trainyard /v1 JSON", "ty-v2": "trainyard /v2 JSON",
         "ty-v2bin": "trainyard /v2 binary", "fastapi-1w": "FastAPI+torch 1w",
         "fastapi-2w": "FastAPI+torch 2w", "http.server": "http.server+numpy",
         "healthz": "trainyard /healthz"}
TOL = 1e-4


def say(*a):
    print(*a, flush=True)


def cpu_model():
    model, n = "unknown", 0
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            if line.startswith("processor"):
                n += 1
    return model, n


# ---- inputs and the model ----

def idx_images(path):
    with gzip.open(path) as f:
        raw = f.read()
    n, h, w = struct.unpack(">III", raw[4:16])
    return np.frombuffer(raw, np.uint8, offset=16).reshape(n, h * w)


def idx_labels(path):
    with gzip.open(path) as f:
        raw = f.read()
    return np.frombuffer(raw, np.uint8, offset=8)


def have_fashion():
    return all(os.path.exists(os.path.join(FASHION, f)) for f in
               ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                "t10k-images-idx3-ubyte.gz"))


def make_inputs(n):
    """n examples of 784 pixels 0-255 (integers): Fashion-MNIST test images
    when installed, seeded noise otherwise."""
    if have_fashion():
        return idx_images(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz"))[:n].astype(np.int64)
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (n, 784))
    x[rng.random((n, 784)) < 0.5] = 0
    return x


def make_model(model_dir, seed):
    """Writes weights.safetensors (the state dict) and metadata.json (the
    import's metadata part); returns how the weights were made."""
    import torch
    import trainyard_torch as tt
    torch.manual_seed(seed)
    model, _ = tt.build(SPEC, INPUT_SHAPE)
    how = "PyTorch's default initialisation (seed %d)" % seed
    if have_fashion():
        x = torch.from_numpy(idx_images(os.path.join(FASHION, "train-images-idx3-ubyte.gz"))
                             .astype(np.float32) / 255).reshape(-1, *INPUT_SHAPE)
        y = torch.from_numpy(idx_labels(os.path.join(FASHION, "train-labels-idx1-ubyte.gz"))
                             .astype(np.int64))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(seed)
        steps = 300
        for _ in range(steps):
            i = torch.randint(0, len(x), (128,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[i]), y[i]).backward()
            opt.step()
        how = "%d Adam steps of batch 128 on Fashion-MNIST (seed %d)" % (steps, seed)
    model.eval()
    tt.st_write(os.path.join(model_dir, "weights.safetensors"), tt.state_tensors(model))
    meta = {"spec": SPEC, "task": "classification", "input_shape": INPUT_SHAPE,
            "classes": CLASSES, "preprocess": PREPROCESS}
    with open(os.path.join(model_dir, "metadata.json"), "w") as f:
        json.dump(meta, f)
    return how


def compact(doc):
    return json.dumps(doc, separators=(",", ":")).encode()


def v1_body(x):
    return compact({"inputs": x.tolist()})


def v2_body(x):
    return compact({"inputs": [{"name": "input", "shape": list(x.shape),
                                "datatype": "FP32", "data": x.reshape(-1).tolist()}]})


def v2bin_body(x):
    """(body, JSON header length): the KServe binary tensor extension."""
    raw = np.ascontiguousarray(x, dtype="<f4").tobytes()
    head = compact({"inputs": [{"name": "input", "shape": list(x.shape),
                                "datatype": "FP32",
                                "parameters": {"binary_data_size": len(raw)}}]})
    return head + raw, len(head)


# ---- processes ----

def proc_tree(pid):
    """pid and its descendants."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def memory_kib(pid):
    """(VmRSS, VmHWM) in KiB, summed over pid's process tree."""
    rss = hwm = 0
    for p in proc_tree(pid):
        try:
            with open("/proc/%d/status" % p) as f:
                s = f.read()
        except OSError:
            continue
        m1, m2 = re.search(r"VmRSS:\s+(\d+)", s), re.search(r"VmHWM:\s+(\d+)", s)
        rss += int(m1.group(1)) if m1 else 0
        hwm += int(m2.group(1)) if m2 else 0
    return rss, hwm


class Proc:
    """A server process in its own session, with its output in files."""

    def __init__(self, name, cmd, workdir, env=None, pass_fds=()):
        self.name = name
        self.out = open(os.path.join(workdir, name + ".out"), "w+")
        self.err = open(os.path.join(workdir, name + ".err"), "w+")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err, env=env,
                                     pass_fds=pass_fds, start_new_session=True)
        self.port = None

    def wait_output(self, pattern, timeout=120):
        t_end = time.time() + timeout
        while time.time() < t_end:
            self.out.seek(0)
            m = re.search(pattern, self.out.read())
            if m:
                return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.err.seek(0)
        raise SystemExit("%s did not start:\n%s" % (self.name, self.err.read()[-3000:]))

    def wait_http(self, path, timeout=180):
        t_end = time.time() + timeout
        while time.time() < t_end:
            if self.proc.poll() is not None:
                break
            try:
                st, _, _ = request(self.port, "GET", path)
                if st == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.err.seek(0)
        raise SystemExit("%s did not answer:\n%s" % (self.name, self.err.read()[-3000:]))

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
            except ProcessLookupError:
                pass


def request(port, method, path, body=None, headers=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def start_trainyard(binary, workdir):
    data = os.path.join(workdir, "trainyard-data")
    os.mkdir(data)
    p = Proc("trainyard", [binary, "serve", "--listen", "127.0.0.1:0", "--data", data,
                           "--train-device", "cpu", "--serve-device", "cpu"], workdir)
    p.port = int(p.wait_output(r"listening on http://127\.0\.0\.1:(\d+)").group(1))
    with open(os.path.join(data, "admin.key")) as f:
        p.key = f.read().strip()
    return p


def import_model(ty, model_dir):
    """POST /v1/models with the weights and metadata parts; the model id."""
    b = uuid.uuid4().hex
    with open(os.path.join(model_dir, "weights.safetensors"), "rb") as f:
        weights = f.read()
    with open(os.path.join(model_dir, "metadata.json"), "rb") as f:
        meta = f.read()
    body = b"".join([
        ('--%s\r\nContent-Disposition: form-data; name="name"\r\n\r\n' % b).encode(),
        b"bench-serve-mlp\r\n",
        ('--%s\r\nContent-Disposition: form-data; name="metadata"\r\n'
         'Content-Type: application/json\r\n\r\n' % b).encode(), meta, b"\r\n",
        ('--%s\r\nContent-Disposition: form-data; name="weights"; filename="w.safetensors"'
         '\r\nContent-Type: application/octet-stream\r\n\r\n' % b).encode(), weights, b"\r\n",
        ("--%s--\r\n" % b).encode()])
    st, _, out = request(ty.port, "POST", "/v1/models", body,
                         {"Authorization": "Bearer " + ty.key,
                          "Content-Type": "multipart/form-data; boundary=" + b})
    if st != 201:
        raise SystemExit("importing the model into trainyard: %d %s" % (st, out[:500]))
    return json.loads(out)["id"]


def ensure_venv(venv):
    """The venv's python, with fastapi and uvicorn installed."""
    py = os.path.join(venv, "bin", "python")
    probe = [py, "-c", "import fastapi, uvicorn, torch, numpy"]
    if os.path.exists(py) and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    say("installing FastAPI and uvicorn into %s" % venv)
    if not os.path.exists(py):
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv],
                       check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "fastapi", "uvicorn"], check=True)
    r = subprocess.run(probe, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("the venv %s cannot import fastapi, uvicorn, torch and numpy "
                         "(Debian's python3-torch and python3-numpy are needed):\n%s"
                         % (venv, r.stderr))
    return py


def start_fastapi(py, workers, model_dir, workdir, ncpu):
    # A listening socket with TCP_NODELAY, handed to uvicorn by --fd: Linux
    # copies the option onto every connection accepted from it, whatever
    # uvicorn's own socket object believes (with --fd it thinks the socket
    # is AF_UNIX, and with --workers 2 it binds one with proto 0: asyncio
    # sets TCP_NODELAY on neither).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    env = dict(os.environ, BENCH_MODEL_DIR=model_dir, OMP_WAIT_POLICY="PASSIVE",
               BENCH_TORCH_THREADS=str(max(1, ncpu // workers)))
    name = "fastapi-%dw" % workers
    p = Proc(name, [py, "-m", "uvicorn", "app_fastapi:app", "--app-dir", HERE,
                    "--fd", str(sock.fileno()), "--workers", str(workers),
                    "--no-access-log", "--log-level", "warning"],
             workdir, env=env, pass_fds=(sock.fileno(),))
    p.port = sock.getsockname()[1]
    sock.close()
    p.wait_http("/_nodelay")
    return p


def start_numpy(model_dir, workdir):
    p = Proc("http.server", ["/usr/bin/python3", os.path.join(HERE, "app_numpy.py"),
                             model_dir], workdir)
    p.port = int(p.wait_output(r"port (\d+)").group(1))
    return p


def check_nodelay(p, tries=12):
    """TCP_NODELAY as each of p's workers reports it, over fresh
    connections (so that both of two workers are likely reached)."""
    seen = {}
    for _ in range(tries):
        st, _, out = request(p.port, "GET", "/_nodelay")
        doc = json.loads(out)
        if st != 200 or not doc["nodelay"] or not all(doc["nodelay"]):
            raise SystemExit("%s: a connection without TCP_NODELAY (%s)" % (p.name, out))
        seen[doc["pid"]] = len(doc["nodelay"])
    return len(seen)


# ---- load ----

def parse_ms(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    v = float(m.group(1))
    return v * {"us": 1e-3, "ms": 1, "s": 1e3, "m": 6e4}[m.group(2)]


def wrk(port, target, c, seconds):
    """One wrk run against target (path, method, body file or None, headers);
    its figures."""
    path, body_file, headers = target
    seconds = max(1, int(round(seconds)))  # wrk takes whole seconds
    cmd = ["wrk", "-t", str(min(c, 2)), "-c", str(c), "-d", "%ds" % seconds,
           "--latency", "--timeout", "30s"]
    for k, v in headers.items():
        cmd += ["-H", "%s: %s" % (k, v)]
    env = dict(os.environ)
    if body_file:
        cmd += ["-s", os.path.join(HERE, "post.lua")]
        env["BENCH_BODY"] = body_file
    cmd.append("http://127.0.0.1:%d%s" % (port, path))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 120)
    out = r.stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if r.returncode != 0 or not m:
        raise SystemExit("wrk failed (%d):\n%s%s" % (r.returncode, out, r.stderr))
    lat = dict((int(p), parse_ms(v)) for p, v in
               re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", out, re.M))
    errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    n = re.search(r"(\d+) requests in", out)
    return {"rps": float(m.group(1)), "requests": int(n.group(1)) if n else None,
            "p50_ms": lat.get(50), "p75_ms": lat.get(75), "p90_ms": lat.get(90),
            "p99_ms": lat.get(99),
            "socket_errors": sum(int(v) for v in errs.groups()) if errs else 0,
            "non_2xx": int(non2xx.group(1)) if non2xx else 0}


# ---- checks ----

def outputs_of(system, status, headers, raw, batch):
    """The (batch, 10) outputs of a reply, or a reason it has none."""
    if status != 200:
        try:
            detail = json.loads(raw)["detail"]
        except (ValueError, KeyError, TypeError):
            detail = raw[:200].decode("utf-8", "replace")
        return None, "HTTP %d: %s" % (status, detail)
    hl = {k.lower(): v for k, v in headers.items()}
    if system in ("ty-v2", "ty-v2bin"):
        n = int(hl.get("inference-header-content-length", len(raw)))
        doc, rest = json.loads(raw[:n]), raw[n:]
        out = doc["outputs"][0]
        if "data" in out:
            y = np.asarray(out["data"], np.float32)
        else:
            size = out.get("parameters", {}).get("binary_data_size", len(rest))
            y = np.frombuffer(rest[:size], "<f4")
        return y.reshape(batch, -1), None
    return np.asarray(json.loads(raw)["outputs"], np.float32), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "trainyard"))
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 1 s per run, one repetition")
    ap.add_argument("--duration", type=float, default=10, help="seconds per run (10)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions per system and case (2)")
    ap.add_argument("--only", default=",".join(SYSTEMS + ["healthz"]),
                    help="comma-separated systems to time, of: %s"
                    % ", ".join(SYSTEMS + ["healthz"]))
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--connections", default="1,8,32")
    ap.add_argument("--json", help="write the results here as JSON")
    ap.add_argument("--venv", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "trainyard", "bench-serve-venv"))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.quick:
        args.duration, args.reps = 1, 1
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    bad = [s for s in only if s not in SYSTEMS + ["healthz"]]
    if bad:
        raise SystemExit("--only: unknown %s (known: %s)"
                         % (", ".join(bad), ", ".join(SYSTEMS + ["healthz"])))
    batches = [int(b) for b in args.batches.split(",")]
    conns = [int(c) for c in args.connections.split(",")]
    if not os.access(args.binary, os.X_OK):
        raise SystemExit("%s is not an executable (build it: make server, or --binary)"
                         % args.binary)
    if not shutil.which("wrk"):
        raise SystemExit("wrk is missing: scripts/setup.sh bench-serve installs it "
                         "(apt-get install wrk)")
    model, ncpu = cpu_model()
    wrk_version = subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout
    wrk_version = wrk_version.split("[")[0].strip().replace("wrk debian/", "wrk ")
    say("CPU: %s, %d logical CPUs" % (model, ncpu))
    py = ensure_venv(args.venv) if any(s.startswith("fastapi") for s in only) else None

    workdir = tempfile.mkdtemp(prefix="ty-bench-serve-")
    procs = []
    try:
        model_dir = os.path.join(workdir, "model")
        os.mkdir(model_dir)
        how = make_model(model_dir, args.seed)
        say("model: the README's MLP 784-256-128-10, weights from %s" % how)
        ty = start_trainyard(args.binary, workdir)
        procs.append(ty)
        mid = import_model(ty, model_dir)
        servers = {s: ty for s in ("ty-v1", "ty-v2", "ty-v2bin", "healthz")}
        if "fastapi-1w" in only:
            servers["fastapi-1w"] = start_fastapi(py, 1, model_dir, workdir, ncpu)
            procs.append(servers["fastapi-1w"])
        if "fastapi-2w" in only:
            servers["fastapi-2w"] = start_fastapi(py, 2, model_dir, workdir, ncpu)
            procs.append(servers["fastapi-2w"])
        if "http.server" in only:
            servers["http.server"] = start_numpy(model_dir, workdir)
            procs.append(servers["http.server"])

        # The request of each system and batch, as a file wrk reads.
        auth = {"Authorization": "Bearer " + ty.key}
        inputs = make_inputs(max(batches))
        targets = {}
        for b in batches:
            x = inputs[:b]
            bodies = {"ty-v1": (v1_body(x), "/v1/models/%s/predict" % mid,
                                dict(auth, **{"Content-Type": "application/json"})),
                      "ty-v2": (v2_body(x), "/v2/models/%s/infer" % mid,
                                dict(auth, **{"Content-Type": "application/json"}))}
            raw, hlen = v2bin_body(x.astype(np.float32))
            bodies["ty-v2bin"] = (raw, "/v2/models/%s/infer" % mid,
                                  dict(auth, **{"Content-Type": "application/octet-stream",
                                                "Inference-Header-Content-Length": str(hlen)}))
            for s in BASELINES:
                bodies[s] = (v1_body(x), "/predict", {"Content-Type": "application/json"})
            for s, (body, path, headers) in bodies.items():
                f = os.path.join(workdir, "%s-b%d.body" % (s, b))
                with open(f, "wb") as fh:
                    fh.write(body)
                targets[s, b] = (path, f, headers, body)

        # Correctness before timing: every system's outputs against /v1's.
        say("checks (max |output - trainyard /v1 output| <= %g):" % TOL)
        binary_ok = True
        for b in batches:
            path, _, headers, body = targets["ty-v1", b]
            ref, why = outputs_of("ty-v1", *request(ty.port, "POST", path, body, headers), b)
            if ref is None:
                raise SystemExit("trainyard /v1 predict: " + why)
            for s in SYSTEMS:
                if s == "ty-v1" or s not in servers or s not in only:
                    continue
                path, _, headers, body = targets[s, b]
                y, why = outputs_of(s, *request(servers[s].port, "POST", path, body, headers), b)
                if s == "ty-v2bin" and (y is None or y.shape != ref.shape):
                    if binary_ok:
                        say("  binary: not supported by this server (%s)"
                            % (why or "outputs of shape %s" % (y.shape,)))
                    binary_ok = False
                    continue
                if y is None:
                    raise SystemExit("%s: %s" % (s, why))
                diff = float(np.abs(y - ref).max()) if y.shape == ref.shape else float("inf")
                if not diff <= TOL:
                    raise SystemExit("%s batch %d: max |diff| %.3g > %g (shape %s vs %s)"
                                     % (s, b, diff, TOL, y.shape, ref.shape))
                say("  %-22s batch %-3d max |diff| %.2e" % (LABEL[s], b, diff))
        if not binary_ok and "ty-v2bin" in only:
            only.remove("ty-v2bin")
        for s in BASELINES:
            if s in servers:
                n = check_nodelay(servers[s])
                say("  %-22s TCP_NODELAY on every connection (%d worker%s answered)"
                    % (LABEL[s], n, "s" if n > 1 else ""))

        # Timing: each case runs the systems in turn, args.reps times.
        warm = 1
        plan = []
        if "healthz" in only:
            plan += [("healthz", 0, c) for c in conns]
        plan += [(None, b, c) for b in batches for c in conns]
        results = []
        total = sum(len([s for s in only if s != "healthz"]) if s0 is None else 1
                    for s0, _, _ in plan) * args.reps
        say("timing: %d runs of %g s (%s, threads = min(c, 2), --latency)"
            % (total, args.duration, wrk_version))
        for s0, b, c in plan:
            systems = [s0] if s0 else [s for s in SYSTEMS if s in only]
            runs = {s: [] for s in systems}
            for s in systems:
                port = servers[s].port
                target = (("/healthz", None, {}) if s == "healthz"
                          else targets[s, b][:3])
                wrk(port, target, c, warm)
            for rep in range(args.reps):
                for s in systems:
                    target = (("/healthz", None, {}) if s == "healthz"
                              else targets[s, b][:3])
                    r = wrk(servers[s].port, target, c, args.duration)
                    r["rss_kib"], r["hwm_kib"] = memory_kib(servers[s].proc.pid)
                    runs[s].append(r)
            for s in systems:
                rs = runs[s]
                row = {"system": s, "label": LABEL[s], "batch": b, "connections": c,
                       "threads": min(c, 2), "runs": rs}
                for k in ("rps", "p50_ms", "p99_ms"):
                    row[k] = statistics.mean(r[k] for r in rs)
                row["samples_per_s"] = row["rps"] * max(b, 1)
                row["rss_mib"] = rs[-1]["rss_kib"] / 1024
                row["hwm_mib"] = rs[-1]["hwm_kib"] / 1024
                row["errors"] = sum(r["non_2xx"] + r["socket_errors"] for r in rs)
                results.append(row)
                say("  %-22s b=%-3s c=%-3d %9.1f req/s  p50 %7.2f ms  p99 %7.2f ms%s"
                    % (LABEL[s], b or "-", c, row["rps"], row["p50_ms"], row["p99_ms"],
                       "  (%d errors)" % row["errors"] if row["errors"] else ""))

        report(results, model, ncpu, args, how, wrk_version, binary_ok)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"cpu": model, "logical_cpus": ncpu, "wrk": wrk_version,
                           "duration_s": args.duration, "reps": args.reps,
                           "weights": how, "binary_supported": binary_ok,
                           "results": results, "ratios": ratios(results)}, f, indent=1)
            say("results written to %s" % args.json)
    finally:
        for p in reversed(procs):
            p.close()
        shutil.rmtree(workdir, ignore_errors=True)


TRAINYARD_MODES = ["ty-v1", "ty-v2", "ty-v2bin"]


def ratios(results):
    """Each trainyard mode's req/s (/v1 JSON, /v2 JSON, /v2 binary) over
    each baseline's, and over /healthz's at the same connection count, per
    case."""
    by = {(r["system"], r["batch"], r["connections"]): r["rps"] for r in results}
    out = []
    for r in results:
        if r["system"] not in TRAINYARD_MODES:
            continue
        b, c = r["batch"], r["connections"]
        row = {"system": r["system"], "batch": b, "connections": c}
        for s in BASELINES:
            if (s, b, c) in by:
                row["vs_" + s] = r["rps"] / by[s, b, c]
        if ("healthz", 0, c) in by:
            row["vs_healthz"] = r["rps"] / by["healthz", 0, c]
        out.append(row)
    return out


def report(results, model, ncpu, args, how, wrk_version, binary_ok):
    say("")
    say("CPU: %s, %d logical CPUs (wrk shares them)" % (model, ncpu))
    say("%s, threads = min(c, 2); %g s per run, mean of %d run%s; "
        "RSS = VmRSS of the server's processes after its last run"
        % (wrk_version, args.duration, args.reps, "s" if args.reps > 1 else ""))
    if not binary_ok:
        say("binary: not supported by this server")
    say("")
    say("%-22s %5s %4s %10s %11s %9s %9s %8s"
        % ("system", "batch", "c", "req/s", "samples/s", "p50 ms", "p99 ms", "RSS MiB"))
    last = None
    for r in results:
        key = (r["batch"], r["connections"] if r["batch"] else 0)
        if last is not None and key != last:
            say("")
        last = key
        say("%-22s %5s %4d %10.1f %11s %9.2f %9.2f %8.1f%s"
            % (r["label"], r["batch"] or "-", r["connections"], r["rps"],
               "%.1f" % r["samples_per_s"] if r["batch"] else "-", r["p50_ms"],
               r["p99_ms"], r["rss_mib"], "  %d errors" % r["errors"] if r["errors"] else ""))
    rs = ratios(results)
    if rs:
        cols = [s for s in BASELINES if any("vs_" + s in x for x in rs)]
        has_h = any("vs_healthz" in x for x in rs)
        say("")
        for mode in TRAINYARD_MODES:
            mine = [x for x in rs if x["system"] == mode]
            if not mine:
                continue
            say("")
            say("%s req/s (and samples/s) over:" % LABEL[mode])
            say("%5s %4s" % ("batch", "c")
                + "".join(" %18s" % LABEL[s] for s in cols)
                + (" %18s" % "/healthz ceiling" if has_h else ""))
            for x in mine:
                line = "%5d %4d" % (x["batch"], x["connections"])
                for s in cols:
                    line += " %17.2fx" % x["vs_" + s] if "vs_" + s in x else " %18s" % "-"
                if has_h:
                    line += " %17.2fx" % x["vs_healthz"] if "vs_healthz" in x else " %18s" % "-"
                say(line)


if __name__ == "__main__":
    main()
