# shellcheck shell=bash
# bench/gpu/deps.sh - sourced by bench/gpu/run.sh: makes a machine without
# trainyard's Debian development packages (the GPU machine) able to build it,
# from the .debs bench/gpu/prepare.sh fetched, and points the CUDA build at a
# cuDNN / cuBLAS that PyTorch's pip packages bring when the toolkit lacks
# them. Nothing is installed: packages are unpacked into a private prefix,
# never into /.
#
#   gpu_deps_use DEPS PREFIX    unpack DEPS/debs/*.deb into PREFIX; fix the
#       .pc files and absolute symlinks to point into PREFIX; put the shared
#       libraries the system lacks (by soname, per `ldconfig -p`) into
#       PREFIX/shim and prepend that to LD_LIBRARY_PATH (so nothing the
#       system has is ever shadowed); export PKG_CONFIG_LIBDIR (the prefix's
#       .pc files only) and append CMake arguments to GPU_CMAKE_ARGS; export
#       TY_FASHION_DIR when DEPS/fashion-mnist exists. Returns 1 with a
#       message when something is missing.
#   gpu_cuda_hints PYTHON BUILD  when nvcc's toolkit has no cuDNN (cudnn.h and
#       libcudnn.so*) or no cuBLAS, find them in the nvidia-* pip packages of
#       PYTHON and append the cache variables that CMakeLists.txt's find_path
#       / find_library (TRAINYARD_CUDNN_INCLUDE, TRAINYARD_CUDNN_LIBRARY) and
#       FindCUDAToolkit (CUDA_cublas_LIBRARY, CUDA_cublasLt_LIBRARY) take as
#       already found; prepend their folders to LD_LIBRARY_PATH (cuDNN
#       dlopens its sub-libraries by soname). Sets GEMM_NVCC_FLAGS for
#       gemm_ceiling.cu. NCCL the same way (TRAINYARD_NCCL_INCLUDE,
#       TRAINYARD_NCCL_LIBRARY), optional: without it the build has no NCCL
#       engine. Returns 1 when cuDNN is nowhere.
#
# GPU_DEPS_SHIM_ALL=1 puts every unpacked library into the shim, as if the
# system had none of them (to prove the mechanism on a machine that does).

GPU_CMAKE_ARGS=()
GEMM_NVCC_FLAGS=()

_gpu_unpack() { # DEB DEST
    if command -v dpkg-deb >/dev/null 2>&1; then
        dpkg-deb -x "$1" "$2"
        return
    fi
    # No dpkg: a .deb is an ar archive holding data.tar.{xz,zst,gz}.
    local member
    member=$(ar t "$1" | grep '^data\.tar') || return 1
    case $member in
        *.xz) ar p "$1" "$member" | tar -xJ -C "$2" ;;
        *.zst) ar p "$1" "$member" | zstd -dc | tar -x -C "$2" ;;
        *.gz) ar p "$1" "$member" | tar -xz -C "$2" ;;
        *) ar p "$1" "$member" | tar -x -C "$2" ;;
    esac
}

gpu_deps_use() {
    local deps pfx=$2 f n t
    deps=$(cd "$1" 2>/dev/null && pwd) || { echo "deps: no folder $1"; return 1; }
    if ! ls "$deps"/debs/*.deb >/dev/null 2>&1; then
        echo "deps: no $deps/debs/*.deb (run bench/gpu/prepare.sh here and carry .gpu-deps)"
        return 1
    fi
    rm -rf "$pfx"
    mkdir -p "$pfx"
    for f in "$deps"/debs/*.deb; do
        _gpu_unpack "$f" "$pfx" || { echo "deps: cannot unpack $f"; return 1; }
    done
    local lib=$pfx/usr/lib/x86_64-linux-gnu
    mkdir -p "$lib"
    # Debian's usrmerge: packages that still ship /lib (zlib1g) join /usr/lib.
    if [ -d "$pfx/lib/x86_64-linux-gnu" ]; then
        cp -a "$pfx/lib/x86_64-linux-gnu/." "$lib/"
        rm -rf "$pfx/lib/x86_64-linux-gnu"
    fi
    # Absolute symlinks (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13)
    # point at the system; make them point into the prefix.
    while IFS= read -r f; do
        t=$(readlink "$f")
        case $t in /*) ;; *) continue ;; esac
        n=${t#/usr}
        ln -sfn "$pfx/usr$n" "$f"
    done < <(find "$pfx" -type l)
    # The .pc files name /usr: point them into the prefix. Requires.private
    # only matters for static linking and would drag in every transitive
    # -dev package (libmicrohttpd -> gnutls -> nettle, p11-kit, ...).
    while IFS= read -r f; do
        sed -i -e "s#=/usr#=$pfx/usr#g" -e "s#-I/usr/#-I$pfx/usr/#g" \
            -e "s#-L/usr/#-L$pfx/usr/#g" -e '/^Requires\.private:/d' "$f"
    done < <(find "$pfx" -name '*.pc')
    export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$pfx/usr/share/pkgconfig
    unset PKG_CONFIG_PATH

    # The shim: sonames the system's loader cannot find, and only those.
    local shim=$pfx/shim have=" " nshim=0
    mkdir -p "$shim"
    local ldc
    ldc=$(command -v ldconfig || echo /sbin/ldconfig)
    if [ "${GPU_DEPS_SHIM_ALL:-0}" != 1 ] && [ -x "$ldc" ]; then
        have=" $("$ldc" -p 2>/dev/null | awk 'NR > 1 {print $1}' | tr '\n' ' ') "
    fi
    # Each library file's soname (the name the loader looks for); without
    # readelf, every lib*.so.* name stands in for it.
    while IFS= read -r f; do
        n=""
        if command -v readelf >/dev/null 2>&1; then
            n=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
            [ -n "$n" ] || continue
        else
            n=$(basename "$f")
        fi
        case $have in *" $n "*) continue ;; esac
        [ -e "$shim/$n" ] && continue
        ln -sfn "$f" "$shim/$n"
        nshim=$((nshim + 1))
    done < <(find "$lib" -maxdepth 2 -name 'lib*.so*' -type f)
    export LD_LIBRARY_PATH=$shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

    local pkgconf=$pfx/usr/bin/pkgconf
    if ! "$pkgconf" --version >/dev/null 2>&1; then
        echo "deps: $pkgconf does not run"
        return 1
    fi
    GPU_CMAKE_ARGS+=("-DPKG_CONFIG_EXECUTABLE=$pkgconf" "-DCMAKE_PREFIX_PATH=$pfx/usr")
    echo "deps: $(find "$deps/debs" -name '*.deb' | wc -l) packages unpacked into $pfx;" \
         "$nshim libraries the system lacks are in $shim"
    if [ -f "$deps/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
        export TY_FASHION_DIR=$deps/fashion-mnist
        echo "deps: TY_FASHION_DIR=$TY_FASHION_DIR"
    fi
    return 0
}

# True when one of the paths exists.
_gpu_any() {
    local f
    for f in "$@"; do [ -e "$f" ] && return 0; done
    return 1
}

# The first file under the nvidia-* pip packages of PYTHON named $2.
_gpu_pip_find() { # PYTHON NAME
    local dirs
    dirs=$("$1" -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null) || return 1
    [ -n "$dirs" ] || return 1
    # shellcheck disable=SC2086
    find $dirs -name "$2" \( -type f -o -type l \) 2>/dev/null | sort | head -n 1
}

gpu_cuda_hints() {
    local py=$1 nvcc root inc libf d
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
    # What CMakeLists.txt's find_path / find_library would find beside nvcc.
    if [ "${GPU_CUDNN_FROM_PIP:-0}" != 1 ] && [ -f "$root/include/cudnn.h" ] &&
        _gpu_any "$root"/lib64/libcudnn.so "$root"/lib/libcudnn.so; then
        echo "cuda: cuDNN beside the toolkit ($root)"
    else
        inc=$(_gpu_pip_find "$py" cudnn.h)
        libf=$(_gpu_pip_find "$py" 'libcudnn.so.[0-9]*')
        if [ -z "$inc" ] || [ -z "$libf" ]; then
            echo "cuda: no cuDNN in $root and none in $py's nvidia pip packages"
            return 1
        fi
        echo "cuda: cuDNN from pip: $libf"
        GPU_CMAKE_ARGS+=("-DTRAINYARD_CUDNN_INCLUDE=$(dirname "$inc")"
                         "-DTRAINYARD_CUDNN_LIBRARY=$libf")
        d=$(dirname "$libf")
        export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    # NCCL (the data-parallel engine, gpu/cuda/comm_nccl.c): beside the
    # toolkit or in the system's paths, else PyTorch's nvidia-nccl pip
    # package; with neither the build has no NCCL engine and gpu_nccl
    # skips, saying so (not a failure of this script).
    if { [ -f "$root/include/nccl.h" ] || [ -f /usr/include/nccl.h ]; } &&
        _gpu_any "$root"/lib64/libnccl.so "$root"/lib/libnccl.so \
                 /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib64/libnccl.so; then
        echo "cuda: NCCL beside the toolkit or in the system's paths"
    else
        inc=$(_gpu_pip_find "$py" nccl.h)
        libf=$(_gpu_pip_find "$py" 'libnccl.so.[0-9]*')
        if [ -n "$inc" ] && [ -n "$libf" ]; then
            echo "cuda: NCCL from pip: $libf"
            GPU_CMAKE_ARGS+=("-DTRAINYARD_NCCL_INCLUDE=$(dirname "$inc")"
                             "-DTRAINYARD_NCCL_LIBRARY=$libf")
            d=$(dirname "$libf")
            export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        else
            echo "cuda: no NCCL in $root, the system or $py's nvidia pip packages (no NCCL engine)"
        fi
    fi
    if [ "${GPU_CUBLAS_FROM_PIP:-0}" != 1 ] &&
        _gpu_any "$root"/lib64/libcublas.so "$root"/lib/libcublas.so \
                 "$root"/targets/*/lib/libcublas.so; then
        echo "cuda: cuBLAS beside the toolkit ($root)"
    else
        libf=$(_gpu_pip_find "$py" 'libcublas.so.[0-9]*')
        local lt
        lt=$(_gpu_pip_find "$py" 'libcublasLt.so.[0-9]*')
        inc=$(_gpu_pip_find "$py" cublas_v2.h)
        if [ -z "$libf" ] || [ -z "$lt" ]; then
            echo "cuda: no cuBLAS in $root and none in $py's nvidia pip packages"
            return 1
        fi
        echo "cuda: cuBLAS from pip: $libf"
        d=$(dirname "$libf")
        GPU_CMAKE_ARGS+=("-DCUDA_cublas_LIBRARY=$libf" "-DCUDA_cublasLt_LIBRARY=$lt")
        # nvcc takes no library path as an input file; -l: names the file.
        GEMM_NVCC_FLAGS+=("-L$d" "-l:$(basename "$libf")" "-Xlinker" "-rpath=$d")
        if [ -n "$inc" ] && [ ! -f "$root/include/cublas_v2.h" ]; then
            GPU_CMAKE_ARGS+=("-DCMAKE_CUDA_FLAGS=-I$(dirname "$inc")"
                             "-DCMAKE_C_FLAGS=-I$(dirname "$inc")")
            GEMM_NVCC_FLAGS+=("-I$(dirname "$inc")")
        fi
        export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        return 0
    fi
    GEMM_NVCC_FLAGS+=(-lcublas)
    return 0
}
