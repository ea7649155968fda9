#!/usr/bin/env bash
# The project's one test command: what CI runs and what the README tells
# contributors to run. Expects rustup's stable toolchain; everything else it
# needs it checks for, and says what is missing.
#
# Environment:
#   CARGO_BUILD_JOBS          parallel rustc jobs (default: nproc)
#   FAIRGPU_SKIP_FUZZ_CHECK   if set (to anything), skip checking and running fuzz/
#   FAIRGPU_FUZZ_SECONDS      how long each fuzz target runs (default 20)
#   FAIRGPU_CUDA_PREFIX       where the CUDA toolchain (and CuPy, Numba) is installed
#                             (default: target/cuda-toolchain)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() {
    printf '\n== %s ==\n' "$*"
}

die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# ---------------------------------------------------------------------------
# System packages
#
# apt_install CMD[:PKG]...
#   Installs, with apt-get, the package providing each command that is not on
#   PATH (PKG defaults to CMD). Runs `apt-get update` at most once per run.
#   Uses sudo only when not root. For tools that later steps need (QEMU,
#   nvcc's host compiler, ...); e.g. `apt_install qemu-system-x86_64:qemu-system-x86`.
# ---------------------------------------------------------------------------
APT_UPDATED=0

# apt_get_install PKG...: installs the packages (sudo when not root).
apt_get_install() {
    command -v apt-get >/dev/null 2>&1 ||
        die "missing packages $* and no apt-get to install them with"
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 ||
            die "missing packages $*; not root and no sudo to install them"
        sudo=(sudo)
    fi
    if [[ $APT_UPDATED -eq 0 ]]; then
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
        APT_UPDATED=1
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "$@"
}

apt_install() {
    local want=() spec cmd pkg
    for spec in "$@"; do
        cmd=${spec%%:*}
        pkg=${spec#*:}
        command -v "$cmd" >/dev/null 2>&1 || want+=("$pkg")
    done
    [[ ${#want[@]} -eq 0 ]] || apt_get_install "${want[@]}"
}

# apt_packages PKG...
#   Installs the Debian packages that are not installed yet (for libraries
#   and headers, which have no command to look for).
apt_packages() {
    local want=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
            want+=("$pkg")
    done
    [[ ${#want[@]} -eq 0 ]] || apt_get_install "${want[@]}"
}

# ---------------------------------------------------------------------------
# Toolchain
# ---------------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1 && [[ -f "${CARGO_HOME:-$HOME/.cargo}/env" ]]; then
    # rustup installs here but only login shells pick it up.
    # shellcheck source=/dev/null
    . "${CARGO_HOME:-$HOME/.cargo}/env"
fi
command -v cargo >/dev/null 2>&1 ||
    die "cargo not found; install Rust with rustup (https://rustup.rs) and retry"
command -v cc >/dev/null 2>&1 ||
    die "no C compiler/linker (cc) found; rustc needs one to link (Debian: apt-get install gcc)"

for component in rustfmt clippy; do
    sub=${component/rustfmt/fmt}
    if ! cargo "$sub" --version >/dev/null 2>&1; then
        command -v rustup >/dev/null 2>&1 ||
            die "cargo $sub is missing and rustup is not available to add $component"
        step "rustup component add $component"
        rustup component add "$component"
    fi
done

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-$(nproc)}"

# ---------------------------------------------------------------------------
# Gates
# ---------------------------------------------------------------------------
step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

# Builds the `fairgpu` binary that the multi-process tests spawn.
step "cargo build"
cargo build --workspace --locked

# ---------------------------------------------------------------------------
# QEMU
#
# A real guest for tests/tests/qemu_guest.rs and qemu-ivshmem/tests/qemu.rs:
# QEMU from apt, and a Debian cloud kernel + busybox initramfs holding the
# `fairgpu` just built (scripts/guest-image.sh; from Debian packages, cached
# in target/guest-image: about 5 s to build, under 3 s when up to date).
# With FAIRGPU_REQUIRE_QEMU set those tests fail instead of skipping.
# ---------------------------------------------------------------------------
step "QEMU"
apt_install qemu-system-x86_64:qemu-system-x86
scripts/guest-image.sh target/guest-image target/debug/fairgpu
export FAIRGPU_REQUIRE_QEMU=1

# nvcc 13 and NVIDIA's libcudart 12.9 and 13, from PyPI wheels (no GPU
# needed), for the real CUDA programs tests/tests/cuda_programs.rs builds and
# runs against the guest library. A fresh install takes seconds and about
# 270 MB under target/; later runs find it in place.
step "CUDA toolchain"
python3 -m pip --version >/dev/null 2>&1 || apt_install python3:python3 pip3:python3-pip
apt_install gcc:gcc g++:g++
export FAIRGPU_CUDA_PREFIX="${FAIRGPU_CUDA_PREFIX:-$PWD/target/cuda-toolchain}"
# With CuPy for CUDA 12 and NVRTC (about 600 MB more, a fresh install in
# about 10 s): tests/tests/cupy.rs runs tests/cupy/check.py through the
# guest library, every result compared with NumPy.
# With Numba's CUDA target as well (a virtual environment of about 700 MB,
# a fresh install in about 30 s): tests/tests/numba.rs runs
# tests/numba/check.py the same way.
# With PyCUDA as well, built from its source release against the CUDA 13
# headers (a virtual environment of about 300 MB; the first build takes
# about 5 minutes of one core, later runs find it in place; it needs
# Python's headers): tests/tests/pycuda.rs runs PyCUDA's own test files.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || apt_get_install python3-venv
python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' ||
    apt_get_install python3-dev
scripts/cuda-toolchain.sh --with-cupy --with-numba --with-pycuda >/dev/null
export FAIRGPU_REQUIRE_CUPY=1
export FAIRGPU_REQUIRE_NUMBA=1
export FAIRGPU_REQUIRE_PYCUDA=1

# OpenCL: the ICD loader (ocl-icd), the Khronos headers and PoCL, a CPU
# OpenCL platform, for tests/tests/opencl.rs: the workers run guests'
# OpenCL calls on PoCL, and the C programs of tests/opencl/ link the
# loader. PyOpenCL (its wheel bundles its own ICD loader) with NumPy and
# Mako, from PyPI into target/pyopencl, for tests/opencl/pyopencl_basic.py.
step "OpenCL"
apt_packages ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd
export FAIRGPU_PYOPENCL_PATH="${FAIRGPU_PYOPENCL_PATH:-$PWD/target/pyopencl}"
pyopencl_wheels=(pyopencl numpy mako)
if [[ ! -f $FAIRGPU_PYOPENCL_PATH/.fairgpu-installed ]]; then
    rm -rf "$FAIRGPU_PYOPENCL_PATH"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet \
        --disable-pip-version-check --no-input --only-binary=:all: \
        --target "$FAIRGPU_PYOPENCL_PATH" "${pyopencl_wheels[@]}" ||
        die "pip could not install ${pyopencl_wheels[*]} into $FAIRGPU_PYOPENCL_PATH"
    echo "${pyopencl_wheels[*]}" >"$FAIRGPU_PYOPENCL_PATH/.fairgpu-installed"
fi
export FAIRGPU_REQUIRE_PYOPENCL=1

# Every test run's output also goes to a log, summed up at the end.
results=$(mktemp)
trap 'rm -f "$results"' EXIT

step "cargo test"
cargo test --workspace --locked 2>&1 | tee -a "$results"

# loom explores every interleaving; release keeps it fast.
step "loom model check of the ring"
cargo test -p fairgpu-protocol --test ring_loom --release --locked 2>&1 | tee -a "$results"

if [[ -z "${FAIRGPU_SKIP_FUZZ_CHECK+set}" ]]; then
    # fuzz/ is its own workspace, so the root fmt and check do not reach it.
    # --no-default-features skips building libFuzzer (C++); see fuzz/README.md.
    step "fuzz targets: fmt and check"
    cargo fmt --manifest-path fuzz/Cargo.toml -- --check
    cargo check --manifest-path fuzz/Cargo.toml --no-default-features
    # Every target, briefly, with libFuzzer (built on stable): a crash fails.
    step "fuzz targets: ${FAIRGPU_FUZZ_SECONDS:-20} s each"
    scripts/fuzz.sh --seconds "${FAIRGPU_FUZZ_SECONDS:-20}"
fi

# The daemon under chaos: 8 VMs of mixed workloads (and the CUDA programs
# built above), guests and workers SIGKILLed at random; leaks, hangs,
# reclaim and fairness checked (see scripts/soak.sh --help). The debug
# binaries are the ones built above.
step "soak (2 min)"
scripts/soak.sh --profile debug 2m

step "all checks passed"
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$results"
