#!/usr/bin/python3
"""Writes the PyTorch reference of the transformer ops' parity test
(test_parity_ops.c, issue 31).

    make_ops_reference.py OUT_FILE

OUT_FILE (safetensors) holds, for fixed random inputs drawn from a seeded
torch generator, each op's inputs, its forward output, the upstream
gradient fed to backward ("<op>.dout") and the gradients autograd returns.
torch 1.13 has no scaled_dot_product_attention: attention is built from
matmul and a masked softmax, as nanoGPT's CausalSelfAttention does when
flash attention is unavailable. Everything is float32 on torch's CPU
kernels; sizes are in the metadata ("sizes", JSON).
"""
import json
import math
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import numpy as np  # noqa: F401 (trainyard_torch needs it)
    import torch
    import torch.nn.functional as F
except ImportError as e:
    sys.exit("the parity tests need PyTorch and numpy for %s (%s): install "
             "python3-torch and python3-numpy (scripts/setup.sh test does)"
             % (sys.executable, e))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tools"))
import trainyard_torch as tt  # noqa: E402,I100

torch.set_num_threads(1)

# GPT-2-like shapes, small: batch 2, context 16, 4 heads of 8 (C 32),
# vocabulary 50 with repeated tokens.
SIZES = {"b": 2, "t": 16, "h": 4, "d": 8, "v": 50, "eps": 1e-5,
         "ignore": -1, "gelu_n": 512}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    g = torch.Generator().manual_seed(31)
    b, t, h, d, v = (SIZES[k] for k in "bthdv")
    c = h * d
    out = {}

    def rand(*shape, scale=1.0):
        return ((torch.rand(*shape, generator=g) * 2 - 1) * scale).float()

    def leaf(x):
        return x.clone().requires_grad_(True)

    # gelu, tanh approximation
    x = leaf(rand(SIZES["gelu_n"], scale=5.0))
    y = F.gelu(x, approximate="tanh")
    dy = rand(SIZES["gelu_n"])
    y.backward(dy)
    out.update({"gelu.x": x, "gelu.out": y, "gelu.dout": dy,
                "gelu.dx": x.grad})

    # embedding (ids int32, repeats)
    table = leaf(rand(v, c))
    ids = torch.randint(0, 12, (b * t,), generator=g)
    y = F.embedding(ids, table)
    dy = rand(b * t, c)
    y.backward(dy)
    out.update({"emb.table": table, "emb.ids": ids.to(torch.int32),
                "emb.out": y, "emb.dout": dy, "emb.dtable": table.grad})

    # layernorm over the last axis of (B, T, C)
    x = leaf(rand(b, t, c, scale=2.0))
    gamma = leaf(1 + rand(c, scale=0.5))
    beta = leaf(rand(c, scale=0.5))
    y = F.layer_norm(x, (c,), gamma, beta, SIZES["eps"])
    dy = rand(b, t, c)
    y.backward(dy)
    out.update({"ln.x": x, "ln.gamma": gamma, "ln.beta": beta, "ln.out": y,
                "ln.dout": dy, "ln.dx": x.grad, "ln.dgamma": gamma.grad,
                "ln.dbeta": beta.grad})

    # causal attention over a fused QKV (B, T, 3C)
    qkv = leaf(rand(b, t, 3 * c, scale=1.5))
    q, k, vv = qkv.split(c, dim=2)
    q = q.view(b, t, h, d).transpose(1, 2)
    k = k.view(b, t, h, d).transpose(1, 2)
    vv = vv.view(b, t, h, d).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = (att @ vv).transpose(1, 2).contiguous().view(b, t, c)
    dy = rand(b, t, c)
    y.backward(dy)
    out.update({"attn.qkv": qkv, "attn.out": y, "attn.att": att,
                "attn.dout": dy, "attn.dqkv": qkv.grad})

    # per-position cross-entropy, ignore index, mean over counted rows
    logits = leaf(rand(b * t, v, scale=4.0))
    targets = torch.randint(0, v, (b * t,), generator=g)
    targets[::5] = SIZES["ignore"]
    loss = F.cross_entropy(logits, targets, ignore_index=SIZES["ignore"])
    loss.backward()
    out.update({"xent.logits": logits, "xent.targets": targets.to(torch.int32),
                "xent.loss": loss.reshape(1), "xent.dlogits": logits.grad})

    os.makedirs(os.path.dirname(os.path.abspath(sys.argv[1])), exist_ok=True)
    tt.st_write(sys.argv[1], {k: val.detach() for k, val in out.items()},
                {"sizes": json.dumps(SIZES), "torch": torch.__version__})


if __name__ == "__main__":
    main()
