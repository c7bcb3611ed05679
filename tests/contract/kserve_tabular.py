"""KServe v2 BYTES input for a tabular model, with Triton's own HTTP client
(tritonclient.http): a model trained on a mixed-type CSV (missing cells, a
text column, a boolean column) takes its raw cells as a BYTES tensor
[batch, columns], binary (tritonclient's default) and as JSON, and answers
exactly what POST /v1/models/{id}/predict answers for the same raw rows.

    python kserve_tabular.py path/to/trainyard

Exit 77 (skipped) when tritonclient is not installed (`make venv`).
"""
import json
import os
import shutil
import sys
import tempfile

try:
    import numpy as np
    import tritonclient.http as th
except ImportError as e:
    print(f"SKIPPED: tritonclient[http] is not installed ({e}); make venv installs it")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "parity"))
import tabular_sklearn as tab  # noqa: E402  (the CSV, server and job helpers)


def main():
    rng = np.random.default_rng(11)
    rows, labels = tab.make_rows(rng, 200)
    tmp = tempfile.mkdtemp(prefix="trainyard-kserve-tabular-")
    srv, base, key = tab.start_server(sys.argv[1], tmp)
    try:
        st, ds = tab.upload_csv(base, key, "mixed", tab.csv_text(rows, labels))
        if st != 201:
            sys.exit(f"FAIL: upload: {st} {ds}")
        model = tab.train(base, key, ds["id"], ds["id"])
        probe = rows[:6] + [[None, 12.5, "tokyo", None]]
        st, want = tab.request(base, key, "POST", f"/v1/models/{model}/predict",
                               json.dumps({"inputs": probe}).encode())
        if st != 200:
            sys.exit(f"FAIL: predict: {st} {want}")
        want = np.array(want["outputs"], dtype=np.float32)

        client = th.InferenceServerClient(base.split("//")[1])
        md = client.get_model_metadata(model, headers={"Authorization": "Bearer " + key})
        if md["inputs"][0]["datatype"] != "BYTES" or md["inputs"][0]["shape"] != [-1, 4]:
            sys.exit(f"FAIL: metadata {md}")
        cells = np.array([[tab.csv_cell(v) for v in r] for r in probe], dtype=object)
        for binary in (True, False):
            inp = th.InferInput("input", list(cells.shape), "BYTES")
            inp.set_data_from_numpy(cells, binary_data=binary)
            res = client.infer(model, [inp],
                               headers={"Authorization": "Bearer " + key})
            got = res.as_numpy("output")
            if got is None or not np.array_equal(got.astype(np.float32), want):
                sys.exit(f"FAIL: BYTES ({'binary' if binary else 'JSON'}) outputs "
                         f"{got} != predict's {want}")
        print(f"OK: tritonclient BYTES [{cells.shape[0]}, {cells.shape[1]}], binary "
              "and JSON, answers what /v1 predict answers for the raw rows")
        return 0
    finally:
        srv.terminate()
        srv.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
