"""torch_gemm.py - PyTorch's side of the GEMM ceiling (bench/gpu/run.sh).

Times the same GEMMs as gemm_ceiling.cu (one training step of a dense MLP:
forward x @ W.T, weight gradient dy.T @ x, input gradient dy @ W, no input
gradient for the first layer; outputs in the run's dtype) with torch.matmul on the GPU, in fp32 (TF32
off) and bf16, and prints TFLOP/s per step. Exit 0 when measured, 77 when
torch or a CUDA device is missing (it says which), 1 on an error.

Usage: python3 torch_gemm.py [--batch 1024] [--width 4096] [--layers 4]
                             [--in WIDTH] [--out WIDTH] [--iters 30]
"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--in", dest="inp", type=int, default=None)
    ap.add_argument("--out", type=int, default=None)
    ap.add_argument("--iters", type=int, default=30)
    a = ap.parse_args()
    inp = a.inp or a.width
    out = a.out or a.width

    try:
        import torch
    except ImportError as e:
        print(f"torch_gemm: PyTorch is not installed ({e}); no PyTorch "
              "numbers")
        return 77
    if not torch.cuda.is_available():
        print(f"torch_gemm: torch {torch.__version__} sees no CUDA device "
              f"(built for CUDA {torch.version.cuda}); no PyTorch numbers")
        return 77

    dev = torch.device("cuda", 0)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name(dev)}")
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device=dev).manual_seed(0)

    dims = [inp] + [a.width] * (a.layers - 1) + [out]
    step_flops = 0.0
    for i in range(a.layers):
        k, n = dims[i], dims[i + 1]
        step_flops += 2.0 * a.batch * n * k * (2 if i == 0 else 3)

    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        def rnd(*shape):
            return (torch.rand(*shape, device=dev, generator=gen) - 0.5) \
                .mul_(0.02).to(dtype)
        xs = [rnd(a.batch, dims[0])]
        ws, dys, dws, dxs = [], [], [], [None]
        for i in range(a.layers):
            ws.append(rnd(dims[i + 1], dims[i]))
            xs.append(rnd(a.batch, dims[i + 1]))
            dys.append(rnd(a.batch, dims[i + 1]))
            dws.append(rnd(dims[i + 1], dims[i]))
            if i > 0:
                dxs.append(rnd(a.batch, dims[i]))

        def step():
            for i in range(a.layers):
                torch.matmul(xs[i], ws[i].t(), out=xs[i + 1])
            for i in reversed(range(a.layers)):
                torch.matmul(dys[i].t(), xs[i], out=dws[i])
                if i > 0:
                    torch.matmul(dys[i], ws[i], out=dxs[i])

        for _ in range(3):
            step()
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        for _ in range(a.iters):
            step()
        t1.record()
        torch.cuda.synchronize()
        ms = t0.elapsed_time(t1) / a.iters
        print(f"torch step    {name}  {ms:10.4f} ms  "
              f"{step_flops / (ms * 1e9):9.1f} TFLOP/s   "
              f"<- torch.matmul, {name}")
    print(f"step = {step_flops / 1e9:.1f} GFLOP; every output in the run's "
          "dtype (torch.matmul out=), weight gradients assigned, not added")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # a CUDA error, out of memory: say it, fail
        print(f"torch_gemm: {type(e).__name__}: {e}")
        sys.exit(1)
