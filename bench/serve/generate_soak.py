#!/usr/bin/python3
"""Generation soak: a trainyard server under steady streamed generation for
--minutes (10 by default), its resident memory sampled every --every
seconds. Issue 32 asks that a server under load hold flat memory: the
engine's cache is allocated once when a model's first request comes and
freed with its last, and a finished sequence's blocks go back to the pool.

The model is bench/serve/generate.py's "char" shape, trained briefly here;
c clients (--conc, 16 by default) send seeded sampled requests of 16 to 96
tokens with 16- to 32-byte prompts, one after another, half of them
streamed, and one in eight streamed ones is dropped after its first chunk
(the client leaves). With --deployed the model is deployed first (one
replica on the CPU) and the requests go to its replica, whose RSS is
sampled beside the server's. Not a test: `bench/serve/generate_soak.py
--binary build/trainyard [--deployed]`. Prints each sample (seconds, RSS in
MiB, requests done, generated tokens) and the RSS growth from the first
sample after warm-up to the last.
"""
import argparse
import http.client
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate as g  # noqa: E402  (the benchmark's server and corpus)


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def replica_pid(server_pid):
    """The pid of a `trainyard replica` process below server_pid, or None."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if len(argv) > 1 and argv[1] == b"replica" and ppid == server_pid:
            return int(d)
    return None


def deploy(ty, model):
    """Deploys model on one CPU replica as "soak"; waits until it is ready."""
    st, doc = ty.call("POST", "/v1/deployments", {
        "name": "soak", "model": model, "replicas": {"min": 1, "max": 1},
        "resources": {"gpu": "none"}})
    if st != 201:
        raise RuntimeError(f"deployment: {st} {doc}")
    for _ in range(600):
        st, d = ty.call("GET", f"/v1/deployments/{doc['id']}")
        if d and d.get("status") == "ready":
            return "soak"
        time.sleep(0.1)
    raise RuntimeError("the deployment did not become ready")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=os.path.join(g.ROOT, "build", "trainyard"))
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--every", type=float, default=30)
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--leave", type=float, default=0.125,
                    help="the share of streamed requests whose client leaves "
                         "after the first chunk")
    ap.add_argument("--stream", type=float, default=0.5,
                    help="the share of requests streamed")
    ap.add_argument("--deployed", action="store_true",
                    help="serve the model from a deployment's replica")
    a = ap.parse_args()
    text = g.corpus()
    ty = g.Trainyard(a.binary)
    stop = threading.Event()
    done = {"requests": 0, "tokens": 0, "errors": 0}
    lock = threading.Lock()

    def client(seed):
        rng = random.Random(seed)
        while not stop.is_set():
            plen, gen = rng.randint(16, 32), rng.randint(16, 96)
            at = rng.randrange(0, len(text) - plen)
            body = {"text_input": text[at:at + plen], "parameters": {
                "temperature": 0.8, "top_p": 0.95, "max_tokens": gen,
                "seed": rng.randrange(1 << 30)}}
            streamed = rng.random() < a.stream
            leave = streamed and rng.random() < a.leave
            c = http.client.HTTPConnection("127.0.0.1", ty.port, timeout=120)
            try:
                c.request("POST", f"/v2/models/{model}/generate" + ("_stream" if streamed else ""),
                          body=json.dumps(body).encode(),
                          headers={"Authorization": "Bearer " + ty.key,
                                   "Content-Type": "application/json"})
                r = c.getresponse()
                if r.status != 200:
                    r.read()
                    with lock:
                        done["errors"] += 1
                    continue
                if leave:
                    r.read1(64)
                    c.sock.close()
                    n = 0
                elif streamed:
                    data = r.read().decode()
                    last = json.loads(data.strip().split("\n\n")[-1][len("data: "):])
                    n = last.get("completion_tokens", 0)
                else:
                    r.read()
                    n = gen
                with lock:
                    done["requests"] += 1
                    done["tokens"] += n
            except (OSError, ValueError):
                with lock:
                    done["errors"] += 1
            finally:
                c.close()

    try:
        say = g.say
        model = ty.train(text, 40, g.SHAPES["char"])
        rep = None
        if a.deployed:
            model = deploy(ty, model)
            rep = replica_pid(ty.proc.pid)
            say(f"deployed: replica pid {rep}")
        say(f"cpu: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}, "
            f"{os.cpu_count()} cores; {a.conc} clients for {a.minutes} minutes")
        th = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.conc)]
        for t in th:
            t.start()
        t0 = time.time()
        samples = []
        while time.time() - t0 < a.minutes * 60:
            time.sleep(min(a.every, max(0.0, a.minutes * 60 - (time.time() - t0))))
            with lock:
                snap = dict(done)
            if rep and rss_mib(rep) != rss_mib(rep):  # NaN: it is gone
                now = replica_pid(ty.proc.pid)
                say(f"  the replica {rep} is gone; now {now}")
                rep = now
            s = (time.time() - t0, rss_mib(ty.proc.pid), snap["requests"], snap["tokens"], snap["errors"],
                 rss_mib(rep) if rep else float("nan"))
            samples.append(s)
            say(f"  {s[0]:6.0f} s  RSS {s[1]:7.1f} MiB" + (f"  replica {s[5]:7.1f} MiB" if rep else "") +
                f"  requests {s[2]:6d}  tokens {s[3]:8d}  errors {s[4]}")
        stop.set()
        for t in th:
            t.join(timeout=150)
        if len(samples) >= 2:
            first, last = samples[1 if len(samples) > 2 else 0], samples[-1]
            say(f"RSS from {first[0]:.0f} s to {last[0]:.0f} s: {first[1]:.1f} -> {last[1]:.1f} MiB "
                f"({last[1] - first[1]:+.1f}); max {max(x[1] for x in samples):.1f} MiB; "
                f"{last[2]} requests, {last[3]} tokens, {last[4]} errors")
            if rep:
                say(f"replica RSS from {first[0]:.0f} s to {last[0]:.0f} s: {first[5]:.1f} -> "
                    f"{last[5]:.1f} MiB ({last[5] - first[5]:+.1f}); max {max(x[5] for x in samples):.1f} MiB")
    finally:
        stop.set()
        ty.stop()


if __name__ == "__main__":
    main()
