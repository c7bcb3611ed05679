#!/usr/bin/env python3
"""Text and tokens datasets in the dashboard (issue 31's first slice),
against the real server, in headless Chromium at 1280x900 and 390x844.

At each width:

* the upload form's "text" format takes a UTF-8 file (the file part is
  labelled for text), uploads it, and says how many tokens it made;
* the "tokens" format asks for a vocabulary size, and a token file with an
  id past it is refused under the form with the server's message (its
  position);
* the datasets list shows a text dataset's size in tokens, not
  "undefined" examples;
* a text dataset's page shows tokens, vocabulary and tokenizer instead of
  examples and input shape, links to the new-job form for it ("Train a
  language model on it"; lm.py checks the form), and its first windows are
  the text as uploaded, 64 bytes each;
* the "csv" format shows a text column field (and, once it is filled, a max
  length field, hiding the task); a CSV uploaded with them is a text
  classification dataset whose page shows its text column, tokenizer and
  token counts, and whose first examples are each row's text as tokenized
  (cut at max length), its token count and its label; a text column the
  CSV lacks is refused under its field.

Every failed check is listed. Any SEVERE browser console message fails the
test. Screenshots go to the folder given as the second argument.

Usage: text.py path/to/trainyard [artifacts-dir]
Exit 77 (skipped) when chromium, chromedriver or selenium is missing.
"""
import os
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard  # noqa: E402  (skips with 77 itself when selenium or chromium is missing)
from dashboard import api_call, browser, check, js, start_server  # noqa: E402
from devices import settle  # noqa: E402
from runs import go, sign_in  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

WIDE, PHONE = (1280, 900), (390, 844)
# Two lines of UTF-8 with a multi-byte character, longer than two windows.
TEXT = ("To be, or not to be, that is the question: whether 'tis nobler in the "
        "mind to suffer the slings and arrows of outrageous fortune — or to take "
        "arms against a sea of troubles.\n") * 2


def llmc_bin(ids):
    """llm.c's token file: 256 int32 (magic 20240520, version 1, count), then uint16 ids."""
    head = struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253))
    return head + struct.pack(f"<{len(ids)}H", *ids)


def upload_in_form(driver, base, fmt, name, path, vocab=None):
    go(driver, base, "/datasets", "#upload-form")
    driver.find_element(By.ID, "ds-name").send_keys(name)
    Select(driver.find_element(By.ID, "ds-format")).select_by_value(fmt)
    if vocab is not None:
        driver.find_element(By.ID, "ds-vocab_size").send_keys(str(vocab))
    driver.find_element(By.ID, "ds-file").send_keys(path)
    driver.find_element(By.CSS_SELECTOR, "#upload-form button[type=submit]").click()
    return settle(lambda: js(driver, """const r = document.getElementById('upload-result').innerText,
        e = [...document.querySelectorAll('#upload-form .field-error, #upload-error')].map((x) => x.innerText.trim()).filter(Boolean).join(' ');
        return (r || e) ? {result: r, error: e} : null;"""), 20) or {}


REVIEWS = 'review,label\n"loved it, would watch again",pos\nmeh,neg\n,pos\n'


def check_text_csv(driver, base, key, label, csv_path):
    go(driver, base, "/datasets", "#upload-form")
    fields = """const shown = (id) => !document.getElementById(id).closest('.field').hidden;
        return {text: shown('ds-text_column'), len: shown('ds-max_length'), task: shown('ds-task')};"""
    Select(driver.find_element(By.ID, "ds-format")).select_by_value("text")
    other = js(driver, fields)
    Select(driver.find_element(By.ID, "ds-format")).select_by_value("csv")
    csv_empty = js(driver, fields)
    driver.find_element(By.ID, "ds-text_column").send_keys("review")
    csv_text = js(driver, fields)
    check(not other["text"] and csv_empty == {"text": True, "len": False, "task": True}
          and csv_text == {"text": True, "len": True, "task": False},
          f"[{label}] the text column shows for csv only, max length once it is filled: {other} {csv_empty} {csv_text}")

    def send(name, column):
        go(driver, base, "/datasets", "#upload-form")
        driver.find_element(By.ID, "ds-name").send_keys(name)
        Select(driver.find_element(By.ID, "ds-format")).select_by_value("csv")
        driver.find_element(By.ID, "ds-label_column").send_keys("label")
        driver.find_element(By.ID, "ds-text_column").send_keys(column)
        driver.find_element(By.ID, "ds-max_length").send_keys("12")
        driver.find_element(By.ID, "ds-file").send_keys(csv_path)
        driver.find_element(By.CSS_SELECTOR, "#upload-form button[type=submit]").click()
        return settle(lambda: js(driver, """const r = document.getElementById('upload-result').innerText,
            e = document.getElementById('ds-text_column').closest('.field').querySelector('.field-error');
            return (r || (e && e.innerText)) ? {result: r, error: e ? e.innerText : ''} : null;"""), 20) or {}

    bad = send(f"reviews-bad-{label}", "body")
    check("body" in bad.get("error", "") and not bad.get("result"),
          f"[{label}] a text column the CSV lacks is refused under its field: {bad}")
    got = send(f"reviews-{label}", "review")
    check("3 examples" in got.get("result", ""), f"[{label}] the text CSV uploads: {got}")
    items = api_call(base, key, "GET", "/v1/datasets?limit=200")["items"]
    ds = next(d for d in items if d["name"] == f"reviews-{label}")
    check(ds.get("text_column") == "review" and ds.get("max_length") == 12,
          f"[{label}] the form sent text_column and max_length: {ds}")
    go(driver, base, f"/datasets/{ds['id']}", "#text-rows tbody tr")
    facts = js(driver, """return Object.fromEntries([...document.querySelectorAll('#dataset dt')].map((t) => [t.innerText, t.nextElementSibling.innerText]));""")
    check(facts.get("Text column") == "review" and facts.get("Tokenizer") == "byte"
          and facts.get("Max length") == "12 tokens" and facts.get("Tokens") == "30 (1 example truncated)",
          f"[{label}] the page shows the text column, tokenizer, max length and tokens: {facts}")
    rows = js(driver, "return [...document.querySelectorAll('#text-rows tbody tr')].map((r) => [...r.cells].map((c) => c.innerText));")
    want = [["0", "loved it, wo", "12", "pos"], ["1", "meh", "3", "neg"], ["2", "", "0", "pos"]]
    check(rows == want, f"[{label}] the first examples are the rows as tokenized: {rows} vs {want}")
    check(dashboard.overflow(driver) <= 0, f"[{label}] the text classification page fits the window")
    dashboard.shot(driver, f"text-csv-{label}")


def check_width(driver, base, key, label, text_path, bad_path):
    # The form: the file part's label follows the format; tokens asks for a vocabulary.
    go(driver, base, "/datasets", "#upload-form")
    Select(driver.find_element(By.ID, "ds-format")).select_by_value("text")
    shown = js(driver, """const f = document.getElementById('ds-file').closest('.field');
        const v = document.getElementById('ds-vocab_size').closest('.field');
        return {file: f.hidden ? null : f.querySelector('label').innerText, vocab: !v.hidden};""")
    check(shown["file"] == "Text file (UTF-8)" and not shown["vocab"],
          f"[{label}] format text: the file part is labelled for text, no vocabulary field: {shown}")
    Select(driver.find_element(By.ID, "ds-format")).select_by_value("tokens")
    vocab_shown = js(driver, "return !document.getElementById('ds-vocab_size').closest('.field').hidden;")
    check(vocab_shown, f"[{label}] format tokens asks for a vocabulary size")

    got = upload_in_form(driver, base, "text", f"hamlet-{label}", text_path)
    tokens = len(TEXT.encode())
    check(f"{tokens:,} tokens" in got.get("result", ""),
          f"[{label}] a text upload says how many tokens it made ({tokens:,}): {got}")
    bad = upload_in_form(driver, base, "tokens", f"bad-ids-{label}", bad_path, vocab=100)
    check("token 3 " in bad.get("error", "") and "vocab_size 100" in bad.get("error", "") and not bad.get("result"),
          f"[{label}] a token id past the vocabulary is refused under the form, naming its position: {bad}")
    dashboard.shot(driver, f"upload-{label}")

    items = api_call(base, key, "GET", "/v1/datasets?limit=200")["items"]
    ds = next(d for d in items if d["name"] == f"hamlet-{label}")
    go(driver, base, "/datasets", f"#datasets-body tr[data-dataset-id='{ds['id']}']")
    row = js(driver, f"""return [...document.querySelectorAll("#datasets-body tr[data-dataset-id='{ds['id']}'] td")].map((t) => t.innerText);""")
    check(f"{tokens:,} tokens" in row and "undefined" not in " ".join(row),
          f"[{label}] the list shows the text dataset's size in tokens: {row}")

    go(driver, base, f"/datasets/{ds['id']}", "#preview pre.token-window")
    facts = js(driver, """return Object.fromEntries([...document.querySelectorAll('#dataset dt')].map((t) => [t.innerText, t.nextElementSibling.innerText]));""")
    check(facts.get("Tokens") == f"{tokens:,}" and facts.get("Vocabulary") == "256" and facts.get("Tokenizer") == "byte"
          and "Examples" not in facts and "Input shape" not in facts,
          f"[{label}] the page shows tokens, vocabulary and tokenizer, not examples and input shape: {facts}")
    train_link = js(driver, "return [...document.querySelectorAll('#dataset a')].map((a) => [a.innerText, a.getAttribute('href')]);")
    check(["Train a language model on it", f"#/new?dataset={ds['id']}"] in train_link,
          f"[{label}] a text dataset's page links to training a language model on it: {train_link}")
    windows = js(driver, "return [...document.querySelectorAll('#preview pre.token-window')].map((p) => p.textContent);")
    raw = TEXT.encode()
    want = [raw[i * 64:(i + 1) * 64].decode("utf-8", errors="replace") for i in range(len(windows))]
    check(windows and windows == want,
          f"[{label}] the first windows are the text as uploaded, 64 bytes each: {windows[:1]} vs {want[:1]}")
    check(dashboard.overflow(driver) <= 0, f"[{label}] the text dataset's page fits the window")
    dashboard.shot(driver, f"text-dataset-{label}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    dashboard.ARTIFACTS = sys.argv[2] if len(sys.argv) > 2 else "build/browser-artifacts-text"
    os.makedirs(dashboard.ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="trainyard-text-")
    text_path, bad_path = os.path.join(tmp, "hamlet.txt"), os.path.join(tmp, "bad.bin")
    csv_path = os.path.join(tmp, "reviews.csv")
    with open(csv_path, "w", encoding="utf-8") as f:
        f.write(REVIEWS)
    with open(text_path, "w", encoding="utf-8") as f:
        f.write(TEXT)
    with open(bad_path, "wb") as f:
        f.write(llmc_bin([1, 2, 3, 250, 4]))
    srv, log, base = start_server(sys.argv[1], tmp)
    driver = None
    t0 = time.time()
    try:
        admin = open(os.path.join(tmp, "data", "admin.key")).read().strip()
        key = api_call(base, admin, "POST", "/v1/tenants", {"name": "text-lab"})["key"]["api_key"]
        driver = browser()
        for size, label in ((WIDE, "wide"), (PHONE, "phone")):
            print(f"at {size[0]}x{size[1]}:", flush=True)
            driver.set_window_size(*size)
            sign_in(driver, base, key)
            check_width(driver, base, key, label, text_path, bad_path)
            check_text_csv(driver, base, key, label, csv_path)
        # The two refused token uploads (one a width) are 422s on purpose.
        errors = dashboard.severe_errors(driver, r"/v1/datasets - Failed to load resource: .* 422")
        check(not errors, "no SEVERE browser console messages: " + " | ".join(errors))
        return dashboard.finish("text datasets test", t0, dashboard.ARTIFACTS)
    finally:
        dashboard.stop(driver, srv, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
