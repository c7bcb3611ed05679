#!/usr/bin/env python3
"""run_zero.py DP_TRAIN - ZeRO stage 1 (hyperparameters.zero 1) on CPU ranks.

With dp_train (tests/dp/) under `mpirun -np 2`, against the unsharded
2-rank run of the same job:
  1. Adam with clip_grad_norm 0.5 (clipping every step) and SGD with
     momentum 0.9 and clipping: the replicas' parameters stay identical
     (TRAINYARD_DP_CHECK_EVERY=5); every step's loss within 1e-5 relative (the
     arithmetic is the same element for element, so they come out equal),
     the same test accuracy; rank 0's optimizer state is half the unsharded
     run's (ceil(param_count / 2) parameters' slots: exactly what the
     estimate says), and its peak memory equals train_memory_estimate_rank's
     total with zero 1;
     Three ranks: a third of the state each, the same losses.
     Communication: rank 0's bytes by op (dp_train's comm_bytes, the ring
     measure of nn_comm_stats) over the step collectives (all-reduce,
     reduce-scatter, all-gather): zero 1 sends what zero 0 does (within
     2%), its gradients reduce-scattered, not all-reduced whole plus an
     all-gather (1.5 times zero 0's at any world size); with
     TRAINYARD_DP_REDUCE_SCATTER=0 (that fallback) the same losses and
     1.5 times the bytes.
  2. checkpoints: a zero=1 checkpoint at step 20 resumed by an unsharded
     2-rank run, an unsharded one resumed by a zero=1 run, and a zero=1 one
     resumed by 1 process all continue as the straight 25-step run (steps
     21-25 within 1e-5 relative);
  3. zero 1 at world 1 changes nothing (the same losses as zero 0 alone).
Exits 77 (skipped) without mpirun, the MPI engine or the data.
"""
import os
import shutil
import sys
import tempfile

from run_dp import fail, mpirun_cmd, parse, run

REL = 1e-5
# Fashion-MNIST's MLP in dp_train.c: 784-256-128-10.
PARAMS = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10


def same_losses(a_path, b_path, what, steps=None):
    a, ai = parse(a_path)
    b, bi = parse(b_path)
    keys = sorted(b) if steps is None else steps
    if not keys or sorted(b) != keys or any(s not in a for s in keys):
        fail("%s: steps %r against %r" % (what, sorted(b), sorted(a)))
    worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in keys)
    print("%s: %d steps, worst relative loss difference %.3g" %
          (what, len(keys), worst))
    if not worst <= REL:
        bad = [s for s in keys if abs(a[s] - b[s]) / abs(a[s]) > REL]
        fail("%s: step %d loss %.9g against %.9g" %
             (what, bad[0], a[bad[0]], b[bad[0]]))
    return ai, bi


def check_memory(plain, zero, slots, what):
    """Rank 0's optimizer state with zero 1 is its shard's, half the
    unsharded run's, and both runs' peaks are their estimates."""
    full = int(plain["optimizer_state"][0])
    shard = int(zero["optimizer_state"][0])
    want_full = slots * PARAMS * 4
    want_shard = slots * ((PARAMS + 1) // 2) * 4
    print("%s: optimizer state on rank 0: %d bytes unsharded, %d with zero 1 "
          "(%.3f of it)" % (what, full, shard, shard / full))
    if full != want_full or shard != want_shard:
        fail("%s: optimizer state %d and %d bytes, want %d and %d" %
             (what, full, shard, want_full, want_shard))
    for name, info in (("zero 0", plain), ("zero 1", zero)):
        if int(info["optimizer_state"][2]) != int(info["optimizer_state"][0]):
            fail("%s %s: optimizer state %s, estimate %s" %
                 (what, name, info["optimizer_state"][0],
                  info["optimizer_state"][2]))
        if int(info["peak"][0]) != int(info["peak"][2]):
            fail("%s %s: peak memory %s, estimate %s" %
                 (what, name, info["peak"][0], info["peak"][2]))
    if round(float(plain["accuracy"][0]), 3) != round(
            float(zero["accuracy"][0]), 3):
        fail("%s: accuracy %s unsharded, %s with zero 1" %
             (what, plain["accuracy"][0], zero["accuracy"][0]))


def check_comm(plain, zero, what):
    """zero 1's step traffic is zero 0's: reduce-scatter + all-gather
    (one all-reduce's worth), the gradients never all-reduced whole."""
    def step_bytes(info):
        c = info["comm_bytes"]
        by = dict(zip(c[0::2], (int(x) for x in c[1::2])))
        return by, by["allreduce"] + by["reduce_scatter"] + by["allgather"]
    pb, ptotal = step_bytes(plain)
    zb, ztotal = step_bytes(zero)
    print("%s: bytes sent by rank 0 (ring measure): zero 0 %d (all-reduce "
          "%d), zero 1 %d (all-reduce %d, reduce-scatter %d, all-gather %d): "
          "%.3f of zero 0's" % (what, ptotal, pb["allreduce"], ztotal,
                                zb["allreduce"], zb["reduce_scatter"],
                                zb["allgather"], ztotal / ptotal))
    if not 0.98 <= ztotal / ptotal <= 1.02:
        fail("%s: zero 1 sent %.3f times zero 0's bytes (%d against %d): "
             "its gradients must be reduce-scattered, not all-reduced" %
             (what, ztotal / ptotal, ztotal, ptotal))
    # The last epoch's record (train_epoch_metrics.comm_bytes): the same.
    pe, ze = (int(i["epoch_comm_bytes"][0]) for i in (plain, zero))
    print("%s: the last epoch's comm_bytes: zero 0 %d, zero 1 %d" %
          (what, pe, ze))
    if not (pe > 0 and 0.98 <= ze / pe <= 1.02):
        fail("%s: the last epoch's comm_bytes %d with zero 1, %d with "
             "zero 0" % (what, ze, pe))
    if zb["reduce_scatter"] == 0 or zb["allreduce"] > ptotal // 100:
        fail("%s: zero 1 all-reduced %d bytes and reduce-scattered %d" %
             (what, zb["allreduce"], zb["reduce_scatter"]))


def checks(dp, tmp):
    plain, zero = os.path.join(tmp, "plain.txt"), os.path.join(tmp, "zero.txt")

    # 1. Adam and SGD with momentum, clipping on the global norm.
    base = ["--threads", "1", "--train", "3000", "--steps", "40",
            "--batch", "128", "--clip", "0.5"]
    for what, opt, slots in (("adam", [], 2),
                             ("sgd momentum 0.9", ["--sgd-momentum", "0.9"],
                              1)):
        args = base + opt
        run(mpirun_cmd(2, [dp, "--mpi", "--out", plain] + args),
            "2 ranks, " + what)
        # The parameter check every 5 steps: the replicas stay identical
        # (each rank's slice travels to the others after every step).
        run(mpirun_cmd(2, ["-x", "TRAINYARD_DP_CHECK_EVERY=5", dp, "--mpi",
                           "--out", zero, "--zero", "1"] + args),
            "2 ranks zero 1, " + what)
        pi, zi = same_losses(plain, zero, "zero 1 against zero 0, " + what)
        check_memory(pi, zi, slots, what)
        check_comm(pi, zi, what)
    # The fallback (an engine without reduce_scatter_start, or
    # TRAINYARD_DP_REDUCE_SCATTER=0): gradients all-reduced whole, the same
    # losses, and half as many bytes again (what check_comm refuses).
    run(mpirun_cmd(2, ["-x", "TRAINYARD_DP_REDUCE_SCATTER=0", dp, "--mpi",
                       "--out", zero, "--zero", "1"] + base + opt),
        "2 ranks zero 1 without the reduce-scatter")
    pi, fi = same_losses(plain, zero, "zero 1 all-reduced against zero 0")
    ratio = sum(int(x) for x in fi["comm_bytes"][1:6:2]) / sum(
        int(x) for x in pi["comm_bytes"][1:6:2])
    print("zero 1 without the reduce-scatter: %.3f of zero 0's bytes" % ratio)
    if not 1.45 <= ratio <= 1.55:
        fail("zero 1 without the reduce-scatter sent %.3f of zero 0's bytes, "
             "want 1.5" % ratio)

    # Three ranks (batch 126): a third of the state each, the same losses.
    three = ["--threads", "1", "--train", "3000", "--steps", "30",
             "--batch", "126", "--clip", "0.5"]
    run(mpirun_cmd(3, [dp, "--mpi", "--out", plain] + three), "3 ranks")
    run(mpirun_cmd(3, ["-x", "TRAINYARD_DP_CHECK_EVERY=5", dp, "--mpi",
                       "--out", zero, "--zero", "1"] + three),
        "3 ranks zero 1")
    pi, zi = same_losses(plain, zero, "zero 1 against zero 0, 3 ranks")
    check_comm(pi, zi, "3 ranks")
    want = 2 * ((PARAMS + 2) // 3) * 4
    print("3 ranks: optimizer state on rank 0: %s bytes unsharded, %s with "
          "zero 1" % (pi["optimizer_state"][0], zi["optimizer_state"][0]))
    if int(zi["optimizer_state"][0]) != want or \
            int(zi["peak"][0]) != int(zi["peak"][2]):
        fail("3 ranks zero 1: optimizer state %s (want %d), peak %s, "
             "estimate %s" % (zi["optimizer_state"][0], want, zi["peak"][0],
                              zi["peak"][2]))

    # 2. Checkpoints across zero 0 and 1, and to world 1.
    short = ["--threads", "1", "--train", "1280", "--batch", "128",
             "--clip", "0.5"]
    straight = os.path.join(tmp, "straight.txt")
    run(mpirun_cmd(2, [dp, "--mpi", "--out", straight, "--steps", "25"] +
                   short), "2 ranks, 25 steps")
    for first, then, n in (("1", "0", 2), ("0", "1", 2), ("1", "0", 1)):
        ckpt = os.path.join(tmp, "ckpt_%s_%s_%d" % (first, then, n))
        run(mpirun_cmd(2, [dp, "--mpi", "--out", zero, "--steps", "20",
                           "--ckpt", ckpt, "--zero", first] + short),
            "2 ranks zero %s, 20 steps" % first)
        resumed = os.path.join(tmp, "resumed.txt")
        args = [dp, "--out", resumed, "--steps", "25", "--ckpt", ckpt,
                "--zero", then] + short
        run(mpirun_cmd(2, [args[0], "--mpi"] + args[1:]) if n == 2 else args,
            "%d rank(s) zero %s resuming" % (n, then))
        same_losses(straight, resumed,
                    "zero %s checkpoint resumed by %d rank(s) with zero %s" %
                    (first, n, then), steps=list(range(21, 26)))

    # 3. zero 1 alone is zero 0 alone.
    alone = ["--threads", "1", "--train", "1280", "--steps", "10",
             "--batch", "128"]
    run([dp, "--out", plain] + alone, "1 process")
    run([dp, "--out", zero, "--zero", "1"] + alone, "1 process, zero 1")
    pi, zi = same_losses(plain, zero, "zero 1 at world 1")
    if pi["optimizer_state"][0] != zi["optimizer_state"][0]:
        fail("zero 1 at world 1 changed the optimizer state's size")
    print("PASS")
    return 0


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not shutil.which("mpirun"):
        print("SKIPPED: no mpirun (Debian: openmpi-bin)")
        return 77
    tmp = tempfile.mkdtemp(prefix="ty_zero_")
    try:
        return checks(sys.argv[1], tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
