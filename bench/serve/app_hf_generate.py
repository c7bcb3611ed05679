"""The Hugging Face baseline of bench/serve/generate.py: POST /generate
{"ids": [prompt token ids], "max_new_tokens": n} answers {"ids": [the new
ids]}, greedy, by transformers' GPT2LMHeadModel.generate on the CPU with
the weights trainyard exported (GET /v1/models/{id}/weights?layout=hf-gpt2),
one request at a time: how a team serves a model without a generation
engine.

Run as `uvicorn app_hf_generate:app --port N` with BENCH_HF_DIR (the
folder of model.safetensors and config.json) and BENCH_TORCH_THREADS.
"""
import os
import threading

import torch
from fastapi import FastAPI, Request
from transformers import GPT2LMHeadModel

torch.set_num_threads(int(os.environ.get("BENCH_TORCH_THREADS", "1")))
_model = GPT2LMHeadModel.from_pretrained(os.environ["BENCH_HF_DIR"])
_model.eval()
_lock = threading.Lock()
app = FastAPI()


@app.post("/generate")
def generate(body: dict):
    ids = torch.tensor([body["ids"]], dtype=torch.long)
    with _lock, torch.no_grad():
        # no end-of-text token: exactly max_new_tokens, as trainyard writes
        out = _model.generate(ids, max_new_tokens=int(body["max_new_tokens"]),
                              do_sample=False, eos_token_id=None,
                              pad_token_id=0)
    return {"ids": out[0, ids.shape[1]:].tolist()}


@app.get("/ready")
def ready():
    return {"ready": True}
