#!/usr/bin/env bash
# Measures SimGpu's PTX interpreter through the whole stack: a release
# `fairgpu serve` on SimGpu with one VM, and CUDA programs of this folder
# (the cu12 build, FAIRGPU_CHECK_RESULTS=1) running against the release
# guest library. From the daemon's debug lines ("kernel executed": threads,
# instructions, host time of each launch) it prints, per program: its wall
# time, the launches and instructions SimGpu executed, the host time spent
# executing them, and the instructions per second.
#
#   cargo build --release -p fairgpu-cli -p fairgpu-guest
#   tests/cuda/measure-interpreter.sh [PROGRAM[:ARG]...]
#
# Default: every program that checks what kernels compute, then
# `matmul:256` (matmul with its argument 256: 256x256 matrices).
#
# The toolchain is found as build.sh finds it; the programs are built into
# target/release/cuda-programs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=$repo/target/release/fairgpu
lib=$repo/target/release/libcuda.so
for f in "$bin" "$lib"; do
    [[ -e $f ]] || {
        echo "error: $f missing: cargo build --release -p fairgpu-cli -p fairgpu-guest" >&2
        exit 1
    }
done
programs=("$@")
[[ ${#programs[@]} -gt 0 ]] ||
    programs=(vector_add saxpy matmul reduction histogram scan struct_arg matmul:256)

out=$repo/target/release/cuda-programs
bash "$here/build.sh" "$out" >/dev/null

tmp=$(mktemp -d)
region=/dev/shm/fairgpu-measure-$$
pid=
cleanup() {
    if [[ -n $pid ]]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    [[ -n ${KEEP_TMP:-} ]] || rm -rf "$tmp"
}
trap cleanup EXIT
ln -s "$lib" "$tmp/libcuda.so.1"
cat >"$tmp/fairgpu.toml" <<TOML
[daemon]
control_socket = "$tmp/control.sock"
executor = "sim"
state_dir = "$tmp"

[sim]
kernels = [{ name = "spin", duration_param = 0, execute = false }]

[[vm]]
name = "measure"
memory = "1GiB"
region = "$region"
channels = 4
TOML

FAIRGPU_LOG=info,fairgpu_executor::sim=debug "$bin" serve --config "$tmp/fairgpu.toml" \
    2>"$tmp/log" &
pid=$!
for _ in $(seq 100); do
    grep -q "serving" "$tmp/log" 2>/dev/null && break
    sleep 0.1
done
grep -q "serving" "$tmp/log" || {
    cat "$tmp/log" >&2
    echo "error: the daemon's worker did not start" >&2
    exit 1
}

printf '%-12s %8s %9s %14s %9s %12s\n' program wall_s launches instructions exec_s Minstr/s
for spec in "${programs[@]}"; do
    p=${spec%%:*}
    args=()
    [[ $spec == *:* ]] && args=("${spec#*:}")
    before=$(wc -l <"$tmp/log")
    t0=$(date +%s.%N)
    LD_LIBRARY_PATH=$tmp FAIRGPU_REGION=$region FAIRGPU_CHECK_RESULTS=1 "$out/$p-cu12" \
        "${args[@]}" >"$tmp/$p.out" || {
        cat "$tmp/$p.out" >&2
        exit 1
    }
    t1=$(date +%s.%N)
    grep -q "^PASS $p$" "$tmp/$p.out"
    sleep 0.2 # the last debug lines
    tail -n +"$((before + 1))" "$tmp/log" | sed 's/\x1b\[[0-9;]*m//g' |
        awk -v p="$spec" -v wall="$(echo "$t1 - $t0" | bc)" '
            /kernel executed/ {
                n++
                for (i = 1; i <= NF; i++) {
                    split($i, kv, "=")
                    if (kv[1] == "instructions") ins += kv[2]
                    if (kv[1] == "host_us") us += kv[2]
                }
            }
            END {
                rate = us > 0 ? ins / us : 0
                printf "%-12s %8.2f %9d %14d %9.3f %12.1f\n", p, wall, n, ins, us / 1e6, rate
            }'
done
