#!/usr/bin/env bash
# bench/gpu/run.sh - the GPU check of issue 4 (CUDA backend), in one script:
#   1. build (Release, TRAINYARD_CUDA=ON), `trainyard version`, `ctest -L gpu`;
#   2. the GEMM ceiling of the wide network: bare cuBLAS (gemm_ceiling.cu)
#      and torch.matmul (torch_gemm.py) of the same shapes;
#   3. training in trainyard (a real `trainyard serve --train-device cuda:0`,
#      through its API) and in PyTorch, same run, same machine: the MLP, the
#      CNN and a wide MLP, each in fp32 and bf16 (bench/gpu/train_bench.py,
#      whose header says exactly what is measured and how);
#   4. a table: samples/s, trainyard/PyTorch, peak memory; the wide net's
#      TFLOP/s beside bare cuBLAS; the issue's targets marked met / not met;
#   5. GPT-2 124M (12 layers, 12 heads, 768 wide, vocabulary 50257,
#      context 1024, batch 8) trained in bf16 (hyperparameters.precision)
#      in trainyard and in PyTorch eager: tokens/s, model TFLOP/s (6 N + 12
#      L T C a token) and their share of the GPU's dense bf16 peak (989
#      TFLOP/s on an H200 SXM); bench/gpu/gpt2_bench.py's header says how;
#   6. serving (issue 18): a deployment whose replica holds a GPU or MIG
#      slice, its batching gain on the CNN and the replica hop
#      (bench/serve/deploy.py --gpu), when wrk is there;
#   7. text generation (issue 32): the "mini" GPT served from cuda:0 with
#      continuous and static batching, and from a deployment's replica on
#      a GPU or MIG slice (bench/serve/generate.py --gpu --no-hf
#      --deployed): generated tokens/s, TTFT and ITL at c = 1, 8, 32.
# The order on a GPU: build, gpu tests, then generation (7) before the
# measurements 2-6, and every step under a limit (LIMIT_TESTS 180 s,
# LIMIT_GEN 120, LIMIT_TRAIN 150, LIMIT_GPT2 120, LIMIT_SERVE 60; the GEMMs
# 60): a step that hangs on its first run on a GPU is killed with its
# servers and leaves the time to the others.
# --steps runs only the steps named (the machine, the dependencies and the
# build always run; the build is incremental on a warm machine). The first
# device run (2026-12-05) ran everything in one call and the machine
# stopped answering with nothing returned, so: first call `--steps tests`
# (what works at all comes back), then, at once while the machine is
# warm, `--steps gen,gemm,train,gpt2,serve`.
# Meant to finish in under 6 minutes on an H200, from the repository alone.
#
# The device machine (bench/gpu on a machine lent through the `run` tool) has
# nvcc, CMake and PyTorch but most likely not trainyard's Debian -dev
# packages, and no network. So, HERE first (network, apt):
#     bench/gpu/prepare.sh        # .gpu-deps/: the .debs, Fashion-MNIST
# then the device call (one call; ~55 MiB travels; timeout_s leaves room for
# a second, warm call within the 15 minutes of device time - the warm
# machine keeps build-gpu/, so a rerun does not rebuild):
#     run(command="set -o pipefail; bench/gpu/run.sh 2>&1 | tee $OUT/run.log",
#         carry=[".gpu-deps"], timeout_s=400)
# run.sh unpacks .gpu-deps/debs into build-gpu/deps-prefix (dpkg-deb -x,
# never into /), points pkg-config and CMake at it, adds only the libraries
# the system lacks to LD_LIBRARY_PATH, and takes cuDNN / cuBLAS from the
# torch venv's nvidia-* pip packages when /usr/local/cuda lacks them (see
# bench/gpu/deps.sh). With $OUT set, it copies its results there.
#
# Without a GPU (here): it builds, reports no device, the gpu tests skip,
# the GEMM and training measurements are skipped with a message, exit 0.
# --cpu-smoke also runs the whole training path (server, uploads, jobs,
# epoch records, PyTorch, table, ratios) at tiny sizes on the CPU.
#
# Usage: bench/gpu/run.sh [--cpu-smoke] [--wide-batch N] [--wide-width N]
#                         [--wide-layers N] [--gpt2-batch N]
#                         [--gpt2-context N] [--gpt2-steps N] [--no-gpt2]
#                         [--steps tests,gen,gemm,train,gpt2,serve]
#                         [-- TRAIN_BENCH_ARGS...]
# Environment: BUILD_DIR (default build-gpu), JOBS (default nproc), PYTHON
# (default: the first of python3, /usr/bin/python3 that has torch),
# CUDA_ARCH (default: the GPU's, else CMakeLists' 80;90), GPU_DEPS=0 (build
# against the system's packages even when .gpu-deps exists).
#
# Exit status: 0 when everything ran (targets not met are reported, not a
# failure); 1 when the build, a gpu test or a measurement on a present
# device fails.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
JOBS=${JOBS:-$(nproc)}
START=$SECONDS
FAILED=()
SUMMARY=()
SMOKE=0
WIDE_BATCH=1024
WIDE_WIDTH=4096
WIDE_LAYERS=4
GPT2=1
GPT2_BATCH=8
GPT2_CONTEXT=1024
GPT2_STEPS=10
EXTRA=()
STEPS=all
while [ $# -gt 0 ]; do
    case $1 in
        --cpu-smoke) SMOKE=1 ;;
        --wide-batch) WIDE_BATCH=$2; shift ;;
        --wide-width) WIDE_WIDTH=$2; shift ;;
        --wide-layers) WIDE_LAYERS=$2; shift ;;
        --gpt2-batch) GPT2_BATCH=$2; shift ;;
        --gpt2-context) GPT2_CONTEXT=$2; shift ;;
        --gpt2-steps) GPT2_STEPS=$2; shift ;;
        --no-gpt2) GPT2=0 ;;
        --steps) STEPS=$2; shift ;;
        --) shift; EXTRA=("$@"); break ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument $1 (see --help)"; exit 2 ;;
    esac
    shift
done

# Every step on the device runs under a limit (timeout kills its whole
# process group, servers included), so one that hangs on a first run
# leaves the time to the steps after it.
LIMIT_TESTS=${LIMIT_TESTS:-180}
LIMIT_GEN=${LIMIT_GEN:-120}
LIMIT_TRAIN=${LIMIT_TRAIN:-150}
LIMIT_GPT2=${LIMIT_GPT2:-120}
LIMIT_SERVE=${LIMIT_SERVE:-60}
limit() { # SECONDS COMMAND...
    local t=$1 rc
    shift
    timeout -k 10 "$t" "$@"
    rc=$?
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "run.sh: $(basename "$1") stopped at its limit of ${t}s"
    return $rc
}
# Whether step $1 runs (--steps: tests,gen,gemm,train,gpt2,serve or all).
want() { [ "$STEPS" = all ] || [[ ",$STEPS," == *",$1,"* ]]; }
section() { printf '\n=== %s (t=%ds) ===\n' "$*" $((SECONDS - START)); }
note() { SUMMARY+=("$*"); }
finish() {
    section "summary"
    for s in "${SUMMARY[@]}"; do echo "  $s"; done
    echo "  elapsed: $((SECONDS - START))s"
    if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
        for f in "$BUILD/train_bench.json" "$BUILD/gpt2_bench.json" \
                 "$BUILD/gemm_ceiling.out" \
                 "$BUILD/Testing/Temporary/LastTest.log" \
                 "$BUILD/run-configure.log" "$BUILD/run-build.log"; do
            [ -f "$f" ] && cp "$f" "$OUT/" 2>/dev/null
        done
    fi
    if [ ${#FAILED[@]} -ne 0 ]; then
        echo "run.sh: FAILED: ${FAILED[*]}"
        exit 1
    fi
    echo "run.sh: ok"
    exit 0
}
mkdir -p "$BUILD"
export PYTHONUNBUFFERED=1

# ---- the machine ------------------------------------------------------------
section "machine"
HAVE_GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    HAVE_GPU=1
    nvidia-smi -L
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap \
        --format=csv,noheader 2>/dev/null || true
    nvidia-smi --query-gpu=mig.mode.current,power.limit,clocks.max.sm \
        --format=csv 2>/dev/null || true
    command -v nvcc >/dev/null && nvcc --version | tail -n 2
else
    echo "no GPU: nvidia-smi $(command -v nvidia-smi >/dev/null && echo 'lists none' || echo 'is not installed')"
fi
PY=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch, numpy' 2>/dev/null; then
        PY=$(command -v "$p")
        break
    fi
done
if [ -n "$PY" ]; then
    "$PY" -c 'import sys, torch; print(f"python {sys.version.split()[0]} ({sys.executable}), torch {torch.__version__}, CUDA {torch.version.cuda}, devices {torch.cuda.device_count()}")'
    if [ $HAVE_GPU -eq 0 ] && "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        echo "nvidia-smi is missing but torch sees a CUDA device: treating it as a GPU machine"
        HAVE_GPU=1
    fi
else
    echo "no python with torch and numpy (tried ${PYTHON:-} python3 /usr/bin/python3)"
fi
echo "cpus: $(nproc), build jobs: $JOBS"

# ---- dependencies -------------------------------------------------------------
section "dependencies"
# shellcheck source=bench/gpu/deps.sh
. "$ROOT/bench/gpu/deps.sh"
if [ "${GPU_DEPS:-1}" != 0 ] && [ -d "$ROOT/.gpu-deps/debs" ]; then
    if ! gpu_deps_use "$ROOT/.gpu-deps" "$BUILD/deps-prefix"; then
        FAILED+=("dependencies")
        note "dependencies: FAILED to unpack .gpu-deps"
        finish
    fi
    note "dependencies: .gpu-deps unpacked into $BUILD/deps-prefix"
else
    echo "using the system's packages (no .gpu-deps/debs, or GPU_DEPS=0)"
    note "dependencies: the system's"
fi
if [ -z "${TY_FASHION_DIR:-}" ] && [ -d /usr/share/datasets/fashion-mnist ]; then
    export TY_FASHION_DIR=/usr/share/datasets/fashion-mnist
fi
echo "Fashion-MNIST for the gpu tests: ${TY_FASHION_DIR:-none (the convergence test will skip)}"
if ! gpu_cuda_hints "${PY:-python3}"; then
    echo "(the configure below will say what is missing)"
fi

# ---- build ----------------------------------------------------------------------
ARCH=${CUDA_ARCH:-}
if [ -z "$ARCH" ] && [ $HAVE_GPU -eq 1 ] && command -v nvidia-smi >/dev/null 2>&1; then
    ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
           head -n 1 | tr -d '. ')
fi
ARCH_ARGS=()
[ -n "$ARCH" ] && ARCH_ARGS=("-DCMAKE_CUDA_ARCHITECTURES=$ARCH")
section "build ($BUILD, Release, TRAINYARD_CUDA=ON, -j$JOBS${ARCH:+, sm_$ARCH})"
if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTRAINYARD_CUDA=ON \
        "${ARCH_ARGS[@]}" "${GPU_CMAKE_ARGS[@]}" >"$BUILD/run-configure.log" 2>&1; then
    tail -n 30 "$BUILD/run-configure.log"
    echo "run.sh: cmake configure failed (log: $BUILD/run-configure.log)"
    FAILED+=("configure")
    note "build: configure FAILED"
    finish
fi
grep -E 'trainyard:|Found (PkgConfig|CUDAToolkit)' "$BUILD/run-configure.log" | sed 's/^--/ /'
if ! cmake --build "$BUILD" -j"$JOBS" >"$BUILD/run-build.log" 2>&1; then
    grep -E 'error|Error' "$BUILD/run-build.log" | head -n 40
    tail -n 20 "$BUILD/run-build.log"
    echo "run.sh: build failed (log: $BUILD/run-build.log)"
    FAILED+=("build")
    note "build: FAILED"
    finish
fi
tail -n 1 "$BUILD/run-build.log"
note "build: ok (t=$((SECONDS - START))s)"

# ---- what the binary has and sees -------------------------------------------------
section "trainyard version"
"$BUILD/trainyard" version || FAILED+=("trainyard version")
echo "libraries: $(ldd "$BUILD/trainyard" | grep -E 'microhttpd|jansson|curl|sqlite|openblas|libz\.|cublas\.|cudnn\.|nccl\.' |
    awk '{print $3}' | tr '\n' ' ')"

if want tests; then
# ---- the gpu tests -------------------------------------------------------------------
section "ctest -L gpu"
(cd "$BUILD" && limit "$LIMIT_TESTS" ctest -L gpu --output-on-failure --no-tests=error)
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
fi

if want gen; then
# Text generation (issue 32): the engine on the GPU, in the server and in a
# replica on a GPU or MIG slice; no transformers baseline (no network here
# for its venv).
if [ $HAVE_GPU -eq 1 ] && [ -n "$PY" ]; then
    section "text generation on the GPU (continuous vs static batching, a replica)"
    limit "$LIMIT_GEN" "$PY" "$ROOT/bench/serve/generate.py" --binary "$BUILD/trainyard" --gpu \
        --no-hf --deployed --steps 5 --json "${OUT:-/tmp}/generate_gpu.json"
    rc=$?
    if [ $rc -eq 0 ]; then
        note "generation on the GPU: measured (see the table above)"
    else
        FAILED+=("generation on the GPU (rc $rc)")
        note "generation on the GPU: FAILED (rc $rc)"
    fi
fi
fi

SHAPE=(--batch "$WIDE_BATCH" --width "$WIDE_WIDTH" --layers "$WIDE_LAYERS")
CEIL="$BUILD/gemm_ceiling"
CEIL_OUT="$BUILD/gemm_ceiling.out"
if want gemm; then
# ---- GEMM ceiling: bare cuBLAS ----------------------------------------------------------
section "GEMM ceiling of the wide network: cuBLAS (${SHAPE[*]})"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
rm -f "$CEIL_OUT"
if ! "$NVCC" -O2 -std=c++17 -arch=sm_"${ARCH:-90}" -o "$CEIL" \
        "$ROOT/bench/gpu/gemm_ceiling.cu" "${GEMM_NVCC_FLAGS[@]}"; then
    FAILED+=("gemm_ceiling build")
    note "cuBLAS ceiling: build FAILED"
else
    limit 60 "$CEIL" "${SHAPE[@]}" | tee "$CEIL_OUT"
    rc=$?
    case $rc in
        0) note "cuBLAS ceiling: measured" ;;
        77) note "cuBLAS ceiling: not measured, no CUDA device"
            rm -f "$CEIL_OUT" ;;
        *) FAILED+=("gemm_ceiling (rc $rc)")
           note "cuBLAS ceiling: FAILED (rc $rc)" ;;
    esac
fi

# ---- the same GEMMs in PyTorch --------------------------------------------------------------
section "the same GEMMs in PyTorch (torch.matmul)"
if [ $HAVE_GPU -eq 0 ]; then
    echo "skipped: no GPU"
    note "PyTorch GEMMs: not measured, no GPU"
elif [ -z "$PY" ]; then
    FAILED+=("torch_gemm (no python with torch)")
    note "PyTorch GEMMs: FAILED (no python with torch)"
else
    limit 60 "$PY" "$ROOT/bench/gpu/torch_gemm.py" "${SHAPE[@]}"
    rc=$?
    if [ $rc -eq 0 ]; then
        note "PyTorch GEMMs: measured"
    else
        FAILED+=("torch_gemm (rc $rc)")
        note "PyTorch GEMMs: FAILED (rc $rc)"
    fi
fi
fi

if want train; then
# ---- training: trainyard vs PyTorch ---------------------------------------------------------
BENCH=("$BUILD/train_bench.json")
if [ $SMOKE -eq 1 ]; then
    section "training, --cpu-smoke: the whole path at tiny sizes on the CPU"
    if [ -z "$PY" ]; then
        FAILED+=("smoke training (no python with torch)")
        note "training smoke: FAILED (no python with torch)"
        finish
    fi
    "$PY" "$ROOT/bench/gpu/train_bench.py" --smoke --binary "$BUILD/trainyard" \
        --samples 512 --epochs 2 --wide-width 256 --wide-layers "$WIDE_LAYERS" \
        --wide-batch 64 --wide-samples 1024 --threads 2 \
        --ceiling "$CEIL_OUT" --json "${BENCH[0]}" "${EXTRA[@]}"
    rc=$?
    if [ $rc -eq 0 ]; then
        note "training smoke (CPU, tiny): every step ran; its numbers mean nothing"
    else
        FAILED+=("training smoke (rc $rc)")
        note "training smoke: FAILED (rc $rc)"
    fi
elif [ $HAVE_GPU -eq 0 ]; then
    section "training: trainyard vs PyTorch"
    echo "SKIPPED: no GPU on this machine, so no samples/s, ratios, TFLOP/s or"
    echo "peak memory. On a GPU machine this trains the MLP, the CNN and the"
    echo "wide MLP (${WIDE_LAYERS}x${WIDE_WIDTH}, batch $WIDE_BATCH) in fp32 and bf16 in both"
    echo "frameworks; --cpu-smoke runs that path at tiny sizes on the CPU."
    note "training: skipped, no GPU"
else
    section "training: trainyard vs PyTorch (fp32, bf16)"
    if [ -z "$PY" ]; then
        FAILED+=("training (no python with torch)")
        note "training: FAILED (no python with torch)"
        finish
    fi
    threads=$(( $(nproc) / 2 )); [ $threads -lt 1 ] && threads=1; [ $threads -gt 8 ] && threads=8
    limit "$LIMIT_TRAIN" "$PY" "$ROOT/bench/gpu/train_bench.py" --binary "$BUILD/trainyard" \
        --device cuda:0 --wide-width "$WIDE_WIDTH" --wide-layers "$WIDE_LAYERS" \
        --wide-batch "$WIDE_BATCH" --threads $threads \
        --ceiling "$CEIL_OUT" --json "${BENCH[0]}" "${EXTRA[@]}"
    rc=$?
    case $rc in
        0) note "training: measured (targets: see the tables)" ;;
        *) FAILED+=("training (rc $rc)")
           note "training: FAILED (rc $rc): a measurement could not be made" ;;
    esac
fi
fi

if want gpt2; then
# ---- GPT-2 124M: trainyard vs PyTorch eager, bf16 ----------------------------------------
GPT2_JSON="$BUILD/gpt2_bench.json"
if [ $GPT2 -eq 0 ]; then
    note "GPT-2: not run (--no-gpt2)"
elif [ $SMOKE -eq 1 ]; then
    section "GPT-2, --cpu-smoke: a tiny GPT through the same path on the CPU"
    if [ -z "$PY" ]; then
        FAILED+=("GPT-2 smoke (no python with torch)")
        note "GPT-2 smoke: FAILED (no python with torch)"
    elif "$PY" "$ROOT/bench/gpu/gpt2_bench.py" --smoke --binary "$BUILD/trainyard" \
            --json "$GPT2_JSON"; then
        note "GPT-2 smoke (CPU, tiny): every step ran; its numbers mean nothing"
    else
        FAILED+=("GPT-2 smoke")
        note "GPT-2 smoke: FAILED"
    fi
elif [ $HAVE_GPU -eq 0 ]; then
    section "GPT-2 124M: trainyard vs PyTorch eager (bf16)"
    echo "SKIPPED: no GPU on this machine, so no tokens/s or TFLOP/s."
    note "GPT-2: skipped, no GPU"
elif [ -z "$PY" ]; then
    FAILED+=("GPT-2 (no python with torch)")
    note "GPT-2: FAILED (no python with torch)"
else
    section "GPT-2 124M: trainyard vs PyTorch eager (bf16, context $GPT2_CONTEXT, batch $GPT2_BATCH)"
    threads=$(( $(nproc) / 2 )); [ $threads -lt 1 ] && threads=1; [ $threads -gt 8 ] && threads=8
    limit "$LIMIT_GPT2" "$PY" "$ROOT/bench/gpu/gpt2_bench.py" --binary "$BUILD/trainyard" \
        --device cuda:0 --batch "$GPT2_BATCH" --context "$GPT2_CONTEXT" \
        --steps "$GPT2_STEPS" --precision bf16 --threads $threads --json "$GPT2_JSON"
    rc=$?
    case $rc in
        0) note "GPT-2: measured (tokens/s, TFLOP/s, share of peak: see the table)" ;;
        *) FAILED+=("GPT-2 (rc $rc)")
           note "GPT-2: FAILED (rc $rc): a measurement could not be made" ;;
    esac
fi
fi

if want serve; then
# Serving deployments on the GPU (issue 18): a replica on a GPU or MIG slice
# (resources.gpu "any"), the CNN's batching gain and the GPU predict
# latency through the replica hop. Needs wrk (the load generator).
if [ $HAVE_GPU -eq 1 ] && [ -n "$PY" ]; then
    section "serving: a deployment on the GPU (batching gain, replica hop)"
    if command -v wrk >/dev/null; then
        limit "$LIMIT_SERVE" "$PY" "$ROOT/bench/serve/deploy.py" --binary "$BUILD/trainyard" --gpu \
            --only batching,hop --duration 5 --reps 1 --json "${OUT:-/tmp}/deploy_gpu.json"
        rc=$?
        if [ $rc -eq 0 ]; then
            note "serving on the GPU: measured (see the table above)"
        else
            FAILED+=("serving on the GPU (rc $rc)")
            note "serving on the GPU: FAILED (rc $rc)"
        fi
    else
        echo "SKIPPED: wrk is not installed on this machine"
        note "serving on the GPU: skipped (no wrk)"
    fi
fi
fi

finish
