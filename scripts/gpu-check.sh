#!/usr/bin/env bash
# Checks the CUDA executor on a host with an NVIDIA GPU, using release
# binaries built elsewhere (no Rust toolchain or network needed here).
#
#   scripts/gpu-check.sh [ARGS...]
#
# Runs `fairgpu gpu-check ARGS...` (a worker with the CUDA executor loads a
# PTX kernel, launches it and checks the results) and exits with its status.
# On a host without an NVIDIA GPU it says so and exits 0.
#
# Environment:
#   FAIRGPU_BIN        the fairgpu binary (default: target/release/fairgpu
#                      beside this script's repository)
#   GPU_CHECK_TIMEOUT  seconds before the check is stopped (default 300)
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
exit "$status"
