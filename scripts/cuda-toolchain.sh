#!/usr/bin/env bash
# Installs the CUDA toolchain the CUDA test programs (tests/cuda/) are built
# with, from NVIDIA's PyPI wheels, into a project-local prefix. Needs no GPU
# and no NVIDIA driver. Idempotent: pinned versions already present are not
# downloaded again.
#
#   cu13/   nvcc 13 (nvidia-cuda-nvcc, -crt, nvidia-nvvm), the CUDA 13
#           runtime (nvidia-cuda-runtime): libcudart.so.13, 13.x headers,
#           and CCCL 13.0 (nvidia-cuda-cccl: libcu++, CUB, Thrust)
#   cu12/   the CUDA 12.9 runtime (nvidia-cuda-runtime-cu12): libcudart.so.12,
#           libcudart_static.a, 12.9 headers (cuda.h, cuda_runtime.h, ...),
#           and CCCL 12.9 (nvidia-cuda-cccl-cu12)
#   cupy/   with --with-cupy: CuPy for CUDA 12, NVRTC 12.9 and cuRAND (PyPI),
#           for tests/cupy/check.py (about 800 MB)
#   numba/  with --with-numba: a Python virtual environment with Numba's
#           CUDA target (numba-cuda) and the CUDA 12.9 NVVM, runtime and
#           NVRTC it compiles with, for tests/numba/check.py (about 700 MB;
#           needs Python's venv module: Debian's python3-venv)
#   pycuda/ with --with-pycuda: a Python virtual environment with PyCUDA,
#           built from its source release (PyPI's sdist, checksum pinned)
#           against the CUDA 13 headers, cuRAND 13.0 and a stub libcuda
#           (the guest library is the one loaded at run time), with
#           pytest, for PyCUDA's own test files (pycuda/src/test); about
#           5 minutes of one core to build, 300 MB; needs g++ and Python's
#           headers (Debian: python3-dev)
#   env.sh  the variables below, written last: its presence means the
#           install is complete
#
# Prints, on stdout, the environment to use (`eval "$(scripts/cuda-toolchain.sh)"`):
#   FAIRGPU_CUDA_PREFIX  the prefix
#   CUDA_NVCC            nvcc 13
#   CUDA12_INCLUDE       12.9 headers      CUDA12_LIB  libcudart.so.12, libcudart_static.a
#   CUDA13_INCLUDE       13.x headers      CUDA13_LIB  libcudart.so.13
#   CUDA12_CCCL, CUDA13_CCCL  CCCL's headers of each release (cuda/barrier,
#                        nv/target, cub/, thrust/)
#   with --with-cupy:
#   CUPY_PYTHONPATH      CuPy and NumPy (for PYTHONPATH)
#   CUPY_CUDA_PATH       the CUDA 12.9 headers' root (CuPy's CUDA_PATH)
#   CUPY_NVRTC_LIB       libnvrtc.so.12 (for LD_LIBRARY_PATH)
#   CUPY_CURAND_LIB      libcurand.so.10 (for LD_LIBRARY_PATH)
#   CUPY_NVJITLINK_LIB   libnvJitLink.so.12 and its header in ../include
#   with --with-numba:
#   NUMBA_PYTHON         the environment's python, with Numba importable
#   with --with-pycuda:
#   PYCUDA_PYTHON        the environment's python, with PyCUDA importable
#   PYCUDA_TESTS         PyCUDA's test directory (test_driver.py, ...)
#   PYCUDA_LIB           cuRAND's and the device runtime's directories
#                        (for LD_LIBRARY_PATH: PyCUDA finds libcudadevrt.a
#                        there)
#   PYCUDA_INCLUDE       cuRAND's headers (curand_kernel.h, which
#                        pycuda.curandom's kernels include: for nvcc's -I)
#
# nvcc needs a host C++ compiler (g++) to compile.
#
# Environment:
#   FAIRGPU_CUDA_PREFIX  install prefix (default: target/cuda-toolchain in the
#                        repository)
#   PYTHON               the Python with pip to install with (default: python3)
set -euo pipefail

# The CUDA 13 wheels must all be of one release: nvcc runs the crt and nvvm
# of its own release. 13.0 is the oldest CUDA 13; cudart 13.0 is what the
# guest library must satisfy at the least.
CUDA13_VERSION=13.0.88
CUDA12_RUNTIME_VERSION=12.9.79

CUDA13_WHEELS=(
    "nvidia-cuda-nvcc==$CUDA13_VERSION"
    "nvidia-cuda-crt==$CUDA13_VERSION"
    "nvidia-nvvm==$CUDA13_VERSION"
    "nvidia-cuda-runtime==$CUDA13_VERSION"
    # CCCL (libcu++, CUB, Thrust and nv/target), which cooperative_groups,
    # mma.h, cuda_fp16.h and cuda::barrier need; of the same 13.0 release.
    "nvidia-cuda-cccl==13.0.85"
)
CUDA12_WHEELS=(
    "nvidia-cuda-runtime-cu12==$CUDA12_RUNTIME_VERSION"
    # CCCL of the 12.9 release: CCCL 13 refuses the 12.9 headers.
    "nvidia-cuda-cccl-cu12==12.9.27"
)
# CuPy compiles its kernels at run time with NVRTC; the NVRTC of the CUDA
# 12 runtime above. NumPy is left to pip (its wheels follow the Python).
# cuRAND for CuPy's random module (cupy.random draws through it; SimGpu
# executes the PTX its fatbins carry). nvJitLink of the same release, which
# links NVRTC's LTO-IR (tests/cuda/jit_lto.cpp, through fairgpu's shim).
CUPY_WHEELS=(
    "cupy-cuda12x==14.2.0"
    "nvidia-cuda-nvrtc-cu12==12.9.86"
    "nvidia-nvjitlink-cu12==12.9.86"
    "nvidia-curand-cu12==10.3.10.19"
    "numpy>=2"
)

# Numba's CUDA target, pinned with what it loads at run time. Not
# nvJitLink: with it, Numba links its kernels in the guest into machine code
# for one GPU; without it, through the driver's cuLink* calls, which
# fairgpu's guest library answers with the PTX (which SimGpu executes and a
# GPU's driver compiles). Installed into a virtual environment: numba-cuda
# takes over `numba.cuda` through a .pth file, and cuda-pathfinder finds the
# NVIDIA libraries in site-packages, neither of which a --target install
# gives. cuda-bindings 12.9.7, the last 12.9 release whose CUipcMemHandle
# has the `reserved` field numba-cuda 0.30.4 pickles IPC handles through
# (12.9.8 and later lack it, and Numba's IPC fails before any driver call).
NUMBA_WHEELS=(
    "numba-cuda==0.30.4"
    "numba==0.68.1"
    "llvmlite==0.50.0"
    "cuda-bindings==12.9.7"
    "cuda-core==1.2.2"
    "cuda-pathfinder==1.9.1"
    "nvidia-cuda-nvcc-cu12==12.9.86"
    "nvidia-cuda-runtime-cu12==$CUDA12_RUNTIME_VERSION"
    "nvidia-cuda-nvrtc-cu12==12.9.86"
    "nvidia-cuda-cccl-cu12==12.9.27"
    "numpy>=2"
)

# PyCUDA has no wheels: its source release, checked, built in a virtual
# environment with what it needs to build and test. cudaProfiler.h (which
# PyCUDA includes) and cuRAND come from the 13.0 release's wheels.
PYCUDA_VERSION=2026.1
PYCUDA_SDIST=https://files.pythonhosted.org/packages/75/93/36ffd54430924dcb03a88c97519d56589e573d0dcc999c77a4c4d8a90306/pycuda-$PYCUDA_VERSION.tar.gz
PYCUDA_SHA256=759516160628ba06f32ce7e563e3f5b9214691dc9528a03ea99ea1073f4e14ba
# The release and the recipe below: a change to either builds it again.
PYCUDA_BUILD="$PYCUDA_VERSION-2"
PYCUDA_WHEELS=(
    "nvidia-cuda-profiler-api==13.0.85"
    "nvidia-curand==10.4.0.35"
    "numpy>=2"
    "pytools"
    "platformdirs"
    "mako"
    "setuptools"
    "wheel"
    "pytest"
)

with_cupy=0
with_numba=0
with_pycuda=0
for arg in "$@"; do
    case $arg in
    --with-cupy) with_cupy=1 ;;
    --with-numba) with_numba=1 ;;
    --with-pycuda) with_pycuda=1 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "cuda-toolchain: unknown argument $arg (see --help)" >&2
        exit 2
        ;;
    esac
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${FAIRGPU_CUDA_PREFIX:-$repo/target/cuda-toolchain}
python=${PYTHON:-python3}

say() {
    printf 'cuda-toolchain: %s\n' "$*" >&2
}

die() {
    printf 'cuda-toolchain: error: %s\n' "$*" >&2
    exit 1
}

command -v "$python" >/dev/null 2>&1 ||
    die "$python not found; install Python 3 with pip (Debian: apt-get install python3 python3-pip)"
"$python" -m pip --version >/dev/null 2>&1 ||
    die "$python has no pip; install it (Debian: apt-get install python3-pip)"

mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

# The stamp of a target dir: the pinned requirements it holds, one a line.
stamp_of() {
    printf '%s\n' "$@"
}

# installed DIR WHEEL...: whether DIR's stamp says the wheels are there
# (and says so).
installed() {
    local dir=$1
    shift
    local stamp="$dir/.fairgpu-installed"
    if [[ -f $stamp && $(cat "$stamp") == "$(stamp_of "$@")" ]]; then
        say "$(basename "$dir"): $* already installed"
        return 0
    fi
    return 1
}

# install DIR WHEEL...: installs the wheels into DIR unless DIR's stamp says
# they are there. A partial or different install is removed first, so a
# changed pin never mixes two releases.
install() {
    local dir=$1
    shift
    local stamp="$dir/.fairgpu-installed"
    installed "$dir" "$@" && return 0
    rm -rf "$dir"
    say "$(basename "$dir"): installing $*"
    # --target installs outside any environment (and so is allowed where
    # the system Python is externally managed); --only-binary: wheels only.
    PIP_ROOT_USER_ACTION=ignore "$python" -m pip install --quiet \
        --disable-pip-version-check --no-input --only-binary=:all: \
        --target "$dir" "$@" >&2 ||
        die "pip could not install $* into $dir"
    stamp_of "$@" >"$stamp"
}

# install_venv DIR WHEEL...: the same, into a new virtual environment.
install_venv() {
    local dir=$1
    shift
    local stamp="$dir/.fairgpu-installed"
    installed "$dir" "$@" && return 0
    rm -rf "$dir"
    say "$(basename "$dir"): installing $* into a virtual environment"
    "$python" -m venv "$dir" >&2 ||
        die "$python could not make a virtual environment (Debian: apt-get install python3-venv)"
    PIP_ROOT_USER_ACTION=ignore "$dir/bin/python" -m pip install --quiet \
        --disable-pip-version-check --no-input --only-binary=:all: "$@" >&2 ||
        die "pip could not install $* into $dir"
    stamp_of "$@" >"$stamp"
}

rm -f "$prefix/env.sh"
install "$prefix/cu13" "${CUDA13_WHEELS[@]}"
install "$prefix/cu12" "${CUDA12_WHEELS[@]}"
if [[ $with_cupy == 1 ]]; then
    install "$prefix/cupy" "${CUPY_WHEELS[@]}"
fi
if [[ $with_numba == 1 ]]; then
    install_venv "$prefix/numba" "${NUMBA_WHEELS[@]}"
fi

# build_pycuda DIR: PyCUDA from its source release into DIR's environment
# (stamped with the release once it imports).
build_pycuda() {
    local dir=$1 cu13="$prefix/cu13/nvidia/cu13"
    local done="$dir/.fairgpu-pycuda"
    [[ -f $done && $(cat "$done") == "$PYCUDA_BUILD" ]] && {
        say "pycuda: PyCUDA $PYCUDA_VERSION already built"
        return 0
    }
    local py="$dir/bin/python" src="$dir/src" wheels="$dir/lib/python3"*/site-packages/nvidia/cu13
    "$py" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' ||
        die "Python's headers (Python.h) are missing; install them (Debian: apt-get install python3-dev)"
    command -v g++ >/dev/null 2>&1 || die "PyCUDA needs g++ to build (Debian: apt-get install g++)"
    say "pycuda: building PyCUDA $PYCUDA_VERSION (about 5 minutes)"
    rm -rf "$src" && mkdir -p "$src/stub"
    "$py" - "$PYCUDA_SDIST" "$PYCUDA_SHA256" "$src/pycuda.tar.gz" <<'PY' || die "could not download PyCUDA's source release"
import hashlib, sys, urllib.request
url, want, out = sys.argv[1:]
data = urllib.request.urlopen(url, timeout=120).read()
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.exit(f"checksum mismatch: {got}")
open(out, "wb").write(data)
PY
    tar -xzf "$src/pycuda.tar.gz" -C "$src" --strip-components=1
    # The extension links against libcuda.so.1; at run time the loader
    # finds the guest library. A stub with that soname is enough to link.
    # It defines cuInit, which PyCUDA calls, so that the linker (which
    # drops libraries nothing is taken from) records the dependency.
    printf 'int cuInit(unsigned int flags) { (void)flags; return 3; }\n' >"$src/stub/stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$src/stub/libcuda.so" "$src/stub/stub.c"
    # shellcheck disable=SC2086 # one match: the environment's site-packages
    wheels=$(echo $wheels)
    ln -sfn libcurand.so.10 "$wheels/lib/libcurand.so"
    cat >"$src/siteconf.py" <<CONF
BOOST_INC_DIR = []
BOOST_LIB_DIR = []
BOOST_COMPILER = 'gcc43'
USE_SHIPPED_BOOST = True
BOOST_PYTHON_LIBNAME = ['boost_python-py3']
BOOST_THREAD_LIBNAME = ['boost_thread']
CUDA_TRACE = False
CUDA_ROOT = '$cu13'
CUDA_ENABLE_GL = False
CUDA_ENABLE_CURAND = True
CUDADRV_LIB_DIR = ['$src/stub']
CUDADRV_LIBNAME = ['cuda']
CUDART_LIB_DIR = ['$cu13/lib']
CUDART_LIBNAME = ['cudart']
CURAND_LIB_DIR = ['$wheels/lib']
CURAND_LIBNAME = ['curand']
CXXFLAGS = ['-I$wheels/include', '-w']
LDFLAGS = ['-Wl,-rpath,$wheels/lib']
CONF
    (cd "$src" && PATH="$cu13/bin:$PATH" PIP_ROOT_USER_ACTION=ignore "$py" -m pip install \
        --quiet --disable-pip-version-check --no-input --no-build-isolation . >&2) ||
        die "PyCUDA did not build in $src"
    # (Its extensions load only with a libcuda.so.1 that has the driver's
    # symbols, as the guest library does: found, not loaded, here.)
    (cd / && "$py" -c 'import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ("pycuda", "pycuda._driver", "pycuda.curandom")))') &&
        nm -D "$dir/lib/python3"*/site-packages/pycuda/_driver.*.so | grep -q curandGetVersion &&
        readelf -d "$dir/lib/python3"*/site-packages/pycuda/_driver.*.so | grep -q 'NEEDED.*libcuda\.so\.1' ||
        die "PyCUDA does not import from $dir; remove it and retry"
    echo "$PYCUDA_BUILD" >"$done"
}
if [[ $with_pycuda == 1 ]]; then
    install_venv "$prefix/pycuda" "${PYCUDA_WHEELS[@]}"
    build_pycuda "$prefix/pycuda"
fi

cu13="$prefix/cu13/nvidia/cu13"
cu12="$prefix/cu12/nvidia/cuda_runtime"
nvcc="$cu13/bin/nvcc"
for f in "$nvcc" "$cu13/include/cuda_runtime.h" "$cu13/lib/libcudart.so.13" \
    "$cu13/include/cccl/cuda/barrier" "$cu13/include/nv/target" \
    "$cu12/include/cuda.h" "$cu12/include/cuda_runtime.h" \
    "$cu12/lib/libcudart.so.12" "$cu12/lib/libcudart_static.a" \
    "$prefix/cu12/nvidia/cuda_cccl/include/cuda/barrier"; do
    [[ -e $f ]] || die "$f missing after the install; remove $prefix and retry"
done
version=$("$nvcc" --version) || die "$nvcc does not run"
[[ $version == *"V$CUDA13_VERSION"* ]] ||
    die "$nvcc is not release $CUDA13_VERSION: $version"

# `-lcudart` needs an unversioned name; the wheels ship only the soname.
ln -sfn libcudart.so.12 "$cu12/lib/libcudart.so"
ln -sfn libcudart.so.13 "$cu13/lib/libcudart.so"

env_text=$(
    cat <<EOF
export FAIRGPU_CUDA_PREFIX='$prefix'
export CUDA_NVCC='$nvcc'
export CUDA12_INCLUDE='$cu12/include'
export CUDA12_LIB='$cu12/lib'
export CUDA12_CCCL='$prefix/cu12/nvidia/cuda_cccl/include'
export CUDA13_INCLUDE='$cu13/include'
export CUDA13_LIB='$cu13/lib'
export CUDA13_CCCL='$cu13/include/cccl'
EOF
)
if [[ -f $prefix/cupy/.fairgpu-installed ]]; then
    nvrtc="$prefix/cupy/nvidia/cuda_nvrtc/lib"
    [[ -e $nvrtc/libnvrtc.so.12 && -d $prefix/cupy/cupy ]] ||
        die "CuPy or NVRTC missing from $prefix/cupy; remove it and retry"
    env_text+=$'\n'"export CUPY_PYTHONPATH='$prefix/cupy'"
    env_text+=$'\n'"export CUPY_CUDA_PATH='$cu12'"
    env_text+=$'\n'"export CUPY_NVRTC_LIB='$nvrtc'"
    curand="$prefix/cupy/nvidia/curand/lib"
    [[ -e $curand/libcurand.so.10 ]] ||
        die "cuRAND missing from $prefix/cupy; remove it and retry"
    env_text+=$'\n'"export CUPY_CURAND_LIB='$curand'"
    nvjitlink="$prefix/cupy/nvidia/nvjitlink/lib"
    [[ -e $nvjitlink/libnvJitLink.so.12 ]] ||
        die "nvJitLink missing from $prefix/cupy; remove it and retry"
    env_text+=$'\n'"export CUPY_NVJITLINK_LIB='$nvjitlink'"
fi
if [[ -f $prefix/numba/.fairgpu-installed ]]; then
    "$prefix/numba/bin/python" -c 'import numba.cuda, numpy' 2>/dev/null ||
        die "Numba does not import from $prefix/numba; remove it and retry"
    env_text+=$'\n'"export NUMBA_PYTHON='$prefix/numba/bin/python'"
fi
if [[ -f $prefix/pycuda/.fairgpu-pycuda ]]; then
    pycuda_lib=$(echo "$prefix/pycuda/lib/python3"*/site-packages/nvidia/cu13/lib)
    env_text+=$'\n'"export PYCUDA_PYTHON='$prefix/pycuda/bin/python'"
    env_text+=$'\n'"export PYCUDA_TESTS='$prefix/pycuda/src/test'"
    env_text+=$'\n'"export PYCUDA_LIB='$pycuda_lib:$cu13/lib'"
    env_text+=$'\n'"export PYCUDA_INCLUDE='${pycuda_lib%/lib}/include'"
fi
printf '%s\n' "$env_text" >"$prefix/env.sh.tmp"
mv "$prefix/env.sh.tmp" "$prefix/env.sh"
command -v g++ >/dev/null 2>&1 || say "warning: no g++ on PATH; nvcc needs it to compile"
say "ready: nvcc $CUDA13_VERSION, cudart $CUDA12_RUNTIME_VERSION and $CUDA13_VERSION in $prefix ($(du -sh "$prefix" | cut -f1))"
printf '%s\n' "$env_text"
