#!/usr/bin/env bash
# bench/gpu/prepare.sh - run HERE (a Debian machine with apt and network),
# before the GPU check: fetches what bench/gpu/run.sh needs on the device
# machine, which has nvcc, CMake and PyTorch but most likely none of the
# Debian development packages trainyard builds against, and no network.
#
# Writes into .gpu-deps/ at the repository root (ignored by git; the device
# tool carries it only when `carry` names it):
#   .gpu-deps/debs/*.deb       the -dev packages the build and the tests need
#                              (libmicrohttpd, jansson, libcurl, sqlite3,
#                              OpenBLAS, zlib, cmocka, pkgconf) and every
#                              shared library they load, at the versions
#                              installed on this machine (apt-get download:
#                              nothing is installed here). libc6, libgcc-s1
#                              and libstdc++6 are left out: the device has
#                              its own, newer ones, and they must not be
#                              shadowed.
#   .gpu-deps/fashion-mnist/   the Fashion-MNIST IDX files, when this machine
#                              has them (for the gpu convergence test, which
#                              reads $TY_FASHION_DIR); --no-fashion skips them.
#   .gpu-deps/MANIFEST         what is there and how big.
# run.sh unpacks the .debs with dpkg-deb -x into a private prefix under its
# build folder (never into /) and points pkg-config and CMake at it.
#
# The device tool carries at most 64 MiB (the tracked tree included): this
# script prints the total and fails if .gpu-deps/ alone passes
# GPU_DEPS_MAX_MB (default 60).
#
# Usage: bench/gpu/prepare.sh [--no-fashion]
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=$ROOT/.gpu-deps
FASHION_SRC=${TY_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
MAX_MB=${GPU_DEPS_MAX_MB:-60}
with_fashion=1
for a in "$@"; do
    case $a in
        --no-fashion) with_fashion=0 ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "prepare.sh: unknown argument $a (see --help)" >&2; exit 2 ;;
    esac
done

# What the build links (CMakeLists.txt's pkg_check_modules, tests' cmocka)
# and the pkg-config that finds them. libopenblas-dev is an empty
# metapackage on Debian; the pthread flavour is the one built against here.
DEV_PKGS=(pkgconf pkgconf-bin libpkgconf3 libmicrohttpd-dev libjansson-dev
          libcurl4-openssl-dev libsqlite3-dev libopenblas-pthread-dev
          zlib1g-dev libcmocka-dev)
# The shared libraries those link at run time; their dependencies are found
# with ldd below, so the list follows this machine's packages.
RUNTIME_LIBS=(libmicrohttpd.so.12 libjansson.so.4 libcurl.so.4
              libsqlite3.so.0 openblas-pthread/libopenblas.so.0 libz.so.1
              libcmocka.so.0 libpkgconf.so.3)
# Never carried: the C runtime the device machine has in a newer version.
SKIP_PKGS=" libc6 libgcc-s1 libstdc++6 gcc-12-base "

need() { command -v "$1" >/dev/null 2>&1 || { echo "prepare.sh: $1 not found (this script needs a Debian machine with apt)" >&2; exit 1; }; }
need apt-get; need dpkg-query; need ldd

# The package that owns a file; usrmerge means /lib and /usr/lib are one.
owner() {
    local f=$1 r
    r=$(readlink -f "$f")
    for p in "$f" "$r" "${f#/usr}" "${r#/usr}" "/usr$f" "/usr$r"; do
        dpkg-query -S "$p" 2>/dev/null | head -n 1 | cut -d: -f1 && return 0
    done
    return 1
}

declare -A pkgs=()
for p in "${DEV_PKGS[@]}"; do pkgs[$p]=1; done
libdir=/usr/lib/x86_64-linux-gnu
for l in "${RUNTIME_LIBS[@]}"; do
    f=$libdir/$l
    if [ ! -e "$f" ]; then
        echo "prepare.sh: $f is missing here: install the -dev packages first (scripts/setup.sh)" >&2
        exit 1
    fi
    for dep in "$f" $(ldd "$f" | awk '$3 ~ /^\// {print $3}'); do
        p=$(owner "$dep") || { echo "prepare.sh: no package owns $dep" >&2; exit 1; }
        pkgs[$p]=1
    done
done

rm -rf "$OUT/debs"
mkdir -p "$OUT/debs"
want=()
newer=()
for p in $(printf '%s\n' "${!pkgs[@]}" | sort); do
    case $SKIP_PKGS in *" $p "*) continue ;; esac
    v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null) || {
        echo "prepare.sh: $p is not installed here; install it first" >&2; exit 1; }
    # The installed version when apt can still fetch it, else the candidate
    # (a newer point release of the same soname: a security update).
    if apt-cache madison "$p" | awk -F'|' '{gsub(/ /, "", $2); print $2}' |
            grep -qxF -- "$v"; then
        want+=("$p=$v")
    else
        want+=("$p")
        newer+=("$p")
    fi
done
[ ${#newer[@]} -gt 0 ] &&
    echo "prepare.sh: not installed version (apt has only newer ones): ${newer[*]}"
echo "prepare.sh: downloading ${#want[@]} packages into $OUT/debs"
# apt's sandbox user cannot write a root-owned folder; that warning is noise.
if ! (cd "$OUT/debs" && apt-get download -q "${want[@]}" 2>&1 |
        grep -v -e 'unsandboxed as root' -e '^Get:' -e '^Fetched'); then
    :
fi
got=$(find "$OUT/debs" -name '*.deb' | wc -l)
if [ "$got" -ne "${#want[@]}" ]; then
    echo "prepare.sh: got $got of ${#want[@]} packages; apt-get download failed" >&2
    exit 1
fi

rm -rf "$OUT/fashion-mnist"
if [ $with_fashion -eq 1 ]; then
    if [ -f "$FASHION_SRC/train-images-idx3-ubyte.gz" ]; then
        mkdir -p "$OUT/fashion-mnist"
        cp "$FASHION_SRC"/*-ubyte.gz "$OUT/fashion-mnist/"
    else
        echo "prepare.sh: $FASHION_SRC has no Fashion-MNIST; the gpu convergence test will skip"
    fi
fi

{
    echo "# made by bench/gpu/prepare.sh on $(hostname) $(date -u +%Y-%m-%dT%H:%MZ)"
    (cd "$OUT" && find debs fashion-mnist -type f 2>/dev/null | sort |
        while read -r f; do printf '%10d  %s\n' "$(stat -c %s "$f")" "$f"; done)
} >"$OUT/MANIFEST"

deps_bytes=$(du -sb "$OUT" | cut -f1)
debs_bytes=$(du -sb "$OUT/debs" | cut -f1)
fm_bytes=$( [ -d "$OUT/fashion-mnist" ] && du -sb "$OUT/fashion-mnist" | cut -f1 || echo 0)
tree_bytes=$(cd "$ROOT" && git ls-files -z | xargs -0 stat -c %s 2>/dev/null |
             awk '{s += $1} END {print s + 0}')
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "prepare.sh: .gpu-deps/debs          $(mib "$debs_bytes") ($got packages)"
echo "prepare.sh: .gpu-deps/fashion-mnist $(mib "$fm_bytes")"
echo "prepare.sh: tracked tree            $(mib "$tree_bytes")"
echo "prepare.sh: what travels            $(mib $((deps_bytes + tree_bytes))) of the device tool's 64 MiB"
if [ "$deps_bytes" -gt $((MAX_MB * 1048576)) ]; then
    echo "prepare.sh: .gpu-deps is over ${MAX_MB} MiB; try --no-fashion" >&2
    exit 1
fi
echo "prepare.sh: ok; carry \".gpu-deps\" in the device run (see bench/gpu/run.sh)"
