#!/usr/bin/env python3
"""Issue 30, finding 8 (the rest) and the runs table, in headless Chromium
at 1280x900 and 390x844.

Starts `trainyard serve` with the simulated H200 (seven 1g.18gb slices)
and makes five tenants through the admin API. The first, alpha-lab,
uploads two datasets both named "fashion-train" and trains three short
runs on the first with different learning rates and batch sizes; then
every tenant runs a long job on a slice. Checks, at each width:

* the device map (admin): the five tenants' colours are far apart (CIE76
  distance at least 50 between any two: the old hash-picked palette gave
  red, rose and rust to three tenants) and each slice has its legend's
  colour;
* a serving replica's slice is named by its deployment, also once the
  deployment no longer lists it (stopping), and one never named says
  "serving replica", never its raw rep_ id (a scripted /v1/devices answer);
* a job's page names its dataset ("fashion-train", the id beside it), not
  only its id;
* the new-job and evaluate pickers tell the two "fashion-train" datasets
  apart: each option shows the created time ("5 Dec 04:10") and a short id
  (its id's first characters);
* the jobs list sorts by a metric when its column's header is clicked
  (validation loss: lowest first, then highest first), and on a phone by
  the "Sort by" select, in the order of the jobs' own metrics;
* a hyperparameter chosen in the column chooser (learning_rate) appears as
  a column with each job's value;
* ticking two runs draws one series per run in the overlay charts, named
  by the jobs, the chart as wide as the card on a phone.

Every failed check is listed. Any SEVERE browser console message fails the
test. Screenshots go to the folder given as the second argument.

Usage: runs.py path/to/trainyard [artifacts-dir]
Exit 77 (skipped) when chromium, chromedriver or selenium is missing.
"""
import itertools
import math
import os
import re
import sys
import tempfile
import time
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard  # noqa: E402  (skips with 77 itself when selenium or chromium is missing)
from dashboard import api_call, browser, check, js, make_csv, start_server  # noqa: E402
from devices import upload_csv, job_status, held_slices, LEGEND, settle  # noqa: E402

from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

WIDE, PHONE = (1280, 900), (390, 844)
TENANTS = ["alpha-lab", "bravo-lab", "charlie-lab", "delta-lab", "echo-lab"]
MODEL = {"layers": [{"type": "dense", "units": 8}, {"type": "relu"}, {"type": "dense", "units": 3}]}
SHORT = [("lr-high", 0.05, 100), ("lr-mid", 0.01, 200), ("lr-low", 0.001, 400)]
MIN_DE = 50


def lab(rgb):
    """CIELAB (D65) of an sRGB triple."""
    def lin(v):
        v /= 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(v) for v in rgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = lambda t: t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116  # noqa: E731
    return (116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z)))


def parse_rgb(s):
    m = re.match(r"rgba?\((\d+), (\d+), (\d+)", s or "")
    return tuple(int(v) for v in m.groups()) if m else None


def submit(base, key, ds, name, epochs, lr=0.01, batch=200):
    return api_call(base, key, "POST", "/v1/jobs", {
        "name": name, "dataset": ds, "resources": {"gpu": "1g.18gb"}, "model": MODEL,
        "hyperparameters": {"epochs": epochs, "batch_size": batch, "learning_rate": lr, "seed": 1}})["id"]


def wait_status(base, key, job, want, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        s = job_status(base, key, job)
        if s in want:
            return s
        time.sleep(0.2)
    sys.exit(f"FAIL: job {job} did not reach {want}")


def go(driver, base, page, css, timeout=30):
    driver.get(f"{base}/#/devices")
    driver.get(f"{base}/#{page}")
    return settle(lambda: driver.find_elements(By.CSS_SELECTOR, css), timeout)


def sign_in(driver, base, key):
    driver.get(base + "/")
    js(driver, "sessionStorage.setItem('trainyard.key', arguments[0]);", key)
    driver.refresh()


def check_colours(driver, base, label):
    go(driver, base, "/devices", "#device-map .slice")
    slices = settle(lambda: (lambda s: s if len(s) >= len(TENANTS) else None)(held_slices(driver)), 20) or []
    legend = [x for x in js(driver, LEGEND) if any(t in x["text"] for t in TENANTS)]
    dashboard.shot(driver, f"colours-{label}")
    check(len(legend) == len(TENANTS), f"[{label}] the legend names the {len(TENANTS)} tenants: {[x['text'] for x in legend]}")
    colours = {x["text"].strip(): parse_rgb(x["colour"]) for x in legend}
    worst = min(((math.dist(lab(a), lab(b)), f"{n} {a} / {m} {b}")
                 for (n, a), (m, b) in itertools.combinations(colours.items(), 2)), default=(0, "none"))
    print(f"  [{label}] tenant colours: {colours}", flush=True)
    check(worst[0] >= MIN_DE, f"[{label}] any two tenants' colours are at least {MIN_DE} apart (CIE76): "
          f"the closest are {worst[0]:.1f} ({worst[1]})")
    for s in slices:
        name = next((t for t in TENANTS if t in s["text"]), None)
        check(name and parse_rgb(s["colour"]) == colours.get(name),
              f"[{label}] slot {s['slot']} ({name}) has its tenant's legend colour {s['colour']}")


# The device map's answers with two serving replicas on the free slots:
# rep_seenfirst1 named by its deployment (fashion-serve) in the first answer
# only, as a replica stopping after a scale-down or delete drops out of its
# deployment; rep_neverseen1 never named. A slice never shows a raw id.
REPLICAS = r"""
const real = window.fetch;
let calls = 0;
window.fetch = async (url, opts) => {
  const r = await real(url, opts);
  if (!/\/v1\/devices$/.test(String(url))) return r;
  const doc = await r.clone().json();
  const slices = doc.gpus[0].slices, held = slices.find((x) => x.state === 'held');
  const free = slices.filter((x) => x.state === 'free');
  if (!held || free.length < 2) return r;
  const first = calls++ === 0;
  Object.assign(free[0], {state: 'held', tenant: held.tenant, tenant_name: held.tenant_name, job: 'rep_seenfirst1',
    job_name: first ? 'fashion-serve' : null, deployment: first ? {id: 'dep_fashion1', name: 'fashion-serve'} : null});
  Object.assign(free[1], {state: 'held', tenant: held.tenant, tenant_name: held.tenant_name, job: 'rep_neverseen1',
    job_name: null, deployment: null});
  return new Response(JSON.stringify(doc), {status: r.status, headers: r.headers});
};
"""


def check_replica_labels(driver, base, label):
    script = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": REPLICAS})["identifier"]
    try:
        driver.get(f"{base}/#/devices")
        driver.refresh()
        texts = lambda: js(driver, """return Object.fromEntries([...document.querySelectorAll('#device-map .slice')]
            .map((e) => [e.dataset.job || '', e.innerText]));""")  # noqa: E731
        # The map polls every 2 s while a replica holds a slice: wait for a
        # redraw from an answer without the deployment.
        settle(lambda: js(driver, "return window.performance.getEntriesByName(location.origin + '/v1/devices').length >= 2;"), 10)
        time.sleep(0.5)
        got = texts()
        seen, never = got.get("rep_seenfirst1", ""), got.get("rep_neverseen1", "")
        dashboard.shot(driver, f"replicas-{label}")
        check("replica of fashion-serve" in seen,
              f"[{label}] a replica stopping after its deployment dropped it keeps the deployment's name: {seen!r}")
        check("serving replica" in never and "rep_" not in never,
              f"[{label}] a replica never named says it is a serving replica, not its raw id: {never!r}")
        check(not any("rep_" in t for t in got.values()), f"[{label}] no slice shows a raw rep_ id")
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script})


def options(driver, css):
    return js(driver, f"return [...document.querySelectorAll('{css} option')].map((o) => [o.value, o.textContent]);")


def check_pickers(driver, base, label, datasets):
    """Two datasets named fashion-train: each option says when and which."""
    time_re = r"\b\d{1,2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d\d:\d\d\b"
    for where, page, css in (("new-job dataset", "/new", "#job-dataset"),
                             ("validation source", "/new", "#job-validation-source")):
        go(driver, base, page, f"{css} option")
        opts = settle(lambda: (lambda o: o if sum(1 for _, t in o if "fashion-train" in t) >= 2 else None)(
            options(driver, css)), 10) or options(driver, css)
        texts = {v: t for v, t in opts if v in datasets}
        check(len(texts) == 2 and len(set(texts.values())) == 2,
              f"[{label}] the {where} picker's two fashion-train options differ: {list(texts.values())}")
        for ds, t in texts.items():
            check(re.search(time_re, t) and ds[:7] in t,
                  f"[{label}] the {where} option of {ds} shows its created time and short id {ds[:7]!r}: {t!r}")
        if label == "phone":
            over = dashboard.overflow(driver)
            check(over <= 0, f"[{label}] the longer {where} labels leave the form within the phone (overflow {over} px)")
    return time_re


def check_job_page(driver, base, label, job, time_re, datasets):
    go(driver, base, f"/jobs/{job}", "#job-summary")
    link = settle(lambda: js(driver, """const a = document.getElementById('dataset-link') ||
        [...document.querySelectorAll('#job-summary dt')].find((d) => d.textContent === 'Dataset')?.nextElementSibling;
        return a && a.innerText.includes('fashion-train') ? a.innerText : null;"""), 10)
    shown = link or js(driver, """const d = [...document.querySelectorAll('#job-summary dt')].find((x) => x.textContent === 'Dataset');
        return d ? d.nextElementSibling.innerText : null;""")
    check(link, f"[{label}] the job's page names its dataset fashion-train: {shown!r}")
    # The evaluate picker tells the two apart too.
    btn = driver.find_elements(By.ID, "show-evaluate")
    if check(btn, f"[{label}] the job's page offers Evaluate"):
        btn[0].click()
        opts = settle(lambda: (lambda o: o if len(o) >= 2 else None)(options(driver, "#eval-dataset")), 10) or []
        texts = [t for v, t in opts if v in datasets]
        check(len(texts) == 2 and all(re.search(time_re, t) for t in texts) and
              all(ds[:7] in t for ds, t in zip([v for v, _ in opts if v in datasets], texts)),
              f"[{label}] the evaluate picker shows time and short id: {texts}")
    dashboard.shot(driver, f"job-page-{label}")


def row_order(driver, ids):
    got = js(driver, "return [...document.querySelectorAll('#jobs-body tr')].map((r) => r.dataset.jobId);")
    return [j for j in got if j in ids]


VAL_LOSS_HEADER = "#jobs th[data-sort='metric:val_loss'] button"


def val_loss_header(driver):
    """The val. loss header's button when it is shown, else None. The live
    table re-renders as events come, so an element found a moment ago may
    be gone (stale): look again rather than fail."""
    try:
        h = driver.find_elements(By.CSS_SELECTOR, VAL_LOSS_HEADER)
        return h[0] if h and h[0].is_displayed() else None
    except StaleElementReferenceException:
        return None


def click_val_loss_header(driver):
    """Clicks the header, again if the table re-rendered under the click."""
    def attempt():
        try:
            h = val_loss_header(driver)
            if h:
                h.click()
                return True
        except StaleElementReferenceException:
            pass
        return False
    return settle(attempt, 5)


def check_runs_table(driver, base, label, runs, metrics):
    """runs: {id: name}; metrics: {id: val_loss}."""
    go(driver, base, "/jobs", "#jobs-body tr")
    settle(lambda: len(row_order(driver, runs)) == len(runs), 10)
    by_loss = sorted(runs, key=lambda j: metrics[j])
    if label == "wide":
        header = settle(lambda: val_loss_header(driver), 5)
        if check(header is not None, f"[{label}] the val. loss column's header can be clicked to sort"):
            click_val_loss_header(driver)
            got = settle(lambda: (lambda o: o if o == by_loss else None)(row_order(driver, runs)), 5) or row_order(driver, runs)
            check(got == by_loss, f"[{label}] one click sorts by val. loss, lowest first: {got} (want {by_loss})")
            click_val_loss_header(driver)
            got = settle(lambda: (lambda o: o if o == by_loss[::-1] else None)(row_order(driver, runs)), 5) or row_order(driver, runs)
            check(got == by_loss[::-1], f"[{label}] a second click sorts highest first: {got}")
    else:
        sel = driver.find_elements(By.ID, "sort-by")
        if check(sel and sel[0].is_displayed(), f"[{label}] a Sort by select is on the phone's page"):
            Select(sel[0]).select_by_value("metric|val_loss|1")
            got = settle(lambda: (lambda o: o if o == by_loss else None)(row_order(driver, runs)), 5) or row_order(driver, runs)
            check(got == by_loss, f"[{label}] sorted by val. loss, lowest first: {got} (want {by_loss})")
    # A hyperparameter column, chosen.
    box = driver.find_elements(By.CSS_SELECTOR, "#hp-columns input[value='learning_rate']")
    if check(driver.find_elements(By.ID, "column-chooser"), f"[{label}] the jobs list has a column chooser"):
        driver.find_element(By.CSS_SELECTOR, "#column-chooser summary").click()
        box = driver.find_elements(By.CSS_SELECTOR, "#hp-columns input[value='learning_rate']")
    if check(box, f"[{label}] the chooser lists learning_rate"):
        if not box[0].is_selected():
            box[0].click()
        cells = settle(lambda: js(driver, """return [...document.querySelectorAll("#jobs-body td[data-hparam='learning_rate']")]
            .filter((c) => c.getClientRects().length).map((c) => [c.closest('tr').dataset.jobId, c.innerText]);"""), 5) or []
        want = {j: str(lr) for j, (_, lr, _b) in zip(runs, SHORT)}
        got = {j: re.sub(r"^learning_rate\s*", "", t).strip() for j, t in cells if j in runs}
        check(got == want, f"[{label}] a learning_rate column shows each run's value: {got} (want {want})")
        head = js(driver, "const t = document.querySelector(\"#jobs th[data-sort='hparam:learning_rate']\"); return t ? t.innerText : null;")
        check(head and "learning_rate" in head, f"[{label}] the column's header says learning_rate: {head!r}")
    # Two runs ticked: one series per run in each overlay chart.
    picks = list(runs)[:2]
    for j in picks:
        tick = driver.find_elements(By.CSS_SELECTOR, f"input.select-run[data-job='{j}']")
        if check(tick, f"[{label}] run {runs[j]} has a tick to compare it"):
            if not tick[0].is_selected():
                driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", tick[0])
                tick[0].click()
    info = settle(lambda: js(driver, """const c = document.getElementById('overlay-loss'), v = document.getElementById('overlay-val');
        if (!c || c.dataset.series !== '2') return null;
        const r = c.getBoundingClientRect(), card = document.getElementById('overlay').getBoundingClientRect();
        return {loss: JSON.parse(c.dataset.names), val: JSON.parse(v.dataset.names || '[]'), metric: v.dataset.metric,
                w: r.width, card: card.width, inner: window.innerWidth,
                legend: [...document.querySelectorAll('#overlay-legend li')].map((l) => l.innerText.trim())};"""), 15)
    want = sorted(runs[j] for j in picks)
    check(info and sorted(info["loss"]) == want and sorted(info["val"]) == want and sorted(info["legend"]) == want,
          f"[{label}] the overlay draws one loss and one {info and info['metric']} series per ticked run, named: {info} (want {want})")
    if info and label == "phone":
        check(info["w"] >= 0.85 * info["card"] and info["card"] >= 0.85 * info["inner"],
              f"[{label}] the overlay chart runs the phone's width: {info['w']:.0f} px of a {info['card']:.0f} px card, window {info['inner']}")
    if js(driver, "return !!document.getElementById('overlay');"):
        js(driver, "document.getElementById('overlay').scrollIntoView();")
    dashboard.shot(driver, f"runs-{label}")
    if label == "phone":
        over = dashboard.overflow(driver)
        check(over <= 0, f"[{label}] the runs table fits the phone (overflow {over} px)")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    dashboard.ARTIFACTS = sys.argv[2] if len(sys.argv) > 2 else "build/browser-artifacts-runs"
    os.makedirs(dashboard.ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="trainyard-runs-")
    csv = os.path.join(tmp, "blobs.csv")
    make_csv(csv)
    srv, log, base = start_server(binary, tmp)
    os.setpriority(os.PRIO_PROCESS, srv.pid, 10)
    driver, jobs = None, []
    t0 = time.time()
    try:
        admin = open(os.path.join(tmp, "data", "admin.key")).read().strip()
        keys = {}
        for t in TENANTS:
            keys[t] = api_call(base, admin, "POST", "/v1/tenants", {"name": t})["key"]["api_key"]
        alpha = keys[TENANTS[0]]
        ds = [upload_csv(base, alpha, csv, "fashion-train") for _ in range(2)]
        runs = {}
        for name, lr, batch in SHORT:
            runs[submit(base, alpha, ds[0], name, 4, lr, batch)] = name
        for j in runs:
            wait_status(base, alpha, j, {"succeeded"})
        metrics = {j: api_call(base, alpha, "GET", f"/v1/jobs/{j}")["metrics"]["val_loss"] for j in runs}
        print(f"val_loss of the runs: {metrics}", flush=True)
        for t in TENANTS:
            d = ds[0] if t == TENANTS[0] else upload_csv(base, keys[t], csv, f"{t}-blobs")
            jobs.append((keys[t], submit(base, keys[t], d, f"{t}-long", 100000)))
        for key, job in jobs:
            wait_status(base, key, job, {"running"})

        driver = browser()
        for size, label in ((WIDE, "wide"), (PHONE, "phone")):
            print(f"at {size[0]}x{size[1]}:", flush=True)
            driver.set_window_size(*size)
            sign_in(driver, base, admin)
            check_colours(driver, base, label)
            check_replica_labels(driver, base, label)
            sign_in(driver, base, alpha)
            time_re = check_pickers(driver, base, label, ds)
            check_job_page(driver, base, label, next(iter(runs)), time_re, ds)
            js(driver, "localStorage.clear();")
            check_runs_table(driver, base, label, runs, metrics)

        errors = dashboard.severe_errors(driver)
        check(not errors, "no SEVERE browser console messages: " + " | ".join(errors))
        return dashboard.finish("runs table test", t0, dashboard.ARTIFACTS)
    finally:
        for key, job in jobs:
            try:
                api_call(base, key, "POST", f"/v1/jobs/{job}/cancel")
            except (urllib.error.URLError, OSError):
                pass
        dashboard.stop(driver, srv, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
