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

The masked attention (issue 31's second half: text classifiers) runs on
"mb" sequences whose lengths "lens" are partial, 0 and full (padding after
the text), without and with the causal mask, against torch's
scaled-dot-product attention under the same boolean mask (torch 1.13's
F._scaled_dot_product_attention, F.scaled_dot_product_attention after it).
A sequence of length 0 sees no key: the engine gives P = 0 and out = 0
there (softmax over nothing is NaN in torch), so the reference attends it
to every key and then replaces its output by zeros, which also makes its
gradients zero. The dropout path ("attn_keep"): fixed multipliers keep
(0 or 1/(1-rate)) drawn here, and the same math written out,
out = (P * keep) V, differentiated by autograd; "attn_keep.pk" is P * keep,
what the engine's forward leaves in keep.
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
         "ignore": -1, "gelu_n": 512,
         # masked attention: 3 sequences, lengths partial, 0 and full (of t)
         "mb": 3, "lens": [5, 0, 16], "keep_rate": 0.25}


def visible_keys(lens, t, causal):
    """(mb, 1, t, t) bool: query i of sequence bi sees key j (the contract:
    j < lens[bi], and j <= i when causal)."""
    j = torch.arange(t)
    vis = (j[None, None, :] < lens[:, None, None]).expand(len(lens), t, t)
    if causal:
        vis = vis & torch.tril(torch.ones(t, t, dtype=torch.bool))
    return vis[:, None]


def sdpa(q, k, v, vis):
    """torch's scaled-dot-product attention under boolean mask vis (True:
    attends): (out, probabilities)."""
    if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=vis)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        return out, F.softmax(s.masked_fill(~vis, float("-inf")), dim=-1)
    return F._scaled_dot_product_attention(q, k, v, vis, 0.0, True, False)


def split_heads(qkv, b, t, h, d):
    c = h * d
    return [z.view(b, t, h, d).transpose(1, 2) for z in qkv.split(c, dim=2)]


def masked_attention(out, prefix, qkv, dy, lens, causal):
    """The reference of the masked attention op: forward by torch's
    scaled-dot-product attention, gradients by autograd."""
    b, t, c3 = qkv.shape
    h, d = SIZES["h"], SIZES["d"]
    q, k, vv = split_heads(qkv, b, t, h, d)
    empty = lens == 0
    vis = visible_keys(lens, t, causal) | empty[:, None, None, None]
    y, att = sdpa(q, k, vv, vis)
    zero = empty[:, None, None, None]
    y = torch.where(zero, torch.zeros_like(y), y)
    att = torch.where(zero, torch.zeros_like(att), att)
    y = y.transpose(1, 2).contiguous().view(b, t, h * d)
    y.backward(dy)
    # The reference's own check: the same by matmul and a masked softmax.
    with torch.no_grad():
        s = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        p = F.softmax(s.masked_fill(~vis, float("-inf")), dim=-1)
        p = torch.where(zero, torch.zeros_like(p), p)
        assert torch.allclose(p, att, atol=1e-6, rtol=0), prefix
    out.update({prefix + ".qkv": qkv, prefix + ".out": y, prefix + ".att": att,
                prefix + ".dout": dy, prefix + ".dqkv": qkv.grad})


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

    # masked attention: padding (lengths partial, 0, full), not causal and
    # causal, then with dropout multipliers
    mb = SIZES["mb"]
    lens = torch.tensor(SIZES["lens"])
    assert len(lens) == mb and lens.min() == 0 and lens.max() == t and ((lens > 0) & (lens < t)).any()
    for prefix, causal in (("mattn", False), ("mattn_causal", True)):
        masked_attention(out, prefix, leaf(rand(mb, t, 3 * c, scale=1.5)),
                         rand(mb, t, c), lens, causal)
    qkv = leaf(rand(mb, t, 3 * c, scale=1.5))
    q, k, vv = split_heads(qkv, mb, t, h, d)
    rate = SIZES["keep_rate"]
    keep = (torch.rand(mb, h, t, t, generator=g) >= rate).float() * (1.0 / (1.0 - rate))
    vis = visible_keys(lens, t, False)
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    # Softmax over the visible keys; a row with none gets zeros (0/1).
    top = s.detach().masked_fill(~vis, float("-inf")).amax(-1, keepdim=True)
    e = torch.exp(s - top.nan_to_num(0.0, 0.0, 0.0)) * vis
    p = e / e.sum(-1, keepdim=True).clamp(min=1e-30)
    pk = p * keep
    y = (pk @ vv).transpose(1, 2).contiguous().view(mb, t, c)
    dy = rand(mb, t, c)
    y.backward(dy)
    with torch.no_grad():  # the same probabilities as torch's softmax
        ref = F.softmax(s.masked_fill(~vis, float("-inf")), dim=-1).nan_to_num(0.0)
        assert torch.allclose(p, ref, atol=1e-6, rtol=0)
    out.update({"mattn_keep.qkv": qkv, "mattn_keep.keep": keep, "mattn_keep.out": y,
                "mattn_keep.att": p, "mattn_keep.pk": pk, "mattn_keep.dout": dy,
                "mattn_keep.dqkv": qkv.grad})

    # sequence_pool's op over the same lengths, each mode: per sequence,
    # the mean of its first n positions, position 0, position n - 1 (0 when
    # n = 0), written out sequence by sequence; trainyard_torch's
    # SequencePool must agree with it
    for mode in ("mean", "first", "last"):
        x = leaf(rand(mb, t, c))
        rows = []
        for bi, n in enumerate(SIZES["lens"]):
            if n == 0:
                rows.append(torch.zeros(c))
            elif mode == "mean":
                rows.append(x[bi, :n].mean(dim=0))
            else:
                rows.append(x[bi, 0 if mode == "first" else n - 1])
        y = torch.stack(rows)
        dy = rand(mb, c)
        y.backward(dy)
        with torch.no_grad():
            assert torch.allclose(tt.SequencePool(mode)(x, lens), y, atol=1e-6, rtol=0)
        out.update({"pool_%s.x" % mode: x, "pool_%s.out" % mode: y,
                    "pool_%s.dout" % mode: dy, "pool_%s.dx" % mode: x.grad})

    # seq_lens: ids with -1 padding after the text (lengths as above)
    ids = torch.randint(0, v, (mb, t), generator=g).float()
    for bi, n in enumerate(SIZES["lens"]):
        ids[bi, n:] = -1.0
    out.update({"lens.ids": ids, "lens.lens": lens.to(torch.int32)})

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
