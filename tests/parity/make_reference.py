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

Language-model cases (task "language_modeling", issue 31): input_shape is
[T], num_outputs the vocabulary V; "input" (N, T) holds token ids as
float32 values (the engine's input), "targets" (N, T) F32 the next-token
ids (-1: ignored, as F.cross_entropy's ignore_index), "output" the logits
(N, T, V) and "loss" the mean cross-entropy over the counted (example,
position) pairs. Besides the two steps above, they hold llm.c's check of
ten AdamW steps, each side running them on its own from param.*:
  traj.input, traj.targets   (STEPS, N, T): one batch per step
  traj.loss                  (STEPS): the loss of each step's forward,
                             before its update
  traj.final.<name>          the parameters after the last step
and, for the weight exchange, OUT_DIR/<case>.model.safetensors: the
initial state dict written by trainyard_torch.save_model as a trainyard
model file (what `trainyard models import` takes).

Text-classifier cases (task "classification" on token ids, issue 31's
second half): input_shape [T], "input" (N, T) ids padded with -1 after the
text (each batch has a sequence of length 0, one of full length T and
partial ones), "labels" (I64, N), "output" the logits (N, classes), "loss"
the mean softmax cross-entropy; the same checks as a language model's
(the ten steps' batches as traj.input and traj.labels (I64, STEPS x N)).
The classifier's spec names vocab_size in its embedding. With
"eval_dropout_spec" (the same network with dropout p > 0 in its blocks)
the case also holds "eval.output": torch's eval-mode logits of the
initial weights, which the dropout-0 and the dropout-p networks must give
alike. Dropout in training cannot be compared value for value (the engine
and torch draw different masks from different generators); the engine's
own tests check its dropout statistics and gradient (test_nn_textcls).
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

# Language models (issue 31): GPT-2's layout at toy sizes, and the sequence
# layers on their own. V 65 is tiny Shakespeare's character vocabulary.
GPT_TINY = {"layers": [L("embedding", dim=32), L("positional_embedding"),
                       L("transformer_block", heads=4), L("transformer_block", heads=4),
                       L("layernorm"), L("lm_head")]}
GPT_UNTIED = {"layers": [L("embedding", dim=24), L("positional_embedding"),
                         L("transformer_block", heads=3, mlp_ratio=2),
                         L("layernorm", eps=1e-5), L("lm_head", tie_embedding=False)]}
# The dashboard's "GPT (character)" template at its size (nanoGPT's
# Shakespeare-char baby model: 4 blocks of 4 heads, 128 channels, context
# 64), where rounding has the most room to grow.
GPT_TEMPLATE = {"layers": [L("embedding", dim=128), L("positional_embedding")]
                + [L("transformer_block", heads=4)] * 4 + [L("layernorm"), L("lm_head")]}
LM_ATTENTION = {"layers": [L("embedding", dim=16), L("positional_embedding"),
                           L("attention", heads=2), L("layernorm"), L("lm_head")]}
# dense, gelu and layernorm per position; attention without biases.
LM_SEQ_LAYERS = {"layers": [L("embedding", dim=16), L("attention", heads=4, bias=False),
                            dense(32), L("gelu", approximate="tanh"), dense(16, bias=False),
                            L("layernorm", eps=1e-4), L("gelu"), L("relu"),
                            L("lm_head", tie_embedding=False)]}
LM_BIDIRECTIONAL = {"layers": [L("embedding", dim=16), L("positional_embedding"),
                               L("attention", heads=2, causal=False),
                               L("transformer_block", heads=2, causal=False),
                               L("layernorm"), L("lm_head")]}
# Text classifiers (issue 31's second half): bidirectional blocks over
# padded token ids, pooled per sequence, then a class layer. V 40, T 12.
TEXT_VOCAB = 40
TEXT_CLS = {"layers": [L("embedding", dim=16, vocab_size=TEXT_VOCAB), L("positional_embedding"),
                       L("transformer_block", heads=2, causal=False),
                       L("transformer_block", heads=2, causal=False),
                       L("layernorm"), L("sequence_pool", mode="mean"), dense(4)]}
# The other pool modes, and the attention layer on its own, not causal.
TEXT_CLS_FIRST = {"layers": [L("embedding", dim=12, vocab_size=TEXT_VOCAB),
                             L("positional_embedding"),
                             L("attention", heads=3, causal=False), L("layernorm"),
                             L("sequence_pool", mode="first"), dense(3)]}
TEXT_CLS_LAST = {"layers": [L("embedding", dim=12, vocab_size=TEXT_VOCAB),
                            L("positional_embedding"),
                            L("transformer_block", heads=2, mlp_ratio=2, causal=False),
                            L("sequence_pool", mode="last"), dense(3)]}


def with_dropout(spec, p):
    """spec with dropout p in every attention and transformer_block."""
    return {"layers": [dict(l, dropout=p) if l["type"] in ("attention", "transformer_block")
                       else l for l in spec["layers"]]}


ADAMW_GPT = {"optimizer": "adamw", "learning_rate": 0.001, "weight_decay": 0.1,
             "beta1": 0.9, "beta2": 0.95}
TRAJ_STEPS = 10

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
    "gpt_tiny": (GPT_TINY, [16], "language_modeling", 65, 4, ADAMW_GPT),
    "gpt_untied": (GPT_UNTIED, [12], "language_modeling", 50, 3, ADAMW_GPT),
    "gpt_template": (GPT_TEMPLATE, [64], "language_modeling", 65, 4, ADAMW_GPT),
    "lm_attention": (LM_ATTENTION, [8], "language_modeling", 20, 5, ADAMW_GPT),
    "lm_seq_layers": (LM_SEQ_LAYERS, [10], "language_modeling", 30, 3, ADAM),
    # Attention without the causal mask (legal, if a poor language model).
    "lm_bidirectional": (LM_BIDIRECTIONAL, [8], "language_modeling", 20, 3, ADAMW_GPT),
    "text_classifier": (TEXT_CLS, [12], "classification", 4, 6, ADAMW_GPT),
    "text_cls_first": (TEXT_CLS_FIRST, [10], "classification", 3, 5, ADAMW_GPT),
    "text_cls_last": (TEXT_CLS_LAST, [10], "classification", 3, 5, ADAMW_GPT),
}
# Cases whose eval-mode output is checked with dropout p > 0 too.
EVAL_DROPOUT = {"text_classifier": 0.1}
# Cases whose targets have ignored (-1) positions.
IGNORE_CASES = {"gpt_untied"}


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


def lm_batches(count, n, t, vocab, gen, ignore=False):
    """count batches of n windows of t tokens from one random token stream
    (as LM training draws them): inputs and next-token targets, float32
    (count, n, t). With ignore, each batch's first window stops counting
    after its first half (targets -1), as padding would."""
    # A learnable stream (a random phrase of 37 tokens, repeated), so that
    # ten steps lower the loss visibly and an update that is off shows.
    phrase = torch.randint(0, vocab, (37,), generator=gen)
    stream = phrase.repeat(4096 // 37 + 1)
    starts = torch.randint(0, len(stream) - t - 1, (count, n), generator=gen)
    idx = starts[..., None] + torch.arange(t)
    x, y = stream[idx].float(), stream[idx + 1].float()
    if ignore:
        y[:, 0, t // 2:] = -1
    return x, y


def check_causal(model, spec, x, vocab):
    """The reference's own sanity: in a causal model, changing the last
    token leaves every earlier position's logits bit for bit the same (the
    mask is applied); with causal false, they change."""
    causal = all(l.get("causal", True) for l in spec["layers"])
    x2 = x.clone()
    x2[:, -1] = (x2[:, -1] + 1) % vocab
    with torch.no_grad():
        a, b = model(x)[:, :-1], model(x2)[:, :-1]
    assert torch.equal(a, b) == causal, "the torch model's causal mask is off"


def text_batches(count, n, t, vocab, classes, gen):
    """count batches of n texts of token ids, padded with -1 after the
    text to t: (count, n, t) float32, and their labels (count, n) int64.
    Each batch has a text of length 0 and one of length t; the others are
    1 to t - 1 long. The label is the text's first id modulo the classes
    (0 for the empty one), learnable in ten steps."""
    x = torch.randint(0, vocab, (count, n, t), generator=gen).float()
    lens = torch.randint(1, t, (count, n), generator=gen)
    lens[:, 0], lens[:, 1] = 0, t
    x[torch.arange(t)[None, None, :] >= lens[..., None]] = -1.0
    y = torch.where(lens > 0, x[..., 0].clamp(min=0).long() % classes, torch.zeros_like(lens))
    return x, y


def check_padding(model, x, name):
    """The reference's own sanity: each text's logits are what it gives
    unpadded, alone (within rounding), and ids after the first -1 change
    nothing (they are padding too, as the engine's seq_lens reads them)."""
    lens = tt.seq_lens(x)
    with torch.no_grad():
        full = model(x)
        for i, n in enumerate(lens.tolist()):
            if n:
                alone = model(x[i:i + 1, :n])[0]
                assert torch.allclose(alone, full[i], atol=1e-5, rtol=0), (name, i)
        x2 = x.clone()
        x2[torch.arange(x.shape[1])[None, :] > lens[:, None]] = 3.0
        assert torch.equal(tt.seq_lens(x2), lens) and not torch.equal(x2, x)
        assert torch.equal(model(x2), full), name


def make_lm_case(name, out_dir, seed):
    """A language-model or text-classifier case: see the module's
    docstring."""
    spec, shape, task, vocab, n, hp = CASES[name]
    lm = task == "language_modeling"
    t = shape[0]
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model, out_shape = tt.build(spec, shape, vocab if lm else None)
    assert out_shape == ([t, vocab] if lm else [vocab]), (name, out_shape)
    if lm:
        def batches(count):
            return lm_batches(count, n, t, vocab, gen, name in IGNORE_CASES)
        loss_fn = tt.lm_loss
    else:
        def batches(count):
            return text_batches(count, n, t, TEXT_VOCAB, vocab, gen)
        loss_fn = torch.nn.CrossEntropyLoss()
    # LayerNorms away from 1 and 0, biases away from 0, so a kernel that
    # drops one cannot pass.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
        for k, p in model.named_parameters():
            if k.endswith("bias"):
                p.uniform_(-0.1, 0.1)
    params0 = tt.state_tensors(model)
    trainable = dict(model.named_parameters())
    assert set(trainable) == set(params0), "an LM case has no buffers"
    x, y = batches(1)
    x, y = x[0], y[0]
    if lm:
        check_causal(model, spec, x, vocab)
    else:
        check_padding(model, x, name)
    tensors = {"param." + k: v for k, v in params0.items()}
    meta_extra = {}
    if name in EVAL_DROPOUT:
        # Eval mode: dropout is off, so p > 0 gives the dropout-0 logits
        # bit for bit (the same modules; torch's Dropout is the identity).
        dspec = with_dropout(spec, EVAL_DROPOUT[name])
        dmodel, _ = tt.build(dspec, shape)
        tt.load_state(dmodel, params0)
        with torch.no_grad():
            want = model.eval()(x)
            assert torch.equal(dmodel.eval()(x), want), name
            dmodel.train()
            assert not torch.equal(dmodel(x), want), "torch's dropout is off in training"
        tensors["eval.output"] = want.numpy()
        meta_extra["eval_dropout_spec"] = json.dumps(dspec)
    model.train()
    opt = optimizer(hp, list(trainable.values()))
    out = model(x)
    loss = loss_fn(out, y)
    opt.zero_grad()
    loss.backward()
    tensors.update(input=x.numpy(), output=out.detach().numpy(),
                   loss=np.array([loss.item()], np.float32))
    if lm:
        tensors["targets"] = y.numpy()
    else:
        tensors["labels"] = y.numpy().astype(np.int64)
    for k, p in trainable.items():
        tensors["grad." + k] = p.grad.numpy().copy()
    for step in (1, 2):
        if step == 2:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            for k, p in trainable.items():
                tensors["grad2." + k] = p.grad.numpy().copy()
        opt.step()
        for k, p in trainable.items():
            tensors["step%d.%s" % (step, k)] = p.detach().numpy().copy()

    # Ten steps on ten batches from the same start, a fresh optimizer.
    tt.load_state(model, params0)
    opt = optimizer(hp, list(trainable.values()))
    tx, ty = batches(TRAJ_STEPS)
    losses = []
    for i in range(TRAJ_STEPS):
        opt.zero_grad()
        step_loss = loss_fn(model(tx[i]), ty[i])
        step_loss.backward()
        opt.step()
        losses.append(step_loss.item())
    tensors.update({"traj.input": tx.numpy(), "traj.loss": np.array(losses, np.float32)})
    if lm:
        tensors["traj.targets"] = ty.numpy()
    else:
        tensors["traj.labels"] = ty.numpy().astype(np.int64)
    for k, p in trainable.items():
        tensors["traj.final." + k] = p.detach().numpy().copy()
    meta = {
        "case": name,
        "spec": json.dumps(spec),
        "task": task,
        "input_shape": json.dumps(shape),
        "num_outputs": str(vocab),
        "hyperparameters": json.dumps(hp),
        "traj_steps": str(TRAJ_STEPS),
        "torch": torch.__version__,
        **meta_extra,
    }
    tt.st_write(os.path.join(out_dir, name + ".safetensors"), tensors, meta)
    # The initial weights as a trainyard model file: torch -> trainyard.
    tt.load_state(model, params0)
    tt.save_model(os.path.join(out_dir, name + ".model.safetensors"), model, spec, task,
                  shape, num_outputs=vocab, tokenizer=None)


def make_case(name, out_dir, seed):
    spec, shape, task, outputs, n, hp = CASES[name]
    if task == "language_modeling" or spec["layers"][0]["type"] == "embedding":
        return make_lm_case(name, out_dir, seed)
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
