#!/usr/bin/env bash
# Checks the CUDA executor on a host with an NVIDIA GPU, using release
# binaries built elsewhere (no Rust toolchain or network needed here).
#
#   scripts/gpu-check.sh [ARGS...]
#
# Runs `fairgpu gpu-check ARGS...` (a worker with the CUDA executor loads a
# PTX kernel, launches it and checks the results). Then, if the CUDA test
# programs were built and carried here (tests/cuda/build.sh output), runs
# each of them natively and through the guest library against a daemon on
# the GPU, checking kernel results too (FAIRGPU_CHECK_RESULTS=1), and, if
# CuPy or PyTorch is installed, their checks (tests/cupy, tests/torch) both
# ways. Exits non-zero if
# anything failed. On a host without an NVIDIA GPU it says so and exits 0.
#
# Environment:
#   FAIRGPU_BIN        the fairgpu binary (default: target/release/fairgpu
#                      beside this script's repository)
#   GPU_CHECK_TIMEOUT  seconds before the check is stopped (default 300)
#   FAIRGPU_GUEST_LIB  the guest library (default target/release/libcuda.so)
#   FAIRGPU_PROGRAMS   built test programs (default: the first of
#                      target/release/cuda-programs, target/debug/cuda-programs)
#   GPU_CHECK_LOGS     a folder that keeps each program's output, both ways
#                      (NAME.native.out, NAME.fairgpu.out)
#   GPU_CHECK_DAEMON   extra [daemon] lines for the daemon the programs use
#                      through fairgpu, e.g. "kernel_slice_ms = 0.01" and
#                      "kernel_slice_blocks = 1" (newline-separated) to run
#                      every multi-block kernel as parts (docs/long-kernels.md)
#   FAIRGPU_OPENCL_PROGRAMS  built OpenCL test programs (tests/opencl/build.sh
#                      output; default: the first of target/release/opencl-programs,
#                      target/debug/opencl-programs). Each runs natively on the
#                      host's platform and through fairgpu's ICD, whose worker
#                      runs it on that same platform (NVIDIA's on a GPU host)
#   FAIRGPU_OPENCL_ICD the ICD (default target/release/libfairgpu_opencl.so)
#   GPU_CHECK_OPENCL_PLATFORM  a substring of the host platform's name for the
#                      native runs (default NVIDIA)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${FAIRGPU_BIN:-$root/target/release/fairgpu}"
limit="${GPU_CHECK_TIMEOUT:-300}"

no_gpu() {
    echo "no NVIDIA GPU on this host; nothing to check"
    exit 0
}

command -v nvidia-smi >/dev/null 2>&1 || no_gpu
if ! gpus="$(nvidia-smi -L 2>&1)"; then
    echo "nvidia-smi -L failed: $gpus" >&2
    no_gpu
fi
grep -q '^GPU ' <<<"$gpus" || no_gpu
echo "$gpus"

if [[ ! -x "$bin" ]]; then
    echo "gpu-check: no executable fairgpu binary at $bin (set FAIRGPU_BIN)" >&2
    exit 2
fi

run=("$bin" gpu-check "$@")
if command -v timeout >/dev/null 2>&1; then
    run=(timeout "$limit" "${run[@]}")
fi

start=$SECONDS
status=0
"${run[@]}" || status=$?
elapsed=$((SECONDS - start))

# ---- the test programs and CuPy, natively and through fairgpu ----
guest_lib="${FAIRGPU_GUEST_LIB:-$root/target/release/libcuda.so}"
programs="${FAIRGPU_PROGRAMS:-}"
if [[ -z "$programs" ]]; then
    for d in "$root/target/release/cuda-programs" "$root/target/debug/cuda-programs"; do
        [[ -d "$d" ]] && { programs="$d"; break; }
    done
fi
cl_programs="${FAIRGPU_OPENCL_PROGRAMS:-}"
if [[ -z "$cl_programs" ]]; then
    for d in "$root/target/release/opencl-programs" "$root/target/debug/opencl-programs"; do
        [[ -d "$d" ]] && { cl_programs="$d"; break; }
    done
fi
cl_icd="${FAIRGPU_OPENCL_ICD:-$root/target/release/libfairgpu_opencl.so}"
prefix="${FAIRGPU_CUDA_PREFIX:-$root/target/cuda-toolchain}"
cudart_path="$prefix/cu12/nvidia/cuda_runtime/lib:$prefix/cu13/nvidia/cu13/lib"
results=()
failures=0

note() {
    results+=("$1")
    [[ "$1" == *FAIL* ]] && failures=$((failures + 1))
    return 0
}

if [[ -f "$guest_lib" ]]; then
    work="$(mktemp -d)"
    daemon_pid=""
    cleanup() {
        [[ -n "$daemon_pid" ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
        rm -rf "$work"
    }
    trap cleanup EXIT
    ln -s "$guest_lib" "$work/libcuda.so.1"
    ln -s "$guest_lib" "$work/libcuda.so"
    region="/dev/shm/fairgpu-gpu-check-$$"
    cat >"$work/fairgpu.toml" <<EOT
[daemon]
control_socket = "$work/control.sock"
executor = "cuda"
state_dir = "$work"
${GPU_CHECK_DAEMON:-}

[[vm]]
name = "check"
weight = 1
memory = "8GiB"
region = "$region"
channels = 8
EOT
    "$bin" serve --config "$work/fairgpu.toml" --log warn &
    daemon_pid=$!
    for _ in $(seq 100); do [[ -e "$region" ]] && break; sleep 0.1; done

    # Notes one check from the exit statuses of its native and fairgpu runs
    # (their output in $work/native.out and $work/fair.out).
    judge() { # NAME NATIVE_STATUS FAIRGPU_STATUS
        local name="$1" native="$2" fair="$3"
        if [[ -n "${GPU_CHECK_LOGS:-}" ]]; then
            mkdir -p "$(dirname "$GPU_CHECK_LOGS/$name")"
            cp "$work/native.out" "$GPU_CHECK_LOGS/$name.native.out"
            cp "$work/fair.out" "$GPU_CHECK_LOGS/$name.fairgpu.out"
        fi
        if [[ $native -eq 0 && $fair -eq 0 ]]; then
            note "ok    $name (native and through fairgpu)"
        elif [[ $native -ne 0 && $fair -ne 0 ]]; then
            note "FAIL  $name fails natively too (native $native, fairgpu $fair): $(tail -n 1 "$work/native.out")"
        else
            note "FAIL  $name: native exit $native, fairgpu exit $fair: $(tail -n 1 "$work/fair.out")"
        fi
    }

    both_ways() { # NAME COMMAND...
        local name="$1"; shift
        local native fair
        native=0; env LD_LIBRARY_PATH="$cudart_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            FAIRGPU_CHECK_RESULTS=1 FAIRGPU_SIM_TIMING=0 timeout 120 "$@" >"$work/native.out" 2>&1 || native=$?
        fair=0; env LD_LIBRARY_PATH="$work:$cudart_path" FAIRGPU_REGION="$region" \
            FAIRGPU_CHECK_RESULTS=1 FAIRGPU_SIM_TIMING=0 timeout 120 "$@" >"$work/fair.out" 2>&1 || fair=$?
        judge "$name" "$native" "$fair"
    }

    if [[ -n "$programs" ]]; then
        for p in "$programs"/*; do
            [[ -f "$p" && -x "$p" ]] || continue
            both_ways "$(basename "$p")" "$p"
        done
    fi
    if python3 -c 'import cupy' >/dev/null 2>&1; then
        # The CuPy checks CI runs on SimGpu (every result against NumPy).
        both_ways cupy python3 "$root/tests/cupy/check.py"
    fi
    if python3 -c 'import torch' >/dev/null 2>&1; then
        # PyTorch: creation, elementwise, reductions, cuBLAS matmul, a small
        # training loop, streams and events, each against the CPU.
        both_ways torch python3 "$root/tests/torch/check.py"
    fi
    # OpenCL: natively on the host's platform, then through fairgpu's ICD,
    # whose worker uses that platform.
    cl_both_ways() { # NAME COMMAND...
        local name="$1"; shift
        local native fair
        native=0; env OPENCL_PLATFORM="${GPU_CHECK_OPENCL_PLATFORM:-NVIDIA}" \
            timeout 120 "$@" >"$work/native.out" 2>&1 || native=$?
        # OCL_ICD_VENDORS for ocl-icd (PyOpenCL's bundled loader too),
        # OCL_ICD_FILENAMES for Khronos' loader (NVIDIA's libOpenCL), which
        # does not read the former.
        fair=0; env OCL_ICD_VENDORS="$work/icd" OCL_ICD_FILENAMES="$cl_icd" \
            OPENCL_PLATFORM=fairgpu FAIRGPU_REGION="$region" \
            timeout 120 "$@" >"$work/fair.out" 2>&1 || fair=$?
        judge "$name" "$native" "$fair"
    }
    if [[ -n "$cl_programs" && -f "$cl_icd" ]]; then
        mkdir -p "$work/icd"
        echo "$cl_icd" >"$work/icd/fairgpu.icd"
        for p in "$cl_programs"/*; do
            [[ -f "$p" && -x "$p" ]] || continue
            cl_both_ways "opencl/$(basename "$p")" "$p"
        done
        if python3 -c 'import pyopencl, mako' >/dev/null 2>&1; then
            # PyOpenCL: arrays, a custom kernel, reductions, against NumPy.
            cl_both_ways opencl/pyopencl python3 "$root/tests/opencl/pyopencl_basic.py"
        fi
    fi
    # What the daemon did: kernel slicing and the runaway guard, restarts.
    "$bin" status --socket "$work/control.sock" --log warn || true
fi

echo "---- gpu-check report ----"
echo "binary:  $bin"
echo "driver:  $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 || echo unknown)"
echo "time:    ${elapsed}s"
if [[ $status -eq 0 ]]; then
    echo "result:  PASS"
elif [[ $status -eq 124 ]]; then
    echo "result:  FAIL (timed out after ${limit}s)"
else
    echo "result:  FAIL (exit status $status)"
fi
for r in "${results[@]}"; do echo "  $r"; done
if [[ $status -eq 0 && $failures -gt 0 ]]; then
    status=1
fi
exit "$status"
