"""The benchmark model as the baselines load it: a folder with
weights.safetensors (a PyTorch nn.Sequential state dict, F32, the file
POST /v1/models imports) and metadata.json (the import's metadata part:
spec, task, input_shape, classes, preprocess).

numpy only, so that the http.server baseline does not pay for importing
torch. The forward pass handles the layers of the README's MLP (flatten,
dense, relu); anything else is refused, not guessed at.
"""
import json
import os
import struct

import numpy as np


def read_safetensors(path):
    """name -> float32 array of a safetensors file (F32 tensors only)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise ValueError("tensor %s: dtype %s, only F32 is read" % (name, t["dtype"]))
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(t["shape"]).astype(np.float32)
    return out


def load(model_dir):
    """(metadata dict, tensors) of a model folder."""
    with open(os.path.join(model_dir, "metadata.json")) as f:
        meta = json.load(f)
    return meta, read_safetensors(os.path.join(model_dir, "weights.safetensors"))


def input_factor(meta):
    """The preprocessing as one float32 factor (scale or none)."""
    pre = meta.get("preprocess") or {"kind": "none"}
    if pre["kind"] == "scale":
        return np.float32(pre["factor"])
    if pre["kind"] == "none":
        return np.float32(1)
    raise ValueError("preprocess %r is not handled here" % pre["kind"])


class NumpyMLP:
    """The spec's forward pass in numpy float32, softmax at the end for a
    classification model: what /v1/models/{id}/predict's "outputs" hold."""

    def __init__(self, meta, tensors):
        self.factor = input_factor(meta)
        self.classes = meta.get("classes")
        self.softmax = meta["task"] == "classification"
        self.ops = []
        for i, layer in enumerate(meta["spec"]["layers"]):
            t = layer["type"]
            if t == "flatten":
                continue
            if t == "dense":
                w = np.ascontiguousarray(tensors["%d.weight" % i].T)  # (in, out)
                self.ops.append(("dense", w, tensors.get("%d.bias" % i)))
            elif t == "relu":
                self.ops.append(("relu", None, None))
            else:
                raise ValueError("layer %d: %s is not handled here" % (i, t))

    def __call__(self, x):
        """x: (N, features) raw inputs, float32 -> (N, outputs)."""
        y = x.reshape(len(x), -1) * self.factor
        for op, w, b in self.ops:
            if op == "dense":
                y = y @ w
                if b is not None:
                    y += b
            else:
                np.maximum(y, 0, out=y)
        if self.softmax:
            y = np.exp(y - y.max(axis=1, keepdims=True))
            y /= y.sum(axis=1, keepdims=True)
        return y

    def labels(self, y):
        """The predicted labels of outputs y, as the server's "predictions"."""
        idx = y.argmax(axis=1)
        return [self.classes[i] for i in idx] if self.classes else idx.tolist()
