#!/usr/bin/env python3
"""Text generation in the dashboard (issue 32's dashboard part), against the
real server, in headless Chromium at 1280x900 and 390x844.

Trains lm.py's tiny GPT (2 transformer blocks, 32 channels, context 32,
30 steps on a few kilobytes of Hamlet, byte tokenizer: about a second) and
deploys it on the CPU (one replica). Then:

* the deployment's page has a Try it: a prompt at temperature 0 with 12
  max tokens streams text that equals POST /v2/models/{deployment}/generate's
  text_output for the same body, built from more than one event (a
  MutationObserver installed by the test counts the text nodes the page
  adds, one a piece), then says finish reason "length" and the token counts;
* after generations, the page's time-to-first-token, inter-token-latency
  and tokens-per-second charts draw lines (ink of the p50 and tokens/s
  colours on the canvases) and name their latest values, its figures show
  the API's generation count and cached KV blocks, and its engines table
  shows each replica's engine as the API's heartbeat figures (a repeated
  prompt longer than a block: prefix-cache hits and a cached block);
* a max_tokens past the context is the server's 422, shown in the form
  beside Max tokens; an error event after the first piece (a stubbed
  fetch in the page) is shown under the text kept so far; the model's text
  goes in as text, never HTML; Stop aborts the fetch (the stub sees its
  signal aborted) and says so;
* the model's page has the same Try it (its own section, the next-token
  Try it kept), generating in the server's engine as the API does;
* a deployment of a model that is not a language model has none of this;
* at 390 px the deployment's page fits the window.

Polls with timeouts; no sleep is an assertion. Every failed check is
listed; any SEVERE console message but the deliberate 422 fails the test.
Screenshots go to the folder given as the second argument.

Usage: generate.py path/to/trainyard [artifacts-dir]
Exit 77 (skipped) when chromium, chromedriver or selenium is missing.
"""
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard  # noqa: E402  (skips with 77 itself when selenium or chromium is missing)
from dashboard import CANVAS_INK, api_call, browser, check, js, make_csv, start_server  # noqa: E402
from devices import settle, upload_csv  # noqa: E402
from lm import TINY, TINY_HP, upload_text  # noqa: E402
from runs import go, sign_in, wait_status  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402

WIDE, PHONE = (1280, 900), (390, 844)
PROMPT = "To be, or not"
LONG_PROMPT = "To be, or not to be, tha"  # 24 bytes: a full cache block and some
MAX_TOKENS = 12
BLUE, GREEN = (0x1f, 0x5f, 0xbf), (0x1e, 0x7f, 0x3c)

# Counts the text nodes the page adds to the streamed text (one a piece).
OBSERVE = r"""
const t = document.getElementById('gen-text');
window.__genAdded = 0;
if (window.__genObserver) window.__genObserver.disconnect();
window.__genObserver = new MutationObserver((records) => {
  for (const r of records) window.__genAdded += r.addedNodes.length; });
window.__genObserver.observe(t, {childList: true});
"""

# Replaces fetch for the next generate_stream only: a stream of the given
# SSE blocks, closed after them unless hold; records whether its signal was
# aborted. Every other call goes to the real fetch.
STUB = r"""
const blocks = arguments[0], hold = arguments[1];
const real = window.__realFetch || (window.__realFetch = window.fetch);
window.__stub = {aborted: false, used: false};
window.fetch = (url, opts = {}) => {
  if (!String(url).includes('/generate_stream') || window.__stub.used) return real(url, opts);
  window.__stub.used = true;
  const enc = new TextEncoder();
  const body = new ReadableStream({start(c) {
    for (const b of blocks) c.enqueue(enc.encode(b));
    if (!hold) c.close();
    opts.signal?.addEventListener('abort', () => {
      window.__stub.aborted = true;
      c.error(new DOMException('aborted', 'AbortError'));
    });
  }});
  return Promise.resolve(new Response(body, {status: 200, headers: {'Content-Type': 'text/event-stream'}}));
};
"""


def form_state(driver):
    return js(driver, """const o = document.getElementById('gen-output');
        return o ? {state: o.dataset.state, pieces: Number(o.dataset.pieces), chunks: Number(o.dataset.chunks),
                    finish: o.dataset.finishReason || null, completion: o.dataset.completionTokens || null,
                    text: document.getElementById('gen-text').textContent,
                    tags: [...document.getElementById('gen-text').querySelectorAll('*')].map((e) => e.tagName),
                    status: document.getElementById('gen-status').textContent,
                    error: document.getElementById('gen-error').textContent,
                    maxError: document.getElementById('gen-max-tokens-error')?.textContent || '',
                    added: window.__genAdded ?? null} : null;""")


def fill(driver, prompt, max_tokens, temperature="0", seed=""):
    for css, value in (("#gen-prompt", prompt), ("#gen-max-tokens", str(max_tokens)),
                       ("#gen-temperature", temperature), ("#gen-seed", seed)):
        box = driver.find_element(By.CSS_SELECTOR, css)
        box.clear()
        if value:
            box.send_keys(value)


def run_once(driver, timeout=30):
    """Clicks Generate and waits for the form to settle; its state."""
    driver.find_element(By.ID, "gen-start").click()
    return settle(lambda: (lambda f: f if f and f["state"] in ("done", "error", "stopped") else None)(form_state(driver)),
                  timeout) or form_state(driver)


def check_generation(driver, base, key, label, target, where, seed=None):
    """Try it equals the API's text for the same body: at temperature 0, or
    (seed) at temperature 1 with that seed (the same seed, the same text;
    a tiny model's greedy text may be all spaces, a sampled one is not)."""
    js(driver, OBSERVE)
    params = {"max_tokens": MAX_TOKENS, "temperature": 0 if seed is None else 1}
    if seed is not None:
        params["seed"] = seed
        where += f" (temperature 1, seed {seed})"
    fill(driver, PROMPT, MAX_TOKENS, str(params["temperature"]), "" if seed is None else str(seed))
    got = run_once(driver)
    want = api_call(base, key, "POST", f"/v2/models/{target}/generate", {"text_input": PROMPT, "parameters": params})
    check(got["state"] == "done" and got["text"] == want["text_output"],
          f"[{label}] {where}: the streamed text is the API's for the same body: {got['text']!r} vs {want['text_output']!r}")
    check(got["pieces"] > 1 and got["added"] == got["pieces"],
          f"[{label}] {where}: the text arrived in {got['pieces']} pieces, each added as it came "
          f"({got['added']} text nodes seen by a MutationObserver; {got['chunks']} network reads)")
    check(got["finish"] == want["finish_reason"] == "length" and got["completion"] == str(want["completion_tokens"])
          and f"{want['prompt_tokens']} prompt tokens, {want['completion_tokens']} generated" in got["status"],
          f"[{label}] {where}: the finish reason and token counts are shown: {got['status']!r}")
    check(not got["tags"], f"[{label}] {where}: the model's text is text, no element in it: {got['tags']}")
    if seed is not None:
        check(got["text"].strip(), f"[{label}] {where}: a sampled text is not blank: {got['text']!r}")
    return got


def check_errors(driver, label):
    """A 422 before the stream, an error event after a piece, Stop."""
    fill(driver, PROMPT, 100)
    got = run_once(driver)
    check(got["state"] == "error" and "Refused (422)" in got["error"] and "max_tokens" in got["error"]
          and "max_tokens" in got["maxError"],
          f"[{label}] max_tokens past the context: the 422, beside Max tokens too: {got['error']!r} / {got['maxError']!r}")

    fill(driver, PROMPT, MAX_TOKENS)
    js(driver, STUB, ['data: {"model_name":"m","model_version":"1","text_output":"<b>bold</b> & "}\n\n',
                      'data: {"error": "the replica went away <i>x</i>"}\n\n'], False)
    got = run_once(driver)
    check(got["state"] == "error" and got["error"] == "Failed after 1 piece: the replica went away <i>x</i>"
          and got["text"] == "<b>bold</b> & " and not got["tags"] and "before the error" in got["status"],
          f"[{label}] an error event after the first piece is shown under the text kept, all as text: "
          f"{got['error']!r}, {got['text']!r}, {got['tags']}")

    js(driver, STUB, ['data: {"model_name":"m","model_version":"1","text_output":"once"}\n\n'], True)
    driver.find_element(By.ID, "gen-start").click()
    streaming = settle(lambda: (lambda f: f if f["state"] == "streaming" and f["pieces"] == 1 else None)(form_state(driver)), 10)
    stop_enabled = js(driver, "return !document.getElementById('gen-stop').disabled;")
    driver.find_element(By.ID, "gen-stop").click()
    got = settle(lambda: (lambda f: f if f["state"] == "stopped" else None)(form_state(driver)), 10) or form_state(driver)
    aborted = js(driver, "return window.__stub.aborted;")
    check(streaming and stop_enabled and got["state"] == "stopped" and aborted and got["text"] == "once"
          and got["status"].startswith("Stopped after 1 piece") and not got["error"],
          f"[{label}] Stop aborts the fetch (signal aborted: {aborted}) and says so: {got['status']!r}")
    js(driver, "if (window.__realFetch) window.fetch = window.__realFetch;")


def check_charts(driver, base, key, label, dep):
    """After generations the three charts draw and name their values; the
    figures and the engines table are the API's."""
    name = api_call(base, key, "GET", f"/v1/deployments/{dep}")["name"]
    for i in range(4):
        api_call(base, key, "POST", f"/v2/models/{name}/generate",
                 {"text_input": PROMPT, "parameters": {"max_tokens": MAX_TOKENS, "temperature": 1, "seed": i}})
    # A prompt longer than a cache block (16 tokens), twice: the second
    # finds the first's prompt block in the prefix cache, which keeps it
    # (a cached block) once both are done.
    for i in range(2):
        api_call(base, key, "POST", f"/v2/models/{name}/generate",
                 {"text_input": LONG_PROMPT, "parameters": {"max_tokens": 4, "temperature": 0}})
    inked = settle(lambda: all(js(driver, CANVAS_INK, c, col) > 20 for c, col in
                               (("ttft-chart", BLUE), ("itl-chart", BLUE), ("tps-chart", GREEN))), 20)
    labels = js(driver, "return ['ttft-chart', 'itl-chart', 'tps-chart'].map((id) => document.getElementById(id).getAttribute('aria-label'));")
    named = (labels[0].startswith("Time to first token (ms):") and "latest p50 " in labels[0] and "p50 none" not in labels[0]
             and labels[0].endswith(" ms") and "p50 none" not in labels[1] and labels[1].endswith(" ms")
             and "tokens/s none" not in labels[2] and labels[2].endswith(" tokens/s"))
    check(inked and named, f"[{label}] the TTFT, ITL and tokens/s charts draw their lines and name their values: {labels}")
    doc = api_call(base, key, "GET", f"/v1/deployments/{dep}")
    g = doc["generate"]
    check(g and g["requests"] >= 5 and g["ttft_ms"]["p50"] is not None and g["recent"]["tokens_per_second"] > 0,
          f"[{label}] the API counts the generations: {json.dumps(g)[:200] if g else g}")
    shown = settle(lambda: js(driver, "return document.getElementById('gen-requests')?.textContent;")
                   == f"{api_call(base, key, 'GET', f'/v1/deployments/{dep}')['generate']['requests']:,}", 10)
    check(shown, f"[{label}] the figures show the API's generation count")

    # The engines: each replica's last heartbeat, as the API gives it (idle
    # now, so its figures settle within a heartbeat or two), the prefix
    # cache's blocks and hits included, in the cells' text too.
    fields = ("sequences", "waiting", "kv_blocks_used", "kv_blocks_total", "kv_blocks_cached", "prompt_tokens",
              "prefix_cache_hit_tokens", "generated_tokens")

    def engines_match(last):
        doc = api_call(base, key, "GET", f"/v1/deployments/{dep}")
        api_inst = {i["id"]: i.get("generate") for i in doc["instances"]}
        page = js(driver, """const num = (v) => (v === undefined ? null : Number(v));
          return Object.fromEntries([...document.querySelectorAll('#engines-body tr[data-instance-id]')]
            .map((r) => [r.dataset.instanceId, r.dataset.kvTotal === undefined ? null : {sequences: num(r.dataset.sequences),
              waiting: num(r.dataset.waiting), kv_blocks_used: num(r.dataset.kvUsed),
              kv_blocks_total: num(r.dataset.kvTotal), kv_blocks_cached: num(r.dataset.kvCached),
              prompt_tokens: num(r.dataset.prompt), prefix_cache_hit_tokens: num(r.dataset.prefixHit),
              generated_tokens: num(r.dataset.generated), text: [...r.cells].map((c) => c.textContent)}]));""")
        texts = {k: v and v.pop("text") for k, v in page.items()}
        want = {k: v and {f: v[f] for f in fields} for k, v in api_inst.items()}
        # The cells say the cached blocks and "hits of prompt tokens".
        said = all(v and texts.get(k) and texts[k][4] == f"{v['kv_blocks_cached']:,}"
                   and texts[k][6].startswith(f"{v['prefix_cache_hit_tokens']:,} of {v['prompt_tokens']:,} ")
                   for k, v in want.items())
        last.append((page, want, texts))
        return (page, want) if page == want and said and all(v and v["generated_tokens"] > 0 for v in want.values()) else None
    last = []
    got = settle(lambda: engines_match(last), 15)
    check(got, f"[{label}] the engines table has each replica's sequences, KV blocks (used, total, cached) "
          f"and tokens (prompt, from the prefix cache, generated) as the API says: {got or last[-1:]}")
    hits = got and [v for v in got[1].values() if v["prefix_cache_hit_tokens"] > 0 and v["kv_blocks_cached"] > 0]
    check(hits, f"[{label}] the repeated long prompt hit the prefix cache and left a cached block: {got}")

    # The deployment's figures: the cached blocks summed over its replicas.
    def cached_match():
        g = api_call(base, key, "GET", f"/v1/deployments/{dep}")["generate"]
        el = js(driver, "const e = document.getElementById('gen-kv-cached'); "
                "return e ? {n: Number(e.dataset.kvCached), text: e.textContent} : null;")
        return (el, g["kv_blocks_cached"]) if el and el["n"] == g["kv_blocks_cached"] \
            and el["text"] == f"{g['kv_blocks_cached']:,}" else None
    got = settle(cached_match, 15)
    check(got and got[1] > 0, f"[{label}] the figures show the API's cached KV blocks (kv_blocks_cached): {got}")
    js(driver, "document.getElementById('dep-generate').scrollIntoView();")
    dashboard.full_page_shot(driver, os.path.join(dashboard.ARTIFACTS, f"deployment-generate-{label}.png"))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    dashboard.ARTIFACTS = sys.argv[2] if len(sys.argv) > 2 else "build/browser-artifacts-generate"
    os.makedirs(dashboard.ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="trainyard-gen-")
    csv = os.path.join(tmp, "blobs.csv")
    make_csv(csv)
    srv, log, base = start_server(sys.argv[1], tmp)
    driver = None
    t0 = time.time()
    try:
        admin = open(os.path.join(tmp, "data", "admin.key")).read().strip()
        key = api_call(base, admin, "POST", "/v1/tenants", {"name": "gen-lab"})["key"]["api_key"]
        text_ds = upload_text(base, key, "hamlet")
        job = api_call(base, key, "POST", "/v1/jobs", {"name": "tiny-gpt", "dataset": text_ds,
                                                        "model": TINY, "hyperparameters": TINY_HP})["id"]
        csv_ds = upload_csv(base, key, csv, "blobs")
        cls_job = api_call(base, key, "POST", "/v1/jobs", {"name": "blobs-mlp", "dataset": csv_ds, "model": {"layers": [
            {"type": "dense", "units": 8}, {"type": "relu"}, {"type": "dense", "units": 3}]},
            "hyperparameters": {"epochs": 1}})["id"]
        for j in (job, cls_job):
            if wait_status(base, key, j, {"succeeded", "failed", "cancelled"}) != "succeeded":
                sys.exit(f"FAIL: job {j}: {json.dumps(api_call(base, key, 'GET', f'/v1/jobs/{j}'))}")
        model = api_call(base, key, "GET", f"/v1/jobs/{job}")["model"]
        cls_model = api_call(base, key, "GET", f"/v1/jobs/{cls_job}")["model"]
        spec = {"replicas": {"min": 1, "max": 1}, "resources": {"gpu": "none"}}
        dep = api_call(base, key, "POST", "/v1/deployments", {"name": "tiny-gen", "model": model, **spec})["id"]
        cls_dep = api_call(base, key, "POST", "/v1/deployments", {"name": "blobs-serve", "model": cls_model, **spec})["id"]
        end = time.time() + 90
        while any(api_call(base, key, "GET", f"/v1/deployments/{d}")["status"] != "ready" for d in (dep, cls_dep)):
            if time.time() > end:
                sys.exit(f"FAIL: the deployments are not ready: {api_call(base, key, 'GET', '/v1/deployments')}")
            time.sleep(0.2)
        driver = browser()
        driver.set_window_size(*WIDE)
        label = "wide"
        print(f"at {WIDE[0]}x{WIDE[1]}:", flush=True)
        sign_in(driver, base, key)

        go(driver, base, f"/deployments/{dep}", "#dep-try-it #gen-prompt")
        if check(driver.find_elements(By.ID, "gen-prompt"), f"[{label}] a language model's deployment has a Try it"):
            check_generation(driver, base, key, label, "tiny-gen", "the deployment's Try it")
            check_generation(driver, base, key, label, "tiny-gen", "the deployment's Try it", seed=5)
            check_charts(driver, base, key, label, dep)
            check_errors(driver, label)

        driver.set_window_size(*PHONE)
        if driver.find_elements(By.ID, "gen-prompt"):
            check_generation(driver, base, key, "phone", "tiny-gen", "the deployment's Try it", seed=7)
        fits = settle(lambda: dashboard.overflow(driver) <= 0, 5)
        check(fits, f"[phone] the deployment's page fits 390 px: {dashboard.overflow(driver)} px over")
        js(driver, "document.getElementById('dep-try-it').scrollIntoView();")
        dashboard.full_page_shot(driver, os.path.join(dashboard.ARTIFACTS, "deployment-generate-phone.png"))
        driver.set_window_size(*WIDE)

        go(driver, base, f"/deployments/{cls_dep}", "#dep-summary[data-status]")
        # Two polls later (the page's samples grow) nothing of generation is there.
        settle(lambda: int(js(driver, "return Number(document.getElementById('latency-chart').dataset.samples);")) >= 2, 10)
        none = js(driver, "return ['dep-generate', 'dep-try-it', 'ttft-chart', 'gen-prompt'].filter((id) => document.getElementById(id));")
        check(none == [], f"[{label}] a classifier's deployment has no generation charts or Try it: {none}")

        go(driver, base, f"/models/{model}", "#generate #gen-prompt")
        kept = js(driver, "return !!document.getElementById('lm-prompt') && !!document.getElementById('predict');")
        check(kept, f"[{label}] the model's page keeps its next-token Try it beside Generate")
        if check(driver.find_elements(By.ID, "gen-prompt"), f"[{label}] a language model's page has Generate"):
            check_generation(driver, base, key, label, model, "the model's Try it")
            check_generation(driver, base, key, label, model, "the model's Try it", seed=5)
            dashboard.full_page_shot(driver, os.path.join(dashboard.ARTIFACTS, f"model-generate-{label}.png"))

        errors = dashboard.severe_errors(driver, r"/generate_stream - Failed to load resource: .* 422")
        check(not errors, "no SEVERE browser console messages: " + " | ".join(errors))
        return dashboard.finish("generation dashboard test", t0, dashboard.ARTIFACTS)
    finally:
        dashboard.stop(driver, srv, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
