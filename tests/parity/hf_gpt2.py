#!/usr/bin/env python3
"""A `transformers` GPT-2 in and out of trainyard (issue 31; ctest label
"parity"), offline: every model here is made at random on the spot.

  1. GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=64,
     vocab_size=300, n_positions=64)) with every parameter random (the
     LayerNorms and biases too, so a transpose or a swapped tensor shows),
     saved by save_pretrained (safetensors), with a byte-level BPE
     tokenizer.json trained by `tokenizers` on a few lines;
  2. the engine's logits on two windows (hf_gpt2_logits: the server's
     import path, then the engine's forward pass) equal GPT2LMHeadModel's
     within 1e-4; also for the same model saved in float16 (widened on
     import; the reference runs those half weights in float32) and for an
     untied lm_head (tie_word_embeddings false);
  3. through a live server: POST /v1/models layout=hf-gpt2 (weights,
     config, tokenizer) makes a language model with the same parameter
     count; GET .../weights?layout=hf-gpt2 gives the checkpoint's tensors
     back bit for bit; with file=config.json and file=tokenizer.json beside
     it, GPT2LMHeadModel.from_pretrained loads the folder and computes the
     original's logits exactly; the server's next-token predict gives
     GPT2LMHeadModel's top tokens and probabilities (within 1e-4);
  4. a GPT trained here (embedding, positional_embedding, two blocks of
     mlp_ratio 2, layernorm, lm_head) exports to a folder that
     GPT2LMHeadModel loads and whose next-token probabilities are the
     server's predict's;
  5. a GPT2ForSequenceClassification checkpoint (score.weight) and a config
     with activation_function relu are 422s naming the tensor and the key,
     and store nothing.

    hf_gpt2.py path/to/trainyard path/to/hf_gpt2_logits

Needs the venv `make venv` makes (.venv-hf: /usr/bin/python3's torch with
transformers, tokenizers and safetensors from tests/parity/
requirements-hf.txt); ctest skips it (77) without that venv.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is fetched: all is made here
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
try:
    import numpy as np
    import torch
    from safetensors.torch import load_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (GPT2Config, GPT2ForSequenceClassification,
                              GPT2LMHeadModel)
    from transformers.utils import logging as hf_logging
except ImportError as e:
    sys.exit("FAIL: %s lacks %s: run `make venv` (it makes .venv-hf with "
             "tests/parity/requirements-hf.txt)" % (sys.executable, e))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "roundtrip"))
import roundtrip as rt  # noqa: E402  (the live server)

hf_logging.set_verbosity_error()
torch.set_num_threads(1)
TOL = 1e-4
CONFIG = dict(n_layer=2, n_head=4, n_embd=64, vocab_size=300, n_positions=64)
TEXT = ("First Citizen: Before we proceed any further, hear me speak.\n"
        "All: Speak, speak.\nFirst Citizen: You are all resolved rather to "
        "die than to famish?\nAll: Resolved. resolved.\n") * 4


def random_gpt2(seed, cls=GPT2LMHeadModel, **extra):
    torch.manual_seed(seed)
    m = cls(GPT2Config(**CONFIG, **extra))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") \
                    or name.endswith("ln_f.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return m.eval()


def make_tokenizer(path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=CONFIG["vocab_size"], special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([TEXT], trainer)
    assert tok.get_vocab_size() <= CONFIG["vocab_size"], tok.get_vocab_size()
    tok.save(path)
    return tok


def windows(tok):
    """Two windows of n_positions ids: the text's tokens, and random ids."""
    t = CONFIG["n_positions"]
    ids = tok.encode(TEXT).ids[:t]
    assert len(ids) == t, len(ids)
    rng = np.random.default_rng(31)
    return np.array([ids, rng.integers(0, CONFIG["vocab_size"], t)], np.int64)


def hf_logits(model, x):
    with torch.no_grad():
        return model(torch.from_numpy(x)).logits.numpy()


def engine_logits(tool, folder, x, work):
    tokens, out = os.path.join(work, "tokens.f32"), os.path.join(work, "logits.f32")
    x.astype(np.float32).tofile(tokens)
    r = subprocess.run([tool, os.path.join(folder, "model.safetensors"),
                        os.path.join(folder, "config.json"), tokens,
                        str(len(x)), out], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError("hf_gpt2_logits: %s%s" % (r.stdout, r.stderr))
    return np.fromfile(out, np.float32).reshape(len(x), x.shape[1], -1)


def check_logits(what, ours, ref):
    assert ours.shape == ref.shape, (what, ours.shape, ref.shape)
    err = float(np.max(np.abs(ours.astype(np.float64) - ref)))
    print("%s: logits max |diff| %.3g over %d values (scale %.3g)"
          % (what, err, ref.size, float(np.max(np.abs(ref)))))
    if not err <= TOL:
        raise AssertionError("%s: logits differ by %g > %g" % (what, err, TOL))


def upload_parts(folder, with_tokenizer=True, config=None):
    files = {"weights": open(os.path.join(folder, "model.safetensors"), "rb").read(),
             "config": config if config is not None else
             open(os.path.join(folder, "config.json"), "rb").read()}
    if with_tokenizer:
        files["tokenizer"] = open(os.path.join(folder, "tokenizer.json"), "rb").read()
    return files


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: hf_gpt2.py path/to/trainyard path/to/hf_gpt2_logits")
    binary, tool = argv[1], argv[2]
    work = tempfile.mkdtemp(prefix="ty-hf-gpt2-")
    srv = None
    try:
        # 1. The checkpoint and its tokenizer.
        src = os.path.join(work, "gpt2")
        model = random_gpt2(1)
        model.save_pretrained(src, safe_serialization=True)
        tok = make_tokenizer(os.path.join(src, "tokenizer.json"))
        x = windows(tok)
        ref = hf_logits(model, x)

        # 2. Logits, float32, float16 and untied.
        check_logits("float32", engine_logits(tool, src, x, work), ref)
        half = os.path.join(work, "gpt2-f16")
        model.half().save_pretrained(half, safe_serialization=True)
        model.float()
        assert next(iter(load_file(os.path.join(half, "model.safetensors"))
                         .values())).dtype == torch.float16
        ref_half = hf_logits(GPT2LMHeadModel.from_pretrained(
            half, torch_dtype=torch.float32).eval(), x)
        check_logits("float16 weights", engine_logits(tool, half, x, work), ref_half)
        untied_dir = os.path.join(work, "gpt2-untied")
        untied = random_gpt2(2, tie_word_embeddings=False)
        untied.save_pretrained(untied_dir, safe_serialization=True)
        assert "lm_head.weight" in load_file(
            os.path.join(untied_dir, "model.safetensors"))
        check_logits("untied lm_head", engine_logits(tool, untied_dir, x, work),
                     hf_logits(untied, x))

        # 3. Through the server, and back.
        srv = rt.Server(binary)
        doc = srv.upload("/v1/models", {"name": "gpt2-rand", "layout": "hf-gpt2"},
                         upload_parts(src))
        params = sum(p.numel() for p in model.parameters())
        assert doc["task"] == "language_modeling", doc
        assert doc["input_shape"] == [CONFIG["n_positions"]], doc
        assert doc["num_outputs"] == CONFIG["vocab_size"], doc
        assert doc["param_count"] == params, (doc["param_count"], params)
        base = "/v1/models/%s/weights?layout=hf-gpt2" % doc["id"]
        back = os.path.join(work, "back")
        os.makedirs(back)
        with open(os.path.join(back, "model.safetensors"), "wb") as f:
            f.write(srv.request("GET", base))
        for name in ("config.json", "tokenizer.json"):
            with open(os.path.join(back, name), "wb") as f:
                f.write(srv.request("GET", base + "&file=" + name))
        orig = load_file(os.path.join(src, "model.safetensors"))
        got = load_file(os.path.join(back, "model.safetensors"))
        assert set(got) == set(orig), sorted(set(got) ^ set(orig))
        for k in orig:
            a, b = orig[k], got[k]
            if a.shape != b.shape or not torch.equal(a.view(torch.int32),
                                                     b.view(torch.int32)):
                raise AssertionError("export: %s differs from the checkpoint's" % k)
        print("export: %d tensors bit for bit" % len(orig))
        reloaded = GPT2LMHeadModel.from_pretrained(back).eval()
        if not np.array_equal(hf_logits(reloaded, x), ref):
            raise AssertionError("the exported folder's GPT2LMHeadModel "
                                 "computes other logits")
        with open(os.path.join(src, "tokenizer.json")) as f1, \
                open(os.path.join(back, "tokenizer.json")) as f2:
            assert json.load(f1) == json.load(f2), "tokenizer.json changed"
        assert Tokenizer.from_file(os.path.join(back, "tokenizer.json")) \
            .encode(TEXT).ids == tok.encode(TEXT).ids
        # The server's next-token predict on token ids: GPT2LMHeadModel's
        # softmax at each prompt's last position (a short prompt, padded
        # by the server, and a whole window).
        prompts = [x[0][:20].tolist(), x[1].tolist()]
        pred = srv.json("POST", "/v1/models/%s/predict" % doc["id"],
                        {"inputs": prompts, "top_k": 5})["predictions"]
        worst = 0.0
        for p, got in zip(prompts, pred):
            with torch.no_grad():
                probs = torch.softmax(model(torch.tensor([p])).logits[0, -1]
                                      .double(), -1).numpy()
            want = np.argsort(-probs, kind="stable")[:5]
            ids = [t["id"] for t in got["next_tokens"]]
            assert got["tokens"] == p, (got["tokens"], p)
            assert ids == want.tolist(), (ids, want.tolist())
            worst = max(worst, max(abs(t["probability"] - probs[t["id"]])
                                   for t in got["next_tokens"]))
        print("predict: top 5 next tokens as GPT2LMHeadModel's, probabilities "
              "within %.3g" % worst)
        assert worst <= TOL, worst
        # The float16 checkpoint imports too (widened).
        srv.upload("/v1/models", {"name": "gpt2-f16", "layout": "hf-gpt2"},
                   upload_parts(half, with_tokenizer=False))

        # 5. A GPT trained here exports to a folder transformers loads, and
        # computes there what the server predicts.
        trained_gpt(srv, work, x)

        # 4. What is not GPT2LMHeadModel's computation, refused.
        before = len(srv.json("GET", "/v1/models?limit=1000")["items"])
        cls_dir = os.path.join(work, "gpt2-cls")
        random_gpt2(3, cls=GPT2ForSequenceClassification,
                    num_labels=3, pad_token_id=0).save_pretrained(
                        cls_dir, safe_serialization=True)
        r = json.loads(srv.request("POST", *multipart(
            {"layout": "hf-gpt2"}, upload_parts(cls_dir, with_tokenizer=False)),
            want=(422,)))
        assert r["field"] == "weights" and "score.weight" in r["detail"], r
        cfg = json.load(open(os.path.join(src, "config.json")))
        cfg["activation_function"] = "relu"
        r = json.loads(srv.request("POST", *multipart(
            {"layout": "hf-gpt2"},
            upload_parts(src, config=json.dumps(cfg).encode())), want=(422,)))
        assert r["field"] == "config.activation_function", r
        after = len(srv.json("GET", "/v1/models?limit=1000")["items"])
        assert after == before, (before, after)
        print("refusals: score.weight and activation_function relu, nothing stored")
    finally:
        if srv:
            srv.close()
        shutil.rmtree(work, ignore_errors=True)
    print("PASS")


def trained_gpt(srv, work, x):
    ds = srv.upload("/v1/datasets", {"name": "lines", "format": "text"},
                    {"file": TEXT.encode()})["id"]
    spec = {"layers": [{"type": "embedding", "dim": 32},
                       {"type": "positional_embedding"},
                       {"type": "transformer_block", "heads": 4, "mlp_ratio": 2},
                       {"type": "transformer_block", "heads": 4, "mlp_ratio": 2},
                       {"type": "layernorm"}, {"type": "lm_head"}]}
    model = srv.train(ds, spec, context_length=16, batch_size=8,
                      optimizer="adamw", learning_rate=0.01, max_steps=10)
    base = "/v1/models/%s/weights?layout=hf-gpt2" % model
    folder = os.path.join(work, "trained")
    os.makedirs(folder)
    for name in ("model.safetensors", "config.json"):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(srv.request("GET", base + ("&file=" + name if name != "model.safetensors" else "")))
    # A byte tokenizer has no tokenizer.json.
    srv.request("GET", base + "&file=tokenizer.json", want=(404,))
    hf = GPT2LMHeadModel.from_pretrained(folder).eval()
    assert hf.config.n_inner == 64 and hf.config.n_positions == 16, hf.config
    prompt = [int(v) % 256 for v in x[0][:12]]
    pred = srv.json("POST", "/v1/models/%s/predict" % model,
                    {"inputs": [prompt], "top_k": 5})["predictions"][0]
    with torch.no_grad():
        probs = torch.softmax(hf(torch.tensor([prompt])).logits[0, -1].double(),
                              -1).numpy()
    ids = [t["id"] for t in pred["next_tokens"]]
    assert ids == np.argsort(-probs, kind="stable")[:5].tolist(), (ids, probs)
    worst = max(abs(t["probability"] - probs[t["id"]]) for t in pred["next_tokens"])
    print("trained here: the exported folder's GPT2LMHeadModel predicts the "
          "server's top 5 within %.3g" % worst)
    assert worst <= TOL, worst


def multipart(fields, files):
    """The path, body and content type of a POST /v1/models form."""
    import uuid
    b = uuid.uuid4().hex
    parts = []
    for k, v in fields.items():
        parts.append(('--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n'
                      % (b, k)).encode() + v.encode() + b"\r\n")
    for k, v in files.items():
        parts.append(('--%s\r\nContent-Disposition: form-data; name="%s"; '
                      'filename="%s"\r\nContent-Type: application/octet-stream'
                      '\r\n\r\n' % (b, k, k)).encode() + v + b"\r\n")
    body = b"".join(parts) + ("--%s--\r\n" % b).encode()
    return "/v1/models", body, "multipart/form-data; boundary=" + b


if __name__ == "__main__":
    main(sys.argv)
