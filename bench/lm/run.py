#!/usr/bin/python3
"""Language-model benchmark (issue 31, "Targets"): trainyard's CPU trainer
beside PyTorch eager on the same machine, in the same run.

The model: the "GPT (character)" spec at context 128 - embedding 128,
positional_embedding, 4 x transformer_block (4 heads, MLP ratio 4,
tanh-GELU), layernorm, lm_head tied to the embedding; byte vocabulary 256;
842,496 parameters. Batch 16 windows of 128 tokens (2,048 tokens a step),
AdamW lr 0.001 (betas 0.9/0.999, eps 1e-8, weight decay 0.01: torch's and
the engine's defaults), constant rate, no dropout.

The text (nothing is downloaded): /usr/share/common-licenses/* and then
/usr/share/doc/*/copyright, each list in sorted path order, concatenated
and cut at 4 MiB; one token per byte. Its size and SHA-256 are printed: the
files differ between machines, so compare figures of one machine only.
The last 64 KiB are the held-out validation stretch (as a job's split), the
rest is training text.

trainyard runs as a training job's worker runs it: build/bench_lm calls
train_run (models/train/run.c: the loader, the shuffle, the steps, the
epoch records) on the windows of the text, no server around it. PyTorch
runs tools/trainyard_torch.py's module for the same spec (nn.Embedding,
nn.MultiheadAttention, nn.LayerNorm, nn.Linear; torch.optim.AdamW).

1. GEMM ceiling: OpenBLAS's SGEMM at the model's dense-layer shapes on one
   thread (build/bench_lm gemm, best of repeats) and torch.mm at the same
   shapes (1 and 2 threads, and its defaults); the machine's ceiling is
   the best one-thread rate times the cores (each core multiplying on its
   own, as the engine's pool runs its GEMMs), or a multi-threaded rate
   where that is higher.
2. Throughput: tokens per second of training steps (forward, loss,
   backward, AdamW), trainyard on all cores (its default; also on 1),
   PyTorch on 1 and on 2 threads (OMP_NUM_THREADS and OPENBLAS_NUM_THREADS
   both: torch's GEMMs run in the system OpenBLAS, whose threads
   torch.set_num_threads does not set) and at its defaults (torch's
   intra-op count, OpenBLAS on every core), each in a process of its own. Rounds
   alternate between the frameworks so that load from elsewhere falls on
   both; each figure is the best round (also all rounds are printed).
   trainyard: the epoch record's tokens_per_sec of an epoch after a warm-up
   epoch; PyTorch: timed steps after warm-up steps. Beside each, tokens per
   CPU second (the process's CPU time over the same steps, all threads):
   the work a core does, which load from elsewhere moves less than the wall
   clock (trainyard's pool spins briefly between calls, so its CPU time
   includes some waiting; torch waits passively). FLOPs per token:
       F = 6 (P - T C) + 12 L T C
   P parameters (the tied embedding counted once: the lm_head's matmul; the
   positional table is an addition, not a matmul, so T C comes off), L
   layers, T context, C channels: the forward and backward of every weight
   matmul, plus attention's scores and weighted sum over all T x T
   positions (PaLM's formula; neither side skips the masked half).
   Achieved GFLOP/s = tokens/s x F; its share of the ceiling is printed.
3. Convergence: both train --steps steps from the engine's initial weights
   (bench_lm --dump writes them, and the window order train_run's shuffle
   gives each epoch, so PyTorch takes the same batches in the same order),
   validating on the held-out windows every --eval-every steps; the
   validation losses side by side and their relative difference.
   Step 1's loss (the first batch at the initial weights) checks that the
   two start from the same weights on the same batch.

    bench/lm/run.py [--build build] [--steps 300] [--eval-every 100]
                    [--rounds 2] [--tp-steps 12] [--no-convergence]
                    [--quick]                   (or: make bench-lm)

A benchmark, not a test: it asserts nothing, and its figures move with
whatever else the machine is doing (the load average is printed).
"""
import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import trainyard_torch as tt  # noqa: E402

T, B, C, L, HEADS, V = 128, 16, 128, 4, 4, 256
LR = 1e-3
CORPUS_BYTES = 4 << 20
VAL_TOKENS = 64 << 10
SPEC = {"layers": [{"type": "embedding", "dim": C}, {"type": "positional_embedding"}]
        + [{"type": "transformer_block", "heads": HEADS}] * L
        + [{"type": "layernorm"}, {"type": "lm_head"}]}
TORCH_DEFAULT_THREADS = torch.get_num_threads()


def make_corpus(path):
    paths = sorted(glob.glob("/usr/share/common-licenses/*"))
    paths += sorted(glob.glob("/usr/share/doc/*/copyright"))
    out, used = bytearray(), 0
    for p in paths:
        if len(out) >= CORPUS_BYTES:
            break
        if os.path.isfile(p):
            with open(p, "rb") as f:
                out += f.read()
            used += 1
    data = bytes(out[:CORPUS_BYTES])
    with open(path, "wb") as f:
        f.write(data)
    return data, used


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def flops_per_token(params):
    return 6 * (params - T * C) + 12 * L * T * C


# ---- trainyard ----

def bench_lm(binary, args):
    """Runs build/bench_lm train with args; returns its JSON lines."""
    p = subprocess.run([binary, "train"] + args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("bench_lm failed (%d): %s" % (p.returncode, p.stderr.strip()))
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def trainyard_throughput(binary, text, spec_path, steps, threads):
    """tokens/s of the second epoch of steps steps (the first warms up)."""
    lines = bench_lm(binary, ["--text", text, "--spec", spec_path, "--train-windows",
                              str(steps * B), "--epochs", "2", "--steps",
                              str(2 * steps), "--threads", str(threads)])
    epochs = [x for x in lines if "epoch" in x]
    cpu = epochs[-1]["cpu_seconds"] - epochs[-2]["cpu_seconds"]
    return epochs[-1]["tokens_per_sec"], steps * B * T / cpu


# ---- PyTorch ----

def torch_model(init=None, seed=0):
    torch.manual_seed(seed)
    model, _ = tt.build(SPEC, [T], V)
    if init is not None:
        tt.load_state(model, init)
    return model


def torch_step(model, opt, x, y):
    loss = tt.lm_loss(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss)


def torch_throughput(tokens, steps, warmup=3):
    """(tokens/s, tokens per CPU second) of steps timed training steps after
    warmup ones, on random windows; threads as the process was started."""
    model = torch_model()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    rng = np.random.default_rng(0)
    n_win = (len(tokens) - 1) // T
    batches = []
    for _ in range(warmup + steps):
        idx = rng.integers(0, n_win, B)
        x = np.stack([tokens[i * T:i * T + T] for i in idx]).astype(np.float32)
        y = np.stack([tokens[i * T + 1:i * T + T + 1] for i in idx]).astype(np.int64)
        batches.append((torch.from_numpy(x), torch.from_numpy(y)))
    for x, y in batches[:warmup]:
        torch_step(model, opt, x, y)
    t0, c0 = time.perf_counter(), time.process_time()
    for x, y in batches[warmup:]:
        torch_step(model, opt, x, y)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return steps * B * T / wall, steps * B * T / cpu


def torch_gemm(seconds=0.3):
    """torch.mm GFLOP/s at the dense layers' forward shapes (flop-weighted)."""
    fl = tm = 0.0
    for m, n, k in ((2048, 384, 128), (2048, 512, 128), (2048, 128, 512), (2048, 256, 128)):
        a, b = torch.randn(m, k), torch.randn(n, k)
        torch.mm(a, b.t())
        best, end = 1e30, time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            torch.mm(a, b.t())
            best = min(best, time.perf_counter() - t0)
        fl += 2.0 * m * n * k
        tm += best
    return fl / tm / 1e9


# PyTorch's thread settings. Its GEMMs go to the system BLAS (Debian's
# torch: OpenBLAS), whose threads torch.set_num_threads does not set, so
# each setting runs in a process of its own with both counts in its
# environment; "default" is torch and OpenBLAS left to their own choices.
TORCH_SETTINGS = ("1", "2", "default")


def torch_env(setting):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    if setting != "default":
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = setting
    return env


def torch_sub(setting, what, text=None, steps=0):
    """Runs this script as a PyTorch worker under setting's threads."""
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", what,
           "--worker-setting", setting]
    if text:
        cmd += ["--worker-text", text, "--tp-steps", str(steps)]
    p = subprocess.run(cmd, env=torch_env(setting), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("the PyTorch worker failed: %s" % p.stderr.strip()[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def torch_worker(a):
    if a.worker_setting != "default":
        torch.set_num_threads(int(a.worker_setting))
    out = {"intra_op_threads": torch.get_num_threads()}
    if a.torch_worker == "gemm":
        out["gflops"] = torch_gemm()
    else:
        with open(a.worker_text, "rb") as f:
            tokens = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)
        out["wall"], out["cpu"] = torch_throughput(tokens, a.tp_steps)
    print(json.dumps(out))


# ---- convergence ----

def windows(tokens, first, count):
    n = (count - 1) // T
    s = first + np.arange(n) * T
    x = np.stack([tokens[i:i + T] for i in s]).astype(np.float32)
    y = np.stack([tokens[i + 1:i + T + 1] for i in s]).astype(np.int64)
    return x, y


def torch_eval(model, vx, vy):
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(vx), B):
            x, y = torch.from_numpy(vx[i:i + B]), torch.from_numpy(vy[i:i + B])
            total += float(tt.lm_loss(model(x), y)) * len(x)
            n += len(x)
    model.train()
    return total / n


def torch_converge(dump, tokens, steps, eval_every):
    init, _ = tt.st_read(os.path.join(dump, "init.safetensors"))
    with open(os.path.join(dump, "run.json")) as f:
        run = json.load(f)
    order = np.fromfile(os.path.join(dump, "order.u32"), dtype="<u4")
    order = order.reshape(run["epochs"], run["train_windows"])
    n_train_tokens = len(tokens) - VAL_TOKENS
    tx, ty = windows(tokens, 0, n_train_tokens)
    assert len(tx) == run["train_windows"]
    vx, vy = windows(tokens, len(tokens) - VAL_TOKENS, VAL_TOKENS)
    model = torch_model(init)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    spe = run["steps_per_epoch"]
    losses, vals = [], {}
    t0 = time.perf_counter()
    for s in range(steps):
        e, j = divmod(s, spe)
        idx = order[e][j * B:(j + 1) * B]
        losses.append(torch_step(model, opt, torch.from_numpy(tx[idx]),
                                 torch.from_numpy(ty[idx])))
        if (s + 1) % eval_every == 0 or s + 1 == steps:
            vals[s + 1] = torch_eval(model, vx, vy)
    return losses, vals, time.perf_counter() - t0


def thread_label(fw, th):
    if th == "default":
        return "default (%d intra-op, BLAS's own)" % TORCH_DEFAULT_THREADS
    return "%s thread%s" % (th, "s" if th != "1" else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    ap.add_argument("--steps", type=int, default=300, help="convergence steps")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2, help="throughput rounds")
    ap.add_argument("--tp-steps", type=int, default=12, help="timed steps a round")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true",
                    help="60 convergence steps, 1 round of 6 steps (a smoke run)")
    ap.add_argument("--no-convergence", action="store_true",
                    help="only the SGEMM ceiling and the throughput")
    ap.add_argument("--torch-worker", choices=["gemm", "throughput"], help=argparse.SUPPRESS)
    ap.add_argument("--worker-setting", help=argparse.SUPPRESS)
    ap.add_argument("--worker-text", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        return torch_worker(a)
    if a.quick:
        a.steps, a.eval_every, a.rounds, a.tp_steps = 60, 30, 1, 6
    binary = os.path.join(a.build, "bench_lm")
    if not os.access(binary, os.X_OK):
        sys.exit("%s is missing: build it (make build, or cmake --build build "
                 "--target bench_lm)" % binary)
    cores = os.cpu_count()
    tmp = tempfile.mkdtemp(prefix="trainyard-bench-lm-")
    text = os.path.join(tmp, "corpus.txt")
    spec_path = os.path.join(tmp, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(SPEC, f)
    data, used = make_corpus(text)
    tokens = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
    params = sum(p.numel() for p in torch_model().parameters())
    fpt = flops_per_token(params)
    print("machine: %s, %d cores; load average %s" % (cpu_name(), cores, loadavg()))
    print("text: %d bytes (%d files: /usr/share/common-licenses/*, then "
          "/usr/share/doc/*/copyright, sorted), sha256 %s; byte tokens, last %d "
          "held out" % (len(data), used, hashlib.sha256(data).hexdigest()[:16], VAL_TOKENS))
    print("model: GPT L%d H%d C%d T%d V%d, %d parameters; batch %d; AdamW lr %g; "
          "torch %s (default threads %d)" % (L, HEADS, C, T, V, params, B, LR,
                                             torch.__version__, TORCH_DEFAULT_THREADS))
    print("FLOPs per token: 6 (P - T C) + 12 L T C = 6 x %d + %d = %.3f MFLOP"
          % (params - T * C, 12 * L * T * C, fpt / 1e6), flush=True)

    # 1. GEMM ceiling
    g = json.loads(subprocess.run([binary, "gemm", "0.3"], capture_output=True,
                                  text=True, check=True).stdout)
    tg = {st: torch_sub(st, "gemm")["gflops"] for st in TORCH_SETTINGS}
    one = max(g["dense_shapes_1thread_gflops"], tg["1"])
    ceiling = max(one * cores, g["square2048_all_cores_gflops"], tg["2"], tg["default"])
    print("\n1. SGEMM (GFLOP/s, best of repeats)")
    for s in g["shapes"]:
        print("   OpenBLAS 1 thread  %-28s %7.1f" % (s["shape"], s["gflops"]))
    print("   OpenBLAS 1 thread, dense shapes (flop-weighted)   %7.1f"
          % g["dense_shapes_1thread_gflops"])
    print("   OpenBLAS 2048^3, 1 thread / %d threads            %7.1f / %.1f"
          % (cores, g["square2048_1thread_gflops"], g["square2048_all_cores_gflops"]))
    print("   torch.mm dense fwd shapes, 1 / 2 threads / default  %5.1f / %.1f / %.1f"
          % (tg["1"], tg["2"], tg["default"]))
    print("   ceiling: max(best 1-thread x %d cores, all-core runs) = %.1f GFLOP/s"
          % (cores, ceiling), flush=True)

    # 2. Throughput
    configs = [("trainyard", str(cores)), ("trainyard", "1")]
    configs += [("torch", st) for st in TORCH_SETTINGS]
    rates = {c: [] for c in configs}
    print("\n2. Throughput: %d rounds, %d timed steps (%d tokens) per figure; "
          "load average %s" % (a.rounds, a.tp_steps, a.tp_steps * B * T, loadavg()),
          flush=True)
    for r in range(a.rounds):
        for fw, th in configs:
            if fw == "trainyard":
                v = trainyard_throughput(binary, text, spec_path, a.tp_steps, int(th))
            else:
                w = torch_sub(th, "throughput", text, a.tp_steps)
                v = (w["wall"], w["cpu"])
            rates[(fw, th)].append(v)
            print("   round %d %-9s %-26s %8.0f tokens/s  (%6.0f per CPU second)" % (
                r + 1, fw, thread_label(fw, th), v[0], v[1]), flush=True)
    cpu_rate = {c: max(x[1] for x in v) for c, v in rates.items()}
    best = {c: max(x[0] for x in v) for c, v in rates.items()}
    torch_best = max(v for (fw, _), v in best.items() if fw == "torch")
    torch_best_th = [th for (fw, th), v in best.items() if fw == "torch" and v == torch_best][0]
    print("\n   %-34s %9s %8s %10s %9s %12s %8s" % (
        "best round", "tokens/s", "GFLOP/s", "of ceiling", "vs torch",
        "tok/CPU-s", "GFLOP/s"))
    print("   %-34s %9s %8s %10s %9s %12s %8s" % ("", "(wall)", "", "", "", "(per core)",
                                               "per core"))
    for (fw, th), v in best.items():
        label = "%s, %s" % (fw, thread_label(fw, th))
        cr = cpu_rate[(fw, th)]
        print("   %-34s %9.0f %8.1f %9.1f%% %8.2fx %12.0f %8.1f" % (
            label, v, v * fpt / 1e9, 100 * v * fpt / 1e9 / ceiling, v / torch_best,
            cr, cr * fpt / 1e9))
    ty_best = best[("trainyard", str(cores))]
    print("   trainyard (%d threads) / PyTorch at its best (%s): %.2fx "
          "(issue 31's target: >= 1.5x)" % (cores, thread_label("torch", torch_best_th),
                                            ty_best / torch_best), flush=True)

    if a.no_convergence:
        return
    # 3. Convergence
    dump = os.path.join(tmp, "run")
    os.mkdir(dump)
    print("\n3. Convergence: %d steps from the engine's initial weights (seed %d), "
          "the same batches in the same order; validation on %d held-out windows "
          "every %d steps; load average %s" % (a.steps, a.seed, (VAL_TOKENS - 1) // T,
                                               a.eval_every, loadavg()), flush=True)
    t0 = time.perf_counter()
    lines = bench_lm(binary, ["--text", text, "--spec", spec_path, "--steps", str(a.steps),
                              "--epochs", "1000", "--val-tokens", str(VAL_TOKENS),
                              "--eval-every", str(a.eval_every), "--threads", str(cores),
                              "--seed", str(a.seed), "--lr", str(LR), "--dump", dump])
    ty_secs = time.perf_counter() - t0
    ty_first = next(x for x in lines if x.get("progress") == 1)["loss"]
    ty_vals = {x["progress"]: x["val_loss"] for x in lines
               if "progress" in x and x["val_loss"] is not None}
    ty_vals[a.steps] = [x for x in lines if "epoch" in x][-1]["val_loss"]
    th_losses, th_vals, th_secs = torch_converge(dump, tokens, a.steps, a.eval_every)
    print("   step 1 loss (first batch, initial weights): trainyard %.6f, torch %.6f "
          "(diff %+.1e)" % (ty_first, th_losses[0], ty_first - th_losses[0]))
    print("   %6s %14s %14s %10s" % ("step", "trainyard val", "torch val", "rel diff"))
    for s in sorted(th_vals):
        tv, pv = ty_vals.get(s), th_vals[s]
        if tv is None:
            continue
        print("   %6d %14.5f %14.5f %+9.4f%%" % (s, tv, pv, 100 * (tv - pv) / pv))
    tv, pv = ty_vals[a.steps], th_vals[a.steps]
    print("   after %d steps: validation loss trainyard %.5f, torch %.5f, relative "
          "difference %.4f%% (target: within 2%%); wall time trainyard %.0f s, "
          "torch %.0f s (both with validation)" % (a.steps, tv, pv, 100 * abs(tv - pv) / pv,
                                                   ty_secs, th_secs))
    print("load average at the end: %s" % loadavg())


if __name__ == "__main__":
    main()
