#!/usr/bin/env bash
# bench/gpu/run.sh - the GPU check of issue 4 (CUDA backend), as far as the
# first slice goes: build with CUDA, say which backends and devices the
# binary sees, run the `gpu` test suite, then measure the GEMM ceiling of
# the wide network (bare cuBLAS, and the same GEMMs in PyTorch).
#
# Not measured yet, and said so in the output: trainyard's own training
# throughput on the GPU (the trainer is not wired to the CUDA backend in
# this slice), so no samples/s, no trainyard/PyTorch ratios, no peak memory.
#
# Exit status: 0 when the build works and the gpu tests pass or are skipped
# (no device); non-zero when the build, a gpu test or a GEMM measurement on
# a present device fails. Meant to finish well under 6 minutes on an H200.
#
# Environment: BUILD_DIR (default build-gpu in the repository), JOBS
# (default nproc), PYTHON (default python3), CUDA_ARCH (e.g. 90; default:
# the first GPU's, else 90).
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
JOBS=${JOBS:-$(nproc)}
PYTHON=${PYTHON:-python3}
START=$SECONDS
FAILED=()
SUMMARY=()

section() { printf '\n=== %s (t=%ds) ===\n' "$*" $((SECONDS - START)); }
note() { SUMMARY+=("$*"); }

# ---- build ---------------------------------------------------------------
section "build ($BUILD, Release, TRAINYARD_CUDA=ON, -j$JOBS)"
mkdir -p "$BUILD"
if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
        -DTRAINYARD_CUDA=ON >"$BUILD/run-configure.log" 2>&1; then
    tail -n 30 "$BUILD/run-configure.log"
    echo "run.sh: cmake configure failed (log: $BUILD/run-configure.log)"
    exit 1
fi
grep 'trainyard:' "$BUILD/run-configure.log" | sed 's/^/  /'
if ! cmake --build "$BUILD" -j"$JOBS" >"$BUILD/run-build.log" 2>&1; then
    grep -E 'error|Error' "$BUILD/run-build.log" | head -n 40
    tail -n 20 "$BUILD/run-build.log"
    echo "run.sh: build failed (log: $BUILD/run-build.log)"
    exit 1
fi
tail -n 1 "$BUILD/run-build.log"
note "build: ok ($((SECONDS - START))s)"

# ---- what the binary has and sees ----------------------------------------
section "trainyard version"
"$BUILD/trainyard" version || FAILED+=("trainyard version")
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L || true
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap \
        --format=csv,noheader 2>/dev/null || true
else
    echo "nvidia-smi: not found (no NVIDIA driver on this machine)"
fi

# ---- the gpu tests -------------------------------------------------------
section "ctest -L gpu"
(cd "$BUILD" && ctest -L gpu --output-on-failure --no-tests=error)
rc=$?
log="$BUILD/Testing/Temporary/LastTest.log"
# ctest hides a skipped test's output; show why it skipped.
skips=$(grep -h '^SKIPPED:' "$log" 2>/dev/null | sort -u)
[ -n "$skips" ] && echo "$skips" | sed 's/^/  reason: /'
if [ $rc -ne 0 ]; then
    FAILED+=("gpu tests (ctest rc $rc)")
    note "gpu tests: FAILED (ctest rc $rc)"
elif [ -n "$skips" ]; then
    note "gpu tests: skipped ($(echo "$skips" | head -n 1 | sed "s/^SKIPPED: //"))"
else
    note "gpu tests: passed"
fi

# ---- GEMM ceiling: bare cuBLAS --------------------------------------------
SHAPE=(--batch 1024 --width 4096 --layers 4)
section "GEMM ceiling of the wide network: cuBLAS (${SHAPE[*]})"
arch=${CUDA_ARCH:-}
if [ -z "$arch" ] && command -v nvidia-smi >/dev/null 2>&1; then
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader \
           2>/dev/null | head -n 1 | tr -d '. ')
fi
arch=${arch:-90}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CEIL="$BUILD/gemm_ceiling"
if ! "$NVCC" -O2 -std=c++17 -arch=sm_"$arch" -o "$CEIL" \
        "$ROOT/bench/gpu/gemm_ceiling.cu" -lcublas; then
    FAILED+=("gemm_ceiling build")
    note "cuBLAS ceiling: build FAILED"
else
    "$CEIL" "${SHAPE[@]}"
    rc=$?
    case $rc in
        0) note "cuBLAS ceiling: measured (see 'step (all)' lines)" ;;
        77) note "cuBLAS ceiling: not measured, no CUDA device" ;;
        *) FAILED+=("gemm_ceiling (rc $rc)")
           note "cuBLAS ceiling: FAILED (rc $rc)" ;;
    esac
fi

# ---- the same GEMMs in PyTorch --------------------------------------------
section "the same GEMMs in PyTorch (torch.matmul)"
if command -v "$PYTHON" >/dev/null 2>&1; then
    "$PYTHON" "$ROOT/bench/gpu/torch_gemm.py" "${SHAPE[@]}"
    rc=$?
    case $rc in
        0) note "PyTorch GEMMs: measured" ;;
        77) note "PyTorch GEMMs: not measured (no torch with CUDA)" ;;
        *) FAILED+=("torch_gemm (rc $rc)")
           note "PyTorch GEMMs: FAILED (rc $rc)" ;;
    esac
else
    echo "$PYTHON: not found; no PyTorch numbers"
    note "PyTorch GEMMs: not measured ($PYTHON not found)"
fi

# ---- training throughput ---------------------------------------------------
section "training throughput"
cat <<'EOF'
NOT MEASURED: trainyard cannot train on the GPU yet. In this slice the CUDA
backend (its kernel table) and its tests exist, but the trainer, runner and
inference still run on the CPU backend with host memory; wiring them to the
GPU is the next slice of issue 4. So this run reports no samples/s for the
MLP, the CNN or the wide network, no trainyard/PyTorch ratios, no fp32/bf16
comparison, no fraction of the GEMM ceiling and no peak device memory.
Nothing above is a substitute for those numbers.
EOF
note "training throughput: NOT MEASURED (trainer not on the GPU yet)"

# ---- summary ----------------------------------------------------------------
section "summary"
for s in "${SUMMARY[@]}"; do echo "  $s"; done
echo "  elapsed: $((SECONDS - START))s"
if [ ${#FAILED[@]} -ne 0 ]; then
    echo "run.sh: FAILED: ${FAILED[*]}"
    exit 1
fi
echo "run.sh: ok"
exit 0
