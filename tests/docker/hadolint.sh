#!/usr/bin/env bash
# hadolint (a real Dockerfile linter) over both Dockerfiles with the
# repository's .hadolint.yaml, after showing that this configuration still
# fails a Dockerfile that uses latest, an untagged image and ends as root.
# Exit 77 (skipped) when hadolint is not installed; `make venv` installs it
# (docker/requirements.txt).
#
#   tests/docker/hadolint.sh REPO_ROOT
set -euo pipefail
root=${1:?usage: hadolint.sh REPO_ROOT}
hl=${HADOLINT:-$root/.venv/bin/hadolint}
if [ ! -x "$hl" ]; then
  echo "SKIPPED: hadolint is not installed (make venv installs it from docker/requirements.txt)"
  exit 77
fi
cfg=$root/.hadolint.yaml
"$hl" --version

bad=$(mktemp)
trap 'rm -f "$bad"' EXIT
printf 'FROM ubuntu:latest AS a\nFROM debian\nUSER root\nCMD ["true"]\n' >"$bad"
out=$("$hl" --no-color --config "$cfg" "$bad" 2>&1) && {
  echo "FAIL: hadolint with $cfg passed a Dockerfile it must fail:"; echo "$out"; exit 1; }
for rule in DL3007 DL3006 DL3002; do
  grep -q "$rule" <<<"$out" || {
    echo "FAIL: $cfg lets $rule through:"; echo "$out"; exit 1; }
done

"$hl" --no-color --config "$cfg" "$root/docker/Dockerfile" "$root/docker/Dockerfile.cpu"
echo "ok: hadolint passes docker/Dockerfile and docker/Dockerfile.cpu"
