#!/usr/bin/python3
"""Writes the PyTorch reference files of the parity test (test_parity.c).

    make_reference.py OUT_DIR [CASE ...]      (all cases when none is named)

For each case, OUT_DIR/<case>.safetensors holds, in its metadata, the spec
("spec"), "task", "input_shape", "num_outputs" and the
"hyperparameters" (the job request's object, optimizer and loss:
train_hparams_parse reads it),
and as tensors:
  param.<name>          the initial state dict (trainyard's names; buffers too)
  input                 the batch (N, *input_shape), already preprocessed
  labels (I64, N) | targets (F32, N x outputs)
  output                the network's raw output (logits), training mode
  loss                  [1], the batch-mean loss
  grad.<name>           every trainable parameter's gradient
  forward.<name>        batchnorm running statistics after that forward
  grad2.<name>          the gradients the second step used
  step1.<name>, step2.<name>
                        the trainable parameters after one optimizer step,
                        and after a second one on the same batch (gradients
                        recomputed), so momentum and Adam's state count.
Batchnorm runs in training mode (batch statistics), as in a training step.
Everything is float32, computed by torch's CPU kernels.
"""
import json
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


def conv(f, k, **kw):
    return dict(type="conv2d", filters=f, kernel_size=k, **kw)


def dense(u, **kw):
    return dict(type="dense", units=u, **kw)


def L(t, **kw):
    return dict(type=t, **kw)


MLP = {"layers": [L("flatten"), dense(64), L("relu"), dense(10)]}
CNN = {"layers": [conv(32, 5, padding="same"), L("relu"), L("maxpool2d", pool_size=2),
                  conv(64, 5, padding="same"), L("relu"), L("maxpool2d", pool_size=2),
                  L("flatten"), dense(128), L("relu"), dense(10)]}
# Convs that feed a batchnorm have no bias, as in ResNets: the batchnorm
# cancels it, its true gradient is 0 and both sides would compare rounding.
RESNET = {"layers": [
    conv(8, 3, padding="same", bias=False), L("batchnorm"), L("relu"),
    L("residual", layers=[conv(8, 3, padding="same", bias=False), L("batchnorm"),
                          L("relu"),
                          conv(8, 3, padding="same", bias=False), L("batchnorm")]),
    L("relu"),
    L("residual", layers=[conv(16, 3, stride=2, padding=1)],
      projection=[conv(16, 1, stride=2, bias=False), L("batchnorm")]),
    L("global_avgpool"), dense(10)]}
# Layer coverage: each net puts a few layer kinds between parameters so
# their backward passes are exercised too.
POOLS = {"layers": [conv(6, 3, padding=1), L("avgpool2d", pool_size=2),
                    L("leaky_relu", negative_slope=0.1),
                    conv(6, 3, stride=2, padding="valid"), L("maxpool2d", pool_size=[2, 1], stride=1, padding=[1, 0]),
                    L("flatten"), dense(10)]}
DILATED = {"layers": [conv(8, 3, dilation=2, padding="same"), L("tanh"),
                      conv(8, 3, groups=4, padding=1, bias=False), L("sigmoid"),
                      conv(4, [3, 1], stride=[2, 1]), L("gelu"),
                      L("flatten"), dense(10)]}
NORMS = {"layers": [L("flatten"), dense(32), L("layernorm"), L("gelu"),
                    dense(24, bias=False), L("batchnorm", momentum=0.2, eps=1e-3),
                    L("leaky_relu"),
                    dense(16), L("tanh"), dense(10)]}
IMAGE_NORMS = {"layers": [conv(4, 3, padding="same"), L("layernorm", eps=1e-4),
                          L("sigmoid"), L("global_avgpool"), dense(10)]}
REGRESSION = {"layers": [dense(32), L("tanh"), dense(3)]}
# Binary cross-entropy: two classes, one logit.
MLP_BINARY = {"layers": [L("flatten"), dense(32), L("relu"), dense(1)]}

SGD = {"optimizer": "sgd", "learning_rate": 0.1}
SGD_NESTEROV = {"optimizer": "sgd", "learning_rate": 0.05, "momentum": 0.9,
                "nesterov": True, "weight_decay": 0.001}
SGD_MOMENTUM = {"optimizer": "sgd", "learning_rate": 0.05, "momentum": 0.9}
ADAM = {"optimizer": "adam", "learning_rate": 0.001}
ADAM_WD = {"optimizer": "adam", "learning_rate": 0.001, "weight_decay": 0.01}
ADAMW = {"optimizer": "adamw", "learning_rate": 0.001, "weight_decay": 0.01}

# name: (spec, input shape, task, outputs, batch, hyperparameters)
CASES = {
    "mlp_sgd": (MLP, [1, 8, 8], "classification", 10, 16, SGD),
    "mlp_adam": (MLP, [1, 8, 8], "classification", 10, 16, ADAM),
    "mlp_adam_wd": (MLP, [1, 8, 8], "classification", 10, 16, ADAM_WD),
    "mlp_sgd_momentum": (MLP, [1, 8, 8], "classification", 10, 16, SGD_MOMENTUM),
    "mlp_sgd_nesterov": (MLP, [1, 8, 8], "classification", 10, 16, SGD_NESTEROV),
    "mlp_adamw": (MLP, [1, 8, 8], "classification", 10, 16, ADAMW),
    "mlp_regression_sgd": (REGRESSION, [6], "regression", 3, 12, SGD),
    "loss_label_smoothing": (MLP, [1, 8, 8], "classification", 10, 16,
                             dict(ADAM, loss="cross_entropy", label_smoothing=0.1)),
    "loss_binary_xent": (MLP_BINARY, [1, 8, 8], "classification", 2, 16,
                         dict(SGD, loss="binary_cross_entropy")),
    # delta 0.5 with unit-normal residuals: both branches of Huber occur.
    "loss_huber": (REGRESSION, [6], "regression", 3, 12,
                   dict(SGD, loss="huber", huber_delta=0.5)),
    "cnn_adam": (CNN, [1, 28, 28], "classification", 10, 4, ADAM),
    "resnet_sgd": (RESNET, [3, 8, 8], "classification", 10, 6, SGD_MOMENTUM),
    "layers_pools": (POOLS, [2, 9, 9], "classification", 10, 5, SGD),
    "layers_dilated": (DILATED, [4, 10, 8], "classification", 10, 5, ADAM),
    "layers_norms": (NORMS, [3, 4], "classification", 10, 8, ADAM_WD),
    "layers_image_norms": (IMAGE_NORMS, [2, 6, 6], "classification", 10, 4, SGD),
}


def optimizer(hp, params):
    kind = hp["optimizer"]
    lr, wd = hp["learning_rate"], hp.get("weight_decay", 0.0)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=hp.get("momentum", 0.0),
                               nesterov=hp.get("nesterov", False), weight_decay=wd)
    betas = (hp.get("beta1", 0.9), hp.get("beta2", 0.999))
    eps = hp.get("epsilon", 1e-8)
    cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    # AdamW's default weight decay is 0.01, Adam's 0; pass it always.
    return cls(params, lr=lr, betas=betas, eps=eps, weight_decay=wd)


def make_case(name, out_dir, seed):
    spec, shape, task, outputs, n, hp = CASES[name]
    torch.manual_seed(seed)
    model, out_shape = tt.build(spec, shape)
    loss_kind = hp.get("loss")
    assert out_shape == [1 if loss_kind == "binary_cross_entropy" else outputs], \
        (name, out_shape)
    # Non-trivial batchnorm affine parameters and running statistics, so a
    # kernel that ignores one of them cannot pass.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.8, 1.2)
    params0 = tt.state_tensors(model)
    x = torch.randn([n] + shape)
    if task == "classification":
        y = torch.randint(0, outputs, (n,))
        if loss_kind == "binary_cross_entropy":
            bce = torch.nn.BCEWithLogitsLoss()

            def loss_fn(out, y):
                return bce(out.squeeze(1), y.float())
        else:
            loss_fn = torch.nn.CrossEntropyLoss(
                label_smoothing=hp.get("label_smoothing", 0.0))
    else:
        y = torch.randn(n, outputs)
        if loss_kind == "huber":
            loss_fn = torch.nn.HuberLoss(delta=hp.get("huber_delta", 1.0))
        else:
            loss_fn = torch.nn.MSELoss()
    model.train()
    trainable = dict(model.named_parameters())
    opt = optimizer(hp, list(trainable.values()))

    out = model(x)
    loss = loss_fn(out, y)
    opt.zero_grad()
    loss.backward()
    tensors = {"param." + k: v for k, v in params0.items()}
    tensors["input"] = x.numpy()
    if task == "classification":
        tensors["labels"] = y.numpy().astype(np.int64)
    else:
        tensors["targets"] = y.numpy()
    tensors["output"] = out.detach().numpy()
    tensors["loss"] = np.array([loss.item()], np.float32)
    for k, p in trainable.items():
        tensors["grad." + k] = p.grad.numpy().copy()
    for k, v in tt.state_tensors(model).items():
        if k not in trainable:
            tensors["forward." + k] = v.copy()
    for step in (1, 2):
        if step == 2:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            for k, p in trainable.items():
                tensors["grad2." + k] = p.grad.numpy().copy()
        opt.step()
        for k, p in trainable.items():
            tensors["step%d.%s" % (step, k)] = p.detach().numpy().copy()
    meta = {
        "case": name,
        "spec": json.dumps(spec),
        "task": task,
        "input_shape": json.dumps(shape),
        "num_outputs": str(outputs),
        "hyperparameters": json.dumps(hp),
        "torch": torch.__version__,
    }
    tt.st_write(os.path.join(out_dir, name + ".safetensors"), tensors, meta)


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 64
    out_dir, names = argv[0], argv[1:] or list(CASES)
    os.makedirs(out_dir, exist_ok=True)
    for i, name in enumerate(names):
        if name not in CASES:
            print("unknown case %r; cases: %s" % (name, ", ".join(CASES)), file=sys.stderr)
            return 64
        make_case(name, out_dir, seed=1000 + i)
    print("wrote %d reference files to %s" % (len(names), out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
