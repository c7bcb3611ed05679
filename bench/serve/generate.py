#!/usr/bin/python3
"""Generation benchmark: trainyard's text generation against Hugging Face
transformers on the same weights, on this machine (not a test; `make
bench-generate`, or bench/serve/generate.py [--binary build/trainyard]).

The model (--shape): "mini" (the default), a GPT-2-like stack of 6
transformer blocks of width 384 and 6 heads (10.6 M weights), or "char",
the dashboard's "GPT (character)" (width 128, 4 blocks of 4 heads, 0.8 M
weights), each with context 128 and the byte tokenizer, trained briefly
by trainyard on the licence texts Debian ships (the speed does not depend
on what it learned). With "char" a token costs the engine a few
microseconds, and what is measured is mostly HTTP, streaming and the
Python clients; "mini" is closer to serving a real model, where the
engine's arithmetic dominates. Systems:

  ty-continuous  trainyard as built: continuous batching in the server;
  ty-static      the same with TRAINYARD_GENERATE_STATIC=1 (a batch is
                 admitted only when the last one has finished);
  hf             transformers' GPT2LMHeadModel.generate behind FastAPI,
                 one request at a time;
  ty-deployed    (--deployed) the same weights deployed on one CPU
                 replica: the requests run in the replica's engine and
                 the tokens come back over its socket.

Both trainyard servers train the same model from the same seed (the same
weights). Before timing, the greedy tokens of hf and trainyard for one
prompt are compared (the same weights should write the same text).

Workload (--lengths): prompts cut from the text at seeded offsets, and
greedy generation of max_tokens; "mixed" (the default) draws three
requests in four short (prompt 16 to 48 bytes, 8 to 32 tokens) and one
long (prompt 16 to 32, 64 to 96 tokens), as chat traffic mixes short
answers and long ones; "uniform" draws prompts of 16 to 64 bytes and 16
to 64 tokens. c clients at once (c = 1, 8, 32), each sending its
requests one after another, 4 * c + 16 requests in all (after two
warm-up requests). Reported per system and c: generated tokens/s (all
tokens over the wall time), time to first token and inter-token latency
p50 and p99 (trainyard, from the stream's events; hf does not stream, so
its TTFT is the whole request) and request latency p50/p99, then the
ratios the issue asks for.

--gpu (bench/gpu/run.sh on a GPU machine) serves from cuda:0 and puts the
deployment's replica on a GPU or MIG slice; --no-hf leaves transformers
out (a machine without network cannot make its venv).

transformers, FastAPI and uvicorn go into a virtual environment outside the
repository ($XDG_CACHE_HOME/trainyard/bench-generate-venv, or --venv),
made with --system-site-packages for Debian's torch; transformers is
pinned below 4.40 for torch 1.13. Everything shares this machine's cores.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
LICENSES = "/usr/share/common-licenses"


def gpt(dim, blocks, heads):
    return {"layers": [{"type": "embedding", "dim": dim}, {"type": "positional_embedding"}]
            + [{"type": "transformer_block", "heads": heads}] * blocks
            + [{"type": "layernorm"}, {"type": "lm_head"}]}


SHAPES = {"mini": gpt(384, 6, 6), "char": gpt(128, 4, 4)}


def say(*a):
    print(*a, flush=True)


def corpus():
    text = []
    for name in sorted(os.listdir(LICENSES)):
        p = os.path.join(LICENSES, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                text.append(f.read().decode("utf-8", "replace"))
    t = "".join(text)
    return "".join(ch for ch in t if 32 <= ord(ch) < 127 or ch == "\n")


class Trainyard:
    def __init__(self, binary, env_extra=None, flags=()):
        self.data = tempfile.mkdtemp(prefix="ty-bench-gen-")
        env = dict(os.environ, **(env_extra or {}))
        self.out = open(os.path.join(self.data, "stdout"), "w+")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data",
             os.path.join(self.data, "d"), "--train-device", "cpu",
             "--auth-fail-rate", "0", "--access-log-sample", "0", *flags],
            stdout=self.out, stderr=open(os.path.join(self.data, "stderr"), "w"), env=env)
        for _ in range(200):
            self.out.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.out.read())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("trainyard did not start")
        with open(os.path.join(self.data, "d", "admin.key")) as f:
            self.key = f.read().strip()

    def call(self, method, path, body=None, ctype="application/json", raw=False):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        h = {"Authorization": "Bearer " + self.key}
        if body is not None:
            h["Content-Type"] = ctype
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data if raw else (json.loads(data) if data else None)

    def train(self, text, steps, model):
        b = "tybench"
        body = (f"--{b}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nlicenses\r\n"
                f"--{b}\r\nContent-Disposition: form-data; name=\"format\"\r\n\r\ntext\r\n"
                f"--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"l.txt\"\r\n"
                "Content-Type: text/plain\r\n\r\n").encode() + text.encode() + f"\r\n--{b}--\r\n".encode()
        st, ds = self.call("POST", "/v1/datasets", body, f"multipart/form-data; boundary={b}")
        assert st == 201, (st, ds)
        st, job = self.call("POST", "/v1/jobs", {
            "dataset": "licenses", "name": "gpt-bench", "model": model,
            "hyperparameters": {"context_length": 128, "batch_size": 16,
                                "optimizer": "adamw", "learning_rate": 0.002,
                                "epochs": 1, "max_steps": steps, "seed": 1}})
        assert st == 202, (st, job)
        while True:
            _, j = self.call("GET", "/v1/jobs/" + job["id"])
            if j["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.5)
        assert j["status"] == "succeeded", j
        return j["model"]

    def run(self, model, prompt, max_tokens):
        """One streamed request: (ttft, [inter-token gaps], e2e, tokens)."""
        t0 = time.perf_counter()
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request("POST", f"/v2/models/{model}/generate_stream",
                  body=json.dumps({"text_input": prompt, "parameters": {
                      "temperature": 0, "max_tokens": max_tokens}}).encode(),
                  headers={"Authorization": "Bearer " + self.key,
                           "Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read())
        times, text, last = [], "", None
        buf = b""
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                o = json.loads(ev[len(b"data: "):])
                if "finish_reason" in o:
                    last = o
                else:
                    times.append(time.perf_counter())
                    text += o["text_output"]
        c.close()
        e2e = time.perf_counter() - t0
        n = last["completion_tokens"] if last else 0
        gaps = [b - a for a, b in zip(times, times[1:])]
        return (times[0] - t0 if times else e2e), gaps, e2e, n, text

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if not os.environ.get("TY_KEEP_TEST_DATA"):
            shutil.rmtree(self.data, ignore_errors=True)


class HF:
    def __init__(self, venv, folder, threads):
        py = os.path.join(venv, "bin", "python")
        self.port = free_port()
        env = dict(os.environ, BENCH_HF_DIR=folder, BENCH_TORCH_THREADS=str(threads),
                   PYTHONPATH=HERE)
        self.proc = subprocess.Popen(
            [py, "-m", "uvicorn", "app_hf_generate:app", "--port", str(self.port),
             "--log-level", "warning"], cwd=HERE, env=env)
        for _ in range(600):
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("the transformers app did not start")

    def run(self, ids, max_tokens):
        t0 = time.perf_counter()
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request("POST", "/generate", body=json.dumps(
            {"ids": ids, "max_new_tokens": max_tokens}).encode(),
            headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = json.loads(r.read())
        c.close()
        e2e = time.perf_counter() - t0
        return e2e, [], e2e, len(data["ids"]), bytes(data["ids"]).decode("latin-1")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    ok = os.path.exists(py) and subprocess.run(
        [py, "-c", "import fastapi, uvicorn, transformers"],
        capture_output=True).returncode == 0
    if ok:
        return
    say(f"making {venv} (fastapi, uvicorn, transformers<4.40)")
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv],
                   check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "fastapi", "uvicorn", "transformers==4.39.3"], check=True)


def workload(text, n, seed, lengths):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if lengths == "uniform":
            plen, gen = rng.randint(16, 64), rng.randint(16, 64)
        elif rng.random() < 0.75:
            plen, gen = rng.randint(16, 48), rng.randint(8, 32)
        else:
            plen, gen = rng.randint(16, 32), rng.randint(64, 96)
        at = rng.randrange(0, len(text) - plen)
        out.append((text[at:at + plen], gen))
    return out


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def measure(name, system, model, work, c, is_hf, quiet=False):
    results, lock, idx = [], threading.Lock(), [0]

    def client():
        first = True
        while True:
            with lock:
                if idx[0] >= len(work):
                    return
                i = idx[0]
                idx[0] += 1
            prompt, gen = work[i]
            if is_hf:
                r = system.run(list(prompt.encode()), gen)
            else:
                r = system.run(model, prompt, gen)
            with lock:
                results.append(r + (first,))
            first = False

    t0 = time.perf_counter()
    th = [threading.Thread(target=client) for _ in range(c)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r[3] for r in results)
    ttft = [r[0] for r in results]
    # Every client's first request arrives at once, at the start: a burst
    # that closed-loop clients make only then. The steady state is the
    # requests after each client's first.
    steady = [r[0] for r in results if not r[5]]
    gaps = [g for r in results for g in r[1]]
    e2e = [r[2] for r in results]
    row = {"system": name, "c": c, "requests": len(results), "tokens": tokens,
           "wall_s": wall, "tokens_per_s": tokens / wall,
           "ttft_p50_ms": 1000 * pct(ttft, 0.5), "ttft_p99_ms": 1000 * pct(ttft, 0.99),
           "ttft_steady_p99_ms": 1000 * pct(steady, 0.99),
           "itl_p50_ms": 1000 * pct(gaps, 0.5), "itl_p99_ms": 1000 * pct(gaps, 0.99),
           "e2e_p50_ms": 1000 * pct(e2e, 0.5), "e2e_p99_ms": 1000 * pct(e2e, 0.99)}
    if quiet:
        return row
    say(f"  {name:14s} c={c:<3d} {row['tokens_per_s']:9.1f} tok/s  "
        f"TTFT p50 {row['ttft_p50_ms']:8.1f} p99 {row['ttft_p99_ms']:8.1f} (steady {row['ttft_steady_p99_ms']:7.1f}) ms  "
        f"ITL p50 {row['itl_p50_ms']:6.2f} p99 {row['itl_p99_ms']:6.2f} ms  "
        f"e2e p50 {row['e2e_p50_ms']:8.1f} p99 {row['e2e_p99_ms']:8.1f} ms")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "trainyard"))
    ap.add_argument("--venv", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
        "trainyard", "bench-generate-venv"))
    ap.add_argument("--steps", type=int, default=10, help="training steps (weights)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="mini")
    ap.add_argument("--lengths", choices=("mixed", "uniform"), default="mixed")
    ap.add_argument("--conc", default="1,8,32")
    ap.add_argument("--torch-threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--deployed", action="store_true",
                    help="also through a deployment's replica (ty-deployed)")
    ap.add_argument("--no-hf", action="store_true",
                    help="without the transformers baseline (no venv: a machine "
                         "without network)")
    ap.add_argument("--gpu", action="store_true",
                    help="the servers' engines on cuda:0 (--devices auto "
                         "--serve-device cuda:0) and the deployment's replica "
                         "on a GPU or MIG slice (resources.gpu any)")
    a = ap.parse_args()
    if not a.no_hf:
        ensure_venv(a.venv)
    flags = ("--devices", "auto", "--serve-device", "cuda:0") if a.gpu else ()
    text = corpus()
    say(f"text: {len(text)} bytes of licences; cpu: "
        + open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].split("\n")[0].strip()
        + f", {os.cpu_count()} cores")
    cont = Trainyard(a.binary, flags=flags)
    stat = Trainyard(a.binary, {"TRAINYARD_GENERATE_STATIC": "1"}, flags)
    hf = None
    folder = tempfile.mkdtemp(prefix="ty-bench-hf-")
    rows = []
    try:
        say(f"model: {a.shape}, {a.steps} training steps; lengths: {a.lengths}")
        m1, m2 = (cont.train(text, a.steps, SHAPES[a.shape]),
                  stat.train(text, a.steps, SHAPES[a.shape]))
        st, w = cont.call("GET", f"/v1/models/{m1}/weights?layout=hf-gpt2", raw=True)
        assert st == 200, st
        open(os.path.join(folder, "model.safetensors"), "wb").write(w)
        st, cfg = cont.call("GET", f"/v1/models/{m1}/weights?layout=hf-gpt2&file=config.json",
                            raw=True)
        assert st == 200, st
        open(os.path.join(folder, "config.json"), "wb").write(cfg)
        hf = None if a.no_hf else HF(a.venv, folder, a.torch_threads)
        systems = [("ty-continuous", cont, m1, False), ("ty-static", stat, m2, False)]
        if hf:
            systems.append(("hf", hf, None, True))
        if a.deployed:
            # its own copy of the weights (the same seed): a deployed model's
            # every request goes to the deployment, by id too
            m3 = cont.train(text, a.steps, SHAPES[a.shape])
            st, doc = cont.call("POST", "/v1/deployments", {
                "name": "bench-dep", "model": m3, "replicas": {"min": 1, "max": 1},
                "resources": {"gpu": "any" if a.gpu else "none"}})
            assert st == 201, (st, doc)
            while cont.call("GET", f"/v1/deployments/{doc['id']}")[1]["status"] != "ready":
                time.sleep(0.1)
            systems.append(("ty-deployed", cont, "bench-dep", False))
        prompt = text[1000:1040]
        _, _, _, _, t_ty = cont.run(m1, prompt, 32)
        _, _, _, _, t_st = stat.run(m2, prompt, 32)
        t_hf = hf.run(list(prompt.encode()), 32)[4] if hf else t_ty
        same = t_ty == t_hf == t_st
        say(f"greedy check ({'the same text' if same else 'DIFFERENT texts'}): "
            f"trainyard {t_ty!r}, static {t_st!r}"
            + (f", transformers {t_hf!r}" if hf else " (no transformers: --no-hf)"))
        for c in [int(x) for x in a.conc.split(",")]:
            work = workload(text, 4 * c + 16, seed=c, lengths=a.lengths)
            say(f"c={c}: {len(work)} requests")
            for name, sysm, model, is_hf in systems:
                measure(name, sysm, model, work[:2], min(c, 2), is_hf, quiet=True)  # warm-up
                rows.append(measure(name, sysm, model, work, c, is_hf))
        say("\nratios (generated tokens/s; TTFT p99 of all requests, and of the steady state):")
        base = next(r for r in rows if r["c"] == min(x["c"] for x in rows) and r["system"] == "ty-continuous")
        for c in sorted({r["c"] for r in rows}):
            by = {r["system"]: r for r in rows if r["c"] == c}
            say((f"  c={c:<3d} continuous/hf {by['ty-continuous']['tokens_per_s'] / by['hf']['tokens_per_s']:6.2f}x"
                 if "hf" in by else f"  c={c:<3d}")
                + f"   continuous/static {by['ty-continuous']['tokens_per_s'] / by['ty-static']['tokens_per_s']:5.2f}x"
                f"   TTFT p99 over c=1's {by['ty-continuous']['ttft_p99_ms'] / base['ttft_p99_ms']:6.2f}x"
                f" (steady {by['ty-continuous']['ttft_steady_p99_ms'] / base['ttft_steady_p99_ms']:6.2f}x)"
                + (f"   deployed/continuous {by['ty-deployed']['tokens_per_s'] / by['ty-continuous']['tokens_per_s']:5.2f}x"
                   if "ty-deployed" in by else ""))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"same_greedy_text": same, "shape": a.shape, "lengths": a.lengths,
                           "rows": rows}, f, indent=1)
    finally:
        for s in (cont, stat):
            s.stop()
        if hf:
            hf.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
