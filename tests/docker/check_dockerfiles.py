#!/usr/bin/env python3
"""The Dockerfiles' own rules, beside hadolint: pinned base images (no
latest, no bare name), a non-root final USER, and what the deploy docs rely
on: the health check on /healthz, the data volume, the port, and a
.dockerignore that keeps build output and keys out of the build context.
First checks the checker on Dockerfiles that break each rule.

    check_dockerfiles.py REPO_ROOT
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dockerfile as df  # noqa: E402

BAD = {
    "latest": "FROM debian:latest\nUSER 10001\n",
    "untagged": "FROM debian\nUSER 10001\n",
    "variable": "ARG BASE=debian:12\nFROM ${BASE}\nUSER 10001\n",
    "no user": "FROM debian:12.12-slim AS b\nFROM debian:12.12-slim\nCMD [\"x\"]\n",
    "root at the end": "FROM debian:12.12-slim\nUSER 10001\nUSER root\n",
    "user only in the build stage": "FROM debian:12.12-slim AS b\nUSER 10001\nFROM debian:12.12-slim\n",
    "copy from nowhere": "FROM debian:12.12-slim\nCOPY --from=bulid /x /x\nUSER 10001\n",
}
GOOD = ("FROM nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04 AS build\n"
        "FROM build AS more\nCOPY --from=build /a /a\n"
        "FROM debian:12.12-slim@sha256:" + "0" * 64 + "\nUSER 10001:10001\n")


def main():
    root = sys.argv[1]
    failed = []
    for what, text in BAD.items():
        if not df.problems(text):
            failed.append(f"self-test: a Dockerfile with '{what}' passed the check")
    if df.problems(GOOD):
        failed.append(f"self-test: a good Dockerfile failed: {df.problems(GOOD)}")

    for rel, devices in (("docker/Dockerfile", "auto"), ("docker/Dockerfile.cpu", "none")):
        text = open(os.path.join(root, rel)).read()
        failed += [f"{rel}: {p}" for p in df.problems(text)]
        final = df.stages(text)[-1]
        user = df.last(final, "USER") or ""
        if user != "10001:10001":
            failed.append(f"{rel}: the final USER is '{user}', not the fixed 10001:10001 the docs name")
        if df.last(final, "VOLUME") != '["/var/lib/trainyard"]':
            failed.append(f"{rel}: no VOLUME [\"/var/lib/trainyard\"] in the final stage")
        if df.last(final, "EXPOSE") != "8080":
            failed.append(f"{rel}: the final stage does not EXPOSE 8080")
        hc = df.healthcheck(final)
        if not hc or not any(a.endswith(":8080/healthz") for a in hc[1]):
            failed.append(f"{rel}: no HEALTHCHECK on :8080/healthz in the final stage")
        cmd = df.exec_form(df.last(final, "ENTRYPOINT") or "[]", "ENTRYPOINT") + \
            df.exec_form(df.last(final, "CMD") or "[]", "CMD")
        want = ["/usr/local/bin/trainyard", "serve", "--listen", "0.0.0.0:8080",
                "--data", "/var/lib/trainyard", "--devices", devices]
        if cmd != want:
            failed.append(f"{rel}: ENTRYPOINT+CMD is {cmd}, not {want}")
        steps = " ".join(a for _, k, a in sum((s["ins"] for s in df.stages(text)), []) if k == "RUN")
        for needed in ("scripts/setup.sh build", "scripts/runtime-deps.sh",
                       "setup.sh runtime", "-DTRAINYARD_CUDA=" + ("ON" if devices == "auto" else "OFF")):
            if needed not in steps:
                failed.append(f"{rel}: no RUN step uses '{needed}'")

    ignore = open(os.path.join(root, ".dockerignore")).read().split()
    for entry in ("build", "build-*", ".venv", "var", ".gpu-deps", "docker/secrets", ".git"):
        if entry not in ignore:
            failed.append(f".dockerignore: '{entry}' is not kept out of the build context")

    for f in failed:
        print("FAIL:", f)
    if failed:
        return 1
    print(f"ok: both Dockerfiles pass; the checker caught all {len(BAD)} broken examples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
