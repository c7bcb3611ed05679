#!/usr/bin/env python3
"""run_devsim.py DP_TRAIN - the data-parallel trainer's device path (the
one a CUDA gang with NCCL takes: a backend that is not host visible, a
device engine) on a simulated device (tests/dp/devsim.h, dp_train
--devsim), against the ordinary 2-rank CPU run (issue 33).

  1. 2 devsim ranks step as 2 CPU ranks: every step's loss within 1e-6
     relative and the same test accuracy, with the parameter checksum
     compared every step (TRAINYARD_DP_CHECK_EVERY=1: the replicas stay
     identical); again with an uneven last minibatch, accumulation
     (2 minibatches a step) and clip_grad_norm (the device's norm).
     devsim fails the run on any host read of the device's memory that
     skips the seam (the step's scalars or a flag given to the device
     engine as host memory, a download or upload the wrong way);
     The same with an empty share (1 example, batch 2), and a checkpoint
     written by 2 devsim ranks at step 15 and resumed by 2 devsim ranks:
     steps 16-25 are the straight CPU run's;
  2. the checksum sees the device's parameters: a devsim rank 1 with
     another learning rate fails the run at the first check;
  3. ZeRO-1 on a device engine is refused on both ranks, naming
     hyperparameters.zero; so is the simulated device's backend with the
     plain (host) MPI engine.
Exits 77 (skipped) without mpirun, the MPI engine or the data.
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_dp import fail, mpirun_cmd, parse, run  # noqa: E402

REL = 1e-6


def same_run(dp, tmp, args, what):
    cpu, dev = os.path.join(tmp, "cpu.txt"), os.path.join(tmp, "dev.txt")
    run(mpirun_cmd(2, [dp, "--mpi", "--out", cpu] + args), what + ", CPU")
    run(mpirun_cmd(2, ["-x", "TRAINYARD_DP_CHECK_EVERY=1", dp, "--mpi",
                       "--devsim", "--out", dev] + args), what + ", devsim")
    a, ai = parse(cpu)
    b, bi = parse(dev)
    n = int(args[args.index("--steps") + 1])
    if sorted(a) != list(range(1, n + 1)) or sorted(b) != sorted(a):
        fail("%s: steps reported: %d CPU, %d devsim (want %d)" %
             (what, len(a), len(b), n))
    worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
    print("%s: %d steps, worst relative loss difference %.3g" %
          (what, n, worst))
    if not worst <= REL:
        s = [s for s in sorted(a) if abs(a[s] - b[s]) / abs(a[s]) > REL][0]
        fail("%s: step %d loss %.9g CPU, %.9g devsim" % (what, s, a[s], b[s]))
    if ai["accuracy"] != bi["accuracy"] or bi["world"][0] != "2":
        fail("%s: accuracy %s CPU, %s devsim (world %s)" %
             (what, ai["accuracy"][0], bi["accuracy"][0], bi["world"][0]))


def refused(p, what, want):
    errs = [l for l in p.stderr.splitlines() if ": error: " in l]
    if p.returncode == 0 or len(errs) != 2 or not all(
            all(w in l for w in want) for l in errs):
        fail("%s: exit %d, errors %r" % (what, p.returncode, errs))
    print("%s: %s" % (what, errs[0]))


def checks(dp, tmp):
    base = ["--threads", "1", "--train", "2560", "--steps", "30",
            "--batch", "128"]
    same_run(dp, tmp, base, "batch 128")
    same_run(dp, tmp, ["--threads", "1", "--train", "1001", "--steps", "12",
                       "--batch", "64", "--accum", "2", "--clip", "0.5"],
             "uneven, accumulation 2, clip 0.5")
    same_run(dp, tmp, ["--threads", "1", "--train", "1", "--steps", "3",
                       "--batch", "2"], "1 example (an empty share)")
    # A checkpoint written by 2 devsim ranks (the mirror downloaded on
    # rank 0, every rank agreeing on its outcome) and resumed by 2 devsim
    # ranks (the state broadcast through the mirror, then uploaded): steps
    # 16-25 are the straight CPU run's.
    short = ["--threads", "1", "--train", "1280", "--batch", "128"]
    ckpt = os.path.join(tmp, "ckpt")
    cpu, dev = os.path.join(tmp, "cpu.txt"), os.path.join(tmp, "dev.txt")
    run(mpirun_cmd(2, [dp, "--mpi", "--out", cpu, "--steps", "25"] + short),
        "CPU, 25 steps")
    run(mpirun_cmd(2, [dp, "--mpi", "--devsim", "--out", dev, "--steps",
                       "15", "--ckpt", ckpt] + short), "devsim, 15 steps")
    run(mpirun_cmd(2, ["-x", "TRAINYARD_DP_CHECK_EVERY=1", dp, "--mpi",
                       "--devsim", "--out", dev, "--steps", "25", "--ckpt",
                       ckpt] + short), "devsim, resuming at step 15")
    a, _ = parse(cpu)
    b, _ = parse(dev)
    if sorted(b) != list(range(16, 26)):
        fail("devsim resume: the resumed run reported steps %r" % sorted(b))
    worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
    print("devsim resume at step 15: steps 16-25, worst relative loss "
          "difference %.3g" % worst)
    if not worst <= REL:
        fail("devsim resume: losses differ from the straight CPU run's")
    out = os.path.join(tmp, "drift.txt")
    p = run(mpirun_cmd(2, ["-x", "TRAINYARD_DP_CHECK_EVERY=2", dp, "--mpi",
                           "--devsim", "--out", out, "--lr-rank1", "0.002",
                           "--steps", "6", "--train", "1280"]),
            "devsim, rank 1 misconfigured", expect_rc=None)
    refused(p, "devsim parameter check", ["parameters differ after step 2"])
    p = run(mpirun_cmd(2, [dp, "--mpi", "--devsim", "--out", out, "--zero",
                           "1", "--steps", "3", "--train", "1280"]),
            "devsim, zero 1", expect_rc=None)
    refused(p, "devsim zero 1",
            ["hyperparameters.zero", "ZeRO-1 runs on CPU ranks only"])
    p = run(mpirun_cmd(2, [dp, "--mpi", "--devsim-backend", "--out", out,
                           "--steps", "3", "--train", "1280"]),
            "devsim backend, MPI engine", expect_rc=None)
    refused(p, "devsim backend with the host engine",
            ["the mpi engine cannot carry the devsim backend's memory"])
    print("PASS")
    return 0


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not shutil.which("mpirun"):
        print("SKIPPED: no mpirun (Debian: openmpi-bin)")
        return 77
    tmp = tempfile.mkdtemp(prefix="ty_devsim_")
    try:
        return checks(sys.argv[1], tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
