#!/usr/bin/env python3
"""Data-parallel jobs on Slurm (issue 33): `trainyard serve --executor
slurm` runs a job of `resources.workers: 2` as one Slurm job over the two
nodes of tests/slurm/cluster.sh start-multi, one rank a node, its ranks
started by `srun --mpi=pmix` in the batch script.

It starts the cluster itself (or uses the one TRAINYARD_SLURM_ENV names),
copies the binary where the job user can run it, starts the server on the
bridge address the nodes reach, and checks in order:

  * a 2-worker job succeeds; its Slurm job took both nodes (NumNodes 2,
    NodeList node[1-2], COMPLETED), its shims said rank 0 and rank 1 on
    node1 and node2 (the job's Slurm output file), its epochs carry
    world_size 2, and its losses equal the same job's on one worker
    (run by a local server) and on 2 local workers (mpirun, where the
    server can) within 1e-4 relative, epoch by epoch;
  * 3 workers on this 2-node cluster are refused at submit (422 naming
    resources.workers), not queued forever;
  * a cancel through the API ends the Slurm job and every rank;
  * a preempt reaching rank 0 (SIGUSR1, what the server's reply makes its
    shim send) stops both ranks at one step: exit 4, resumed;
  * rank 1's worker killed: the Slurm job FAILED, no rank left, resumed;
  * node2 lost mid-run (cluster.sh kill-node) ends the Slurm job
    (NODE_FAIL); once the node is back the job runs again from its last
    checkpoint (attempt 2, resumed_from_epoch >= 1) and succeeds.
  * an elastic gang (workers 2, min_workers 1) whose node2 is lost
    resumes at once at world size 1 on node1 from its checkpoint and
    succeeds while node2 is still down; meanwhile a job of 3 workers, at
    least 2, waits queued saying it needs 2 nodes up and 1 is, and runs
    on both nodes once node2 is back.

    python3 tests/slurm/test_slurm_gang.py [check ...]

Exit 0 when every check passed, 1 otherwise, 77 (skipped) when the
cluster cannot be made here (not root, no namespaces or veth pairs) or
the build has no Open MPI (the server refuses workers) or Slurm no PMIx
plugin.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_slurm as ts  # noqa: E402  (the server and job helpers)

CLUSTER = os.path.join(HERE, "cluster.sh")
DIR = ""
MLP = {"layers": [{"type": "dense", "units": 64}, {"type": "relu"},
                  {"type": "dense", "units": 3}]}
WIDE = {"layers": [{"type": "dense", "units": 256}, {"type": "relu"},
                   {"type": "dense", "units": 256}, {"type": "relu"},
                   {"type": "dense", "units": 3}]}
HP = {"epochs": 3, "batch_size": 64, "seed": 5}


def load_env(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and "=" in line:
                k, v = line.split("=", 1)
                ts.ENV[k] = v
    os.environ["SLURM_CONF"] = ts.ENV["SLURM_CONF"]


def submit(srv, key, ds, model, hp, workers):
    job = {"name": f"gang{workers}", "dataset": ds, "model": model,
           "hyperparameters": hp,
           "resources": {"workers": workers, "gpu": "none"}}
    return srv.call("POST", "/v1/jobs", job, key=key)


def epochs(srv, key, jid):
    st, m = srv.call("GET", f"/v1/jobs/{jid}/metrics", key=key)
    assert st == 200, (st, m)
    return m["epochs"]


def job_pids(jid):
    """The processes of job jid on the nodes (shims and workers), by
    their command lines (the nodes share the machine's PID namespace)."""
    out = subprocess.run(["pgrep", "-f", f"trainyard worker.*{jid}"],
                         capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def is_shim(pid):
    """Whether pid is a shim (`trainyard worker --server ...`), not srun
    (whose command line names it) nor a worker (--job-dir)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return os.path.basename(argv[0]) == b"trainyard" and b"--server" in argv


def proc_env(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    return dict(kv.decode(errors="replace").split("=", 1)
                for kv in raw.split(b"\0") if b"=" in kv)


def wait_slurm_end(sid, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        f, _ = ts.scontrol_job(sid)
        if f.get("JobState") not in ("RUNNING", "PENDING", "COMPLETING",
                                     "CONFIGURING", None):
            return f
        time.sleep(0.5)
    raise AssertionError(f"Slurm job {sid} did not end: {f}")


def slurm_out(sid):
    path = os.path.join(ts.ENV["SLURM_WORK_DIR"], f"trainyard-{sid}.out")
    with open(path, errors="replace") as f:
        return f.read()


class Suite:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="trainyard-gang-")
        os.chmod(self.tmp, 0o700)
        self.srv = ts.Server(os.path.join(self.tmp, "data"),
                             host=ts.ENV["SLURM_CTLD_ADDR"]).start()
        self.key = self.srv.tenant("gang")
        self.csv = ts.blobs_csv(12000, 7)
        self.ds = self.srv.upload_csv(self.key, "blobs", self.csv)
        self.local = None

    def close(self):
        self.srv.stop()
        if self.local:
            self.local.stop()

    def check_gang_over_two_nodes(self):
        """A 2-worker job runs one rank on each node and trains as one
        worker does."""
        st, doc = submit(self.srv, self.key, self.ds, MLP, HP, 2)
        if st == 422 and "Open MPI" in str(doc):
            raise Skip(f"the server cannot run workers: {doc}")
        assert st == 202, (st, doc)
        jid = doc["id"]
        doc = self.srv.wait_done(self.key, jid, 300)
        sid = ts.slurm_id(doc)
        assert sid, doc.get("placement")
        out = slurm_out(sid)
        assert doc["status"] == "succeeded", (doc, out[-3000:])
        assert doc["resources"]["workers"] == 2, doc["resources"]
        assert doc["placement"]["slurm"].get("ranks_per_node") == 1, doc["placement"]
        fields, text = ts.scontrol_job(sid)
        assert fields.get("JobState") == "COMPLETED", text
        assert fields.get("NumNodes") == "2", text
        assert fields.get("NodeList") == "node[1-2]", text
        ranks = dict(re.findall(r"trainyard worker: rank (\d) of job \S+ on "
                                r"(node\d)", out))
        assert sorted(ranks) == ["0", "1"], out[-3000:]
        assert sorted(ranks.values()) == ["node1", "node2"], out[-3000:]
        gang = epochs(self.srv, self.key, jid)
        assert len(gang) == HP["epochs"], gang
        assert all(e.get("world_size") == 2 for e in gang), gang
        # The same job on one worker, on a local server: the same losses.
        self.local = ts.Server(os.path.join(self.tmp, "local"),
                               executor="local").start()
        lkey = self.local.tenant("gang")
        lds = self.local.upload_csv(lkey, "blobs", self.csv)
        st, one = submit(self.local, lkey, lds, MLP, HP, 1)
        assert st == 202, (st, one)
        one_doc = self.local.wait_done(lkey, one["id"], 300)
        assert one_doc["status"] == "succeeded", one_doc
        single = epochs(self.local, lkey, one["id"])
        assert len(single) == len(gang), (single, gang)
        # And on 2 local workers (mpirun), where this server can run them.
        st, two = submit(self.local, lkey, lds, MLP, HP, 2)
        local2 = None
        if st == 202:
            two_doc = self.local.wait_done(lkey, two["id"], 300)
            assert two_doc["status"] == "succeeded", two_doc
            local2 = epochs(self.local, lkey, two["id"])
        else:
            print(f"    (no local 2-worker run: {st} {two})")
        for i, (a, b) in enumerate(zip(gang, single)):
            la, lb = a["train_loss"], b["train_loss"]
            l2 = local2[i]["train_loss"] if local2 else None
            print(f"    epoch {i + 1}: train_loss 2 ranks on Slurm {la:.9g}, "
                  f"1 local worker {lb:.9g}, 2 local workers {l2}")
            assert abs(la - lb) <= 1e-4 * abs(lb), (i, la, lb)
            if local2:
                assert abs(la - l2) <= 1e-4 * abs(l2), (i, la, l2)
        print(f"    Slurm job {sid}: NodeList {fields['NodeList']}, ranks "
              f"{ranks}, allreduce share "
              f"{gang[-1].get('allreduce_share')}")

    def check_too_many_workers(self):
        """3 workers on 2 nodes: 422 naming resources.workers."""
        st, doc = submit(self.srv, self.key, self.ds, MLP,
                         dict(HP, batch_size=63), 3)
        assert st == 422, (st, doc)
        assert doc.get("field") == "resources.workers", doc
        assert "the cluster has 2" in doc.get("detail", ""), doc
        print(f"    {doc['detail']}")

    def check_cancel_gang(self):
        """A cancel through the API ends the gang's Slurm job and every
        rank's processes on both nodes."""
        hp = {"epochs": 200, "batch_size": 64, "seed": 5}
        st, doc = submit(self.srv, self.key, self.ds, WIDE, hp, 2)
        assert st == 202, (st, doc)
        jid = doc["id"]
        doc = self.srv.wait(
            self.key, jid,
            lambda d: ((d.get("progress") or {}).get("epoch") or 0) >= 1
            and ts.running_on_slurm(d), 240, "epoch 1")
        sid = ts.slurm_id(doc)
        assert len(job_pids(jid)) >= 4, job_pids(jid)  # 2 shims, 2 workers
        st, _ = self.srv.call("POST", f"/v1/jobs/{jid}/cancel", key=self.key)
        assert st in (200, 202), st
        doc = self.srv.wait_done(self.key, jid, 60)
        assert doc["status"] == "cancelled", doc
        f = wait_slurm_end(sid)
        assert f.get("JobState") in ("CANCELLED", "FAILED", "COMPLETED"), f
        deadline = time.time() + 30
        while job_pids(jid) and time.time() < deadline:
            time.sleep(0.5)
        assert not job_pids(jid), job_pids(jid)
        print(f"    Slurm job {sid} {f.get('JobState')} "
              f"(ExitCode {f.get('ExitCode')}); no process of the job left")

    def check_preempted_gang(self):
        """A preempt reaching rank 0 stops every rank at the same step: the
        gang checkpoints, exits 4 (preempted) and resumes in a new Slurm
        job."""
        # What the server's "preempt" reply makes rank 0's shim do
        # (act_on -> wrchild_preempt) is what its SIGUSR1 handler does:
        # SIGUSR1 to its child. Fair share never preempts a CPU job, so
        # the test sends that signal to rank 0's shim itself.
        hp = {"epochs": 60, "batch_size": 64, "seed": 5}
        st, doc = submit(self.srv, self.key, self.ds, WIDE, hp, 2)
        assert st == 202, (st, doc)
        jid = doc["id"]
        doc = self.srv.wait(
            self.key, jid,
            lambda d: ((d.get("progress") or {}).get("epoch") or 0) >= 2
            and ts.running_on_slurm(d), 240, "epoch 2")
        first = ts.slurm_id(doc)
        shims = [p for p in job_pids(jid) if is_shim(p)]
        rank0 = [p for p in shims if proc_env(p).get("PMIX_RANK") == "0"]
        assert len(shims) == 2 and len(rank0) == 1, (shims, rank0)
        os.kill(rank0[0], signal.SIGUSR1)
        f = wait_slurm_end(first)
        out = slurm_out(first)
        # rank 0 checkpointed and exited 4; rank 1's worker stopped at the
        # same step with 4 too (the agreed stop, not srun's kill) and its
        # shim exited 0 (wremote_rank_exit), so srun's status is rank 0's.
        assert f.get("ExitCode", "").startswith("4:"), (f, out[-2000:])
        assert re.search(r"rank 1 of job \S+ on node\d: its worker exited 4\b",
                         out), out[-3000:]
        doc = self.srv.wait(self.key, jid,
                            lambda d: ts.slurm_id(d) not in (None, first)
                            and ts.running_on_slurm(d), 240,
                            "the gang to run again")
        doc = self.srv.wait_done(self.key, jid, 300)
        assert doc["status"] == "succeeded", doc
        resumed = (doc.get("progress") or {}).get("resumed_from_epoch")
        assert resumed is not None and resumed >= 1, doc.get("progress")
        print(f"    Slurm job {first} exited {f.get('ExitCode')} (preempted, "
              f"both ranks stopped); resumed from epoch {resumed} in Slurm "
              f"job {ts.slurm_id(doc)}, succeeded")

    def check_rank_killed_resumes(self):
        """Rank 1's worker killed (SIGKILL) mid-run: srun ends every rank,
        the Slurm job fails, and the job resumes from its checkpoint."""
        hp = {"epochs": 60, "batch_size": 64, "seed": 5}
        st, doc = submit(self.srv, self.key, self.ds, WIDE, hp, 2)
        assert st == 202, (st, doc)
        jid = doc["id"]
        doc = self.srv.wait(
            self.key, jid,
            lambda d: ((d.get("progress") or {}).get("epoch") or 0) >= 2
            and ts.running_on_slurm(d), 240, "epoch 2")
        first = ts.slurm_id(doc)
        before = job_pids(jid)
        workers = [p for p in before if not is_shim(p)
                   and b"--job-dir" in open(f"/proc/{p}/cmdline", "rb").read()
                   and proc_env(p).get("PMIX_RANK") == "1"]
        assert len(workers) == 1, (before, workers)
        t0 = time.time()
        os.kill(workers[0], signal.SIGKILL)
        f = wait_slurm_end(first)
        took = time.time() - t0
        assert f.get("JobState") == "FAILED", f
        # No process of the first attempt is left on either node.
        deadline = time.time() + 30
        while time.time() < deadline and any(os.path.exists(f"/proc/{p}")
                                             for p in before):
            time.sleep(0.5)
        left = [p for p in before if os.path.exists(f"/proc/{p}")]
        assert not left, left
        doc = self.srv.wait_done(self.key, jid, 300)
        assert doc["status"] == "succeeded", doc
        assert doc["attempts"] == 2, doc["attempts"]
        resumed = (doc.get("progress") or {}).get("resumed_from_epoch")
        assert resumed is not None and resumed >= 1, doc.get("progress")
        print(f"    Slurm job {first} {f.get('JobState')} (ExitCode "
              f"{f.get('ExitCode')}) {took:.1f} s after rank 1's worker "
              f"was killed, no "
              f"rank left; resumed from epoch {resumed} in Slurm job "
              f"{ts.slurm_id(doc)}, succeeded")

    def check_node_lost_resumes(self):
        """node2 lost mid-run: NODE_FAIL, then the job resumes from its
        checkpoint once the node is back, and succeeds."""
        hp = {"epochs": 8, "batch_size": 64, "seed": 5}
        st, doc = submit(self.srv, self.key, self.ds, WIDE, hp, 2)
        assert st == 202, (st, doc)
        jid = doc["id"]
        doc = self.srv.wait(
            self.key, jid,
            lambda d: ((d.get("progress") or {}).get("epoch") or 0) >= 2
            and ts.running_on_slurm(d), 240, "epoch 2")
        sid = ts.slurm_id(doc)
        ckpt = os.path.join(self.srv.data, "jobs", jid,
                            "checkpoint.safetensors")
        assert os.path.exists(ckpt), "no checkpoint was uploaded"
        subprocess.run([CLUSTER, "kill-node", DIR, "node2"], check=True,
                       capture_output=True, timeout=60)
        t0 = time.time()
        deadline = time.time() + 90
        while time.time() < deadline:
            f, _ = ts.scontrol_job(sid)
            if f.get("JobState") == "NODE_FAIL":
                break
            time.sleep(0.5)
        f, text = ts.scontrol_job(sid)
        assert f.get("JobState") == "NODE_FAIL", text
        took = time.time() - t0
        subprocess.run([CLUSTER, "start-node", DIR, "node2"], check=True,
                       capture_output=True, timeout=60)
        doc = self.srv.wait_done(self.key, jid, 300)
        assert doc["status"] == "succeeded", doc
        assert doc["attempts"] == 2, doc["attempts"]
        resumed = (doc.get("progress") or {}).get("resumed_from_epoch")
        assert resumed is not None and resumed >= 1, doc.get("progress")
        assert ts.slurm_id(doc) != sid, doc["placement"]
        done = epochs(self.srv, self.key, jid)
        assert [e["epoch"] for e in done] == list(range(1, 9)), done
        # The epochs trained after the resume ran on both ranks again.
        assert all(e.get("world_size") == 2 for e in done
                   if e["epoch"] > resumed), done
        print(f"    Slurm job {sid} NODE_FAIL {took:.1f} s after node2 was "
              f"lost; resumed from epoch {resumed} in Slurm job "
              f"{ts.slurm_id(doc)}, succeeded")

    def check_elastic_node_lost(self):
        """An elastic gang (workers 2, min_workers 1) whose node2 is lost
        resumes at once at world size 1 on node1, from its checkpoint,
        without waiting for node2 to come back."""
        hp = {"epochs": 8, "batch_size": 64, "seed": 5}
        job = {"name": "elastic", "dataset": self.ds, "model": WIDE,
               "hyperparameters": hp,
               "resources": {"workers": 2, "min_workers": 1, "gpu": "none"}}
        st, doc = self.srv.call("POST", "/v1/jobs", job, key=self.key)
        assert st == 202, (st, doc)
        assert doc["resources"].get("min_workers") == 1, doc["resources"]
        jid = doc["id"]
        doc = self.srv.wait(
            self.key, jid,
            lambda d: ((d.get("progress") or {}).get("epoch") or 0) >= 2
            and ts.running_on_slurm(d), 240, "epoch 2")
        sid = ts.slurm_id(doc)
        assert doc["placement"].get("world_size") == 2, doc["placement"]
        subprocess.run([CLUSTER, "kill-node", DIR, "node2"], check=True,
                       capture_output=True, timeout=60)
        t0 = time.time()
        try:
            doc = self.srv.wait_done(self.key, jid, 300)
            took = time.time() - t0
            assert doc["status"] == "succeeded", doc
            assert doc["attempts"] == 2, doc["attempts"]
            resumed = (doc.get("progress") or {}).get("resumed_from_epoch")
            assert resumed is not None and resumed >= 1, doc.get("progress")
            second = ts.slurm_id(doc)
            assert second != sid, doc["placement"]
            assert doc["placement"].get("world_size") == 1, doc["placement"]
            f, text = ts.scontrol_job(second)
            assert f.get("NumNodes") == "1", text
            assert f.get("NodeList") == "node1", text
            f, text = ts.scontrol_job(sid)
            assert f.get("JobState") == "NODE_FAIL", text
            done = epochs(self.srv, self.key, jid)
            assert [e["epoch"] for e in done] == list(range(1, 9)), done
            # Before the loss 2 ranks; after it one process (a job of one
            # worker has no world_size in its records). The resumed epoch's
            # record is the resumed run's (the trainer sends it again).
            assert all(e.get("world_size") == 2 for e in done
                       if e["epoch"] < resumed), done
            assert all(e.get("world_size") in (None, 1) for e in done
                       if e["epoch"] > resumed), done
            # node2 never came back meanwhile.
            out = subprocess.run(["scontrol", "show", "node", "node2"],
                                 capture_output=True, text=True).stdout
            assert "State=DOWN" in out, out
            # An elastic job of 3 workers, at least 2 (more than the
            # cluster's nodes, accepted since 2 fit), waits while only
            # node1 is up, and says why.
            job = {"name": "held", "dataset": self.ds, "model": MLP,
                   "hyperparameters": {"epochs": 1, "batch_size": 66,
                                       "seed": 5},
                   "resources": {"workers": 3, "min_workers": 2}}
            st, h = self.srv.call("POST", "/v1/jobs", job, key=self.key)
            assert st == 202, (st, h)
            held = h["id"]
            time.sleep(3)
            st, h = self.srv.call("GET", f"/v1/jobs/{held}", key=self.key)
            assert st == 200 and h["status"] == "queued", h
            detail = (h.get("queue") or {}).get("detail", "")
            assert "needs 2 Slurm nodes up" in detail, h.get("queue")
            assert "1 of 2 is" in detail, h.get("queue")
        finally:
            subprocess.run([CLUSTER, "start-node", DIR, "node2"],
                           capture_output=True, timeout=60)
        # node2 back: the held job runs on both nodes.
        h = self.srv.wait_done(self.key, held, 240)
        assert h["status"] == "succeeded", h
        assert h["placement"].get("world_size") == 2, h["placement"]
        f, text = ts.scontrol_job(ts.slurm_id(h))
        assert f.get("NumNodes") == "2", text
        print(f"    Slurm job {sid} NODE_FAIL; resumed from epoch {resumed} "
              f"at world size 1 in Slurm job {second} on node1, succeeded "
              f"{took:.1f} s after node2 was lost, node2 still down; a job "
              f"of 2 to 3 workers waited ({detail!r}) and ran on 2 nodes "
              f"once node2 was back")


class Skip(Exception):
    pass


def main():
    global DIR
    order = ["check_gang_over_two_nodes", "check_too_many_workers",
             "check_cancel_gang", "check_preempted_gang",
             "check_rank_killed_resumes", "check_node_lost_resumes",
             "check_elastic_node_lost"]
    names = [n for n in dir(Suite) if n.startswith("check_")]
    assert sorted(order) == sorted(names), "a check is missing from the order"
    want = [n if n.startswith("check_") else "check_" + n
            for n in sys.argv[1:]] or order
    bin_path = os.environ.get("TRAINYARD_BIN", "")
    if not bin_path or not os.access(bin_path, os.X_OK):
        sys.exit("TRAINYARD_BIN must name a trainyard binary")
    own = not os.environ.get("TRAINYARD_SLURM_ENV")
    failed, suite = [], None
    try:
        if own:
            DIR = tempfile.mkdtemp(prefix="trainyard-slurm2-")
            os.chmod(DIR, 0o755)
            r = subprocess.run([CLUSTER, "start-multi", DIR, "2"],
                               capture_output=True, text=True, timeout=180)
            if r.returncode == 77:
                print(r.stderr.strip())
                return 77
            if r.returncode != 0:
                print(f"cluster.sh start-multi failed ({r.returncode}):\n"
                      f"{r.stdout}{r.stderr}")
                return 1
            load_env(r.stdout.strip())
        else:
            load_env(os.environ["TRAINYARD_SLURM_ENV"])
            DIR = ts.ENV["SLURM_DIR"]
        plugins = subprocess.run(["srun", "--mpi=list"], capture_output=True,
                                 text=True)
        if "pmix" not in plugins.stdout + plugins.stderr:
            print("skipped: this Slurm has no PMIx plugin (srun --mpi=list)")
            return 77
        # The job user (nobody) runs the worker: a copy it can run.
        ts.BIN = os.path.join(ts.ENV["SLURM_BIN_DIR"], "trainyard")
        shutil.copyfile(bin_path, ts.BIN + ".new")
        os.chmod(ts.BIN + ".new", 0o755)
        os.replace(ts.BIN + ".new", ts.BIN)  # a running copy stays intact
        suite = Suite()
        for name in want:
            fn = getattr(suite, name)
            t1 = time.time()
            print(f"{name}: {fn.__doc__.splitlines()[0]}", flush=True)
            try:
                fn()
                print(f"  ok ({time.time() - t1:.1f} s)", flush=True)
            except Skip as e:
                print(f"  skipped: {e}")
                return 77
            except Exception:
                failed.append(name)
                print("  FAILED", flush=True)
                traceback.print_exc()
                print(suite.srv.log_tail())
    finally:
        if suite:
            suite.close()
        if own and DIR:
            subprocess.run([CLUSTER, "stop", DIR], timeout=120)
            shutil.rmtree(DIR, ignore_errors=True)
    print(f"{len(want) - len(failed)} of {len(want)} checks passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
