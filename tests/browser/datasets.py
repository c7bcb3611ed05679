#!/usr/bin/env python3
"""A dataset's page and a model's "try it" in headless Chromium, at a laptop
(1280x900) and a phone (390x844) width.

Starts `trainyard serve` (start_server of dashboard.py), then through the API:
uploads a CSV with string labels and unequal classes, a 600-image cut of
Fashion-MNIST's training set and a 100-image cut of its test set (IDX, as
separate datasets: the test set is the image job's validation dataset), and
trains a tiny model on each. Then, in the browser, at both widths:

* the dataset page shows a preview of the first examples (images as canvases
  holding the uploaded pixels, tabular rows as a table), the class balance
  with the counts computed here, each bar drawn as wide as its class's share
  of the largest, and the jobs and models that use it;
* Delete (with its confirm) shows the API's 409 beside the button while a
  job still needs the dataset, and deletes an unused dataset, which leaves
  the list;
* try-it on the image model picks from the test set (the thumbnails hold the
  test images' pixels and labels), and marks each thumbnail right or wrong as
  the model's predict through the API says, with a ✓ or a ✗ and the
  predicted class drawn on it in green or red;
* try-it on the CSV model starts every input at the feature's mean over the
  training set (computed here) and names the predicted class by its label;
* no page is wider than the phone, and no list scrolls sideways inside it.

Every check runs; the failures are listed at the end (exit 1). Screenshots
are saved before each width's checks, into argv[2] (default
build/browser-artifacts): dataset-*, dataset-csv-*, tryit-*, tryit-csv-*,
upload-* (-wide and -phone). Any SEVERE console message fails the test,
except the 409s of the deliberate in-use deletes.

Usage: datasets.py path/to/trainyard [artifacts-dir]
Exit 77 (skipped) when chromium, chromedriver, selenium or the
Fashion-MNIST files (dataset-fashion-mnist) are missing.
"""
import gzip
import json
import os
import random
import sys
import tempfile
import time
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard  # noqa: E402  (skips with 77 without selenium or chromium)
from dashboard import api_call, browser, check, js, start_server  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"
N_TRAIN, N_TEST = 600, 100
SIZES = (("wide", 1280, 900), ("phone", 390, 844))
ARTIFACTS = None


def wait(driver, cond, timeout=10):
    """cond's value once truthy, or None after timeout (the caller checks)."""
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1,
                             ignored_exceptions=[StaleElementReferenceException]).until(lambda d: cond(d))
    except TimeoutException:
        return None


def shot(driver, name, element=None, full=False):
    """The window, an element, or (full) the whole page: the window made as
    tall as the page for the picture (the width, and so the layout, stays)."""
    path = os.path.join(ARTIFACTS, name + ".png")
    if element is not None:
        element.screenshot(path)
    elif full:
        dashboard.full_page_shot(driver, path)
    else:
        driver.save_screenshot(path)
    print(f"  screenshot: {path}", flush=True)


def go(driver, hash_):
    driver.execute_script("location.hash = arguments[0];", hash_)


# ---- the data, and what the test expects of it ----

def idx_cut(images_gz, labels_gz, n):
    """The first n images (n * 784 bytes) and labels of a Fashion-MNIST pair,
    as IDX files' bytes."""
    with gzip.open(images_gz) as f:
        head = f.read(16)
        pixels = f.read(n * 784)
    with gzip.open(labels_gz) as f:
        f.read(8)
        labels = f.read(n)
    img = head[:4] + n.to_bytes(4, "big") + head[8:16] + pixels
    lab = b"\x00\x00\x08\x01" + n.to_bytes(4, "big") + labels
    return img, lab, [list(pixels[i * 784:(i + 1) * 784]) for i in range(n)], list(labels)


def make_csv():
    """300 rows of 4 features, classes of unequal size with string labels."""
    rng = random.Random(3)
    names = ["setosa", "versicolor", "virginica"]
    sizes = [150, 90, 60]
    rows = []
    for c, k in enumerate(sizes):
        for _ in range(k):
            rows.append([round(rng.gauss(c * 1.5 + j * 0.3, 0.6), 3) for j in range(4)] + [names[c]])
    rng.shuffle(rows)
    text = "sepal_len,sepal_wid,petal_len,petal_wid,species\n" + \
        "".join(",".join(f"{v:.3f}" for v in r[:4]) + f",{r[4]}\n" for r in rows)
    means = [sum(r[j] for r in rows) / len(rows) for j in range(4)]
    return text.encode(), means, dict(zip(names, sizes))


def multipart(parts):
    boundary = "tydsboundary3"
    body = b""
    for name, filename, data in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def upload(base, key, parts):
    body, ctype = multipart(parts)
    return api_call(base, key, "POST", "/v1/datasets", body, ctype)["id"]


def train(base, key, body):
    job = api_call(base, key, "POST", "/v1/jobs", body)["id"]
    for _ in range(1200):
        doc = api_call(base, key, "GET", f"/v1/jobs/{job}")
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    if doc["status"] != "succeeded" or not doc.get("model"):
        sys.exit(f"FAIL: the job {body['name']}: {json.dumps(doc)[:2000]}")
    return job, doc["model"]


# ---- the checks of one page ----

def no_overflow(driver, page):
    """The page no wider than the window, and no list that scrolls sideways
    inside it (code blocks may)."""
    go(driver, page)
    time.sleep(0.8)  # let the page load its lists; a settle, not an assertion
    over = dashboard.overflow(driver)
    inner = js(driver, """
        return [...document.querySelectorAll('main *')].filter((e) => {
          const o = getComputedStyle(e).overflowX;
          return (o === 'auto' || o === 'scroll') && e.tagName !== 'PRE' && e.scrollWidth > e.clientWidth + 1;
        }).map((e) => e.id || e.className || e.tagName);""")
    check(over <= 0, f"{page}: the page is no wider than the phone (scrollWidth - innerWidth = {over} px)")
    check(not inner, f"{page}: nothing scrolls sideways inside the page (found {inner})")


def dataset_page(driver, size, ds, *, name, counts, jobs, models, image_pixels=None, csv_rows=None, shot_name):
    go(driver, f"#/datasets/{ds}")
    wait(driver, lambda d: d.find_elements(By.ID, "dataset"))
    # Give the page's extra parts a moment to load before the screenshot.
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#preview canvas, #preview td"), 5)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#dataset-usage [data-model-id]"), 5)
    shot(driver, f"{shot_name}-{size}", full=True)
    where = f"{size}: dataset {name}"

    # The preview: the first examples as the uploaded data.
    if image_pixels is not None:
        got = js(driver, """
            return [...document.querySelectorAll('#preview canvas')].slice(0, 4).map((c) => {
              const d = c.getContext('2d').getImageData(0, 0, 28, 28).data;
              return Array.from({length: 784}, (_, i) => d[i * 4]);});""")
        check(len(got) == 4 and got == image_pixels[:4],
              f"{where}: the preview shows the first images' pixels ({len(got)} canvases)")
    if csv_rows is not None:
        got = js(driver, """
            return [...document.querySelectorAll('#preview tbody tr')].slice(0, 3).map(
              (r) => [...r.querySelectorAll('td')].map((c) => c.textContent.trim()));""")
        ok = len(got) == 3 and all(
            len(g) >= 5 and all(abs(float(a) - float(b)) < 1e-3 for a, b in zip(g[-5:-1], w[:4])) and g[-1] == w[4]
            for g, w in zip(got, csv_rows))
        check(ok, f"{where}: the preview table holds the first rows ({got[:1]} vs {csv_rows[:1]})")

    # The class balance: one bar per class with its count.
    bars = js(driver, """
        return Object.fromEntries([...document.querySelectorAll('#class-balance [data-class]')]
          .map((e) => [e.dataset.class, Number(e.dataset.count)]));""")
    check(bars == {str(k): v for k, v in counts.items()}, f"{where}: class balance {bars} == {counts}")
    # ... drawn: each class's bar has a track and a fill as wide as its share
    # of the largest class (issue 30: a broken stylesheet left the spans
    # inline, zero pixels wide, and the counts ran into the names).
    drawn = js(driver, """
        return [...document.querySelectorAll('#class-balance [data-class]')].map((e) => {
          const bar = e.querySelector('.bar'), fill = e.querySelector('.bar-fill');
          return {cls: e.dataset.class, count: Number(e.dataset.count),
                  track: bar ? bar.getBoundingClientRect().width : 0,
                  fill: fill ? fill.getBoundingClientRect().width : 0,
                  height: fill ? fill.getBoundingClientRect().height : 0,
                  colour: fill ? getComputedStyle(fill).backgroundColor : ''};});""")
    most = max((d["count"] for d in drawn), default=0)
    bad = [d for d in drawn if not (d["track"] >= 40 and d["height"] >= 4 and d["fill"] > 0
                                    and abs(d["fill"] / d["track"] - d["count"] / most) < 0.02
                                    and d["colour"] not in ("", "rgba(0, 0, 0, 0)"))]
    check(drawn and not bad, f"{where}: every class-balance bar is drawn, as wide as its share "
          f"({len(drawn)} bars; not drawn: {[(d['cls'], round(d['track']), round(d['fill'])) for d in bad][:4]})")

    # The jobs and models that use it.
    used = js(driver, """
        const ids = (a) => [...document.querySelectorAll('#dataset-usage [' + a + ']')].map((e) => e.getAttribute(a));
        return {jobs: ids('data-job-id').sort(), models: ids('data-model-id').sort()};""")
    check(used == {"jobs": sorted(jobs), "models": sorted(models)},
          f"{where}: the jobs and models that use it {used}")


def delete_in_use(driver, size, ds, job):
    go(driver, f"#/datasets/{ds}")
    button = wait(driver, lambda d: d.find_elements(By.ID, "delete-dataset"), 5)
    if not check(bool(button), f"{size}: the dataset page has a Delete button"):
        return
    button[0].click()
    try:
        driver.switch_to.alert.accept()
    except Exception:
        check(False, f"{size}: Delete asks to confirm")
    msg = wait(driver, lambda d: el_text(d, "#delete-error"), 10) or ""
    check("in use" in msg and job in msg and "/" not in msg.replace("/v1", ""),
          f"{size}: the 409 is shown beside Delete: {msg!r}")
    check(driver.current_url.endswith(f"#/datasets/{ds}"), f"{size}: the page stays on the dataset in use")
    js(driver, "document.getElementById('delete-dataset').scrollIntoView({block: 'center'});")
    shot(driver, f"delete-409-{size}")


def delete_unused(driver, size, base, key, ds):
    go(driver, f"#/datasets/{ds}")
    button = wait(driver, lambda d: d.find_elements(By.ID, "delete-dataset"), 5)
    if not check(bool(button), f"{size}: the unused dataset's page has a Delete button"):
        return
    button[0].click()
    driver.switch_to.alert.accept()
    gone = wait(driver, lambda d: d.current_url.endswith("#/datasets") and d.find_elements(By.ID, "datasets-body")
                and not d.find_elements(By.CSS_SELECTOR, f"tr[data-dataset-id='{ds}']")
                and d.find_elements(By.CSS_SELECTOR, "tr[data-dataset-id]"), 10)
    check(bool(gone), f"{size}: after Delete the list shows without {ds}")
    listed = [d["id"] for d in api_call(base, key, "GET", "/v1/datasets?limit=200")["items"]]
    check(ds not in listed, f"{size}: the API no longer lists {ds}")


def el_text(driver, css):
    e = driver.find_elements(By.CSS_SELECTOR, css)
    return e[0].text if e else None


def tryit_image(driver, size, base, key, model, test_pixels, test_labels, test_ds):
    go(driver, f"#/models/{model}")
    pick = wait(driver, lambda d: d.find_elements(By.ID, "pick-image"))
    if pick and not wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#test-images button.thumb-button"), 2):
        pick[0].click()
    thumbs = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#test-images button.thumb-button"))
    wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#test-images [data-verdict]")) == len(thumbs or [1]), 5)
    js(driver, "const t = document.getElementById('test-images'); if (t) t.scrollIntoView({block: 'center'});")
    shot(driver, f"tryit-{size}")
    where = f"{size}: try-it"
    if not check(bool(thumbs), f"{where}: test images are shown"):
        return
    got = js(driver, """
        return [...document.querySelectorAll('#test-images button.thumb-button')].map((b) => {
          const d = b.querySelector('canvas').getContext('2d').getImageData(0, 0, 28, 28).data;
          return {index: Number(b.dataset.index), px: Array.from({length: 784}, (_, i) => d[i * 4]),
                  label: b.dataset.label ?? null, predicted: b.dataset.predicted ?? null,
                  verdict: b.dataset.verdict ?? null, cls: b.className};});""")
    ok = all(g["px"] == test_pixels[g["index"]] for g in got)
    check(ok, f"{where}: the {len(got)} thumbnails are the test set's images (by pixels)")
    check(all(g["label"] == str(test_labels[g["index"]]) for g in got),
          f"{where}: each thumbnail carries its test label")
    note = el_text(driver, "#pick-status") or ""
    check("test" in note.lower() and "training" not in note.lower(), f"{where}: the note says test set: {note!r}")
    # Right or wrong, as the API's predict says.
    want = api_call(base, key, "POST", f"/v1/models/{model}/predict",
                    {"inputs": [test_pixels[g["index"]] for g in got]})["predictions"]
    marks = [(g["predicted"], g["verdict"]) for g in got]
    expect = [(str(p), "right" if str(p) == str(test_labels[g["index"]]) else "wrong") for p, g in zip(want, got)]
    check(marks == expect, f"{where}: right/wrong marks {marks} == {expect}")
    check(all(("thumb-" + v) in g["cls"] for g, (_, v) in zip(got, expect)),
          f"{where}: each thumbnail is styled right or wrong")
    # ... and the marks are on screen: a ✓ on the right ones, a ✗ and the
    # predicted class on the wrong ones, each in its colour, with a coloured
    # border (issue 30: the rules drawing them applied only on phones).
    shown = js(driver, """
        return [...document.querySelectorAll('#test-images button.thumb-button')].map((b) => {
          const a = getComputedStyle(b, '::after'), s = getComputedStyle(b);
          return {verdict: b.dataset.verdict, predicted: b.dataset.predicted, content: a.content,
                  display: a.display, colour: a.color, border: s.borderTopColor,
                  borderWidth: parseFloat(s.borderTopWidth)};});""")
    ok_col, bad_col = js(driver, """
        const p = document.createElement('span'); document.body.append(p);
        p.style.color = 'var(--ok)'; const ok = getComputedStyle(p).color;
        p.style.color = 'var(--bad)'; const bad = getComputedStyle(p).color; p.remove();
        return [ok, bad];""")
    def mark_ok(m):
        want = '"✓"' if m["verdict"] == "right" else f'"✗ {m["predicted"]}"'
        col = ok_col if m["verdict"] == "right" else bad_col
        return m["content"] == want and m["display"] != "none" and m["colour"] == col \
            and m["border"] == col and m["borderWidth"] >= 2
    wrong = [(m["verdict"], m["content"], m["colour"], m["border"]) for m in shown if not mark_ok(m)]
    check(shown and not wrong, f"{where}: each thumbnail shows its ✓ or ✗ mark in green or red "
          f"({len(shown)} thumbnails; not shown: {wrong[:3]})")
    print(f"  {size}: {sum(v == 'right' for _, v in expect)} of {len(expect)} right")


def tryit_csv(driver, size, model, means, names):
    go(driver, f"#/models/{model}")
    boxes = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#try-it input[id^='feature-']"))
    where = f"{size}: try-it (CSV)"
    if not check(bool(boxes) and len(boxes) == len(means), f"{where}: {len(means)} inputs"):
        shot(driver, f"tryit-csv-{size}", full=True)
        return
    values = [float(b.get_attribute("value") or "nan") for b in boxes]
    check(all(abs(v - m) <= 1e-3 * max(1, abs(m)) for v, m in zip(values, means)),
          f"{where}: inputs start at the feature means {values} ~ {[round(m, 4) for m in means]}")
    driver.find_element(By.ID, "predict").click()
    rows = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#probabilities tbody tr"))
    shot(driver, f"tryit-csv-{size}", full=True)
    classes = sorted(r.get_attribute("data-class") for r in rows or [])
    check(classes == sorted(names), f"{where}: the classes are named {classes}")
    check(el_text(driver, "#predicted") in names, f"{where}: the prediction is a class name")


def main():
    global ARTIFACTS
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for f in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz"):
        if not os.path.exists(os.path.join(FASHION, f)):
            dashboard.skip(f"{FASHION}/{f} is missing (apt-get install dataset-fashion-mnist)")
    binary = sys.argv[1]
    ARTIFACTS = sys.argv[2] if len(sys.argv) > 2 else "build/browser-artifacts"
    dashboard.ARTIFACTS = ARTIFACTS
    os.makedirs(ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="trainyard-datasets-")
    srv, log, base = start_server(binary, tmp)
    driver = None
    t0 = time.time()
    try:
        key = open(os.path.join(tmp, "data", "admin.key")).read().strip()

        # The data and the models, through the API.
        tr_img, tr_lab, tr_px, tr_y = idx_cut(f"{FASHION}/train-images-idx3-ubyte.gz",
                                              f"{FASHION}/train-labels-idx1-ubyte.gz", N_TRAIN)
        te_img, te_lab, te_px, te_y = idx_cut(f"{FASHION}/t10k-images-idx3-ubyte.gz",
                                              f"{FASHION}/t10k-labels-idx1-ubyte.gz", N_TEST)
        img_ds = upload(base, key, [("name", None, b"fashion-600"), ("format", None, b"idx"),
                                    ("images", "i.idx3", tr_img), ("labels", "l.idx1", tr_lab)])
        test_ds = upload(base, key, [("name", None, b"fashion-test-100"), ("format", None, b"idx"),
                                     ("images", "i.idx3", te_img), ("labels", "l.idx1", te_lab)])
        csv_text, means, csv_counts = make_csv()
        csv_ds = upload(base, key, [("name", None, b"flowers"), ("format", None, b"csv"),
                                    ("label_column", None, b"species"), ("file", "f.csv", csv_text)])
        csv_rows = [line.split(",") for line in csv_text.decode().splitlines()[1:4]]
        img_counts = {c: tr_y.count(c) for c in sorted(set(tr_y))}
        img_job, img_model = train(base, key, {
            "name": "fashion-tiny", "dataset": img_ds, "validation": {"dataset": test_ds},
            "model": {"layers": [{"type": "flatten"}, {"type": "dense", "units": 10}]},
            "hyperparameters": {"epochs": 3, "batch_size": 32, "seed": 1}})
        csv_job, csv_model = train(base, key, {
            "name": "flowers-mlp", "dataset": csv_ds,
            "model": {"layers": [{"type": "dense", "units": 16}, {"type": "relu"}, {"type": "dense", "units": 3}]},
            "hyperparameters": {"epochs": 20, "batch_size": 16, "seed": 1}})
        # A job that holds the CSV dataset while the deletes are tried; its
        # batches of 1 for many epochs outlast the test, and it is cancelled.
        hold_job = api_call(base, key, "POST", "/v1/jobs", {
            "name": "holds-flowers", "dataset": csv_ds,
            "model": {"layers": [{"type": "dense", "units": 3}]},
            "hyperparameters": {"epochs": 100000, "batch_size": 1, "seed": 1}})["id"]
        unused = [upload(base, key, [("name", None, f"scratch-{i}".encode()), ("format", None, b"csv"),
                                     ("label_column", None, b"species"), ("file", "f.csv", csv_text)])
                  for i in range(2)]
        print(f"data and models ready in {time.time() - t0:.1f} s")

        driver = browser()
        driver.get(base + "/")
        wait(driver, lambda d: d.find_elements(By.ID, "key"), 30)
        driver.find_element(By.ID, "key").send_keys(key)
        driver.find_element(By.CSS_SELECTOR, "#signin button[type=submit]").click()
        wait(driver, lambda d: d.find_elements(By.ID, "jobs"), 30)

        for (size, w, hgt), scratch in zip(SIZES, unused):
            print(f"{size} ({w}x{hgt}):", flush=True)
            driver.set_window_size(w, hgt)
            go(driver, "#/datasets")
            form = wait(driver, lambda d: d.find_elements(By.ID, "upload-form"))
            wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-dataset-id]"))
            if form:
                js(driver, "arguments[0].scrollIntoView();", form[0])
                shot(driver, f"upload-{size}", form[0])
            dataset_page(driver, size, img_ds, name="fashion-600", counts=img_counts,
                         jobs=[img_job], models=[img_model], image_pixels=tr_px, shot_name="dataset")
            dataset_page(driver, size, test_ds, name="fashion-test-100", counts={c: te_y.count(c) for c in set(te_y)},
                         jobs=[img_job], models=[], image_pixels=te_px, shot_name="dataset-test")
            dataset_page(driver, size, csv_ds, name="flowers", counts=csv_counts,
                         jobs=[csv_job, hold_job], models=[csv_model], csv_rows=csv_rows, shot_name="dataset-csv")
            delete_in_use(driver, size, csv_ds, hold_job)
            delete_unused(driver, size, base, key, scratch)
            tryit_image(driver, size, base, key, img_model, te_px, te_y, test_ds)
            tryit_csv(driver, size, csv_model, means, list(csv_counts))
            if size == "phone":
                for page in ("#/datasets", f"#/datasets/{img_ds}", f"#/datasets/{csv_ds}", "#/models",
                             f"#/models/{img_model}", f"#/models/{csv_model}"):
                    no_overflow(driver, page)

        try:
            api_call(base, key, "POST", f"/v1/jobs/{hold_job}/cancel")
        except urllib.error.HTTPError as e:
            print(f"  cancel {hold_job}: {e}")

        # No console errors but the deliberate in-use deletes' 409s.
        errors = dashboard.severe_errors(driver, rf"/v1/datasets/{csv_ds} - Failed to load resource: .* 409")
        check(not errors, "no browser console errors:\n    " + "\n    ".join(errors))
        return dashboard.finish("datasets test", t0, ARTIFACTS)
    finally:
        dashboard.stop(driver, srv, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
