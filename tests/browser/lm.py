#!/usr/bin/env python3
"""Language models in the dashboard (issue 31's dashboard bullet), against
the real server, in headless Chromium at 1280x900 and 390x844.

Uploads a small text (the byte tokenizer) and a CSV through the API and
trains a tiny GPT on the text (2 transformer blocks, 32 channels, context
32, 30 steps: about a second on 2 cores). Then, at each width:

* the text dataset's page links to the new-job form for it ("Train a
  language model on it");
* the new-job form on the text dataset offers the "GPT (character)"
  template and Custom only (no image or tabular template), fills the spec
  (embedding 128, positional embedding, 4 transformer blocks of 4 heads,
  layernorm, lm_head) and its hyperparameters (context 64, batch 16, AdamW,
  learning rate 0.001), shows context length, max steps and validation
  every N steps, and the server's dry run passes; on the CSV those three
  fields are hidden and the GPT template is not offered; a job submitted
  from the form (wide only) carries context_length, max_steps and
  eval_every_steps, and Clone and edit of a GPT job fills them;
* the tiny GPT's page: the epoch table's train and validation perplexity
  and tokens/s are the API's epoch record's, the summary shows the
  perplexities and tokens/s, progress in steps, the loss chart in nats,
  the second chart perplexity, a link to Try it; Evaluate lists text and
  tokens datasets only and shows the API's windows, tokens, loss (nats)
  and perplexity;
* a running GPT with eval_every_steps 1 shows "Validation at step N" with
  its loss in nats (the job's metrics val_loss / val_step), and a point
  for it on the loss chart;
* the runs table has a Val. perplexity column with the job's value, and
  its throughput in tokens/s;
* the model's page shows tokenizer, context length and vocabulary size;
  Try it: a typed prompt's token count and ids are POST .../tokenize's;
  Next token lists 10 rows whose ids and probabilities are POST
  .../predict's for the same prompt, in order, each with a bar and its text
  drawn visibly (a space as ␣, a newline as ↵, no HTML); Append adds the
  top token to the prompt and predicts again; a model of token ids made
  elsewhere (no tokenizer) takes ids ("1 2 3"), names a word that is not
  one, shows each next token as its id, and appends ids;
* util.tokenText draws a token without text (part of a UTF-8 character) as
  its id, whitespace visibly, and never HTML.

Every failed check is listed. Any SEVERE browser console message fails the
test. Screenshots go to the folder given as the second argument.

Usage: lm.py path/to/trainyard [artifacts-dir]
Exit 77 (skipped) when chromium, chromedriver or selenium is missing.
"""
import json
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard  # noqa: E402  (skips with 77 itself when selenium or chromium is missing)
from dashboard import api_call, browser, check, js, make_csv, start_server  # noqa: E402
from devices import settle, upload_csv  # noqa: E402
from runs import go, sign_in, wait_status  # noqa: E402
from text import llmc_bin  # noqa: E402

from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

WIDE, PHONE = (1280, 900), (390, 844)
TEXT = ("To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n"
        "The slings and arrows of outrageous fortune,\nOr to take arms against a sea of troubles\n"
        "And by opposing end them. To die, to sleep;\nNo more; and by a sleep to say we end\n") * 24
TINY = {"layers": [{"type": "embedding", "dim": 32}, {"type": "positional_embedding"},
                   {"type": "transformer_block", "heads": 4}, {"type": "transformer_block", "heads": 4},
                   {"type": "layernorm"}, {"type": "lm_head"}]}
TINY_HP = {"context_length": 32, "batch_size": 8, "optimizer": "adamw", "learning_rate": 0.003,
           "max_steps": 30, "eval_every_steps": 10, "seed": 1}
PROMPT = "To be, or not"
VISIBLE = {" ": "␣", "\n": "↵", "\t": "→", "\r": "␍"}


def upload_text(base, key, name, fmt="text", data=None, vocab=None):
    """TEXT as a text dataset; or (fmt "tokens") a token file with its vocabulary size."""
    boundary = "tylm31"
    body = b""
    parts = [("name", None, name.encode()), ("format", None, fmt.encode()),
             ("file", "hamlet.txt" if fmt == "text" else "ids.bin", TEXT.encode() if data is None else data)]
    if vocab:
        parts.append(("vocab_size", None, str(vocab).encode()))
    for field, filename, data in parts:
        disp = f'form-data; name="{field}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return api_call(base, key, "POST", "/v1/datasets", body, f"multipart/form-data; boundary={boundary}")["id"]


def visible(t):
    """The text a token row should show (util.tokenText's rule, for the
    characters a byte tokenizer's next tokens have)."""
    if t["text"] is None:
        return f"⟨{t['id']}⟩"
    return "".join(VISIBLE.get(ch, ch) for ch in t["text"])


def ppl(x):
    return f"{x:.2f}" if x < 1000 else f"{x:,.1f}"


def check_form(driver, base, key, label, text_ds, csv_ds):
    go(driver, base, f"/datasets/{text_ds}", "#train-link")
    link = js(driver, "const a = document.getElementById('train-link'); return a && [a.innerText, a.getAttribute('href')];")
    check(link == ["Train a language model on it", f"#/new?dataset={text_ds}"],
          f"[{label}] the text dataset's page links to the new-job form for it: {link}")

    go(driver, base, f"/new?dataset={text_ds}", "#job-template option")
    settle(lambda: js(driver, "return document.getElementById('job-dataset').value;") == text_ds, 10)
    form = settle(lambda: (lambda f: f if f["templates"] and f["templates"][0] == "gpt-char" else None)(js(driver, """
        const shown = (id) => { const e = document.getElementById(id); return !!e && !e.closest('.field').hidden; };
        return {templates: [...document.querySelectorAll('#job-template option')].map((o) => o.value),
                chosen: document.getElementById('job-template').value,
                val: [...document.querySelectorAll('#job-validation-source option')].filter((o) => o.value && !o.hidden).map((o) => o.textContent),
                spec: document.getElementById('job-spec').value,
                lm: ['hp-context_length', 'hp-max_steps', 'hp-eval_every_steps'].map(shown),
                hp: Object.fromEntries(['context_length', 'batch_size', 'optimizer', 'learning_rate', 'max_steps', 'eval_every_steps']
                      .map((k) => [k, document.getElementById('hp-' + k)?.value]))};""")), 10) or {}
    check(form.get("templates") == ["gpt-char", "custom"] and form.get("chosen") == "gpt-char",
          f"[{label}] a text dataset is offered the GPT (character) template and Custom only: {form.get('templates')}")
    try:
        layers = json.loads(form.get("spec", ""))["layers"]
    except (ValueError, KeyError):
        layers = []
    types = [x.get("type") for x in layers]
    check(types == ["embedding", "positional_embedding"] + ["transformer_block"] * 4 + ["layernorm", "lm_head"]
          and layers[0].get("dim") == 128 and all(x.get("heads") == 4 for x in layers[2:6]),
          f"[{label}] the GPT template's spec: embedding 128, positional, 4 blocks of 4 heads, layernorm, lm_head: {types}")
    hp = form.get("hp", {})
    check(form.get("lm") == [True, True, True] and hp.get("context_length") == "64" and hp.get("batch_size") == "16"
          and hp.get("optimizer") == "adamw" and float(hp.get("learning_rate") or 0) == 0.001
          and int(hp.get("max_steps") or 0) > 0 and int(hp.get("eval_every_steps") or 0) > 0,
          f"[{label}] the LM fields are shown with the template's hyperparameters: {form.get('lm')} {hp}")
    check(form.get("val") and all("hamlet" in v or "ids" in v for v in form["val"]),
          f"[{label}] the validation picker of a text dataset offers text and tokens datasets only: {form.get('val')}")
    est = settle(lambda: (lambda t: t if "checks pass" in t or "not available" in t else None)(
        js(driver, "return document.getElementById('job-estimate').innerText;")), 20) or ""
    check("checks pass" in est, f"[{label}] the server's dry run of the GPT template passes: {est}")
    dashboard.shot(driver, f"new-gpt-{label}")

    Select(driver.find_element(By.ID, "job-dataset")).select_by_value(csv_ds)
    other = settle(lambda: (lambda f: f if "gpt-char" not in f["templates"] else None)(js(driver, """
        const shown = (e) => !!e && !(e.closest('.field') || e).hidden;
        return {templates: [...document.querySelectorAll('#job-template option')].map((o) => o.value),
                lm: ['hp-context_length', 'hp-max_steps', 'hp-eval_every_steps'].map((id) => shown(document.getElementById(id))),
                hint: shown(document.getElementById('lm-hint')),
                val: [...document.querySelectorAll('#job-validation-source option')].filter((o) => o.value && !o.hidden).map((o) => o.textContent)};""")), 10) or {}
    check(other.get("templates") and "gpt-char" not in other["templates"] and not any(other.get("lm", [True]))
          and not other.get("hint"),
          f"[{label}] on a CSV the GPT template and the LM fields are not offered: {other}")
    check(other.get("val") and not any("hamlet" in v or "ids" in v for v in other["val"]),
          f"[{label}] the validation picker of a CSV offers no text dataset: {other.get('val')}")

    if label != "wide" or not driver.find_elements(By.ID, "hp-max_steps"):
        return
    # Submitted from the form (5 steps): the LM hyperparameters go with it.
    Select(driver.find_element(By.ID, "job-dataset")).select_by_value(text_ds)
    settle(lambda: js(driver, "return document.getElementById('job-template').value;") == "gpt-char", 10)
    for k, v in (("max_steps", "5"), ("eval_every_steps", "5")):
        box = driver.find_element(By.ID, f"hp-{k}")
        box.clear()
        box.send_keys(v)
    driver.find_element(By.ID, "job-name").send_keys("gpt-from-form")
    driver.find_element(By.CSS_SELECTOR, "#job-form button[type=submit]").click()
    got = settle(lambda: js(driver, "return location.hash.startsWith('#/jobs/job_') ? location.hash.slice(7) : null;"), 20)
    check(got, f"[{label}] the GPT job is submitted from the form")
    if got:
        job = api_call(base, key, "GET", f"/v1/jobs/{got}")
        hp = job["hyperparameters"]
        check(hp.get("context_length") == 64 and hp.get("max_steps") == 5 and hp.get("eval_every_steps") == 5
              and hp.get("optimizer") == "adamw" and hp.get("batch_size") == 16,
              f"[{label}] the form's job carries the LM hyperparameters: "
              f"{ {k: hp.get(k) for k in ('context_length', 'max_steps', 'eval_every_steps', 'optimizer', 'batch_size')} }")
        if job["status"] not in ("succeeded", "failed", "cancelled"):
            api_call(base, key, "POST", f"/v1/jobs/{got}/cancel")


def check_clone(driver, base, label, job):
    """Clone and edit of the tiny GPT: its LM hyperparameters in their fields."""
    go(driver, base, f"/new?from={job}", "#job-form")
    got = settle(lambda: (lambda f: f if f["title"].startswith("New job: a copy") and f["ctx"] == "32" else None)(js(driver, """
        const v = (id) => document.getElementById(id)?.value;
        return {title: document.querySelector('main h1').textContent, template: v('job-template'),
                ctx: v('hp-context_length'), steps: v('hp-max_steps'), every: v('hp-eval_every_steps'),
                shown: !document.getElementById('hp-context_length')?.closest('.field').hidden};""")), 10) or {}
    check(got.get("ctx") == "32" and got.get("steps") == "30" and got.get("every") == "10" and got.get("shown")
          and got.get("template") == "custom",
          f"[{label}] Clone and edit of a GPT job fills context length, max steps and validation every N steps: {got}")


def check_job_page(driver, base, key, label, job):
    doc = api_call(base, key, "GET", f"/v1/jobs/{job}")
    rec = api_call(base, key, "GET", f"/v1/jobs/{job}/metrics")["epochs"][-1]
    go(driver, base, f"/jobs/{job}", "#epochs tbody tr")
    table = settle(lambda: js(driver, """
        const heads = [...document.querySelectorAll('#epochs thead th')].map((t) => t.textContent);
        const row = document.querySelector('#epochs tbody tr');
        return row ? {heads, cells: [...row.children].map((t) => t.textContent)} : null;"""), 20) or {}
    heads, cells = table.get("heads", []), table.get("cells", [])
    col = {h: cells[i] for i, h in enumerate(heads) if i < len(cells)}
    check(col.get("Train perplexity") == ppl(rec["train_perplexity"]) and col.get("Val. perplexity") == ppl(rec["val_perplexity"])
          and col.get("Tokens/s") == f"{round(rec['tokens_per_second']):,}" and "Train loss (nats)" in heads,
          f"[{label}] the epoch table's perplexities and tokens/s are the record's: {col} vs "
          f"{ppl(rec['train_perplexity'])}, {ppl(rec['val_perplexity'])}, {round(rec['tokens_per_second']):,}")
    stats = js(driver, """return Object.fromEntries([...document.querySelectorAll('#job-summary .stat')]
        .map((s) => [s.id, s.querySelector('.stat-value').textContent]));""")
    m = doc["metrics"]
    check(stats.get("stat-perplexity") == f"val. {ppl(m['val_perplexity'])} · train {ppl(m['train_perplexity'])}",
          f"[{label}] the summary shows the perplexities: {stats.get('stat-perplexity')}")
    check(stats.get("stat-throughput") == f"{round(m['tokens_per_second']):,} tokens/s",
          f"[{label}] the summary shows tokens/s: {stats.get('stat-throughput')}")
    check("perplexity" in stats.get("stat-best", "") and "nats" in stats.get("stat-best", ""),
          f"[{label}] the best is told as a perplexity and a loss in nats: {stats.get('stat-best')}")
    progress = js(driver, "return document.querySelector('#job-summary .progress-text')?.textContent;")
    check(progress == "30 steps", f"[{label}] the progress is in steps: {progress!r}")
    charts = js(driver, """const l = document.getElementById('loss-chart'), a = document.getElementById('acc-chart');
        return {loss: l.getAttribute('aria-label'), acc: a.getAttribute('aria-label'), series: a.dataset.series,
                title: window.Chart ? Chart.getChart(l)?.options.scales.y.title.text : 'loss (nats)'};""")
    check(charts["loss"].startswith("Loss in nats") and charts["title"] == "loss (nats)"
          and charts["acc"] == "Perplexity per epoch" and int(charts["series"] or 0) >= 1,
          f"[{label}] the loss chart is in nats, the second chart draws perplexity: {charts}")
    actions = js(driver, """return {evaluate: !!document.getElementById('show-evaluate'),
        tryit: document.getElementById('try-model')?.getAttribute('href')};""")
    check(actions["tryit"] == f"#/models/{doc['model']}", f"[{label}] a language model's job links to its Try it: {actions}")
    if check(actions["evaluate"], f"[{label}] a language model's job can be evaluated"):
        check_evaluate(driver, base, key, label, doc)
    check(dashboard.overflow(driver) <= 0, f"[{label}] the job's page fits the window")
    dashboard.full_page_shot(driver, os.path.join(dashboard.ARTIFACTS, f"gpt-job-{label}.png"))


def check_evaluate(driver, base, key, label, doc):
    """Evaluate... on a language model: text and tokens datasets only;
    windows, tokens, loss in nats and perplexity as POST .../evaluate says."""
    driver.find_element(By.ID, "show-evaluate").click()
    names = settle(lambda: js(driver, "return [...document.querySelectorAll('#eval-dataset option')].map((o) => o.textContent);"), 10) or []
    check(names and not any(n.startswith("blobs") for n in names),
          f"[{label}] the evaluate picker of a language model lists text and tokens datasets only: {names}")
    chosen = js(driver, "return document.getElementById('eval-dataset').value;")
    check(chosen == doc["dataset"], f"[{label}] with no other text of its tokenizer, the training text is chosen: {chosen}")
    driver.find_element(By.CSS_SELECTOR, "#evaluate button[type=submit]").click()
    got = settle(lambda: js(driver, """const r = document.getElementById('eval-result');
        return r.dataset.perplexity ? Object.fromEntries([...r.querySelectorAll('dt')].map((t) => [t.textContent, t.nextElementSibling.textContent])) : null;"""), 20) or {}
    want = api_call(base, key, "POST", f"/v1/models/{doc['model']}/evaluate", {"dataset": doc["dataset"]})
    check(got.get("Perplexity") == ppl(want["perplexity"]) and got.get("Loss (nats)") == f"{want['loss']:.4f}"
          and got.get("Windows") == f"{want['num_examples']:,}" and got.get("Tokens") == f"{want['num_tokens']:,}",
          f"[{label}] Evaluate shows the API's windows, tokens, loss (nats) and perplexity: {got} vs {want}")


def check_step_val(driver, base, key, label, running):
    go(driver, base, f"/jobs/{running}", "#job-summary")
    got = settle(lambda: js(driver, """const s = document.getElementById('stat-step-val');
        return s ? {label: s.querySelector('.stat-label').textContent, value: s.querySelector('.stat-value').textContent,
                    points: document.getElementById('loss-chart').dataset.stepVals} : null;"""), 30) or {}
    ok = got.get("label", "").startswith("Validation at step ") and " nats · perplexity " in got.get("value", "")
    step = int(got["label"].rsplit(" ", 1)[1].replace(",", "")) if ok else 0
    check(ok and step > 0 and int(got.get("points") or 0) >= 1,
          f"[{label}] a running job shows its validation loss at a step, and draws it: {got}")
    # The picture is an artifact, not a check: while the job trains on both
    # cores the renderer may not answer in time (seen once in a CI-like run).
    try:
        dashboard.full_page_shot(driver, os.path.join(dashboard.ARTIFACTS, f"gpt-running-{label}.png"))
    except TimeoutException:
        print(f"  (no screenshot of the running job at {label}: the renderer was busy)")


def check_runs(driver, base, key, label, job):
    m = api_call(base, key, "GET", f"/v1/jobs/{job}")["metrics"]
    go(driver, base, "/jobs", f"#jobs-body tr[data-job-id='{job}'] td[data-metric='val_perplexity']")
    got = js(driver, f"""const r = document.querySelector("#jobs-body tr[data-job-id='{job}']");
        return {{ppl: r.querySelector("td[data-metric='val_perplexity']")?.textContent,
                 heads: [...document.querySelectorAll('#jobs thead th')].map((t) => t.textContent),
                 tput: r.querySelector('.throughput')?.textContent}};""")
    check(got["ppl"] == f"{m['val_perplexity']:.4f}" and any(h.startswith("Val. perplexity") for h in got["heads"]),
          f"[{label}] the runs table has the job's validation perplexity: {got['ppl']} vs {m['val_perplexity']:.4f}")
    check(got["tput"] == f"throughput {round(m['tokens_per_second']):,} tokens/s",
          f"[{label}] the runs table's throughput is in tokens/s: {got['tput']}")


def predicted_rows(driver):
    return js(driver, """return [...document.querySelectorAll('#next-tokens tbody tr')].map((r) => ({
        id: Number(r.dataset.tokenId), p: Number(r.dataset.probability),
        text: r.querySelector('td.token-cell').textContent,
        tags: [...r.querySelectorAll('td.token-cell *')].map((e) => e.tagName),
        bar: r.querySelector('.bar-fill').getBoundingClientRect().width}));""")


def check_model(driver, base, key, label, model):
    go(driver, base, f"/models/{model}", "#lm-prompt")
    facts = js(driver, "return Object.fromEntries([...document.querySelectorAll('#model dt')].map((t) => [t.innerText, t.nextElementSibling.innerText]));")
    check(facts.get("Tokenizer") == "byte" and facts.get("Context length") == "32 tokens" and facts.get("Vocabulary size") == "256",
          f"[{label}] the model shows tokenizer, context length and vocabulary size: {facts}")
    if not check(driver.find_elements(By.ID, "lm-prompt"), f"[{label}] a language model's Try it has a prompt"):
        return
    box = driver.find_element(By.ID, "lm-prompt")
    box.send_keys(PROMPT)
    want_ids = api_call(base, key, "POST", f"/v1/models/{model}/tokenize", {"content": PROMPT})["tokens"]
    count = settle(lambda: js(driver, "return document.getElementById('prompt-tokens').dataset.count;") == str(len(want_ids)), 10)
    ids = js(driver, "return document.getElementById('prompt-token-ids')?.textContent;")
    check(count and ids == " ".join(map(str, want_ids)),
          f"[{label}] the prompt's token count and ids are the tokenizer's: {ids} vs {want_ids}")

    driver.find_element(By.ID, "predict").click()
    rows = settle(lambda: (lambda r: r if len(r) == 10 else None)(predicted_rows(driver)), 20) or []
    want = api_call(base, key, "POST", f"/v1/models/{model}/predict", {"inputs": [PROMPT], "top_k": 10})["predictions"][0]["next_tokens"]
    check([r["id"] for r in rows] == [t["id"] for t in want]
          and all(abs(r["p"] - t["probability"]) < 1e-6 for r, t in zip(rows, want)),
          f"[{label}] 10 next-token rows with the API's ids and probabilities, in order: "
          f"{[(r['id'], round(r['p'], 4)) for r in rows]} vs {[(t['id'], round(t['probability'], 4)) for t in want]}")
    check(rows and [r["text"] for r in rows] == [visible(t) for t in want]
          and all(set(r["tags"]) <= {"CODE", "SPAN"} for r in rows),
          f"[{label}] each token's text is shown visibly and as text: {[r['text'] for r in rows]}")
    said = js(driver, "return document.getElementById('prediction').innerText;")
    check("null" not in said and "undefined" not in said, f"[{label}] no null or undefined in the prediction: {said[:80]!r}")
    check(rows and rows[0]["bar"] > 0 and all(a["bar"] >= b["bar"] for a, b in zip(rows, rows[1:])),
          f"[{label}] a bar per probability, longest first: {[round(r['bar']) for r in rows]}")
    dashboard.full_page_shot(driver, os.path.join(dashboard.ARTIFACTS, f"gpt-try-it-{label}.png"))

    # Append: the top token goes on the prompt, which is predicted again.
    top = want[0]
    first = driver.find_element(By.CSS_SELECTOR, "#next-tokens tbody tr button.append-token")
    first.click()
    grown = settle(lambda: box.get_attribute("value") == PROMPT + top["text"] and
                   js(driver, "return document.getElementById('prompt-tokens').dataset.count;") == str(len(want_ids) + 1), 10)
    again = api_call(base, key, "POST", f"/v1/models/{model}/predict",
                     {"inputs": [PROMPT + top["text"]], "top_k": 10})["predictions"][0]["next_tokens"]
    rows2 = settle(lambda: (lambda r: r if [x["id"] for x in r] == [t["id"] for t in again] else None)(predicted_rows(driver)), 10)
    check(grown and rows2, f"[{label}] Append adds the top token ({visible(top)}) to the prompt and predicts again")
    check(dashboard.overflow(driver) <= 0, f"[{label}] the model's page fits the window")


def check_ids_model(driver, base, key, label, model):
    """Try it on a model of token ids made elsewhere (no tokenizer): the
    prompt is ids, sent as ids."""
    go(driver, base, f"/models/{model}", "#lm-prompt")
    field = js(driver, "return document.querySelector('label[for=lm-prompt]')?.textContent;")
    check(field and "token ids" in field, f"[{label}] a model without a tokenizer asks for token ids: {field!r}")
    box = driver.find_element(By.ID, "lm-prompt")
    box.send_keys("1 2 x")
    bad = settle(lambda: (lambda t: t if "not a token id" in t else None)(js(driver, "return document.getElementById('prompt-tokens').textContent;")), 10)
    check(bad and '"x"' in bad, f"[{label}] a word that is not a token id is named: {bad!r}")
    box.send_keys(Keys.BACKSPACE, "3")
    count = settle(lambda: js(driver, "return document.getElementById('prompt-tokens').dataset.count;") == "3", 10)
    driver.find_element(By.ID, "predict").click()
    want = api_call(base, key, "POST", f"/v1/models/{model}/predict", {"inputs": [[1, 2, 3]], "top_k": 10})["predictions"][0]["next_tokens"]
    rows = settle(lambda: (lambda r: r if len(r) == len(want) else None)(predicted_rows(driver)), 20) or []
    check(count and [r["id"] for r in rows] == [t["id"] for t in want]
          and all(abs(r["p"] - t["probability"]) < 1e-6 for r, t in zip(rows, want))
          and [r["text"] for r in rows] == [f"⟨{t['id']}⟩" for t in want],
          f"[{label}] ids 1 2 3 predict as the API does, each token shown as its id: {[r['text'] for r in rows][:4]}")
    driver.find_element(By.CSS_SELECTOR, "#next-tokens tbody tr button.append-token").click()
    grown = settle(lambda: box.get_attribute("value") == f"1 2 3 {want[0]['id']}", 10)
    check(grown, f"[{label}] Append adds the top token's id to the prompt: {box.get_attribute('value')!r}")


def check_token_text(driver, label):
    got = driver.execute_async_script("""const done = arguments[arguments.length - 1];
        import('/web/util.js').then(({tokenText}) => {
          const show = (t) => { const e = tokenText(t); return {text: e.textContent, tags: [...e.querySelectorAll('*')].map((x) => x.tagName)}; };
          done([show({id: 195, text: null}), show({id: 10, text: '\\n'}), show({id: 1, text: ' a\\tb'}),
                show({id: 2, text: '<b>x</b>'}), show({id: 3, text: '\\u200b'})]);
        }).catch((e) => done(String(e)));""")
    want = ["⟨195⟩", "↵", "␣a→b", "<b>x</b>", "U+200B"]
    check(isinstance(got, list) and [g["text"] for g in got] == want and all(set(g["tags"]) <= {"SPAN"} for g in got),
          f"[{label}] tokenText: no text as the id, whitespace visibly, HTML as text: {got}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    dashboard.ARTIFACTS = sys.argv[2] if len(sys.argv) > 2 else "build/browser-artifacts-lm"
    os.makedirs(dashboard.ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="trainyard-lm-")
    csv = os.path.join(tmp, "blobs.csv")
    make_csv(csv)
    srv, log, base = start_server(sys.argv[1], tmp)
    driver = running = None
    t0 = time.time()
    try:
        admin = open(os.path.join(tmp, "data", "admin.key")).read().strip()
        key = api_call(base, admin, "POST", "/v1/tenants", {"name": "lm-lab"})["key"]["api_key"]
        text_ds = upload_text(base, key, "hamlet")
        csv_ds = upload_csv(base, key, csv, "blobs")
        job = api_call(base, key, "POST", "/v1/jobs", {"name": "tiny-gpt", "dataset": text_ds,
                                                        "model": TINY, "hyperparameters": TINY_HP})["id"]
        if wait_status(base, key, job, {"succeeded", "failed", "cancelled"}) != "succeeded":
            sys.exit(f"FAIL: the tiny GPT: {json.dumps(api_call(base, key, 'GET', f'/v1/jobs/{job}'))}")
        model = api_call(base, key, "GET", f"/v1/jobs/{job}")["model"]
        # A model of token ids made elsewhere (an llm.c .bin, vocabulary 50).
        ids = [(7 * i) % 50 for i in range(3000)]
        tokens_ds = upload_text(base, key, "ids", "tokens", llmc_bin(ids), 50)
        ids_job = api_call(base, key, "POST", "/v1/jobs", {"name": "ids-gpt", "dataset": tokens_ds, "model": TINY,
                                                            "hyperparameters": {**TINY_HP, "context_length": 16, "max_steps": 5}})["id"]
        if wait_status(base, key, ids_job, {"succeeded", "failed", "cancelled"}) != "succeeded":
            sys.exit(f"FAIL: the token-id GPT: {json.dumps(api_call(base, key, 'GET', f'/v1/jobs/{ids_job}'))}")
        ids_model = api_call(base, key, "GET", f"/v1/jobs/{ids_job}")["model"]
        m = api_call(base, key, "GET", f"/v1/jobs/{job}")["metrics"]
        print(f"tiny GPT: val perplexity {m['val_perplexity']:.2f} (uniform {math.exp(math.log(256)):.0f}), "
              f"{m['tokens_per_second']:.0f} tokens/s", flush=True)
        driver = browser()
        for size, label in ((WIDE, "wide"), (PHONE, "phone")):
            print(f"at {size[0]}x{size[1]}:", flush=True)
            driver.set_window_size(*size)
            sign_in(driver, base, key)
            check_form(driver, base, key, label, text_ds, csv_ds)
            check_job_page(driver, base, key, label, job)
            if label == "wide":
                check_clone(driver, base, label, job)
            check_runs(driver, base, key, label, job)
            check_model(driver, base, key, label, model)
            check_token_text(driver, label)
            if label == "wide":
                check_ids_model(driver, base, key, label, ids_model)
        # A long run validated every step: its page shows the latest step's
        # validation loss (cancelled once seen).
        running = api_call(base, key, "POST", "/v1/jobs", {"name": "gpt-evaluated", "dataset": text_ds, "model": TINY,
                                                            "hyperparameters": {**TINY_HP, "max_steps": 1000000, "epochs": 100000,
                                                                                "eval_every_steps": 1}})["id"]
        wait_status(base, key, running, {"running"})
        check_step_val(driver, base, key, "phone", running)
        errors = dashboard.severe_errors(driver)
        check(not errors, "no SEVERE browser console messages: " + " | ".join(errors))
        return dashboard.finish("language-model dashboard test", t0, dashboard.ARTIFACTS)
    finally:
        if running:
            try:
                api_call(base, key, "POST", f"/v1/jobs/{running}/cancel")
            except OSError:
                pass
        dashboard.stop(driver, srv, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
