#!/usr/bin/env python3
"""GPU training benchmark: trainyard against PyTorch, same machine, same run.

Trains three networks with Adam in fp32 and bf16, once in trainyard (a real
`trainyard serve --train-device cuda:0`, data uploaded and jobs submitted
through its REST API) and once in PyTorch, one after the other:

  mlp   784-256-128-10 with ReLU, batch 128, lr 0.001 (Fashion-MNIST's MLP)
  cnn   conv 5x5 32 same + ReLU, max-pool 2, conv 5x5 64 same + ReLU,
        max-pool 2, dense 1024 + ReLU, dropout 0.4, dense 10; batch 128,
        lr 0.001 (the CNN of tests/acceptance/fashion.py)
  wide  WIDTH inputs -> LAYERS dense layers of WIDTH units, ReLU between
        them, WIDTH classes; batch WIDE_BATCH, lr 0.0001 (defaults 4096, 4,
        1024: a network that fills the GPU)

Data are synthetic (uint8 inputs, random labels): throughput does not depend
on the values, and the device machine may not have the dataset package.
mlp and cnn use Fashion-MNIST's shapes (60,000 images of 1x28x28); both
frameworks scale the bytes by 1/255 (trainyard's preprocess scale_255).

What is measured, per network and precision:
  samples/s  trainyard: the epoch records (GET /v1/jobs/{id}/metrics) of
             epochs 2.. (the first is warm-up: CUDA graph capture, cuDNN
             and cuBLAS heuristics); PyTorch: the same epochs of the same
             data, timed between torch.cuda.synchronize() calls. Each epoch
             is the whole shuffled training set.
  peak mem   trainyard: peak_memory_bytes of its records (everything the
             trainer allocates on the device); PyTorch:
             torch.cuda.max_memory_allocated() over the timed epochs (not
             cudnn.benchmark's trials in epoch 1), minus the dataset it keeps
             resident on the GPU.
  TFLOP/s    for wide only: the GEMMs of one step,
               sum over dense layers of 6 * B * in * out
               - 2 * B * in_1 * out_1   (layer 1 has no input gradient:
                                          neither framework computes it)
             i.e. forward (2 B in out), weight gradient (2 B in out) and
             input gradient (2 B in out) per layer, times steps per second.
             Bias, ReLU, loss and the optimizer are not counted, but they
             are in the step's time: Adam reads and writes about 16 bytes
             per parameter (more with bf16's weight copy) at every step, so
             its memory traffic is part of the step. Beside it: bare cuBLAS
             GEMMs of the same shapes (bench/gpu/gemm_ceiling.cu, --ceiling).

PyTorch runs at its best in eager mode: data resident on the GPU, fused
Adam, cudnn.benchmark on; no torch.compile and no CUDA graphs. fp32 is exact
fp32 in both frameworks: torch.backends.cuda.matmul.allow_tf32 = False and
torch.backends.cudnn.allow_tf32 = False (trainyard's fp32 uses no TF32).
bf16 is torch.autocast(dtype=torch.bfloat16) (fp32 master weights, as
trainyard's "precision": "bf16").

Targets of issue 4 are printed met / not met: trainyard / PyTorch >= 1.0 for
every row; wide bf16 at >= 90% of bare cuBLAS. Not meeting a target is a
result, not a failure: the exit status is 0 when everything was measured, 1
when a measurement failed (a job failed, a record lacks a field, trainyard
trained somewhere other than asked, PyTorch raised), 77 when there is no
CUDA device (nothing measured; not with --smoke).

--smoke runs the same path at tiny sizes on the CPU (trainyard with
--train-device cpu, PyTorch on the CPU) to exercise the plumbing; it
tolerates a server without --train-device or without the precision
hyperparameter and says so. Its numbers mean nothing.

    train_bench.py --binary build/trainyard [--smoke] [--models mlp,cnn,wide]
        [--precisions fp32,bf16] [--wide-width 4096] [--wide-layers 4]
        [--wide-batch 1024] [--wide-samples 65536] [--samples 60000]
        [--epochs 4] [--ceiling gemm_ceiling.out] [--json results.json]
"""
import argparse
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
import uuid

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

MLP = [{"type": "flatten"},
       {"type": "dense", "units": 256}, {"type": "relu"},
       {"type": "dense", "units": 128}, {"type": "relu"},
       {"type": "dense", "units": 10}]
CNN = [{"type": "conv2d", "filters": 32, "kernel_size": 5, "padding": "same"},
       {"type": "relu"},
       {"type": "maxpool2d", "pool_size": 2},
       {"type": "conv2d", "filters": 64, "kernel_size": 5, "padding": "same"},
       {"type": "relu"},
       {"type": "maxpool2d", "pool_size": 2},
       {"type": "flatten"},
       {"type": "dense", "units": 1024}, {"type": "relu"},
       {"type": "dropout", "rate": 0.4},
       {"type": "dense", "units": 10}]


class Failed(Exception):
    """A measurement that could not be made; the message says why."""


def wide_layers(width, layers):
    out = []
    for i in range(layers):
        out.append({"type": "dense", "units": width})
        if i < layers - 1:
            out.append({"type": "relu"})
    return out


def describe(layers):
    """A spec's layers in a few words: dense 256 > relu > ..."""
    words = []
    for s in layers:
        w = s["type"]
        if "units" in s:
            w += f" {s['units']}"
        elif "filters" in s:
            w += f" {s['filters']}x{s['kernel_size']}"
        words.append(w)
    return " > ".join(words)


def wide_flops(batch, width, layers):
    """GEMM FLOPs of one training step of the wide net (see the header)."""
    per_layer = 6.0 * batch * width * width
    return layers * per_layer - 2.0 * batch * width * width


# ---- trainyard, through its API ----

def request(base, key, method, path, body=None, ctype="application/json"):
    req = urllib.request.Request(base + path, data=body, method=method)
    req.add_header("Authorization", "Bearer " + key)
    if body is not None:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw or b"null")
        except ValueError:
            return e.code, {"error": raw.decode("utf-8", "replace")}


def npy_bytes(a):
    f = io.BytesIO()
    np.save(f, a, allow_pickle=False)
    return f.getvalue()


def multipart(fields, files):
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"'
                     f'\r\n\r\n{value}\r\n'.encode())
    for name, fname, data in files:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                     f'filename="{fname}"\r\nContent-Type: application/octet-stream'
                     f'\r\n\r\n'.encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def serve_help(binary):
    r = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True,
                       timeout=60)
    return r.stdout + r.stderr


class Server:
    """A `trainyard serve` on a free port with a temporary data folder."""

    def __init__(self, binary, device, threads):
        self.tmp = tempfile.mkdtemp(prefix="trainyard-gpubench-")
        self.log_path = os.path.join(self.tmp, "server.log")
        self.log = open(self.log_path, "w")
        args = [binary, "serve", "--listen", "127.0.0.1:0", "--data",
                os.path.join(self.tmp, "data"), "--max-jobs", "1",
                "--worker-threads", str(threads)]
        if device:
            args += ["--train-device", device]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True)
        port = None
        for line in self.proc.stdout:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if not port:
            self.close(keep_log=True)
            raise Failed("trainyard serve did not start: " + self.tail())
        self.base = f"http://127.0.0.1:{port}"
        with open(os.path.join(self.tmp, "data", "admin.key")) as f:
            self.key = f.read().strip()

    def tail(self, n=15):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"

    def upload(self, name, x, y):
        body, ctype = multipart([("name", name), ("format", "npy")],
                                [("x", "x.npy", npy_bytes(x)), ("y", "y.npy", npy_bytes(y))])
        status, doc = request(self.base, self.key, "POST", "/v1/datasets", body, ctype)
        if status != 201:
            raise Failed(f"upload of {name} failed: {status} {doc}")
        return doc["id"]

    def submit(self, job):
        return request(self.base, self.key, "POST", "/v1/jobs", json.dumps(job).encode())

    def wait(self, job_id, timeout):
        t0 = time.time()
        while True:
            status, doc = request(self.base, self.key, "GET", f"/v1/jobs/{job_id}")
            if status != 200:
                raise Failed(f"GET /v1/jobs/{job_id}: {status} {doc}")
            if doc.get("status") in ("succeeded", "failed", "cancelled"):
                return doc
            if time.time() - t0 > timeout:
                request(self.base, self.key, "POST", f"/v1/jobs/{job_id}/cancel")
                raise Failed(f"job {job_id} took over {timeout} s; cancelled")
            time.sleep(0.2)

    def epochs(self, job_id):
        status, doc = request(self.base, self.key, "GET", f"/v1/jobs/{job_id}/metrics")
        if status != 200:
            raise Failed(f"GET /v1/jobs/{job_id}/metrics: {status} {doc}")
        return doc.get("epochs") or []

    def close(self, keep_log=False):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if not keep_log:
            shutil.rmtree(self.tmp, ignore_errors=True)


def graph_word(v):
    """An epoch record's cuda_graph (absent on the CPU) in words."""
    return {True: "yes", False: "no"}.get(v, "-")


def steady(records):
    """(samples/s over epochs 2.., seconds timed, epochs timed); epoch 1 alone
    when there is only one."""
    timed = records[1:] or records
    secs = sum(r["seconds"] for r in timed)
    samples = sum(r["samples_per_sec"] * r["seconds"] for r in timed)
    return (samples / secs if secs > 0 else 0.0), secs, len(timed)


def trainyard_run(srv, run, ds_id, prec, smoke, notes):
    hp = {"epochs": run["epochs"], "batch_size": run["batch"], "optimizer": "adam",
          "learning_rate": run["lr"], "seed": 1, "precision": prec}
    job = {"name": f"gpubench-{run['name']}-{prec}", "dataset": ds_id,
           "model": {"layers": run["layers"]}, "hyperparameters": hp}
    status, doc = srv.submit(job)
    if (status in (400, 422) and isinstance(doc, dict) and smoke and
            doc.get("field") == "hyperparameters.precision"):
        # The precision hyperparameter is another change of issue 4; until
        # it is in (or where the CPU refuses bf16), the smoke run trains at
        # the server's default precision.
        notes.add(f"trainyard refused the precision hyperparameter ({status}: "
                  f"{str(doc.get('detail', doc))[:60]}...); smoke: ran without it")
        del hp["precision"]
        status, doc = srv.submit(job)
    if status != 202:
        raise Failed(f"submit failed: {status} {doc}")
    job_id = doc["id"]
    done = srv.wait(job_id, run["timeout"])
    if done["status"] != "succeeded":
        raise Failed(f"job {done['status']}: {done.get('error')}\n" + srv.tail())
    records = srv.epochs(job_id)
    if len(records) != run["epochs"]:
        raise Failed(f"{len(records)} epoch records for {run['epochs']} epochs")
    for r in records:
        for k in ("samples_per_sec", "seconds", "peak_memory_bytes"):
            if not isinstance(r.get(k), (int, float)):
                raise Failed(f"epoch {r.get('epoch')} record has no {k}: {r}")
    last = records[-1]
    got_prec = last.get("precision")
    if got_prec != prec:
        msg = f"asked for {prec}, the epoch records say precision {got_prec!r}"
        if not smoke:
            raise Failed(msg)
        notes.add(f"trainyard {run['name']} {prec}: {msg} (smoke: tolerated)")
    rate, secs, n = steady(records)
    return {"samples_per_sec": rate, "timed_seconds": secs, "timed_epochs": n,
            "peak_memory_bytes": max(r["peak_memory_bytes"] for r in records),
            "device": last.get("device"), "precision": got_prec,
            "cuda_graph": last.get("cuda_graph"),
            "epoch_rates": [r["samples_per_sec"] for r in records]}


def run_trainyard(args, runs, data, device, smoke, notes):
    """Every (net, precision) in trainyard; results[(name, prec)] is a dict
    or a Failed."""
    results = {}
    helptext = serve_help(args.binary)
    has_flag = "--train-device" in helptext
    if not has_flag:
        if not smoke:
            raise Failed("this trainyard's serve has no --train-device; it "
                         "cannot train on the GPU")
        notes.add("this trainyard's serve has no --train-device (not merged "
                  "yet): smoke jobs ran where the server puts them (the CPU)")
    srv = Server(args.binary, device if has_flag else None, args.threads)
    try:
        ids = {}
        for key, (x, y) in data.items():
            t0 = time.time()
            ids[key] = srv.upload(f"gpubench-{key}", x, y)
            print(f"  uploaded {key}: {x.shape[0]} x {list(x.shape[1:])} uint8 "
                  f"({x.nbytes / 2**20:.0f} MiB) in {time.time() - t0:.1f} s", flush=True)
        for run in runs:
            for prec in args.precisions:
                t0 = time.time()
                try:
                    r = trainyard_run(srv, run, ids[run["data"]], prec, smoke, notes)
                except Failed as e:
                    results[(run["name"], prec)] = e
                    print(f"  trainyard {run['name']:4} {prec}: FAILED: {e}", flush=True)
                    continue
                # "cuda:0" asked: a record naming any CUDA device will do
                # (labels may grow a model name); "cpu" is a failure.
                kind = device.split(":")[0]
                if not smoke and not str(r["device"]).startswith(kind):
                    results[(run["name"], prec)] = Failed(
                        f"asked for {device}, the job trained on {r['device']!r}")
                    print(f"  trainyard {run['name']:4} {prec}: FAILED: "
                          f"{results[(run['name'], prec)]}", flush=True)
                    continue
                results[(run["name"], prec)] = r
                rates = " ".join(f"{v:,.0f}" for v in r["epoch_rates"])
                print(f"  trainyard {run['name']:4} {prec}: {r['samples_per_sec']:12,.0f} "
                      f"samples/s over {r['timed_epochs']} epochs ({r['timed_seconds']:.2f} s)"
                      f"; {r['device']} {r['precision']}, cuda graph "
                      f"{graph_word(r['cuda_graph'])}; "
                      f"per epoch: {rates}  [{time.time() - t0:.1f} s]", flush=True)
    finally:
        srv.close()
    return results


# ---- PyTorch ----

def torch_run(torch, tt, run, x_dev, y_dev, prec, dev):
    is_cuda = dev.type == "cuda"
    torch.manual_seed(1)
    if is_cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    model, _ = tt.build({"layers": run["layers"]}, run["input_shape"])
    model = model.to(dev).train()
    try:
        opt = torch.optim.Adam(model.parameters(), lr=run["lr"], fused=is_cuda)
    except (TypeError, RuntimeError):
        opt = torch.optim.Adam(model.parameters(), lr=run["lr"])
    loss_fn = torch.nn.CrossEntropyLoss()
    n, bs = x_dev.shape[0], run["batch"]
    amp = prec == "bf16"
    rates, timed, timed_samples = [], 0.0, 0
    for e in range(run["epochs"]):
        order = torch.randperm(n, device=dev)
        if is_cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(0, n, bs):
            idx = order[i:i + bs]
            xb = x_dev[idx].float().mul_(1.0 / 255.0)
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
                loss = loss_fn(model(xb), y_dev[idx])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if is_cuda:
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        if not math.isfinite(loss.item()):
            raise Failed(f"the PyTorch loss became {loss.item()} in epoch {e + 1}")
        rates.append(n / secs)
        if e > 0 or run["epochs"] == 1:
            timed += secs
            timed_samples += n
        if e == 0 and is_cuda and run["epochs"] > 1:
            # The peak of the timed epochs: cudnn.benchmark's trials of
            # epoch 1 are not what training holds. Parameters, gradients
            # and Adam's state stay allocated, so they are in it.
            torch.cuda.reset_peak_memory_stats(dev)
    peak = None
    if is_cuda:
        peak = torch.cuda.max_memory_allocated(dev) - base
    del model, opt
    if is_cuda:
        torch.cuda.empty_cache()
    return {"samples_per_sec": timed_samples / timed, "timed_seconds": timed,
            "timed_epochs": run["epochs"] - 1 if run["epochs"] > 1 else 1,
            "peak_memory_bytes": peak, "epoch_rates": rates}


def run_torch(args, runs, data, smoke):
    results = {}
    import torch
    import trainyard_torch as tt
    if smoke:
        dev = torch.device("cpu")
        torch.set_num_threads(args.threads)
    else:
        dev = torch.device("cuda", 0)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    print(f"  torch {torch.__version__} on {dev}"
          + (f" ({torch.cuda.get_device_name(dev)}, CUDA {torch.version.cuda}, "
             f"cuDNN {torch.backends.cudnn.version()})" if dev.type == "cuda" else
             f", {torch.get_num_threads()} threads"), flush=True)
    resident = {}
    for key, (x, y) in data.items():
        resident[key] = (torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev))
    for run in runs:
        x_dev, y_dev = resident[run["data"]]
        for prec in args.precisions:
            t0 = time.time()
            try:
                r = torch_run(torch, tt, run, x_dev, y_dev, prec, dev)
            except Failed as e:
                results[(run["name"], prec)] = e
            except Exception as e:  # a CUDA error, out of memory: say it, go on
                traceback.print_exc()
                results[(run["name"], prec)] = Failed(f"{type(e).__name__}: {e}")
            else:
                results[(run["name"], prec)] = r
            r = results[(run["name"], prec)]
            if isinstance(r, Failed):
                print(f"  pytorch   {run['name']:4} {prec}: FAILED: {r}", flush=True)
                continue
            rates = " ".join(f"{v:,.0f}" for v in r["epoch_rates"])
            print(f"  pytorch   {run['name']:4} {prec}: {r['samples_per_sec']:12,.0f} "
                  f"samples/s over {r['timed_epochs']} epochs ({r['timed_seconds']:.2f} s)"
                  f"; per epoch: {rates}  [{time.time() - t0:.1f} s]", flush=True)
    return results


# ---- the GEMM ceiling ----

def read_ceiling(path):
    """{prec: (ms, TFLOP/s)} and the step's GFLOP from gemm_ceiling's output."""
    out, gflop = {}, None
    if not path or not os.path.exists(path):
        return out, gflop
    with open(path) as f:
        for line in f:
            m = re.match(r"step \(all\)\s+(\w+)\s+([\d.]+)\s+([\d.]+)", line)
            if m:
                out[m.group(1)] = (float(m.group(2)), float(m.group(3)))
            m = re.match(r"step = \d+ GEMMs, ([\d.]+) GFLOP", line)
            if m:
                gflop = float(m.group(1))
    return out, gflop


# ---- report ----

def mib(b):
    return "-" if b is None else f"{b / 2**20:,.0f} MiB"


def report(args, runs, ty, pt, smoke, notes):
    ok = True
    print()
    print("Training throughput, trainyard vs PyTorch (steady epochs, epoch 1 is warm-up)")
    hdr = (f"{'model':5} {'prec':5} {'trainyard/s':>12} {'pytorch/s':>12} {'ratio':>6} "
           f"{'target':>13} {'ty peak':>10} {'pt peak':>10}  trainyard ran on")
    print(hdr)
    print("-" * len(hdr))
    for run in runs:
        for prec in args.precisions:
            a, b = ty.get((run["name"], prec)), pt.get((run["name"], prec))
            fa, fb = isinstance(a, Failed) or a is None, isinstance(b, Failed) or b is None
            ok = ok and not fa and not fb
            sa = "FAILED" if fa else f"{a['samples_per_sec']:12,.0f}"
            sb = "FAILED" if fb else f"{b['samples_per_sec']:12,.0f}"
            if fa or fb:
                ratio, target = "-", "not measured"
            else:
                q = a["samples_per_sec"] / b["samples_per_sec"]
                ratio = f"{q:6.2f}"
                target = "met" if q >= 1.0 else "NOT MET"
                target += " (>=1.0)"
            where = "-" if fa else (f"{a['device']} {a['precision']}, cuda graph "
                                    f"{graph_word(a['cuda_graph'])}")
            print(f"{run['name']:5} {prec:5} {sa:>12} {sb:>12} {ratio:>6} {target:>13} "
                  f"{mib(None if fa else a['peak_memory_bytes']):>10} "
                  f"{mib(None if fb else b['peak_memory_bytes']):>10}  {where}")
    wide = [r for r in runs if r["name"] == "wide"]
    if wide:
        w = wide[0]
        flops = wide_flops(w["batch"], w["width"], w["n_layers"])
        ceil, ceil_gflop = read_ceiling(args.ceiling)
        print()
        print(f"Wide network: {w['n_layers']} dense layers of {w['width']}, batch "
              f"{w['batch']}; GEMM work per step = sum_l 6*B*in*out - 2*B*in_1*out_1 "
              f"= {flops / 1e9:.1f} GFLOP")
        if ceil_gflop is not None and \
                abs(ceil_gflop - flops / 1e9) > max(0.1, 1e-3 * flops / 1e9):
            print(f"  note: gemm_ceiling counted {ceil_gflop} GFLOP per step: "
                  "its shapes differ from this run's")
        print("  (bias, ReLU, loss and Adam are not counted but are in the step's "
              "time: Adam's memory traffic is part of the step)")
        hdr = (f"{'prec':5} {'trainyard':>10} {'pytorch':>10} {'cuBLAS':>10} "
               f"{'ty/cuBLAS':>10} {'pt/cuBLAS':>10}  target")
        print(hdr + "   (TFLOP/s)")
        print("-" * len(hdr))
        for prec in args.precisions:
            a, b = ty.get(("wide", prec)), pt.get(("wide", prec))
            ta = None if isinstance(a, Failed) or a is None else \
                a["samples_per_sec"] / w["batch"] * flops / 1e12
            tb = None if isinstance(b, Failed) or b is None else \
                b["samples_per_sec"] / w["batch"] * flops / 1e12
            tc = ceil.get(prec, (None, None))[1]
            f = lambda v: "-" if v is None else f"{v:10.3g}"  # noqa: E731
            ra = "-" if ta is None or not tc else f"{ta / tc:9.0%}"
            rb = "-" if tb is None or not tc else f"{tb / tc:9.0%}"
            if prec == "bf16":
                if ta is None or not tc:
                    target = ">= 90% of cuBLAS: not measured"
                else:
                    target = (">= 90% of cuBLAS: " +
                              ("met" if ta / tc >= 0.9 else "NOT MET"))
            else:
                target = "(no target)"
            print(f"{prec:5} {f(ta):>10} {f(tb):>10} {f(tc):>10} {ra:>10} {rb:>10}  {target}")
        if not ceil:
            print("  cuBLAS: not measured in this run (no gemm_ceiling output)")
    if notes:
        print()
        for n in sorted(notes):
            print(f"note: {n}")
    if smoke:
        print("note: --smoke: tiny networks on the CPU; the numbers and the "
              "targets above mean nothing, only that every step ran")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--models", default="mlp,cnn,wide")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--samples", type=int, default=60000,
                    help="training images for mlp and cnn")
    ap.add_argument("--epochs", type=int, default=4,
                    help="per job; epoch 1 is warm-up, the rest are timed")
    ap.add_argument("--wide-width", type=int, default=4096)
    ap.add_argument("--wide-layers", type=int, default=4)
    ap.add_argument("--wide-batch", type=int, default=1024)
    ap.add_argument("--wide-samples", type=int, default=65536)
    ap.add_argument("--threads", type=int, default=2,
                    help="trainyard worker threads (and PyTorch's, with --smoke)")
    ap.add_argument("--ceiling", help="gemm_ceiling's output, for the TFLOP/s table")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--job-timeout", type=int, default=150,
                    help="seconds a trainyard job may take before it is cancelled")
    args = ap.parse_args()
    args.precisions = [p for p in args.precisions.split(",") if p]
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in ("mlp", "cnn", "wide"):
            sys.exit(f"unknown model {m}: mlp, cnn or wide")
    if args.epochs < 2:
        sys.exit("--epochs must be at least 2 (the first is warm-up)")
    smoke = args.smoke
    device = "cpu" if smoke else args.device

    if not smoke:
        try:
            import torch
        except ImportError as e:
            print(f"train_bench: PyTorch is not installed ({e})")
            return 1
        if not torch.cuda.is_available():
            print(f"train_bench: torch {torch.__version__} sees no CUDA device; "
                  "nothing measured")
            return 77

    rng = np.random.default_rng(1)
    data, runs = {}, []
    if "mlp" in models or "cnn" in models:
        n = args.samples
        data["fashion"] = (rng.integers(0, 256, (n, 1, 28, 28), dtype=np.uint8),
                           rng.integers(0, 10, n, dtype=np.int64))
    for name, layers in (("mlp", MLP), ("cnn", CNN)):
        if name in models:
            runs.append({"name": name, "layers": layers, "data": "fashion",
                         "input_shape": [1, 28, 28], "batch": 128, "lr": 0.001,
                         "epochs": args.epochs, "timeout": args.job_timeout})
    if "wide" in models:
        n, w = args.wide_samples, args.wide_width
        # Every class appears, so the dataset has exactly w classes.
        y = rng.permutation(np.arange(n, dtype=np.int64) % w)
        data["wide"] = (rng.integers(0, 256, (n, w), dtype=np.uint8), y)
        runs.append({"name": "wide", "layers": wide_layers(w, args.wide_layers),
                     "data": "wide", "input_shape": [w], "batch": args.wide_batch,
                     "lr": 0.0001, "epochs": args.epochs, "timeout": args.job_timeout,
                     "width": w, "n_layers": args.wide_layers})
    for r in runs:
        nb = math.ceil(data[r["data"]][0].shape[0] / r["batch"])
        shape = "x".join(str(d) for d in r["input_shape"])
        print(f"  {r['name']:4}: {shape} inputs, {describe(r['layers'])}; batch {r['batch']}, "
              f"{data[r['data']][0].shape[0]} samples ({nb} steps) per epoch, "
              f"{r['epochs']} epochs, Adam lr {r['lr']}")
    print("  data: synthetic uint8 inputs and random labels (throughput does not "
          "depend on the values)", flush=True)

    notes = set()
    t0 = time.time()
    print(f"trainyard ({args.binary}, --train-device {device}):", flush=True)
    try:
        ty = run_trainyard(args, runs, data, device, smoke, notes)
    except Failed as e:
        print(f"  trainyard: FAILED: {e}")
        ty = {(r["name"], p): e for r in runs for p in args.precisions}
    print(f"  [trainyard: {time.time() - t0:.1f} s]")
    t0 = time.time()
    print("pytorch:", flush=True)
    try:
        pt = run_torch(args, runs, data, smoke)
    except Exception as e:  # torch missing or broken: every row fails
        traceback.print_exc()
        pt = {(r["name"], p): Failed(f"{type(e).__name__}: {e}")
              for r in runs for p in args.precisions}
    print(f"  [pytorch: {time.time() - t0:.1f} s]")
    ok = report(args, runs, ty, pt, smoke, notes)
    if args.json:
        def enc(v):
            return {"failed": str(v)} if isinstance(v, Failed) else v
        doc = {"smoke": smoke, "device": device, "notes": sorted(notes),
               "runs": [{k: v for k, v in r.items() if k != "layers"} for r in runs],
               "trainyard": {f"{k[0]}/{k[1]}": enc(v) for k, v in ty.items()},
               "pytorch": {f"{k[0]}/{k[1]}": enc(v) for k, v in pt.items()}}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
