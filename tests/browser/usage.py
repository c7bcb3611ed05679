#!/usr/bin/env python3
"""The usage page (#/usage, issue 34) in headless Chromium, as the admin and
as a tenant, at laptop (1280x900) and phone (390x844) widths.

Starts `trainyard serve` with the simulated H200 (seven 1g.18gb slices),
makes two tenants (acme-vision, globex-speech) through the admin API; each
runs a job on a 1g.18gb slice for a few seconds, then cancels it, so every
interval is closed and the figures stand still while the page is checked.
Then, for each viewer and width, against GET /v1/usage for the same window:

* the table has one row per tenant the viewer may see, by name, and its
  GPU-hours (training, serving, total), slice-hours and interval count are
  the API's (as the page rounds them);
* the day's stacked bar (training) is the API's GPU-hours of that day;
* the admin sees the inventory (1 GPU) and its idle hours; a tenant does
  not;
* a tenant's page never holds the other tenant's name or id, in text or
  attributes;
* at 390 px nothing is wider than the screen.

Every failed check is listed. Any SEVERE browser console message fails the
test. Screenshots go to the folder given as the second argument.

Usage: usage.py path/to/trainyard [artifacts-dir]
Exit 77 (skipped) when chromium, chromedriver or selenium is missing.
"""
import datetime
import math
import os
import sys
import tempfile
import time
import urllib.error
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard  # noqa: E402  (skips with 77 itself when selenium or chromium is missing)
from dashboard import api_call, browser, check, js, make_csv, start_server  # noqa: E402
from devices import job_status, submit, upload_csv  # noqa: E402


WIDE, PHONE = (1280, 900), (390, 844)
RUN_S = 4.0   # how long each job holds its slice


def parse_hours(text):
    """A figure as the page prints it (fmtHours): '0', '0.123', '4.0e-4'."""
    try:
        return float(text)
    except ValueError:
        return None


def close_to(shown, want):
    """The page's figure is the API's as fmtHours (web/usage.js) rounds it:
    within half a unit of the last digit it prints (whole hours from 100,
    2 decimals from 1, 3 from 0.01, else 2 significant digits)."""
    if shown is None or want is None:
        return False
    a = abs(want)
    if a == 0:
        return shown == 0
    unit = 1 if a >= 100 else 0.01 if a >= 1 else 0.001 if a >= 0.01 else 10 ** (math.floor(math.log10(a)) - 1)
    return abs(shown - want) <= unit / 2 + 1e-12


def page_window(driver):
    """The window the page asked for: it rounds 'to' up to the minute; the
    test asks the API for the same one (the intervals are closed, so a
    minute's difference changes nothing)."""
    to = (int(time.time()) // 60 + 1) * 60
    frm = to - 7 * 86400
    fmt = lambda t: datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    return fmt(frm), fmt(to)


def api_usage(base, key, group_by):
    frm, to = page_window(None)
    q = urllib.parse.urlencode({"from": frm, "to": to, "group_by": group_by})
    return api_call(base, key, "GET", f"/v1/usage?{q}")


def sign_in(driver, base, key):
    driver.get(base + "/")
    js(driver, "sessionStorage.setItem('trainyard.key', arguments[0]);", key)
    driver.get(base + "/#/usage")
    driver.refresh()
    dashboard.wait(driver, "the usage page", lambda d: js(d, "return document.getElementById('main').dataset.loaded;"))


def table_rows(driver):
    return js(driver, """
        return [...document.querySelectorAll('#usage-body tr')].map((tr) => ({
          tenant: tr.dataset.tenant, cells: [...tr.children].map((c) => c.innerText.trim())}));""")


def check_view(driver, base, view, size):
    label = f"{view['who']} at {size[0]}x{size[1]}"
    print(f"{label}:", flush=True)
    driver.set_window_size(*size)
    time.sleep(0.3)
    driver.save_screenshot(os.path.join(dashboard.ARTIFACTS, f"usage-{view['who']}-{'phone' if size == PHONE else 'wide'}.png"))
    by_tenant = api_usage(base, view["key"], "tenant,kind")
    daily = api_usage(base, view["key"], "day,kind")

    # The table: each tenant the viewer may see, by name, with the API's figures.
    want = {}
    for r in by_tenant["rows"]:
        t = want.setdefault(r["tenant"], {"training": 0.0, "serving": 0.0, "gpu": 0.0, "slice": 0.0, "n": 0})
        t[r["kind"]] += r["gpu_hours"]
        t["gpu"] += r["gpu_hours"]
        t["slice"] += r["slice_hours"]
        t["n"] += r["intervals"]
    rows = table_rows(driver)
    check(sorted(r["tenant"] for r in rows) == sorted(want),
          f"{label}: one row per tenant the API reports ({[r['tenant'] for r in rows]} vs {sorted(want)})")
    check(sorted(want) == sorted(t["id"] for t in view["sees"]),
          f"{label}: the API reports exactly the tenants this viewer may see ({sorted(want)})")
    for t in view["sees"]:
        row = next((r for r in rows if r["tenant"] == t["id"]), None)
        if not check(row is not None, f"{label}: a row for {t['name']}"):
            continue
        c = row["cells"]
        w = want.get(t["id"], {})
        check(c[0] == t["name"], f"{label}: the row names the tenant {t['name']} ({c[0]!r})")
        check(w.get("gpu", 0) > 0, f"{label}: {t['name']} used GPU time ({w.get('gpu')} GPU-hours)")
        for i, key in ((1, "training"), (2, "serving"), (3, "gpu"), (4, "slice")):
            check(close_to(parse_hours(c[i]), w.get(key)),
                  f"{label}: {t['name']}'s {key} hours shown {c[i]!r} are the API's {w.get(key)}")
        check(c[6] == str(w.get("n")), f"{label}: {t['name']}'s intervals {c[6]!r} = {w.get('n')}")
        # A 1g slice of a 7-slice GPU: a GPU-hour is 7 slice-hours.
        check(abs(w.get("slice", 0) - 7 * w.get("gpu", 0)) <= 1e-6 + 1e-3 * w.get("slice", 0),
              f"{label}: {t['name']}'s slice-hours are 7x its GPU-hours on 1g slices")

    # The bars: today's training bar is the API's GPU-hours of today.
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    points = js(driver, "return JSON.parse(document.getElementById('usage-chart').dataset.points || '{}');")
    api_today = sum(r["gpu_hours"] for r in daily["rows"] if r["day"] == today and r["kind"] == "training")
    bars = points.get("training") or []
    check(bool(bars) and abs(bars[-1] - api_today) <= 1e-9 + 1e-6 * api_today and api_today > 0,
          f"{label}: today's training bar {bars[-1] if bars else None} is the API's {api_today}")
    check(len(bars) in (7, 8), f"{label}: a bar for each day of the 7-day window ({len(bars)})")

    # The inventory: the admin's alone.
    inv = js(driver, "const e = document.getElementById('usage-inventory'); return e ? e.innerText : null;")
    if view["who"] == "admin":
        check(inv is not None and "1 GPU" in inv, f"{label}: the inventory is shown ({inv!r})")
        check("inventory" in daily, f"{label}: the API gives the admin the inventory")
    else:
        check(inv is None, f"{label}: no inventory for a tenant ({inv!r})")
        check("inventory" not in daily, f"{label}: the API gives a tenant no inventory")

    html = js(driver, "return document.documentElement.outerHTML;")
    for secret in view["hidden"]:
        check(secret not in html, f"{label}: the page does not hold {secret!r}")
    if size == PHONE:
        over = dashboard.overflow(driver)
        check(over <= 0, f"{label}: no horizontal overflow (scrollWidth - innerWidth = {over})")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    dashboard.ARTIFACTS = sys.argv[2] if len(sys.argv) > 2 else "build/browser-artifacts-usage"
    os.makedirs(dashboard.ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="trainyard-usage-")
    csv = os.path.join(tmp, "blobs.csv")
    make_csv(csv)
    srv, log, base = start_server(binary, tmp)
    os.setpriority(os.PRIO_PROCESS, srv.pid, 10)
    driver = None
    t0 = time.time()
    try:
        admin = open(os.path.join(tmp, "data", "admin.key")).read().strip()
        acme = api_call(base, admin, "POST", "/v1/tenants", {"name": "acme-vision"})
        globex = api_call(base, admin, "POST", "/v1/tenants", {"name": "globex-speech"})
        keys = {acme["id"]: acme["key"]["api_key"], globex["id"]: globex["key"]["api_key"]}
        jobs = []
        for t, name in ((acme, "acme"), (globex, "globex")):
            ds = upload_csv(base, keys[t["id"]], csv, f"{name}-blobs")
            jobs.append((keys[t["id"]], submit(base, keys[t["id"]], ds, f"{name}-train")))
        for key, job in jobs:
            for _ in range(300):
                if job_status(base, key, job) == "running":
                    break
                time.sleep(0.1)
            else:
                sys.exit(f"FAIL: job {job} did not start")
        time.sleep(RUN_S)
        for key, job in jobs:
            api_call(base, key, "POST", f"/v1/jobs/{job}/cancel")
        for key, job in jobs:
            for _ in range(300):
                if job_status(base, key, job) == "cancelled":
                    break
                time.sleep(0.1)

        a = {"id": acme["id"], "name": "acme-vision"}
        g = {"id": globex["id"], "name": "globex-speech"}
        views = [{"who": "admin", "key": admin, "sees": [a, g], "hidden": []},
                 {"who": "acme-vision", "key": keys[acme["id"]], "sees": [a],
                  "hidden": [globex["id"], "globex-speech", jobs[1][1]]}]
        driver = browser()
        for view in views:
            sign_in(driver, base, view["key"])
            for size in (WIDE, PHONE):
                check_view(driver, base, view, size)
        errors = dashboard.severe_errors(driver)
        check(not errors, "no SEVERE browser console messages: " + " | ".join(errors))
        return dashboard.finish("usage page test", t0, dashboard.ARTIFACTS)
    finally:
        dashboard.stop(driver, srv, log, tmp)


if __name__ == "__main__":
    sys.exit(main())
