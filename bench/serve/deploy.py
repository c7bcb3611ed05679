#!/usr/bin/python3
"""Serving deployments benchmark: what a deployment's replicas cost and
gain against trainyard's own in-process predict path, on this machine
(not a test; `make bench-deploy`, or bench/serve/deploy.py [--binary
build/trainyard]).

One `trainyard serve` (its own temporary data folder, on the CPU) with
the models made in PyTorch (tools/trainyard_torch.py) and
imported through POST /v1/models:

  cnn   docs/jobs.md's Fashion-MNIST CNN (conv 32 5x5, pool, conv 64 5x5,
        pool, dense 1024, dense 10), PyTorch's default initialisation
  mlp   bench/serve/run.py's MLP 784-256-128-10

Figures, each case run --reps times (the mean is reported; wrk from
Debian, threads = min(c, 2)):

  batching gain   the CNN behind two deployments (each one CPU replica),
                  "batched" (max_batch_size 32, max_queue_delay_us 2000)
                  and "unbatched" (max_batch_size 1), KServe v2 JSON
                  requests of one image by deployment name at 32
                  connections: req/s batched over unbatched (the issue's
                  target: >= 3x; Triton's published gain is 3.27x), and
                  the in-process path of the same model for reference
  replica hop     the MLP at 1 connection, batch 1, /v1 predict: p50 of
                  the model deployed (batching off) minus p50 of a copy of
                  it served in-process (target: < 100 us)
  autoscaling     a deployment min 1 max 2 (target_in_flight 2,
                  scale_up_after_s 1) under 16 connections: seconds until
                  a second replica is desired, and until it is ready
  cold start      a deployment with min 0: the first request's seconds,
                  and the cold_start_s the deployment reports
  noisy tenant    tenants A and B, each with its own deployment of the
                  MLP; B sends a steady paced load (--b-rate requests/s
                  from 4 connections) and its p99 is measured alone, then
                  while A sends 10x its limit (A's deployment:
                  requests_per_second --a-limit) from a paced open-loop
                  client; the ratio B p99 with A / B p99 alone (target:
                  <= 1.10), each phase --reps times, alternating
  slow neighbour  issue 29's finding 4, on a server of its own with
                  --serving-threads 8: tenants A and B, each with its own
                  deployment of the MLP; B's holds every request up to a
                  second (max_queue_delay_us 1000000, max_batch_size 4096)
                  and B floods it from 24 closed-loop connections; A sends
                  --a-rate requests/s from one connection, and its p99 is
                  measured alone, then while B floods: the ratio A p99
                  flooded / alone (target: <= 1.2; it was about 300 when
                  the serving threads were one FIFO for all tenants),
                  each phase --reps times, alternating

--gpu (bench/gpu/run.sh on a GPU machine): the server takes the GPUs
(--devices auto: NVML, MIG slices included) and the deployments ask for
"resources": {"gpu": "any"}, so each replica holds a GPU or a MIG slice;
--only picks the cases (batching,hop,autoscaling,cold,noisy,slow).

Everything shares this machine's cores (wrk, the clients, the server and
its replicas): the figures compare paths under the same conditions.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tools"))

import run as base  # noqa: E402  (bench/serve/run.py: processes, wrk, models)

CNN = {"layers": [
    {"type": "conv2d", "filters": 32, "kernel_size": 5, "padding": "same"}, {"type": "relu"},
    {"type": "maxpool2d", "pool_size": 2},
    {"type": "conv2d", "filters": 64, "kernel_size": 5, "padding": "same"}, {"type": "relu"},
    {"type": "maxpool2d", "pool_size": 2},
    {"type": "flatten"}, {"type": "dense", "units": 1024}, {"type": "relu"},
    {"type": "dense", "units": 10}]}


def say(*a):
    print(*a, flush=True)


def make_cnn(model_dir, seed):
    import torch
    import trainyard_torch as tt
    torch.manual_seed(seed)
    model, _ = tt.build(CNN, base.INPUT_SHAPE)
    model.eval()
    tt.st_write(os.path.join(model_dir, "weights.safetensors"), tt.state_tensors(model))
    meta = {"spec": CNN, "task": "classification", "input_shape": base.INPUT_SHAPE,
            "classes": base.CLASSES, "preprocess": base.PREPROCESS}
    with open(os.path.join(model_dir, "metadata.json"), "w") as f:
        json.dump(meta, f)


def api(ty, method, path, doc=None, key=None, timeout=300):
    body = json.dumps(doc).encode() if doc is not None else None
    headers = {"Authorization": "Bearer " + (key or ty.key)}
    if body is not None:
        headers["Content-Type"] = "application/json"
    st, h, out = base.request(ty.port, method, path, body, headers, timeout=timeout)
    try:
        return st, h, json.loads(out) if out else None
    except ValueError:
        return st, h, out


GPU = {"gpu": "none"}


def deploy(ty, name, model, key=None, **extra):
    doc = {"name": name, "model": model, "replicas": {"min": 1, "max": 1},
           "resources": dict(GPU)}
    doc.update(extra)
    st, _, out = api(ty, "POST", "/v1/deployments", doc, key)
    if st != 201:
        raise SystemExit("creating deployment %s: %d %s" % (name, st, out))
    return out["id"]


def wait_ready(ty, dep, n=1, key=None, timeout=120):
    t_end = time.time() + timeout
    while time.time() < t_end:
        st, _, d = api(ty, "GET", "/v1/deployments/" + dep, key=key)
        if st == 200 and d["replicas"]["ready"] >= n:
            return d
        time.sleep(0.05)
    raise SystemExit("deployment %s: %d replica(s) not ready in %d s: %s" % (dep, n, timeout, d))


def import_as(ty, model_dir, key=None):
    """base.import_model, with another tenant's key when given."""
    saved = ty.key
    try:
        if key:
            ty.key = key
        return base.import_model(ty, model_dir)
    finally:
        ty.key = saved


def write(workdir, name, data):
    path = os.path.join(workdir, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def mean_runs(port, target, c, seconds, reps):
    runs = [base.wrk(port, target, c, seconds) for _ in range(reps)]
    out = {k: statistics.mean(r[k] for r in runs if r[k] is not None)
           for k in ("rps", "p50_ms", "p99_ms")}
    out["errors"] = sum(r["non_2xx"] + r["socket_errors"] for r in runs)
    return out


# ---- paced load: requests at a fixed rate, open loop ----

class Paced(threading.Thread):
    """Sends body to path at `rate` requests/s over `conns` keep-alive
    connections (each its own thread, each rate/conns); records each
    response's status and latency."""

    def __init__(self, port, path, body, key, rate, conns):
        super().__init__(daemon=True)
        self.args = (port, path, body, key, rate, conns)
        self.stop = threading.Event()
        self.lat, self.status = [], {}
        self.lock = threading.Lock()

    def one(self, i):
        port, path, body, key, rate, conns = self.args
        period = conns / rate
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
        nxt = time.perf_counter() + period * i / conns
        while not self.stop.is_set():
            now = time.perf_counter()
            if now < nxt:
                time.sleep(nxt - now)
            t0 = time.perf_counter()
            try:
                c.request("POST", path, body=body, headers=headers)
                r = c.getresponse()
                r.read()
                st = r.status
            except OSError:
                st = -1
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            dt = time.perf_counter() - t0
            with self.lock:
                self.status[st] = self.status.get(st, 0) + 1
                if st == 200:
                    self.lat.append(dt)
            nxt += period
            if nxt < time.perf_counter() - 1:
                nxt = time.perf_counter()  # fell behind: do not burst
        c.close()

    def run(self):
        ts = [threading.Thread(target=self.one, args=(i,), daemon=True)
              for i in range(self.args[5])]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1e3 if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "trainyard"))
    ap.add_argument("--duration", type=float, default=10, help="seconds per run (10)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="2 s runs, one repetition")
    ap.add_argument("--b-rate", type=float, default=200, help="tenant B's requests/s (200)")
    ap.add_argument("--a-limit", type=float, default=50,
                    help="tenant A's deployment limit in requests/s (50); A sends 10x")
    ap.add_argument("--json", help="write the results here as JSON")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gpu", action="store_true",
                    help="replicas on the GPUs (--devices auto, resources.gpu any)")
    ap.add_argument("--a-rate", type=float, default=50,
                    help="tenant A's requests/s in the slow-neighbour case (50)")
    ap.add_argument("--only", default="batching,hop,autoscaling,cold,noisy,slow")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if args.gpu:
        GPU["gpu"] = "any"
    if args.quick:
        args.duration, args.reps = 2, 1
    cpu, ncpu = base.cpu_model()
    say("CPU: %s, %d logical CPUs (the clients share them)" % (cpu, ncpu))
    workdir = tempfile.mkdtemp(prefix="ty-bench-deploy-")
    res = {"cpu": cpu, "logical_cpus": ncpu, "duration_s": args.duration, "reps": args.reps}
    ty = None
    try:
        mlp_dir, cnn_dir = os.path.join(workdir, "mlp"), os.path.join(workdir, "cnn")
        os.mkdir(mlp_dir)
        os.mkdir(cnn_dir)
        base.make_model(mlp_dir, args.seed)
        make_cnn(cnn_dir, args.seed)
        if args.gpu:
            data = os.path.join(workdir, "trainyard-data")
            os.mkdir(data)
            ty = base.Proc("trainyard", [args.binary, "serve", "--listen", "127.0.0.1:0",
                                         "--data", data, "--devices", "auto"], workdir)
            ty.port = int(ty.wait_output(r"listening on http://127\.0\.0\.1:(\d+)").group(1))
            with open(os.path.join(data, "admin.key")) as f:
                ty.key = f.read().strip()
        else:
            ty = base.start_trainyard(args.binary, workdir)
        auth = {"Authorization": "Bearer " + ty.key}
        x1 = base.make_inputs(1)

        bat = hop = None
        ratio = None
        # ---- batching gain (CNN) ----
        cnn_dep = import_as(ty, cnn_dir) if "batching" in only else None
        if "batching" in only:
            bat = batching(ty, args, workdir, cnn_dep, import_as(ty, cnn_dir), x1, auth)
            res["batching"] = bat
        mlp_dep = import_as(ty, mlp_dir)
        mlp_local = import_as(ty, mlp_dir)
        mv1 = write(workdir, "mlp-v1.json", base.v1_body(x1))
        hdr = dict(auth, **{"Content-Type": "application/json"})
        if "hop" in only:
            hop = replica_hop(ty, args, mlp_dep, mlp_local, mv1, hdr)
            res["hop"] = hop
        if "autoscaling" in only:
            res["autoscaling"] = autoscaling(ty, mlp_dep, mv1, hdr)
        if "cold" in only:
            res["cold_start"] = cold_start(ty, mlp_local, x1, hdr)
        if "noisy" in only:
            res["noisy"] = noisy(ty, args, mlp_dir, x1)
            ratio = res["noisy"]["ratio"]
        slow_ratio = None
        if "slow" in only:
            res["slow_neighbour"] = slow_neighbour(args, workdir, mlp_dir, x1)
            slow_ratio = res["slow_neighbour"]["ratio"]
        summary(cpu, bat, hop, ratio, slow_ratio)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=2)
    finally:
        if ty:
            ty.close()


def batching(ty, args, workdir, cnn_dep, cnn_local, x1, auth):
    on = deploy(ty, "cnn-batched", cnn_dep,
                batching={"max_batch_size": 32, "max_queue_delay_us": 2000})
    off = deploy(ty, "cnn-unbatched", cnn_dep,
                 batching={"max_batch_size": 1, "max_queue_delay_us": 0})
    wait_ready(ty, on)
    wait_ready(ty, off)
    v2 = write(workdir, "cnn-v2.json", base.v2_body(x1.astype(np.float32)))
    v1 = write(workdir, "cnn-v1.json", base.v1_body(x1))
    hdr = dict(auth, **{"Content-Type": "application/json"})
    # The same outputs both ways before timing.
    outs = []
    for path in ("/v2/models/cnn-batched/infer", "/v2/models/cnn-unbatched/infer"):
        st, _, out = base.request(ty.port, "POST", path, open(v2, "rb").read(), hdr)
        if st != 200:
            raise SystemExit("%s: %d %s" % (path, st, out[:300]))
        outs.append(json.loads(out)["outputs"][0]["data"])
    if max(abs(a - b) for a, b in zip(*outs)) > 1e-4:
        raise SystemExit("batched and unbatched replicas disagree")
    cases = {"batched": ("/v2/models/cnn-batched/infer", v2, hdr),
             "unbatched": ("/v2/models/cnn-unbatched/infer", v2, hdr),
             "in-process": ("/v1/models/%s/predict" % cnn_local, v1, hdr)}
    say("\nbatching gain: the CNN, batch-1 requests, 32 connections, %g s x %d"
        % (args.duration, args.reps))
    bat = {}
    for name, target in cases.items():
        base.wrk(ty.port, target, 32, 1)  # warm-up
        bat[name] = mean_runs(ty.port, target, 32, args.duration, args.reps)
        say("  %-11s %9.0f req/s  p50 %7.2f ms  p99 %7.2f ms  errors %d"
            % (name, bat[name]["rps"], bat[name]["p50_ms"], bat[name]["p99_ms"],
               bat[name]["errors"]))
    st, _, d = api(ty, "GET", "/v1/deployments/" + on)
    bat["batched_mean_batch"] = d["traffic"]["batch_size"]["mean"]
    bat["device"] = d["instances"][0]["device"] if d["instances"] else None
    bat["gain"] = bat["batched"]["rps"] / bat["unbatched"]["rps"]
    say("  gain batched / unbatched: %.2fx (target >= 3x); mean batch %.1f; device %s"
        % (bat["gain"], bat["batched_mean_batch"] or 0, bat["device"]))
    for dep in (on, off):
        api(ty, "DELETE", "/v1/deployments/" + dep)
    return bat


def replica_hop(ty, args, mlp_dep, mlp_local, mv1, hdr):
    hop_dep = deploy(ty, "mlp-hop", mlp_dep,
                     batching={"max_batch_size": 1, "max_queue_delay_us": 0})
    wait_ready(ty, hop_dep)
    say("\nreplica hop: the MLP, batch 1, 1 connection, /v1 predict")
    hop = {}
    for name, mid in (("in-process", mlp_local), ("deployed", mlp_dep)):
        target = ("/v1/models/%s/predict" % mid, mv1, hdr)
        base.wrk(ty.port, target, 1, 1)
        hop[name] = mean_runs(ty.port, target, 1, args.duration, args.reps)
        say("  %-11s %9.0f req/s  p50 %7.3f ms  p99 %7.3f ms"
            % (name, hop[name]["rps"], hop[name]["p50_ms"], hop[name]["p99_ms"]))
    st, _, d = api(ty, "GET", "/v1/deployments/" + hop_dep)
    hop["replica_compute_p50_ms"] = d["traffic"]["compute_ms"]["p50"]
    hop["cost_p50_us"] = (hop["deployed"]["p50_ms"] - hop["in-process"]["p50_ms"]) * 1e3
    say("  hop cost at p50: %.0f us (target < 100 us); the replica's own compute p50 %s ms"
        % (hop["cost_p50_us"], hop["replica_compute_p50_ms"]))
    api(ty, "DELETE", "/v1/deployments/" + hop_dep)
    return hop


def autoscaling(ty, mlp_dep, mv1, hdr):
    auto = deploy(ty, "mlp-auto", mlp_dep, replicas={"min": 1, "max": 2},
                  batching={"max_batch_size": 1, "max_queue_delay_us": 0},
                  autoscaling={"target_in_flight": 2, "scale_up_after_s": 1,
                               "scale_down_after_s": 3})
    wait_ready(ty, auto)
    say("\nautoscaling: min 1 max 2, target_in_flight 2, scale_up_after_s 1, 16 connections")
    load = threading.Thread(target=base.wrk, daemon=True,
                            args=(ty.port, ("/v1/models/%s/predict" % mlp_dep, mv1, hdr),
                                  16, 12))
    t0 = time.time()
    load.start()
    t_desired = t_ready = None
    while time.time() - t0 < 12 and t_ready is None:
        st, _, d = api(ty, "GET", "/v1/deployments/" + auto)
        if t_desired is None and d["replicas"]["desired"] >= 2:
            t_desired = time.time() - t0
        if d["replicas"]["ready"] >= 2:
            t_ready = time.time() - t0
        time.sleep(0.05)
    load.join()
    say("  second replica desired after %s s, ready after %s s"
        % ("%.2f" % t_desired if t_desired else "-", "%.2f" % t_ready if t_ready else "-"))
    t1 = time.time()
    t_down = None
    while time.time() - t1 < 30:
        st, _, d = api(ty, "GET", "/v1/deployments/" + auto)
        if d["replicas"]["desired"] == 1:
            t_down = time.time() - t1
            break
        time.sleep(0.1)
    say("  back to 1 replica %s s after the load stopped (scale_down_after_s 3)"
        % ("%.2f" % t_down if t_down else "-"))
    api(ty, "DELETE", "/v1/deployments/" + auto)
    return {"desired_s": t_desired, "ready_s": t_ready, "down_s": t_down}


def cold_start(ty, mlp_local, x1, hdr):
    cold = deploy(ty, "mlp-cold", mlp_local, replicas={"min": 0, "max": 1})
    st, _, d = api(ty, "GET", "/v1/deployments/" + cold)
    before = d["status"]
    t0 = time.time()
    st, _, out = base.request(ty.port, "POST", "/v2/models/mlp-cold/infer",
                              base.v2_body(x1.astype(np.float32)), hdr)
    first = time.time() - t0
    _, _, d = api(ty, "GET", "/v1/deployments/" + cold)
    say("\ncold start from min 0: status before %s; first request %d in %.2f s; "
        "the deployment reports cold_start_s %s"
        % (before, st, first, d["traffic"]["cold_start_s"]))
    api(ty, "DELETE", "/v1/deployments/" + cold)
    return {"first_request_s": first, "status": st, "reported_s": d["traffic"]["cold_start_s"]}


def noisy(ty, args, mlp_dir, x1):
    keys = {}
    for t in ("a", "b"):
        st, _, doc = api(ty, "POST", "/v1/tenants", {"name": "bench-" + t})
        if st != 201:
            raise SystemExit("creating tenant %s: %d %s" % (t, st, doc))
        keys[t] = doc["key"]["api_key"]
    ma = import_as(ty, mlp_dir, keys["a"])
    mb = import_as(ty, mlp_dir, keys["b"])
    da = deploy(ty, "noisy", ma, keys["a"],
                limits={"requests_per_second": args.a_limit,
                        "burst": max(1, int(args.a_limit))})
    db = deploy(ty, "quiet", mb, keys["b"])
    wait_ready(ty, da, key=keys["a"])
    wait_ready(ty, db, key=keys["b"])
    body = base.v1_body(x1)
    say("\nnoisy tenant: B at %g req/s (4 connections); A limited to %g req/s, "
        "sending %g req/s; %g s per phase" % (args.b_rate, args.a_limit,
                                               10 * args.a_limit, args.duration))
    phases = {"alone": [], "with A": []}
    a_status = {}
    for rep in range(args.reps):
        for phase in ("alone", "with A"):
            a = None
            if phase == "with A":
                a = Paced(ty.port, "/v1/models/%s/predict" % ma, body, keys["a"],
                          10 * args.a_limit, 4)
                a.start()
                time.sleep(0.5)
            b = Paced(ty.port, "/v1/models/%s/predict" % mb, body, keys["b"],
                      args.b_rate, 4)
            b.start()
            time.sleep(args.duration)
            b.stop.set()
            b.join()
            if a:
                a.stop.set()
                a.join()
                for k, v in a.status.items():
                    a_status[k] = a_status.get(k, 0) + v
            bad = sum(v for k, v in b.status.items() if k != 200)
            phases[phase].append(p99(b.lat))
            say("  rep %d %-7s B: %d ok, %d not ok, p99 %.2f ms"
                % (rep + 1, phase, len(b.lat), bad, p99(b.lat)))
    alone, loud = statistics.mean(phases["alone"]), statistics.mean(phases["with A"])
    ratio = loud / alone
    say("  A's answers: %s" % ", ".join("%s: %d" % kv for kv in sorted(a_status.items())))
    say("  B p99 with A / alone: %.2f ms / %.2f ms = %.2f (target <= 1.10)"
        % (loud, alone, ratio))
    return {"b_p99_alone_ms": alone, "b_p99_with_a_ms": loud, "ratio": ratio,
            "b_p99_runs_ms": phases, "a_status": {str(k): v for k, v in a_status.items()}}


def slow_neighbour(args, workdir, mlp_dir, x1):
    """Issue 29's finding 4 on a server of its own (--serving-threads 8)."""
    data = os.path.join(workdir, "slow-data")
    os.mkdir(data)
    cmd = [args.binary, "serve", "--listen", "127.0.0.1:0", "--data", data,
           "--train-device", "cpu", "--serve-device", "cpu", "--serving-threads", "8"]
    if args.gpu:
        cmd += ["--devices", "auto"]
    ty = base.Proc("trainyard-slow", cmd, workdir)
    try:
        ty.port = int(ty.wait_output(r"listening on http://127\.0\.0\.1:(\d+)").group(1))
        with open(os.path.join(data, "admin.key")) as f:
            ty.key = f.read().strip()
        keys = {}
        for t in ("a", "b"):
            st, _, doc = api(ty, "POST", "/v1/tenants", {"name": "slow-" + t})
            if st != 201:
                raise SystemExit("creating tenant %s: %d %s" % (t, st, doc))
            keys[t] = doc["key"]["api_key"]
        ma = import_as(ty, mlp_dir, keys["a"])
        mb = import_as(ty, mlp_dir, keys["b"])
        da = deploy(ty, "victim", ma, keys["a"])
        db = deploy(ty, "slow", mb, keys["b"],
                    batching={"max_batch_size": 4096, "max_queue_delay_us": 1000000})
        wait_ready(ty, da, key=keys["a"])
        wait_ready(ty, db, key=keys["b"])
        body = base.v1_body(x1)
        say("\nslow neighbour: --serving-threads 8; B floods its deployment "
            "(max_queue_delay_us 1000000) from 24 connections; A at %g req/s; "
            "%g s per phase" % (args.a_rate, args.duration))
        phases = {"alone": [], "flooded": []}
        b_status = {}
        for rep in range(args.reps):
            for phase in ("alone", "flooded"):
                b = None
                if phase == "flooded":
                    # Closed loop: each connection sends its next request
                    # as soon as the last is answered.
                    b = Paced(ty.port, "/v1/models/%s/predict" % mb, body, keys["b"],
                              1e6, 24)
                    b.start()
                    time.sleep(1.5)
                a = Paced(ty.port, "/v1/models/%s/predict" % ma, body, keys["a"],
                          args.a_rate, 1)
                a.start()
                time.sleep(args.duration)
                a.stop.set()
                a.join()
                if b:
                    b.stop.set()
                    b.join()  # its last answers: nothing of B's is left
                    for k, v in b.status.items():
                        b_status[k] = b_status.get(k, 0) + v
                bad = sum(v for k, v in a.status.items() if k != 200)
                phases[phase].append(p99(a.lat))
                say("  rep %d %-7s A: %d ok, %d not ok, p99 %.2f ms"
                    % (rep + 1, phase, len(a.lat), bad, p99(a.lat)))
        alone = statistics.mean(phases["alone"])
        loud = statistics.mean(phases["flooded"])
        ratio = loud / alone
        say("  B's answers: %s" % ", ".join("%s: %d" % kv for kv in sorted(b_status.items())))
        say("  A p99 flooded / alone: %.2f ms / %.2f ms = %.2f (target <= 1.2)"
            % (loud, alone, ratio))
        return {"a_p99_alone_ms": alone, "a_p99_flooded_ms": loud, "ratio": ratio,
                "a_p99_runs_ms": phases, "b_status": {str(k): v for k, v in b_status.items()}}
    finally:
        ty.close()


def summary(cpu, bat, hop, ratio, slow_ratio=None):
    say("\nsummary (%s)" % cpu)
    if bat:
        say("  batching gain (CNN, c=32)   %.2fx   target >= 3x     %s"
            % (bat["gain"], "met" if bat["gain"] >= 3 else "NOT met"))
    if hop:
        say("  replica hop at p50          %.0f us  target < 100 us  %s"
            % (hop["cost_p50_us"], "met" if hop["cost_p50_us"] < 100 else "NOT met"))
    if ratio is not None:
        say("  noisy tenant p99 ratio      %.2f    target <= 1.10   %s"
            % (ratio, "met" if ratio <= 1.10 else "NOT met"))
    if slow_ratio is not None:
        say("  slow neighbour p99 ratio    %.2f    target <= 1.2    %s"
            % (slow_ratio, "met" if slow_ratio <= 1.2 else "NOT met"))


if __name__ == "__main__":
    main()
