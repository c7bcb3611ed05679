#!/usr/bin/env bash
# The Slurm suite (label slurm): a real single-node Slurm started by
# cluster.sh, the slurmrestd client's live test against it, then
# `trainyard serve --executor slurm` through the checks of test_slurm.py.
# Every daemon it started is stopped by PID on the way out.
#
#   tests/slurm/run.sh path/to/trainyard path/to/test_slurmrest_live [check ...]
#
# Exit 77 (skipped) when not root (slurmd and the fake GPU devices need it).
set -uo pipefail
bin=${1:?usage: run.sh path/to/trainyard path/to/test_slurmrest_live [check ...]}
live=${2:?usage: run.sh path/to/trainyard path/to/test_slurmrest_live [check ...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/trainyard-slurm.XXXXXX)
cleanup() {
  "$here/cluster.sh" stop "$dir" >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT
"$here/cluster.sh" start "$dir" >/dev/null
rc=$?
if [ $rc -eq 77 ]; then exit 77; fi
if [ $rc -ne 0 ]; then echo "run.sh: the cluster did not start" >&2; exit 1; fi
# The job user (nobody) runs the worker: a copy it can read and execute.
install -m 0755 "$bin" "$dir/bin/trainyard"
export TRAINYARD_SLURM_ENV=$dir/env TRAINYARD_BIN=$dir/bin/trainyard
echo "== the slurmrestd client against the live cluster"
"$live" || exit 1
echo "== trainyard serve --executor slurm"
/usr/bin/python3 "$here/test_slurm.py" "$@"
