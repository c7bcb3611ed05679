#!/bin/sh
# fuzz.sh BIN_DIR CORPUS_DIR WORK_DIR SECONDS [TARGET...]
#
# Runs each fuzz target (all fuzz_* in BIN_DIR when none is named) for
# SECONDS under ASan+UBSan, one after the other. New corpus entries go to
# WORK_DIR/<target>/ (the first corpus folder libFuzzer writes to); the
# seeds of CORPUS_DIR/<target>/ (and CORPUS_DIR/../dict/<target>.dict)
# are only read. A crash leaves its input as
# WORK_DIR/<target>/crash-* and fails the run (exit 1).
set -eu
[ $# -ge 4 ] || { echo "usage: $0 BIN_DIR CORPUS_DIR WORK_DIR SECONDS [TARGET...]" >&2; exit 2; }
bin=$1 corpus=$2 work=$3 secs=$4
shift 4
if [ $# -eq 0 ]; then
  for f in "$bin"/fuzz_*; do
    [ -x "$f" ] && set -- "$@" "${f##*/fuzz_}"
  done
fi
[ $# -gt 0 ] || { echo "fuzz.sh: no fuzz targets in $bin (build them: make test-fuzz)" >&2; exit 2; }
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
fail=0
for t in "$@"; do
  exe="$bin/fuzz_$t"
  [ -x "$exe" ] || { echo "fuzz.sh: no target $t ($exe)" >&2; exit 2; }
  mkdir -p "$work/$t"
  seeds="$corpus/$t"
  [ -d "$seeds" ] || seeds=
  # A dictionary of the format's tokens, where one is written.
  dict=
  [ -f "$corpus/../dict/$t.dict" ] && dict="-dict=$corpus/../dict/$t.dict"
  echo "== fuzz_$t: $secs s"
  # -timeout: an input that takes 10 s is a hang (a finding);
  # -rss_limit_mb: so does one that takes 2 GB.
  if ! "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$work/$t/" -print_final_stats=1 $dict \
      "$work/$t" $seeds; then
    echo "fuzz.sh: fuzz_$t FAILED; the input is in $work/$t/ (crash-*, leak-*, timeout-*, oom-*)" >&2
    fail=1
  fi
done
exit $fail
