#!/usr/bin/env python3
"""The device map (#/devices) in headless Chromium, as the admin and as a
tenant, at laptop (1280x900) and phone (390x844) widths (issue 20).

Starts `trainyard serve` with the simulated H200 (seven 1g.18gb slices),
makes two tenants through the admin API (acme-vision, with a
max_running_jobs quota of 1, and globex-speech), and has each run a long
CSV job on a 1g.18gb slice; acme-vision also submits a second job, which
must queue behind its quota. Then, for each viewer and width:

* the legend names every tenant the viewer may see, in the colour of its
  slices;
* a held slice shows its tenant and job by name (admin), or "another
  tenant" (a tenant key looking at the other tenant's slice);
* every slice shows its memory, and its utilisation as "—" (simulated);
* the GPU (given NVLink domain 1 in a copy of the sim file) sits under an
  "NVLink domain 1" caption, and its line names the domain;
* the count of queued jobs is shown (the tenant's own; the admin: all);
* a click or tap on a held slice, and Enter on a focused one, shows its
  details;
* the text on held slices contrasts at least 4.5:1 with their background;
* a tenant key's page never holds the other tenant's name, id, job id or
  job name, in text or in attributes;
* at 390 px: nothing wider than the screen, and no word on a slice wraps
  onto more than one line;
* then, on four whole simulated H100s in two NVLink domains: a gang of 2
  GPUs ({"gpus": 2}) started after a one-GPU job lands in one domain, and
  its two members show as one job ("gang 1 of 2", "gang 2 of 2"), with
  details naming both GPUs (check_gang).

Every failed check is listed (not only the first). Any SEVERE browser
console message fails the test. Screenshots (taken before the checks of
each width) go to the folder given as the second argument (default
build/browser-artifacts): devices-wide.png and devices-phone.png (the
admin's view), devices-tenant-wide.png and devices-tenant-phone.png, and
each with -details after a click or tap on a held slice.

Usage: devices.py path/to/trainyard [artifacts-dir]
Exit 77 (skipped) when chromium, chromedriver or selenium is missing.
"""
import json
import os
import re
import sys
import tempfile
import time
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard  # noqa: E402  (skips with 77 itself when selenium or chromium is missing)
from dashboard import api_call, browser, check, js, make_csv, start_server  # noqa: E402

from selenium.webdriver.common.actions import interaction  # noqa: E402
from selenium.webdriver.common.actions.action_builder import ActionBuilder  # noqa: E402
from selenium.webdriver.common.actions.pointer_input import PointerInput  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

EPOCHS = 100000      # the most a job may ask: it holds its slice until cancelled
WIDE, PHONE = (1280, 900), (390, 844)


def wait_for(driver, what, cond, timeout=30):
    return dashboard.wait(driver, what, cond, timeout)


def upload_csv(base, key, path, name):
    boundary = "tydevices7"
    body = b""
    for field, filename, data in (("name", None, name.encode()), ("format", None, b"csv"),
                                  ("label_column", None, b"label"),
                                  ("file", "blobs.csv", open(path, "rb").read())):
        disp = f'form-data; name="{field}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return api_call(base, key, "POST", "/v1/datasets", body,
                    f"multipart/form-data; boundary={boundary}")["id"]


def submit(base, key, ds, name):
    return api_call(base, key, "POST", "/v1/jobs", {
        "name": name, "dataset": ds, "resources": {"gpu": "1g.18gb"},
        "model": {"layers": [{"type": "dense", "units": 8}, {"type": "relu"},
                             {"type": "dense", "units": 3}]},
        "hyperparameters": {"epochs": EPOCHS, "batch_size": 200, "seed": 1}})["id"]


def job_status(base, key, job):
    return api_call(base, key, "GET", f"/v1/jobs/{job}")["status"]


def sign_in(driver, base, key):
    """The key in the page's session (as the sign-in form leaves it), then
    the device map, loaded afresh."""
    driver.get(base + "/")
    js(driver, "sessionStorage.setItem('trainyard.key', arguments[0]);", key)
    driver.get(base + "/#/devices")
    driver.refresh()
    wait_for(driver, "the device map", lambda d: d.find_elements(By.CSS_SELECTOR, "#device-map .slice"))


def held_slices(driver):
    return js(driver, """
        return [...document.querySelectorAll('#device-map .slice')]
          .filter((e) => e.dataset.state !== 'free' && e.getClientRects().length)
          .map((e) => ({state: e.dataset.state, job: e.dataset.job || null, slot: e.dataset.slot,
                        text: e.innerText, colour: getComputedStyle(e).backgroundColor}));""")


# The lowest contrast of the text on each held slice with its background:
# every colour in background-color and background-image (the stripes of
# another tenant's slice) against the colour of every element with text.
CONTRAST = r"""
const rgb = (s) => [...s.matchAll(/rgba?\(([^)]+)\)/g)].map((m) => m[1].split(',').map(Number))
  .filter((c) => c.length < 4 || c[3] > 0);
const lum = ([r, g, b]) => {
  const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
};
const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
return [...document.querySelectorAll('#device-map .slice')]
  .filter((e) => e.dataset.state !== 'free' && e.getClientRects().length).map((e) => {
    const cs = getComputedStyle(e);
    const bgs = rgb(cs.backgroundColor).concat(rgb(cs.backgroundImage));
    let worst = Infinity;
    for (const t of [e, ...e.querySelectorAll('*')]) {
      if (![...t.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
      const fg = rgb(getComputedStyle(t).color)[0];
      for (const bg of bgs) worst = Math.min(worst, ratio(fg, bg));
    }
    return {slot: e.dataset.slot, state: e.dataset.state, contrast: worst, bgs: JSON.stringify(bgs)};
  });
"""

# Words on slices that wrap onto more than one line (a phone breaking
# "tenant" letter by letter): each word's rectangles on distinct lines.
WRAPPED_WORDS = r"""
const out = [];
for (const s of document.querySelectorAll('#device-map .slice')) {
  const walk = document.createTreeWalker(s, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    for (const m of n.textContent.matchAll(/\S+/g)) {
      const r = document.createRange();
      r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
      const tops = new Set([...r.getClientRects()].filter((x) => x.width > 0).map((x) => Math.round(x.top)));
      if (tops.size > 1) out.push(m[0]);
    }
  }
}
return out;
"""

LEGEND = r"""
return [...document.querySelectorAll('.swatch')].filter((s) => s.getClientRects().length).map((s) => ({
  text: s.parentElement.innerText, colour: getComputedStyle(s).backgroundColor}));
"""


def settle(cond, timeout=5.0):
    """cond() once it is truthy, or its last value after timeout s: a page
    slow under load gets time, and a check still reports what it saw."""
    end = time.time() + timeout
    while True:
        got = cond()
        if got or time.time() > end:
            return got
        time.sleep(0.05)


def details_text(driver):
    return js(driver, """
        const d = document.getElementById('slice-details');
        return d && d.getClientRects().length ? d.innerText : null;""")


def tap(driver, element):
    """A touch on element (a pointer of type touch, as a phone sends)."""
    actions = ActionBuilder(driver, mouse=PointerInput(interaction.POINTER_TOUCH, "finger"))
    actions.pointer_action.move_to(element).pointer_down().pause(0.05).pointer_up()
    actions.perform()


def check_view(driver, view, size, names):
    """The checks for one viewer at one width. names: what the view must and
    must not show (see main)."""
    label = f"{view['who']} at {size[0]}x{size[1]}"
    print(f"{label}:", flush=True)
    driver.set_window_size(*size)
    wait_for(driver, "the held slices", lambda d: len(held_slices(d)) >= 2)
    time.sleep(0.3)  # a relayout after the resize
    driver.save_screenshot(os.path.join(dashboard.ARTIFACTS, view["shot"][size == PHONE]))
    slices = held_slices(driver)
    body = js(driver, "return document.body.innerText;")

    # The legend: each visible tenant by name, in the colour of its slices.
    legend = js(driver, LEGEND)
    for tenant, job in view["mine"]:
        mine = [s for s in slices if s["job"] == job]
        if not check(len(mine) == 1, f"{label}: {tenant['name']}'s job {job} has a held slice"):
            continue
        entry = [x for x in legend if tenant["name"] in x["text"]]
        check(bool(entry) and entry[0]["colour"] == mine[0]["colour"],
              f"{label}: the legend names {tenant['name']} in its slices' colour "
              f"({mine[0]['colour']}; legend {legend})")
        check(tenant["name"] in mine[0]["text"] and tenant["job_name"] in mine[0]["text"],
              f"{label}: the slice names tenant {tenant['name']} and job {tenant['job_name']} "
              f"({mine[0]['text']!r})")
    others = [s for s in slices if s["state"] == "held_by_other_tenant"]
    if view["other"]:
        check(len(others) == 1 and "another tenant" in others[0]["text"],
              f"{label}: the other tenant's slice says \"another tenant\" ({[s['text'] for s in others]})")
        check(any("another tenant" in x["text"] for x in legend),
              f"{label}: the legend explains \"another tenant\" ({legend})")

    # Memory and utilisation on every slice.
    texts = js(driver, "return [...document.querySelectorAll('#device-map .slice')].map((e) => e.innerText);")
    check(len(texts) == 7 and all("16.0 GiB" in t for t in texts),
          f"{label}: every slice shows its memory (16.0 GiB): {texts}")
    check(all("—" in t for t in texts), f"{label}: every slice shows its utilisation as — (simulated): {texts}")

    # The GPU's NVLink domain: a caption over its group, and on its line.
    dom = js(driver, """const g = document.querySelector('#device-map .gpu-domain[data-domain="1"]');
        return g && {caption: g.querySelector('.domain-caption').innerText,
                     gpus: g.querySelectorAll('.gpu').length,
                     meta: g.querySelector('.gpu-meta').innerText};""")
    check(bool(dom) and dom["caption"] == "NVLink domain 1" and dom["gpus"] == 1
          and "NVLink domain 1" in dom["meta"],
          f"{label}: GPU 0 is shown under an \"NVLink domain 1\" caption ({dom})")

    # The queued jobs.
    m = re.search(r"(\d+) (?:jobs? )?queued|queued(?: jobs)?:? (\d+)", body, re.I)
    got = int(m.group(1) or m.group(2)) if m else None
    check(got == view["queued"], f"{label}: the queued count shows {view['queued']} (saw {got})")

    # Contrast of the text on held slices.
    for c in js(driver, CONTRAST):
        check(c["contrast"] >= 4.5, f"{label}: slot {c['slot']} ({c['state']}) text contrast "
              f"{c['contrast']:.2f} >= 4.5 on {c['bgs']}")

    # Details on a click (laptop) or a tap (phone), then from the keyboard.
    target = next((s for s in slices if s["state"] == "held_by_other_tenant"), slices[0])
    el = driver.find_element(By.CSS_SELECTOR, f"#device-map .slice[data-slot='{target['slot']}']")
    if size == PHONE:
        tap(driver, el)
    else:
        el.click()
    settle(lambda: details_text(driver))
    driver.save_screenshot(os.path.join(dashboard.ARTIFACTS, view["shot"][size == PHONE].replace(".png", "-details.png")))
    shown = details_text(driver)
    want = "another tenant" if target["state"] == "held_by_other_tenant" else names["job_names"][target["job"]]
    check(bool(shown) and want in shown,
          f"{label}: {'a tap' if size == PHONE else 'a click'} on slot {target['slot']} shows its details "
          f"({shown!r})")
    first = next(s for s in slices if s["slot"] != target["slot"])  # Enter again on target would close it
    el = driver.find_element(By.CSS_SELECTOR, f"#device-map .slice[data-slot='{first['slot']}']")
    js(driver, "arguments[0].focus();", el)
    el.send_keys(Keys.ENTER)
    settle(lambda: js(driver, "const d = document.getElementById('slice-details');"
                              "return d && d.dataset.slot === arguments[0];", first["slot"]))
    shown = details_text(driver)
    slot_shown = js(driver, "const d = document.getElementById('slice-details'); return d ? d.dataset.slot : null;")
    check(bool(shown) and slot_shown == first["slot"],
          f"{label}: Enter on slot {first['slot']} shows its details (slot {slot_shown}: {shown!r})")
    js(driver, "document.activeElement.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape', bubbles: true}));")
    check(settle(lambda: details_text(driver) is None), f"{label}: Escape closes the details")

    # What a tenant must never see, anywhere in the page.
    html = js(driver, "return document.documentElement.outerHTML;")
    for secret in names["hidden"]:
        check(secret not in html, f"{label}: the page does not hold {secret!r}")

    if size == PHONE:
        over = dashboard.overflow(driver)
        check(over <= 0, f"{label}: no horizontal overflow (scrollWidth - innerWidth = {over})")
        wrapped = js(driver, WRAPPED_WORDS)
        check(not wrapped, f"{label}: no word on a slice wraps across lines ({wrapped[:10]})")


def check_gang(driver, binary, tmp, csv):
    """A data-parallel gang ({"gpus": 2}) on four whole simulated H100s in
    two NVLink domains (gpu/sim/h100-4x-2nvl.json: GPUs 0-1 domain 1, 2-3
    domain 2), after a one-GPU job took GPU 0: the gang goes to domain 2,
    and the map draws its two members as one job - the job's name and
    "gang i of 2" on each, data-gang i/2 - and their details say where the
    other member is. The one-GPU job is no gang."""
    here = os.path.dirname(os.path.abspath(__file__))
    sim = os.path.normpath(os.path.join(here, "..", "..", "gpu", "sim", "h100-4x-2nvl.json"))
    os.makedirs(tmp, exist_ok=True)
    srv, log, base = start_server(binary, tmp, "--devices", f"sim:{sim}")
    os.setpriority(os.PRIO_PROCESS, srv.pid, 10)
    jobs = []
    try:
        admin = open(os.path.join(tmp, "data", "admin.key")).read().strip()
        key = api_call(base, admin, "POST", "/v1/tenants", {"name": "initech-nlp"})["key"]["api_key"]
        ds = upload_csv(base, key, csv, "initech-blobs")
        model = {"layers": [{"type": "dense", "units": 8}, {"type": "relu"}, {"type": "dense", "units": 3}]}
        hp = {"epochs": EPOCHS, "batch_size": 200, "seed": 1}
        for name, res in (("single-gpu", {"gpu": "whole"}), ("dp-train", {"gpus": 2})):
            job = api_call(base, key, "POST", "/v1/jobs", {"name": name, "dataset": ds, "model": model,
                                                         "hyperparameters": hp, "resources": res})["id"]
            jobs.append(job)
            for _ in range(300):
                if job_status(base, key, job) == "running":
                    break
                time.sleep(0.1)
            else:
                sys.exit(f"FAIL: job {name} ({job}) did not start")
        single, gang = jobs
        print("gang of 2 GPUs:", flush=True)
        sign_in(driver, base, key)
        driver.set_window_size(*WIDE)
        wait_for(driver, "three held slices", lambda d: len(held_slices(d)) >= 3)
        got = js(driver, """return [...document.querySelectorAll('#device-map .slice')].map((e) => ({
            slot: e.dataset.slot, job: e.dataset.job || null, gang: e.dataset.gang || null,
            domain: e.closest('.gpu-domain') ? e.closest('.gpu-domain').dataset.domain : null,
            gpu: e.closest('.gpu').dataset.gpu, text: e.innerText}));""")
        members = [x for x in got if x["job"] == gang]
        check(len(members) == 2 and sorted(str(x["gang"]) for x in members) == ["1/2", "2/2"],
              f"the gang's two slices are marked 1/2 and 2/2 ({members})")
        check(all("dp-train · gang" in x["text"] for x in members),
              f"each member names the job and its place in the gang ({[x['text'] for x in members]})")
        check(sorted(x["gpu"] for x in members) == ["2", "3"] and all(x["domain"] == "2" for x in members),
              f"the gang runs on GPUs 2 and 3, NVLink domain 2, beside the job on GPU 0 ({members})")
        lone = [x for x in got if x["job"] == single]
        check(len(lone) == 1 and lone[0]["gang"] is None and "gang" not in lone[0]["text"],
              f"the one-GPU job is no gang ({lone})")
        if members:
            driver.find_element(By.CSS_SELECTOR, f"#device-map .slice[data-slot='{members[0]['slot']}']").click()
            shown = settle(lambda: details_text(driver))
            check(bool(shown) and "one job on 2 GPUs (GPU 2, 3)" in shown,
                  f"a gang member's details name both GPUs ({shown!r})")
        driver.save_screenshot(os.path.join(dashboard.ARTIFACTS, "devices-gang-wide.png"))
    finally:
        for job in jobs:
            try:
                api_call(base, key, "POST", f"/v1/jobs/{job}/cancel")
            except (urllib.error.URLError, OSError):
                pass
        srv.terminate()
        try:
            srv.wait(timeout=30)
        except Exception:
            srv.kill()
        log.close()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    dashboard.ARTIFACTS = sys.argv[2] if len(sys.argv) > 2 else "build/browser-artifacts"
    os.makedirs(dashboard.ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="trainyard-devices-")
    csv = os.path.join(tmp, "blobs.csv")
    make_csv(csv)
    # The simulated H200, in NVLink domain 1 (the last --devices wins).
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "gpu", "sim", "h200-7x1g.json")) as f:
        sim = json.load(f)
    sim["gpus"][0]["nvlink_domain"] = 1
    sim_path = os.path.join(tmp, "h200-nvl.json")
    with open(sim_path, "w") as f:
        json.dump(sim, f)
    srv, log, base = start_server(binary, tmp, "--devices", f"sim:{sim_path}")
    # The training workers inherit this: the browser keeps the CPUs it needs.
    os.setpriority(os.PRIO_PROCESS, srv.pid, 10)
    driver = None
    jobs = []
    t0 = time.time()
    try:
        admin = open(os.path.join(tmp, "data", "admin.key")).read().strip()
        acme = api_call(base, admin, "POST", "/v1/tenants",
                        {"name": "acme-vision", "quota": {"max_running_jobs": 1}})
        globex = api_call(base, admin, "POST", "/v1/tenants", {"name": "globex-speech"})
        acme_key, globex_key = acme["key"]["api_key"], globex["key"]["api_key"]
        acme_ds = upload_csv(base, acme_key, csv, "acme-blobs")
        globex_ds = upload_csv(base, globex_key, csv, "globex-blobs")
        acme_job = submit(base, acme_key, acme_ds, "acme-train")
        globex_job = submit(base, globex_key, globex_ds, "globex-train")
        jobs += [(acme_key, acme_job), (globex_key, globex_job)]
        for key, job in jobs:
            for _ in range(300):
                if job_status(base, key, job) == "running":
                    break
                time.sleep(0.1)
            else:
                sys.exit(f"FAIL: job {job} did not start")
        queued = submit(base, acme_key, acme_ds, "acme-waits")
        jobs.append((acme_key, queued))
        time.sleep(1.0)  # a scheduling pass: it stays queued behind the quota
        if job_status(base, acme_key, queued) != "queued":
            sys.exit(f"FAIL: job {queued} should queue behind acme-vision's quota")

        acme_t = {"name": "acme-vision", "job_name": "acme-train"}
        globex_t = {"name": "globex-speech", "job_name": "globex-train"}
        job_names = {acme_job: "acme-train", globex_job: "globex-train"}
        views = [
            {"who": "admin", "key": admin, "mine": [(acme_t, acme_job), (globex_t, globex_job)],
             "other": False, "queued": 1, "shot": ("devices-wide.png", "devices-phone.png"),
             "names": {"job_names": job_names, "hidden": []}},
            {"who": "acme-vision", "key": acme_key, "mine": [(acme_t, acme_job)], "other": True,
             "queued": 1, "shot": ("devices-tenant-wide.png", "devices-tenant-phone.png"),
             "names": {"job_names": job_names,
                       "hidden": [globex_job, "globex-train", "globex-speech", globex["id"]]}},
        ]
        driver = browser()
        for view in views:
            sign_in(driver, base, view["key"])
            for size in (WIDE, PHONE):
                check_view(driver, view, size, view["names"])
        check_gang(driver, binary, os.path.join(tmp, "gang"), csv)

        errors = dashboard.severe_errors(driver)
        check(not errors, "no SEVERE browser console messages: " + " | ".join(errors))
        return dashboard.finish("device map test", t0, dashboard.ARTIFACTS)
    finally:
        for key, job in jobs:
            try:
                api_call(base, key, "POST", f"/v1/jobs/{job}/cancel")
            except (urllib.error.URLError, OSError):
                pass
        dashboard.stop(driver, srv, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
