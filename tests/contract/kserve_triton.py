"""KServe v2 conformance: Triton's own HTTP client (tritonclient.http, the
version pinned in requirements.txt) against a live `trainyard serve`, with
default client settings and only the Authorization header added.

    python kserve_triton.py path/to/trainyard

Every call of tritonclient.http.InferenceServerClient that the protocol
covers is made; every inference result is compared bit for bit with
POST /v1/models/{id}/predict on the same inputs. Exit 77 (skipped) when
tritonclient is not installed (`make venv` installs it).

tritonclient adds Inference-Header-Content-Length to the headers dict it is
given (and leaves it there), so every call gets a fresh dict.
"""
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
import zlib

try:
    import numpy as np
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException
except ImportError as e:
    print(f"SKIPPED: tritonclient[http] is not installed ({e}); make venv installs it")
    sys.exit(77)

MAX_JSON = 64 * 1024  # --max-json-bytes: the limit an inflated body meets


class Server:
    def __init__(self, binary):
        self.data = tempfile.mkdtemp(prefix="ty-kserve-")
        self.out = open(os.path.join(self.data, "stdout"), "w+")
        self.log = open(os.path.join(self.data, "log"), "w")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data",
             os.path.join(self.data, "d"), "--train-device", "cpu",
             "--max-json-bytes", str(MAX_JSON), "--auth-fail-rate", "0"],
            stdout=self.out, stderr=self.log)
        port = None
        for _ in range(200):
            self.out.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.out.read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.05)
        if port is None:
            self.stop()
            raise RuntimeError("the server did not start")
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        with open(os.path.join(self.data, "d", "admin.key")) as f:
            self.key = f.read().strip()

    def request(self, method, path, body=None, headers=None, key=True):
        h = dict(headers or {})
        if key:
            h["Authorization"] = "Bearer " + self.key
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        if body is not None:  # urllib would say form-urlencoded
            h.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(self.base + path, data=body, headers=h,
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def json(self, method, path, body=None, **kw):
        status, _, data = self.request(method, path, body, **kw)
        return status, json.loads(data) if data else None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.data, ignore_errors=True)


def train(srv, ds, name, seed):
    """A small classifier on the CSV dataset ds; its model document."""
    status, job = srv.json("POST", "/v1/jobs", {
        "dataset": ds, "name": name,
        "model": {"layers": [{"type": "dense", "units": 8}, {"type": "relu"},
                             {"type": "dense", "units": 3}]},
        "hyperparameters": {"epochs": 2, "seed": seed}})
    assert status in (201, 202), job
    for _ in range(600):
        _, job = srv.json("GET", "/v1/jobs/" + job["id"])
        if job["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    assert job["status"] == "succeeded", job
    _, model = srv.json("GET", "/v1/models/" + job["model"])
    return model


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def run(self, name, fn):
        try:
            fn()
            self.passed += 1
            print(f"ok   {name}")
        except Exception:
            self.failed += 1
            print(f"FAIL {name}")
            traceback.print_exc(file=sys.stdout)


def main():
    binary = sys.argv[1]
    srv = Server(binary)
    try:
        return conformance(srv)
    finally:
        srv.stop()


def conformance(srv):
    csv = "x1,x2,label\n" + "".join(
        f"{i % 7}.5,{i % 5}.25,c{i % 3}\n" for i in range(1, 61))
    boundary = "tyKserveBoundary"
    parts = [("name", "kserve"), ("format", "csv"), ("label_column", "label")]
    body = "".join(f"--{boundary}\r\nContent-Disposition: form-data; "
                   f"name=\"{k}\"\r\n\r\n{v}\r\n" for k, v in parts)
    body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
             f"filename=\"d.csv\"\r\nContent-Type: text/csv\r\n\r\n{csv}\r\n"
             f"--{boundary}--\r\n")
    status, _, data = srv.request(
        "POST", "/v1/datasets", body.encode(),
        {"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert status == 201, data
    ds = json.loads(data)["id"]
    # A and B share a name (B is newer); C is named after A's id.
    a = train(srv, ds, "tiny", 1)
    b = train(srv, ds, "tiny", 2)
    c = train(srv, ds, a["id"], 3)
    mid, classes = a["id"], a["classes"]

    client = th.InferenceServerClient(f"127.0.0.1:{srv.port}")
    auth = {"Authorization": "Bearer " + srv.key}

    def H():
        return dict(auth)

    def predict(model_id, x):
        """/v1 predict's raw outputs for x, as float32."""
        status, doc = srv.json("POST", f"/v1/models/{model_id}/predict",
                               {"inputs": np.asarray(x, np.float64).tolist()})
        assert status == 200, doc
        return np.array(doc["outputs"], dtype=np.float32)

    def same(got, want):
        assert got.dtype == np.float32, got.dtype
        assert got.shape == want.shape, (got.shape, want.shape)
        assert np.array_equal(got, want), (got, want)

    x = np.array([[1.5, 2.25], [3.5, 0.25], [0.5, 4.25], [6.5, 1.25]],
                 dtype=np.float32)
    want = predict(mid, x)
    inferred = {"requests": 0, "examples": 0}  # A's successes, for stats

    def infer(model, x_np, datatype="FP32", binary=True, outputs=None,
              **kw):
        inp = th.InferInput("input", list(x_np.shape), datatype)
        inp.set_data_from_numpy(x_np, binary_data=binary)
        r = client.infer(model, [inp], outputs=outputs, headers=H(), **kw)
        if model == mid:
            inferred["requests"] += 1
            inferred["examples"] += x_np.shape[0]
        return r

    def expect_error(fn, status, *words):
        try:
            fn()
        except InferenceServerException as e:
            assert e.status() == str(status), (e.status(), e.message())
            for w in words:
                assert w in e.message(), (w, e.message())
            return e
        raise AssertionError("no error")

    ck = Checks()

    # ---- health and metadata ----
    def server_live():
        assert client.is_server_live(headers=H()) is True
    ck.run("is_server_live", server_live)

    def server_ready():
        assert client.is_server_ready(headers=H()) is True
    ck.run("is_server_ready", server_ready)

    def server_metadata():
        m = client.get_server_metadata(headers=H())
        assert m["name"] == "trainyard" and m["version"], m
        for ext in ("binary_tensor_data", "classification", "statistics",
                    "model_repository", "model_configuration"):
            assert ext in m["extensions"], m
        for ext in ("system_shared_memory", "cuda_shared_memory", "trace",
                    "logging"):
            assert ext not in m["extensions"], m
    ck.run("get_server_metadata", server_metadata)

    def model_ready():
        assert client.is_model_ready(mid, headers=H())
        assert client.is_model_ready(mid, "1", headers=H())
        assert client.is_model_ready("tiny", headers=H())
        assert not client.is_model_ready(mid, "2", headers=H())
        assert not client.is_model_ready("no-such-model", headers=H())
    ck.run("is_model_ready (with and without version)", model_ready)

    def model_metadata():
        for ref, version in ((mid, ""), (mid, "1")):
            m = client.get_model_metadata(ref, version, headers=H())
            assert m["name"] == mid and m["versions"] == ["1"], m
            assert m["inputs"] == [{"name": "input", "datatype": "FP32",
                                    "shape": [-1, 2]}], m
            out = m["outputs"][0]
            assert out["name"] == "output" and out["shape"] == [-1, 3], m
            assert out["classes"] == classes, m
        # By name: the newest model of that name; an id always wins.
        assert client.get_model_metadata("tiny", headers=H())["name"] == b["id"]
        assert client.get_model_metadata("tiny", "1", headers=H())["name"] == b["id"]
        assert client.get_model_metadata(a["id"], headers=H())["name"] == a["id"]
        assert c["name"] == a["id"]
        e = expect_error(lambda: client.get_model_metadata(mid, "2", headers=H()),
                         404, "version 2")
        expect_error(lambda: client.get_model_metadata("nope", headers=H()),
                     404, "no model with id or name 'nope'")
    ck.run("get_model_metadata (by id, by name, with version)", model_metadata)

    def model_config():
        cfg = client.get_model_config(mid, headers=H())
        assert cfg["name"] == mid and cfg["max_batch_size"] > 0, cfg
        assert cfg["input"][0]["name"] == "input", cfg
        assert cfg["input"][0]["dims"] == [2], cfg
        assert cfg["output"][0]["dims"] == [3], cfg
        assert client.get_model_config("tiny", "1", headers=H())["name"] == b["id"]
    ck.run("get_model_config", model_config)

    def repository_index():
        idx = client.get_model_repository_index(headers=H())
        names = {e["name"]: e for e in idx}
        for m in (a, b, c):
            assert names[m["id"]]["state"] == "READY", idx
        assert len(idx) == 3, idx
    ck.run("get_model_repository_index", repository_index)

    def load_model():
        client.load_model("tiny", headers=H())
        expect_error(lambda: client.load_model("nope", headers=H()), 404)
        expect_error(lambda: client.load_model(mid, headers=H(), config="{}"),
                     400, "not supported")
    ck.run("load_model (and its config, not supported)", load_model)

    # ---- inference ----
    def binary_default():
        r = infer(mid, x, request_id="req-1")
        resp = r.get_response()
        assert resp["id"] == "req-1" and resp["model_name"] == mid, resp
        out = resp["outputs"][0]
        assert out["parameters"]["binary_data_size"] == x.shape[0] * 3 * 4
        same(r.as_numpy("output"), want)
    ck.run("infer binary (client defaults), request id", binary_default)

    def json_mode():
        r = infer(mid, x, binary=False, request_id="7",
                  outputs=[th.InferRequestedOutput("output", binary_data=False)])
        resp = r.get_response()
        assert "data" in resp["outputs"][0] and resp["id"] == "7", resp
        same(r.as_numpy("output"), want)
    ck.run("infer JSON (inputs and outputs)", json_mode)

    def mixed():
        r = infer(mid, x, binary=False,
                  outputs=[th.InferRequestedOutput("output", binary_data=True)])
        same(r.as_numpy("output"), want)
        r = infer(mid, x, binary=True,
                  outputs=[th.InferRequestedOutput("output", binary_data=False)])
        same(r.as_numpy("output"), want)
    ck.run("infer binary input with JSON output and back", mixed)

    def versions():
        same(infer(mid, x, model_version="1").as_numpy("output"), want)
        expect_error(lambda: infer(mid, x, model_version="2"), 404, "version")
    ck.run("infer with versions", versions)

    def by_name():
        r = infer("tiny", x)
        assert r.get_response()["model_name"] == b["id"]
        same(r.as_numpy("output"), predict(b["id"], x))
    ck.run("infer by name (the newest of that name)", by_name)

    def classification():
        for binary in (True, False):
            r = infer(mid, x, outputs=[th.InferRequestedOutput(
                "output", binary_data=binary, class_count=2)])
            out = r.get_response()["outputs"][0]
            assert out["datatype"] == "BYTES" and out["shape"] == [4, 2], out
            got = r.as_numpy("output")
            for i in range(x.shape[0]):
                order = sorted(range(3), key=lambda j: (-want[i][j], j))[:2]
                for k in range(2):
                    s = got[i][k]
                    s = s.decode() if isinstance(s, bytes) else s
                    score, index, label = s.split(":", 2)
                    assert int(index) == order[k], (s, want[i])
                    assert np.float32(score) == want[i][order[k]], (s, want[i])
                    assert label == str(classes[order[k]]), s
        # More than the classes there are: all of them (as Triton).
        r = infer(mid, x[:1], outputs=[th.InferRequestedOutput(
            "output", class_count=10)])
        assert r.as_numpy("output").shape == (1, 3)
    ck.run("infer with class_count (classification extension)", classification)

    def async_infer():
        inp = th.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        req = client.async_infer(mid, [inp], headers=H(), request_id="async")
        r = req.get_result()
        inferred["requests"] += 1
        inferred["examples"] += x.shape[0]
        assert r.get_response()["id"] == "async"
        same(r.as_numpy("output"), want)
    ck.run("async_infer", async_infer)

    def datatypes():
        xi = np.array([[3, 1], [0, 4], [6, 2], [1, 1]])
        wi = predict(mid, xi)
        types = {"INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
                 "INT64": np.int64, "UINT8": np.uint8, "UINT16": np.uint16,
                 "UINT32": np.uint32, "UINT64": np.uint64, "FP16": np.float16,
                 "FP64": np.float64}
        for name, t in types.items():
            for binary in (True, False):
                r = infer(mid, xi.astype(t), name, binary=binary)
                same(r.as_numpy("output"), wi)
        xh = np.array([[0.1, 2.7], [-1.3, 65504]], dtype=np.float16)
        for binary in (True, False):
            same(infer(mid, xh, "FP16", binary=binary).as_numpy("output"),
                 predict(mid, xh.astype(np.float32)))
        xb = np.array([[True, False], [False, True]])
        for binary in (True, False):
            same(infer(mid, xb, "BOOL", binary=binary).as_numpy("output"),
                 predict(mid, xb.astype(np.float32)))
    ck.run("infer every numeric datatype, binary and JSON", datatypes)

    def compressed():
        for algo in ("gzip", "deflate"):
            r = infer(mid, x, request_compression_algorithm=algo)
            same(r.as_numpy("output"), want)
            r = infer(mid, x, binary=False, request_compression_algorithm=algo,
                      response_compression_algorithm=algo)
            same(r.as_numpy("output"), want)
    ck.run("gzip and deflate requests", compressed)

    def statistics():
        st = client.get_inference_statistics(mid, headers=H())["model_stats"]
        assert len(st) == 1 and st[0]["name"] == mid, st
        s = st[0]
        assert s["inference_count"] == inferred["examples"], (s, inferred)
        assert s["inference_stats"]["success"]["count"] == inferred["requests"]
        assert s["inference_stats"]["compute_infer"]["ns"] > 0, s
        assert s["last_inference"] > 0, s
        assert client.get_inference_statistics(mid, "1", headers=H())
        every = client.get_inference_statistics(headers=H())["model_stats"]
        assert {m["name"] for m in every} == {a["id"], b["id"], c["id"]}
    ck.run("get_inference_statistics", statistics)

    # ---- errors: InferenceServerException with the v2 error ----
    class RawInput(th.InferInput):
        """An input with JSON data as given (the client checks numpy
        dtypes, so out-of-range values cannot be sent otherwise)."""
        def __init__(self, datatype, values):
            super().__init__("input", [1, len(values)], datatype)
            self._data = values

    def raw_infer(datatype, values):
        return client.infer(mid, [RawInput(datatype, values)], headers=H())

    def bad_values():
        expect_error(lambda: raw_infer("INT8", [200, 1]), 400, 'input "input"',
                     "200 is out of range for INT8")
        expect_error(lambda: raw_infer("UINT8", [-5, 1]), 400, 'input "input"',
                     "-5 is out of range for UINT8")
        expect_error(lambda: raw_infer("UINT8", [1.5, 1]), 400, 'input "input"',
                     "1.5 is not an integer")
        expect_error(lambda: raw_infer("FP16", [1e40, 1]), 400, 'input "input"',
                     "out of range for FP16")
        expect_error(lambda: raw_infer("FP32", [1, 2, 3]), 400, "shape")
    ck.run("INT8 200, UINT8 -5, UINT8 1.5, FP16 1e40 refused", bad_values)

    def wrong_input():
        inp = th.InferInput("pixels", [1, 2], "FP32")
        inp.set_data_from_numpy(x[:1])
        expect_error(lambda: client.infer(mid, [inp], headers=H()), 400,
                     'unknown input "pixels"', '"input"')
        out = th.InferRequestedOutput("scores")
        inp = th.InferInput("input", [1, 2], "FP32")
        inp.set_data_from_numpy(x[:1])
        expect_error(lambda: client.infer(mid, [inp], outputs=[out], headers=H()),
                     400, 'unknown output "scores"')
    ck.run("wrong input and output names refused", wrong_input)

    def bytes_input():
        for binary in (True, False):
            inp = th.InferInput("input", [1, 2], "BYTES")
            inp.set_data_from_numpy(np.array([[b"1", b"2"]], dtype=np.object_),
                                    binary_data=binary)
            expect_error(lambda: client.infer(mid, [inp], headers=H()), 400,
                         "BYTES is not supported")
    ck.run("BYTES input refused", bytes_input)

    def wrong_shape():
        inp = th.InferInput("input", [2, 3], "FP32")
        inp.set_data_from_numpy(np.zeros((2, 3), np.float32))
        expect_error(lambda: client.infer(mid, [inp], headers=H()), 400,
                     "shape [2,3] does not fit")
    ck.run("wrong shape refused", wrong_shape)

    def unsupported():
        calls = {
            "unload_model": lambda: client.unload_model(mid, headers=H()),
            "get_trace_settings": lambda: client.get_trace_settings(headers=H()),
            "get_trace_settings(model)": lambda: client.get_trace_settings(
                mid, headers=H()),
            "update_trace_settings": lambda: client.update_trace_settings(
                settings={"trace_level": ["OFF"]}, headers=H()),
            "get_log_settings": lambda: client.get_log_settings(headers=H()),
            "update_log_settings": lambda: client.update_log_settings(
                {"log_info": False}, headers=H()),
            "get_system_shared_memory_status":
                lambda: client.get_system_shared_memory_status(headers=H()),
            "register_system_shared_memory":
                lambda: client.register_system_shared_memory(
                    "r", "/k", 16, headers=H()),
            "unregister_system_shared_memory":
                lambda: client.unregister_system_shared_memory(headers=H()),
            "get_cuda_shared_memory_status":
                lambda: client.get_cuda_shared_memory_status(headers=H()),
            "register_cuda_shared_memory":
                lambda: client.register_cuda_shared_memory(
                    "r", b"aGFuZGxl", 0, 16, headers=H()),
            "unregister_cuda_shared_memory":
                lambda: client.unregister_cuda_shared_memory("r", headers=H()),
        }
        for name, fn in calls.items():
            try:
                expect_error(fn, 400, "not supported")
            except AssertionError as e:
                raise AssertionError(f"{name}: {e}")
    ck.run("unsupported extensions: 400 saying so", unsupported)

    # ---- the HTTP layer answers v2 errors too ----
    def http_errors():
        status, _, data = srv.request("GET", "/v2", key=False)
        assert status == 401 and "error" in json.loads(data), data
        status, _, data = srv.request("GET", "/v2/nothing")
        assert status == 404 and "error" in json.loads(data), data
        status, _, data = srv.request("DELETE", "/v2/models/" + mid)
        assert status == 405 and "error" in json.loads(data), data
        status, _, data = srv.request(
            "POST", f"/v2/models/{mid}/infer", b"{}",
            {"Content-Type": "text/plain"})
        assert status == 415 and "error" in json.loads(data), data
        status, _, data = srv.request(
            "POST", f"/v2/models/{mid}/infer", gzip.compress(b"{}"),
            {"Content-Encoding": "br"})
        assert status == 415 and "br" in json.loads(data)["error"], data
        # A bomb: a few KB that inflate past --max-json-bytes.
        bomb = gzip.compress(b'{"inputs": [' + b" " * (MAX_JSON * 20) + b"]}")
        assert len(bomb) < MAX_JSON
        status, _, data = srv.request("POST", f"/v2/models/{mid}/infer", bomb,
                                      {"Content-Encoding": "gzip"})
        assert status == 413 and "inflates" in json.loads(data)["error"], data
        status, _, data = srv.request("POST", f"/v2/models/{mid}/infer",
                                      b"\x1f\x8b garbage",
                                      {"Content-Encoding": "gzip"})
        assert status == 400 and "gzip" in json.loads(data)["error"], data
        status, _, data = srv.request(
            "POST", f"/v2/models/{mid}/infer",
            zlib.compress(json.dumps({"inputs": [{
                "name": "input", "shape": [1, 2], "datatype": "FP32",
                "data": [1.5, 2.25]}]}).encode()),
            {"Content-Encoding": "deflate"})
        assert status == 200, data
        assert np.array_equal(np.array(json.loads(data)["outputs"][0]["data"],
                                       np.float32), want[0]), data
        # Triton's raw binary request: the body is the one input's data.
        status, hdr, data = srv.request(
            "POST", f"/v2/models/{mid}/infer", x.tobytes(),
            {"Inference-Header-Content-Length": "0",
             "Content-Type": "application/octet-stream"})
        assert status == 200, data
        assert hdr["Content-Type"] == "application/octet-stream", hdr
        n = int(hdr["Inference-Header-Content-Length"])
        same(np.frombuffer(data[n:], np.float32).reshape(4, 3), want)
        status, _, data = srv.request(
            "POST", f"/v2/models/{mid}/infer", x.tobytes()[:-1],
            {"Inference-Header-Content-Length": "0"})
        assert status == 400 and "error" in json.loads(data), data
        status, _, data = srv.request(
            "POST", f"/v2/models/{mid}/infer", x.tobytes(),
            {"Inference-Header-Content-Length": "0",
             "Content-Type": "application/json"})
        assert status == 400 and "octet-stream" in json.loads(data)["error"]
    ck.run("HTTP-layer errors under /v2 carry the error key", http_errors)

    print(f"{ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
