#!/usr/bin/env python3
"""The two-node Slurm cluster (tests/slurm/cluster.sh start-multi) works as
two machines would: what gangs of ranks over nodes (issue 33) are tested on.

It starts the cluster itself (two slurmd, each in its own network and UTS
namespace on a private bridge; slurmctld, munged and slurmrestd beside
them), runs the checks in order, and stops it whatever happened:

  * both nodes come up idle, each with the fake GRES and its own address;
  * a job submitted through slurmrestd v0.0.38 with nodes 2 and
    tasks_per_node 1 (as the server will submit a gang) runs one task on
    each node, and the tasks see different hostnames and addresses;
  * `srun --mpi=pmix` (when this Slurm has the plugin) starts a 2-node step
    whose tasks see PMIX_RANK 0 and 1, one on each node;
  * a task on node2 reaches a task on node1 over TCP at node1's address;
  * an Open MPI all-reduce (when mpicc is here) runs over both nodes with
    srun --mpi=pmix, submitted through slurmrestd as the job user;
  * a node lost while a 2-node job runs (everything on it killed, its link
    down: cluster.sh kill-node) makes Slurm end the job (NODE_FAIL) with no
    task left on the other node; the time it took is printed; the other
    node keeps running jobs; the lost node comes back (start-node) and a
    2-node job runs again;
  * node2's slurmd alone killed (cluster.sh kill-slurmd) while a 2-node job
    runs: NODE_FAIL again, rank 0 ends, and rank 1's task on node2 runs on
    (Slurm cannot reach it) until a slurmd starts there again.

    python3 tests/slurm/test_multinode.py [check ...]

Exit 0 when every check passed, 1 otherwise, 77 (skipped) when the
cluster cannot be made here (not root; no namespaces or veth, as in an
unprivileged container), with cluster.sh's reason.
"""
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

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "cluster.sh")
ENV = {}
DIR = ""

# One line a task: its rank, node name, address on the test subnet (eth0
# exists only in a node's namespace) and the GPUs Slurm gave it.
TASK = r"""#!/bin/sh
addr=$(ip -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')
echo "task rank=$SLURM_PROCID host=$(hostname) addr=${addr%/*} user=$(id -un) gpus=${CUDA_VISIBLE_DEVICES:-none} pmix=${PMIX_RANK:-none}"
"""


def load_env(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and "=" in line:
                k, v = line.split("=", 1)
                ENV[k] = v
    os.environ["SLURM_CONF"] = ENV["SLURM_CONF"]


def run(*args, check=True, timeout=60):
    r = subprocess.run(list(args), capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit {r.returncode}: "
                             f"{r.stdout}{r.stderr}")
    return r.stdout


def job_fields(jid):
    return dict(re.findall(r"(\w+)=(\S*)",
                           run("scontrol", "-o", "show", "job", str(jid))))


def node_fields(name):
    return dict(re.findall(r"(\w+)=(\S*)",
                           run("scontrol", "-o", "show", "node", name)))


def wait_for(pred, timeout, what, step=0.1):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


ENDED = ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT",
         "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED")


def wait_ended(jid, timeout=60):
    def ended():
        f = job_fields(jid)
        return f if f.get("JobState") in ENDED else None
    return wait_for(ended, timeout, f"Slurm job {jid} to end")


def task_lines(path):
    with open(path) as f:
        text = f.read()
    tasks = []
    for line in text.splitlines():
        if line.startswith("task "):
            tasks.append(dict(kv.split("=", 1) for kv in line.split()[1:]))
    return tasks, text


def write_script(name, body):
    path = os.path.join(ENV["SLURM_WORK_DIR"], name)
    with open(path, "w") as f:
        f.write(body)
    os.chmod(path, 0o755)
    return path


def sbatch(*args):
    out = run("sbatch", "--parsable", "-D", ENV["SLURM_WORK_DIR"], *args)
    return int(out.strip().split(";")[0])


def rest_submit(job, script):
    token = open(ENV["SLURM_TOKEN_FILE"]).read().strip()
    body = json.dumps({"job": job, "script": script}).encode()
    req = urllib.request.Request(
        ENV["SLURMRESTD_URL"] + "/slurm/v0.0.38/job/submit", data=body,
        method="POST", headers={"Content-Type": "application/json",
                                "X-SLURM-USER-NAME": ENV["SLURM_USER"],
                                "X-SLURM-USER-TOKEN": token})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            doc = json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"submit: HTTP {e.code}: {e.read()[:800]!r}")
    assert not doc.get("errors"), doc
    return int(doc["job_id"])


def node_addrs():
    return {n: node_fields(n).get("NodeAddr") for n in ENV["SLURM_NODES"].split(",")}


def in_subnet(addr):
    net = ENV["SLURM_SUBNET"].rsplit(".", 1)[0] + "."
    return addr.startswith(net)


class Suite:
    def check_nodes_idle(self):
        """Both nodes are up and idle, with the fake GRES and their own
        addresses on the test subnet."""
        nodes = ENV["SLURM_NODES"].split(",")
        assert nodes == ["node1", "node2"], nodes
        addrs = node_addrs()
        for n in nodes:
            f = node_fields(n)
            assert f.get("State") == "IDLE", (n, f)
            assert f.get("Gres") == "gpu:1g.18gb:7", (n, f.get("Gres"))
            assert in_subnet(f.get("NodeAddr", "")), (n, f.get("NodeAddr"))
        assert len(set(addrs.values())) == 2, addrs
        # The machine's own name is not a node's: the nodes' names live in
        # their UTS namespaces only.
        assert os.uname().nodename not in nodes, os.uname().nodename
        print(f"    subnet {ENV['SLURM_SUBNET']}, slurmctld at "
              f"{ENV['SLURM_CTLD_ADDR']}, nodes {addrs}")

    def check_rest_gang(self):
        """slurmrestd v0.0.38's submit with nodes 2 and tasks_per_node 1
        runs one task on each node, each with its own hostname and
        address."""
        task = write_script("task.sh", TASK)
        out = os.path.join(ENV["SLURM_WORK_DIR"], "gang-%j.out")
        jid = rest_submit({"name": "gang", "nodes": 2, "tasks_per_node": 1,
                           "gres": "gpu:1g.18gb:1",
                           "current_working_directory": ENV["SLURM_WORK_DIR"],
                           "standard_output": out,
                           "environment": {"PATH": "/usr/sbin:/usr/bin:/bin"}},
                          f"#!/bin/sh\nsrun {task}\n")
        f = wait_ended(jid)
        tasks, text = task_lines(out.replace("%j", str(jid)))
        assert f["JobState"] == "COMPLETED", (f, text)
        assert f.get("NumNodes") == "2", f
        assert "gpu:1g.18gb:1" in f.get("TresPerNode", ""), f
        assert len(tasks) == 2, text
        by_rank = {t["rank"]: t for t in tasks}
        assert sorted(by_rank) == ["0", "1"], text
        assert {t["host"] for t in tasks} == {"node1", "node2"}, text
        addrs = node_addrs()
        for t in tasks:
            # each task's address is its own node's, on the test subnet
            assert t["addr"] == addrs[t["host"]], (t, addrs)
            assert t["user"] == ENV["SLURM_USER"], t
            assert t["gpus"] != "none", t  # the GRES reached the task
        assert tasks[0]["addr"] != tasks[1]["addr"], text
        for t in sorted(tasks, key=lambda t: t["rank"]):
            print(f"    rank {t['rank']}: {t['host']} {t['addr']} "
                  f"as {t['user']}, CUDA_VISIBLE_DEVICES={t['gpus']}")

    def check_pmix(self):
        """srun --mpi=pmix starts a 2-node step whose tasks see PMIX_RANK 0
        and 1, one on each node (skipped without the PMIx plugin)."""
        plugins = subprocess.run(["srun", "--mpi=list"], capture_output=True,
                                 text=True)
        if "pmix" not in plugins.stdout + plugins.stderr:
            print("    skipped: this Slurm has no PMIx plugin "
                  f"(srun --mpi=list: {plugins.stdout.split()})")
            return
        task = write_script("task.sh", TASK)
        out = os.path.join(ENV["SLURM_WORK_DIR"], "pmix-%j.out")
        jid = sbatch("-N2", "--ntasks-per-node=1", "-J", "pmix", "-o", out,
                     "--wrap", f"srun --mpi=pmix {task}")
        f = wait_ended(jid)
        tasks, text = task_lines(out.replace("%j", str(jid)))
        assert f["JobState"] == "COMPLETED", (f, text)
        assert len(tasks) == 2, text
        assert sorted(t["pmix"] for t in tasks) == ["0", "1"], text
        assert {t["host"] for t in tasks} == {"node1", "node2"}, text
        for t in tasks:
            assert t["pmix"] == t["rank"], t
        print("    " + ", ".join(f"{t['host']}: PMIX_RANK={t['pmix']}"
                                  for t in sorted(tasks, key=lambda t: t["rank"])))

    def check_mpi_allreduce(self):
        """An Open MPI program (when mpicc is here) run by srun --mpi=pmix
        over both nodes, submitted through slurmrestd as the job user,
        all-reduces across them."""
        mpicc = shutil.which("mpicc")
        if not mpicc or "pmix" not in run("srun", "--mpi=list", check=False):
            print("    skipped: no mpicc (libopenmpi-dev) or no PMIx plugin")
            return
        work = ENV["SLURM_WORK_DIR"]
        src = os.path.join(work, "allreduce.c")
        with open(src, "w") as f:
            f.write(r"""#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    int rank, size;
    char host[64];
    double mine, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host);
    mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    printf("task rank=%d size=%d host=%s sum=%.0f\n", rank, size, host, sum);
    MPI_Finalize();
    return 0;
}
""")
        prog = os.path.join(work, "allreduce")
        run(mpicc, "-o", prog, src, timeout=120)
        os.chmod(prog, 0o755)
        out = os.path.join(work, "mpi-%j.out")
        jid = rest_submit({"name": "mpi", "nodes": 2, "tasks_per_node": 1,
                           "current_working_directory": work,
                           "standard_output": out,
                           "environment": {"PATH": "/usr/bin:/bin"}},
                          f"#!/bin/sh\nsrun --mpi=pmix {prog}\n")
        f = wait_ended(jid)
        tasks, text = task_lines(out.replace("%j", str(jid)))
        assert f["JobState"] == "COMPLETED", (f, text)
        assert sorted(t["rank"] for t in tasks) == ["0", "1"], text
        assert {t["host"] for t in tasks} == {"node1", "node2"}, text
        assert all(t["size"] == "2" and t["sum"] == "3" for t in tasks), text
        print("    " + ", ".join(f"rank {t['rank']} on {t['host']}: sum {t['sum']}"
                                  for t in sorted(tasks, key=lambda t: t["rank"])))

    def check_tasks_talk(self):
        """A task on node2 opens a TCP connection to a task on node1 at
        node1's address (what MPI's TCP transport does between nodes)."""
        addr1 = node_addrs()["node1"]
        prog = write_script("talk.py", f"""#!/usr/bin/python3
import os, socket, time
rank = int(os.environ["SLURM_PROCID"])
if rank == 0:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("{addr1}", 47213))
    s.listen(1)
    s.settimeout(30)
    c, peer = s.accept()
    c.sendall(("hello from " + socket.gethostname()).encode())
    c.close()
    print("task rank=0 host=" + socket.gethostname() + " peer=" + peer[0])
else:
    for _ in range(300):
        try:
            c = socket.create_connection(("{addr1}", 47213), timeout=2)
            break
        except OSError:
            time.sleep(0.1)
    got = c.recv(100).decode().replace(" ", "_")
    print("task rank=1 host=" + socket.gethostname() + " got=" + got)
""")
        out = os.path.join(ENV["SLURM_WORK_DIR"], "talk-%j.out")
        jid = sbatch("-N2", "--ntasks-per-node=1", "-J", "talk", "-o", out,
                     "--wrap", f"srun {prog}")
        f = wait_ended(jid)
        tasks, text = task_lines(out.replace("%j", str(jid)))
        assert f["JobState"] == "COMPLETED", (f, text)
        by_rank = {t["rank"]: t for t in tasks}
        assert sorted(by_rank) == ["0", "1"], text
        assert by_rank["0"]["host"] == "node1", text
        assert by_rank["1"]["host"] == "node2", text
        assert by_rank["1"]["got"] == "hello_from_node1", text
        assert by_rank["0"]["peer"] == node_addrs()["node2"], text
        print(f"    node2 ({by_rank['0']['peer']}) -> node1 ({addr1}): "
              f"{by_rank['1']['got'].replace('_', ' ')!r}")

    def start_sleepers(self, name):
        """A 2-node job whose tasks sleep; returns its id and the tasks'
        PIDs by rank once both run."""
        work = ENV["SLURM_WORK_DIR"]
        body = ("#!/bin/sh\n"
                f"echo $$ > {work}/up.$SLURM_JOB_ID.$SLURM_PROCID\n"
                "exec sleep 300\n")
        task = write_script("sleeper.sh", body)
        out = os.path.join(work, name + "-%j.out")
        jid = sbatch("-N2", "--ntasks-per-node=1", "-J", name, "-o", out,
                     "--wrap", f"srun {task}")
        marks = [os.path.join(work, f"up.{jid}.{r}") for r in (0, 1)]
        wait_for(lambda: all(os.path.exists(m) and open(m).read().strip()
                             for m in marks), 60, "both tasks to start")
        assert job_fields(jid)["JobState"] == "RUNNING", job_fields(jid)
        return jid, {r: int(open(marks[r]).read()) for r in (0, 1)}

    def check_slurmd_loss(self):
        """node2's slurmd killed (its session alone) while a 2-node job
        runs: Slurm ends the job (NODE_FAIL) and rank 0 on node1; rank 1's
        task on node2 lives on, an orphan, until slurmd starts there
        again."""
        jid, pids = self.start_sleepers("slurmd-lost")
        t0 = time.time()
        run(CLUSTER, "kill-slurmd", DIR, "node2")
        f = wait_ended(jid, 90)
        took = time.time() - t0
        assert f["JobState"] == "NODE_FAIL", f
        assert "DOWN" in node_fields("node2").get("State", ""), node_fields("node2")
        wait_for(lambda: not os.path.exists(f"/proc/{pids[0]}"), 30,
                 f"rank 0's task (PID {pids[0]}) to end")
        # Slurm cannot reach node2's slurmstepd without its slurmd: the
        # task there is still running (what a caller must expect).
        assert os.path.exists(f"/proc/{pids[1]}"), "rank 1 ended with no slurmd"
        run(CLUSTER, "start-node", DIR, "node2")
        wait_for(lambda: not os.path.exists(f"/proc/{pids[1]}"), 30,
                 f"rank 1's orphaned task (PID {pids[1]}) to end")
        print(f"    job {jid}: NODE_FAIL {took:.1f} s after node2's slurmd "
              f"was killed; rank 0 ended, rank 1 ran on until slurmd "
              f"was back")

    def check_node_loss(self):
        """A node lost while a 2-node job runs: Slurm ends the job
        (NODE_FAIL) and its task on the other node; the other node keeps
        running jobs; the lost node comes back."""
        work = ENV["SLURM_WORK_DIR"]
        # Both tasks running (their PIDs written) before the node goes.
        jid, pids = self.start_sleepers("lost")
        t0 = time.time()
        run(CLUSTER, "kill-node", DIR, "node2")
        seen = {}

        def ended():
            f = job_fields(jid)
            st = f.get("JobState")
            if st != "RUNNING" and "left_running" not in seen:
                seen["left_running"] = time.time() - t0
            return f if st in ENDED else None
        f = wait_for(ended, 90, f"job {jid} to end after node2 was lost", 0.2)
        took = time.time() - t0
        node2 = node_fields("node2")
        assert f["JobState"] == "NODE_FAIL", f
        assert "DOWN" in node2.get("State", ""), node2
        # Rank 0's task (on node1, the surviving node) ends too: no rank
        # left running. (The nodes share the machine's PID namespace.)
        wait_for(lambda: not os.path.exists(f"/proc/{pids[0]}"), 30,
                 f"rank 0's task (PID {pids[0]}) to end")
        print(f"    job {jid}: RUNNING -> {f['JobState']} {took:.1f} s after "
              f"node2 was lost (left RUNNING at {seen['left_running']:.1f} s); "
              f"node2 {node2.get('State')}, rank 0's task ended")
        # The surviving node runs a job.
        task_path = write_script("task.sh", TASK)
        out1 = os.path.join(work, "survivor-%j.out")
        j1 = sbatch("-N1", "-w", "node1", "-J", "survivor", "-o", out1,
                    "--wrap", f"srun {task_path}")
        f1 = wait_ended(j1)
        tasks, text = task_lines(out1.replace("%j", str(j1)))
        assert f1["JobState"] == "COMPLETED", (f1, text)
        assert [t["host"] for t in tasks] == ["node1"], text
        # node2 comes back (ReturnToService=2) and a gang runs again.
        run(CLUSTER, "start-node", DIR, "node2")
        assert node_fields("node2").get("State") == "IDLE", node_fields("node2")
        out2 = os.path.join(work, "again-%j.out")
        j2 = sbatch("-N2", "--ntasks-per-node=1", "-J", "again", "-o", out2,
                    "--wrap", f"srun {task_path}")
        f2 = wait_ended(j2)
        tasks, text = task_lines(out2.replace("%j", str(j2)))
        assert f2["JobState"] == "COMPLETED", (f2, text)
        assert sorted(t["host"] for t in tasks) == ["node1", "node2"], text
        print(f"    node1 ran job {j1} meanwhile; node2 back IDLE and "
              f"job {j2} ran on both")


def main():
    global DIR
    order = ["check_nodes_idle", "check_rest_gang", "check_pmix",
             "check_tasks_talk", "check_mpi_allreduce", "check_node_loss",
             "check_slurmd_loss"]
    names = [n for n in dir(Suite) if n.startswith("check_")]
    assert sorted(order) == sorted(names), "a check is missing from the order"
    want = [n if n.startswith("check_") else "check_" + n
            for n in sys.argv[1:]] or order
    DIR = tempfile.mkdtemp(prefix="trainyard-slurm2-")
    os.chmod(DIR, 0o755)
    failed = []
    try:
        t0 = time.time()
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
        print(f"two-node cluster up in {time.time() - t0:.1f} s", flush=True)
        suite = Suite()
        for name in want:
            fn = getattr(suite, name)
            t1 = time.time()
            print(f"{name}: {fn.__doc__.splitlines()[0]}", flush=True)
            try:
                fn()
                print(f"  ok ({time.time() - t1:.1f} s)", flush=True)
            except Exception:
                failed.append(name)
                print("  FAILED", flush=True)
                traceback.print_exc()
                for log in sorted(os.listdir(os.path.join(DIR, "log"))):
                    if log.endswith(".log"):
                        with open(os.path.join(DIR, "log", log),
                                  errors="replace") as f:
                            print(f"---- {log} (last lines) ----\n"
                                  + "".join(f.readlines()[-10:]))
    finally:
        t2 = time.time()
        subprocess.run([CLUSTER, "stop", DIR], timeout=120)
        print(f"cluster stopped in {time.time() - t2:.1f} s")
        shutil.rmtree(DIR, ignore_errors=True)
    print(f"{len(want) - len(failed)} of {len(want)} checks passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
