#!/usr/bin/python3
"""Round trip between a live `trainyard serve` and PyTorch (ctest label
"parity"):

  train -> torch   a model trained through the API, its weights downloaded
                   (GET /v1/models/{id}/weights) and loaded into PyTorch with
                   tools/trainyard_torch.py, predicts what the
                   server's /predict does (max |diff| <= 1e-5 on outputs);
  torch -> import  a model built (and trained a few steps) in PyTorch, saved
                   with trainyard_torch.py and imported (POST /v1/models),
                   predicts on the server what it predicts in PyTorch.

    roundtrip.py path/to/trainyard SUITE      SUITE: mlp (dense networks)
                                              or conv (conv2d, pooling,
                                              batchnorm, residual)
Needs /usr/bin/python3 with torch; fails (never skips) without it.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
try:
    import numpy as np
    import torch
except ImportError as e:
    sys.exit("FAIL: the round-trip test needs PyTorch and numpy for %s (%s): "
             "install python3-torch and python3-numpy (scripts/setup.sh test "
             "does)" % (sys.executable, e))

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import trainyard_torch as tt  # noqa: E402

TOL = 1e-5
torch.set_num_threads(1)


class Server:
    def __init__(self, binary):
        self.data = tempfile.mkdtemp(prefix="ty-roundtrip-")
        self.out = open(os.path.join(self.data, "stdout"), "w+")
        self.err = open(os.path.join(self.data, "stderr"), "w+")
        self.proc = subprocess.Popen(
            # On the CPU on any machine: the comparisons' tolerances are
            # the CPU engine's.
            [binary, "serve", "--listen", "127.0.0.1:0", "--data", self.data,
             "--train-device", "cpu"],
            stdout=self.out, stderr=self.err)
        # 60 s, as the integration harness allows: a start takes about
        # 0.1 s, but a loaded CI machine once kept one silent for over 10 s
        # (the limit here then).
        port, t0 = None, time.time()
        while time.time() - t0 < 60:
            self.out.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.out.read())
            if m:
                port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if port is None:
            waited = time.time() - t0
            code = self.proc.poll()
            if code is None:
                self.proc.kill()
                self.proc.wait()
            self.out.seek(0)
            self.err.seek(0)
            raise SystemExit("FAIL: the server did not start (%s after %.1f s)\nstdout:\n%s\n"
                             "stderr:\n%s" % ("still running" if code is None else
                                              "exit %s" % code, waited,
                                              self.out.read(), self.err.read()))
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

    def request(self, method, path, body=None, ctype=None, want=(200,)):
        req = urllib.request.Request(self.base + path, data=body, method=method)
        req.add_header("Authorization", "Bearer " + self.key)
        if ctype:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                status, data = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        if status not in want:
            raise AssertionError("%s %s: %d %s" % (method, path, status, data[:2000]))
        return data

    def json(self, method, path, doc=None, want=(200,)):
        body = json.dumps(doc).encode() if doc is not None else None
        return json.loads(self.request(method, path, body,
                                       "application/json" if body else None, want))

    def upload(self, path, fields, files, want=(201,)):
        """multipart/form-data: fields name -> text, files name -> bytes."""
        b = uuid.uuid4().hex
        parts = []
        for k, v in fields.items():
            parts.append(('--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n'
                          % (b, k)).encode() + v.encode() + b"\r\n")
        for k, v in files.items():
            parts.append(('--%s\r\nContent-Disposition: form-data; name="%s"; '
                          'filename="%s"\r\nContent-Type: application/octet-stream\r\n\r\n'
                          % (b, k, k)).encode() + v + b"\r\n")
        body = b"".join(parts) + ("--%s--\r\n" % b).encode()
        return json.loads(self.request("POST", path, body,
                                       "multipart/form-data; boundary=" + b, want))

    def train(self, dataset, spec, **hp):
        hp = dict({"epochs": 3, "batch_size": 32, "seed": 7}, **hp)
        job = self.json("POST", "/v1/jobs", {"dataset": dataset, "model": spec,
                                             "hyperparameters": hp}, want=(202,))
        for _ in range(1200):
            j = self.json("GET", "/v1/jobs/" + job["id"])
            if j["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.05)
        if j["status"] != "succeeded":
            raise AssertionError("job %s: %s" % (j["status"], j.get("error")))
        return j["model"]


def compare(what, server_out, torch_out):
    a, b = np.asarray(server_out, np.float64), np.asarray(torch_out, np.float64)
    if a.shape != b.shape:
        raise AssertionError("%s: server gives shape %s, torch %s" % (what, a.shape, b.shape))
    diff = float(np.max(np.abs(a - b)))
    print("  %-4s %-44s max |diff| %.3e" % ("ok" if diff <= TOL else "FAIL", what, diff))
    if not diff <= TOL:
        raise AssertionError("%s: max |diff| %.3e > %g" % (what, diff, TOL))


def server_predict(srv, model_id, x):
    r = srv.json("POST", "/v1/models/%s/predict" % model_id, {"inputs": x.tolist()})
    return r["outputs"]


def train_to_torch(srv, dataset, spec, x, what, **hp):
    """Trains spec on dataset through the API, loads the weights in torch,
    compares predictions on raw inputs x."""
    model_id = srv.train(dataset, spec, **hp)
    raw = srv.request("GET", "/v1/models/%s/weights" % model_id)
    path = os.path.join(srv.data, model_id + ".safetensors")
    with open(path, "wb") as f:
        f.write(raw)
    model, meta = tt.load_model(path)
    compare(what + ": trained, loaded in torch", server_predict(srv, model_id, x),
            tt.predict(model, meta, x))


def torch_to_import(srv, spec, shape, classes, pre, x, what, with_metadata):
    """Builds spec in torch, trains it a few steps (so batchnorm statistics
    are its own), imports it and compares predictions on raw inputs x."""
    torch.manual_seed(3)
    model, _ = tt.build(spec, shape)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    meta = tt.parse_meta(tt.model_metadata(spec, "classification", shape, classes,
                                           preprocess=pre))
    xs = torch.from_numpy(tt.preprocess(meta, x).reshape([len(x)] + shape))
    ys = torch.randint(0, len(classes), (len(x),))
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xs), ys).backward()
        opt.step()
    model.eval()
    if with_metadata:
        # A plain PyTorch state dict (num_batches_tracked included) and the
        # metadata as its own part.
        path = os.path.join(srv.data, "state_dict.safetensors")
        tt.st_write(path, model.state_dict())
        md = {"spec": spec, "task": "classification", "input_shape": shape,
              "classes": classes, "preprocess": pre}
        fields = {"name": what, "metadata": json.dumps(md)}
    else:
        path = os.path.join(srv.data, "model.safetensors")
        tt.save_model(path, model, spec, "classification", shape, classes,
                      preprocess=pre)
        fields = {"name": what}
    with open(path, "rb") as f:
        doc = srv.upload("/v1/models", fields, {"weights": f.read()})
    compare(what + ": torch, imported", server_predict(srv, doc["id"], x),
            tt.predict(model, meta, x))


def blobs_csv(rng, n):
    rows = ["x1,x2,x3,x4,label"]
    centres = {"setosa": (0, 5, 100, 0), "versicolor": (10, 2, 100, 2),
               "virginica": (20, -1, 100, 4)}
    for i in range(n):
        label = list(centres)[i % 3]
        c = centres[label]
        rows.append(",".join("%.3f" % (v + rng.gauss(0, 2)) for v in c) + "," + label)
    return ("\n".join(rows) + "\n").encode()


def idx_files(rng, n, h, w):
    """IDX images (n, h, w) whose class is where the bright blob is."""
    imgs = np.zeros((n, h, w), np.uint8)
    labels = np.zeros(n, np.uint8)
    for i in range(n):
        k = i % 4
        labels[i] = k
        imgs[i] = [[rng.randrange(40) for _ in range(w)] for _ in range(h)]
        r0, c0 = (k // 2) * (h // 2), (k % 2) * (w // 2)
        imgs[i, r0:r0 + h // 2, c0:c0 + w // 2] += 150
    head = lambda magic, dims: bytes([0, 0, 8, magic]) + b"".join(  # noqa: E731
        d.to_bytes(4, "big") for d in dims)
    return head(3, (n, h, w)) + imgs.tobytes(), head(1, (n,)) + labels.tobytes(), imgs


def suite_mlp(srv, rng):
    csv = blobs_csv(rng, 240)
    ds = srv.upload("/v1/datasets", {"name": "blobs", "format": "csv",
                                     "label_column": "label"}, {"file": csv})
    x = np.array([[float(v) for v in line.split(",")[:4]]
                  for line in csv.decode().splitlines()[1:13]], np.float32)
    spec = {"layers": [{"type": "dense", "units": 16}, {"type": "tanh"},
                       {"type": "dense", "units": 16}, {"type": "gelu"},
                       {"type": "dense", "units": 3}]}
    train_to_torch(srv, ds["id"], spec, x, "csv mlp (standardize)",
                   optimizer="adam", learning_rate=0.01)
    images, labels, imgs = idx_files(rng, 200, 8, 8)
    ds = srv.upload("/v1/datasets", {"name": "quads", "format": "idx"},
                    {"images": images, "labels": labels})
    x = imgs[:10].reshape(10, -1).astype(np.float32)
    spec = {"layers": [{"type": "flatten"}, {"type": "dense", "units": 32},
                       {"type": "relu"}, {"type": "dropout", "rate": 0.2},
                       {"type": "dense", "units": 4}]}
    train_to_torch(srv, ds["id"], spec, x, "idx mlp (scale)", optimizer="sgd",
                   learning_rate=0.05, momentum=0.9)
    torch_to_import(srv, spec, [1, 8, 8], [0, 1, 2, 3],
                    {"kind": "scale", "factor": 1 / 255}, x, "mlp file with metadata",
                    with_metadata=False)
    mean = [float(v) for v in rng.sample(range(100), 4)]
    pre = {"kind": "standardize", "mean": mean, "std": [2.0, 3.0, 0.5, 1.0]}
    spec = {"layers": [{"type": "dense", "units": 8}, {"type": "sigmoid"},
                       {"type": "dense", "units": 3}]}
    x = np.array([[rng.uniform(0, 100) for _ in range(4)] for _ in range(9)], np.float32)
    torch_to_import(srv, spec, [4], ["a", "b", "c"], pre, x,
                    "mlp state dict + metadata part", with_metadata=True)


def suite_conv(srv, rng):
    images, labels, imgs = idx_files(rng, 120, 12, 12)
    ds = srv.upload("/v1/datasets", {"name": "quads", "format": "idx"},
                    {"images": images, "labels": labels})
    x = imgs[:8].reshape(8, -1).astype(np.float32)
    spec = {"layers": [
        {"type": "conv2d", "filters": 6, "kernel_size": 3, "padding": "same"},
        {"type": "batchnorm"}, {"type": "relu"},
        {"type": "maxpool2d", "pool_size": 2},
        {"type": "residual", "layers": [
            {"type": "conv2d", "filters": 6, "kernel_size": 3, "padding": 1},
            {"type": "batchnorm"}, {"type": "leaky_relu"}]},
        {"type": "residual",
         "layers": [{"type": "conv2d", "filters": 8, "kernel_size": 3, "stride": 2, "padding": 1}],
         "projection": [{"type": "conv2d", "filters": 8, "kernel_size": 1, "stride": 2,
                         "bias": False}, {"type": "batchnorm"}]},
        {"type": "avgpool2d", "pool_size": 3, "stride": 1, "padding": 1},
        {"type": "global_avgpool"}, {"type": "dense", "units": 4}]}
    train_to_torch(srv, ds["id"], spec, x, "idx cnn (conv, bn, residual)",
                   optimizer="adam", learning_rate=0.01, epochs=2)
    torch_to_import(srv, spec, [1, 12, 12], [0, 1, 2, 3],
                    {"kind": "scale", "factor": 1 / 255}, x,
                    "cnn state dict + metadata part", with_metadata=True)
    torch_to_import(srv, spec, [1, 12, 12], ["nw", "ne", "sw", "se"],
                    {"kind": "scale", "factor": 1 / 255}, x,
                    "cnn file with metadata", with_metadata=False)


def main(argv):
    if len(argv) != 2 or argv[1] not in ("mlp", "conv"):
        print(__doc__, file=sys.stderr)
        return 64
    srv = Server(argv[0])
    try:
        t0 = time.time()
        (suite_mlp if argv[1] == "mlp" else suite_conv)(srv, random.Random(11))
        print("round trip %s: ok in %.1f s" % (argv[1], time.time() - t0))
    except AssertionError as e:
        print("FAIL: %s" % e)
        srv.err.seek(0)
        print(srv.err.read()[-3000:])
        return 1
    finally:
        srv.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
