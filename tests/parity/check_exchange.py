#!/usr/bin/python3
"""The engine -> torch half of the weight exchange (issue 31), after
test_parity ran a language-model or text-classifier case:

    check_exchange.py REF_DIR CASE ...

test_parity wrote REF_DIR/<case>.engine.safetensors, the engine's state
block under the engine's tensor names with the engine's model metadata,
and REF_DIR/<case>.imported.safetensors, what `nn_model_import` stored of
torch's model file. Each must load into the torch module the spec builds
(trainyard_torch.load_model: every tensor named, shaped and nothing else),
hold torch's initial weights (param.* of <case>.safetensors) bit for bit,
and give torch's logits ("output") bit for bit on the case's input: the same
torch code on the same bits.
"""
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import numpy as np
    import torch
except ImportError as e:
    sys.exit("the parity tests need PyTorch and numpy for %s (%s): install "
             "python3-torch and python3-numpy (scripts/setup.sh test does)"
             % (sys.executable, e))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tools"))
import trainyard_torch as tt  # noqa: E402,I100

torch.set_num_threads(1)


def check_file(path, ref, task):
    """Problems of the model file at path against the reference tensors
    (of a case of task `task`)."""
    try:
        model, meta = tt.load_model(path)
    except (ValueError, KeyError, RuntimeError) as e:
        return ["%s does not load into torch: %s" % (os.path.basename(path), e)]
    bad = []
    want = {k[len("param."):]: v for k, v in ref.items() if k.startswith("param.")}
    got = tt.state_tensors(model)
    if sorted(got) != sorted(want):
        bad.append("state dict names %s, torch's %s" % (sorted(got), sorted(want)))
    for k, v in want.items():
        g = got.get(k)
        if g is None or g.shape != v.shape or g.tobytes() != v.tobytes():
            bad.append("tensor %s is not torch's bit for bit" % k)
    model.train()  # as the reference's forward (no dropout in these cases)
    out = model(torch.from_numpy(ref["input"])).detach().numpy()
    if out.shape != ref["output"].shape or out.tobytes() != ref["output"].tobytes():
        bad.append("logits differ from torch's (max |diff| %.3g)"
                   % float(np.abs(out - ref["output"]).max()))
    if meta["task"] != task:
        bad.append("task %r, the case's is %r" % (meta["task"], task))
    return bad


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 64
    failed = 0
    for case in argv[1:]:
        ref, ref_meta = tt.st_read(os.path.join(argv[0], case + ".safetensors"))
        for kind in ("engine", "imported"):
            path = os.path.join(argv[0], "%s.%s.safetensors" % (case, kind))
            bad = check_file(path, ref, ref_meta["task"]) if os.path.exists(path) else [
                "%s is missing: test_parity %s did not write it" % (path, case)]
            for b in bad:
                print("FAIL %s (%s): %s" % (case, kind, b))
            if not bad:
                print("ok   %s (%s): names, shapes, bits and logits are torch's" % (case, kind))
            failed += bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
