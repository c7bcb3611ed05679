#!/usr/bin/env bash
# Installs the Debian packages trainyard needs. Used by `make run` (build),
# `make test` (test) and the Docker images, so all three install the same way.
#
#   scripts/setup.sh build   compiler, CMake, the libraries the binary links
#                            and Chart.js (the dashboard's charts): what the
#                            server needs, nothing of the test suite
#   scripts/setup.sh test    the above, plus CMocka, Python (for the contract
#                            test), jq and the Fashion-MNIST dataset (the
#                            README tutorial's test), Chromium with
#                            its driver and Selenium (the browser test),
#                            openssl (the HTTPS test's throwaway CA),
#                            debootstrap (the fresh-machine test), BLIS
#                            (a GEMM candidate that `make bench` compares)
#                            clang with its sanitizer and libFuzzer
#                            runtimes (the fuzz targets, `make test-fuzz`)
#                            and Slurm with munge and slurmrestd (the Slurm
#                            suite's clusters, tests/slurm; iproute2 for
#                            the two-node one's namespaces and veths)
#   scripts/setup.sh bench-serve   the build list, plus wrk, Python with
#                            venv, numpy and PyTorch (bench/serve/run.py)
#
# As root it installs what is missing with apt-get; as another user it runs
# apt-get through sudo when sudo is there, and otherwise prints the exact
# apt-get line to run and fails.
#
# When another apt or dpkg holds the package lock (on a freshly booted cloud
# instance unattended-upgrades or cloud-init usually does for a few minutes)
# it says so and waits for it, up to TRAINYARD_APT_LOCK_WAIT seconds (600).
#
# scripts/setup.sh runtime FILE installs only what a built binary needs to
# run (the Docker images' final stage): the packages FILE lists (one a line,
# # comments; written by scripts/runtime-deps.sh from the binary, so the
# names are the distribution's own), Chart.js (served at run time), CA
# certificates (https dataset URLs) and curl (the images' health check).
# The package names hold on Debian 12 and Ubuntu 24.04 alike (the build and
# test lists name -dev and arch-all packages, which the t64 renames left
# alone).
set -euo pipefail

mode=${1:-build}
build_pkgs=(build-essential cmake pkg-config libmicrohttpd-dev libjansson-dev
            libcurl4-openssl-dev libsqlite3-dev libopenblas-dev zlib1g-dev
            libjs-chart.js libopenmpi-dev openmpi-bin)
test_pkgs=(libcmocka-dev python3 python3-venv python3-numpy python3-torch python3-sklearn curl jq
           dataset-fashion-mnist python3-prometheus-client chromium
           chromium-driver python3-selenium python3-tinycss2 openssl debootstrap
           libblis4-serial clang libclang-rt-dev
           slurm-wlm slurmrestd slurm-wlm-jwt-plugin munge iproute2)

case "$mode" in
  build) want=("${build_pkgs[@]}") ;;
  test)  want=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
  bench-serve)
    want=("${build_pkgs[@]}" wrk python3 python3-venv python3-numpy python3-torch) ;;
  runtime)
    list=${2:-}
    if [ -z "$list" ] || [ ! -r "$list" ]; then
      echo "usage: $0 runtime FILE (a readable package list from scripts/runtime-deps.sh)" >&2
      exit 64
    fi
    want=(libjs-chart.js ca-certificates curl)
    while IFS= read -r p || [ -n "$p" ]; do
      p=${p%%#*}; p=${p//[[:space:]]/}
      [ -n "$p" ] || continue
      if ! [[ "$p" =~ ^[a-z0-9][a-z0-9+.-]+$ ]]; then
        echo "$0: $list: '$p' is not a Debian package name" >&2
        exit 65
      fi
      want+=("$p")
    done <"$list"
    ;;
  *) echo "usage: $0 build|test|bench-serve|runtime FILE" >&2; exit 64 ;;
esac

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "trainyard needs these Debian packages: ${missing[*]}" >&2
    echo "Install them as root with:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  sudo=(sudo)
fi

# apt-get with the package locks waited for: DPkg::Lock::Timeout covers
# only dpkg's lock (not `apt-get update`'s lists lock) and waits silently,
# so the wait is done here, for both, with a message.
lock_wait=${TRAINYARD_APT_LOCK_WAIT:-600}
apt_get() {
  local err deadline=$((SECONDS + lock_wait)) said=0 holder
  err=$(mktemp)
  while :; do
    if "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
         apt-get -o DPkg::Lock::Timeout=0 "$@" 2>"$err"; then
      cat "$err" >&2; rm -f "$err"; return 0
    fi
    if ! grep -qE 'Could not get lock|Unable to lock|Unable to acquire the dpkg' "$err"; then
      cat "$err" >&2; rm -f "$err"; return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      cat "$err" >&2; rm -f "$err"
      echo "$0: another package manager still held the apt/dpkg lock after ${lock_wait} s;" \
           "run this again when it has finished" >&2
      return 1
    fi
    if [ "$said" -eq 0 ]; then
      holder=$(grep -oE 'held by process [0-9]+( \([^)]*\))?' "$err" | head -n 1)
      echo "Another package manager is running (${holder:-the apt/dpkg lock is taken});" \
           "waiting for it to finish, up to ${lock_wait} s (TRAINYARD_APT_LOCK_WAIT)..." >&2
      said=1
    fi
    sleep 3
  done
}

echo "Installing: ${missing[*]}${sudo:+ (with sudo)}"
apt_get update -qq
apt_get install -y -qq --no-install-recommends "${missing[@]}"
