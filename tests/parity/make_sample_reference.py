#!/usr/bin/python3
"""Writes the PyTorch reference of the sampler's parity test
(test_parity_sample.c, issue 32).

    make_sample_reference.py OUT_FILE

OUT_FILE (JSON) holds rows of float32 logits drawn from a seeded torch
generator (vocabularies 7 to 50257, peaked and flat, some with -inf
entries), each with sampling parameters and what Hugging Face transformers'
warpers make of them: the kept token ids and the final probabilities
(softmax after TemperatureLogitsWarper, TopKLogitsWarper and
TopPLogitsWarper, in generate's order). The warpers are written here from
their documented semantics, in float32 on torch's CPU kernels; no
transformers import:
  temperature: scores / T;
  top-k: k = min(max(k, 1), V); every score below the k-th largest -> -inf
         (ties at the k-th value kept);
  top-p: sort ascending, cumulative softmax; remove while the cumulative
         probability <= 1 - top_p, never the most likely token.
Greedy rows (temperature 0) carry torch.argmax's choice (the first of the
largest) and log_softmax's value there (in float64, as the engine's).
Where logits tie at top-p's boundary, HF keeps whichever of the tied
tokens its unstable sort put last; the engine keeps the lowest ids, so the
test lets the kept sets differ only among tokens of the boundary's logit.
"""
import json
import math
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import torch
except ImportError as e:
    sys.exit("the parity tests need PyTorch for %s (%s): install "
             "python3-torch (scripts/setup.sh test does)"
             % (sys.executable, e))

torch.set_num_threads(1)


def warp(scores, temperature, top_k, top_p):
    """HF's three warpers on a 1-D float32 row; returns the warped scores."""
    scores = scores / temperature
    if top_k > 0:
        k = min(max(top_k, 1), scores.shape[-1])
        kth = torch.topk(scores, k)[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, -float("inf"))
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(scores, descending=False)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cum <= (1 - top_p)
        remove[..., -1:] = False
        mask = remove.scatter(0, sorted_idx, remove)
        scores = scores.masked_fill(mask, -float("inf"))
    return scores


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    g = torch.Generator().manual_seed(20261205)

    def randn(v, scale):
        return torch.randn(v, generator=g, dtype=torch.float32) * scale

    rows = []

    def add(logits, temperature, top_k, top_p):
        # JSON has no -inf (jansson refuses Python's -Infinity): null.
        row = {"logits": [None if x == -math.inf else float(x)
                          for x in logits.tolist()],
               "temperature": temperature, "top_k": top_k, "top_p": top_p}
        if temperature == 0:
            row["argmax"] = int(torch.argmax(logits))
            # In float64: float32's sum over 50257 terms is off by 3e-5.
            row["logprob"] = float(
                torch.log_softmax(logits.double(), dim=-1)[row["argmax"]])
        else:
            w = warp(logits, torch.tensor(temperature, dtype=torch.float32),
                     top_k, top_p)
            kept = torch.nonzero(w > -float("inf")).flatten()
            probs = torch.softmax(w, dim=-1)
            row["kept"] = [int(i) for i in kept.tolist()]
            row["probs"] = [float(probs[i]) for i in kept.tolist()]
        rows.append(row)

    # Parameters as clients send them, on vocabularies small to GPT-2's.
    params = [(1.0, 0, 1.0), (0.7, 0, 0.9), (1.0, 50, 1.0), (0.8, 40, 0.95),
              (1.5, 0, 0.5), (0.5, 5, 0.8), (1.0, 1, 1.0), (2.0, 0, 0.1),
              (1.2, 100000, 0.99), (0.3, 0, 0.97)]
    for v in (7, 100, 1000, 50257):
        for i, (t, k, p) in enumerate(params):
            scale = 3.0 if i % 2 else 8.0  # flat-ish and peaked
            add(randn(v, scale), t, k, p)
    # Masked tokens (-inf) and a vocabulary with many equal logits (ties at
    # the top-k boundary, kept whole).
    x = randn(300, 2.0)
    x[::3] = -float("inf")
    add(x, 1.0, 20, 0.9)
    add(torch.round(randn(500, 2.0)), 1.0, 30, 1.0)
    add(torch.round(randn(500, 2.0)), 0.9, 0, 0.6)
    # Greedy, with ties for the largest.
    for v in (5, 1000, 50257):
        x = torch.round(randn(v, 3.0))
        add(x, 0, 0, 1.0)
    out = sys.argv[1]
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".tmp", "w") as f:
        json.dump({"rows": rows}, f)
    os.replace(out + ".tmp", out)
    print("wrote %d rows to %s" % (len(rows), out))
    assert all(math.isfinite(p) for r in rows for p in r.get("probs", []))


if __name__ == "__main__":
    main()
