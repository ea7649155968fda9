#!/usr/bin/env bash
# The runaway guard on a host with an NVIDIA GPU (docs/long-kernels.md): a
# daemon with executor "cuda" and max_request_ms = 500; a guest through
# fairgpu times short kernels, launches a kernel that never ends (its
# synchronize and next call must return 702, CUDA_ERROR_LAUNCH_TIMEOUT),
# and short kernels run again once a fresh worker serves the VM.
#
#   FAIRGPU_BIN=... FAIRGPU_GUEST_LIB=... scripts/gpu-runaway-check.sh
#
# Needs gcc (tests/gpu/runaway.c loads libcuda.so.1 with dlopen).
root=$(cd "$(dirname "$0")/.." && pwd)
bin="${FAIRGPU_BIN:-$root/target/release/fairgpu}"
lib="${FAIRGPU_GUEST_LIB:-$root/target/release/libcuda.so}"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
gcc -O2 -o $W/runaway "$root/tests/gpu/runaway.c" -ldl || exit 1
ln -s "$lib" $W/libcuda.so.1
cat > $W/f.toml <<EOT
[daemon]
control_socket = "$W/control.sock"
executor = "cuda"
state_dir = "$W"
max_request_ms = 500
[[vm]]
name = "vm1"
weight = 1
memory = "4GiB"
region = "/dev/shm/fairgpu-runaway-$$"
channels = 4
EOT
"$bin" serve --config $W/f.toml --log warn > $W/daemon.log 2>&1 &
D=$!
for _ in $(seq 100); do [[ -e /dev/shm/fairgpu-runaway-$$ ]] && break; sleep 0.1; done
sleep 1
export LD_LIBRARY_PATH=$W FAIRGPU_REGION=/dev/shm/fairgpu-runaway-$$
timeout 60 $W/runaway tiny
eater=$(timeout 60 $W/runaway eater); echo "$eater"
sleep 2
after=0; timeout 60 $W/runaway tiny || after=$?
"$bin" status --socket $W/control.sock --log warn
kill $D; wait $D
echo "--- daemon log"; tail -n 12 $W/daemon.log
if grep -q "eater synchronize -> 702" <<<"$eater" && grep -q "next call (cuMemAlloc) -> 702" <<<"$eater" && [[ $after -eq 0 ]]; then
    echo "runaway check: PASS"
else
    echo "runaway check: FAIL"
    exit 1
fi
