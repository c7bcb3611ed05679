#!/usr/bin/python3
"""Tabular CSV parity with scikit-learn (issue 30, finding 4).

Makes a mixed-type CSV (numeric columns with empty cells, a text column, a
boolean column; 300 rows), uploads it to a fresh `trainyard serve`
(before typed columns this upload was a 422: "missing values are not
supported"), trains a tiny model for 1 epoch with an explicit validation
dataset (so the training split is the whole training file), and compares
what the network sees for raw rows (POST /v1/models/{id}/transform) with
scikit-learn's ColumnTransformer of SimpleImputer(mean) + StandardScaler on
the numeric and boolean columns and OneHotEncoder(handle_unknown="ignore",
categories as the model's) on the text column, fitted on the same rows:
bit for bit as float32. It also checks /v1 predict takes the same raw
rows (arrays and objects keyed by column), KServe v2 infer the cells as a
BYTES tensor [n, columns], and that an unseen category is all zeros.

numpy sums pairwise where trainyard sums in order, so a statistic's last
double bit may differ; that changes a float32 input only if the double
result lies within that bit of a float32 rounding boundary - vanishingly
unlikely, and this test would then say which value differs.

Usage: tabular_sklearn.py path/to/trainyard
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid

import numpy as np

CITIES = ["rome", "paris", "Zürich", "berlin", "oslo"]


def request(base, key, method, path, body=None, ctype="application/json"):
    req = urllib.request.Request(base + path, data=body, method=method)
    req.add_header("Authorization", "Bearer " + key)
    if body is not None:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def upload_csv(base, key, name, text):
    boundary = uuid.uuid4().hex
    parts = []
    for field, value in (("name", name), ("format", "csv"),
                         ("label_column", "label"), ("task", "classification")):
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"'
                     f'\r\n\r\n{value}\r\n'.encode())
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                 f'filename="{name}.csv"\r\nContent-Type: text/csv\r\n\r\n'.encode()
                 + text.encode() + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return request(base, key, "POST", "/v1/datasets", b"".join(parts),
                   f"multipart/form-data; boundary={boundary}")


def make_rows(rng, n):
    """Raw rows (age, income, city, member) and labels; numbers are k/16,
    exact in float32 and double, so the CSV text means one value to both."""
    rows, labels = [], []
    for _ in range(n):
        age = None if rng.random() < 0.1 else int(rng.integers(18, 90))
        income = None if rng.random() < 0.15 else float(rng.integers(0, 160000)) / 16
        city = CITIES[int(rng.integers(0, len(CITIES)))]
        member = None if rng.random() < 0.05 else bool(rng.random() < 0.4)
        rows.append([age, income, city, member])
        labels.append("hi" if (income or 0) > 4000 else "lo")
    return rows, labels


def csv_cell(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def csv_text(rows, labels):
    lines = ["age,income,city,member,label"]
    lines += [",".join(csv_cell(v) for v in r) + "," + y for r, y in zip(rows, labels)]
    return "\n".join(lines) + "\n"


def start_server(binary, tmp):
    """A `trainyard serve` on a free port: (process, base URL, admin key)."""
    log = open(os.path.join(tmp, "server.log"), "w")
    srv = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--data",
                            os.path.join(tmp, "data"), "--train-device", "cpu"],
                           stdout=subprocess.PIPE, stderr=log, text=True)
    log.close()
    for line in srv.stdout:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            key = open(os.path.join(tmp, "data", "admin.key")).read().strip()
            return srv, f"http://127.0.0.1:{m.group(1)}", key
    srv.kill()
    sys.exit("the server did not start")


def train(base, key, train_id, val_id):
    """A 1-epoch model on train_id, validated on val_id: its id."""
    job = {"name": "tabular-parity", "dataset": train_id,
           "validation": {"dataset": val_id},
           "model": {"layers": [{"type": "dense", "units": 8}, {"type": "relu"},
                                {"type": "dense", "units": 2}]},
           "hyperparameters": {"epochs": 1, "batch_size": 32, "seed": 1}}
    status, doc = request(base, key, "POST", "/v1/jobs", json.dumps(job).encode())
    if status != 202:
        sys.exit(f"FAIL: submit: {status} {doc}")
    while True:
        status, doc = request(base, key, "GET", f"/v1/jobs/{doc['id']}")
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            break
        subprocess.run(["sleep", "0.2"])
    if doc["status"] != "succeeded":
        sys.exit(f"FAIL: the job {doc['status']}: {doc.get('error')}")
    return doc["model"]


def main():
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    binary = sys.argv[1]
    rng = np.random.default_rng(7)
    train_rows, train_y = make_rows(rng, 300)
    val_rows, val_y = make_rows(rng, 60)
    tmp = tempfile.mkdtemp(prefix="trainyard-tabular-")
    srv, base, key = start_server(binary, tmp)
    try:

        status, tr_ds = upload_csv(base, key, "mixed", csv_text(train_rows, train_y))
        if status != 201:
            sys.exit(f"FAIL: the mixed-type CSV upload was refused: {status} {tr_ds}")
        status, val = upload_csv(base, key, "mixed-val", csv_text(val_rows, val_y))
        if status != 201:
            sys.exit(f"FAIL: the validation CSV upload was refused: {status} {val}")
        cols = tr_ds["columns"]
        types = [c["type"] for c in cols]
        if types != ["numeric", "numeric", "categorical", "boolean"]:
            sys.exit(f"FAIL: column types {types}")
        missing = [sum(r[i] is None for r in train_rows) for i in range(4)]
        if [c["missing"] for c in cols] != missing:
            sys.exit(f"FAIL: missing counts {[c['missing'] for c in cols]} != {missing}")
        cats = cols[2]["categories"]
        if cats != sorted(set(r[2] for r in train_rows)):
            sys.exit(f"FAIL: categories {cats} are not the sorted distinct texts")

        model = train(base, key, tr_ds["id"], val["id"])

        probe = train_rows[:40] + val_rows[:20] + [[30, None, "tokyo", None]]
        status, tr = request(base, key, "POST", f"/v1/models/{model}/transform",
                             json.dumps({"inputs": probe}).encode())
        if status != 200:
            sys.exit(f"FAIL: transform: {status} {tr}")
        got = np.array(tr["transformed"], dtype=np.float64).astype(np.float32)

        def as_frame(rows):
            num = np.array([[np.nan if r[0] is None else r[0],
                             np.nan if r[1] is None else r[1],
                             np.nan if r[3] is None else float(r[3])] for r in rows],
                           dtype=np.float64)
            txt = np.array([[r[2]] for r in rows], dtype=object)
            return num, txt

        num, txt = as_frame(train_rows)
        numeric = make_pipeline(SimpleImputer(strategy="mean"), StandardScaler())
        onehot = OneHotEncoder(handle_unknown="ignore", categories=[cats])
        ct = ColumnTransformer([("num", numeric, [0, 1, 2]), ("cat", onehot, [3])],
                               sparse_threshold=0)
        X = np.concatenate([num, txt], axis=1)
        ct.fit(X)
        pnum, ptxt = as_frame(probe)
        want_ct = ct.transform(np.concatenate([pnum, ptxt], axis=1)).astype(np.float32)
        # trainyard keeps the CSV's column order: age, income, city=..., member
        k = len(cats)
        want = np.concatenate([want_ct[:, 0:2], want_ct[:, 3:3 + k], want_ct[:, 2:3]],
                              axis=1)
        if got.shape != want.shape:
            sys.exit(f"FAIL: shapes {got.shape} != {want.shape}")
        diff = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
        if len(diff):
            i, j = diff[0]
            sys.exit(f"FAIL: {len(diff)} inputs differ; first row {i} feature "
                     f"{tr['feature_names'][j]}: {got[i, j]!r} != {want[i, j]!r}")
        if np.any(got[-1, 2:2 + k] != 0):
            sys.exit("FAIL: an unseen category is not all zeros")

        # /v1 predict takes the same raw rows, as arrays and as objects
        names = ["age", "income", "city", "member"]
        objs = [dict(zip(names, r)) for r in probe[:5]]
        s1, p1 = request(base, key, "POST", f"/v1/models/{model}/predict",
                         json.dumps({"inputs": probe[:5]}).encode())
        s2, p2 = request(base, key, "POST", f"/v1/models/{model}/predict",
                         json.dumps({"inputs": objs}).encode())
        if s1 != 200 or s2 != 200 or p1["outputs"] != p2["outputs"]:
            sys.exit(f"FAIL: predict on raw rows: {s1} {p1} / {s2} {p2}")
        s3, p3 = request(base, key, "POST", f"/v1/models/{model}/predict",
                         json.dumps({"inputs": [[1, 2, "rome", "maybe"]]}).encode())
        if s3 != 422 or "member" not in json.dumps(p3):
            sys.exit(f"FAIL: a bad boolean cell: {s3} {p3}")
        # An evaluation dataset with other categories (a subset and one the
        # model never saw) and its columns in another order is encoded with
        # the model's schema: evaluate's loss and accuracy are those of
        # predict's outputs on the same raw rows.
        ev_rows, ev_y = make_rows(rng, 50)
        for i, r in enumerate(ev_rows):
            r[2] = ["rome", "oslo", "tokyo"][i % 3]
        order = [2, 0, 3, 1]
        text = "city,age,member,income,label\n" + "".join(
            ",".join(csv_cell(r[j]) for j in order) + "," + y + "\n"
            for r, y in zip(ev_rows, ev_y))
        status, ev_ds = upload_csv(base, key, "mixed-eval", text)
        if status != 201 or ev_ds["columns"][0]["categories"] != ["oslo", "rome", "tokyo"]:
            sys.exit(f"FAIL: the evaluation CSV: {status} {ev_ds}")
        status, ev = request(base, key, "POST", f"/v1/models/{model}/evaluate",
                             json.dumps({"dataset": ev_ds["id"]}).encode())
        if status != 200:
            sys.exit(f"FAIL: evaluate with other categories: {status} {ev}")
        status, pe = request(base, key, "POST", f"/v1/models/{model}/predict",
                             json.dumps({"inputs": ev_rows}).encode())
        if status != 200:
            sys.exit(f"FAIL: predict: {status} {pe}")
        classes = ["hi", "lo"]  # sorted labels: the class order
        probs = np.array(pe["outputs"], dtype=np.float64)
        lab = np.array([classes.index(y) for y in ev_y])
        hits = float(np.mean(np.argmax(probs, axis=1) == lab))
        xent = float(np.mean(-np.log(probs[np.arange(len(lab)), lab])))
        if abs(ev["accuracy"] - hits) > 1e-12 or abs(ev["loss"] - xent) > 1e-4:
            sys.exit(f"FAIL: evaluate {ev} != predict's accuracy {hits}, loss {xent}")

        # KServe v2: a BYTES input [n, columns] of the cells as text
        status, md = request(base, key, "GET", f"/v2/models/{model}")
        if status != 200 or md["inputs"][0]["datatype"] != "BYTES" or \
                md["inputs"][0]["shape"] != [-1, 4]:
            sys.exit(f"FAIL: KServe metadata of a tabular model: {status} {md}")
        cells = [csv_cell(v) for r in probe[:5] for v in r]
        body = {"inputs": [{"name": "input", "datatype": "BYTES", "shape": [5, 4],
                            "data": cells}]}
        status, inf = request(base, key, "POST", f"/v2/models/{model}/infer",
                              json.dumps(body).encode())
        if status != 200:
            sys.exit(f"FAIL: KServe BYTES infer: {status} {inf}")
        flat = [v for row in p1["outputs"] for v in row]
        if inf["outputs"][0]["data"] != flat:
            sys.exit(f"FAIL: KServe BYTES outputs {inf['outputs'][0]['data']} "
                     f"!= predict's {flat}")
        print(f"OK: {got.size} float32 inputs of {len(probe)} raw rows equal "
              f"scikit-learn's bit for bit ({k} categories, "
              f"{sum(missing)} missing cells in training)")
        return 0
    finally:
        srv.terminate()
        srv.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
