#!/usr/bin/env bash
# make bench-slurm: tests/slurm/cluster.sh's single-node Slurm, then
# overhead.py (local beside slurm), then every daemon stopped by PID.
set -uo pipefail
bin=${1:?usage: run.sh path/to/trainyard}
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../../tests/slurm/cluster.sh
dir=$(mktemp -d /tmp/trainyard-bench-slurm.XXXXXX)
trap '"$cluster" stop "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT
"$cluster" start "$dir" >/dev/null || exit $?
install -m 0755 "$bin" "$dir/bin/trainyard"
TRAINYARD_SLURM_ENV=$dir/env TRAINYARD_BIN=$dir/bin/trainyard \
  /usr/bin/python3 "$here/overhead.py"
