#!/usr/bin/env bash
# Installs the Debian packages trainyard needs. Used by `make run` (build),
# `make test` (test) and the Docker images, so all three install the same way.
#
#   scripts/setup.sh build   compiler, CMake, the libraries the binary links
#                            and Chart.js (the dashboard's charts)
#   scripts/setup.sh test    the above, plus CMocka, Python (for the contract
#                            test), the Fashion-MNIST dataset, Chromium with
#                            its driver and Selenium (the browser test) and
#                            openssl (the HTTPS test's throwaway CA)
#
# As root it installs what is missing with apt-get; otherwise it prints the
# exact apt-get line to run and fails.
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
            libjs-chart.js)
test_pkgs=(libcmocka-dev python3 python3-venv python3-numpy python3-torch curl
           dataset-fashion-mnist python3-prometheus-client chromium
           chromium-driver python3-selenium openssl)

case "$mode" in
  build) want=("${build_pkgs[@]}") ;;
  test)  want=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
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
  *) echo "usage: $0 build|test|runtime FILE" >&2; exit 64 ;;
esac

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "trainyard needs these Debian packages: ${missing[*]}" >&2
  echo "Install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "Installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
