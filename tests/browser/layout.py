#!/usr/bin/env python3
"""Layout signatures of key dashboard pages against a committed reference,
to catch a layout collapse (issue 30: an unclosed @media in style.css left
the class-balance bars and try-it's marks to phones only, and nothing
noticed).

A pixel diff is fragile across Chromium and font versions, so each page is
reduced to a signature: for each key element (the top bar, the nav, tables,
cards, bars, charts, slices, thumbnails) how many are shown and the box of
the first (getBoundingClientRect, in px). The signature is compared with
tests/browser/layout-reference.json, with tolerances:

* an element the reference shows is missing (none shown, or 0 px wide or
  high);
* its width is less than half the reference's (a collapse), or its height
  where the layout sets it (charts, bars, slices, images), or
  more than twice it while the reference is under half the window;
* it reaches past the window's left or right edge (by more than 2 px) when
  the reference's did not.

Content (ids, names, times) differs from run to run and is not compared.
Pages: the jobs list, a job's page, a dataset's page (class balance), a
model's try-it, the device map, a language model's job page and its
try-it (a prompt's next tokens); at 1280x900 and 390x844. Full-page
screenshots (PNG) go to the artifacts folder, for people.

To refresh the reference after a deliberate layout change, run with
TRAINYARD_LAYOUT_UPDATE=1 (it rewrites tests/browser/layout-reference.json
in the source tree; commit it with the change):

  TRAINYARD_LAYOUT_UPDATE=1 ctest --test-dir build -R browser_layout

Usage: layout.py path/to/trainyard [artifacts-dir]
Exit 77 (skipped) when chromium, chromedriver or selenium is missing.
"""
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard  # noqa: E402  (skips with 77 itself when selenium or chromium is missing)
from dashboard import api_call, browser, check, js, make_csv, start_server  # noqa: E402
from devices import upload_csv, settle  # noqa: E402
from lm import TINY, TINY_HP, upload_text  # noqa: E402

from selenium.webdriver.common.by import By  # noqa: E402

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layout-reference.json")
SIZES = {"wide": (1280, 900), "phone": (390, 844)}
COMMON = [".top", "#nav", "main"]
# Each page: its hash (filled in main), what must be shown before the
# signature is taken, and its key elements.
PAGES = {
    "jobs": {"ready": "#jobs-body tr", "keys": ["#jobs", "#jobs-body tr", "#jobs-body td.progress progress"]},
    "job": {"ready": "#epochs tbody tr", "keys": ["#job-summary", ".stats .stat", "#charts", "#loss-chart",
                                                  "#acc-chart", "#epochs", "#epochs tbody tr"]},
    "dataset": {"ready": "#class-balance [data-class]", "keys": ["#class-balance", ".balance-row", ".balance-class",
                                                                   ".bar", ".bar-fill", ".balance-count"]},
    "try-it": {"ready": "#test-images [data-verdict]", "keys": ["#test-images", "button.thumb-button",
                                                                 "button.thumb-button canvas.thumb", "canvas.pad"]},
    "devices": {"ready": "#device-map .slice.held", "keys": ["#device-map .gpu", ".slices", "#device-map .slice",
                                                        "#device-legend"]},
    "lm-job": {"ready": "#epochs tbody tr", "keys": ["#job-summary", ".stats .stat", "#charts", "#loss-chart",
                                                     "#acc-chart", "#epochs", "#epochs tbody tr"]},
    "lm-try-it": {"ready": "#next-tokens tbody tr", "keys": ["#lm-prompt", "#prompt-tokens", "#next-tokens",
                                                              "#next-tokens tbody tr", ".next-tokens .bar"]},
}

# Elements whose height the layout sets (charts, bars, slices, images): a
# text block's height follows its content and the fonts, so only these are
# held to half the reference's height.
FIXED_HEIGHT = {"#loss-chart", "#acc-chart", ".bar", ".bar-fill", "#device-map .slice", ".slices",
                "button.thumb-button canvas.thumb", "canvas.pad", ".next-tokens .bar"}

SIGNATURE = r"""
const out = {};
for (const sel of arguments[0]) {
  const shown = [...document.querySelectorAll(sel)].filter((e) => {
    const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && cs.visibility !== 'hidden' && cs.display !== 'none';
  });
  const r = shown.length ? shown[0].getBoundingClientRect() : null;
  out[sel] = {n: shown.length, box: r ? [r.left + scrollX, r.top + scrollY, r.width, r.height].map(Math.round) : null};
}
return {inner: innerWidth, elements: out};
"""


def upload_images(base, key, name):
    """200 uint8 28x28 images of 3 classes (a bright band at the top, middle
    or bottom), as dashboard.image_model makes them, uploaded as NPY."""
    rng = random.Random(2)
    x, y = [], []
    for i in range(200):
        y.append(i % 3)
        x += [200 + rng.randrange(56) if r // 10 == i % 3 else rng.randrange(40) for r in range(28) for _ in range(28)]
    boundary = "tylayout7"
    body = b""
    for field, filename, data in (("name", None, name.encode()), ("format", None, b"npy"),
                                  ("x", "x.npy", dashboard.npy_u8((200, 1, 28, 28), x)),
                                  ("y", "y.npy", dashboard.npy_u8((200,), y))):
        disp = f'form-data; name="{field}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return api_call(base, key, "POST", "/v1/datasets", body, f"multipart/form-data; boundary={boundary}")["id"]


def image_job(base, key):
    """A flatten + dense model trained 2 epochs on the images, validated on
    a second upload of them (a test set: try-it marks each thumbnail right
    or wrong). Returns (job id, model id)."""
    train, test = upload_images(base, key, "tiny images"), upload_images(base, key, "tiny test")
    job = api_call(base, key, "POST", "/v1/jobs", {
        "name": "tiny-image", "dataset": train, "validation": {"dataset": test},
        "model": {"layers": [{"type": "flatten"}, {"type": "dense", "units": 3}]},
        "hyperparameters": {"epochs": 2, "batch_size": 20, "seed": 1}})["id"]
    for _ in range(600):
        doc = api_call(base, key, "GET", f"/v1/jobs/{job}")
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    if doc["status"] != "succeeded" or not doc.get("model"):
        sys.exit(f"FAIL: the image job: {json.dumps(doc)}")
    return job, doc["model"]


def gpt_job(base, key):
    """lm.py's tiny GPT (30 steps) on its text. Returns (job id, model id)."""
    job = api_call(base, key, "POST", "/v1/jobs", {"name": "tiny-gpt", "dataset": upload_text(base, key, "hamlet"),
                                                    "model": TINY, "hyperparameters": TINY_HP})["id"]
    for _ in range(600):
        doc = api_call(base, key, "GET", f"/v1/jobs/{job}")
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    if doc["status"] != "succeeded" or not doc.get("model"):
        sys.exit(f"FAIL: the GPT job: {json.dumps(doc)}")
    return job, doc["model"]


def reference_text(signatures):
    """The reference as JSON with one element a line, for readable diffs."""
    pages = []
    for name in sorted(signatures):
        sig = signatures[name]
        els = ",\n".join(f"   {json.dumps(sel)}: {json.dumps(e, sort_keys=True)}" for sel, e in sorted(sig["elements"].items()))
        pages.append(f' {json.dumps(name)}: {{\n  "inner": {sig["inner"]},\n  "elements": {{\n{els}\n  }}\n }}')
    return "{\n" + ",\n".join(pages) + "\n}\n"


def compare(name, got, ref):
    """The failures of signature got against ref (one page at one width)."""
    bad = []
    inner = got["inner"]
    for sel, want in ref["elements"].items():
        have = got["elements"].get(sel, {"n": 0, "box": None})
        if not want["box"]:
            continue
        if not have["box"]:
            bad.append(f"{name}: {sel} is not shown (the reference shows {want['n']})")
            continue
        x, _, w, h = have["box"]
        rx, _, rw, rh = want["box"]
        if w < rw / 2:
            bad.append(f"{name}: {sel} is {w} px wide, under half the reference's {rw} px")
        if sel in FIXED_HEIGHT and h < rh / 2:
            bad.append(f"{name}: {sel} is {h} px high, under half the reference's {rh} px")
        if rw < inner / 2 and w > 2 * rw:
            bad.append(f"{name}: {sel} is {w} px wide, over twice the reference's {rw} px")
        if (x < -2 or x + w > inner + 2) and not (rx < -2 or rx + rw > ref["inner"] + 2):
            bad.append(f"{name}: {sel} runs off the screen ({x}..{x + w} of {inner} px)")
    return bad


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    dashboard.ARTIFACTS = sys.argv[2] if len(sys.argv) > 2 else "build/browser-artifacts-layout"
    os.makedirs(dashboard.ARTIFACTS, exist_ok=True)
    update = os.environ.get("TRAINYARD_LAYOUT_UPDATE") == "1"
    reference = {} if update else json.load(open(REFERENCE))
    tmp = tempfile.mkdtemp(prefix="trainyard-layout-")
    csv = os.path.join(tmp, "blobs.csv")
    make_csv(csv)
    srv, log, base = start_server(binary, tmp)
    os.setpriority(os.PRIO_PROCESS, srv.pid, 10)
    driver = hold = None
    t0 = time.time()
    try:
        key = open(os.path.join(tmp, "data", "admin.key")).read().strip()
        csv_ds = upload_csv(base, key, csv, "blobs")
        job, model = image_job(base, key)
        # The GPT in a tenant of its own: the jobs list stays the two jobs
        # above (an LM job's perplexity column would widen it).
        lm_key = api_call(base, key, "POST", "/v1/tenants", {"name": "lm-layout"})["key"]["api_key"]
        gpt, gpt_model = gpt_job(base, lm_key)
        page_key = {"lm-job": lm_key, "lm-try-it": lm_key}
        # A slice held on the device map (cancelled at the end).
        hold = api_call(base, key, "POST", "/v1/jobs", {
            "name": "holds-a-slice", "dataset": csv_ds, "resources": {"gpu": "1g.18gb"},
            "model": {"layers": [{"type": "dense", "units": 8}, {"type": "relu"}, {"type": "dense", "units": 3}]},
            "hyperparameters": {"epochs": 100000, "batch_size": 200, "seed": 1}})["id"]
        hashes = {"jobs": "#/jobs", "job": f"#/jobs/{job}", "dataset": f"#/datasets/{csv_ds}",
                  "try-it": f"#/models/{model}", "devices": "#/devices",
                  "lm-job": f"#/jobs/{gpt}", "lm-try-it": f"#/models/{gpt_model}"}
        driver = browser()
        driver.get(base + "/")
        js(driver, "sessionStorage.setItem('trainyard.key', arguments[0]);", key)
        signatures = {}
        for size, (w, h) in SIZES.items():
            driver.set_window_size(w, h)
            for page, spec in PAGES.items():
                driver.get(f"{base}/{hashes[page]}")
                js(driver, "sessionStorage.setItem('trainyard.key', arguments[0]);", page_key.get(page, key))
                driver.refresh()
                if page == "try-it":
                    pick = settle(lambda: driver.find_elements(By.ID, "pick-image"), 30)
                    if pick:
                        pick[0].click()
                if page == "lm-try-it":
                    box = settle(lambda: driver.find_elements(By.ID, "lm-prompt"), 30)
                    if box:
                        box[0].send_keys("To be, or not")
                        driver.find_element(By.ID, "predict").click()
                ready = settle(lambda: driver.find_elements(By.CSS_SELECTOR, spec["ready"]), 30)
                check(ready, f"{page} at {size}: {spec['ready']} is shown")
                time.sleep(0.5)  # charts and images drawn after the data
                name = f"{page}-{size}"
                dashboard.full_page_shot(driver, os.path.join(dashboard.ARTIFACTS, f"{name}.png"))
                signatures[name] = js(driver, SIGNATURE, COMMON + spec["keys"])
                if not update:
                    ref = reference.get(name)
                    if check(ref, f"{name}: the reference has it"):
                        bad = compare(name, signatures[name], ref)
                        check(not bad, f"{name}: the layout matches the reference" + ("".join(f"\n      {b}" for b in bad)))
        if update:
            with open(REFERENCE, "w") as f:
                f.write(reference_text(signatures))
            print(f"wrote {REFERENCE}")
        return dashboard.finish("layout test", t0, dashboard.ARTIFACTS)
    finally:
        if hold:
            try:
                api_call(base, key, "POST", f"/v1/jobs/{hold}/cancel")
            except OSError:
                pass
        dashboard.stop(driver, srv, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
