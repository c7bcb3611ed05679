"""Contract test: a Python client generated from openapi.yaml is whole.

    python3 tests/contract/generated_client.py path/to/trainyard

1. `openapi-spec-validator openapi.yaml` passes.
2. `openapi-python-client generate --path openapi.yaml` prints nothing but
   its "Generating ..." line (any warning fails: a warning is a schema or a
   response left out of the client), and every schema of
   components/schemas that makes a class has one.
3. Against a live `trainyard serve` with a dataset, a trained model, a
   tenant and a key in it, every GET operation of the document is called
   through the generated client: each must answer 200 with the class its
   document names (not None, not a Problem, no UnexpectedStatus), carrying
   the ids that were created, and the parsed object must give back the
   JSON the server sent (to_dict). Event streams (SSE) and binary
   downloads are skipped, and listed. The seed also runs two KServe v2
   inferences through the generated KServeInferRequest, so the /v2
   statistics have counts to check; /v2/models/{name} operations are
   called by the model's id and again by its name; the GETs of KServe
   extensions the server does not implement must answer their documented
   400 Problem; the repository index (a POST that only reads) must list
   the model.

The tools live in the repository's virtual environment (.venv, or
TY_VENV); `make test` installs them from tests/contract/requirements.txt.
Without them the test exits 77 (skipped). Run by ctest as
contract_generated_client.
"""

import importlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.environ.get("TY_VENV") or os.path.join(ROOT, ".venv")
TOOLS = ("openapi-python-client", "openapi-spec-validator")
DOC = os.path.join(ROOT, "openapi.yaml")


def venv_bin(name):
    return os.path.join(VENV, "bin", name)


def reexec_in_venv():
    """Runs this script again with the venv's Python (it has the tools'
    libraries: httpx and attrs for the generated client, PyYAML); exits 77
    when the venv lacks a tool."""
    missing = [t for t in TOOLS if not os.access(venv_bin(t), os.X_OK)]
    if missing or not os.access(venv_bin("python"), os.X_OK):
        print("SKIPPED: %s not installed in %s (make venv installs them)"
              % (", ".join(missing or ["python"]), VENV))
        sys.exit(77)
    if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
        os.execv(venv_bin("python"), [venv_bin("python"), os.path.abspath(__file__)] + sys.argv[1:])


class Checks:
    """Counts checks; a failed one is printed and the run goes on."""

    def __init__(self):
        self.passed = 0
        self.failed = []

    def ok(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed.append(what)
            print("FAIL: " + what, flush=True)
        return cond


def run_tool(args, **kw):
    env = dict(os.environ, PATH=os.path.join(VENV, "bin") + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, **kw)


# ---- 1 and 2: the document and the generator ----

def pascal(name):
    """The generator's class name for a schema or operation name."""
    parts = re.split(r"[^A-Za-z0-9]+", name)
    return "".join(p[:1].upper() + p[1:] for p in parts if p)


def snake(name):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def is_object(schema):
    return isinstance(schema, dict) and (
        schema.get("type") == "object" or "properties" in schema or "allOf" in schema)


def expected_classes(schemas):
    """{schema name: [class names it must make]}; a schema that makes none
    (arrays, scalars, unions of them) maps to []."""
    out = {}
    for name, s in schemas.items():
        if "enum" in s or is_object(s):
            out[name] = [pascal(name)]
        else:
            variants = s.get("oneOf") or s.get("anyOf") or []
            out[name] = ["%sType%d" % (pascal(name), i)
                         for i, v in enumerate(variants) if is_object(v)]
    return out


def validate_and_generate(doc, work, checks):
    r = run_tool([venv_bin("openapi-spec-validator"), DOC])
    checks.ok(r.returncode == 0 and "OK" in r.stdout,
              "openapi-spec-validator openapi.yaml:\n" + r.stdout)

    out = os.path.join(work, "gen")
    r = run_tool([venv_bin("openapi-python-client"), "generate", "--path", DOC,
                  "--output-path", out], cwd=work)
    noise = [l for l in r.stdout.splitlines() if l.strip() and not l.startswith("Generating ")]
    checks.ok(r.returncode == 0 and not noise,
              "openapi-python-client generate (exit %d) printed more than its "
              "Generating line:\n%s" % (r.returncode, r.stdout))
    pkgs = [d for d in os.listdir(out) if os.path.isfile(os.path.join(out, d, "client.py"))]
    if not checks.ok(len(pkgs) == 1, "one generated package in %s, found %s" % (out, pkgs)):
        return None
    sys.path.insert(0, out)
    pkg = pkgs[0]
    models = importlib.import_module(pkg + ".models")
    have = set(getattr(models, "__all__", []))
    inlined = []
    for name, classes in expected_classes(doc["components"]["schemas"]).items():
        if not classes:
            inlined.append(name)
        for c in classes:
            checks.ok(c in have, "components/schemas/%s: no class %s in the generated models" % (name, c))
    print("schemas inlined (no class by design: arrays, scalars, unions of them): "
          + ", ".join(inlined))
    return pkg


# ---- 3: every GET against a live server ----

class Server:
    """`trainyard serve` on a free port with its data in a temp folder; the
    flags are tests/contract/run.sh's, with the simulated H200 inventory so
    that devices has GPUs and slices to parse."""

    def __init__(self, binary, work):
        self.data = os.path.join(work, "data")
        os.mkdir(self.data)
        self.out_path = os.path.join(work, "serve.out")
        self.log_path = os.path.join(work, "serve.log")
        args = [binary, "serve", "--listen", "127.0.0.1:0", "--data", self.data,
                "--train-device", "cpu", "--devices",
                "sim:" + os.path.join(ROOT, "gpu", "sim", "h200-7x1g.json"),
                "--max-upload-bytes", "8M", "--max-json-bytes", "1M"]
        with open(self.out_path, "w") as out, open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(args, stdout=out, stderr=log, stdin=subprocess.DEVNULL)
        self.base = None
        for _ in range(100):
            m = re.search(r"listening on (http://127\.0\.0\.1:[0-9]+)", open(self.out_path).read())
            if m:
                self.base = m.group(1)
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        if not self.base:
            self.stop()
            raise SystemExit("the server did not start:\n" + open(self.log_path).read())
        self.key = open(os.path.join(self.data, "admin.key")).read().strip()

    def internal_errors(self):
        return [l for l in open(self.log_path) if '"event":"internal_error"' in l]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def api_module(pkg, operation_id):
    """The generated module of an operation (api/<tag>/<snake name>.py)."""
    api_dir = os.path.join(sys.modules[pkg].__path__[0], "api")
    mod = snake(operation_id)
    for tag in sorted(os.listdir(api_dir)):
        if os.path.isfile(os.path.join(api_dir, tag, mod + ".py")):
            return importlib.import_module("%s.api.%s.%s" % (pkg, tag, mod))
    return None


# Generator bugs that no document change avoids, by operation: the first
# line of the error importing its module starts with the text given.
KNOWN_GENERATOR_BUGS = {
    # openapi-python-client issue 1451 (0.29.1): a required requestBody with
    # several content types (multipart/form-data and application/json here)
    # is annotated "| Unset" without importing Unset.
    "createDataset": "NameError: name 'Unset' is not defined",
}


def import_every_operation(doc, pkg, checks):
    """Every operation's generated module imports, but for the known
    generator bugs (listed when they still occur)."""
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if not isinstance(op, dict) or "operationId" not in op:
                continue
            oid = op["operationId"]
            try:
                mod = api_module(pkg, oid)
                checks.ok(mod is not None and hasattr(mod, "sync_detailed"),
                          "%s (%s %s): no generated function" % (oid, method.upper(), path))
                if oid in KNOWN_GENERATOR_BUGS:
                    print("note: %s imports now; remove it from KNOWN_GENERATOR_BUGS" % oid)
            except Exception as e:  # noqa: BLE001 - any import error is the finding
                err = "%s: %s" % (type(e).__name__, e)
                known = KNOWN_GENERATOR_BUGS.get(oid)
                if known and err.startswith(known):
                    print("known generator bug: %s (%s %s) does not import: %s"
                          % (oid, method.upper(), path, err))
                else:
                    checks.ok(False, "%s (%s %s): its generated module does not import: %s"
                              % (oid, method.upper(), path, err))


def resolve(doc, obj):
    """obj with its $ref followed (#/components/responses/X and the like)."""
    while isinstance(obj, dict) and "$ref" in obj:
        node = doc
        for part in obj["$ref"].split("/")[1:]:  # "#/components/responses/X"
            node = node[part]
        obj = node
    return obj


def response(doc, op, status):
    """The operation's response for status, its $ref resolved; None when
    the operation documents none."""
    r = op["responses"].get(status)
    return None if r is None else resolve(doc, r)


def expected_type(pkg, operation_id, doc, op):
    """The class the 200 response parses into: the referenced schema's, the
    generator's <Operation>Response200 for an inline object (also one in
    components/responses), else the Python type of a scalar."""
    schemas = doc["components"]["schemas"]
    content = response(doc, op, "200")["content"]
    media = next(iter(content.values()))
    for ct, m in content.items():  # the generator takes the first JSON or text type
        if ct == "application/json" or ct.endswith("+json") or ct.startswith("text/"):
            media = m
            break
    s = media["schema"]
    models = importlib.import_module(pkg + ".models")
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[1]
        if is_object(schemas[name]):
            return getattr(models, pascal(name))
        s = schemas[name]
    if is_object(s):
        return getattr(models, pascal(operation_id) + "Response200")
    return {"string": str, "array": list, "integer": int, "number": float}.get(s.get("type"), object)


def seed(pkg, client, checks):
    """A dataset (multipart upload), a job trained to its model, a
    deployment of it, a tenant with a second key: made through the
    generated client's POST functions.
    Returns the ids, or None."""
    models = importlib.import_module(pkg + ".models")
    types = importlib.import_module(pkg + ".types")
    ids = {}

    csv = "x1,x2,label\n" + "".join(
        "%d.5,%d.25,c%d\n" % (i % 7, i % 5, i % 3) for i in range(60))
    upload = models.DatasetUpload.from_dict({"name": "generated-client", "format": "csv",
                                             "label_column": "label"})
    upload.file = types.File(payload=io.BytesIO(csv.encode()),
                             file_name="gen.csv", mime_type="text/csv")
    # createDataset's module does not import (KNOWN_GENERATOR_BUGS): the
    # request it would send, sent with its client.
    r = client.get_httpx_client().post(
        "/v1/datasets", files=upload.to_multipart(),
        headers={"Content-Type": "multipart/form-data; boundary=+++"})
    if not checks.ok(r.status_code == 201, "createDataset: %s %s" % (r.status_code, r.content[:300])):
        return None
    ids["dataset"] = models.Dataset.from_dict(r.json()).id

    body = models.JobRequest.from_dict({
        "dataset": ids["dataset"], "name": "generated-client",
        "model": {"layers": [{"type": "dense", "units": 8}, {"type": "relu"},
                             {"type": "dense", "units": 3}]},
        "hyperparameters": {"epochs": 2}})
    r = api_module(pkg, "createJob").sync_detailed(client=client, body=body)
    if not checks.ok(r.status_code == 202 and isinstance(r.parsed, models.Job),
                     "createJob: %s %s" % (r.status_code, r.content[:300])):
        return None
    ids["job"] = r.parsed.id
    get_job = api_module(pkg, "getJob")
    job = None
    for _ in range(1200):  # at most two minutes; two epochs of 60 rows take well under one second
        job = get_job.sync(ids["job"], client=client)
        if str(job.status) in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    if not checks.ok(str(job.status) == "succeeded",
                     "the seed job ended %s: %s" % (job.status, job.error)):
        return None
    ids["model"] = job.model
    model = api_module(pkg, "getModel").sync(ids["model"], client=client)
    if not checks.ok(model is not None and model.name and model.name != ids["model"],
                     "the seed model's name: %r" % (model and model.to_dict())):
        return None
    ids["model_name"] = model.name

    # Two KServe v2 inferences through the generated client's
    # KServeInferRequest (nested FP32 rows by the model's id, flat BOOL
    # values by its name): the statistics then have counts to check.
    infer = api_module(pkg, "kserveInfer")
    for name, rid, inp in (
            (ids["model"], "gen-fp32", {"name": "input", "datatype": "FP32", "shape": [2, 2],
                                        "data": [[0.5, 1.25], [3.5, 2.25]]}),
            (ids["model_name"], "gen-bool", {"name": "input", "datatype": "BOOL", "shape": [1, 2],
                                             "data": [True, False]})):
        body = models.KServeInferRequest.from_dict({"id": rid, "inputs": [inp]})
        r = infer.sync_detailed(name, client=client, body=body)
        batch = inp["shape"][0]
        p = r.parsed
        if not checks.ok(r.status_code == 200 and isinstance(p, models.KServeInferResponse)
                         and p.model_name == ids["model"] and p.id == rid
                         and len(p.outputs) == 1 and p.outputs[0].shape == [batch, 3]
                         and len(p.outputs[0].data) == batch * 3
                         and all(type(v) in (int, float) for v in p.outputs[0].data),
                         "kserveInfer %s (%s): %s %s" % (name, rid, r.status_code, r.content[:300])):
            return None
    ids["inferences"] = 3

    # A deployment of the model, scaled to zero (no replica runs), through
    # the generated DeploymentCreate.
    r = api_module(pkg, "createDeployment").sync_detailed(
        client=client, body=models.DeploymentCreate.from_dict(
            {"name": "generated-client", "model": ids["model"],
             "replicas": {"min": 0, "max": 2},
             "batching": {"max_batch_size": 8, "preferred_batch_sizes": [4, 8]},
             "limits": {"requests_per_second": 20}}))
    if not checks.ok(r.status_code == 201 and isinstance(r.parsed, models.Deployment),
                     "createDeployment: %s %s" % (r.status_code, r.content[:300])):
        return None
    d = r.parsed
    checks.ok(d.model == ids["model"] and d.replicas.max_ == 2 and d.limits.burst == 20
              and d.batching.preferred_batch_sizes == [4, 8],
              "createDeployment's reply: %s" % d.to_dict())
    ids["deployment"] = d.id

    r = api_module(pkg, "createTenant").sync_detailed(
        client=client, body=models.TenantCreate.from_dict(
            {"name": "generated-client", "quota": {"max_running_jobs": 2}}))
    if not checks.ok(r.status_code == 201 and isinstance(r.parsed, models.TenantCreated),
                     "createTenant: %s %s" % (r.status_code, r.content[:300])):
        return None
    t = r.parsed
    checks.ok(t.quota.max_running_jobs == 2 and t.key.api_key.startswith("ty_")
              and t.key.tenant == t.id, "createTenant's reply: %s" % t.to_dict())
    ids["tenant"], ids["tenant_key"], ids["first_key"] = t.id, t.key.api_key, t.key.id
    r = api_module(pkg, "createTenantKey").sync_detailed(ids["tenant"], client=client)
    if not checks.ok(r.status_code == 201 and isinstance(r.parsed, models.NewApiKey),
                     "createTenantKey: %s %s" % (r.status_code, r.content[:300])):
        return None
    ids["second_key"] = r.parsed.id
    return ids


def item_ids(parsed):
    return [getattr(i, "id", None) for i in parsed.items]


# The KServe v2 extensions the server implements (GET /v2 lists them).
KSERVE_EXTENSIONS = {"binary_tensor_data", "classification", "model_repository",
                     "model_configuration", "statistics"}
# The seeded model: 2 features in, 3 classes (c0, c1, c2) out.
SEED_INPUTS, SEED_CLASSES = 2, ["c0", "c1", "c2"]


def kserve_metadata(p, m):
    """KServe model metadata of the seeded model m (named by its id, also
    when asked by its name)."""
    return (p.name == m and p.versions == ["1"] and p.platform == "trainyard"
            and [(t.name, t.datatype, t.shape) for t in p.inputs]
            == [("input", "FP32", [-1, SEED_INPUTS])]
            and [(t.name, t.datatype, t.shape) for t in p.outputs]
            == [("output", "FP32", [-1, len(SEED_CLASSES)])]
            and p.outputs[0].classes == SEED_CLASSES)


def kserve_config(p, m):
    return (p.name == m and p.platform == "trainyard" and p.max_batch_size > 0
            and [(t.name, t.dims) for t in p.input_] == [("input", [SEED_INPUTS])]
            and [(t.name, t.dims) for t in p.output] == [("output", [len(SEED_CLASSES)])])


def kserve_stats(p, m, only=False):
    """Statistics holding the seeded model m (alone when only) with the
    seed's 3 examples inferred in 2 successful requests."""
    mine = [s for s in p.model_stats if s.name == m]
    if len(mine) != 1 or (only and len(p.model_stats) != 1):
        return False
    s = mine[0]
    success = s.inference_stats.additional_properties.get("success")
    return (s.version == "1" and s.inference_count == 3 and s.execution_count >= 2
            and s.last_inference > 0 and success is not None and success.count == 2
            and success.ns > 0)


def id_checks(ids):
    """Per operation: what its parsed reply must say about the seeded ids."""
    d, j, m, t = ids["dataset"], ids["job"], ids["model"], ids["tenant"]
    return {
        "healthz": lambda p: p.status == "ok",
        "readyz": lambda p: p.status == "ready",
        "openapi": lambda p: p.startswith("openapi: 3.1"),
        "metrics": lambda p: "trainyard_" in p,
        "listDatasets": lambda p: d in item_ids(p),
        "getDataset": lambda p: p.id == d and p.num_examples == 60,
        "getDatasetExamples": lambda p: p.dataset == d and p.total == 60 and len(p.items) == 8
        and p.items[0].index == 0 and len(p.items[0].x) == 2,
        "listJobs": lambda p: j in item_ids(p),
        "getJob": lambda p: p.id == j and p.model == m and p.dataset == d,
        "getJobMetrics": lambda p: p.job == j and [e.epoch for e in p.epochs] == [1, 2],
        "listModels": lambda p: m in item_ids(p),
        "getModel": lambda p: p.id == m and p.job == j and p.dataset == d,
        "kserveServerMetadata": lambda p: p.name == "trainyard" and p.version != ""
        and {str(e) for e in p.extensions} == KSERVE_EXTENSIONS,
        "kserveLive": lambda p: p.live is True,
        "kserveReady": lambda p: p.ready is True,
        "kserveStatsAll": lambda p: kserve_stats(p, m),
        "kserveModelMetadata": lambda p: kserve_metadata(p, m),
        "kserveModelVersionMetadata": lambda p: kserve_metadata(p, m),
        "kserveModelReady": lambda p: p.name == m and p.ready is True,
        "kserveModelVersionReady": lambda p: p.name == m and p.ready is True,
        "kserveModelConfig": lambda p: kserve_config(p, m),
        "kserveModelVersionConfig": lambda p: kserve_config(p, m),
        "kserveModelStats": lambda p: kserve_stats(p, m, only=True),
        "kserveModelVersionStats": lambda p: kserve_stats(p, m, only=True),
        "listDevices": lambda p: p.source.startswith("sim:") and len(p.gpus) == 1
        and len(p.gpus[0].slices) == 7,
        "listMigLayouts": lambda p: len(p.gpus) == 1 and p.gpus[0].gpu == 0
        and len(p.gpus[0].layout.instances) == 7,
        "getMigLayout": lambda p: p.gpu == 0 and p.model == "H200-141GB"
        and len(p.layout.instances) == 7,
        "listTenants": lambda p: t in item_ids(p),
        "getTenant": lambda p: p.id == t and p.quota.max_running_jobs == 2 and p.admin is False,
        "listTenantKeys": lambda p: {ids["first_key"], ids["second_key"]} <= set(item_ids(p)),
        "listDeployments": lambda p: ids["deployment"] in item_ids(p) and p.next_cursor is None,
        "getDeployment": lambda p: p.id == ids["deployment"] and p.model == m
        and p.name == "generated-client" and p.replicas.min_ == 0,
    }


def path_values(path, ids):
    """The ways to call path: [(label, values of its path parameters)].
    id and name are the seeded resource the path names; a /v2 model is
    called by its id and again by its name, version is "1" (a model's
    only version), region any name (shared memory is not supported), gpu
    the simulated inventory's only GPU."""
    owner = [("/v1/datasets/", "dataset"), ("/v1/jobs/", "job"), ("/v1/models/", "model"),
             ("/v1/tenants/", "tenant"), ("/v2/models/", "model"),
             ("/v1/deployments/", "deployment")]
    common = {"version": "1", "region": "r0", "gpu": 0}
    for prefix, kind in owner:
        if path.startswith(prefix):
            ways = [("", dict(common, id=ids[kind], name=ids[kind]))]
            if prefix == "/v2/models/" and "{name}" in path:
                ways.append((" by name", dict(common, name=ids["model_name"])))
            return ways
    return [("", common)]


def call_unsupported(pkg, client, errors, oid, path, ids, checks):
    """A GET of a KServe extension the server does not implement: it must
    answer the documented 400 Problem saying so (for /v2/models/{name}/...
    with the seeded model)."""
    mod = api_module(pkg, oid)
    if not checks.ok(mod is not None, "%s: no generated module" % oid):
        return False
    params = re.findall(r"{([^}]+)}", path)
    values = path_values(path, ids)[0][1]
    try:
        r = mod.sync_detailed(client=client, **{p: values[p] for p in params})
    except errors.UnexpectedStatus as e:
        return checks.ok(False, "%s: UnexpectedStatus %s %s" % (oid, e.status_code, e.content[:300]))
    problem = importlib.import_module(pkg + ".models").Problem
    p = r.parsed
    return checks.ok(r.status_code == 400 and isinstance(p, problem) and p.status == 400
                     and "not supported" in p.detail and p.error == p.detail,
                     "%s (GET %s): %s %s, wanted the 400 Problem of NotSupported"
                     % (oid, path, r.status_code, r.content[:300]))


def call_every_get(doc, pkg, binary, work, checks):
    client_mod = importlib.import_module(pkg + ".client")
    errors = importlib.import_module(pkg + ".errors")
    srv = Server(binary, work)
    try:
        client = client_mod.AuthenticatedClient(base_url=srv.base, token=srv.key,
                                                raise_on_unexpected_status=True, timeout=60)
        ids = seed(pkg, client, checks)
        if ids is None:
            return
        by_op = id_checks(ids)
        skipped, called, unsupported = [], [], []
        for path, item in doc["paths"].items():
            op = item.get("get")
            if not op:
                continue
            oid = op["operationId"]
            if "worker" in op.get("tags", []):
                skipped.append("%s (GET %s): a remote worker's, with a token only "
                               "a running Slurm job holds (tests/slurm)" % (oid, path))
                continue
            ok = response(doc, op, "200")
            if ok is None and op["responses"].get("400", {}).get("$ref", "").endswith("/NotSupported"):
                if call_unsupported(pkg, client, errors, oid, path, ids, checks):
                    unsupported.append(oid)
                continue
            if not checks.ok(ok is not None, "%s (GET %s): no 200 response documented" % (oid, path)):
                continue
            types = list(ok.get("content", {}))
            if "text/event-stream" in types:
                skipped.append("%s (GET %s): an event stream (SSE)" % (oid, path))
                continue
            if types == ["application/octet-stream"]:
                skipped.append("%s (GET %s): a binary download" % (oid, path))
                continue
            mod = api_module(pkg, oid)
            if not checks.ok(mod is not None, "%s: no generated module" % oid):
                continue
            params = re.findall(r"{([^}]+)}", path)
            want = expected_type(pkg, oid, doc, op)
            for how, values in path_values(path, ids):
                if not checks.ok(all(p in values for p in params),
                                 "%s: no value for a path parameter of %s" % (oid, path)):
                    continue
                what = oid + how
                try:
                    r = mod.sync_detailed(client=client, **{p: values[p] for p in params})
                except errors.UnexpectedStatus as e:
                    checks.ok(False, "%s: UnexpectedStatus %s %s" % (what, e.status_code, e.content[:300]))
                    continue
                if not checks.ok(r.status_code == 200 and isinstance(r.parsed, want),
                                 "%s: %s, parsed %r, wanted a %s"
                                 % (what, r.status_code, type(r.parsed).__name__, want.__name__)):
                    continue
                check = by_op.get(oid)
                if check is None:
                    print("note: %s has no id check here (add one to id_checks)" % oid)
                else:
                    try:
                        good, why = check(r.parsed), ""
                    except (AttributeError, TypeError, KeyError, IndexError) as e:
                        good, why = False, " (%s: %s)" % (type(e).__name__, e)
                    checks.ok(good, "%s: the reply does not carry the seeded ids%s: %s"
                              % (what, why, r.content[:600]))
                if hasattr(r.parsed, "to_dict"):
                    checks.ok(r.parsed.to_dict() == json.loads(r.content),
                              "%s: to_dict() differs from what the server sent:\n%s\n%s"
                              % (what, r.parsed.to_dict(), r.content[:600]))
                called.append(what)
        # The KServe repository index is a POST that only reads: it lists
        # the seeded model, READY as version 1.
        r = api_module(pkg, "kserveRepositoryIndex").sync_detailed(client=client)
        entries = [(e.name, e.version, e.state, e.reason) for e in r.parsed or []]
        checks.ok(r.status_code == 200 and (ids["model"], "1", "READY", "") in entries,
                  "kserveRepositoryIndex: %s %s" % (r.status_code, r.content[:600]))
        # The new tenant's own key reads its tenant through the same client.
        own = client_mod.AuthenticatedClient(base_url=srv.base, token=ids["tenant_key"],
                                             raise_on_unexpected_status=True, timeout=60)
        t = api_module(pkg, "getTenant").sync(ids["tenant"], client=own)
        checks.ok(t is not None and t.id == ids["tenant"], "getTenant with the tenant's own key")
        print("GET operations called through the generated client (%d): %s"
              % (len(called), ", ".join(called)))
        print("not supported, answered 400 with a Problem as documented (%d): %s"
              % (len(unsupported), ", ".join(unsupported)))
        print("skipped (%d):\n  %s" % (len(skipped), "\n  ".join(skipped)))
        checks.ok(not srv.internal_errors(), "the server logged internal errors:\n"
                  + "".join(srv.internal_errors()[:20]))
    finally:
        srv.stop()


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: generated_client.py path/to/trainyard")
    reexec_in_venv()
    import yaml  # the venv's (openapi-spec-validator's dependency)

    binary = os.path.abspath(sys.argv[1])
    doc = yaml.safe_load(open(DOC))
    checks = Checks()
    work = tempfile.mkdtemp(prefix="ty-genclient-")
    try:
        pkg = validate_and_generate(doc, work, checks)
        if pkg:
            import_every_operation(doc, pkg, checks)
            call_every_get(doc, pkg, binary, work, checks)
    finally:
        if os.environ.get("TY_KEEP_TEST_DATA"):
            print("kept " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (checks.passed, len(checks.failed)))
    sys.exit(1 if checks.failed else 0)


if __name__ == "__main__":
    main()
