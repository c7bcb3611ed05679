#!/usr/bin/python3
"""trainyard <-> PyTorch: build the nn.Sequential that a trainyard model spec
describes, and read and write trainyard model files (safetensors with the
spec in the metadata; models/nn.h is the contract).

One torch module per spec layer, so state-dict names are trainyard's tensor
names ("0.weight", "3.body.0.running_mean", "5.projection.1.bias"). The
safetensors reader and writer are plain Python + numpy (Debian ships no
safetensors package); they handle the dtypes trainyard and PyTorch state
dicts use (F32; I64 for batchnorm's num_batches_tracked; a few more).

As a module:
    import trainyard_torch as tt
    model, meta = tt.load_model("model.safetensors")   # eval mode
    probs = tt.predict(model, meta, raw_rows)           # as the server's /predict
    tt.save_model("out.safetensors", model, spec, task="classification",
                  input_shape=[1, 28, 28], classes=[...], preprocess={...})

As a command (run with /usr/bin/python3, which has torch):
    trainyard_torch.py show MODEL.safetensors
    trainyard_torch.py predict MODEL.safetensors INPUTS.json   (a JSON array
        of examples in raw units; prints {"outputs": [...]} as JSON)
    trainyard_torch.py init SPEC.json OUT.safetensors --task classification
        --input-shape 1,28,28 (--classes a,b,c | --num-outputs 10)
        [--preprocess JSON] [--seed N]     a freshly initialised torch model,
        saved for POST /v1/models
    trainyard_torch.py convert OUT.safetensors --module-file my_model.py
        --class Net [--args JSON] [--state-dict SD.pt] --input-shape 1,28,28
        --task classification [--classes a,b,c | --num-outputs N]
        [--preprocess JSON]       a plain PyTorch module (or --saved
        MODEL.pt, a torch.save'd nn.Sequential) as a trainyard model file:
        its layers become the spec, its state dict is renamed (fc1.weight ->
        0.weight), and the result is checked against its own forward()

    spec, tensors, renames, diff = tt.from_module(net, [1, 28, 28])
    tt.save_module("out.safetensors", net, [1, 28, 28], "classification",
                   classes=[...])

Language models (task "language_modeling", issue 31): the input is (N, T)
token ids carried as float32, the spec starts with an embedding whose
vocabulary is the model's num_outputs (build(spec, [T], vocab_size)), and
the network gives logits (N, T, V); lm_loss is the training loss. The
sequence layers (embedding, positional_embedding, attention as
nn.MultiheadAttention, transformer_block, lm_head, sequence_pool) keep
trainyard's state-dict names ("2.attn.in_proj_weight", "2.mlp.0.weight");
a tied lm_head writes no tensor. `predict` takes prompts of ids (lists, at
most T long) and gives the next token's probabilities after each;
`init --task language_modeling --input-shape T --num-outputs V
[--tokenizer byte]` writes a fresh one.

Text classifiers (task "classification" on token ids): the spec starts
with an embedding that names its vocab_size, e.g. embedding,
positional_embedding, transformer_block {causal: false} x2, layernorm,
sequence_pool, dense(classes); trained with cross-entropy on the logits.
Inputs are ids padded with -1 after the text; the network takes each
sequence's length from them (seq_lens), embeds padding as id 0, hides
padded keys from attention (key_padding_mask) and pools only the
positions before the length, as the engine does.

Runs from a checkout (tools/trainyard_torch.py) or copied anywhere: it is
one file that needs only numpy and torch.
"""
import argparse
import json
import os
import struct
import sys

# Before torch loads: PyTorch's OpenMP threads otherwise spin against
# OpenBLAS's on a small machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

# ---- safetensors ----

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U8": np.uint8, "BOOL": np.bool_,
}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def st_read(path):
    """Reads a safetensors file: (OrderedDict name -> numpy array, metadata
    dict of strings). Arrays are copies (writable, little-endian)."""
    with open(path, "rb") as f:
        raw = f.read()
    return st_parse(raw)


def st_parse(raw):
    if len(raw) < 8:
        raise ValueError("not a safetensors file: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("not a safetensors file: header runs past the end")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None) or {}
    data = raw[8 + n:]
    tensors = {}
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if t["dtype"] not in _DTYPES:
            raise ValueError("tensor %r: unsupported dtype %s" % (name, t["dtype"]))
        b, e = t["data_offsets"]
        dt = np.dtype(_DTYPES[t["dtype"]]).newbyteorder("<")
        a = np.frombuffer(data[b:e], dtype=dt).reshape(t["shape"])
        tensors[name] = a.astype(dt.newbyteorder("="), copy=True)
    return tensors, meta


def st_write(path, tensors, meta=None):
    """Writes tensors (name -> numpy array or torch tensor, in the given
    order) and meta (str -> str) as safetensors, the header padded with
    spaces to a multiple of 8 as trainyard writes it."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        if isinstance(a, torch.Tensor):
            a = a.detach().cpu().numpy()
        a = np.ascontiguousarray(a)
        if a.dtype not in _NAMES:
            raise ValueError("tensor %r: unsupported dtype %s" % (name, a.dtype))
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if meta:
        for k, v in meta.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ValueError("metadata must map strings to strings (%r)" % (k,))
        header = {"__metadata__": dict(meta), **header}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


# ---- spec -> torch ----

def _pair(v, name):
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise ValueError("%s must be a number or an [h, w] pair" % name)
        return int(v[0]), int(v[1])
    return int(v), int(v)


class GlobalAvgPool(nn.Module):
    """trainyard's global_avgpool: (N, C, H, W) -> (N, C), the mean over H, W."""

    def forward(self, x):
        return x.mean(dim=(2, 3))


class Residual(nn.Module):
    """trainyard's residual block: body(x) + (projection(x) or x)."""

    uses_lens = True  # passed on to its branches

    def __init__(self, body, projection=None):
        super().__init__()
        self.body = body
        if projection is not None:
            self.projection = projection
        else:
            self.projection = None

    def forward(self, x, lens=None):
        y = _run(self.body, x, lens)
        return y + (_run(self.projection, x, lens) if self.projection is not None else x)


def _conv_out(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


# ---- sequence layers (issue 31): a language model's input is (N, T)
# token ids carried as float32; after the embedding, activations are (N, T,
# C): a position axis, then channels. ----

class SeqShape(list):
    """A per-example (T, C) shape: a position axis, then channels. Layers
    that act per position (dense, layernorm) know a sequence by this type,
    so an image's [C, H, W] or a rank-2 input keeps its meaning."""


def _same(shape):
    """shape, copied, keeping whether it is a sequence."""
    return type(shape)(shape)


def _normal_init(*tensors):
    """GPT-2's init (nanoGPT's _init_weights): weights normal(0, 0.02),
    biases zero; trainyard draws the same distributions (models/nn.h)."""
    with torch.no_grad():
        for w, b in tensors:
            nn.init.normal_(w, 0.0, 0.02)
            if b is not None:
                nn.init.zeros_(b)


def token_ids(x, bound, fallback=0):
    """The engine's to_ids (models/backend.h): ids carried as float values
    x to int64, x itself when it is a whole number in [0, bound), else
    fallback (the embedding reads padding, -1, as id 0)."""
    ok = (x >= 0) & (x < bound) & (x == torch.floor(x))
    return torch.where(ok, x, torch.full_like(x, float(fallback))).long()


def seq_lens(x):
    """The engine's seq_lens: each row's length, the position of the first
    value below 0 in ids x (N, T) (padding is -1, after the text), or T;
    int64 (N)."""
    return (torch.cumsum((x < 0).long(), dim=1) == 0).sum(dim=1)


class Embedding(nn.Embedding):
    """trainyard's embedding {dim, vocab_size}: ids (N, T), float32 values,
    to (N, T, dim); state "weight" (V, dim), init normal(0, 0.02). An id
    that is not a whole number in [0, V) (the padding, -1) reads row 0, as
    the engine's to_ids fallback; what the padding gives is then masked
    (key_padding_mask, sequence_pool's lengths)."""

    def __init__(self, vocab, dim):
        super().__init__(vocab, dim)
        _normal_init((self.weight, None))

    def forward(self, x):
        return super().forward(token_ids(x, self.num_embeddings))


class PositionalEmbedding(nn.Embedding):
    """trainyard's positional_embedding {}: x + weight[arange(T)]; state
    "weight" (T, C), init normal(0, 0.02)."""

    def __init__(self, t, c):
        super().__init__(t, c)
        _normal_init((self.weight, None))

    def forward(self, x):
        return x + self.weight[:x.shape[1]]


def _causal_mask(t, device):
    return torch.triu(torch.full((t, t), float("-inf"), device=device), diagonal=1)


class Attention(nn.MultiheadAttention):
    """trainyard's attention {heads, causal, dropout, bias}: self-attention
    with nn.MultiheadAttention's tensors and semantics (in_proj_weight (3C,
    C), q rows first; in_proj_bias (3C); out_proj.weight (C, C);
    out_proj.bias (C)), causal by an upper-triangular -inf mask, padding
    keys (positions >= the sequence's length, when lens is given) by
    key_padding_mask, dropout p on the attention weights
    (nn.MultiheadAttention's own). A sequence of length 0 sees no key: the
    engine's attention gives 0 there, so this layer gives out_proj's bias
    (where torch's softmax over nothing would give NaN). Init: normal(0,
    0.02) weights, zero biases."""

    uses_lens = True

    def __init__(self, c, heads, causal=True, dropout=0.0, bias=True):
        super().__init__(c, heads, dropout=dropout, bias=bias, batch_first=True)
        self.causal = causal
        _normal_init((self.in_proj_weight, self.in_proj_bias),
                     (self.out_proj.weight, self.out_proj.bias))

    def _mha(self, x, attn_mask=None, key_padding_mask=None):
        """nn.MultiheadAttention's own computation (its forward's general
        path) on batch-first x. Always this path: the forward's native fast
        path, which it takes in eval mode without autograd when dropout is
        0, rounds differently, so dropout would change eval outputs."""
        xt = x.transpose(0, 1)
        return nn.functional.multi_head_attention_forward(
            xt, xt, xt, self.embed_dim, self.num_heads, self.in_proj_weight,
            self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout,
            self.out_proj.weight, self.out_proj.bias, training=self.training,
            key_padding_mask=key_padding_mask, need_weights=False,
            attn_mask=attn_mask)[0].transpose(0, 1)

    def forward(self, x, lens=None):
        t = x.shape[1]
        mask = _causal_mask(t, x.device) if self.causal else None
        if lens is None or bool((lens >= t).all()):
            return self._mha(x, mask)
        empty = lens <= 0
        # Empty sequences attend to everything (finite numbers), then give
        # what the engine's zero probabilities give: the bias alone.
        pad = (torch.arange(t, device=x.device)[None, :] >= lens[:, None]) & ~empty[:, None]
        y = self._mha(x, mask, pad)
        if not bool(empty.any()):
            return y
        bias = self.out_proj.bias if self.out_proj.bias is not None else y.new_zeros(())
        return torch.where(empty[:, None, None], bias.expand_as(y), y)


class TransformerBlock(nn.Module):
    """trainyard's transformer_block {heads, mlp_ratio, dropout, causal}:
    GPT-2's pre-norm block, x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)),
    mlp = Linear(C, rC), GELU(tanh), Linear(rC, C). dropout p applies in
    three places (nanoGPT's Block with attn_pdrop = resid_pdrop = p): on
    the attention weights (nn.MultiheadAttention's dropout), after attn's
    out_proj and after mlp.2, each before its residual add. The padding
    mask (lens) goes to the attention; causal false lets a position see
    later ones."""

    uses_lens = True

    def __init__(self, c, heads, mlp_ratio=4, dropout=0.0, causal=True):
        super().__init__()
        hidden = int(np.floor(mlp_ratio * c + 0.5))  # round(ratio * C), as the engine
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = Attention(c, heads, causal=causal, dropout=dropout)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(c, hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(hidden, c))
        self.drop = nn.Dropout(dropout)
        _normal_init((self.mlp[0].weight, self.mlp[0].bias),
                     (self.mlp[2].weight, self.mlp[2].bias))

    def forward(self, x, lens=None):
        x = x + self.drop(self.attn(self.ln_1(x), lens))
        return x + self.drop(self.mlp(self.ln_2(x)))


class LMHead(nn.Module):
    """trainyard's lm_head {tie_embedding}: logits = x @ W^T, (T, C) -> (T,
    V). Tied, W is the embedding layer's weight and this module holds no
    tensor (its state dict is empty; the gradient reaches the embedding);
    untied, its own "weight" (V, C), no bias, init normal(0, 0.02)."""

    def __init__(self, c, vocab=None, embedding=None):
        super().__init__()
        if embedding is not None:
            self._tied = [embedding]  # a list: not registered, not in the state dict
            self.weight = None
        else:
            self._tied = None
            self.weight = nn.Parameter(torch.empty(vocab, c))
            _normal_init((self.weight, None))

    @property
    def tied(self):
        return self._tied is not None

    def forward(self, x):
        w = self._tied[0].weight if self._tied is not None else self.weight
        return torch.matmul(x, w.t())


class SequencePool(nn.Module):
    """trainyard's sequence_pool {mode}: (T, C) -> (C) over each sequence's
    positions < its length (lens; all T without): "mean" their average,
    "first" position 0, "last" position length - 1; a sequence of length 0
    gives zeros. Padded positions get no gradient."""

    uses_lens = True

    def __init__(self, mode="mean"):
        super().__init__()
        if mode not in ("mean", "first", "last"):
            raise ValueError("sequence_pool mode must be mean, first or last, not %r" % mode)
        self.mode = mode

    def forward(self, x, lens=None):
        n, t = x.shape[0], x.shape[1]
        if lens is None:
            lens = torch.full((n,), t, dtype=torch.long, device=x.device)
        lens = lens.clamp(0, t)
        if self.mode == "mean":
            keep = torch.arange(t, device=x.device)[None, :] < lens[:, None]
            total = torch.where(keep[:, :, None], x, torch.zeros_like(x)).sum(dim=1)
            return total / lens.clamp(min=1).to(x.dtype)[:, None]
        at = torch.zeros_like(lens) if self.mode == "first" else (lens - 1).clamp(min=0)
        y = x[torch.arange(n, device=x.device), at]
        return torch.where((lens > 0)[:, None], y, torch.zeros_like(y))


class Sequence(nn.Sequential):
    """The network: an nn.Sequential (state-dict names "0.weight", ...)
    that, when its first layer is an embedding, takes each sequence's
    length from the ids (seq_lens: padding is -1, after the text) and
    hands it to the layers that mask padding (attention,
    transformer_block, sequence_pool), as the engine's nn_pass carries
    lens. Without padding every length is T and nothing is masked."""

    uses_lens = True  # a residual block's body is one too

    def forward(self, x, lens=None):
        if lens is None and len(self) and isinstance(self[0], Embedding):
            lens = seq_lens(x)
        for m in self:
            x = _run(m, x, lens)
        return x


def _run(m, x, lens):
    """m(x), with the lengths for a layer (or block of layers) that masks
    padding; a module that takes none (any plain torch module) gets x
    alone."""
    if lens is not None and getattr(m, "uses_lens", False):
        return m(x, lens)
    return m(x)


def _seq_layer(spec, shape, where, ctx):
    """The torch module of a sequence layer (issue 31), or None when spec
    is not one; with its output shape."""
    t = spec["type"]
    seq = isinstance(shape, SeqShape)
    if t == "embedding":
        if len(shape) != 1 or seq:
            raise ValueError("%s (embedding) needs a (T) input of token ids, got %s"
                             % (where, shape))
        own = spec.get("vocab_size")
        if own is not None and ctx.get("vocab") and int(own) != ctx["vocab"]:
            raise ValueError("%s (embedding): vocab_size %d, but the model's vocabulary is %d"
                             % (where, int(own), ctx["vocab"]))
        vocab = int(own) if own is not None else ctx.get("vocab")
        if not vocab or vocab < 1:
            raise ValueError("%s (embedding): the vocabulary size is unknown (give the layer "
                             "vocab_size, or a language model's num_outputs)" % where)
        if not ctx.get("vocab"):
            ctx["vocab"] = vocab  # an untied lm_head after it reads it
        m = Embedding(vocab, spec["dim"])
        ctx.setdefault("embedding", m)
        return m, SeqShape([shape[0], spec["dim"]])
    if t not in ("positional_embedding", "attention", "transformer_block", "lm_head",
                 "sequence_pool"):
        return None
    if not seq:
        raise ValueError("%s (%s) needs a (T, C) sequence input (after an embedding), got %s"
                         % (where, t, shape))
    tt_, c = shape
    if t == "positional_embedding":
        return PositionalEmbedding(tt_, c), _same(shape)
    if t in ("attention", "transformer_block"):
        heads = spec["heads"]
        if heads < 1 or c % heads:
            raise ValueError("%s (%s): %d channels do not split into %d heads"
                             % (where, t, c, heads))
        if t == "attention":
            return Attention(c, heads, causal=spec.get("causal", True),
                             dropout=spec.get("dropout", 0.0),
                             bias=spec.get("bias", True)), _same(shape)
        return TransformerBlock(c, heads, mlp_ratio=spec.get("mlp_ratio", 4),
                                dropout=spec.get("dropout", 0.0),
                                causal=spec.get("causal", True)), _same(shape)
    if t == "lm_head":
        if spec.get("tie_embedding", True):
            emb = ctx.get("embedding")
            if emb is None:
                raise ValueError("%s (lm_head) is tied to an embedding, but none comes before it"
                                 % where)
            if emb.embedding_dim != c:
                raise ValueError("%s (lm_head): %d channels, the tied embedding has %d"
                                 % (where, c, emb.embedding_dim))
            return LMHead(c, embedding=emb), SeqShape([tt_, emb.num_embeddings])
        if not ctx.get("vocab"):
            raise ValueError("%s (lm_head): the vocabulary size is unknown" % where)
        return LMHead(c, vocab=ctx["vocab"]), SeqShape([tt_, ctx["vocab"]])
    return SequencePool(spec.get("mode", "mean")), [c]


def _layer(spec, shape, where, ctx=None):
    """The torch module for one spec layer on per-example input `shape`
    (a SeqShape for a (T, C) sequence), and its output shape. ctx carries
    the vocabulary ("vocab") and the embedding a tied lm_head uses."""
    ctx = {} if ctx is None else ctx
    t = spec["type"]
    got = _seq_layer(spec, shape, where, ctx)
    if got is not None:
        return got
    seq = isinstance(shape, SeqShape)
    if t == "flatten":
        return nn.Flatten(), [int(np.prod(shape))]
    if t == "dense":
        if seq:  # per position, on the last axis
            return (nn.Linear(shape[1], spec["units"], bias=spec.get("bias", True)),
                    SeqShape([shape[0], spec["units"]]))
        if len(shape) != 1:
            raise ValueError("%s (dense) needs a rank-1 input, got %s: flatten first" % (where, shape))
        return nn.Linear(shape[0], spec["units"], bias=spec.get("bias", True)), [spec["units"]]
    if t == "conv2d":
        c, h, w = shape
        k = _pair(spec["kernel_size"], "kernel_size")
        s = _pair(spec.get("stride", 1), "stride")
        d = _pair(spec.get("dilation", 1), "dilation")
        pad = spec.get("padding", "valid")
        if pad == "valid":
            p = (0, 0)
        elif pad == "same":
            p = (d[0] * (k[0] - 1) // 2, d[1] * (k[1] - 1) // 2)
        else:
            p = _pair(pad, "padding")
        f = spec["filters"]
        m = nn.Conv2d(c, f, k, stride=s, padding=p, dilation=d,
                      groups=spec.get("groups", 1), bias=spec.get("bias", True))
        return m, [f, _conv_out(h, k[0], s[0], p[0], d[0]), _conv_out(w, k[1], s[1], p[1], d[1])]
    if t in ("maxpool2d", "avgpool2d"):
        c, h, w = shape
        k = _pair(spec["pool_size"], "pool_size")
        s = _pair(spec.get("stride", spec["pool_size"]), "stride")
        p = _pair(spec.get("padding", 0), "padding")
        if t == "maxpool2d":
            m = nn.MaxPool2d(k, stride=s, padding=p)
        else:
            m = nn.AvgPool2d(k, stride=s, padding=p, count_include_pad=True)
        return m, [c, _conv_out(h, k[0], s[0], p[0], 1), _conv_out(w, k[1], s[1], p[1], 1)]
    if t == "global_avgpool":
        return GlobalAvgPool(), [shape[0]]
    if t == "batchnorm":
        if seq:
            raise ValueError("%s (batchnorm) does not take a (T, C) sequence: use layernorm"
                             % where)
        eps, mom = spec.get("eps", 1e-5), spec.get("momentum", 0.1)
        cls = nn.BatchNorm1d if len(shape) == 1 else nn.BatchNorm2d
        return cls(shape[0], eps=eps, momentum=mom), list(shape)
    if t == "layernorm":
        # A sequence: each position's C values; else the whole example.
        norm = [shape[-1]] if seq else list(shape)
        return nn.LayerNorm(norm, eps=spec.get("eps", 1e-5)), _same(shape)
    if t == "relu":
        return nn.ReLU(), _same(shape)
    if t == "leaky_relu":
        return nn.LeakyReLU(spec.get("negative_slope", 0.01)), _same(shape)
    if t == "gelu":
        approx = spec.get("approximate", "none")
        if approx not in ("none", "tanh"):
            raise ValueError("%s (gelu): approximate must be \"none\" or \"tanh\"" % where)
        return nn.GELU(approximate=approx), _same(shape)
    if t == "tanh":
        return nn.Tanh(), _same(shape)
    if t == "sigmoid":
        return nn.Sigmoid(), _same(shape)
    if t == "softmax":
        return nn.Softmax(dim=-1 if seq else 1), _same(shape)
    if t == "dropout":
        return nn.Dropout(spec.get("rate", 0.5)), _same(shape)
    if t == "residual":
        body, out = _sequence(spec["layers"], shape, where + ".layers", ctx)
        proj = None
        if spec.get("projection"):
            proj, pout = _sequence(spec["projection"], shape, where + ".projection", ctx)
            if pout != out:
                raise ValueError("%s: body gives %s, projection %s" % (where, out, pout))
        elif out != list(shape):
            raise ValueError("%s: body gives %s, input is %s" % (where, out, shape))
        return Residual(body, proj), out
    raise ValueError("%s: unknown layer type %r" % (where, t))


def _sequence(layers, shape, where, ctx=None):
    ctx = {} if ctx is None else ctx
    mods = []
    shape = _same(shape)
    for i, spec in enumerate(layers):
        m, shape = _layer(spec, shape, "%s[%d]" % (where, i), ctx)
        mods.append(m)
    return Sequence(*mods), shape


def build(spec, input_shape, vocab_size=None):
    """The nn.Sequential for a spec ({"layers": [...]}, normalized or not) on
    per-example input_shape ([F], [C, H, W], or [T] token ids for a spec
    that starts with an embedding, which needs vocab_size: a language
    model's num_outputs); returns (module, out_shape). A language model's
    out_shape is [T, V] (a SeqShape): logits at every position."""
    if isinstance(spec, str):
        spec = json.loads(spec)
    ctx = {"vocab": int(vocab_size) if vocab_size else None}
    return _sequence(spec["layers"], list(input_shape), "model.layers", ctx)


def lm_loss(logits, targets):
    """The language-model loss (models/nn.h): the mean cross-entropy of
    logits (N, T, V) against targets (N, T) next-token ids (any dtype;
    -1 is ignored) over every counted (example, position)."""
    v = logits.shape[-1]
    return nn.functional.cross_entropy(logits.reshape(-1, v), targets.reshape(-1).long(),
                                       ignore_index=-1)


# ---- model files ----

META_KEYS = ("trainyard.format", "trainyard.spec", "trainyard.task",
             "trainyard.input_shape", "trainyard.num_outputs",
             "trainyard.classes", "trainyard.preprocess")


def parse_meta(meta):
    """The trainyard metadata of a model file as Python values."""
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise ValueError("not a trainyard model: no %s metadata" % ", ".join(missing))
    return {
        "spec": json.loads(meta["trainyard.spec"]),
        "task": meta["trainyard.task"],
        "input_shape": json.loads(meta["trainyard.input_shape"]),
        "num_outputs": int(meta["trainyard.num_outputs"]),
        "classes": json.loads(meta["trainyard.classes"]),
        "preprocess": json.loads(meta["trainyard.preprocess"]),
        # regression only, optional (older files, imports): see unscale
        "target": json.loads(meta.get("trainyard.target", '{"kind":"none"}')),
        # language models (and text classifiers): the tokenizer description
        "tokenizer": json.loads(meta.get("trainyard.tokenizer", "null")),
    }


def vocab_size(meta, tensors=None):
    """The vocabulary an embedding in meta's spec reads: a language model's
    num_outputs, else the layer's vocab_size (a text classifier's
    normalized spec names it) or the first embedding's weight rows in
    tensors; None when the spec has no embedding."""
    layers = meta["spec"]["layers"]
    for i, layer in enumerate(layers):
        if layer.get("type") == "embedding":
            if meta["task"] == "language_modeling":
                return meta["num_outputs"]
            if layer.get("vocab_size") is not None:
                return int(layer["vocab_size"])
            w = (tensors or {}).get("%d.weight" % i)
            if w is None:
                raise ValueError("the embedding (layer %d) has no %d.weight" % (i, i))
            return int(w.shape[0])
    return None


def load_state(model, tensors):
    """Copies tensors (name -> numpy) into model's state dict; every state
    tensor but num_batches_tracked must be present, with the right shape,
    and nothing else. Raises ValueError naming the tensor otherwise."""
    state = model.state_dict()
    extra = [k for k in tensors if k not in state]
    if extra:
        raise ValueError("unexpected tensors: %s" % ", ".join(extra))
    new = {}
    for k, v in state.items():
        if k not in tensors:
            if k.endswith("num_batches_tracked"):
                new[k] = v
                continue
            raise ValueError("missing tensor %s" % k)
        a = tensors[k]
        if tuple(a.shape) != tuple(v.shape):
            raise ValueError("tensor %s: shape %s, the model wants %s"
                             % (k, list(a.shape), list(v.shape)))
        new[k] = torch.from_numpy(np.ascontiguousarray(a)).to(v.dtype)
    model.load_state_dict(new)


def load_model(path):
    """Loads a trainyard model file: (module in eval mode, metadata dict as
    parse_meta gives it)."""
    tensors, raw = st_read(path)
    meta = parse_meta(raw)
    model, _ = build(meta["spec"], meta["input_shape"], vocab_size(meta, tensors))
    load_state(model, tensors)
    model.eval()
    return model, meta


def preprocess(meta, x):
    """Applies the model's stored preprocessing to raw rows x (N, features)
    in float32, exactly as the server does ((x - mean) / std per feature;
    x * factor; "tokens": ids as they are, -1 padding included)."""
    x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    p = meta["preprocess"]
    kind = p.get("kind", "none")
    if kind == "tokens":
        return x
    if kind == "scale":
        return x * np.float32(p["factor"])
    if kind == "standardize":
        return (x - np.asarray(p["mean"], np.float32)) / np.asarray(p["std"], np.float32)
    if kind != "none":
        raise ValueError("unknown preprocess kind %r" % kind)
    return x


def unscale(meta, y):
    """A regression net's outputs y (N, outputs) in the target's units, as
    the server answers them: y * std + mean per column when the model has
    "trainyard.target" {"kind": "standardize"} (computed in double, rounded
    to float32 once), else y as it is."""
    t = meta.get("target") or {"kind": "none"}
    if t.get("kind") == "standardize":
        y = (np.asarray(y, np.float64) * np.asarray(t["std"], np.float64)
             + np.asarray(t["mean"], np.float64))
        return y.astype(np.float32)
    if t.get("kind", "none") != "none":
        raise ValueError("unknown target kind %r" % t.get("kind"))
    return y


def predict(model, meta, x):
    """What the server's /predict "outputs" hold for raw rows x: softmax
    probabilities (classification) or values (regression, in the target's
    units), as numpy. A language model takes prompts of token ids (each at
    most context_length long) and gives, per prompt, the probabilities of
    the next token (N, V): the softmax of the logits at its last position
    (the model is causal, so what follows a prompt in the window does not
    change them). A text classifier (a spec that starts with an
    embedding) takes lists of ids, at most input_shape[0] each, padded
    here with -1 (or rows already padded)."""
    if meta["task"] == "language_modeling":
        t = meta["input_shape"][0]
        xp = np.zeros((len(x), t), np.float32)
        ends = []
        for i, ids in enumerate(x):
            ids = np.asarray(ids, np.float32).reshape(-1)
            if not 1 <= len(ids) <= t:
                raise ValueError("prompt %d: %d tokens, give 1 to %d" % (i, len(ids), t))
            xp[i, :len(ids)] = ids
            ends.append(len(ids) - 1)
        with torch.no_grad():
            logits = model.eval()(torch.from_numpy(xp))
            last = logits[torch.arange(len(x)), torch.tensor(ends, dtype=torch.long)]
            return torch.softmax(last, dim=-1).numpy()
    if _takes_ids(meta):
        x = _pad_ids(x, meta["input_shape"][0])
    xp = preprocess(meta, x).reshape([len(x)] + list(meta["input_shape"]))
    with torch.no_grad():
        y = model.eval()(torch.from_numpy(xp))
        if meta["task"] == "classification":
            y = torch.softmax(y, dim=1)
    y = y.numpy()
    return unscale(meta, y) if meta["task"] == "regression" else y


def _takes_ids(meta):
    layers = meta["spec"]["layers"]
    return bool(layers) and layers[0].get("type") == "embedding"


def _pad_ids(x, t):
    """A text classifier's examples, lists of ids (at most t each), padded
    with -1 after the text as the dataset stores them: (N, t) float32."""
    xp = np.full((len(x), t), -1.0, np.float32)
    for i, ids in enumerate(x):
        ids = np.asarray(ids, np.float32).reshape(-1)
        if len(ids) > t:
            raise ValueError("example %d: %d tokens, give at most %d" % (i, len(ids), t))
        xp[i, :len(ids)] = ids
    return xp


def model_metadata(spec, task, input_shape, classes=None, num_outputs=None,
                   preprocess=None, extra=None, tokenizer=None):
    """The __metadata__ strings of a trainyard model file (models/nn.h)."""
    if classes is not None:
        if num_outputs is not None and num_outputs != len(classes):
            raise ValueError("num_outputs %d but %d classes" % (num_outputs, len(classes)))
        num_outputs = len(classes)
    if num_outputs is None:
        raise ValueError("give classes or num_outputs")
    dump = lambda v: json.dumps(v, separators=(",", ":"))  # noqa: E731
    meta = {
        "trainyard.format": "1",
        "trainyard.spec": dump(spec if not isinstance(spec, str) else json.loads(spec)),
        "trainyard.task": task,
        "trainyard.input_shape": dump(list(input_shape)),
        "trainyard.num_outputs": str(int(num_outputs)),
        "trainyard.classes": dump(classes),
        "trainyard.preprocess": dump(preprocess or {"kind": "none"}),
    }
    if tokenizer is not None or task == "language_modeling":
        meta["trainyard.tokenizer"] = dump(tokenizer)
    if extra:
        meta.update(extra)
    return meta


def state_tensors(model):
    """model's state dict as numpy arrays, without num_batches_tracked
    (trainyard does not keep it). Copies: later training does not change
    them."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()
            if not k.endswith("num_batches_tracked")}


def save_model(path, model, spec, task, input_shape, classes=None,
               num_outputs=None, preprocess=None, extra=None, tokenizer=None):
    """Writes model (built from spec) as a trainyard model file, ready for
    POST /v1/models. A language model: task "language_modeling",
    input_shape [T], num_outputs the vocabulary, tokenizer its description
    ("byte", or the object form)."""
    meta = model_metadata(spec, task, input_shape, classes, num_outputs,
                          preprocess, extra, tokenizer)
    st_write(path, state_tensors(model), meta)


# ---- a PyTorch module -> a trainyard model ----

SUPPORTED = ("Linear, Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d(1), "
             "BatchNorm1d, BatchNorm2d, LayerNorm, ReLU, LeakyReLU, GELU, Tanh, "
             "Sigmoid, Softmax, Dropout, Flatten, Identity, and containers of "
             "them (nn.Sequential, a module holding them)")


class ConvertError(ValueError):
    """A module trainyard cannot hold, or one whose converted network does
    not compute what its forward() does."""


def _kind(m):
    return type(m).__name__


def _walk(module, prefix):
    """(qualified name, module) of every leaf in registration order, the
    tool's own Residual blocks and GlobalAvgPool as leaves. A container that
    holds parameters of its own is refused: no layer would carry them."""
    if isinstance(module, (Residual, GlobalAvgPool)) or not len(module._modules):
        yield prefix, module
        return
    own = [k for k, v in list(module._parameters.items()) + list(module._buffers.items())
           if v is not None]
    if own:
        raise ConvertError(
            "module %r (%s) holds its own tensor %r, outside any layer: trainyard "
            "keeps weights only in layers (%s)" % (prefix or "the model", _kind(module),
                                                   own[0], SUPPORTED))
    for name, child in module._modules.items():
        if child is not None:
            yield from _walk(child, "%s.%s" % (prefix, name) if prefix else name)


def _ints(v):
    return [int(x) for x in v] if isinstance(v, (list, tuple)) else [int(v), int(v)]


def _refuse(qname, m, why):
    raise ConvertError("module %r (%s): %s" % (qname, _kind(m), why))


def _leaf_spec(qname, m, shape):
    """The spec layers for leaf module m on per-example input shape: a list
    (empty for Identity; a flatten first for a Linear on [C, H, W], which is
    what forward()'s x.view(len(x), -1) or torch.flatten(x, 1) does)."""
    rank = len(shape)
    if isinstance(m, nn.Identity):
        return []
    if isinstance(m, nn.Linear):
        n = int(np.prod(shape))
        if m.in_features != n:
            _refuse(qname, m, "takes %d inputs, but what reaches it has shape %s (%d values)"
                    % (m.in_features, shape, n))
        layer = {"type": "dense", "units": m.out_features, "bias": m.bias is not None}
        return ([{"type": "flatten"}] if rank != 1 else []) + [layer]
    if isinstance(m, nn.Conv2d):
        if rank != 3 or shape[0] != m.in_channels:
            _refuse(qname, m, "takes [%d, H, W] inputs, what reaches it has shape %s"
                    % (m.in_channels, shape))
        if m.padding_mode != "zeros":
            _refuse(qname, m, "padding_mode %r: trainyard pads with zeros only" % m.padding_mode)
        pad = m.padding if isinstance(m.padding, str) else _ints(m.padding)
        return [{"type": "conv2d", "filters": m.out_channels, "kernel_size": _ints(m.kernel_size),
                 "stride": _ints(m.stride), "padding": pad, "dilation": _ints(m.dilation),
                 "groups": m.groups, "bias": m.bias is not None}]
    if isinstance(m, (nn.MaxPool2d, nn.AvgPool2d)):
        if rank != 3:
            _refuse(qname, m, "needs [C, H, W] inputs, what reaches it has shape %s" % shape)
        if m.ceil_mode:
            _refuse(qname, m, "ceil_mode=True: trainyard's pooling floors")
        if isinstance(m, nn.MaxPool2d):
            if _ints(m.dilation) != [1, 1] or m.return_indices:
                _refuse(qname, m, "dilation and return_indices are not supported")
            kind = "maxpool2d"
        else:
            if not m.count_include_pad or m.divisor_override is not None:
                _refuse(qname, m, "trainyard's average pooling counts the padding "
                        "(count_include_pad=True, no divisor_override)")
            kind = "avgpool2d"
        stride = m.stride if m.stride is not None else m.kernel_size
        return [{"type": kind, "pool_size": _ints(m.kernel_size), "stride": _ints(stride),
                 "padding": _ints(m.padding)}]
    if isinstance(m, nn.AdaptiveAvgPool2d) or isinstance(m, GlobalAvgPool):
        if isinstance(m, nn.AdaptiveAvgPool2d) and _ints(m.output_size) != [1, 1]:
            _refuse(qname, m, "only output_size 1 (a global average) is supported")
        if rank != 3:
            _refuse(qname, m, "needs [C, H, W] inputs, what reaches it has shape %s" % shape)
        return [{"type": "global_avgpool"}]
    if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
        want = 1 if isinstance(m, nn.BatchNorm1d) else 3
        if rank != want or shape[0] != m.num_features:
            _refuse(qname, m, "normalizes %d features over rank-%d inputs, what reaches it "
                    "has shape %s" % (m.num_features, want, shape))
        if not m.affine or not m.track_running_stats:
            _refuse(qname, m, "needs affine=True and track_running_stats=True")
        return [{"type": "batchnorm", "eps": m.eps,
                 "momentum": m.momentum if m.momentum is not None else 0.1}]
    if isinstance(m, nn.LayerNorm):
        if list(m.normalized_shape) != list(shape) or not m.elementwise_affine:
            _refuse(qname, m, "trainyard normalizes the whole example %s with weights, got "
                    "normalized_shape %s" % (shape, list(m.normalized_shape)))
        return [{"type": "layernorm", "eps": m.eps}]
    if isinstance(m, nn.LeakyReLU):
        return [{"type": "leaky_relu", "negative_slope": m.negative_slope}]
    if isinstance(m, nn.GELU):
        approx = getattr(m, "approximate", "none")
        if approx != "none":
            return [{"type": "gelu", "approximate": approx}]
        return [{"type": "gelu"}]
    simple = {nn.ReLU: "relu", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid"}
    if type(m) in simple:
        return [{"type": simple[type(m)]}]
    if isinstance(m, nn.Softmax):
        if rank != 1 or m.dim not in (1, -1):
            _refuse(qname, m, "trainyard's softmax runs over a vector's values (dim=1)")
        return [{"type": "softmax"}]
    if type(m) is nn.Dropout:
        return [{"type": "dropout", "rate": m.p}]
    if isinstance(m, nn.Flatten):
        if m.start_dim != 1 or m.end_dim != -1:
            _refuse(qname, m, "trainyard flattens the whole example (start_dim=1, end_dim=-1)")
        return [{"type": "flatten"}]
    raise ConvertError("module %r is a %s, which trainyard has no layer for; it has %s"
                       % (qname, _kind(m), SUPPORTED))


def _convert_seq(module, shape, prefix, out_prefix, renames):
    """The spec layers of module's leaves from per-example shape; fills
    renames (PyTorch state-dict name -> trainyard's, out_prefix + index)."""
    layers = []
    shape = list(shape)
    for qname, m in _walk(module, prefix):
        if isinstance(m, Residual):
            where = "%s%d" % (out_prefix, len(layers))
            body, out = _convert_seq(m.body, shape, qname + ".body", where + ".body.", renames)
            spec = {"type": "residual", "layers": body}
            if m.projection is not None:
                spec["projection"], _ = _convert_seq(m.projection, shape, qname + ".projection",
                                                     where + ".projection.", renames)
            new = [spec]
        else:
            new = _leaf_spec(qname, m, shape)
        for i, spec in enumerate(new):
            where = "%s%d" % (out_prefix, len(layers))
            # The last of a leaf's layers holds its tensors (a flatten may
            # come before a dense); a residual block's are renamed above.
            if spec["type"] != "residual" and i == len(new) - 1:
                for k in m.state_dict():
                    if not k.endswith("num_batches_tracked"):
                        renames["%s.%s" % (qname, k) if qname else k] = "%s.%s" % (where, k)
            try:
                _, shape = _layer(spec, shape, where)
            except (ValueError, KeyError, RuntimeError) as e:
                raise ConvertError("module %r (%s): %s" % (qname, _kind(m), e))
            layers.append(spec)
    return layers, shape


def _check_forward(module, spec, tensors, input_shape, samples=8, seed=0):
    """The largest |difference| between module's own forward() and the
    converted network on random inputs, both in eval mode; raises
    ConvertError when they differ or cannot run."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn([samples] + list(input_shape), generator=g)
    net, _ = build(spec, input_shape)
    load_state(net, tensors)
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            try:
                # On the module's device; compared on the CPU.
                dev = next((t.device for t in module.state_dict().values()),
                           torch.device("cpu"))
                want = module(x.to(dev)).cpu()
            except Exception as e:  # noqa: BLE001 - anything forward() raises
                raise ConvertError("the module's forward() fails on input (N, %s): %s"
                                   % (", ".join(map(str, input_shape)), e))
            got = net.eval()(x)
    finally:
        module.train(was_training)
    if not isinstance(want, torch.Tensor):
        raise ConvertError("the module's forward() returns a %s, not a tensor"
                           % type(want).__name__)
    want = want.reshape(len(x), -1)
    got = got.reshape(len(x), -1)
    if want.shape != got.shape:
        raise ConvertError(
            "the module's forward() gives %d values per example, the converted layers %d: "
            "forward() does more than run its modules in order" % (want.shape[1], got.shape[1]))
    diff = float((want - got).abs().max())
    scale = max(1.0, float(want.abs().max()))
    if not diff <= 1e-4 * scale:
        raise ConvertError(
            "the converted layers do not compute what the module's forward() does (max "
            "|difference| %.3g on %d random examples). Module walking sees only the modules, "
            "in the order they were registered: a function applied in forward() (F.relu, "
            "torch.sigmoid, F.max_pool2d), a skip connection, or modules run in another order "
            "are invisible to it. Use nn.ReLU() and the like as modules, registered in the order "
            "forward() runs them (or an nn.Sequential)" % (diff, samples))
    return diff


def from_module(module, input_shape, check=True):
    """Converts a plain PyTorch module (an nn.Sequential, or an nn.Module
    whose leaf modules, in registration order, are the layers forward()
    runs) into (spec, tensors, renames, max_diff): trainyard's {"layers":
    [...]}, the state dict under trainyard's names as numpy arrays, the map
    from PyTorch's names ("fc1.weight") to trainyard's ("0.weight"), and the
    largest difference between module(x) and the converted network on
    random inputs (None without check). Raises ConvertError naming the
    module that trainyard cannot hold, or when the outputs differ."""
    input_shape = [int(v) for v in input_shape]
    renames = {}
    layers, out = _convert_seq(module, input_shape, "", "", renames)
    if not layers:
        raise ConvertError("the module has no layers")
    state = {k: v for k, v in module.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    left = [k for k in state if k not in renames]
    if left:
        raise ConvertError("tensor %r belongs to no layer trainyard has (%s)" % (left[0], SUPPORTED))
    tensors = {renames[k]: state[k].detach().cpu().float().numpy().copy() for k in state}
    spec = {"layers": layers}
    diff = _check_forward(module, spec, tensors, input_shape) if check else None
    return spec, tensors, renames, diff


def save_module(path, module, input_shape, task, classes=None, num_outputs=None,
                preprocess=None, check=True):
    """from_module, written as a trainyard model file for `trainyard models
    import` (or POST /v1/models with no metadata part). num_outputs
    defaults to the module's output size. Returns from_module's result."""
    spec, tensors, renames, diff = from_module(module, input_shape, check)
    _, out = build(spec, input_shape)
    size = int(np.prod(out))
    if len(out) != 1:
        raise ConvertError("the module's output has shape %s per example; trainyard's "
                           "last layer gives a vector (add an nn.Flatten)" % out)
    if classes is not None and len(classes) != size:
        raise ConvertError("%d classes, but the module gives %d outputs" % (len(classes), size))
    if num_outputs is not None and num_outputs != size:
        raise ConvertError("num_outputs %d, but the module gives %d outputs" % (num_outputs, size))
    if classes is None:
        num_outputs = size
    st_write(path, tensors, model_metadata(spec, task, input_shape, classes, num_outputs,
                                           preprocess))
    return spec, tensors, renames, diff


def _load_any(path):
    """A state dict or module from a file: .safetensors (a state dict, read
    here), else torch.load on the CPU."""
    if path.endswith(".safetensors"):
        tensors, _ = st_read(path)
        return {k: torch.from_numpy(v) for k, v in tensors.items()}
    try:
        return torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - torch.load raises many kinds
        raise ConvertError("cannot load %s: %s" % (path, e))


def _module_from_args(a):
    """The module the convert command's arguments name."""
    import importlib.util
    cls_obj = None
    if a.module_file:
        d, base = os.path.split(os.path.abspath(a.module_file))
        name = os.path.splitext(base)[0]
        sys.path.insert(0, d)  # its own imports, and pickles that name it
        spec = importlib.util.spec_from_file_location(name, a.module_file)
        if spec is None:
            raise ConvertError("cannot import %s: not a Python file" % a.module_file)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        if a.cls:
            cls_obj = getattr(mod, a.cls, None)
            if cls_obj is None:
                raise ConvertError("%s defines no %r" % (a.module_file, a.cls))
    if a.saved:
        m = _load_any(a.saved)
        if not isinstance(m, nn.Module):
            raise ConvertError("%s holds a %s, not a torch.save'd module: give its class "
                               "(--module-file, --class) and pass it as --state-dict"
                               % (a.saved, type(m).__name__))
        return m
    if cls_obj is None:
        raise ConvertError("name the module: --module-file FILE --class NAME, or --saved "
                           "MODEL.pt (a torch.save'd module)")
    kwargs = json.loads(a.args) if a.args else {}
    module = cls_obj(**kwargs)
    if a.state_dict:
        sd = _load_any(a.state_dict)
        if isinstance(sd, nn.Module):
            sd = sd.state_dict()
        if isinstance(sd, dict) and not any(isinstance(v, torch.Tensor) for v in sd.values()):
            for key in ("state_dict", "model_state_dict", "model"):
                if isinstance(sd.get(key), dict):
                    sd = sd[key]
                    break
        try:
            module.load_state_dict(sd)
        except (RuntimeError, TypeError) as e:
            raise ConvertError("the state dict does not fit %s: %s" % (a.cls, e))
    return module


def _convert(a):
    module = _module_from_args(a)
    shape = [int(v) for v in a.input_shape.split(",")]
    classes = a.classes.split(",") if a.classes else None
    pre = json.loads(a.preprocess) if a.preprocess else None
    spec, tensors, renames, diff = save_module(a.out, module, shape, a.task, classes,
                                               a.num_outputs, pre, check=not a.no_check)
    print("wrote %s: %d layers, %d parameters" % (
        a.out, len(spec["layers"]), sum(int(np.prod(v.shape)) for v in tensors.values())))
    for old, new in renames.items():
        if old != new:
            print("  %s -> %s" % (old, new))
    if diff is not None:
        print("checked: the same outputs as the module's forward() on 8 random examples "
              "(max |difference| %.2g)" % diff)
    print("import it with: trainyard models import NAME %s" % a.out)


# ---- command line ----

def _main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("show", help="print the module and the metadata")
    p.add_argument("model")
    p = sub.add_parser("predict", help="predict JSON inputs with a model file")
    p.add_argument("model")
    p.add_argument("inputs", help="a JSON file: an array of examples (raw units)")
    p = sub.add_parser("init", help="save a freshly initialised torch model")
    p.add_argument("spec", help="a JSON file: {\"layers\": [...]}")
    p.add_argument("out")
    p.add_argument("--task", choices=["classification", "regression", "language_modeling"],
                   required=True)
    p.add_argument("--input-shape", required=True,
                   help="e.g. 1,28,28 or 4; a language model: its context_length")
    p.add_argument("--classes", help="comma-separated class labels")
    p.add_argument("--num-outputs", type=int, help="a language model: the vocabulary size")
    p.add_argument("--tokenizer", help='a language model\'s (or text classifier\'s) '
                   'tokenizer: "byte" (a language model\'s default) or its JSON description')
    p.add_argument("--preprocess", help='JSON, e.g. {"kind":"scale","factor":0.00392}')
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser(
        "convert", help="convert a plain PyTorch module (and its state dict) to a "
        "trainyard model file",
        description="Walks the module's leaf modules in registration order, writes "
        "the trainyard spec they make and the state dict under trainyard's names "
        "(fc1.weight -> 0.weight), and checks the result against the module's own "
        "forward() on random inputs. Supported: " + SUPPORTED + ".")
    p.add_argument("out", help="the trainyard model file to write (.safetensors)")
    p.add_argument("--module-file", help="a Python file that defines the module's class")
    p.add_argument("--class", dest="cls", help="the class in --module-file")
    p.add_argument("--args", help="JSON object of keyword arguments for the class")
    p.add_argument("--state-dict", help="the weights: a torch.save'd state dict (.pt) or a "
                   "safetensors file with PyTorch's names; without it, the class's own "
                   "initial weights")
    p.add_argument("--saved", help="a torch.save'd module (an nn.Sequential, or a class "
                   "--module-file defines) instead of --class")
    p.add_argument("--task", choices=["classification", "regression"], required=True)
    p.add_argument("--input-shape", required=True, help="one example's shape, e.g. 1,28,28 or 4")
    p.add_argument("--classes", help="comma-separated class labels, in output order")
    p.add_argument("--num-outputs", type=int, help="default: the module's output size")
    p.add_argument("--preprocess", help='JSON, e.g. {"kind":"scale","factor":0.00392}')
    p.add_argument("--no-check", action="store_true",
                   help="skip the comparison with the module's forward()")
    a = ap.parse_args(argv)
    if a.cmd == "convert":
        try:
            _convert(a)
        except ConvertError as e:
            print("trainyard_torch.py convert: %s" % e, file=sys.stderr)
            return 1
        return 0
    if a.cmd == "show":
        model, meta = load_model(a.model)
        print(model)
        print(json.dumps(meta, indent=1))
    elif a.cmd == "predict":
        model, meta = load_model(a.model)
        with open(a.inputs) as f:
            x = json.load(f)  # prompts and texts' ids may differ in length
        if meta["task"] != "language_modeling" and not _takes_ids(meta):
            x = np.asarray(x, dtype=np.float32)
        print(json.dumps({"outputs": predict(model, meta, x).tolist()}))
    else:
        torch.manual_seed(a.seed)
        with open(a.spec) as f:
            spec = json.load(f)
        shape = [int(v) for v in a.input_shape.split(",")]
        lm = a.task == "language_modeling"
        if lm and not a.num_outputs:
            ap.error("a language model needs --num-outputs (its vocabulary size)")
        # num_outputs is a language model's vocabulary; a text classifier's
        # embedding names its own (vocab_size).
        model, out = build(spec, shape, a.num_outputs if lm else None)
        classes = a.classes.split(",") if a.classes else None
        pre = json.loads(a.preprocess) if a.preprocess else None
        tok = None
        if lm or a.tokenizer:  # a text classifier's is optional
            tok = "byte" if not a.tokenizer or a.tokenizer == "byte" else json.loads(a.tokenizer)
        save_model(a.out, model, spec, a.task, shape, classes, a.num_outputs, pre,
                   tokenizer=tok)
        print("wrote %s: %d parameters, output %s" % (
            a.out, sum(p.numel() for p in model.parameters()), out))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
