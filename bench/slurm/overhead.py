#!/usr/bin/env python3
"""What running a training job through Slurm costs, beside the local
executor, on the same machine in the same time window.

    make bench-slurm            (root: it starts tests/slurm/cluster.sh's
                                 single-node Slurm, runs this, stops it)

For each executor, REPEAT small jobs one after the other, each timed from
its POST /v1/jobs reply (polled every 10 ms):
  submit -> started   the worker's started line has reached the server
                      (placement.worker_saw); for Slurm also the moment
                      slurmrestd accepted the submission (its job id)
  submit -> done      the job succeeded (its model registered)
Then one job with a 0.5M-parameter MLP over 4 epochs, whose checkpoints
(3.2 MB with Adam's state) the remote worker uploads after each epoch.
The remote worker prints its relay figures when it ends (round trip of each
POST of lines: a line's latency from the moment it reads it, since it posts
at once; each upload's time), read here from the Slurm job's output file.
A local worker writes its checkpoint in the server's folder and sends its
lines down a pipe: there is no transfer to time.
"""
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "slurm"))
import test_slurm as ts  # noqa: E402

REPEAT = int(os.environ.get("REPEAT", "5"))


def time_job(srv, key, ds, model, epochs):
    t0 = time.time()
    jid = srv.submit(key, ds, model, epochs, name="bench")
    t_slurm_running = t_started = None
    while True:
        doc = srv.job(key, jid)
        now = time.time()
        pl = doc.get("placement") or {}
        if t_slurm_running is None and (pl.get("slurm") or {}).get("job_id"):
            t_slurm_running = now - t0
        if t_started is None and pl.get("worker_saw"):
            t_started = now - t0
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            assert doc["status"] == "succeeded", doc
            return jid, doc, t_slurm_running, t_started, now - t0
        time.sleep(0.01)


def relay_figures(doc):
    sid = ts.slurm_id(doc)
    path = os.path.join(ts.ENV["SLURM_WORK_DIR"], f"trainyard-{sid}.out")
    for _ in range(50):
        try:
            text = open(path).read()
        except OSError:
            text = ""
        m = re.search(r"relay: (\d+) lines in (\d+) posts, round trip p50 ([\d.]+) ms "
                      r"p99 ([\d.]+) ms; (\d+) checkpoint uploads, (\d+) bytes, mean "
                      r"([\d.]+) ms, max ([\d.]+) ms; model (\d+) bytes in ([\d.]+) ms", text)
        if m:
            return [float(x) for x in m.groups()]
        time.sleep(0.1)
    raise SystemExit(f"no relay line in {path}")


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def main():
    ts.load_env()
    if not ts.BIN:
        sys.exit("TRAINYARD_BIN is not set")
    import tempfile
    tmp = tempfile.mkdtemp(prefix="trainyard-bench-slurm-")
    cpu = open("/proc/cpuinfo").read()
    model_name = re.search(r"model name\s*:\s*(.*)", cpu)
    print(f"CPU: {model_name.group(1) if model_name else '?'}, {os.cpu_count()} cores")
    rows = {}
    relay = None
    for executor in ("local", "slurm"):
        srv = ts.Server(os.path.join(tmp, executor), executor=executor).start()
        try:
            key = srv.tenant("bench")
            small = srv.upload_csv(key, "small", ts.blobs_csv(300, 1))
            big = srv.upload_csv(key, "big", ts.blobs_csv(12000, 2))
            runs = [time_job(srv, key, small, ts.FAST_MODEL, 2) for _ in range(REPEAT)]
            rows[executor] = (med([r[2] for r in runs]), med([r[3] for r in runs]),
                              med([r[4] for r in runs]))
            jid, doc, _, _, total = time_job(srv, key, big, ts.SLOW_MODEL, 4)
            rows[executor + "-big"] = total
            if executor == "slurm":
                relay = relay_figures(doc)
        finally:
            srv.stop()
    print(f"\n{REPEAT} small jobs each (median), then one 4-epoch job with 3 MB checkpoints")
    print(f"{'':34s}{'local':>12s}{'slurm':>12s}{'slurm - local':>16s}")
    names = ["submit -> sbatch'd (Slurm id) (s)", "submit -> worker started (s)", "submit -> succeeded (s)"]
    for i, name in enumerate(names):
        lo, sl = rows["local"][i], rows["slurm"][i]
        lo_s = "-" if lo is None or lo != lo else f"{lo:.3f}"
        diff = "" if lo is None or lo != lo else f"{sl - lo:+.3f}"
        print(f"{name:34s}{lo_s:>12s}{sl:>12.3f}{diff:>16s}")
    print(f"{'4-epoch job, submit -> done (s)':34s}{rows['local-big']:>12.3f}"
          f"{rows['slurm-big']:>12.3f}{rows['slurm-big'] - rows['local-big']:>+16.3f}")
    lines, posts, p50, p99, nck, ckb, ckmean, ckmax, mb, mms = relay
    print(f"\nremote worker relay (the 4-epoch job): {int(lines)} lines in {int(posts)} POSTs, "
          f"line latency (POST round trip) p50 {p50:.2f} ms, p99 {p99:.2f} ms "
          f"(local: a pipe, no transfer)")
    print(f"checkpoint uploads: {int(nck)}, {ckb / max(nck, 1) / 1e6:.1f} MB each, "
          f"mean {ckmean:.1f} ms, max {ckmax:.1f} ms; model {mb / 1e6:.1f} MB in {mms:.1f} ms "
          f"(local: written in place)")


if __name__ == "__main__":
    main()
