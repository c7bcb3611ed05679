#!/usr/bin/env python3
"""GPT-2 124M training benchmark: trainyard against PyTorch eager, same
machine, same model, same run (bench/gpu/run.sh calls it).

The model is GPT-2 small as trainyard spec layers: embedding 768 (vocabulary
50257), positional_embedding, 12 transformer_block of 12 heads (pre-norm,
MLP 4x with tanh GELU, causal), layernorm, lm_head tied to the embedding;
124.4M parameters. Context 1024, batch 8 windows (8192 tokens a step) by
default; AdamW (lr 6e-4, weight decay 0.1), in bf16 through trainyard's
mixed-precision path (hyperparameters.precision "bf16": fp32 master
weights, the dense layers' GEMMs on bf16 copies; the attention's (T, T)
products stay fp32 SGEMMs) and torch.autocast(bfloat16) on PyTorch's side
(the same layers, tools/trainyard_torch.py's build: nn.MultiheadAttention,
which PyTorch 2 runs through scaled_dot_product_attention; fused AdamW;
eager, no torch.compile, no CUDA graphs).

Data: a synthetic token stream (uniform ids; throughput does not depend on
the values) uploaded as format=tokens, cut into STEPS * BATCH windows, so an
epoch is STEPS optimizer steps; no validation (validation.split 0).

What is measured:
  tokens/s   trainyard: tokens_per_second of the epoch records of epochs
             2.. (epoch 1 is warm-up: CUDA graph capture, cuBLAS
             heuristics); PyTorch: the same epochs' tokens over their time
             between torch.cuda.synchronize() calls.
  TFLOP/s    model FLOPs, PaLM's / nanoGPT's estimate_mfu count:
               per token  6 N + 12 L T C
             N the parameters without the position embedding (the tied
             embedding counts once: it is the head's GEMM), L layers, T the
             context, C the width: 6 N for the forward and backward of
             every weight's GEMM, 12 L T C for Q K^T and P V over the full
             (T, T) square (2 products x 2 T C flops a token, times 3 for
             forward and backward). Layer norms, GELU, softmax, the loss
             and AdamW are not counted but take time.
  share      TFLOP/s over the GPU's dense (no 2:4 sparsity) bf16 Tensor
             Core peak: H100/H200 SXM 989 TFLOP/s, H100/H200 NVL 835,
             H100 PCIe 756, A100 312 (NVIDIA's datasheets list 1,979,
             1,671, 1,513 and 624 "with sparsity"; dense is half).
             --peak-tflops overrides.

Exit status: 0 when both sides were measured (or --smoke ran), 1 when a
measurement failed, 77 when there is no CUDA device (not with --smoke).
--smoke runs the same path on the CPU with a tiny GPT (2 layers of 64,
context 32, fp32); its numbers mean nothing.

    gpt2_bench.py --binary build/trainyard [--smoke] [--device cuda:0]
        [--batch 8] [--context 1024] [--steps 10] [--epochs 3]
        [--layers 12] [--heads 12] [--dim 768] [--vocab 50257]
        [--precision bf16] [--peak-tflops X] [--json out.json]
"""
import argparse
import json
import math
import os
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

from train_bench import (Failed, Server, graph_word, multipart, npy_bytes,  # noqa: E402
                         request, steady)

# Dense bf16 Tensor Core peaks in TFLOP/s (datasheet "with sparsity" / 2),
# most specific name first.
PEAKS = (("H200 NVL", 835.0), ("H100 NVL", 835.0), ("H100 PCIe", 756.0),
         ("H200", 989.0), ("H100", 989.0), ("A100", 312.0))


def gpt2_layers(n_layer, n_head, dim):
    return ([{"type": "embedding", "dim": dim}, {"type": "positional_embedding"}] +
            [{"type": "transformer_block", "heads": n_head} for _ in range(n_layer)] +
            [{"type": "layernorm"}, {"type": "lm_head"}])


def gpt2_params(n_layer, dim, vocab, context):
    """(all parameters, N without the position embedding)."""
    block = 12 * dim * dim + 13 * dim  # ln 2C, qkv 3C^2+3C, proj C^2+C, ln 2C, mlp 8C^2+5C
    wte, wpe = vocab * dim, context * dim
    total = wte + wpe + n_layer * block + 2 * dim
    return total, total - wpe


def flops_per_token(n_layer, dim, vocab, context):
    _, n = gpt2_params(n_layer, dim, vocab, context)
    return 6.0 * n + 12.0 * n_layer * context * dim


def peak_for(name):
    for key, tf in PEAKS:
        if key.lower() in (name or "").lower():
            return tf
    return None


# ---- trainyard ----

def trainyard_run(args, layers, tokens, device, notes):
    srv = Server(args.binary, device, args.threads)
    try:
        body, ctype = multipart(
            [("name", "gpt2bench-tokens"), ("format", "tokens"),
             ("vocab_size", str(args.vocab))],
            [("file", "tokens.npy", npy_bytes(tokens))])
        status, doc = request(srv.base, srv.key, "POST", "/v1/datasets", body, ctype)
        if status != 201:
            raise Failed(f"upload failed: {status} {doc}")
        hp = {"context_length": args.context, "batch_size": args.batch,
              "optimizer": "adamw", "learning_rate": 6e-4, "weight_decay": 0.1,
              "epochs": args.epochs, "seed": 1, "precision": args.precision}
        job = {"name": "gpt2bench", "dataset": doc["id"], "model": {"layers": layers},
               "hyperparameters": hp, "validation": {"split": 0}}
        status, doc = srv.submit(job)
        if status != 202:
            raise Failed(f"submit failed: {status} {doc}")
        done = srv.wait(doc["id"], args.job_timeout)
        if done["status"] != "succeeded":
            raise Failed(f"job {done['status']}: {done.get('error')}\n" + srv.tail())
        records = srv.epochs(doc["id"])
        if len(records) != args.epochs:
            raise Failed(f"{len(records)} epoch records for {args.epochs} epochs")
        for r in records:
            for k in ("tokens_per_second", "seconds", "peak_memory_bytes"):
                if not isinstance(r.get(k), (int, float)):
                    raise Failed(f"epoch {r.get('epoch')} record has no {k}: {r}")
        last = records[-1]
        if last.get("precision") != args.precision:
            msg = f"asked for {args.precision}, the records say {last.get('precision')!r}"
            if not args.smoke:
                raise Failed(msg)
            notes.add(msg + " (smoke: tolerated)")
        timed = records[1:] or records
        secs = sum(r["seconds"] for r in timed)
        toks = sum(r["tokens_per_second"] * r["seconds"] for r in timed)
        return {"tokens_per_sec": toks / secs if secs > 0 else 0.0,
                "timed_seconds": secs, "timed_epochs": len(timed),
                "samples_per_sec": steady(records)[0],
                "peak_memory_bytes": max(r["peak_memory_bytes"] for r in records),
                "device": last.get("device"), "precision": last.get("precision"),
                "cuda_graph": last.get("cuda_graph"),
                "epoch_tokens_per_sec": [r["tokens_per_second"] for r in records],
                "final_loss": last.get("train_loss")}
    finally:
        srv.close()


# ---- PyTorch eager ----

def torch_run(args, layers, tokens, smoke):
    import torch
    import trainyard_torch as tt
    dev = torch.device("cpu") if smoke else torch.device("cuda", 0)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1)
    model, _ = tt.build({"layers": layers}, [args.context], args.vocab)
    model = model.to(dev).train()
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1,
                                fused=cuda)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    t, b = args.context, args.batch
    n_win = args.steps * b
    ids = torch.from_numpy(tokens.astype(np.int64)).to(dev)
    x_all = ids[:n_win * t].view(n_win, t)
    y_all = ids[1:n_win * t + 1].view(n_win, t)
    amp = args.precision == "bf16" and cuda
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
    rates, timed, timed_tokens = [], 0.0, 0
    for e in range(args.epochs):
        order = torch.randperm(n_win, device=dev)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(0, n_win, b):
            idx = order[i:i + b]
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
                loss = tt.lm_loss(model(x_all[idx].float()), y_all[idx])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        if not math.isfinite(loss.item()):
            raise Failed(f"the PyTorch loss became {loss.item()} in epoch {e + 1}")
        rates.append(n_win * t / secs)
        if e > 0 or args.epochs == 1:
            timed += secs
            timed_tokens += n_win * t
    return {"tokens_per_sec": timed_tokens / timed, "timed_seconds": timed,
            "epoch_tokens_per_sec": rates, "final_loss": loss.item(),
            "peak_memory_bytes": torch.cuda.max_memory_allocated(dev) if cuda else None,
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(dev) if cuda else "cpu"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps per epoch")
    ap.add_argument("--epochs", type=int, default=3, help="epoch 1 is warm-up")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--job-timeout", type=int, default=300)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.smoke:
        args.layers, args.heads, args.dim, args.vocab = 2, 2, 64, 512
        args.context, args.batch, args.steps, args.epochs = 32, 4, 3, 2
        args.precision = "fp32"
    if args.epochs < 2:
        sys.exit("--epochs must be at least 2 (the first is warm-up)")
    device = "cpu" if args.smoke else args.device
    gpu_name = None
    if not args.smoke:
        try:
            import torch
            if not torch.cuda.is_available():
                print("gpt2_bench: torch sees no CUDA device; nothing measured")
                return 77
            gpu_name = torch.cuda.get_device_name(0)
        except ImportError as e:
            print(f"gpt2_bench: PyTorch is not installed ({e}); the peak needs "
                  "--peak-tflops and there is no PyTorch side")
            args.no_torch = True
    peak = args.peak_tflops or peak_for(gpu_name)

    layers = gpt2_layers(args.layers, args.heads, args.dim)
    total, n = gpt2_params(args.layers, args.dim, args.vocab, args.context)
    fpt = flops_per_token(args.layers, args.dim, args.vocab, args.context)
    rng = np.random.default_rng(1)
    n_tok = args.steps * args.batch * args.context + 1
    dtype = np.uint16 if args.vocab <= 65536 else np.int32
    tokens = rng.integers(0, args.vocab, n_tok, dtype=np.int64).astype(dtype)
    print(f"  gpt2: {args.layers} layers, {args.heads} heads, {args.dim} wide, "
          f"vocabulary {args.vocab}, context {args.context}, batch {args.batch} "
          f"({args.batch * args.context} tokens a step), {args.steps} steps an "
          f"epoch, {args.epochs} epochs, {args.precision}; {total / 1e6:.1f}M "
          f"parameters (N = {n / 1e6:.1f}M without positions); "
          f"{fpt / 1e9:.3f} GFLOP a token = 6 N + 12 L T C", flush=True)

    notes, res = set(), {}
    t0 = time.time()
    try:
        res["trainyard"] = trainyard_run(args, layers, tokens, device, notes)
    except Failed as e:
        res["trainyard"] = e
    print(f"  [trainyard: {time.time() - t0:.1f} s]", flush=True)
    if not args.no_torch:
        t0 = time.time()
        try:
            res["pytorch"] = torch_run(args, layers, tokens, args.smoke)
        except Exception as e:  # out of memory, a CUDA error: say it, go on
            traceback.print_exc()
            res["pytorch"] = Failed(f"{type(e).__name__}: {e}")
        print(f"  [pytorch: {time.time() - t0:.1f} s]", flush=True)

    print()
    print(f"GPT-2 ({total / 1e6:.1f}M) training, steady epochs 2..{args.epochs}, "
          f"{args.precision}; peak {'%.0f TFLOP/s' % peak if peak else 'unknown'} "
          f"dense bf16 ({gpu_name or device})")
    hdr = f"{'':10} {'tokens/s':>12} {'TFLOP/s':>9} {'of peak':>8} {'peak mem':>10}  notes"
    print(hdr)
    print("-" * len(hdr))
    ok = True
    for side in ("trainyard", "pytorch"):
        r = res.get(side)
        if r is None:
            continue
        if isinstance(r, Failed):
            ok = False
            print(f"{side:10} FAILED: {r}")
            continue
        tf = r["tokens_per_sec"] * fpt / 1e12
        r["tflops"] = tf
        r["share_of_peak"] = tf / peak if peak else None
        share = f"{tf / peak:8.1%}" if peak else "       -"
        mem = "-" if r.get("peak_memory_bytes") is None else \
            f"{r['peak_memory_bytes'] / 2**30:.1f} GiB"
        extra = (f"{r['device']} {r['precision']}, cuda graph {graph_word(r['cuda_graph'])}"
                 if side == "trainyard" else f"torch {r['torch']}, eager")
        print(f"{side:10} {r['tokens_per_sec']:12,.0f} {tf:9.2f} {share} {mem:>10}  "
              f"{extra}; loss {r['final_loss']:.3f}")
    a, b = res.get("trainyard"), res.get("pytorch")
    if isinstance(a, dict) and isinstance(b, dict):
        print(f"trainyard / PyTorch: {a['tokens_per_sec'] / b['tokens_per_sec']:.2f}")
    for note in sorted(notes):
        print(f"note: {note}")
    if args.smoke:
        print("note: --smoke: a tiny GPT on the CPU; the numbers mean nothing")
    if args.json:
        def enc(v):
            return {"failed": str(v)} if isinstance(v, Failed) else v
        with open(args.json, "w") as f:
            json.dump({"config": {k: v for k, v in vars(args).items()},
                       "params": total, "n_flops_params": n,
                       "flops_per_token": fpt, "peak_tflops": peak, "gpu": gpu_name,
                       "results": {k: enc(v) for k, v in res.items()}}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
