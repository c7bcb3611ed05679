#!/usr/bin/env python3
"""PyTorch reference for the Fashion-MNIST MLP that trainyard trains in
tests/acceptance/fashion.py: the same network (784-256-128-10, ReLU),
the same preprocessing (pixels / 255), 10% held out for validation, Adam
lr 0.001, batch 128, 10 epochs. Prints test accuracy and training speed per
seed, so trainyard's figures can be read against it on the same machine.

    python3 bench/reference/fashion_mlp_torch.py [seed ...]
"""
import gzip
import os
import sys
import time

# Before torch loads: without it PyTorch's OpenMP threads spin against
# OpenBLAS's on two cores and training runs several times slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
DATA = "/usr/share/datasets/fashion-mnist"


def idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def run(seed, threads=2):
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    x = torch.tensor(idx("train-images-idx3-ubyte.gz"), dtype=torch.float32).view(-1, 784) / 255
    y = torch.tensor(idx("train-labels-idx1-ubyte.gz"), dtype=torch.int64)
    xt = torch.tensor(idx("t10k-images-idx3-ubyte.gz"), dtype=torch.float32).view(-1, 784) / 255
    yt = torch.tensor(idx("t10k-labels-idx1-ubyte.gz"), dtype=torch.int64)
    perm = torch.randperm(len(x))
    n_val = round(len(x) * 0.1)
    tr = perm[:-n_val]
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    loss_fn = torch.nn.CrossEntropyLoss()
    t0 = time.time()
    for _ in range(10):
        order = tr[torch.randperm(len(tr))]
        for i in range(0, len(order), 128):
            b = order[i:i + 128]
            opt.zero_grad()
            loss = loss_fn(model(x[b]), y[b])
            loss.backward()
            opt.step()
    secs = time.time() - t0
    with torch.no_grad():
        acc = (model(xt).argmax(1) == yt).float().mean().item()
    return acc, 10 * len(tr) / secs


if __name__ == "__main__":
    seeds = [int(s) for s in sys.argv[1:]] or [1, 2, 3, 4, 5]
    accs = []
    for s in seeds:
        acc, sps = run(s)
        accs.append(acc)
        print(f"seed {s}: test accuracy {acc:.4f}, {sps:,.0f} samples/s")
    print(f"mean test accuracy {np.mean(accs):.4f} (min {min(accs):.4f}, max {max(accs):.4f})")
