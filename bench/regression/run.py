#!/usr/bin/python3
"""Regression benchmark: targets in natural units (issue 30, finding 1).

Two data sets, made here with numpy (seeded), split into training rows and
held-out rows:

  synthetic  2,400 rows, 8 features uniform in [-1, 1],
             y = 5e5 + 1e5 * (w . x) + N(0, 2e4); 2,000 train, 400 held out
             (the set tests/integration/test_regression.c draws, here from
             numpy's generator)
  houses     3,000 houses: sqft 500-4000, bedrooms 1-6, age 0-100 years,
             distance to the centre 0.5-30 km; a price of 1e5-7e5 from them
             (linear, a sqft^2 term, an age x distance term, 5% noise);
             2,400 train, 600 held out

Each is trained, on the same split, by

  trainyard standardize  a real `trainyard serve` (started here), the CSV
                         uploaded with the price in its units, the default
                         hyperparameters.target_scaling
  trainyard none         the same with target_scaling "none": the behaviour
                         before target scaling (dca3bf6 and earlier)
  sklearn MLPRegressor   TransformedTargetRegressor(Pipeline(StandardScaler,
                         MLPRegressor), transformer=StandardScaler())
  least squares          numpy lstsq with an intercept (a linear ceiling)

with the same MLP (64-64 ReLU, Adam lr 0.001, batch 64, no weight decay,
--epochs epochs, trainyard validating on the held-out rows). It prints the
held-out RMSE, R^2 and mean relative error |pred - y| / y of each, and the
training time; trainyard's RMSE and R^2 are evaluate's (checked against the
predictions).

    bench/regression/run.py [--binary build/trainyard] [--epochs 40]
                            [--seed 1]        (or: make bench-regression)

A benchmark, not a test: it asserts nothing.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import numpy as np

HIDDEN = (64, 64)
BATCH = 64
LR = 0.001


def synthetic(rng):
    w = np.array([1.0, -0.5, 0.8, 0.3, -0.2, 0.6, 0.1, -0.4])
    x = rng.uniform(-1.0, 1.0, size=(2400, 8))
    y = 5e5 + 1e5 * (x @ w) + rng.normal(0.0, 2e4, size=2400)
    names = ["f%d" % i for i in range(8)]
    return names, x, y, 2000


def houses(rng):
    n = 3000
    sqft = rng.uniform(500, 4000, n)
    beds = rng.integers(1, 7, n).astype(float)
    age = rng.uniform(0, 100, n)
    dist = rng.uniform(0.5, 30, n)
    price = (60000 + 95 * sqft + 0.012 * sqft ** 2 + 9000 * beds - 900 * age
             - 5200 * dist + 25 * age * dist)
    price *= rng.normal(1.0, 0.05, n)
    price = np.clip(price, 1e5, 7e5)
    x = np.column_stack([sqft, beds, age, dist])
    return ["sqft", "bedrooms", "age", "distance_km"], x, price, 2400


def metrics(y, p):
    err = p - y
    mse = float(np.mean(err ** 2))
    r2 = 1.0 - float(np.sum(err ** 2)) / float(np.sum((y - y.mean()) ** 2))
    return {"rmse": mse ** 0.5, "r2": r2,
            "rel": float(np.mean(np.abs(err) / np.abs(y)))}


# ---- trainyard, through its API ----

class Server:
    def __init__(self, binary):
        self.data = tempfile.mkdtemp(prefix="ty-bench-reg-")
        self.out = open(os.path.join(self.data, "stdout"), "w+")
        self.err = open(os.path.join(self.data, "stderr"), "w+")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data", self.data,
             "--train-device", "cpu"], stdout=self.out, stderr=self.err)
        t0, port = time.time(), None
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

    def call(self, method, path, body=None, ctype="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=body, method=method)
        req.add_header("Authorization", "Bearer " + self.key)
        if body is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, timeout=3600) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def upload_csv(self, name, names, x, y):
        lines = [",".join(names + ["price"])]
        lines += [",".join("%.6f" % v for v in row) + ",%.2f" % t
                  for row, t in zip(x, y)]
        csv = ("\n".join(lines) + "\n").encode()
        b = uuid.uuid4().hex
        parts = [f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
                 for k, v in (("name", name), ("format", "csv"),
                              ("label_column", "price"), ("task", "regression"))]
        parts.append(f'--{b}\r\nContent-Disposition: form-data; name="file"; '
                     f'filename="{name}.csv"\r\nContent-Type: text/csv\r\n\r\n'.encode()
                     + csv + b"\r\n")
        parts.append(f"--{b}--\r\n".encode())
        status, doc = self.call("POST", "/v1/datasets", b"".join(parts),
                                f"multipart/form-data; boundary={b}")
        if status != 201:
            sys.exit(f"upload of {name} failed: {status} {doc}")
        return doc["id"]

    def train(self, train_id, test_id, n_outputs, epochs, seed, scaling):
        layers = []
        for u in HIDDEN:
            layers += [{"type": "dense", "units": u}, {"type": "relu"}]
        layers.append({"type": "dense", "units": n_outputs})
        job = {"dataset": train_id, "validation": {"dataset": test_id},
               "model": {"layers": layers},
               "hyperparameters": {"epochs": epochs, "batch_size": BATCH,
                                   "optimizer": "adam", "learning_rate": LR,
                                   "weight_decay": 0.0, "seed": seed,
                                   "target_scaling": scaling}}
        status, doc = self.call("POST", "/v1/jobs", job)
        if status != 202:
            sys.exit(f"submit failed: {status} {doc}")
        jid, t0 = doc["id"], time.time()
        while True:
            _, doc = self.call("GET", "/v1/jobs/" + jid)
            if doc["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.2)
        if doc["status"] != "succeeded":
            sys.exit(f"job {jid}: {doc['status']} {doc.get('error')}")
        seconds = sum(e.get("seconds") or 0 for e in
                      self.call("GET", f"/v1/jobs/{jid}/metrics")[1]["epochs"])
        return doc["model"], seconds, time.time() - t0

    def predict(self, model, x):
        out = []
        for i in range(0, len(x), 500):
            status, doc = self.call("POST", f"/v1/models/{model}/predict",
                                    {"inputs": x[i:i + 500].tolist()})
            if status != 200:
                sys.exit(f"predict failed: {status} {doc}")
            out += [p[0] if isinstance(p, list) else p for p in doc["predictions"]]
        return np.array(out, dtype=float)


def run_trainyard(srv, name, names, x, y, n_train, epochs, seed, scaling):
    tr = srv.upload_csv(f"{name}-train-{scaling}", names, x[:n_train], y[:n_train])
    te = srv.upload_csv(f"{name}-held-out-{scaling}", names, x[n_train:], y[n_train:])
    model, train_s, _ = srv.train(tr, te, 1, epochs, seed, scaling)
    _, ev = srv.call("POST", f"/v1/models/{model}/evaluate", {"dataset": te})
    pred = srv.predict(model, x[n_train:])
    m = metrics(y[n_train:], pred)
    # evaluate's figures, checked against the predictions
    if abs(ev["rmse"] - m["rmse"]) > 1e-3 * m["rmse"] + 1.0:
        print(f"  note: evaluate rmse {ev['rmse']:.1f} vs predictions {m['rmse']:.1f}")
    m["rmse"], m["r2"] = ev["rmse"], ev["r2"]
    m["seconds"] = train_s
    m["sample"] = (float(pred[0]), float(y[n_train]))
    return m


def run_sklearn(x, y, n_train, epochs, seed):
    import warnings
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    reg = TransformedTargetRegressor(
        regressor=make_pipeline(StandardScaler(), MLPRegressor(
            hidden_layer_sizes=HIDDEN, activation="relu", solver="adam",
            learning_rate_init=LR, batch_size=BATCH, alpha=0.0,
            max_iter=epochs, shuffle=True, random_state=seed, tol=0.0,
            n_iter_no_change=epochs + 1)),
        transformer=StandardScaler())
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.fit(x[:n_train], y[:n_train])
    seconds = time.time() - t0
    pred = reg.predict(x[n_train:])
    m = metrics(y[n_train:], pred)
    m["seconds"] = seconds
    m["sample"] = (float(pred[0]), float(y[n_train]))
    return m


def run_lstsq(x, y, n_train):
    a = np.column_stack([np.ones(len(x)), x])
    coef, *_ = np.linalg.lstsq(a[:n_train], y[:n_train], rcond=None)
    pred = a[n_train:] @ coef
    m = metrics(y[n_train:], pred)
    m["seconds"] = 0.0
    m["sample"] = (float(pred[0]), float(y[n_train]))
    return m


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=os.path.join(here, "..", "..", "build", "trainyard"))
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    srv = Server(a.binary)
    rows = []
    try:
        for name, make in (("synthetic", synthetic), ("houses", houses)):
            names, x, y, n_train = make(np.random.default_rng(a.seed))
            print(f"{name}: {n_train} training rows, {len(y) - n_train} held out, "
                  f"target {y.min():.0f}..{y.max():.0f} (mean {y.mean():.0f})",
                  flush=True)
            for label, fn in (
                    ("trainyard standardize", lambda: run_trainyard(
                        srv, name, names, x, y, n_train, a.epochs, a.seed, "standardize")),
                    ("trainyard none (old)", lambda: run_trainyard(
                        srv, name, names, x, y, n_train, a.epochs, a.seed, "none")),
                    ("sklearn MLPRegressor", lambda: run_sklearn(x, y, n_train, a.epochs, a.seed)),
                    ("least squares", lambda: run_lstsq(x, y, n_train))):
                rows.append((name, label, fn()))
    finally:
        srv.close()
    print()
    print(f"held-out rows; MLP {'-'.join(map(str, HIDDEN))} ReLU, Adam lr {LR}, "
          f"batch {BATCH}, {a.epochs} epochs, seed {a.seed}")
    print("train s: trainyard's epochs' seconds summed; sklearn's fit()")
    print(f"{'data':<10} {'model':<22} {'RMSE':>10} {'R^2':>8} {'mean rel err':>13} "
          f"{'train s':>8}  first held-out row: predicted (true)")
    for name, label, m in rows:
        print(f"{name:<10} {label:<22} {m['rmse']:>10.0f} {m['r2']:>8.4f} "
              f"{m['rel']:>13.4f} {m['seconds']:>8.2f}  "
              f"{m['sample'][0]:.0f} ({m['sample'][1]:.0f})")


if __name__ == "__main__":
    main()
