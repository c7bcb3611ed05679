#!/usr/bin/env python3
"""run_dp.py DP_TRAIN - data-parallel training on CPU ranks (issue 33).

Checks, with dp_comm and dp_train (tests/dp/) run alone and under
`mpirun -np 2`:
  0. the seam's engines on their own (dp_comm.c): self, and MPI's
     all-reduce, buckets, broadcast, barrier, in-flight limit and abort;
  1. equivalence: 2 ranks at global batch 128 step as 1 process at batch
     128 (same seed and data, Fashion-MNIST's MLP, 200 steps): every step's
     loss within 1e-4 relative, the same test accuracy to 3 decimals, and
     each run's peak memory equal to its estimate (one rank's at world 2);
  2. an uneven last minibatch (1001 examples, batch 128: the last 105 rows
     split 52/53), an empty share (1 example, batch 2), accumulation
     (batch 64, 2 minibatches a step) and
     clip_grad_norm (the global norm) step the same at world 1 and 2;
     each of the 2-rank runs of 1 and 2 but the uneven one also runs with
     the overlap off (TRAINYARD_DP_OVERLAP=0): every step's loss is the
     same with the buckets all-reduced during the backward pass and after;
  3. a checkpoint written by 2 ranks, resumed by 1 process, continues the
     same global batches (its losses are the straight 1-process run's);
     the parameter check (TRAINYARD_DP_CHECK_EVERY) passes on the
     equivalence run and fails a run whose rank 1 has another learning
     rate;
  4. a batch_size not divisible by the world size fails on both ranks,
     naming hyperparameters.batch_size; a cancel that one rank sees (its
     job.stop) stops both at the step they agree on;
  5. a rank killed with SIGKILL mid-run: mpirun and both ranks are gone
     within BOUND seconds, with a failure status;
  6. a rank stopped (SIGSTOP) mid-run: the other rank fails on its own
     with the collective timeout's error instead of waiting for ever.
Exits 77 (skipped) without mpirun, the MPI engine or the data.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

BOUND = 60.0  # seconds a gang may take to be gone after a rank dies
REL = 1e-4


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def mpi_env():
    env = dict(os.environ)
    if os.geteuid() == 0:  # the test machines run as root
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    # The sanitizer build: Open MPI's runtime keeps allocations to the end
    # (its plugins, unloaded by then, leave them unattributable), so leak
    # checks of MPI ranks report Open MPI's own; every other check stays on,
    # and the single-process runs keep leak checking.
    env["ASAN_OPTIONS"] = ":".join(
        x for x in (os.environ.get("ASAN_OPTIONS", ""), "detect_leaks=0") if x)
    return env


def plain_env():
    return dict(os.environ)


def mpirun_cmd(n, args):
    # --oversubscribe: 2 ranks on a 2-core machine count as too many slots
    # when Open MPI reserves one for itself.
    return ["mpirun", "-np", str(n), "--oversubscribe"] + args


def run(cmd, what, expect_rc=0):
    env = mpi_env() if cmd[0] == "mpirun" else plain_env()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=240)
    if p.returncode == 77:
        print(p.stdout.strip().splitlines()[-1])
        sys.exit(77)
    if expect_rc is not None and p.returncode != expect_rc:
        fail("%s: exit %d\nstdout:\n%s\nstderr:\n%s" %
             (what, p.returncode, p.stdout, p.stderr))
    return p


def parse(path):
    steps, info = {}, {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if w[0] == "step":
                steps[int(w[1])] = float(w[2])
            else:
                info[w[0]] = w[1:]
    return steps, info


def compare(a_path, b_path, n_steps, what):
    a, ai = parse(a_path)
    b, bi = parse(b_path)
    if sorted(a) != list(range(1, n_steps + 1)) or sorted(b) != sorted(a):
        fail("%s: steps reported: %d alone, %d with 2 ranks (want %d)" %
             (what, len(a), len(b), n_steps))
    worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
    print("%s: %d steps, worst relative loss difference %.3g" %
          (what, n_steps, worst))
    if not worst <= REL:
        bad = [s for s in sorted(a) if abs(a[s] - b[s]) / abs(a[s]) > REL]
        fail("%s: step %d loss %.9g alone, %.9g with 2 ranks" %
             (what, bad[0], a[bad[0]], b[bad[0]]))
    acc_a, acc_b = float(ai["accuracy"][0]), float(bi["accuracy"][0])
    print("%s: test accuracy %.4f alone, %.4f with 2 ranks" %
          (what, acc_a, acc_b))
    if round(acc_a, 3) != round(acc_b, 3):
        fail("%s: accuracy differs at 3 decimals" % what)
    for name, info in (("alone", ai), ("2 ranks", bi)):
        peak, est = int(info["peak"][0]), int(info["peak"][2])
        if peak != est:
            fail("%s %s: peak memory %d, estimate %d" % (what, name, peak,
                                                         est))
    if bi["world"][0] != "2" or ai["world"][0] != "1":
        fail("%s: world sizes reported %s and %s" %
             (what, ai["world"][0], bi["world"][0]))
    if not float(bi["world"][2]) > 0:
        fail("%s: no all-reduce time recorded at world 2" % what)


def same_losses(on_path, off_path, what):
    """The overlapped all-reduce (buckets started from the backward pass)
    and the one after it reduce the same buckets: every step's loss is
    the same (within 1e-6 relative; in practice bit for bit)."""
    a, _ = parse(on_path)
    b, _ = parse(off_path)
    if not a or sorted(a) != sorted(b):
        fail("%s: steps reported %d with the overlap, %d without" %
             (what, len(a), len(b)))
    worst = max(abs(a[s] - b[s]) / max(abs(a[s]), 1e-30) for s in a)
    print("%s: overlap on and off, %d steps, worst relative loss "
          "difference %.3g" % (what, len(a), worst))
    if not worst <= 1e-6:
        bad = [s for s in sorted(a) if a[s] != b[s]]
        fail("%s: step %d loss %.9g with the overlap, %.9g without" %
             (what, bad[0], a[bad[0]], b[bad[0]]))


def overlap_off(dp, out, args, what):
    """2 ranks with TRAINYARD_DP_OVERLAP=0 (buckets all-reduced after the
    backward pass) into out."""
    run(mpirun_cmd(2, ["-x", "TRAINYARD_DP_OVERLAP=0", dp, "--mpi", "--out",
                       out] + args), what + ", overlap off")


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def start_gang(dp, out, extra):
    cmd = mpirun_cmd(2, [dp, "--mpi", "--out", out, "--steps", "100000000"] +
                     extra)
    p = subprocess.Popen(cmd, env=mpi_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    pids, lines, errs = {}, [], []

    def reader(stream, sink):
        for line in stream:
            sink.append(line)
            m = re.match(r"rank (\d+) of \d+ pid (\d+)", line)
            if m:
                pids[int(m.group(1))] = int(m.group(2))

    for s, sink in ((p.stdout, lines), (p.stderr, errs)):
        threading.Thread(target=reader, args=(s, sink), daemon=True).start()
    return p, pids, errs


def wait_steps(p, out, n):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if p.poll() is not None:
            return False
        try:
            with open(out) as f:
                if sum(1 for l in f if l.startswith("step ")) >= n:
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def cleanup(p, pids):
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def gang_gone(p, pids, bound):
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if p.poll() is not None and not any(pid_alive(x) for x in
                                            pids.values()):
            return True
        time.sleep(0.05)
    return False


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    dp = sys.argv[1]
    if not shutil.which("mpirun"):
        print("SKIPPED: no mpirun (Debian: openmpi-bin)")
        return 77
    tmp = tempfile.mkdtemp(prefix="ty_dp_")
    try:
        return checks(dp, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def engine_checks(dp):
    """0. The seam's engines alone (tests/dp/dp_comm.c): each rank prints
    PASS. mpirun's own status is not: the aborted comm leaves MPI
    unfinalized on purpose (its peers may be gone), which mpirun reports
    as a failure."""
    comm = os.path.join(os.path.dirname(dp), "dp_comm")
    p = run([comm], "the self engine")
    if p.stdout.strip() != "PASS":
        fail("the self engine: " + p.stdout)
    p = run(mpirun_cmd(2, [comm, "--mpi"]), "the MPI engine",
            expect_rc=None)
    lines = p.stdout.splitlines()
    if lines.count("PASS") != 2 or any(l.startswith("FAIL") for l in lines):
        fail("the MPI engine:\n" + p.stdout + p.stderr)
    print("engines: self and MPI (all-reduce, buckets, broadcast, barrier, "
          "in-flight limit, abort) pass")


def checks(dp, tmp):
    engine_checks(dp)
    one, two = os.path.join(tmp, "one.txt"), os.path.join(tmp, "two.txt")
    base = ["--threads", "1", "--train", "12800", "--steps", "200",
            "--batch", "128"]
    # 1. The equivalence target.
    run([dp, "--out", one] + base, "1 process")
    # The parameter check on every 10th step all along: the replicas stay
    # identical (it fails the run otherwise, see below).
    run(mpirun_cmd(2, ["-x", "TRAINYARD_DP_CHECK_EVERY=10", dp, "--mpi",
                       "--out", two] + base), "2 ranks")
    compare(one, two, 200, "batch 128")
    off = os.path.join(tmp, "off.txt")
    overlap_off(dp, off, base, "2 ranks")
    same_losses(two, off, "batch 128")
    _, info = parse(two)
    print("2 ranks: all-reduce %.4f s, %.1f%% of step time" %
          (float(info["world"][2]), 100 * float(info["world"][4])))

    # 2. An uneven last minibatch, and accumulation.
    uneven = ["--threads", "1", "--train", "1001", "--steps", "20",
              "--batch", "128"]
    run([dp, "--out", one] + uneven, "1 process, 1001 examples")
    run(mpirun_cmd(2, [dp, "--mpi", "--out", two] + uneven),
        "2 ranks, 1001 examples")
    compare(one, two, 20, "1001 examples (uneven last batch)")
    # 1 example, batch 2: rank 0's share is empty every step (it joins the
    # all-reduce with zero gradients).
    tiny = ["--threads", "1", "--train", "1", "--steps", "3", "--batch", "2"]
    run([dp, "--out", one] + tiny, "1 process, 1 example")
    run(mpirun_cmd(2, [dp, "--mpi", "--out", two] + tiny),
        "2 ranks, 1 example")
    compare(one, two, 3, "1 example (an empty share)")
    # Rank 0 runs no backward pass: it starts every bucket after, rank 1
    # from its backward pass, in the same order.
    overlap_off(dp, off, tiny, "2 ranks, 1 example")
    same_losses(two, off, "1 example (an empty share)")
    accum = ["--threads", "1", "--train", "3000", "--steps", "30",
             "--batch", "64", "--accum", "2"]
    run([dp, "--out", one] + accum, "1 process, accumulation")
    run(mpirun_cmd(2, [dp, "--mpi", "--out", two] + accum),
        "2 ranks, accumulation")
    compare(one, two, 30, "accumulation_steps 2")
    # Only the step's last minibatch starts buckets from its backward pass.
    overlap_off(dp, off, accum, "2 ranks, accumulation")
    same_losses(two, off, "accumulation_steps 2")
    # Clipping on the global norm (0.5 clips every step here: a rank's own
    # gradient norm would clip differently).
    clip = ["--threads", "1", "--train", "3000", "--steps", "30",
            "--batch", "128", "--clip", "0.5"]
    run([dp, "--out", one] + clip, "1 process, clip_grad_norm")
    run(mpirun_cmd(2, [dp, "--mpi", "--out", two] + clip),
        "2 ranks, clip_grad_norm")
    compare(one, two, 30, "clip_grad_norm 0.5")

    # 3. A checkpoint of 2 ranks resumed by 1 process continues the same
    # global batches: its steps are the straight run's. The 2 ranks stop
    # at max_steps 15, in the middle of the second 10-step epoch: their
    # checkpoint keeps that position (it once said "epoch 2 finished" and
    # the resume failed with "inconsistent position").
    ckpt = os.path.join(tmp, "ckpt")
    short = ["--threads", "1", "--train", "1280", "--batch", "128"]
    run([dp, "--out", one, "--steps", "25"] + short, "1 process, 25 steps")
    run(mpirun_cmd(2, [dp, "--mpi", "--out", two, "--steps", "15",
                       "--ckpt", ckpt] + short), "2 ranks, 15 steps")
    third = os.path.join(tmp, "resumed.txt")
    run([dp, "--out", third, "--steps", "25", "--ckpt", ckpt] + short,
        "1 process resuming at step 15")
    a, _ = parse(one)
    b, _ = parse(third)
    if sorted(b) != list(range(16, 26)):
        fail("resume: the resumed run reported steps %r" % sorted(b))
    worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
    print("resume at world 1 from a world-2 checkpoint: steps 16-25, worst "
          "relative loss difference %.3g" % worst)
    if not worst <= REL:
        fail("resume: losses differ from the straight run's")

    # The parameter check catches replicas that drift apart (here rank 1
    # steps with another learning rate).
    p = run(mpirun_cmd(2, ["-x", "TRAINYARD_DP_CHECK_EVERY=5", dp, "--mpi",
                           "--out", two, "--lr-rank1", "0.002", "--steps",
                           "20", "--train", "1280"]),
            "2 ranks, rank 1 misconfigured", expect_rc=None)
    errs = [l for l in p.stderr.splitlines() if ": error: " in l]
    if p.returncode == 0 or not errs or not all(
            "parameters differ after step 5" in l for l in errs):
        fail("parameter check: exit %d, errors %r" % (p.returncode, errs))
    print("parameter check: " + errs[0])

    # 4. batch_size not divisible by the world size.
    p = run(mpirun_cmd(2, [dp, "--mpi", "--out", two, "--batch", "127",
                           "--steps", "5", "--train", "1000"]),
            "batch 127 on 2 ranks", expect_rc=None)
    errs = [l for l in p.stderr.splitlines() if ": error: " in l]
    if p.returncode == 0 or len(errs) != 2 or not all(
            "hyperparameters.batch_size" in l and "not divisible" in l
            for l in errs):
        fail("batch 127 on 2 ranks: exit %d, errors %r" % (p.returncode,
                                                          errs))
    print("batch 127 on 2 ranks: refused on both ranks: " + errs[0])

    # A cancel seen by one rank only (its stop flag): the ranks agree on it
    # at the next step and both stop there, cancelled, none waiting for the
    # other.
    out = os.path.join(tmp, "cancel.txt")
    p, pids, errs = start_gang(dp, out, ["--threads", "1", "--timeout",
                                         "120"])
    try:
        if not wait_steps(p, out, 20) or len(pids) != 2:
            fail("cancel: the gang did not start: %s" % "".join(errs))
        os.kill(pids[1], signal.SIGUSR1)
        if not gang_gone(p, pids, BOUND):
            fail("cancel: a rank still running %g s after rank 1's cancel" %
                 BOUND)
        time.sleep(0.5)  # the reader threads catch up
        msgs = sorted(l.strip() for l in errs if ": error: " in l)
        if len(msgs) != 2 or not all(
                re.match(r"rank [01]: error: training was cancelled", m)
                for m in msgs):
            fail("cancel: both ranks must stop cancelled: %r" % msgs)
        print("cancel on rank 1 only: both ranks stopped cancelled")
    finally:
        cleanup(p, pids)

    # 5. A rank killed mid-run.
    out = os.path.join(tmp, "kill.txt")
    p, pids, errs = start_gang(dp, out, ["--threads", "1", "--timeout",
                                         "20"])
    try:
        if not wait_steps(p, out, 20) or len(pids) != 2:
            fail("killed rank: the gang did not start: %s" % "".join(errs))
        os.kill(pids[1], signal.SIGKILL)
        if not gang_gone(p, pids, BOUND):
            fail("killed rank: rank 0 or mpirun still running %g s after "
                 "SIGKILL of rank 1" % BOUND)
        if p.returncode == 0:
            fail("killed rank: mpirun exited 0")
        print("killed rank: mpirun exit %d, both ranks gone" % p.returncode)
    finally:
        cleanup(p, pids)

    # 6. A rank stalled mid-run: the other gives up after its timeout.
    out = os.path.join(tmp, "stop.txt")
    p, pids, errs = start_gang(dp, out, ["--threads", "1", "--timeout", "3"])
    try:
        if not wait_steps(p, out, 20) or len(pids) != 2:
            fail("stalled rank: the gang did not start: %s" % "".join(errs))
        os.kill(pids[1], signal.SIGSTOP)
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline and pid_alive(pids[0]):
            time.sleep(0.05)
        if pid_alive(pids[0]):
            fail("stalled rank: rank 0 still waiting %g s after rank 1 "
                 "stopped (collective timeout 3 s)" % BOUND)
        time.sleep(0.5)  # the reader threads catch up
        msg = [l for l in errs if l.startswith("rank 0: error: ")]
        if not msg or "collective timeout" not in msg[0]:
            fail("stalled rank: rank 0's error: %r" % "".join(errs))
        print("stalled rank: " + msg[0].strip())
    finally:
        os.kill(pids[1], signal.SIGCONT) if pids.get(1) else None
        cleanup(p, pids)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
