"""OpenAI's completions API as the `openai` Python package sees it (the
version pinned in requirements.txt, unmodified): base_url .../openai/v1 and
the tenant's key as api_key, against a live `trainyard serve` with a small
GPT trained here on a grammar's sentences.

    python openai_client.py path/to/trainyard

Checks: models.list names the model; a greedy completion writes what
POST /v2/models/{name}/generate writes for the same prompt; streamed
chunks add up to it and end with usage (stream_options.include_usage);
n choices with a seed are the same texts twice, and differ from one
another; echo puts the prompt first; logprobs has one entry per token;
a stop string ends the text before it; bad parameters raise the client's
422 error naming the field; chat completions are a 400. Then the model is
deployed (one CPU replica): by the deployment's name, the same seeded
choices, streamed and not, with the same logprobs, come from the replica. Exit 77 (skipped)
when openai is not installed (`make venv` installs it).
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

try:
    import openai
except ImportError as e:
    print(f"SKIPPED: openai is not installed ({e}); make venv installs it")
    sys.exit(77)


class Server:
    def __init__(self, binary):
        self.data = tempfile.mkdtemp(prefix="ty-openai-")
        self.out = open(os.path.join(self.data, "stdout"), "w+")
        self.log = open(os.path.join(self.data, "log"), "w")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data",
             os.path.join(self.data, "d"), "--train-device", "cpu",
             "--auth-fail-rate", "0"],
            stdout=self.out, stderr=self.log)
        port = None
        for _ in range(200):
            self.out.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.out.read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.05)
        if port is None:
            self.stop()
            raise RuntimeError("the server did not start")
        self.base = f"http://127.0.0.1:{port}"
        with open(os.path.join(self.data, "d", "admin.key")) as f:
            self.key = f.read().strip()

    def request(self, method, path, body=None, ctype="application/json"):
        h = {"Authorization": "Bearer " + self.key}
        if body is not None:
            h["Content-Type"] = ctype
        req = urllib.request.Request(self.base + path, data=body, headers=h,
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.data, ignore_errors=True)


def story(n):
    subj = ["the cat", "a dog", "the old king", "my friend"]
    verb = ["sees", "loves", "finds", "calls"]
    obj = ["the moon", "a red apple", "the river", "the castle"]
    s, lines = 7, []
    for _ in range(n):
        k = []
        for _ in range(3):
            s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            k.append((s >> 33) % 4)
        lines.append(f"{subj[k[0]]} {verb[k[1]]} {obj[k[2]]}.")
    return "\n".join(lines) + "\n"


def train(srv):
    boundary = "tyopenai"
    text = story(800).encode()
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\n"
            f"story\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"format\"\r\n\r\n"
            f"text\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"story.txt\"\r\nContent-Type: text/plain\r\n\r\n").encode() + text + \
        f"\r\n--{boundary}--\r\n".encode()
    st, ds = srv.request("POST", "/v1/datasets", body,
                         f"multipart/form-data; boundary={boundary}")
    assert st == 201, (st, ds)
    st, job = srv.request("POST", "/v1/jobs", json.dumps({
        "dataset": "story", "name": "story-gpt",
        "model": {"layers": [{"type": "embedding", "dim": 32},
                             {"type": "positional_embedding"},
                             {"type": "transformer_block", "heads": 4},
                             {"type": "layernorm"}, {"type": "lm_head"}]},
        "hyperparameters": {"context_length": 32, "batch_size": 16,
                            "optimizer": "adamw", "learning_rate": 0.005,
                            "epochs": 5, "max_steps": 80, "seed": 3}}).encode())
    assert st == 202, (st, job)
    for _ in range(1200):
        _, job = srv.request("GET", "/v1/jobs/" + job["id"])
        if job["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    assert job["status"] == "succeeded", job
    return "story-gpt"


def main():
    srv = Server(sys.argv[1])
    try:
        name = train(srv)
        client = openai.OpenAI(base_url=srv.base + "/openai/v1", api_key=srv.key,
                               max_retries=0)
        ids = [m.id for m in client.models.list()]
        assert name in ids, ids
        print(f"models.list: {ids}")

        prompt = "the old k"
        c = client.completions.create(model=name, prompt=prompt, max_tokens=10,
                                      temperature=0)
        st, g = srv.request("POST", f"/v2/models/{name}/generate", json.dumps(
            {"text_input": prompt, "parameters": {"temperature": 0,
                                                  "max_tokens": 10}}).encode())
        assert st == 200, (st, g)
        text = c.choices[0].text
        assert text == g["text_output"], (text, g)
        assert c.choices[0].finish_reason == "length"
        assert c.usage.prompt_tokens == 9 and c.usage.completion_tokens == 10, c.usage
        assert c.usage.total_tokens == 19
        assert c.object == "text_completion" and c.id.startswith("cmpl-")
        print(f"greedy: {prompt!r} + {text!r}, the same as /v2 generate")

        # The prompt as token ids (the model's own tokenize): the same text;
        # a list of two such prompts, echoed, shows each prompt as text.
        st, tk = srv.request("POST", f"/v1/models/{name}/tokenize",
                             json.dumps({"content": prompt}).encode())
        assert st == 200, (st, tk)
        pids = tk["tokens"]
        c = client.completions.create(model=name, prompt=pids, max_tokens=10,
                                      temperature=0)
        assert c.choices[0].text == text, (c.choices[0].text, text)
        assert c.usage.prompt_tokens == len(pids), c.usage
        e = client.completions.create(model=name, prompt=[pids, pids[:4]],
                                      max_tokens=2, temperature=0, echo=True)
        got = [ch.text for ch in sorted(e.choices, key=lambda x: x.index)]
        assert got[0] == prompt + text[:2] and got[1].startswith(prompt[:4]), got
        for bad, field in (([pids, "a string"], "prompt"), ([10 ** 6], "prompt"),
                           ([pids, [10 ** 6]], "prompt[1]")):
            try:
                client.completions.create(model=name, prompt=bad, max_tokens=2)
                raise AssertionError(f"prompt {bad} was accepted")
            except openai.UnprocessableEntityError as err:
                assert err.body.get("field") == field, (bad, err.body)
        print(f"prompt as token ids {pids}: the same text; echo shows it as text")

        chunks = list(client.completions.create(
            model=name, prompt=prompt, max_tokens=10, temperature=0, stream=True,
            stream_options={"include_usage": True}))
        streamed = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        assert streamed == text, (streamed, text)
        finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
        assert finishes[-1] == "length" and all(f is None for f in finishes[:-1])
        assert chunks[-1].usage and chunks[-1].usage.completion_tokens == 10
        assert len(chunks) >= 4, len(chunks)
        print(f"stream: {len(chunks)} chunks add up to the same text, usage last")

        kw = dict(model=name, prompt=["the cat ", "a dog "], max_tokens=12,
                  temperature=1.2, n=2, seed=11)
        a = client.completions.create(**kw)
        b = client.completions.create(**kw)
        ta = [ch.text for ch in sorted(a.choices, key=lambda x: x.index)]
        tb = [ch.text for ch in sorted(b.choices, key=lambda x: x.index)]
        assert len(ta) == 4 and [ch.index for ch in a.choices] == [0, 1, 2, 3]
        assert ta == tb, (ta, tb)
        assert len(set(ta)) > 1, ta
        assert a.usage.prompt_tokens == 8 + 6, a.usage
        print(f"n=2 x 2 prompts, seed 11: {ta}, the same twice")
        # The four choices run side by side in the engine: streamed, their
        # pieces interleave and add up by index to the same texts; the first
        # alone (n=1) writes what it wrote among the four.
        by = {}
        for chunk in client.completions.create(stream=True, **kw):
            for c in chunk.choices:
                by[c.index] = by.get(c.index, "") + c.text
        assert [by.get(i) for i in range(4)] == ta, (by, ta)
        one = client.completions.create(**dict(kw, prompt="the cat ", n=1))
        assert one.choices[0].text == ta[0], (one.choices[0].text, ta[0])
        print("streamed, the same texts by index; the first alone, the same text")

        e = client.completions.create(model=name, prompt=prompt, max_tokens=4,
                                      temperature=0, echo=True, logprobs=2)
        ch = e.choices[0]
        assert ch.text == prompt + text[:4], ch.text
        lp = ch.logprobs
        assert len(lp.tokens) == 4 and len(lp.token_logprobs) == 4
        assert "".join(lp.tokens) == text[:4]
        assert lp.text_offset[0] == len(prompt)
        assert all(len(t) <= 2 for t in lp.top_logprobs)
        assert all(x <= 0 and math.isfinite(x) for x in lp.token_logprobs)
        print(f"echo and logprobs: {lp.token_logprobs}")
        # Streamed, each chunk carries its tokens' logprobs: together the
        # same tokens, numbers and offsets as the plain reply's.
        toks, lps, offs = [], [], []
        for chunk in client.completions.create(model=name, prompt=prompt, max_tokens=4,
                                               temperature=0, echo=True, logprobs=2,
                                               stream=True):
            for c in chunk.choices:
                if c.logprobs:
                    toks += c.logprobs.tokens
                    lps += c.logprobs.token_logprobs
                    offs += c.logprobs.text_offset
        assert toks == lp.tokens and lps == lp.token_logprobs, (toks, lps, lp)
        assert offs == lp.text_offset, (offs, lp.text_offset)
        print("streamed logprobs: the same tokens, numbers and offsets")

        stop = text[3:5]
        s = client.completions.create(model=name, prompt=prompt, max_tokens=10,
                                      temperature=0, stop=[stop])
        assert s.choices[0].finish_reason == "stop", s
        assert stop not in s.choices[0].text and text.startswith(s.choices[0].text)

        for bad, field in ((dict(temperature=-1), "temperature"),
                           (dict(top_p=0), "top_p"),
                           (dict(max_tokens=100), "max_tokens"),
                           (dict(extra_body={"bogus": 1}), None)):
            try:
                client.completions.create(model=name, prompt=prompt, **bad)
                raise AssertionError(f"{bad} was accepted")
            except openai.UnprocessableEntityError as err:
                if field:
                    assert err.body.get("field") == field, err.body
        try:
            client.completions.create(model="no-such-model", prompt=prompt)
            raise AssertionError("an unknown model was accepted")
        except openai.NotFoundError:
            pass
        try:
            client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "hi"}])
            raise AssertionError("chat was accepted")
        except openai.BadRequestError as err:
            assert "chat template" in str(err), err
        print("refusals: 422 naming the field, 404, chat 400")

        # Through a deployment: the replica writes what this server wrote.
        lkw = dict(kw, logprobs=2)
        here = client.completions.create(**lkw)
        st, dep = srv.request("POST", "/v1/deployments", json.dumps({
            "name": "story-dep", "model": name, "replicas": {"min": 1, "max": 1},
            "resources": {"gpu": "none"}}).encode())
        assert st == 201, (st, dep)
        for _ in range(600):
            _, d = srv.request("GET", "/v1/deployments/" + dep["id"])
            if d["status"] == "ready":
                break
            time.sleep(0.1)
        assert d["status"] == "ready", d
        there = client.completions.create(**dict(lkw, model="story-dep"))
        key = lambda r: [(c.index, c.text, c.finish_reason, c.logprobs.tokens,
                          c.logprobs.token_logprobs) for c in
                         sorted(r.choices, key=lambda x: x.index)]
        assert key(here) == key(there), (key(here), key(there))
        by = {}
        for chunk in client.completions.create(stream=True, **dict(kw, model="story-dep")):
            for c in chunk.choices:
                by[c.index] = by.get(c.index, "") + c.text
        assert [by.get(i) for i in range(4)] == ta, (by, ta)
        _, d = srv.request("GET", "/v1/deployments/" + dep["id"])
        assert d["traffic"]["requests"] >= 8, d["traffic"]
        print(f"deployed: the same choices and logprobs from the replica, streamed too "
              f"({d['traffic']['requests']} requests on it)")
        return 0
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(main())
