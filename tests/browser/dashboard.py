#!/usr/bin/env python3
"""The dashboard end to end in headless Chromium.

Starts `trainyard serve` on a free port with a temporary data folder and the
simulated H200 (seven 1g slices), then, as a person would in the browser:
signs in with the admin key, uploads a small CSV through the upload form,
submits a job from the new-job form (first with a bad epochs value, whose 422
must appear beside the epochs input), watches the chart gain points while
the job runs, sees its slice held on the device map, sees the jobs table go
to succeeded without a reload, sees the slice free again, and predicts from
the model's page; then, for a tiny image model trained through the API,
picks a test image of its dataset and predicts it; then serves the first
model as a deployment made through the Deployments form (a bad name first,
whose 422 must appear beside the name input; then gpu "none"), waits for the
page to show it ready, scales it, sends predicts through the API, sees the
request count and the latency and batch-size canvases update, rolls it to
another model and deletes it through the UI, and sees a replica on a MIG
slice named on the device map. Any SEVERE browser console message fails the test, except
the deliberate 422s. Screenshots of each stage go to the folder given as the
second argument (default build/browser-artifacts).

Usage: dashboard.py path/to/trainyard [artifacts-dir]
Exit 77 (skipped) when chromium, chromedriver or selenium is missing.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
EPOCHS = 60          # about 0.2 s each here: long enough to watch it run


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(77)


try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:
    skip("python3-selenium is missing (apt-get install python3-selenium)")
for path, pkg in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
    if not os.access(path, os.X_OK):
        skip(f"{path} is missing (apt-get install {pkg})")

ARTIFACTS = None
SHOTS = []


def shot(driver, name):
    path = os.path.join(ARTIFACTS, f"{len(SHOTS) + 1:02d}-{name}.png")
    driver.save_screenshot(path)
    SHOTS.append(path)
    print(f"  screenshot: {path}", flush=True)


def make_csv(path):
    """3 classes of 8 features, 4000 rows: learnable, quick to upload."""
    rng = random.Random(1)
    with open(path, "w") as f:
        f.write(",".join([f"f{i}" for i in range(1, 9)] + ["label"]) + "\n")
        for _ in range(4000):
            c = rng.randrange(3)
            xs = [rng.gauss(c * (j % 3 - 1), 1.0) for j in range(8)]
            f.write(",".join(f"{x:.3f}" for x in xs) + f",{'abc'[c]}\n")


def start_server(binary, tmp, *extra):
    """`trainyard serve` on a free port with the simulated H200 (more flags
    in extra); returns (process, log file, base URL)."""
    log = open(os.path.join(tmp, "server.log"), "w")
    here = os.path.dirname(os.path.abspath(__file__))
    devices = os.path.normpath(os.path.join(here, "..", "..", "gpu", "sim", "h200-7x1g.json"))
    srv = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--data",
                            os.path.join(tmp, "data"), "--devices", f"sim:{devices}",
                            "--train-device", "cpu", *extra],
                           stdout=subprocess.PIPE, stderr=log, text=True)
    for line in srv.stdout:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return srv, log, f"http://127.0.0.1:{m.group(1)}"
    srv.wait()
    sys.exit(f"the server did not start; see {log.name}")


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,1000", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    # Console messages are read with get_log('browser'), which needs this.
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


FAILURES = []   # the soft checks that failed (check(); finish() reports them)


def check(ok, what):
    """A check that records its failure and lets the test go on, so a run
    lists every failure, not just the first. Returns ok."""
    print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        FAILURES.append(what)
    return ok


def finish(what, t0, artifacts):
    """The exit status after the soft checks: 1 listing the failures, or 0."""
    if FAILURES:
        print(f"{len(FAILURES)} checks failed:\n  " + "\n  ".join(FAILURES))
        return 1
    print(f"{what} passed in {time.time() - t0:.1f} s; screenshots in {artifacts}")
    return 0


def overflow(driver):
    """How many pixels the page is wider than the window (<= 0: it fits)."""
    return driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth;")


def full_page_shot(driver, path):
    """A screenshot of the whole page: the window made as tall as the page
    (at most 5000 px) for the picture; the width, and so the layout, stays."""
    size = driver.get_window_size()
    tall = driver.execute_script("return document.documentElement.scrollHeight;")
    driver.set_window_size(size["width"], min(max(tall + 100, size["height"]), 5000))
    driver.save_screenshot(path)
    driver.set_window_size(size["width"], size["height"])


def severe_errors(driver, *allowed):
    """The browser console's SEVERE messages, less those an allowed pattern
    (a deliberate 4xx) matches."""
    return [e["message"] for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and not any(re.search(a, e["message"]) for a in allowed)]


def stop(driver, srv, log, tmp):
    """Ends a test: the browser, the server, its data folder."""
    if driver:
        driver.quit()
    srv.terminate()
    try:
        srv.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.kill()
    log.close()
    shutil.rmtree(tmp, ignore_errors=True)


def wait(driver, what, cond, timeout=30):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1,
                             ignored_exceptions=[StaleElementReferenceException]).until(lambda d: cond(d))
    except TimeoutException:
        shot(driver, "failed")
        raise SystemExit(f"FAIL: timed out waiting for {what}")


def js(driver, script, *args):
    return driver.execute_script(script, *args)


def el(driver, css):
    return driver.find_element(By.CSS_SELECTOR, css)


def status_of_row(driver, job_id):
    return js(driver, "const r = document.querySelector(`tr[data-job-id='${arguments[0]}']`);"
                      "return r ? r.dataset.status : null;", job_id)


def slice_state(driver, job_id):
    """The state of the slice the job holds (or None), and the free count."""
    return js(driver, """
        const s = [...document.querySelectorAll('#device-map .slice')];
        const mine = s.find((e) => e.dataset.job === arguments[0]);
        return {mine: mine ? {state: mine.dataset.state, title: mine.title,
                              colour: getComputedStyle(mine).backgroundColor} : null,
                free: s.filter((e) => e.dataset.state === 'free').length, total: s.length};""", job_id)


def npy_u8(shape, data):
    """A .npy (format 1.0) of uint8 with this shape."""
    head = f"{{'descr': '|u1', 'fortran_order': False, 'shape': ({', '.join(map(str, shape))},), }}"
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode() + bytes(data)


def api_call(base, key, method, path, body=None, content_type="application/json"):
    import urllib.request
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=body, method=method,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": content_type})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


def image_model(base, key):
    """A tiny uint8 image dataset (NPY, 200 of 1x28x28, 3 classes: a bright
    band at the top, middle or bottom) and a flatten + dense model trained on
    it for 2 epochs, through the API. Returns (dataset id, model id)."""
    rng = random.Random(2)
    n, x, y = 200, [], []
    for i in range(n):
        c = i % 3
        y.append(c)
        x += [200 + rng.randrange(56) if r // 10 == c else rng.randrange(40)
              for r in range(28) for _ in range(28)]
    labels = npy_u8((n,), y)
    boundary = "tyboundary7"
    parts = [("name", None, b"tiny images"), ("format", None, b"npy"),
             ("x", "x.npy", npy_u8((n, 1, 28, 28), x)), ("y", "y.npy", labels)]
    body = b""
    for name, filename, data in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    ds = api_call(base, key, "POST", "/v1/datasets", body, f"multipart/form-data; boundary={boundary}")["id"]
    job = api_call(base, key, "POST", "/v1/jobs", {
        "name": "tiny-image", "dataset": ds,
        "model": {"layers": [{"type": "flatten"}, {"type": "dense", "units": 3}]},
        "hyperparameters": {"epochs": 2, "batch_size": 20, "seed": 1}})["id"]
    for _ in range(600):
        doc = api_call(base, key, "GET", f"/v1/jobs/{job}")
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    if doc["status"] != "succeeded" or not doc.get("model"):
        sys.exit(f"FAIL: the image job: {json.dumps(doc)}")
    return ds, doc["model"]


# The SSE client (web/live.js) against a scripted stream, whatever the server
# has: events split across chunks, a keepalive comment, CRLF lines, the end
# of a stream (reconnect with Last-Event-ID), a reset, the job stream's final
# event (no reconnect after it), and a 404 (polling).
SSE_CHECK = r"""
const done = arguments[arguments.length - 1];
(async () => {
  const {live} = await import('/web/live.js');
  const realFetch = window.fetch, enc = new TextEncoder(), calls = [];
  const streams = [
    ['id: 1\nevent: job.created\ndata: {"job":{"id":"job_a","status":"queued"}}\n\n: keep',
     'alive\n\nid: 2\r\nevent: job.started\r\ndata: {"job":{"id":"job_a",',
     '"status":"running"}}\r\n\r\n'],
    ['id: 7\nevent: reset\n\nid: 8\nevent: job.epoch\ndata: {"job":{"id":"job_a","status":"running"},"epoch":{"epoch":1}}\n\n',
     'id: 9\nevent: job.finished\ndata: {"job":{"id":"job_a","status":"succeeded"}}\n\n'],
  ];
  window.fetch = async (url, opts) => {
    if (!String(url).endsWith('/events')) return realFetch(url, opts);  // the page's own polling
    calls.push({url: String(url), last: opts.headers['Last-Event-ID'] || null,
                auth: opts.headers.Authorization === 'Bearer ' + sessionStorage.getItem('trainyard.key')});
    const chunks = streams.shift();
    if (!chunks) return new Response('{"status":404}', {status: 404, headers: {'Content-Type': 'application/problem+json'}});
    const body = new ReadableStream({start(c) { for (const x of chunks) c.enqueue(enc.encode(x)); c.close(); }});
    return new Response(body, {status: 200, headers: {'Content-Type': 'text/event-stream'}});
  };
  const events = []; let resets = 0, polls = 0;
  const a = live('/v1/jobs/job_a/events', {final: 'job.finished', onReset: () => resets++,
    onEvent: (t, d, id) => events.push([t, d.job.status, id])});
  await new Promise((r) => setTimeout(r, 2500));
  a.stop();
  const b = live('/v1/events', {interval: 50, onPoll: () => { polls++; }});
  await new Promise((r) => setTimeout(r, 500));
  b.stop();
  window.fetch = realFetch;
  done({events, resets, polls, calls});
})().catch((e) => done({error: String(e)}));
"""


def check_sse_client(driver):
    driver.set_script_timeout(20)
    r = driver.execute_async_script(SSE_CHECK)
    want = [["job.created", "queued", "1"], ["job.started", "running", "2"],
            ["job.epoch", "running", "8"], ["job.finished", "succeeded", "9"]]
    calls = r.get("calls", [])
    ok = (r.get("events") == want and r.get("resets") == 1 and r.get("polls", 0) >= 2
          and [c["last"] for c in calls] == [None, "2", None]
          and [c["url"] for c in calls] == ["/v1/jobs/job_a/events", "/v1/jobs/job_a/events", "/v1/events"]
          and all(c["auth"] for c in calls))
    if not ok:
        sys.exit(f"FAIL: the SSE client: {json.dumps(r)}")
    print("SSE client: chunked events, keepalive, CRLF, Last-Event-ID reconnect, reset, "
          "final event, 404 -> polling: ok")


# How many pixels of a canvas's plot area (below the legend) are near a
# colour: a line drawn in it, not just its legend swatch.
CANVAS_INK = r"""
const c = document.getElementById(arguments[0]), [r, g, b] = arguments[1];
if (!c || !c.width) return -1;
const top = Math.ceil(24 * c.height / c.clientHeight);
const d = c.getContext('2d').getImageData(0, top, c.width, c.height - top).data;
let n = 0;
for (let i = 0; i < d.length; i += 4)
  if (d[i + 3] > 200 && Math.abs(d[i] - r) + Math.abs(d[i + 1] - g) + Math.abs(d[i + 2] - b) < 60) n++;
return n;
"""
P50_BLUE, BATCH_GREEN = (0x1f, 0x5f, 0xbf), (0x1e, 0x7f, 0x3c)


def dep_row(driver, dep):
    return js(driver, "const r = document.querySelector(`#deployments-body tr[data-deployment-id='${arguments[0]}']`);"
                      "return r ? {status: r.dataset.status, requests: Number(r.dataset.requests),"
                      " text: r.innerText} : null;", dep)


def predict_burst(base, key, model, n):
    """n predicts of the blobs model, 8 at a time (so some share a batch)."""
    from concurrent.futures import ThreadPoolExecutor
    rng = random.Random(3)
    rows = [[round(rng.gauss(0, 1), 3) for _ in range(8)] for _ in range(n)]
    with ThreadPoolExecutor(8) as pool:
        out = list(pool.map(lambda x: api_call(base, key, "POST", f"/v1/models/{model}/predict",
                                               {"inputs": [x]}), rows))
    if len(out) != n or any(len(o["outputs"][0]) != 3 for o in out):
        sys.exit(f"FAIL: predicts through the deployment: {out[:2]}")


def phone_fits(driver, what, name):
    """At a phone's 390x844 the page is no wider than the window (its tables
    are cards); a screenshot, then back to the laptop size."""
    size = driver.get_window_size()
    driver.set_window_size(390, 844)
    try:
        wait(driver, f"{what} to fit a phone", lambda d: overflow(d) <= 0, timeout=5)
        print(f"{what} fits 390 px")
        shot(driver, name)
    finally:
        driver.set_window_size(size["width"], size["height"])


def check_deployment(driver, base, key, model):
    """Create (a 422 first), ready, scale, traffic on the charts, a rolling
    update, delete; then a replica on the device map."""
    t = time.time()
    el(driver, "a[href='#/deployments']").click()
    wait(driver, "the model choice in the deployment form",
         lambda d: d.find_elements(By.CSS_SELECTOR, f"#dep-model option[value='{model}']"))
    mode = el(driver, "#live").text
    if "polling every 1 s" not in mode:
        sys.exit(f"FAIL: the deployments page should say it polls: {mode!r}")
    el(driver, "#dep-name").send_keys("blobs serve")  # a space: not a valid name
    Select(el(driver, "#dep-model")).select_by_value(model)
    el(driver, "#dep-gpu").send_keys("none")
    for css, value in (("#dep-max_batch_size", "8"), ("#dep-max_queue_delay_us", "2000")):
        el(driver, css).send_keys(value)
    el(driver, "#dep-form button[type=submit]").click()
    msg = wait(driver, "the 422 beside the deployment name", lambda d: el(d, "#dep-name-error").text)
    assert el(driver, "#dep-name").get_attribute("aria-invalid") == "true"
    print(f"422 shown beside the deployment name: {msg}")
    shot(driver, "deployment-422")
    el(driver, "#dep-name").clear()
    el(driver, "#dep-name").send_keys("blobs-serve")
    el(driver, "#dep-form button[type=submit]").click()
    href = wait(driver, "the created deployment's link",
                lambda d: d.find_elements(By.CSS_SELECTOR, "#dep-created a") and
                el(d, "#dep-created a").get_attribute("href"))
    dep = re.search(r"#/deployments/(dep_\w+)$", href).group(1)
    if el(driver, "#dep-name-error").text:
        sys.exit("FAIL: the name error stayed after a good submit")
    row = wait(driver, "the deployment to be ready in the list",
               lambda d: (lambda r: r if r and r["status"] == "ready" else None)(dep_row(d, dep)), timeout=90)
    if "blobs-serve" not in row["text"] or "1/1 (1–1)" not in row["text"]:
        sys.exit(f"FAIL: the deployment's row: {row}")
    print(f"deployment {dep} ready in the list ({time.time() - t:.1f} s): {row['text']!r}")
    shot(driver, "deployments-ready")
    phone_fits(driver, "the deployments list", "deployments-phone")

    # Its page: the replica on the CPU, the spec as asked.
    el(driver, f"#deployments-body tr[data-deployment-id='{dep}'] a").click()
    inst = wait(driver, "a ready replica on the deployment's page",
                lambda d: d.find_elements(By.CSS_SELECTOR, "#instances-body tr[data-state='ready']"))
    phone_fits(driver, "a deployment's page", "deployment-phone")
    cells = [c.text for c in inst[0].find_elements(By.TAG_NAME, "td")]
    if not cells[0].startswith("rep_") or cells[3] != "cpu" or cells[4] != "none (CPU)":
        sys.exit(f"FAIL: the replica row {cells}")
    batching = el(driver, "#spec-batching").text
    if not re.search(r"Max batch size\s+8\b", batching) or not re.search(r"Max queue delay\s+2000 µs", batching):
        sys.exit(f"FAIL: the batching spec shown: {batching!r}")
    print(f"replica: {cells}")

    # Scale: max 2 (min stays 1: no new replica without traffic).
    el(driver, "#scale-max").clear()
    el(driver, "#scale-max").send_keys("2")
    el(driver, "#scale-form button").click()
    wait(driver, "the new bounds", lambda d: "(1–2)" in el(d, "#dep-replicas").text)

    # Traffic: the request count and both charts follow the polls.
    before = int(el(driver, "#dep-summary").get_attribute("data-requests"))
    if before != 0 or js(driver, CANVAS_INK, "latency-chart", P50_BLUE) != 0:
        sys.exit(f"FAIL: traffic before any request ({before} requests)")
    samples0 = int(el(driver, "#latency-chart").get_attribute("data-samples"))
    predict_burst(base, key, model, 40)
    wait(driver, "40 requests on the deployment's page",
         lambda d: el(d, "#dep-summary").get_attribute("data-requests") == "40")
    wait(driver, "the p50 line on the latency chart", lambda d: js(d, CANVAS_INK, "latency-chart", P50_BLUE) > 20)
    wait(driver, "the line on the batch-size chart", lambda d: js(d, CANVAS_INK, "batch-chart", BATCH_GREEN) > 20)
    label = el(driver, "#batch-chart").get_attribute("aria-label")
    mean = float(re.search(r"mean batch ([\d.]+)", label).group(1))
    samples1 = int(el(driver, "#latency-chart").get_attribute("data-samples"))
    if samples1 <= samples0 or not 1 <= mean <= 8:
        sys.exit(f"FAIL: the charts: samples {samples0} -> {samples1}, {label!r}")
    print(f"traffic: 40 requests, {el(driver, '#latency-chart').get_attribute('aria-label')}; {label}")
    js(driver, "document.getElementById('dep-charts').scrollIntoView();")
    shot(driver, "deployment-traffic")

    # Change the model: a rolling update to generation 2 (the image model;
    # no traffic is sent to it).
    other = js(driver, "return [...document.querySelectorAll('#change-model option')]"
                       ".map((o) => o.value).find((v) => v !== arguments[0]);", model)
    Select(el(driver, "#change-model")).select_by_value(other)
    el(driver, "#model-form button").click()
    wait(driver, "generation 2 ready with only new replicas", lambda d: js(d, """
        const s = document.getElementById('dep-summary');
        const rows = [...document.querySelectorAll('#instances-body tr[data-state]')];
        return s.dataset.generation === '2' && s.dataset.status === 'ready' && rows.length === 1 &&
               rows[0].dataset.state === 'ready' && rows[0].children[2].textContent === '2';"""), timeout=60)
    if other not in el(driver, "#dep-summary a[href^='#/models/']").get_attribute("href"):
        sys.exit("FAIL: the page does not show the new model")
    print(f"rolled to {other}: generation 2 ready")

    # Delete through the page (with its confirm); it leaves the list.
    el(driver, "#delete-deployment").click()
    driver.switch_to.alert.accept()
    wait(driver, "the deployments list after the delete",
         lambda d: d.current_url.endswith("#/deployments") and d.find_elements(By.ID, "deployments"))
    wait(driver, "the deployment to leave the list", lambda d: dep_row(d, dep) is None, timeout=60)
    left = [d["id"] for d in api_call(base, key, "GET", "/v1/deployments")["items"]]
    if dep in left:
        sys.exit(f"FAIL: {dep} is still listed by the API after the page dropped it")
    shot(driver, "deployment-deleted")
    print(f"deployment: created, ready, scaled, served, charted and deleted in {time.time() - t:.1f} s")

    # A replica on a MIG slice: the device map names its deployment.
    gpu_dep = api_call(base, key, "POST", "/v1/deployments",
                       {"name": "blobs-gpu", "model": model, "resources": {"gpu": "1g.18gb"}})["id"]
    el(driver, "a[href='#/devices']").click()
    title = wait(driver, "the replica's slice on the device map", lambda d: js(d, """
        const s = [...document.querySelectorAll('#device-map .slice[data-job^="rep_"]')];
        return s.length ? s[0].title + ' | ' + s[0].innerText : null;"""), timeout=60)
    if "replica of deployment blobs-gpu (rep_" not in title or "replica of blobs-gpu" not in title:
        sys.exit(f"FAIL: the replica's slice: {title!r}")
    print(f"device map: {title!r}")
    shot(driver, "devices-replica")
    api_call(base, key, "DELETE", f"/v1/deployments/{gpu_dep}")
    wait(driver, "the replica's slice to be free", lambda d: js(
        d, "return !document.querySelector('#device-map .slice[data-job^=\"rep_\"]');"), timeout=60)


def main():
    global ARTIFACTS
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    ARTIFACTS = sys.argv[2] if len(sys.argv) > 2 else "build/browser-artifacts"
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    os.makedirs(ARTIFACTS)
    tmp = tempfile.mkdtemp(prefix="trainyard-browser-")
    csv = os.path.join(tmp, "blobs.csv")
    make_csv(csv)
    srv, log, base = start_server(binary, tmp)
    driver = None
    t0 = time.time()
    try:
        key = open(os.path.join(tmp, "data", "admin.key")).read().strip()
        driver = browser()

        # 1. Sign in; a marker on window tells later that the page never reloaded.
        driver.get(base + "/")
        wait(driver, "the sign-in form", lambda d: d.find_elements(By.ID, "key"))
        shot(driver, "signin")
        el(driver, "#key").send_keys(key)
        el(driver, "#signin button[type=submit]").click()
        wait(driver, "the jobs page", lambda d: d.find_elements(By.ID, "jobs"))
        js(driver, "window.__tyNoReload = 1;")
        assert js(driver, "return sessionStorage.getItem('trainyard.key')") == key
        assert key not in driver.current_url
        mode = wait(driver, "the live indicator", lambda d: el(d, "#live").get_attribute("data-mode"))
        print(f"live updates: {mode}")

        # 2. Upload the CSV through the form.
        el(driver, "a[href='#/datasets']").click()
        wait(driver, "the upload form", lambda d: d.find_elements(By.ID, "upload-form"))
        el(driver, "#ds-name").send_keys("blobs")
        Select(el(driver, "#ds-format")).select_by_value("csv")
        el(driver, "#ds-label_column").send_keys("label")
        el(driver, "#ds-file").send_keys(csv)
        el(driver, "#upload-form button[type=submit]").click()
        ds = wait(driver, "the upload to finish",
                  lambda d: el(d, "#upload-result").get_attribute("data-id"))
        wait(driver, "the dataset in the list",
             lambda d: d.find_elements(By.CSS_SELECTOR, f"tr[data-dataset-id='{ds}']"))
        assert float(el(driver, "#upload-progress").get_attribute("value")) == 1.0
        shot(driver, "dataset-uploaded")

        # 3. The new-job form: a bad epochs value first (422 beside the field).
        el(driver, "a[href='#/new']").click()
        wait(driver, "the dataset choice",
             lambda d: d.find_elements(By.CSS_SELECTOR, f"#job-dataset option[value='{ds}']"))
        Select(el(driver, "#job-dataset")).select_by_value(ds)
        spec = json.loads(el(driver, "#job-spec").get_attribute("value"))
        assert spec["layers"][-1]["units"] == 3, spec  # sized to the dataset's classes
        spec["layers"] = [{"type": "dense", "units": 512}, {"type": "relu"},
                          {"type": "dense", "units": 512}, {"type": "relu"},
                          {"type": "dense", "units": 3}]
        js(driver, "arguments[0].value = arguments[1];", el(driver, "#job-spec"), json.dumps(spec))
        el(driver, "#job-name").send_keys("blobs-mlp")
        for css, value in (("#hp-epochs", "0"), ("#hp-batch_size", "8"), ("#hp-seed", "1")):
            el(driver, css).clear()
            el(driver, css).send_keys(value)
        Select(el(driver, "#job-gpu")).select_by_value("any")
        el(driver, "#job-form button[type=submit]").click()
        msg = wait(driver, "the 422 beside the epochs input",
                   lambda d: el(d, "#hp-epochs-error").text)
        assert el(driver, "#hp-epochs").get_attribute("aria-invalid") == "true"
        print(f"422 shown beside epochs: {msg}")
        shot(driver, "new-job-422")
        el(driver, "#hp-epochs").clear()
        el(driver, "#hp-epochs").send_keys(str(EPOCHS))
        el(driver, "#job-form button[type=submit]").click()
        job = wait(driver, "the job's page",
                   lambda d: (re.match(r".*#/jobs/(job_\w+)$", d.current_url) or [None, None])[1])
        print(f"submitted {job}")

        # 4. The chart gains points while the job runs.
        def chart_points(d):
            return js(d, "const c = window.Chart && Chart.getChart('loss-chart');"
                         "const t = c && c.data.datasets.find((x) => x.label === 'train loss');"
                         "return c ? (t ? t.data.length : 0) : -1;")
        def running_points(d):
            # One script: the page redraws the summary as events arrive.
            return js(d, "const s = document.getElementById('job-summary');"
                         "const c = window.Chart && Chart.getChart('loss-chart');"
                         "const t = c && c.data.datasets.find((x) => x.label === 'train loss');"
                         "return [s ? s.dataset.status : null, c ? (t ? t.data.length : 0) : -1];")
        first = wait(driver, "a first epoch on the chart while running",
                     lambda d: (lambda s: s if s[0] == "running" and s[1] >= 1 else None)(running_points(d)))
        later = wait(driver, "more epochs on the chart while running",
                     lambda d: (lambda s: s if s[1] > first[1] else None)(running_points(d)))
        if later[0] != "running":
            sys.exit(f"FAIL: the job finished before the chart was seen to grow ({first} -> {later})")
        print(f"chart: {first[1]} -> {later[1]} epochs while running")
        shot(driver, "job-running-chart")

        # 5. The device map: the job's slice held, in its colour.
        el(driver, "a[href='#/devices']").click()
        held = wait(driver, "the job's slice on the device map",
                    lambda d: (slice_state(d, job) or {}).get("mine"))
        if held["state"] != "held" or job not in held["title"]:
            sys.exit(f"FAIL: the job's slice is {held}")
        print(f"device map: {held['title']} ({held['colour']})")
        shot(driver, "devices-held")

        # 6. The jobs table: not finished yet, then succeeded, without a reload.
        el(driver, "a[href='#/jobs']").click()
        seen = wait(driver, "the job in the jobs table", lambda d: status_of_row(d, job))
        shot(driver, "jobs-running")
        if seen not in ("queued", "running"):
            sys.exit(f"FAIL: the job was {seen} before the jobs table could watch it")
        wait(driver, "the job to succeed in the table",
             lambda d: status_of_row(d, job) in ("succeeded", "failed", "cancelled"), timeout=120)
        final = status_of_row(driver, job)
        shot(driver, "jobs-finished")
        if final != "succeeded":
            sys.exit(f"FAIL: the job {final}")
        print(f"jobs table: {seen} -> {final}")

        # 7. The slice is free again.
        el(driver, "a[href='#/devices']").click()
        wait(driver, "the slice to be free",
             lambda d: (lambda s: s if s["total"] == 7 and s["free"] == 7 else None)(slice_state(d, job)))
        shot(driver, "devices-free")

        # 8. The job page has every epoch; its model predicts.
        driver.execute_script("location.hash = arguments[0];", f"#/jobs/{job}")
        wait(driver, "all epochs on the chart", lambda d: chart_points(d) == EPOCHS)
        link = wait(driver, "the model link", lambda d: d.find_elements(By.ID, "model-link"))
        shot(driver, "job-succeeded")
        link[0].click()
        wait(driver, "the try-it form", lambda d: d.find_elements(By.ID, "feature-0"))
        labels = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#try-it label")]
        assert labels[:2] == ["f1", "f2"], labels  # the dataset's feature names
        for i, v in enumerate([1.5, -1, 0, 1.5, -1, 0, 1.5, -1]):
            el(driver, f"#feature-{i}").clear()
            el(driver, f"#feature-{i}").send_keys(str(v))
        el(driver, "#predict").click()
        rows = wait(driver, "the probabilities",
                    lambda d: d.find_elements(By.CSS_SELECTOR, "#probabilities tbody tr"))
        probs = {r.get_attribute("data-class"): float(r.find_elements(By.TAG_NAME, "td")[1].text.rstrip(" %"))
                 for r in rows}
        if set(probs) != {"a", "b", "c"} or abs(sum(probs.values()) - 100) > 0.5:
            sys.exit(f"FAIL: probabilities {probs}")
        print(f"prediction: {el(driver, '#predicted').text} {probs}")
        shot(driver, "model-predict")

        # 9. Phone width: nothing wider than the screen.
        driver.set_window_size(390, 844)
        for page in ("#/jobs", "#/deployments", "#/devices"):
            driver.execute_script("location.hash = arguments[0];", page)
            time.sleep(0.5)
            over = overflow(driver)
            if over > 1:
                sys.exit(f"FAIL: {page} is {over} px wider than a phone screen")
        shot(driver, "phone-devices")

        # 10. An image model: pick a test image of its dataset, see it in the
        # pad (the stored bytes, 0-255) and its probabilities.
        driver.set_window_size(1280, 1000)
        t_img = time.time()
        img_ds, img_model = image_model(base, key)
        driver.execute_script("location.hash = arguments[0];", f"#/models/{img_model}")
        wait(driver, "the pick control", lambda d: d.find_elements(By.ID, "pick-image"))
        el(driver, "#pick-image").click()
        thumbs = wait(driver, "the test images",
                      lambda d: d.find_elements(By.CSS_SELECTOR, "#test-images button.thumb-button"))
        if len(thumbs) != 8 or [t.text for t in thumbs[:3]] != ["0", "1", "2"]:
            sys.exit(f"FAIL: test images {[t.text for t in thumbs]}")
        thumbs[1].send_keys(" ")  # from the keyboard: a focused button and space
        rows = wait(driver, "the image probabilities",
                    lambda d: d.find_elements(By.CSS_SELECTOR, "#probabilities tbody tr"))
        want = api_call(base, key, "GET", f"/v1/datasets/{img_ds}/examples?offset=1&limit=1")["items"][0]
        flat = [v for plane in want["x"] for row in plane for v in row]
        pad = js(driver, "const d = document.getElementById('pad').getContext('2d').getImageData(0, 0, 28, 28).data;"
                         "return Array.from({length: 784}, (_, i) => d[i * 4]);")
        if pad != flat:
            sys.exit("FAIL: the pad does not hold the picked image's bytes")
        probs = {r.get_attribute("data-class"): float(r.find_elements(By.TAG_NAME, "td")[1].text.rstrip(" %"))
                 for r in rows}
        if set(probs) != {"0", "1", "2"} or abs(sum(probs.values()) - 100) > 0.5:
            sys.exit(f"FAIL: image probabilities {probs}")
        print(f"picked test image 1 (label {want['label']}): predicted {el(driver, '#predicted').text} "
              f"{probs} ({time.time() - t_img:.1f} s)")
        js(driver, "document.getElementById('prediction').scrollIntoView({block: 'end'});")
        shot(driver, "image-pick")

        # The page followed the server's event streams, not polling.
        live_text = js(driver, "return document.getElementById('live').textContent;")
        if "live" not in live_text or "polling" in live_text:
            sys.exit(f"FAIL: the dashboard is not on live events: {live_text!r}")
        check_sse_client(driver)
        if not js(driver, "return window.__tyNoReload === 1;"):
            sys.exit("FAIL: the page reloaded")

        # 11. A deployment of the blobs model, through the Deployments page.
        blobs_model = api_call(base, key, "GET", f"/v1/jobs/{job}")["model"]
        check_deployment(driver, base, key, blobs_model)

        # 12. No console errors but the expected ones.
        # The deliberate bad epochs value and deployment name are 422s; so
        # is the form's own check of that bad value (POST ?dry_run=true, 0.4 s
        # after an edit), when the machine is slow enough for it to fire
        # before the submit.
        errors = severe_errors(
            driver, r"/v1/(jobs(\?dry_run=true)?|deployments) - Failed to load resource: .* 422")
        if errors:
            sys.exit("FAIL: browser console errors:\n  " + "\n  ".join(errors))
        print(f"dashboard test passed in {time.time() - t0:.1f} s; screenshots in {ARTIFACTS}")
        return 0
    finally:
        stop(driver, srv, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
