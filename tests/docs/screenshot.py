#!/usr/bin/env python3
"""Takes the README's screenshot of the dashboard, docs/dashboard.png.

Not a test: run it by hand after a change to the dashboard's look. It
starts `trainyard serve` on a free port with a temporary data folder, runs
the README tutorial's job (Fashion-MNIST, the MLP) for 10 epochs and, for a
second row in the lists, the same network with a constant learning rate,
then opens the cosine run's page in headless Chromium at 1200x1215, adds
the constant run to its curves for comparison, and saves it. Needs what the browser tests need (chromium, chromium-driver,
python3-selenium) and dataset-fashion-mnist.

    tests/docs/screenshot.py build/trainyard [docs/dashboard.png]
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FASHION = "/usr/share/datasets/fashion-mnist"
LAYERS = [{"type": "flatten"},
          {"type": "dense", "units": 256}, {"type": "relu"},
          {"type": "dense", "units": 128}, {"type": "relu"},
          {"type": "dense", "units": 10}]


def call(base, key, method, path, body=None, files=None):
    headers = {"Authorization": f"Bearer {key}"}
    data = None
    if files is not None:
        boundary = uuid.uuid4().hex
        parts = []
        for name, filename, content in files:
            disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
            parts.append(f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + content + b"\r\n")
        data = b"".join(parts) + f"--{boundary}--\r\n".encode()
        headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
    elif body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def upload(base, key, name, images, labels):
    read = lambda f: open(os.path.join(FASHION, f), "rb").read()
    return call(base, key, "POST", "/v1/datasets",
                files=[("name", None, name.encode()), ("format", None, b"idx"),
                       ("images", images, read(images)), ("labels", labels, read(labels))])["id"]


def main():
    binary = os.path.abspath(sys.argv[1])
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs", "dashboard.png")
    tmp = tempfile.mkdtemp(prefix="ty-shot-")
    srv = driver = None
    try:
        srv = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--data",
                                os.path.join(tmp, "var"), "--devices", "none"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True)
        base = None
        for line in srv.stdout:
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if m:
                base = m.group(1)
                break
        key = open(os.path.join(tmp, "var", "admin.key")).read().strip()
        train = upload(base, key, "fashion-train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
        upload(base, key, "fashion-test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
        jobs = []
        for name, schedule in (("fashion-mlp-constant", {"type": "constant"}),
                               ("fashion-mlp", {"type": "cosine"})):
            jobs.append(call(base, key, "POST", "/v1/jobs", {
                "name": name, "dataset": train, "validation": {"split": 0.1},
                "model": {"layers": LAYERS},
                "hyperparameters": {"epochs": 10, "batch_size": 128, "optimizer": "adam",
                                    "learning_rate": 0.001, "seed": 1, "lr_schedule": schedule}})["id"])
        while any(call(base, key, "GET", f"/v1/jobs/{j}")["status"] != "succeeded" for j in jobs):
            time.sleep(1)

        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--window-size=1200,1215", "--hide-scrollbars", "--force-device-scale-factor=1"):
            opts.add_argument(a)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        driver.get(base + "/")
        driver.execute_script("sessionStorage.setItem('trainyard.key', arguments[0]);", key)
        driver.get(f"{base}/#/jobs/{jobs[-1]}")
        driver.refresh()
        WebDriverWait(driver, 30).until(
            lambda d: int(d.find_element(By.ID, "acc-chart").get_attribute("data-points") or 0) > 0)
        WebDriverWait(driver, 30).until(lambda d: d.find_elements(
            By.CSS_SELECTOR, f'#curve-compare option[value="{jobs[0]}"]'))
        driver.execute_script(
            "const s = document.getElementById('curve-compare'); s.value = arguments[0];"
            "s.dispatchEvent(new Event('change'));", jobs[0])
        WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#compare-chips .chip"))
        time.sleep(2)   # the charts' animation
        driver.save_screenshot(out)
        print(f"{out}: {os.path.getsize(out)} bytes")
    finally:
        if driver:
            driver.quit()
        if srv:
            os.killpg(srv.pid, signal.SIGTERM)
            srv.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
