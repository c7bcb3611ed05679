#!/usr/bin/env python3
"""Regression runs and typed CSV columns in the dashboard, checked against
the real server (not scripted replies), in headless Chromium at 1280x900
and 390x844.

Uploads two CSVs made here:

* houses: 600 rows, x1..x4 and price = 3e5 + 1e5 * (w . x) + noise, the
  target in natural units; two short jobs on it with different learning
  rates;
* mixed: a numeric column with empty cells (sqm), a city column of seven
  categories with empty cells, a yes/no column (garden), a price target;
  one short job on it (a tabular model).

Checks, at each width:

* the runs table has RMSE and R² columns whose cells are the jobs' values
  as GET /v1/jobs/{id} reports them (metrics.rmse, metrics.r2);
* sorting by R² (the header's button on a wide screen, the Sort by select
  on a phone) puts the higher R² first;
* a regression job's page: the epochs table has Val. RMSE and Val. R²
  columns with the newest epoch's values (GET /v1/jobs/{id}/metrics), and
  the second chart draws validation RMSE and validation R² from the
  curves, R² on its own axis (an R² of 0.9 next to an RMSE of 20,000 on
  one axis is a flat line at 0);
* the overlay of the two runs draws the regression metric (val_r2) with
  each run's values;
* the tabular model's try-it asks for the raw columns: a number field for
  sqm, a yes/no select for garden, a select of the model's categories plus
  "other" (free text) for city; empty is missing and the hint says it is
  imputed; the row goes to /v1/models/{id}/predict as an object keyed by
  column name; the prediction shown (in price units) equals the API's for
  the same raw row, also for an unseen city;
* the mixed dataset's page lists its columns: name, type, the first
  categories and their count, missing cells, as the dataset document has
  them; its preview's headers are the columns.

Every failed check is listed. Any SEVERE browser console message fails the
test. Screenshots go to the folder given as the second argument.

Usage: regression.py path/to/trainyard [artifacts-dir]
Exit 77 (skipped) when chromium, chromedriver or selenium is missing.
"""
import json
import os
import random
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard  # noqa: E402  (skips with 77 itself when selenium or chromium is missing)
from dashboard import api_call, browser, check, js, start_server  # noqa: E402
from devices import settle  # noqa: E402
from runs import go, sign_in, wait_status, row_order  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

WIDE, PHONE = (1280, 900), (390, 844)
MODEL = {"layers": [{"type": "dense", "units": 16}, {"type": "relu"}, {"type": "dense", "units": 1}]}
RUNS = [("houses-lr-high", 0.01), ("houses-lr-low", 0.0005)]
CITIES = ["bologna", "florence", "genoa", "milan", "naples", "rome", "turin"]


def make_houses(path):
    rng = random.Random(3)
    w = [0.6, -0.4, 0.3, 0.2]
    with open(path, "w") as f:
        f.write("x1,x2,x3,x4,price\n")
        for _ in range(600):
            x = [rng.gauss(0, 1) for _ in w]
            price = 3e5 + 1e5 * sum(a * b for a, b in zip(w, x)) + rng.gauss(0, 2e4)
            f.write(",".join(f"{v:.4f}" for v in x) + f",{price:.2f}\n")


def make_mixed(path):
    """sqm (numeric, every 9th empty), city (7 categories, every 13th
    empty), garden (yes/no), price."""
    rng = random.Random(4)
    with open(path, "w") as f:
        f.write("sqm,city,garden,price\n")
        for i in range(400):
            sqm = rng.uniform(40, 160)
            city = CITIES[i % len(CITIES)]
            garden = rng.random() < 0.5
            price = 1e5 + 2500 * sqm + 15000 * CITIES.index(city) + 40000 * garden + rng.gauss(0, 1e4)
            f.write(f"{'' if i % 9 == 4 else f'{sqm:.1f}'},{'' if i % 13 == 6 else city},"
                    f"{'yes' if garden else 'no'},{price:.2f}\n")


def upload(base, key, path, name):
    boundary = "tyregression7"
    body = b""
    for field, filename, data in (("name", None, name.encode()), ("format", None, b"csv"),
                                  ("label_column", None, b"price"), ("task", None, b"regression"),
                                  ("file", os.path.basename(path), open(path, "rb").read())):
        disp = f'form-data; name="{field}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return api_call(base, key, "POST", "/v1/datasets", body, f"multipart/form-data; boundary={boundary}")


def submit(base, key, ds, name, lr):
    return api_call(base, key, "POST", "/v1/jobs", {
        "name": name, "dataset": ds, "resources": {"gpu": "1g.18gb"}, "model": MODEL,
        "hyperparameters": {"epochs": 6, "batch_size": 32, "learning_rate": lr, "seed": 1}})["id"]


def number(text):
    """The number a cell shows ("20,345.1234" or "0.9123"), or None."""
    m = re.search(r"-?[\d,]*\.?\d+(e[-+]?\d+)?", (text or "").replace("\u2212", "-"))
    return float(m.group(0).replace(",", "")) if m else None


def close(shown, want, digits=4):
    """shown is want as the page rounds it: within half a unit of its last
    shown decimal (4 by default) or 1e-6 relative."""
    return shown is not None and want is not None and abs(shown - want) <= max(0.5 * 10 ** -digits, 1e-6 * abs(want)) + 1e-12


def decimals(text):
    """How many decimals a cell shows: "19,645.4" 1, "0.9123" 4."""
    m = re.search(r"\.(\d+)", text or "")
    return len(m.group(1)) if m else 0


def rounded_as_shown(text, want):
    """text shows want with at most 4 decimals (one above 1,000: a figure
    in the target's units is rounded to tenths, digit groups marked)."""
    d = decimals(text)
    return close(number(text), want, d) and d == (1 if abs(want) >= 1000 else 4)


def cell_map(driver, key):
    return dict(js(driver, f"""return [...document.querySelectorAll("#jobs-body td[data-metric='{key}']")]
        .filter((c) => c.getClientRects().length).map((c) => [c.closest('tr').dataset.jobId, c.innerText]);"""))


def check_runs_table(driver, base, label, runs, metrics):
    """runs: {id: name}; metrics: {id: the job's metrics}."""
    go(driver, base, "/jobs", "#jobs-body tr")
    settle(lambda: len(row_order(driver, runs)) == len(runs), 10)
    for key, title in (("rmse", "RMSE"), ("r2", "R²")):
        cells = settle(lambda: (lambda c: c if all(j in c for j in runs) else None)(cell_map(driver, key)), 10) or cell_map(driver, key)
        head = js(driver, f"const t = document.querySelector(\"#jobs th[data-sort='metric:{key}']\"); return t ? t.innerText : null;")
        check(head and title in head, f"[{label}] the runs table has a {title} column: {head!r}")
        for j in runs:
            shown, want = re.sub(r"^[^\d\-−]*", "", cells.get(j, "")), metrics[j][key]
            check(rounded_as_shown(shown, want), f"[{label}] {runs[j]}'s {title} cell {cells.get(j)!r} is the API's {want}")
    best_first = sorted(runs, key=lambda j: -metrics[j]["r2"])
    if label == "wide":
        button = driver.find_elements(By.CSS_SELECTOR, "#jobs th[data-sort='metric:r2'] button")
        if check(button and button[0].is_displayed(), f"[{label}] the R² header can be clicked to sort"):
            button[0].click()
    else:
        sel = driver.find_elements(By.ID, "sort-by")
        values = [o.get_attribute("value") for o in sel[0].find_elements(By.TAG_NAME, "option")] if sel else []
        if check("metric|r2|-1" in values, f"[{label}] the Sort by select offers R², highest first: {values}"):
            Select(sel[0]).select_by_value("metric|r2|-1")
    got = settle(lambda: (lambda o: o if o == best_first else None)(row_order(driver, runs)), 5) or row_order(driver, runs)
    check(got == best_first, f"[{label}] sorted by R², the best (highest) first: {[runs[j] for j in got]} "
          f"(R² {[metrics[j]['r2'] for j in got]})")
    # The overlay of both runs draws the regression metric.
    for j in runs:
        tick = driver.find_elements(By.CSS_SELECTOR, f"input.select-run[data-job='{j}']")
        if check(tick, f"[{label}] run {runs[j]} has a tick to compare it") and not tick[0].is_selected():
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", tick[0])
            tick[0].click()
    info = settle(lambda: js(driver, """const v = document.getElementById('overlay-val');
        if (!v || v.dataset.series !== '2') return null;
        const c = window.Chart && window.Chart.getChart(v);
        return {metric: v.dataset.metric, names: JSON.parse(v.dataset.names),
                last: c ? Object.fromEntries(c.data.datasets.map((d) => [d.label, d.data.filter((p) => p.y !== null).at(-1)])) : null};"""), 15)
    check(info and info["metric"] in ("val_r2", "val_rmse") and sorted(info["names"]) == sorted(runs.values()),
          f"[{label}] the overlay's validation chart draws a regression metric for both runs: {info}")
    if info and info["last"]:
        for j, name in runs.items():
            pts = api_call(base, KEY, "GET", f"/v1/jobs/{j}/curves?points=200")["epochs"]["points"]
            want = pts[-1].get(info["metric"])
            got = info["last"].get(name)
            check(got and close(got["y"], want, 9) and got["x"] == pts[-1]["epoch"],
                  f"[{label}] the overlay's last {info['metric']} point of {name} is the curves' {want}: {got}")
    js(driver, "document.getElementById('overlay')?.scrollIntoView();")
    dashboard.shot(driver, f"runs-{label}")
    if label == "phone":
        check(dashboard.overflow(driver) <= 0, f"[{label}] the runs table fits the phone")


def check_job_page(driver, base, label, job, name):
    go(driver, base, f"/jobs/{job}", "#epochs tbody tr")
    last = api_call(base, KEY, "GET", f"/v1/jobs/{job}/metrics?order=desc&limit=1")["epochs"][0]
    heads = js(driver, "return [...document.querySelectorAll('#epochs thead th')].filter((t) => t.getClientRects().length).map((t) => t.innerText);")
    row = js(driver, "const r = document.querySelector('#epochs tbody tr'); return r ? [...r.children].filter((t) => t.getClientRects().length).map((t) => t.innerText) : [];")
    shown = dict(zip(heads, row))
    for col, key in (("Val. RMSE", "val_rmse"), ("Val. R²", "val_r2")):
        check(col in shown and rounded_as_shown(shown[col], last[key]),
              f"[{label}] {name}'s epochs table shows {col} of epoch {last['epoch']}: {shown.get(col)!r} (API {last[key]})")
    info = settle(lambda: js(driver, """const c = window.Chart && window.Chart.getChart(document.getElementById('acc-chart'));
        if (!c || !c.data.datasets.length) return null;
        return c.data.datasets.map((d) => ({label: d.label, axis: d.yAxisID || 'y', last: d.data.filter((p) => p.y !== null).at(-1),
          min: c.scales[d.yAxisID || 'y'].min, max: c.scales[d.yAxisID || 'y'].max}));"""), 10) or []
    sets = {d["label"]: d for d in info}
    pts = api_call(base, KEY, "GET", f"/v1/jobs/{job}/curves?points=200")["epochs"]["points"]
    for series, key in (("validation RMSE", "val_rmse"), ("validation R²", "val_r2")):
        d = sets.get(series)
        check(d and d["last"] and close(d["last"]["y"], pts[-1][key], 9),
              f"[{label}] {name}'s second chart draws {series} up to the curves' {pts[-1][key]}: {d}")
    r2, rmse = sets.get("validation R²"), sets.get("validation RMSE")
    if r2 and rmse:
        check(r2["axis"] != rmse["axis"] and r2["max"] <= 2 and rmse["max"] >= pts[-1]["val_rmse"],
              f"[{label}] R² has its own axis (to {r2['max']}), not RMSE's (to {rmse['max']})")
    js(driver, "document.getElementById('charts').scrollIntoView();")
    dashboard.shot(driver, f"job-{label}")


# Records the bodies sent to .../predict (the form's request).
SPY = r"""
window.__predicts = [];
const real = window.fetch;
window.fetch = (url, opts) => {
  if (/\/predict$/.test(String(url))) window.__predicts.push(opts && opts.body);
  return real(url, opts);
};
"""


def check_try_it(driver, base, label, model, mdoc, target):
    go(driver, base, f"/models/{model}", "#predict")
    js(driver, SPY)
    cols = {c["name"]: c for c in mdoc["columns"]}
    sqm = driver.find_elements(By.CSS_SELECTOR, "#try-it [data-column='sqm']")
    city = driver.find_elements(By.CSS_SELECTOR, "#try-it select[data-column='city']")
    garden = driver.find_elements(By.CSS_SELECTOR, "#try-it select[data-column='garden']")
    check(sqm and sqm[0].get_attribute("type") == "number", f"[{label}] sqm (numeric) is a number field")
    check(garden and sorted(o.get_attribute("value") for o in garden[0].find_elements(By.TAG_NAME, "option")) == ["", "false", "true"],
          f"[{label}] garden (boolean) is a select of missing, yes (true) and no (false)")
    city_opts = [o.get_attribute("value") for o in city[0].find_elements(By.TAG_NAME, "option")] if city else []
    check(all(c in city_opts for c in cols["city"]["categories"]) and "" in city_opts and len(city_opts) == len(cols["city"]["categories"]) + 2,
          f"[{label}] city (categorical) is a select of the model's categories, missing and other: {city_opts}")
    hint = js(driver, "const e = document.getElementById('columns-hint'); return e ? e.innerText : '';")
    check("imputed" in hint and "empty" in hint.lower(), f"[{label}] the hint says an empty field is missing and imputed: {hint!r}")
    others = len(js(driver, "return [...document.querySelectorAll('#try-it input[type=number]')].filter((e) => !e.dataset.column);"))
    check(others == 0, f"[{label}] no one-hot feature fields (city=rome ...): {others} unnamed number fields")
    if not (sqm and city and garden):
        return
    rows = [({"sqm": None, "city": "milan", "garden": True}, "", "milan", "true", None),
            ({"sqm": 85, "city": "palermo", "garden": False}, "85", "__other__", "false", "palermo"),
            ({"sqm": 120.5, "city": None, "garden": None}, "120.5", "", "", None)]
    for k, (raw, s, c, g, other) in enumerate(rows):
        sqm[0].clear()
        if s:
            sqm[0].send_keys(s)
        Select(city[0]).select_by_value(c)
        Select(garden[0]).select_by_value(g)
        if other:
            box = driver.find_elements(By.CSS_SELECTOR, "#try-it input[data-column='city']")
            if not check(box and box[0].is_displayed(), f"[{label}] 'other' shows a text field for an unseen city"):
                continue
            box[0].clear()
            box[0].send_keys(other)
        before = js(driver, "document.getElementById('prediction').replaceChildren(); return window.__predicts.length;")
        driver.find_element(By.ID, "predict").click()
        value = settle(lambda: js(driver, "const e = document.getElementById('predicted-value'); return e && window.__predicts.length > arguments[0] ? e.dataset.value : null;", before), 10)
        sent = js(driver, "return window.__predicts.at(-1);")
        body = json.loads(sent) if sent else {}
        check(body.get("inputs") == [raw], f"[{label}] row {k + 1} goes to predict as an object keyed by column: {sent} (want {[raw]})")
        want = api_call(base, KEY, "POST", f"/v1/models/{model}/predict", {"inputs": [raw]})["outputs"][0][0]
        text = js(driver, "return document.getElementById('prediction').innerText;")
        check(value is not None and float(value) == want and target in text and close(number(text.split(":")[-1]), want, 2),
              f"[{label}] row {k + 1} {raw}: the page's prediction {text!r} ({value}) is the API's {want}")
    dashboard.shot(driver, f"try-it-{label}")
    if label == "phone":
        check(dashboard.overflow(driver) <= 0, f"[{label}] the try-it form fits the phone")


def check_dataset_columns(driver, base, label, ds):
    go(driver, base, f"/datasets/{ds['id']}", "#dataset-columns tbody tr")
    got = js(driver, """return [...document.querySelectorAll('#dataset-columns tbody tr')].map((r) => ({
        name: r.dataset.column, cells: Object.fromEntries([...r.children].map((c) => [c.dataset.label || c.cellIndex, c.innerText]))}));""")
    check([r["name"] for r in got] == [c["name"] for c in ds["columns"]],
          f"[{label}] the columns table lists {[c['name'] for c in ds['columns']]}: {[r['name'] for r in got]}")
    for c, r in zip(ds["columns"], got):
        cells = r["cells"]
        check(cells.get("Type") == c["type"], f"[{label}] {c['name']}'s type is {c['type']}: {cells.get('Type')!r}")
        check(number(cells.get("Missing")) == c["missing"], f"[{label}] {c['name']}'s missing count is {c['missing']}: {cells.get('Missing')!r}")
        cats = c.get("categories") or []
        text = cells.get("Categories", "")
        if cats:
            check(all(x in text for x in cats[:4]) and f"{len(cats)} categories" in text and cats[-1] not in text,
                  f"[{label}] {c['name']}'s categories show the first few and the count {len(cats)}: {text!r}")
        else:
            check(text.strip() in ("—", ""), f"[{label}] {c['name']} has no categories: {text!r}")
    # The preview loads on its own request: waited for (a loaded machine
    # read it before it came, and saw no headers).
    want = ["#"] + [c["name"] for c in ds["columns"]] + ["price"]
    heads = settle(lambda: (lambda x: x if x == want else None)(
        js(driver, "return [...document.querySelectorAll('#preview thead th')].map((t) => t.innerText);")), 10) or \
        js(driver, "return [...document.querySelectorAll('#preview thead th')].map((t) => t.innerText);")
    check(heads == want, f"[{label}] the preview's headers are the raw columns: {heads} (want {want})")
    js(driver, "document.getElementById('dataset-columns')?.scrollIntoView();")
    dashboard.shot(driver, f"dataset-columns-{label}")
    if label == "phone":
        check(dashboard.overflow(driver) <= 0, f"[{label}] the dataset page fits the phone")


KEY = None


def main():
    global KEY
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    dashboard.ARTIFACTS = sys.argv[2] if len(sys.argv) > 2 else "build/browser-artifacts-regression"
    os.makedirs(dashboard.ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="trainyard-regression-")
    houses, mixed = os.path.join(tmp, "houses.csv"), os.path.join(tmp, "mixed.csv")
    make_houses(houses)
    make_mixed(mixed)
    srv, log, base = start_server(binary, tmp)
    os.setpriority(os.PRIO_PROCESS, srv.pid, 10)
    driver = None
    t0 = time.time()
    try:
        admin = open(os.path.join(tmp, "data", "admin.key")).read().strip()
        KEY = api_call(base, admin, "POST", "/v1/tenants", {"name": "houses-lab"})["key"]["api_key"]
        ds = upload(base, KEY, houses, "houses")["id"]
        mds = upload(base, KEY, mixed, "mixed-houses")
        runs = {submit(base, KEY, ds, name, lr): name for name, lr in RUNS}
        tab_job = submit(base, KEY, mds["id"], "mixed-houses-run", 0.01)
        for j in [*runs, tab_job]:
            wait_status(base, KEY, j, {"succeeded"})
        metrics = {j: api_call(base, KEY, "GET", f"/v1/jobs/{j}")["metrics"] for j in runs}
        print("the runs' metrics: " + json.dumps({runs[j]: {k: m.get(k) for k in ("rmse", "mae", "r2")} for j, m in metrics.items()}), flush=True)
        model = api_call(base, KEY, "GET", f"/v1/jobs/{tab_job}")["model"]
        mdoc = api_call(base, KEY, "GET", f"/v1/models/{model}")
        mds = api_call(base, KEY, "GET", f"/v1/datasets/{mds['id']}")
        print(f"the mixed dataset's columns: {json.dumps(mds.get('columns'))}", flush=True)

        driver = browser()
        for size, label in ((WIDE, "wide"), (PHONE, "phone")):
            print(f"at {size[0]}x{size[1]}:", flush=True)
            driver.set_window_size(*size)
            sign_in(driver, base, KEY)
            js(driver, "localStorage.clear();")
            check_runs_table(driver, base, label, runs, metrics)
            check_job_page(driver, base, label, next(iter(runs)), RUNS[0][0])
            check_try_it(driver, base, label, model, mdoc, "price")
            check_dataset_columns(driver, base, label, mds)

        errors = dashboard.severe_errors(driver)
        check(not errors, "no SEVERE browser console messages: " + " | ".join(errors))
        return dashboard.finish("regression and typed-columns test", t0, dashboard.ARTIFACTS)
    finally:
        dashboard.stop(driver, srv, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
