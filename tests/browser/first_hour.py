#!/usr/bin/env python3
"""A real user's first hour with the dashboard, in headless Chromium, at a
laptop's 1280x900 and a phone's 390x844.

Starts `trainyard serve` on the simulated H200 (seven 1g slices) with three
tenants (admin, alpha with max_running_jobs 2, beta), a CSV dataset
uploaded through the form, a random-label CSV and a small image dataset,
and alpha's jobs: short ones, one of 20,000 epochs, one that fails with a
non-finite loss, one cancelled, one at chance accuracy, one queued by the
quota, one running slowly; beta runs one on a slice. Then checks what the
issue "the dashboard for a real user's first hour" asks, at both sizes:

  the three breakages:
    * the 20,000-epoch job's page renders with one page of epoch rows,
      each chart at most POINTS points, and a bounded fetch (structure,
      not time; the time to interactive is printed);
    * the upload form shows only the chosen format's fields, the nav is
      hidden while signed out, the upload progress only during an upload;
    * progress names the epoch the error names, moves within epoch 1, and
      a cancelled job is a note, not a red error;
  at a glance: best and latest metrics, samples/s, ETA, the wait in plain
    words with the time waited, the failure reason in the row, a chance-
    level warning;
  charts: per-step loss, the learning rate, axis titles, log scale,
    smoothing, the best epoch marked, a waiting state, a second run;
  after training: evaluate, clone and edit (a failed job's field
    focused), the metrics downloaded as CSV and JSON;
  the new-job form: a sensible dataset, GPU choices with what is free,
    validation set, schedule and weight decay, the estimate, and a 422 that
    moves nothing;
  the phone: the nav on one line, cards instead of wide tables, no page
    wider than the screen.

Screenshots (jobs list, a job's page, the 20,000-epoch job's page, the
upload form; <page>-<size>.png)
go to the folder given as the second argument. With --before, only the
screenshots are taken and the 20,000-epoch page's time is measured, with
no assertions (for an older build, to compare).

Usage: first_hour.py path/to/trainyard [artifacts-dir] [--before]
Exit 77 (skipped) when chromium, chromedriver or selenium is missing.
"""
import json
import os
import random
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard as dash  # noqa: E402  (skips with 77 without selenium/chromium)
from dashboard import By, Select, js, el, npy_u8  # noqa: E402

POINTS = 200          # web/curves.js: the most points a chart series holds
EPOCH_PAGE = 25       # web/job.js: epoch rows a page
LONG_EPOCHS = 20000
SIZES = {"wide": (1280, 900), "phone": (390, 844)}
BEFORE = "--before" in sys.argv
OTHER_DS = None       # a second image dataset (evaluate, validation picker)


def check(cond, what):
    """dashboard's soft check (all failures are reported at the end); with
    --before, nothing is checked. True if it held."""
    return bool(cond) if BEFORE else dash.check(bool(cond), what)


def wait_for(driver, what, cond, timeout=30):
    """Waits for cond; a timeout is a failed check (returns None)."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = cond(driver)
            if v:
                return v
        except Exception:   # stale elements while the page redraws
            pass
        time.sleep(0.1)
    check(False, f"timed out waiting for {what}")
    return None


class Api:
    def __init__(self, base, key):
        self.base, self.key = base, key

    def __call__(self, method, path, body=None, content_type="application/json", raw=False):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=body, method=method,
                                     headers={"Authorization": f"Bearer {self.key}", "Content-Type": content_type})
        with urllib.request.urlopen(req, timeout=60) as r:
            data = r.read()
            return data if raw else json.loads(data or b"null")


def multipart(parts):
    boundary = "tyfirsthour"
    body = b""
    for name, filename, data in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def csv_dataset(api, name, rows, seed, random_labels=False):
    rng = random.Random(seed)
    lines = [",".join([f"f{i}" for i in range(1, 5)] + ["label"])]
    for _ in range(rows):
        c = rng.randrange(3)
        xs = [rng.gauss(c * (j % 3 - 1), 0.7) for j in range(4)]
        lab = rng.randrange(3) if random_labels else c
        lines.append(",".join(f"{x:.3f}" for x in xs) + f",{'abc'[lab]}")
    body, ct = multipart([("name", None, name.encode()), ("format", None, b"csv"),
                          ("label_column", None, b"label"),
                          ("file", f"{name}.csv", ("\n".join(lines) + "\n").encode())])
    return api("POST", "/v1/datasets", body, ct)["id"]


def image_dataset(api, n=600, seed=3, name="bands"):
    rng = random.Random(seed)
    x, y = [], []
    for i in range(n):
        c = i % 3
        # One label in five is noise: accuracy tops out near 0.87.
        y.append(c if rng.random() < 0.8 else rng.randrange(3))
        # A faint band in noise.
        x += [min(255, 40 + rng.randrange(160)) if r // 10 == c else rng.randrange(160) for r in range(28) for _ in range(28)]
    body, ct = multipart([("name", None, name.encode()), ("format", None, b"npy"),
                          ("x", "x.npy", npy_u8((n, 1, 28, 28), x)), ("y", "y.npy", npy_u8((n,), y))])
    return api("POST", "/v1/datasets", body, ct)["id"]


MLP = {"layers": [{"type": "dense", "units": 16}, {"type": "relu"}, {"type": "dense", "units": 3}]}


def submit(api, name, ds, hp, model=MLP, **extra):
    body = {"name": name, "dataset": ds, "model": model, "hyperparameters": hp, **extra}
    return api("POST", "/v1/jobs", body)["id"]


def wait_job(api, job, states, timeout=240):
    end = time.time() + timeout
    while time.time() < end:
        j = api("GET", f"/v1/jobs/{job}")
        if j["status"] in states:
            return j
        time.sleep(0.3)
    sys.exit(f"FAIL: job {job} did not reach {states} (it is {j['status']})")


def go(driver, base, route, ready_css, timeout=30):
    driver.get(f"{base}/#{route}")
    return wait_for(driver, f"{route} to render ({ready_css})",
                    lambda d: d.find_elements(By.CSS_SELECTOR, ready_css), timeout)


def no_overflow(driver, where):
    over = dash.overflow(driver)
    check(over <= 0, f"{where}: the page is {over} px wider than the window")


def shot(driver, name):
    path = os.path.join(dash.ARTIFACTS, f"{name}.png")
    dash.full_page_shot(driver, path)
    print(f"  screenshot: {path}", flush=True)


def chart_info(driver, canvas_id):
    """Datasets of the Chart.js chart on that canvas: [{label, n, type...}]."""
    return js(driver, """
        const c = window.Chart && Chart.getChart(document.getElementById(arguments[0]));
        if (!c) return null;
        return {y: c.options.scales.y.type, ytitle: c.options.scales.y.title.text, xtitle: c.options.scales.x.title.text,
                sets: c.data.datasets.map((d) => ({label: d.label, n: d.data.length,
                       first: d.data.length ? d.data[0].y : null, last: d.data.length ? d.data[d.data.length - 1] : null}))};""",
              canvas_id)


def row_text(driver, job):
    return js(driver, "const r = document.querySelector(`tr[data-job-id='${arguments[0]}']`); return r ? r.innerText : null;", job)


# ---- the checks, one function per item of the issue ----

def check_long_job(driver, base, long_job, size):
    """Breakage 1: the 20,000-epoch job's page, by structure."""
    # From another page: the same hash again would not render the page anew.
    go(driver, base, "/jobs", "#jobs")
    js(driver, "performance.clearResourceTimings(); performance.setResourceTimingBufferSize(10000);")
    t0 = time.time()
    driver.get(f"{base}/#/jobs/{long_job}")
    rows = wait_for(driver, "the 20,000-epoch job's epoch table",
                    lambda d: len(d.find_elements(By.CSS_SELECTOR, "#epochs tbody tr")) or None,
                    timeout=900 if BEFORE else 60)
    tti = time.time() - t0
    print(f"  [{size}] 20,000-epoch job page: epoch table rendered after {tti:.2f} s ({rows} rows)", flush=True)
    if rows is None:
        return tti
    if BEFORE:
        shot(driver, f"long-job-{size}")
        return tti
    wait_for(driver, "the long job's charts", lambda d: int(el(d, "#acc-chart").get_attribute("data-points") or 0) > 0)
    tti = time.time() - t0
    print(f"  [{size}] 20,000-epoch job page: charts drawn after {tti:.2f} s", flush=True)
    shot(driver, f"long-job-{size}")
    check(rows == EPOCH_PAGE, f"the epoch table holds {rows} rows, not one page ({EPOCH_PAGE})")
    first = js(driver, "return document.querySelector('#epochs tbody tr').dataset.epoch;")
    check(first == str(LONG_EPOCHS), f"the newest epoch is first (got {first})")
    for cid in ("loss-chart", "acc-chart", "lr-chart"):
        info = chart_info(driver, cid)
        check(info and info["sets"], f"{cid} has series")
        if info:
            most = max((s["n"] for s in info["sets"]), default=0)
            check(0 < most <= POINTS, f"{cid}: a series holds {most} points (at most {POINTS})")
    fetched = js(driver, """
        return performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/jobs/' + arguments[0]))
          .map((e) => [e.name.replace(location.origin, ''), e.encodedBodySize]);""", long_job)
    total = sum(n for _, n in fetched)
    print(f"  [{size}] fetched for the job: {total} bytes in {len(fetched)} requests: {[p for p, _ in fetched]}")
    check(total < 150_000, f"the page fetched {total} bytes of the job's metrics (bounded: < 150 kB)")
    check(not any("/events" in p for p, _ in fetched), "a finished job's page opens no event stream")
    note = el(driver, "#curves-note").text
    check("20,000 epochs" in note and "the mean of 100 epochs" in note, f"the downsampling is said: {note!r}")
    # Older pages come from the server, one page at a time.
    el(driver, "#epochs-older").click()
    wait_for(driver, "the second page of epochs",
             lambda d: js(d, "return document.querySelector('#epochs tbody tr').dataset.epoch;") == str(LONG_EPOCHS - EPOCH_PAGE))
    check("26–50 of 20,000" in el(driver, "#epochs-info").text, f"the pager says where it is: {el(driver, '#epochs-info').text!r}")
    return tti


def check_upload_form(driver, base, size):
    """Breakage 2: only the chosen format's fields; no progress bar before an upload."""
    go(driver, base, "/datasets", "#upload-form")
    shown = lambda: {p: js(driver, f"const e = document.getElementById('ds-{p}'); return !!e && e.offsetParent !== null;")
                     for p in ("file", "images", "labels", "x", "y")}
    want = {"csv": {"file"}, "idx": {"images", "labels"}, "npy": {"x", "y"}}
    for fmt, parts in want.items():
        Select(el(driver, "#ds-format")).select_by_value(fmt)
        vis = {p for p, v in shown().items() if v}
        check(vis == parts, f"[{size}] format {fmt} shows the fields {sorted(vis)}, not {sorted(parts)}")
    Select(el(driver, "#ds-format")).select_by_value("csv")
    check(not js(driver, "return document.getElementById('upload-progress').offsetParent !== null;"),
          f"[{size}] the upload progress bar shows before any upload")
    js(driver, "document.getElementById('upload-form').scrollIntoView();")
    shot(driver, f"upload-{size}")
    if size == "phone":
        no_overflow(driver, "the datasets page")


def check_jobs_list(driver, base, jobs, size):
    """The list at a glance, breakage 3's labels, and the phone's cards."""
    go(driver, base, "/jobs", "#jobs-body tr")
    wait_for(driver, "every job in the list",
             lambda d: all(row_text(d, j) for j in jobs.values()))
    shot(driver, f"jobs-{size}")
    if BEFORE:
        return
    t = row_text(driver, jobs["short"]) or ""
    check(re.search(r"\d\.\d{4} val\. accuracy \(epoch \d+\)", t), f"[{size}] a finished row shows the best metric: {t!r}")
    check("samples/s" in t and "loss" in t, f"[{size}] a finished row shows loss and samples/s: {t!r}")
    check(re.search(r"throughput:? [\d,]+ samples/s", t, re.I), f"[{size}] the samples/s line is labelled: {t!r}")
    t = row_text(driver, jobs["one"]) or ""
    check(re.search(r"\b1 epoch\b", t) and "1 epochs" not in t, f"[{size}] a 1-epoch job says \"1 epoch\": {t!r}")
    t = row_text(driver, jobs["nan"]) or ""
    check("learning_rate" in t, f"[{size}] the failed row says why: {t!r}")
    m = re.search(r"(\d+)/(\d+) epochs", t)
    err = re.search(r"at epoch (\d+)", t)
    check(m and err and int(m.group(1)) == int(err.group(1)) - 1,
          f"[{size}] the failed row's progress agrees with its error's epoch: {t!r}")
    t = row_text(driver, jobs["cancelled"]) or ""
    check("Cancelled by request." in t, f"[{size}] the cancelled row says so plainly: {t!r}")
    check(not js(driver, "return !!document.querySelector(`tr[data-job-id='${arguments[0]}'] .row-error`);", jobs["cancelled"]),
          f"[{size}] the cancelled row shows no red error")
    t = row_text(driver, jobs["chance"]) or ""
    check("at chance level" in t, f"[{size}] the chance-level row is flagged: {t!r}")
    t = row_text(driver, jobs["queued"]) or ""
    check("may run 1 job at once and 1 is running" in t and "waited" in t,
          f"[{size}] the queued row says why in plain words and how long: {t!r}")
    # The slow job's bar moves inside an epoch (breakage 3: it stayed empty
    # through the first), and its percentage is of the whole run (issue 30,
    # 6: "epoch 227/5000 · 0 %" was 0 % of the epoch, read as the run's):
    # "epoch k/N · x % of the run" with x > 0, between (k-1)/N and k/N of
    # the run, and the bar where the text says. The old text, "epoch 1/1000
    # · 30 %", has no "of the run", and 30 % is past epoch 1 of 1000.
    pat = r"epoch (\d+)/(\d+) · (\d+(?:\.(\d+))?) % of the run"
    # The row's text, its bar and the bar's tooltip are read in one script:
    # the job crosses an epoch every few seconds, and three separate reads
    # could straddle a refresh (text of epoch k, tooltip of epoch k + 1).
    def slow_row(d):
        return js(d, """const r = document.querySelector(`tr[data-job-id='${arguments[0]}']`);
            const p = r && r.querySelector('progress');
            return r ? [r.innerText, p ? p.value : null, p ? p.title : null] : null;""", jobs["slow"])
    got = wait_for(driver, "the slow job's progress within its epoch",
                   lambda d: (lambda r: r if r and (m := re.search(pat, r[0])) and float(m.group(3)) > 0 else None)(
                       slow_row(d)),
                   timeout=40) or slow_row(driver) or ["", None, None]
    t, value, tip = got
    m = re.search(pat, t)
    if check(m, f"[{size}] the slow job's row shows its progress as a share of the run: {t!r}"):
        k, n, x = int(m.group(1)), int(m.group(2)), float(m.group(3))
        unit = 10 ** -len(m.group(4) or "")  # the last digit shown, in %
        check(x > 0 and (k - 1) / n * 100 - unit <= x <= k / n * 100,
              f"[{size}] {x} % of the run is within epoch {k} of {n}: {t!r}")
        check(value and 0 <= value * 100 - x < unit + 100 / n,
              f"[{size}] the bar ({value}) is where the text says ({x} % of the run)")
        check(re.search(rf"epoch {k} is \d+ % done", tip or ""),
              f"[{size}] the bar's tooltip says how far into epoch {k}: {tip!r}")
    check(re.search(r"left", t), f"[{size}] the running row shows the time left: {t!r}")
    if size == "phone":
        no_overflow(driver, "the jobs list")
        # Cards: the Cancel button of the running job is on screen.
        r = js(driver, """const b = document.querySelector(`tr[data-job-id='${arguments[0]}'] button`);
                          const x = b.getBoundingClientRect(); return [x.left, x.right, window.innerWidth];""", jobs["slow"])
        check(r[0] >= 0 and r[1] <= r[2], f"the Cancel button is on the phone's screen: {r}")
        tops = js(driver, "return [...document.querySelectorAll('#nav a')].map((a) => a.offsetTop);")
        check(len(set(tops)) == 1, f"the nav is one line on the phone (link tops {tops})")
        # The caption runs across the list, not down a narrow column.
        cap = js(driver, """const c = document.querySelector('#jobs caption'), t = document.getElementById('jobs');
            const r = c.getBoundingClientRect();
            return {w: r.width, h: r.height, tw: t.getBoundingClientRect().width,
                    line: parseFloat(getComputedStyle(c).lineHeight) || 20};""")
        check(cap["w"] >= 0.9 * cap["tw"] and cap["h"] < 1.6 * cap["line"],
              f"the jobs caption is one line across the list: {cap}")
        # The nav scrolls sideways: while links are hidden to the right, an
        # arrow at its right edge says so; scrolled to the end, one at the left.
        hint = """const n = document.getElementById('nav'), w = n.parentElement;
            const seen = (s) => { const e = document.querySelector(s); if (!e) return null;
              const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
              return cs.display !== 'none' && cs.visibility !== 'hidden' && +cs.opacity > 0.5
                && r.width > 4 && r.right <= window.innerWidth + 0.5 && r.left >= -0.5; };
            return {hidden: n.scrollWidth - n.clientWidth - n.scrollLeft, left: n.scrollLeft,
                    right_hint: seen('.nav-more-right'), left_hint: seen('.nav-more-left')};"""
        h0 = js(driver, "document.getElementById('nav').scrollLeft = 0;" + hint)
        check(h0["hidden"] > 4 and h0["right_hint"] and not h0["left_hint"],
              f"the phone's nav shows an arrow at the right while links are hidden there: {h0}")
        js(driver, "const n = document.getElementById('nav'); n.scrollLeft = n.scrollWidth;")
        h1 = wait_for(driver, "the nav's hints after a scroll",
                      lambda d: (lambda r: r if r["hidden"] <= 1 and r["left_hint"] else None)(js(d, hint)), timeout=5)
        check(h1 and not h1["right_hint"], f"scrolled to its end, the nav hints left, not right: {h1}")
        js(driver, "document.getElementById('nav').scrollLeft = 0;")


def check_job_page(driver, base, api, jobs, size):
    """Header at a glance, charts and their controls, after-training actions."""
    job = jobs["short"]
    go(driver, base, f"/jobs/{job}", "#epochs tbody tr")
    wait_for(driver, "the charts", lambda d: (chart_info(d, "acc-chart") or {}).get("sets"))
    shot(driver, f"job-{size}")
    if BEFORE:
        return
    doc = api("GET", f"/v1/jobs/{job}")
    best = doc["metrics"]["best"]
    check(best["metric"] == "val_accuracy", f"the best metric is validation accuracy: {best}")
    check(f"(epoch {best['epoch']})" in el(driver, "#stat-best").text, f"the header shows the best epoch: {el(driver, '#stat-best').text!r}")
    check("samples/s" in el(driver, "#stat-throughput").text, "the header shows samples/s")
    loss, acc, lr = (chart_info(driver, c) for c in ("loss-chart", "acc-chart", "lr-chart"))
    check(loss["xtitle"] == "epoch" and loss["ytitle"] == "loss" and acc["ytitle"] == "accuracy"
          and lr["ytitle"] == "learning rate", f"axis titles: {loss['xtitle']}, {loss['ytitle']}, {acc['ytitle']}, {lr['ytitle']}")
    check(any("per step" in s["label"] and s["n"] >= 2 for s in loss["sets"]), f"a per-step loss series: {loss['sets']}")
    check(lr["sets"] and lr["sets"][0]["n"] >= 2, f"a learning-rate curve: {lr['sets']}")
    # The cosine schedule falls: the last rate is below the first.
    check(lr["sets"] and lr["sets"][0]["last"]["y"] < lr["sets"][0]["first"], f"the cosine rate falls: {lr['sets']}")
    star = [s for s in acc["sets"] if s["label"].startswith("best")]
    check(star and star[0]["last"]["x"] == best["epoch"] and abs(star[0]["last"]["y"] - best["value"]) < 1e-9,
          f"the best epoch is marked at ({best['epoch']}, {best['value']}): {star}")
    # Log scale and smoothing.
    el(driver, "#curve-log").click()
    check(chart_info(driver, "loss-chart")["y"] == "logarithmic", "log scale applies to the loss")
    check(chart_info(driver, "acc-chart")["y"] == "linear", "accuracy stays linear")
    el(driver, "#curve-log").click()
    raw = [s for s in chart_info(driver, "loss-chart")["sets"] if s["label"] == "train loss"][0]["last"]["y"]
    js(driver, "const s = document.getElementById('curve-smoothing'); s.value = '0.9'; s.dispatchEvent(new Event('input'));")
    smoothed = [s for s in chart_info(driver, "loss-chart")["sets"] if s["label"] == "train loss"][0]["last"]["y"]
    check(abs(smoothed - raw) > 1e-6, f"smoothing changes the curve ({raw} -> {smoothed})")
    js(driver, "const s = document.getElementById('curve-smoothing'); s.value = '0'; s.dispatchEvent(new Event('input'));")
    # A second run on the same charts.
    Select(el(driver, "#curve-compare")).select_by_value(jobs["short2"])
    wait_for(driver, "the compared run's curve",
             lambda d: any(s["label"].startswith("short-2:") for s in chart_info(d, "acc-chart")["sets"]))
    check(el(driver, "#compare-chips").text.startswith("short-2"), "the compared run is named in a chip")
    # Metrics downloads: the blob handed to the download link.
    js(driver, """window.__blobs = []; const o = URL.createObjectURL.bind(URL);
                  URL.createObjectURL = (b) => { window.__blobs.push(b); return o(b); };""")
    for button, kind in (("#download-csv", "text/csv"), ("#download-json", "application/json")):
        js(driver, "window.__blobs.length = 0;")
        el(driver, button).click()
        text = driver.execute_async_script("""const done = arguments[arguments.length - 1], kind = arguments[0];
            const t0 = Date.now(); (function poll() { const b = window.__blobs.find((x) => x.type === kind);
            if (b) b.text().then(done); else if (Date.now() - t0 > 10000) done(null); else setTimeout(poll, 50); })();""", kind)
        epochs = doc["hyperparameters"]["epochs"]
        if kind == "text/csv":
            lines = (text or "").strip().splitlines()
            check(lines and lines[0].startswith("epoch,train_loss") and len(lines) == epochs + 1,
                  f"the CSV download has a header and one line per epoch ({len(lines)} lines)")
        else:
            try:
                got = json.loads(text or "")
            except ValueError:
                got = {}
            check(len(got.get("epochs", [])) == epochs, f"the JSON download has every epoch: {(text or '')[:80]!r}")
    # Evaluate on another dataset, as the API would.
    el(driver, "#show-evaluate").click()
    # The select is drawn before its options load: wait for the option itself.
    wait_for(driver, "the evaluate form's datasets",
             lambda d: d.find_elements(By.CSS_SELECTOR, f"#eval-dataset option[value='{OTHER_DS}']"))
    Select(el(driver, "#eval-dataset")).select_by_value(OTHER_DS)
    el(driver, "#evaluate button[type=submit]").click()
    got = wait_for(driver, "the evaluation", lambda d: el(d, "#eval-result").get_attribute("data-accuracy"), timeout=60)
    want = api("POST", f"/v1/models/{doc['model']}/evaluate", {"dataset": OTHER_DS})["accuracy"]
    check(got is not None and abs(float(got) - want) < 1e-9, f"Evaluate shows the API's accuracy ({got} vs {want})")
    if size == "phone":
        no_overflow(driver, "a job's page")

    # A queued job's page waits for its first epoch, and says why it waits.
    go(driver, base, f"/jobs/{jobs['queued']}", "#job-summary")
    wait_for(driver, "the waiting state", lambda d: d.find_elements(By.CSS_SELECTOR, "#acc-waiting"))
    check(js(driver, "return document.getElementById('acc-waiting').offsetParent !== null;"), "the accuracy chart says it waits for the first epoch")
    # Read in the page: the header is redrawn on each of the job's events,
    # and an element found before one is stale after it.
    wait_text = js(driver, "return document.getElementById('job-wait')?.innerText || '';")
    check("may run 1 job" in wait_text, f"the queued job's page says why: {wait_text!r}")
    # The chance-level job's page warns.
    go(driver, base, f"/jobs/{jobs['chance']}", "#job-warning")
    warning = js(driver, "return document.getElementById('job-warning')?.innerText || '';")
    check("chance level for 3 classes" in warning, f"chance warning: {warning!r}")
    # The cancelled job's page: a note, not an error.
    go(driver, base, f"/jobs/{jobs['cancelled']}", "#job-summary")
    check(not driver.find_elements(By.ID, "job-error") and "Cancelled by request." in el(driver, "#job-note").text,
          "a cancelled job's page shows a note, not an error")
    # The failed job's page: its error names the epoch the progress names.
    go(driver, base, f"/jobs/{jobs['nan']}", "#job-error")
    e = el(driver, "#job-error").text
    m = re.search(r"Failed in epoch (\d+) of \d+: .*at epoch (\d+)", e)
    check(m and m.group(1) == m.group(2), f"the failed job's page: one epoch, not two: {e!r}")


def check_new_job(driver, base, api, jobs, size):
    """Clone and edit; the form's defaults, choices, estimate and errors."""
    # Clone the failed job: every field from it; the learning rate focused.
    go(driver, base, f"/jobs/{jobs['nan']}", "#clone")
    el(driver, "#clone").click()
    wait_for(driver, "the cloned form", lambda d: el(d, "#hp-learning_rate").get_attribute("value") == "10")
    focused = js(driver, "return document.activeElement && document.activeElement.id;")
    check(focused == "hp-learning_rate", f"the clone of a failed job focuses the field its error names ({focused})")
    check(el(driver, "#job-name").get_attribute("value") == "nan-2", "the clone's name")
    check(json.loads(el(driver, "#job-spec").get_attribute("value")) == api("GET", f"/v1/jobs/{jobs['nan']}")["spec"], "the clone's spec")
    # A fresh form: the dataset of the latest job, not the newest upload.
    go(driver, base, "/new", "#job-dataset option")
    latest = api("GET", "/v1/jobs?limit=1")["items"][0]["dataset"]
    wait_for(driver, "the default dataset", lambda d: el(d, "#job-dataset").get_attribute("value") == latest)
    newest = api("GET", "/v1/datasets?limit=1")["items"][0]["id"]
    check(newest != latest, "the test's newest dataset is not the latest job's (the check means something)")
    gpu = [o.text for o in Select(el(driver, "#job-gpu")).options]
    check(any(re.match(r"1g\.18gb: \d of 7 free", t) for t in gpu), f"GPU choices say what is free: {gpu}")
    vals = [o.get_attribute("value") for o in Select(el(driver, "#job-validation-source")).options]
    check(OTHER_DS in vals, "a validation dataset can be picked")
    Select(el(driver, "#hp-lr_schedule")).select_by_value("cosine")
    check(el(driver, "#hp-min_lr").is_displayed() and not el(driver, "#hp-step_epochs").is_displayed(),
          "the schedule shows its own fields")
    check(el(driver, "#hp-weight_decay").is_displayed(), "weight decay is on the form")
    est = wait_for(driver, "the estimate", lambda d: el(d, "#job-estimate").get_attribute("data-parameters"))
    body = {"dataset": latest, "model": json.loads(el(driver, "#job-spec").get_attribute("value")),
            "hyperparameters": {"epochs": 10, "batch_size": 64}}
    dry = api("POST", "/v1/jobs?dry_run=true", body)
    check(est == str(dry["parameters"]) and "parameters" in el(driver, "#job-estimate").text,
          f"the estimate is the server's ({est} vs {dry['parameters']})")
    # A 422 beside its field, moving nothing.
    tops = ("return [...document.querySelectorAll('#job-form .field, #job-form button')]"
            ".map((e) => e.offsetParent ? e.getBoundingClientRect().top + window.scrollY : null);")
    before = js(driver, tops)
    e = el(driver, "#hp-epochs")
    e.clear()
    e.send_keys("0")
    el(driver, "#job-form button[type=submit]").click()
    wait_for(driver, "the epochs error", lambda d: el(d, "#hp-epochs-error").text)
    after = js(driver, tops)
    # A one-line error takes the line kept for it and moves nothing; a longer
    # one wraps (issue 30: cut to "hyperparameters.learning_r…") and moves
    # what is below it by its extra lines only.
    err = js(driver, """const e = document.getElementById('hp-epochs-error'), cs = getComputedStyle(e);
        return {h: e.getBoundingClientRect().height, line: parseFloat(cs.lineHeight),
                sw: e.scrollWidth, cw: e.clientWidth, sh: e.scrollHeight, ch: e.clientHeight};""")
    extra = max(0, err["h"] - err["line"])
    moved = [round(b - a) for a, b in zip(before, after) if a is not None and b is not None
             and abs(b - a) > 0.5 and abs(b - a - extra) > 1]
    check(not moved, f"[{size}] the field in error moves the form's fields by {sorted(set(moved))} px "
          f"(beyond its own extra lines, {extra:.0f} px)")
    check(err["sw"] <= err["cw"] + 1 and err["sh"] <= err["ch"] + 1,
          f"[{size}] the epochs error is shown whole, not cut: {el(driver, '#hp-epochs-error').text!r} {err}")
    # The longest field name's message, wrapped and whole at both widths.
    e.clear()
    e.send_keys("10")
    lr = el(driver, "#hp-learning_rate")
    lr.clear()
    lr.send_keys("-1")
    el(driver, "#job-form button[type=submit]").click()
    msg = wait_for(driver, "the learning-rate error", lambda d: el(d, "#hp-learning_rate-error").text) or ""
    cut = js(driver, """const e = document.getElementById('hp-learning_rate-error');
        return [e.scrollWidth - e.clientWidth, e.scrollHeight - e.clientHeight, getComputedStyle(e).textOverflow];""")
    check(cut[0] <= 1 and cut[1] <= 1 and "learning_rate" in msg,
          f"[{size}] the learning-rate error is shown whole: {msg!r} (overflow x, y, text-overflow: {cut})")
    shot(driver, f"new-job-422-{size}")
    if size == "phone":
        no_overflow(driver, "the new-job form")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args:
        sys.exit(__doc__)
    binary = args[0]
    dash.ARTIFACTS = args[1] if len(args) > 1 else "build/browser-artifacts-first-hour"
    os.makedirs(dash.ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="trainyard-first-hour-")
    # One CPU thread a job: the slow job leaves a core to the browser.
    srv, log, base = dash.start_server(binary, tmp, "--worker-threads", "1")
    driver = None
    t_start = time.time()
    try:
        admin = Api(base, open(os.path.join(tmp, "data", "admin.key")).read().strip())
        alpha = Api(base, admin("POST", "/v1/tenants", {"name": "alpha", "quota": {"max_running_jobs": 1}})["key"]["api_key"])
        beta = Api(base, admin("POST", "/v1/tenants", {"name": "beta"})["key"]["api_key"])

        # Alpha's data and jobs. The long one first: it runs while the rest is set up.
        tiny = csv_dataset(alpha, "tiny", 16, 1)
        jobs = {}
        global OTHER_DS
        OTHER_DS = image_dataset(alpha, 300, seed=5, name="bands-test")
        jobs["long"] = submit(alpha, "long", tiny, {"epochs": LONG_EPOCHS, "batch_size": 16, "seed": 1})
        blobs = csv_dataset(alpha, "blobs", 2000, 2)
        noise = csv_dataset(alpha, "noise", 3000, 3, random_labels=True)
        images = image_dataset(alpha)
        # About 0.1 s an epoch: long enough for a per-step curve.
        mlp = {"layers": [{"type": "flatten"}, {"type": "dense", "units": 256}, {"type": "relu"}, {"type": "dense", "units": 3}]}
        cos = {"epochs": 30, "batch_size": 1, "seed": 1, "learning_rate": 0.0003,
               "lr_schedule": {"type": "cosine", "min_lr": 0.00001}}
        wait_job(alpha, jobs["long"], ("succeeded", "failed"), timeout=400)
        # Alpha may run one job at once: these run one after the other.
        jobs["short"] = submit(alpha, "short", images, cos, model=mlp)
        jobs["short2"] = submit(alpha, "short-2", images, {**cos, "learning_rate": 0.0001, "seed": 2}, model=mlp)
        jobs["nan"] = submit(alpha, "nan", blobs, {"epochs": 5, "batch_size": 8, "optimizer": "sgd", "learning_rate": 10,
                                                  "seed": 1}, model={"layers": [
                                                      {"type": "dense", "units": 64}, {"type": "relu"},
                                                      {"type": "dense", "units": 64}, {"type": "relu"},
                                                      {"type": "dense", "units": 3}]})
        jobs["chance"] = submit(alpha, "chance", noise, {"epochs": 4, "batch_size": 32, "seed": 1})
        jobs["one"] = submit(alpha, "one-epoch", tiny, {"epochs": 1, "batch_size": 16, "seed": 1})
        for k in ("short", "short2", "nan", "chance", "one"):
            wait_job(alpha, jobs[k], ("succeeded", "failed"))
        check(alpha("GET", f"/v1/jobs/{jobs['nan']}")["status"] == "failed", "the lr-10 job failed (a non-finite loss)")
        # Slow epochs (about 6 s on one core here) hold alpha's one running slot.
        big = {"layers": [{"type": "flatten"}, {"type": "dense", "units": 2048}, {"type": "relu"},
                          {"type": "dense", "units": 2048}, {"type": "relu"}, {"type": "dense", "units": 3}]}
        jobs["slow"] = submit(alpha, "slow", images, {"epochs": 1000, "batch_size": 1, "seed": 1}, model=big,
                              resources={"gpu": "1g.18gb"})
        wait_job(alpha, jobs["slow"], ("running",))
        # Cancelled while it waits; then one that keeps waiting on the quota.
        jobs["cancelled"] = submit(alpha, "to-cancel", images, {"epochs": 50, "batch_size": 1}, model=mlp)
        alpha("POST", f"/v1/jobs/{jobs['cancelled']}/cancel")
        wait_job(alpha, jobs["cancelled"], ("cancelled",))
        jobs["queued"] = submit(alpha, "queued", blobs, {"epochs": 3})
        print("statuses: " + ", ".join(f"{k} {alpha('GET', f'/v1/jobs/{v}')['status']}" for k, v in jobs.items()))
        beta_job = submit(beta, "beta-job", csv_dataset(beta, "beta-data", 300, 4), {"epochs": 400},
                          resources={"gpu": "1g.18gb"})
        print(f"set-up done in {time.time() - t_start:.1f} s: {json.dumps(jobs)}", flush=True)

        driver = dash.browser()
        driver.set_script_timeout(30)
        driver.get(base + "/")
        wait_for(driver, "the sign-in form", lambda d: d.find_elements(By.ID, "key"))
        check(not js(driver, "return document.getElementById('nav').offsetParent !== null;"), "the nav is hidden while signed out")
        # A wrong key on the first try: the form says the key was not
        # accepted (issue 30: it said "sign in again" before any sign-in).
        el(driver, "#key").send_keys("ty_not_a_real_key")
        el(driver, "#signin button[type=submit]").click()
        msg = wait_for(driver, "the wrong key's message", lambda d: el(d, "#signin-error").text) or ""
        check("not accepted" in msg and "again" not in msg.replace("try again", ""),
              f"a wrong key says it was not accepted: {msg!r}")
        el(driver, "#key").clear()
        el(driver, "#key").send_keys(alpha.key)
        el(driver, "#signin button[type=submit]").click()
        wait_for(driver, "the jobs page", lambda d: d.find_elements(By.ID, "jobs"))
        check(beta_job not in driver.page_source, "alpha's pages show nothing of beta's")

        ttis = {}

        def run(size, what, step):
            try:
                step()
            except Exception as e:   # a missing element: the rest still runs
                check(False, f"[{size}] {what}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

        for size, (w, hgt) in SIZES.items():
            driver.set_window_size(w, hgt)
            print(f"-- {size} ({w}x{hgt})", flush=True)
            run(size, "upload form", lambda: check_upload_form(driver, base, size))
            run(size, "jobs list", lambda: check_jobs_list(driver, base, jobs, size))
            run(size, "job page", lambda: check_job_page(driver, base, alpha, jobs, size))
            if not BEFORE:
                run(size, "new-job form", lambda: check_new_job(driver, base, alpha, jobs, size))
        # Last: on an older build this page froze the tab for minutes.
        for size, (w, hgt) in SIZES.items():
            driver.set_window_size(w, hgt)
            run(size, "20,000-epoch job", lambda: ttis.__setitem__(size, check_long_job(driver, base, jobs["long"], size)))
            if BEFORE:
                break

        errors = dash.severe_errors(driver, r"/v1/jobs(\?dry_run=true)? - Failed to load resource: .* 422",
                                    r"/v1/jobs\?limit=1 - Failed to load resource: .* 401")  # the wrong key
        check(not errors, "browser console errors:\n    " + "\n    ".join(errors))
        for api, job in ((alpha, jobs["slow"]), (beta, beta_job)):
            if api("GET", f"/v1/jobs/{job}")["status"] in ("queued", "running"):
                api("POST", f"/v1/jobs/{job}/cancel")
        print("time to the 20,000-epoch page's table and charts: " + ", ".join(f"{k} {v:.2f} s" for k, v in ttis.items()))
        return dash.finish("first-hour dashboard test", t_start, dash.ARTIFACTS)
    finally:
        dash.stop(driver, srv, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
