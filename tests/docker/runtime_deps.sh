#!/usr/bin/env bash
# The images' runtime-dependency derivation against this build:
#  1. scripts/runtime-deps.sh fails on a library that does not resolve and on
#     one no package owns (unless under --unpackaged-ok), on throwaway
#     binaries built here;
#  2. on the real binary, every library ldd lists resolves and is a file of a
#     package in the derived list (checked the other way round, with
#     dpkg -L), or is a named unpackaged CUDA library under /usr/local/cuda
#     (this machine's toolkit comes from a tarball; NVIDIA's images install
#     it as packages, which the runtime base image already has);
#  3. scripts/setup.sh runtime on that list: as root it installs what is
#     missing, and then a second run is a silent no-op; a bad list is refused.
#
#   tests/docker/runtime_deps.sh REPO_ROOT TRAINYARD_BINARY
set -euo pipefail
root=${1:?usage: runtime_deps.sh REPO_ROOT BINARY}
bin=${2:?usage: runtime_deps.sh REPO_ROOT BINARY}
derive=$root/scripts/runtime-deps.sh
setup=$root/scripts/setup.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. Throwaway binaries: one linked to a library we delete, one to a library
#    of our own that no package owns.
mkdir -p "$tmp/lib"
printf 'int ty_probe(void) { return 7; }\n' >"$tmp/probe.c"
printf 'int ty_probe(void);\nint main(void) { return ty_probe() == 7 ? 0 : 1; }\n' >"$tmp/main.c"
cc -shared -fPIC -o "$tmp/lib/libtyprobe.so" "$tmp/probe.c"
cc -o "$tmp/uses-probe" "$tmp/main.c" -L"$tmp/lib" -ltyprobe -Wl,-rpath,"$tmp/lib"
"$tmp/uses-probe" || fail "the probe binary does not run"
if "$derive" "$tmp/uses-probe" >"$tmp/out" 2>"$tmp/err"; then
  fail "an unpackaged library was accepted: $(cat "$tmp/out")"
fi
grep -q "libtyprobe.so.*belongs to no package" "$tmp/err" || fail "unclear error: $(cat "$tmp/err")"
"$derive" --unpackaged-ok "$tmp/lib" "$tmp/uses-probe" >"$tmp/out" ||
  fail "--unpackaged-ok did not accept $tmp/lib"
grep -q "^# unpackaged: libtyprobe.so" "$tmp/out" || fail "the unpackaged library is not named"
grep -qx "libc6" "$tmp/out" || fail "libc6 is not in the probe's list: $(cat "$tmp/out")"
rm "$tmp/lib/libtyprobe.so"
if "$derive" --unpackaged-ok "$tmp/lib" "$tmp/uses-probe" >"$tmp/out" 2>"$tmp/err"; then
  fail "a library that does not resolve was accepted"
fi
grep -q "libtyprobe.so does not resolve" "$tmp/err" || fail "unclear error: $(cat "$tmp/err")"
echo "ok: runtime-deps.sh refuses unresolved and unowned libraries"

# 2. The real binary.
list=$tmp/runtime-packages.txt
"$derive" --unpackaged-ok /usr/local/cuda "$bin" >"$list"
echo "--- derived from $bin:"; cat "$list"; echo "---"
mapfile -t pkgs < <(grep -v '^#' "$list")
[ ${#pkgs[@]} -gt 0 ] || fail "empty package list"
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    fail "$p is listed but is not an installed package"
done
# Every file of every listed package, in both /usr forms and resolved.
dpkg -L "${pkgs[@]}" 2>/dev/null | grep '^/' | sort -u >"$tmp/files"
n=0
while read -r lib arrow path _; do
  case "$lib" in linux-vdso*|"") continue ;; esac
  if [ "$arrow" != "=>" ]; then path=$lib; lib=$(basename "$lib"); fi
  [ "$path" = "not" ] && fail "$lib does not resolve"
  real=$(readlink -f "$path")
  found=
  for c in "$path" "${path#/usr}" "/usr$path" "$real" "${real#/usr}" "/usr$real"; do
    if grep -qxF -- "$c" "$tmp/files"; then found=1; break; fi
  done
  if [ -z "$found" ]; then
    grep -qF "# unpackaged: $lib ($path)" "$list" ||
      fail "$lib ($path) is in no listed package and not named as unpackaged"
    case "$real" in /usr/local/cuda*) ;; *) fail "$lib ($real) is unpackaged outside /usr/local/cuda" ;; esac
  fi
  n=$((n + 1))
done < <(ldd "$bin")
[ "$n" -ge 6 ] || fail "ldd listed only $n libraries"
echo "ok: all $n libraries of $(basename "$bin") resolve to the ${#pkgs[@]} derived packages"

# 3. The setup script's runtime mode on that list.
printf 'libc6\nNot_A_Package\n' >"$tmp/bad.txt"
if "$setup" runtime "$tmp/bad.txt" >"$tmp/out" 2>&1; then fail "a bad package list was accepted"; fi
grep -q "not a Debian package name" "$tmp/out" || fail "unclear error: $(cat "$tmp/out")"
if "$setup" runtime >"$tmp/out" 2>&1; then fail "runtime mode without a list was accepted"; fi
if [ "$(id -u)" -eq 0 ]; then
  "$setup" runtime "$list"            # installs whatever is missing
fi
"$setup" runtime "$list" >"$tmp/out" 2>&1 || fail "setup.sh runtime failed: $(cat "$tmp/out")"
[ ! -s "$tmp/out" ] || fail "setup.sh runtime is not a no-op with everything present: $(cat "$tmp/out")"
test -r /usr/share/javascript/chart.js/chart.min.js || fail "Chart.js is not installed"
echo "ok: setup.sh runtime installs the list and is then a no-op"
