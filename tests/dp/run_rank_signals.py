#!/usr/bin/env python3
"""run_rank_signals.py TRAINYARD - a data-parallel job's preemption signal
reaches no rank before its handlers are in.

The supervisor holds a preemption's SIGUSR1 until the worker's first line
(supervisor_preempt); for a gang that worker is mpirun, whose first line is
rank 0's, and mpirun hands the signal to every rank. A rank slower to start
than rank 0 used to die of it (default action), with no checkpoint. Here
rank 1 starts a second late (a shell sleeps, then execs the worker), and
SIGUSR1 goes to mpirun the moment rank 0's first line comes, as the
supervisor sends it. Rank 0 must say nothing before rank 1's handlers are
in (node/worker.c, ranks_ready): no rank may end on signal 10. The job
folder's job.json is a FIFO, so the workers wait there instead of training.
Skipped (77) without mpirun.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def workers_in(d):
    """The pids of the processes whose command line names folder d."""
    pids = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % e, "rb") as f:
                if d.encode() in f.read():
                    pids.append(int(e))
        except OSError:
            pass
    return pids


def release(p, d):
    """Ends the run: the workers waiting on job.json read its end (they
    fail on it and mpirun ends), else mpirun's group and any worker left
    (mpirun's daemon starts them outside its group) are killed."""
    fifo = os.path.join(d, "job.json")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (p.poll() is None or workers_in(d)):
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # no reader yet
        time.sleep(0.05)
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    for pid in workers_in(d):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def main():
    exe = sys.argv[1]
    if not shutil.which("mpirun"):
        print("SKIPPED: no mpirun")
        return 77
    d = tempfile.mkdtemp(prefix="ty-rank-signals-")
    os.mkfifo(os.path.join(d, "job.json"))
    env = dict(os.environ)
    if os.geteuid() == 0:  # the test machines run as root
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none",
           "-np", "1", exe, "worker", "--job-dir", d, ":",
           "-np", "1", "sh", "-c",
           'sleep 1; exec "$0" worker --job-dir "$1"', exe, d]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        first = p.stdout.readline()
        if not first:
            print("FAIL: mpirun printed nothing: %s" % p.stderr.read()[-500:])
            return 1
        os.kill(p.pid, signal.SIGUSR1)
        try:
            rc = p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
    finally:
        release(p, d)
        err = p.stderr.read()
        shutil.rmtree(d, ignore_errors=True)
    died = [l for l in err.splitlines() if "exited on signal" in l]
    if rc == 128 + signal.SIGUSR1 or died:
        print("FAIL: a rank died of the preemption's SIGUSR1 (mpirun exit "
              "%s): %s" % (rc, " ".join(died)[:300]))
        return 1
    print("ok: SIGUSR1 after rank 0's first line killed no rank (mpirun "
          "%s)" % ("exit %d" % rc if rc is not None else "still running"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
