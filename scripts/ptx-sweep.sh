#!/usr/bin/env bash
# Compiles every kernel source of NVIDIA's CUDA samples to PTX with nvcc and
# checks all of it against SimGpu (`fairgpu ptx-check`): which files it
# cannot load and which instructions of which kernels it cannot execute,
# summed up by instruction.
#
#   scripts/ptx-sweep.sh [--extra-include DIR]... SAMPLES_TREE OUTDIR
#
# SAMPLES_TREE is a cuda-samples checkout (Common/ and Samples/). Every .cu
# file under Samples/ except 7_libNVVM and 8_Platform_Specific is compiled
# with `nvcc -ptx -std=c++17 -arch=compute_90 -I<tree>/Common -I<its dir>`
# (retried with -rdc=true, which dynamic parallelism needs); files that do
# not compile (headers of libraries the toolchain lacks) are listed, not
# checked. --extra-include adds include folders (CCCL's, for example).
# nvcc comes from scripts/cuda-toolchain.sh (FAIRGPU_CUDA_PREFIX, default
# target/cuda-toolchain); fairgpu from target/release (built if missing).
#
# OUTDIR gets ptx/ (one file per source), not-built.txt, check.txt (the
# ptx-check report) and summary.txt: each unsupported instruction (line
# numbers dropped) with how many kernels hold it, and the load errors.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}
extra=()
while [[ $# -gt 0 ]]; do
    case $1 in
    --extra-include)
        extra+=("-I$2")
        shift 2
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *) break ;;
    esac
done
[[ $# -eq 2 ]] || {
    usage >&2
    exit 2
}
tree=$(cd "$1" && pwd)
mkdir -p "$2/ptx"
out=$(cd "$2" && pwd)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${FAIRGPU_CUDA_PREFIX:-$repo/target/cuda-toolchain}
[[ -f $prefix/env.sh ]] || {
    echo "error: no CUDA toolchain in $prefix (run scripts/cuda-toolchain.sh)" >&2
    exit 1
}
# shellcheck source=/dev/null
. "$prefix/env.sh"
fairgpu=$repo/target/release/fairgpu
[[ -x $fairgpu ]] || (cd "$repo" && cargo build --release -p fairgpu-cli)

: >"$out/not-built.txt"
n=0
while IFS= read -r src; do
    rel=${src#"$tree/Samples/"}
    name=$(printf '%s' "${rel%.cu}" | tr '/' '_')
    ptx="$out/ptx/$name.ptx"
    n=$((n + 1))
    [[ -s $ptx && $ptx -nt $src ]] && continue
    dir=$(dirname "$src")
    args=(-ptx -std=c++17 -arch=compute_90 -I"$tree/Common" -I"$dir" "${extra[@]}" "$src" -o "$ptx")
    if ! nice -n 19 "$CUDA_NVCC" "${args[@]}" >"$out/ptx/$name.log" 2>&1 &&
        ! nice -n 19 "$CUDA_NVCC" -rdc=true "${args[@]}" >"$out/ptx/$name.log" 2>&1; then
        rm -f "$ptx"
        printf '%s\t%s\n' "$rel" "$(grep -m1 -i 'error' "$out/ptx/$name.log" || echo 'nvcc failed')" \
            >>"$out/not-built.txt"
    fi
done < <(find "$tree/Samples" -name '*.cu' -not -path '*/7_libNVVM/*' \
    -not -path '*/8_Platform_Specific/*' | sort)

shopt -s nullglob
files=("$out"/ptx/*.ptx)
"$fairgpu" ptx-check --quiet "${files[@]}" >"$out/check.txt" || true
{
    echo "sources: $n, built to PTX: ${#files[@]}, not built: $(wc -l <"$out/not-built.txt")"
    tail -n 1 "$out/check.txt"
    echo
    echo "kernels  unsupported instruction"
    # One line per kernel and instruction (line numbers dropped), counted.
    grep ': unsupported: ' "$out/check.txt" |
        sed -E 's/ ?\(line [0-9]+\)//; s/; line [0-9]+//' | sort -u |
        sed -E 's/^[^:]+: [^:]+: unsupported: //' | sort | uniq -c | sort -rn
    echo
    echo "files SimGpu cannot load:"
    grep ': cannot be loaded: ' "$out/check.txt" || echo "  none"
} >"$out/summary.txt"
cat "$out/summary.txt"
