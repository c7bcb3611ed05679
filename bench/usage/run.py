#!/usr/bin/python3
"""The usage accounting benchmark (issue 34): GET /v1/usage over a million
recorded intervals must answer in under 100 ms.

build/bench_usage fills a store with --intervals intervals (100 tenants,
90 days) and times the window query in the store; then a server is started
on that store and the same windows are asked through HTTP (one keep-alive
connection, the admin's key): median and slowest of --repeat requests,
in milliseconds, one JSON line each. The CPU's model is printed first.

    bench/usage/run.py [--build build] [--intervals 1000000] [--repeat 7]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--intervals", type=int, default=1000000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    bench = os.path.join(args.build, "bench_usage")
    binary = os.path.join(args.build, "trainyard")
    print(json.dumps({"cpu": cpu_model(), "cores": os.cpu_count()}), flush=True)
    data = tempfile.mkdtemp(prefix="usage-bench-")
    server = None
    try:
        subprocess.run([bench, "--data", data, "--intervals", str(args.intervals),
                        "--repeat", str(args.repeat)], check=True)
        server = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data", data,
             "--devices", "none"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = server.stdout.readline()
            if not line:
                break
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if not port:
            sys.exit("bench-usage: the server did not start")
        with open(os.path.join(data, "admin.key")) as f:
            key = f.read().strip()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        hdr = {"Authorization": "Bearer " + key}
        now = time.time()
        day = 86400
        queries = [
            ("7d by tenant", now - 7 * day, now, "tenant", ""),
            ("7d by day,kind", now - 7 * day, now, "day,kind", ""),
            ("7d by tenant,profile", now - 7 * day, now, "tenant,profile", ""),
            ("1d by tenant", now - day, now, "tenant", ""),
            ("1d by day", now - day, now, "day", ""),
            ("7d one tenant by day", now - 7 * day, now, "day",
             "&tenant=tn_bench042"),
            ("7d 60 days ago by tenant", now - 60 * day, now - 53 * day,
             "tenant", ""),
            ("7d by day,kind as CSV", now - 7 * day, now, "day,kind",
             "&format=csv"),
        ]
        for name, frm, to, group, extra in queries:
            path = "/v1/usage?from=%.3f&to=%.3f&group_by=%s%s" % (
                frm, to, group, extra)
            ms = []
            rows = 0
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                conn.request("GET", path, headers=hdr)
                r = conn.getresponse()
                body = r.read()
                ms.append((time.perf_counter() - t0) * 1000)
                if r.status != 200:
                    sys.exit("bench-usage: %s answered %d: %s" % (
                        path, r.status, body[:200]))
                if not extra.endswith("csv"):
                    rows = len(json.loads(body)["rows"])
                else:
                    rows = body.count(b"\n") - 1
            ms.sort()
            print(json.dumps({"query": name, "path": "http", "rows": rows,
                              "median_ms": round(ms[len(ms) // 2], 1),
                              "max_ms": round(ms[-1], 1)}), flush=True)
    finally:
        if server:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
