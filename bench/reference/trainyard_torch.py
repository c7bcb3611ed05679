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
"""
import argparse
import json
import math
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

    def __init__(self, body, projection=None):
        super().__init__()
        self.body = body
        if projection is not None:
            self.projection = projection
        else:
            self.projection = None

    def forward(self, x):
        return self.body(x) + (self.projection(x) if self.projection is not None else x)


def _conv_out(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _layer(spec, shape, where):
    """The torch module for one spec layer on per-example input `shape`,
    and its output shape."""
    t = spec["type"]
    if t == "flatten":
        return nn.Flatten(), [int(np.prod(shape))]
    if t == "dense":
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
        eps, mom = spec.get("eps", 1e-5), spec.get("momentum", 0.1)
        cls = nn.BatchNorm1d if len(shape) == 1 else nn.BatchNorm2d
        return cls(shape[0], eps=eps, momentum=mom), list(shape)
    if t == "layernorm":
        return nn.LayerNorm(list(shape), eps=spec.get("eps", 1e-5)), list(shape)
    if t == "relu":
        return nn.ReLU(), list(shape)
    if t == "leaky_relu":
        return nn.LeakyReLU(spec.get("negative_slope", 0.01)), list(shape)
    if t == "gelu":
        return nn.GELU(), list(shape)
    if t == "tanh":
        return nn.Tanh(), list(shape)
    if t == "sigmoid":
        return nn.Sigmoid(), list(shape)
    if t == "softmax":
        return nn.Softmax(dim=1), list(shape)
    if t == "dropout":
        return nn.Dropout(spec.get("rate", 0.5)), list(shape)
    if t == "residual":
        body, out = _sequence(spec["layers"], shape, where + ".layers")
        proj = None
        if spec.get("projection"):
            proj, pout = _sequence(spec["projection"], shape, where + ".projection")
            if pout != out:
                raise ValueError("%s: body gives %s, projection %s" % (where, out, pout))
        elif out != list(shape):
            raise ValueError("%s: body gives %s, input is %s" % (where, out, shape))
        return Residual(body, proj), out
    raise ValueError("%s: unknown layer type %r" % (where, t))


def _sequence(layers, shape, where):
    mods = []
    shape = list(shape)
    for i, spec in enumerate(layers):
        m, shape = _layer(spec, shape, "%s[%d]" % (where, i))
        mods.append(m)
    return nn.Sequential(*mods), shape


def build(spec, input_shape):
    """The nn.Sequential for a spec ({"layers": [...]}, normalized or not) on
    per-example input_shape ([F] or [C, H, W]); returns (module, out_shape)."""
    if isinstance(spec, str):
        spec = json.loads(spec)
    return _sequence(spec["layers"], list(input_shape), "model.layers")


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
    }


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
    model, _ = build(meta["spec"], meta["input_shape"])
    load_state(model, tensors)
    model.eval()
    return model, meta


def preprocess(meta, x):
    """Applies the model's stored preprocessing to raw rows x (N, features)
    in float32, exactly as the server does ((x - mean) / std per feature;
    x * factor)."""
    x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    p = meta["preprocess"]
    kind = p.get("kind", "none")
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
    units), as numpy."""
    xp = preprocess(meta, x).reshape([len(x)] + list(meta["input_shape"]))
    with torch.no_grad():
        y = model.eval()(torch.from_numpy(xp))
        if meta["task"] == "classification":
            y = torch.softmax(y, dim=1)
    y = y.numpy()
    return unscale(meta, y) if meta["task"] == "regression" else y


def model_metadata(spec, task, input_shape, classes=None, num_outputs=None,
                   preprocess=None, extra=None):
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
               num_outputs=None, preprocess=None, extra=None):
    """Writes model (built from spec) as a trainyard model file, ready for
    POST /v1/models."""
    meta = model_metadata(spec, task, input_shape, classes, num_outputs,
                          preprocess, extra)
    st_write(path, state_tensors(model), meta)


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
    p.add_argument("--task", choices=["classification", "regression"], required=True)
    p.add_argument("--input-shape", required=True, help="e.g. 1,28,28 or 4")
    p.add_argument("--classes", help="comma-separated class labels")
    p.add_argument("--num-outputs", type=int)
    p.add_argument("--preprocess", help='JSON, e.g. {"kind":"scale","factor":0.00392}')
    p.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.cmd == "show":
        model, meta = load_model(a.model)
        print(model)
        print(json.dumps(meta, indent=1))
    elif a.cmd == "predict":
        model, meta = load_model(a.model)
        with open(a.inputs) as f:
            x = np.asarray(json.load(f), dtype=np.float32)
        print(json.dumps({"outputs": predict(model, meta, x).tolist()}))
    else:
        torch.manual_seed(a.seed)
        with open(a.spec) as f:
            spec = json.load(f)
        shape = [int(v) for v in a.input_shape.split(",")]
        model, out = build(spec, shape)
        classes = a.classes.split(",") if a.classes else None
        pre = json.loads(a.preprocess) if a.preprocess else None
        save_model(a.out, model, spec, a.task, shape, classes, a.num_outputs, pre)
        print("wrote %s: %d parameters, output %s" % (
            a.out, sum(p.numel() for p in model.parameters()), out))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
