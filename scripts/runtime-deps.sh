#!/usr/bin/env bash
# Derives the Debian/Ubuntu packages a built binary needs at run time, from
# the binary itself: every shared library ldd resolves is mapped to the
# package that owns it (dpkg -S). The Docker images' build stage writes this
# list and the final stage installs it with `scripts/setup.sh runtime FILE`,
# so the runtime image gets exactly the libraries the binary links, under the
# names of the distribution it was built on (Debian 12's libcurl4 is Ubuntu
# 24.04's libcurl4t64: the list is never written by hand).
#
#   scripts/runtime-deps.sh [--unpackaged-ok PREFIX]... BINARY
#
# Prints one package per line, sorted, after comment lines. Fails (exit 1)
# when a library does not resolve ("not found"), or when one belongs to no
# package and lies under no --unpackaged-ok PREFIX (e.g. a CUDA toolkit
# installed from a tarball in /usr/local/cuda: such libraries are listed as
# comments, and the runtime must provide them some other way).
set -euo pipefail

usage() { echo "usage: $0 [--unpackaged-ok PREFIX]... BINARY" >&2; exit 64; }

ok_prefixes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --unpackaged-ok)
      [ $# -ge 2 ] && [ -n "$2" ] || usage
      ok_prefixes+=("${2%/}"); shift 2 ;;
    -h|--help) usage ;;
    -*) echo "$0: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || usage
bin=$1
if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
  echo "$0: $bin is not an executable file" >&2
  exit 1
fi
command -v ldd >/dev/null && command -v dpkg >/dev/null || {
  echo "$0: needs ldd and dpkg (a Debian or Ubuntu system)" >&2; exit 1; }

ldd_out=$(ldd "$bin" 2>&1) || {
  echo "$0: ldd $bin failed: $ldd_out" >&2; exit 1; }

# The package owning a file, or nothing. dpkg records a file under the path
# its package shipped, which on merged-/usr systems may be /lib/... or
# /usr/lib/... whatever ldd printed, and alternatives (OpenBLAS) are symlinks
# no package owns: try the path, its other /usr form, then the real file.
# One dpkg -S call answers for every candidate path (it is slow per call).
candidates() {
  local p cand real
  real=$(readlink -f "$1")
  for p in "$1" "$real"; do
    for cand in "$p" "${p#/usr}" "/usr$p"; do
      [ -n "$cand" ] && [ "${cand:0:1}" = / ] && echo "$cand"
    done
  done
}
declare -A owners=()
load_owners() {
  local line path
  # "pkg1:amd64, pkg2: /path"; files no package owns only print to stderr.
  while IFS= read -r line; do
    case "$line" in "diversion by"*) continue ;; *": /"*) ;; *) continue ;; esac
    path="/${line#*: /}"
    [ -n "${owners[$path]+x}" ] && continue
    owners[$path]=$(echo "${line%%: /*}" | tr ',' '\n' | sed 's/^ *//; s/:[a-z0-9_]*$//')
  done < <(dpkg -S "$@" 2>/dev/null || true)
}
owner() {
  local cand
  while IFS= read -r cand; do
    if [ -n "${owners[$cand]+x}" ]; then echo "${owners[$cand]}"; return 0; fi
  done < <(candidates "$1")
  return 1
}

under_ok_prefix() {
  local f real pre
  real=$(readlink -f "$1")
  for pre in "${ok_prefixes[@]+"${ok_prefixes[@]}"}"; do
    local pre_real
    pre_real=$(readlink -f "$pre" 2>/dev/null || echo "$pre")
    for f in "$1" "$real"; do
      case "$f" in "$pre"/*|"$pre_real"/*) return 0 ;; esac
    done
  done
  return 1
}

libs=()
paths=()
bad=0
while IFS= read -r line; do
  line=${line#"${line%%[![:space:]]*}"}
  [ -n "$line" ] || continue
  case "$line" in
    linux-vdso.so*|linux-gate.so*) continue ;;          # the kernel's, no file
    *"=> not found"*)
      echo "$0: ${line%% *} does not resolve (ldd: not found)" >&2
      bad=1; continue ;;
    *" => "*) lib=${line%% *}; path=${line#* => }; path=${path%% (*} ;;
    /*) path=${line%% (*}; lib=$(basename "$path") ;;
    *) continue ;;                                      # statically linked, etc.
  esac
  libs+=("$lib"); paths+=("$path")
done <<<"$ldd_out"

all_candidates=()
for path in "${paths[@]+"${paths[@]}"}"; do
  while IFS= read -r c; do all_candidates+=("$c"); done < <(candidates "$path")
done
[ ${#all_candidates[@]} -gt 0 ] && load_owners "${all_candidates[@]}"

pkgs=()
notes=()
for i in "${!paths[@]}"; do
  lib=${libs[$i]}; path=${paths[$i]}
  if own=$(owner "$path"); then
    while IFS= read -r p; do [ -n "$p" ] && pkgs+=("$p"); done <<<"$own"
  elif under_ok_prefix "$path"; then
    notes+=("# unpackaged: $lib ($path)")
  else
    echo "$0: $lib ($path) belongs to no package; pass --unpackaged-ok PREFIX if the runtime provides it another way" >&2
    bad=1
  fi
done
[ "$bad" -eq 0 ] || exit 1
[ ${#pkgs[@]} -gt 0 ] || { echo "$0: no packaged library found for $bin" >&2; exit 1; }

distro=unknown
[ -r /etc/os-release ] && distro=$(. /etc/os-release && echo "${PRETTY_NAME:-$ID}")
echo "# Runtime packages of $(basename "$bin"), derived by scripts/runtime-deps.sh"
echo "# from its shared libraries on $distro."
for n in "${notes[@]+"${notes[@]}"}"; do echo "$n"; done
printf '%s\n' "${pkgs[@]}" | sort -u
