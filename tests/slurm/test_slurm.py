#!/usr/bin/env python3
"""The Slurm suite: trainyard's training jobs run as Slurm batch jobs.

Run by tests/slurm/run.sh, which starts a real single-node Slurm (slurmctld,
slurmd, munge, slurmrestd on loopback, fake GRES gpu:1g.18gb:7) with
tests/slurm/cluster.sh and passes its env file in TRAINYARD_SLURM_ENV and a
trainyard binary the job user can run in TRAINYARD_BIN.

Each check starts from the same server (`serve --executor slurm`) unless it
says otherwise, and looks at both sides: the job through the REST API, the
Slurm job through Slurm's own tools (scontrol, squeue, scancel).

    python3 tests/slurm/test_slurm.py [check ...]

Exit 0 when every check passed, 1 otherwise.
"""
import gzip
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
import uuid

import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist"
ENV = {}
BIN = os.environ.get("TRAINYARD_BIN", "")

# About half a second an epoch on one thread (as tests/integration's big
# blobs set): long enough to catch a job running, to kill it mid-way.
SLOW_MODEL = {"layers": [{"type": "dense", "units": 512}, {"type": "relu"},
                         {"type": "dense", "units": 512}, {"type": "relu"},
                         {"type": "dense", "units": 3}]}
FAST_MODEL = {"layers": [{"type": "dense", "units": 16}, {"type": "relu"},
                         {"type": "dense", "units": 3}]}


def load_env():
    path = os.environ.get("TRAINYARD_SLURM_ENV")
    if not path:
        sys.exit("TRAINYARD_SLURM_ENV is not set (run tests/slurm/run.sh)")
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                ENV[k] = v.strip().strip('"').strip("'")
    os.environ["SLURM_CONF"] = ENV["SLURM_CONF"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- HTTP ----

def request(base, key, method, path, body=None, ctype="application/json",
            timeout=120):
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if key:
        req.add_header("Authorization", "Bearer " + key)
    if data is not None:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw


def multipart(fields, files):
    boundary = uuid.uuid4().hex
    parts = []
    for k, v in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; '
                     f'name="{k}"\r\n\r\n{v}\r\n'.encode())
    for k, (name, data) in files.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; '
                     f'name="{k}"; filename="{name}"\r\nContent-Type: '
                     f'application/octet-stream\r\n\r\n'.encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


# ---- the server ----

class Server:
    """`trainyard serve` on a free port; executor "slurm" or "local"."""

    def __init__(self, data, executor="slurm", extra=(), host="127.0.0.1"):
        self.data = data
        self.executor = executor
        self.extra = list(extra)
        self.host = host  # where the nodes reach it (the multi-node bridge)
        self.port = free_port()
        self.base = f"http://{host}:{self.port}"
        self.proc = None
        self.log_path = os.path.join(os.path.dirname(data),
                                     os.path.basename(data) + ".log")

    def start(self):
        args = [BIN, "serve", "--listen", f"{self.host}:{self.port}",
                "--data", self.data, "--devices", "none",
                "--train-device", "cpu", "--worker-threads", "1",
                "--heartbeat-timeout", "20", "--retry-backoff", "1",
                "--max-jobs", "4"]
        if self.executor == "slurm":
            args += ["--executor", "slurm",
                     "--slurm-url", ENV["SLURMRESTD_URL"],
                     "--slurm-user", ENV["SLURM_USER"],
                     "--slurm-jwt-key", ENV["SLURM_JWT_KEY"],
                     "--slurm-worker-command", BIN,
                     "--slurm-server-url", self.base,
                     "--slurm-workdir", ENV["SLURM_WORK_DIR"],
                     "--slurm-gpus", "sim", "--slurm-poll", "0.5"]
        args += self.extra
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(args, stdout=log, stderr=log)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited {self.proc.returncode}: "
                                     + self.log_tail())
            try:
                st, _ = request(self.base, None, "GET", "/healthz", timeout=2)
                if st == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError("the server did not answer: " + self.log_tail())
        self.key = open(os.path.join(self.data, "admin.key")).read().strip()
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, n=3000):
        try:
            return open(self.log_path, errors="replace").read()[-n:]
        except OSError:
            return ""

    def call(self, method, path, body=None, key=None, **kw):
        return request(self.base, key or self.key, method, path, body, **kw)

    def tenant(self, name, quota=None):
        body = {"name": name}
        if quota:
            body["quota"] = quota
        st, doc = self.call("POST", "/v1/tenants", body)
        assert st == 201, (st, doc)
        return doc["key"]["api_key"]

    def upload_csv(self, key, name, text):
        body, ctype = multipart({"name": name, "format": "csv",
                                 "label_column": "species"},
                                {"file": (name + ".csv", text.encode())})
        st, doc = self.call("POST", "/v1/datasets", body, key=key, ctype=ctype)
        assert st == 201, (st, doc)
        return doc["id"]

    def submit(self, key, dataset, model, epochs, gpu="none", seed=1,
               name="job", batch_size=32):
        job = {"name": name, "dataset": dataset, "model": model,
               "resources": {"gpu": gpu},
               "hyperparameters": {"epochs": epochs, "batch_size": batch_size,
                                   "optimizer": "adam", "learning_rate": 0.001,
                                   "seed": seed}}
        st, doc = self.call("POST", "/v1/jobs", job, key=key)
        assert st == 202, (st, doc)
        return doc["id"]

    def job(self, key, job_id):
        st, doc = self.call("GET", f"/v1/jobs/{job_id}", key=key)
        assert st == 200, (st, doc)
        return doc

    def wait(self, key, job_id, pred, timeout, what):
        deadline = time.time() + timeout
        doc = None
        while time.time() < deadline:
            doc = self.job(key, job_id)
            if pred(doc):
                return doc
            time.sleep(0.2)
        raise AssertionError(f"job {job_id}: timed out waiting for {what}; "
                             f"last: {json.dumps(doc)[:1500]}\n{self.log_tail()}")

    def wait_done(self, key, job_id, timeout=180):
        return self.wait(key, job_id, lambda d: d["status"] in
                         ("succeeded", "failed", "cancelled"), timeout,
                         "the end")


def slurm_id(doc):
    return ((doc.get("placement") or {}).get("slurm") or {}).get("job_id")


def scontrol_job(sid):
    out = subprocess.run(["scontrol", "show", "job", str(sid)],
                         capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out)), out


def running_on_slurm(doc):
    s = (doc.get("placement") or {}).get("slurm") or {}
    return doc["status"] == "running" and s.get("state") == "RUNNING"


def blobs_csv(rows, seed):
    rng = np.random.default_rng(seed)
    names = ["setosa", "versicolor", "virginica"]
    lines = ["a,b,species,c,d"]
    for i in range(rows):
        k = i % 3
        a, b, c, d = rng.normal(size=4)
        lines.append(f"{10 * k + a:.4f},{5 - 3 * k + b:.4f},{names[k]},"
                     f"{100 + c:.4f},{2 * k + d:.4f}")
    return "\n".join(lines) + "\n"


# ---- the checks ----

class Suite:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="trainyard-slurm-")
        os.chmod(self.tmp, 0o700)
        self.srv = Server(os.path.join(self.tmp, "data")).start()
        self.key = self.srv.tenant("slurm-suite")
        self.small = self.srv.upload_csv(self.key, "small", blobs_csv(300, 1))
        self.big = self.srv.upload_csv(self.key, "big", blobs_csv(12000, 2))

    def close(self):
        self.srv.stop()

    def check_cpu_and_mig_jobs(self):
        """A CPU job and a MIG job run through Slurm with the right gres."""
        cpu = self.srv.submit(self.key, self.small, FAST_MODEL, 3, name="cpu")
        mig = self.srv.submit(self.key, self.small, FAST_MODEL, 3,
                              gpu="1g.18gb", name="mig")
        for jid, want_gres in ((cpu, None), (mig, "1g.18gb")):
            doc = self.srv.wait_done(self.key, jid)
            assert doc["status"] == "succeeded", doc
            assert doc["model"], doc
            sid = slurm_id(doc)
            assert sid, doc["placement"]
            fields, text = scontrol_job(sid)
            assert fields.get("JobState") == "COMPLETED", text
            assert fields.get("JobName") == f"trainyard-{jid}", text
            tres = fields.get("TresPerNode", "")
            if want_gres:
                assert want_gres in tres, text
                assert doc["device"].startswith("sim:"), doc["device"]
                assert doc["placement"]["profile"] == "1g.18gb", doc["placement"]
            else:
                assert "gpu" not in tres, text
                assert doc["device"] == "cpu", doc["device"]
            saw = doc["placement"].get("worker_saw") or {}
            assert saw.get("node"), saw
            print(f"    {jid}: Slurm job {sid} COMPLETED, TresPerNode={tres or '-'}"
                  f", device {doc['device']}")

    def check_init_from(self):
        """A job on a Slurm node fine-tunes from a model (init_from): the
        model's file reaches the node as a blob, and the run starts from
        its weights."""
        hp = {"epochs": 8, "batch_size": 32, "optimizer": "adam",
              "learning_rate": 0.02, "seed": 5}
        ids = []
        for name in ("base", "tuned"):
            job = {"name": name, "dataset": self.small, "model": FAST_MODEL,
                   "hyperparameters": hp}
            st, sub = self.srv.call("POST", "/v1/jobs", job, key=self.key)
            assert st == 202, (st, sub)
            ids.append(sub["id"])
            doc = self.srv.wait_done(self.key, sub["id"])
            assert doc["status"] == "succeeded", doc
            base = doc["model"]
            hp = dict(hp, epochs=1, learning_rate=0.001, init_from=base)
        assert slurm_id(doc), doc["placement"]  # the fine-tune ran on Slurm
        losses = []
        for jid in ids:
            st, m = self.srv.call("GET", f"/v1/jobs/{jid}/metrics", key=self.key)
            assert st == 200, (st, m)
            losses.append(m["epochs"][0]["train_loss"])
        # the same seed and data: the start is what differs
        assert losses[1] < 0.5 * losses[0], losses
        print(f"    first epoch's loss from scratch {losses[0]:.4f}, "
              f"from the first job's model {losses[1]:.4f}")

    def check_worker_isolated(self):
        """The worker ran as the job user in its own folder, with no access
        to the server's data folder."""
        jid = self.srv.submit(self.key, self.small, FAST_MODEL, 1, name="iso")
        doc = self.srv.wait_done(self.key, jid)
        assert doc["status"] == "succeeded", doc
        fields, text = scontrol_job(slurm_id(doc))
        workdir = fields.get("WorkDir", "")
        assert workdir == ENV["SLURM_WORK_DIR"], text
        assert not workdir.startswith(self.tmp), workdir
        assert fields.get("UserId", "").startswith(ENV["SLURM_USER"] + "("), text
        # The job user cannot read the server's data folder.
        r = subprocess.run(["runuser", "-u", ENV["SLURM_USER"], "--", "ls",
                            self.srv.data], capture_output=True, text=True)
        assert r.returncode != 0, "the job user can list the data folder"
        # And the job's private folder is gone when it ended.
        left = [n for n in os.listdir(workdir) if jid in n and not n.endswith(".out")]
        assert not left, left

    def check_cancel(self):
        """A cancel through the API cancels the Slurm job."""
        jid = self.srv.submit(self.key, self.big, SLOW_MODEL, 200, name="cancel")
        doc = self.srv.wait(self.key, jid, running_on_slurm, 90, "RUNNING")
        sid = slurm_id(doc)
        st, _ = self.srv.call("POST", f"/v1/jobs/{jid}/cancel", key=self.key)
        assert st in (200, 202), st
        doc = self.srv.wait_done(self.key, jid, 60)
        assert doc["status"] == "cancelled", doc
        fields, text = scontrol_job(sid)
        assert fields.get("JobState") == "CANCELLED", text

    def check_sigkill_requeue_resume(self):
        """A worker killed on the node is requeued and resumes from its
        uploaded checkpoint."""
        jid = self.srv.submit(self.key, self.big, SLOW_MODEL, 6, name="kill")
        doc = self.srv.wait(self.key, jid,
                            lambda d: ((d.get("progress") or {}).get("epoch") or 0) >= 3
                            and running_on_slurm(d), 120, "epoch 3")
        sid = slurm_id(doc)
        ckpt = os.path.join(self.srv.data, "jobs", jid, "checkpoint.safetensors")
        assert os.path.exists(ckpt), "no checkpoint was uploaded"
        # Every process of the job on the node, by its command line.
        pids = [int(p) for p in subprocess.run(
            ["pgrep", "-f", f"worker.*{jid}"], capture_output=True,
            text=True).stdout.split()]
        assert pids, "no worker process found"
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        doc = self.srv.wait(self.key, jid,
                            lambda d: slurm_id(d) not in (None, sid) or
                            d["status"] in ("succeeded", "failed", "cancelled"),
                            90, "a new Slurm job")
        doc = self.srv.wait_done(self.key, jid, 180)
        assert doc["status"] == "succeeded", doc
        assert doc["attempts"] == 2, doc["attempts"]
        resumed = (doc.get("progress") or {}).get("resumed_from_epoch")
        assert resumed is not None and resumed >= 1, doc.get("progress")
        fields, text = scontrol_job(sid)
        assert fields.get("JobState") in ("FAILED", "CANCELLED"), text
        print(f"    Slurm job {sid} {fields.get('JobState')} after SIGKILL; "
              f"resumed from epoch {resumed} in Slurm job {slurm_id(doc)}")

    def check_outside_scancel(self):
        """scancel from outside trainyard is seen and handled."""
        jid = self.srv.submit(self.key, self.big, SLOW_MODEL, 200, name="scancel")
        doc = self.srv.wait(self.key, jid, running_on_slurm, 90, "RUNNING")
        subprocess.run(["scancel", str(slurm_id(doc))], check=True)
        doc = self.srv.wait_done(self.key, jid, 60)
        assert doc["status"] == "cancelled", doc
        assert "outside trainyard" in (doc.get("error") or ""), doc

    def check_restart_reattaches(self):
        """A server restarted while a job runs re-attaches to its Slurm job."""
        jid = self.srv.submit(self.key, self.big, SLOW_MODEL, 8, name="restart")
        doc = self.srv.wait(self.key, jid, lambda d:
                            ((d.get("progress") or {}).get("epoch") or 0) >= 1
                            and running_on_slurm(d), 90, "epoch 1")
        sid = slurm_id(doc)
        self.srv.stop()
        time.sleep(2)
        fields, text = scontrol_job(sid)
        assert fields.get("JobState") == "RUNNING", "the Slurm job stopped " + text
        self.srv.start()
        doc = self.srv.job(self.key, jid)
        assert doc["status"] == "running", doc
        doc = self.srv.wait_done(self.key, jid, 180)
        assert doc["status"] == "succeeded", doc
        assert slurm_id(doc) == sid, (slurm_id(doc), sid)
        assert doc["attempts"] == 1, doc["attempts"]

    def check_quota_holds(self):
        """A tenant's max_running_jobs holds with Slurm: its second job is
        not submitted while the first runs."""
        key = self.srv.tenant("slurm-quota", {"max_running_jobs": 1})
        ds = self.srv.upload_csv(key, "big", blobs_csv(12000, 3))
        a = self.srv.submit(key, ds, SLOW_MODEL, 3, name="q1")
        b = self.srv.submit(key, ds, SLOW_MODEL, 3, name="q2")
        self.srv.wait(key, a, running_on_slurm, 90, "RUNNING")
        doc_b = self.srv.job(key, b)
        assert doc_b["status"] == "queued", doc_b
        assert "quota" in json.dumps(doc_b.get("queue")), doc_b.get("queue")
        names = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True,
                               text=True).stdout.split()
        assert f"trainyard-{b}" not in names, names
        for jid in (a, b):
            assert self.srv.wait_done(key, jid, 180)["status"] == "succeeded"

    def check_fashion_parity(self):
        """A Fashion-MNIST MLP trained through Slurm predicts the same as one
        trained locally with the same seed."""
        if not os.path.exists(f"{FASHION}/train-images-idx3-ubyte.gz"):
            print(f"    SKIPPED: {FASHION} is missing")
            return
        files = {"images": ("train-images-idx3-ubyte.gz",
                            open(f"{FASHION}/train-images-idx3-ubyte.gz", "rb").read()),
                 "labels": ("train-labels-idx1-ubyte.gz",
                            open(f"{FASHION}/train-labels-idx1-ubyte.gz", "rb").read())}
        with gzip.open(f"{FASHION}/t10k-images-idx3-ubyte.gz") as f:
            f.read(16)
            test = np.frombuffer(f.read(200 * 784), np.uint8).reshape(200, 784)
        inputs = test.astype(float).tolist()
        model = {"layers": [{"type": "flatten"},
                            {"type": "dense", "units": 128}, {"type": "relu"},
                            {"type": "dense", "units": 10}]}
        local = Server(os.path.join(self.tmp, "local"), executor="local").start()
        outputs = {}
        try:
            for srv, key in ((self.srv, self.key), (local, local.key)):
                body, ctype = multipart({"name": "fashion", "format": "idx"}, files)
                st, ds = srv.call("POST", "/v1/datasets", body, key=key, ctype=ctype)
                assert st == 201, (st, ds)
                jid = srv.submit(key, ds["id"], model, 1, seed=7, name="fashion",
                                 batch_size=128)
                doc = srv.wait_done(key, jid, 300)
                assert doc["status"] == "succeeded", doc
                st, pred = srv.call("POST", f"/v1/models/{doc['model']}/predict",
                                    {"inputs": inputs}, key=key)
                assert st == 200, (st, pred)
                outputs[srv.executor] = (pred["predictions"], np.array(pred["outputs"]))
                if srv.executor == "slurm":
                    assert slurm_id(doc), doc["placement"]
        finally:
            local.stop()
        (p_s, o_s), (p_l, o_l) = outputs["slurm"], outputs["local"]
        assert p_s == p_l, "the predicted classes differ"
        diff = float(np.abs(o_s - o_l).max())
        assert diff <= 1e-6, f"outputs differ by {diff}"
        print(f"    200 test images: same classes, outputs within {diff:.1e}")

    def check_preemption(self):
        """Fair share preempts a Slurm job: it checkpoints (SIGUSR1 through
        the events reply), its Slurm job ends, and it resumes later."""
        srv = Server(os.path.join(self.tmp, "preempt"),
                     extra=["--preempt-wait", "1"]).start()
        hogs = []
        try:
            a = srv.tenant("hog")
            b = srv.tenant("late")
            ds_a = srv.upload_csv(a, "big", blobs_csv(12000, 4))
            ds_b = srv.upload_csv(b, "small", blobs_csv(300, 5))
            hogs = [srv.submit(a, ds_a, SLOW_MODEL, 40, gpu="1g.18gb",
                               name=f"hog{i}") for i in range(7)]
            first = {}
            for jid in hogs:
                d = srv.wait(a, jid, lambda d: ((d.get("progress") or {}).get("epoch") or 0) >= 1
                             and running_on_slurm(d), 180, "RUNNING past epoch 1")
                first[jid] = slurm_id(d)
            late = srv.submit(b, ds_b, FAST_MODEL, 2, gpu="1g.18gb", name="late")
            doc = srv.wait_done(b, late, 120)
            assert doc["status"] == "succeeded", doc
            docs = [srv.job(a, jid) for jid in hogs]
            victims = [d for d in docs if d["preemptions"] >= 1]
            assert len(victims) == 1, [(d["id"], d["status"], d["preemptions"]) for d in docs]
            v = victims[0]
            fields, text = scontrol_job(first[v["id"]])
            # The worker checkpointed and exited 4 (preempted) by itself.
            assert fields.get("ExitCode", "").startswith("4:"), text
            d = srv.wait(a, v["id"], lambda d: d["status"] == "running" and
                         (d.get("progress") or {}).get("resumed_from_epoch") is not None,
                         180, "the victim to resume")
            assert slurm_id(d) != first[v["id"]], "it resumed in the same Slurm job"
            print(f"    Slurm job {first[v['id']]} exited {fields.get('ExitCode')} "
                  f"(preempted, checkpointed); resumed from epoch "
                  f"{d['progress']['resumed_from_epoch']} in Slurm job {slurm_id(d)}")
        finally:
            for jid in hogs:
                srv.call("POST", f"/v1/jobs/{jid}/cancel", key=a)
            for jid in hogs:
                srv.wait_done(a, jid, 60)
            srv.stop()

    def check_slurmrestd_outage(self):
        """slurmrestd down: /readyz says so, new jobs wait, a running job
        goes on; back up: the waiting job runs."""
        run = self.srv.submit(self.key, self.big, SLOW_MODEL, 6, name="outage-run")
        self.srv.wait(self.key, run, running_on_slurm, 90, "RUNNING")
        subprocess.run([os.path.join(os.path.dirname(__file__), "cluster.sh"),
                        "stop-rest", ENV["SLURM_DIR"]], check=True)
        try:
            deadline = time.time() + 30
            while time.time() < deadline:
                st, ready = self.srv.call("GET", "/readyz")
                if ready.get("status") == "degraded":
                    break
                time.sleep(0.5)
            assert ready.get("status") == "degraded", ready
            assert ready["executor"]["ok"] is False, ready
            assert "slurmrestd" in ready["executor"]["detail"], ready
            waiting = self.srv.submit(self.key, self.small, FAST_MODEL, 1,
                                      name="outage-wait")
            time.sleep(3)
            doc = self.srv.job(self.key, waiting)
            assert slurm_id(doc) is None, doc["placement"]
            # Scheduled (it holds its slot), not yet in Slurm, saying why.
            assert doc["status"] == "scheduled", doc
            slurm = doc["placement"]["slurm"]
            assert slurm["state"] == "SUBMITTING", slurm
            assert "slurmrestd" in slurm["reason"], slurm
        finally:
            subprocess.run([os.path.join(os.path.dirname(__file__), "cluster.sh"),
                            "start-rest", ENV["SLURM_DIR"]], check=True)
        for jid in (run, waiting):
            doc = self.srv.wait_done(self.key, jid, 180)
            assert doc["status"] == "succeeded", doc
        st, ready = self.srv.call("GET", "/readyz")
        assert ready.get("status") == "ready", ready


def main():
    load_env()
    if not BIN or not os.access(BIN, os.X_OK):
        sys.exit("TRAINYARD_BIN must name a trainyard binary the job user can run")
    suite = Suite()
    names = [n for n in dir(Suite) if n.startswith("check_")]
    order = ["check_cpu_and_mig_jobs", "check_init_from",
             "check_worker_isolated", "check_cancel",
             "check_sigkill_requeue_resume", "check_outside_scancel",
             "check_quota_holds", "check_preemption", "check_restart_reattaches",
             "check_slurmrestd_outage", "check_fashion_parity"]
    assert sorted(order) == sorted(names), "a check is missing from the order"
    want = sys.argv[1:] or order
    failed = []
    try:
        for name in want:
            fn = getattr(suite, name if name.startswith("check_") else "check_" + name)
            t0 = time.time()
            print(f"{fn.__name__}: {fn.__doc__.splitlines()[0]}", flush=True)
            try:
                fn()
                print(f"  ok ({time.time() - t0:.1f} s)", flush=True)
            except Exception:
                failed.append(fn.__name__)
                print("  FAILED", flush=True)
                traceback.print_exc()
                if suite.srv.proc is None or suite.srv.proc.poll() is not None:
                    suite.srv.start()
    finally:
        suite.close()
    print(f"{len(want) - len(failed)} of {len(want)} checks passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
