#!/usr/bin/env bash
# Builds the CUDA test programs into OUTDIR:
#
#   NAME-cu12         nvcc 13 with the CUDA 12.9 headers, linked against
#                     libcudart.so.12 (shared; rpath to the toolchain)
#   NAME-cu12static   the same objects, linked with libcudart_static.a
#                     (nvcc's default)
#   NAME-cu13         nvcc 13 with the CUDA 13 headers, linked against
#                     libcudart.so.13 (shared; rpath to the toolchain)
#   driver_api,       C with gcc against cuda.h (12.9) only; they load
#   legacy_api,       libcuda.so.1 with dlopen (driver_common.h)
#   contexts
#
# for every NAME.cu beside this script. None links against libcuda: the
# CUDA runtime and the C programs load libcuda.so.1 at run time, so whichever
# the loader finds (LD_LIBRARY_PATH) is the driver they use.
#
# The toolchain comes from scripts/cuda-toolchain.sh, found through
# FAIRGPU_CUDA_PREFIX (default: target/cuda-toolchain in the repository).
# Outputs newer than their sources are kept. Extra nvcc flags:
# CUDA_TEST_NVCC_FLAGS (e.g. --compress-mode=none); a program's own, from
# its first line if that is "// nvcc-flags: ...". Prints the built
# programs, one path a line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
[[ $# -eq 1 ]] || {
    echo "usage: $0 OUTDIR" >&2
    exit 2
}
mkdir -p "$1"
out=$(cd "$1" && pwd)

prefix=${FAIRGPU_CUDA_PREFIX:-$repo/target/cuda-toolchain}
if [[ ! -f $prefix/env.sh ]]; then
    echo "error: CUDA toolchain not installed in $prefix (run scripts/cuda-toolchain.sh)" >&2
    exit 1
fi
# shellcheck source=/dev/null
. "$prefix/env.sh"
for tool in g++ gcc; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "error: $tool not found; nvcc needs it (Debian: apt-get install g++)" >&2
        exit 1
    }
done

read -r -a extra <<<"${CUDA_TEST_NVCC_FLAGS:-}"

# stale OUT IN...: whether OUT is missing or older than any IN.
stale() {
    local o=$1 i
    shift
    [[ -e $o ]] || return 0
    for i in "$@"; do
        [[ $i -nt $o ]] && return 0
    done
    return 1
}

# run CMD...: runs a build command, showing it if it fails.
run() {
    if ! "$@"; then
        echo "error: failed: $*" >&2
        exit 1
    fi
}

# The flags are part of every object: a change rebuilds them.
mkdir -p "$out/obj"
flags_stamp="$out/obj/nvcc-flags"
flags_now="$CUDA_NVCC ${extra[*]}"
if [[ ! -f $flags_stamp || $(cat "$flags_stamp") != "$flags_now" ]]; then
    printf '%s\n' "$flags_now" >"$flags_stamp"
fi
deps=("$here/common.h" "$here/build.sh" "$prefix/env.sh" "$flags_stamp")
for src in "$here"/*.cu; do
    name=$(basename "$src" .cu)
    for v in 12 13; do
        if [[ $v == 12 ]]; then
            inc=$CUDA12_INCLUDE cccl=$CUDA12_CCCL
        else
            inc=$CUDA13_INCLUDE cccl=$CUDA13_CCCL
        fi
        obj="$out/obj/$name-cu$v.o"
        # A program may ask for flags of its own (a first line
        # "// nvcc-flags: ..."), e.g. an architecture its code needs.
        read -r -a own <<<"$(sed -n '1s|^// nvcc-flags: ||p' "$src")"
        if stale "$obj" "$src" "${deps[@]}"; then
            run "$CUDA_NVCC" -std=c++17 -O1 -I"$inc" -I"$cccl" "${own[@]}" "${extra[@]}" \
                -c "$src" -o "$obj.tmp"
            mv "$obj.tmp" "$obj"
            # Relocatable device code (dynamic parallelism) is device-linked
            # with the device runtime before the host link.
            if [[ " ${own[*]} " == *" -rdc=true "* ]]; then
                [[ $v == 12 ]] && lib=$CUDA12_LIB || lib=$CUDA13_LIB
                run "$CUDA_NVCC" "${own[@]}" "${extra[@]}" -dlink "$obj" -o "$obj.dlink.o" \
                    -L"$lib" -lcudadevrt
            else
                rm -f "$obj.dlink.o"
            fi
        fi
    done
    o12=("$out/obj/$name-cu12.o")
    o13=("$out/obj/$name-cu13.o")
    devrt=()
    if [[ -f $out/obj/$name-cu12.o.dlink.o ]]; then
        o12+=("$out/obj/$name-cu12.o.dlink.o")
        o13+=("$out/obj/$name-cu13.o.dlink.o")
        devrt=(-lcudadevrt)
    fi
    if stale "$out/$name-cu12" "${o12[@]}"; then
        run g++ -pthread "${o12[@]}" -o "$out/$name-cu12" -L"$CUDA12_LIB" "${devrt[@]}" -lcudart \
            -Wl,-rpath,"$CUDA12_LIB"
    fi
    if stale "$out/$name-cu12static" "${o12[@]}"; then
        run g++ -pthread "${o12[@]}" -o "$out/$name-cu12static" -L"$CUDA12_LIB" "${devrt[@]}" \
            -lcudart_static -ldl -lpthread -lrt
    fi
    if stale "$out/$name-cu13" "${o13[@]}"; then
        run g++ -pthread "${o13[@]}" -o "$out/$name-cu13" -L"$CUDA13_LIB" "${devrt[@]}" -lcudart \
            -Wl,-rpath,"$CUDA13_LIB"
    fi
    printf '%s\n' "$out/$name-cu12" "$out/$name-cu12static" "$out/$name-cu13"
done

for name in driver_api legacy_api contexts; do
    if stale "$out/$name" "$here/$name.c" "$here/driver_common.h" "$here/build.sh" "$prefix/env.sh"; then
        run gcc -std=gnu11 -O1 -Wall -Wextra -Werror -I"$CUDA12_INCLUDE" "$here/$name.c" \
            -o "$out/$name" -ldl
    fi
    printf '%s\n' "$out/$name"
done
