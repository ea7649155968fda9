#!/bin/sh
# Regenerates the checked-in PTX of the test kernels with nvcc
# (set NVCC, or have nvcc on PATH; NVCC_FLAGS adds options such as the
# include paths cuda_bf16.h needs, and the CCCL headers gridsync.cu's
# cooperative_groups needs). The tests read only the .ptx files.
# bf16.cu is also built for sm_90, which has more bf16 instructions.
set -eu
cd "$(dirname "$0")"
NVCC="${NVCC:-nvcc}"
NVCC_FLAGS="${NVCC_FLAGS:-}"
for cu in *.cu; do
    # Kernels that launch kernels need relocatable device code.
    case "$cu" in
        cdp.cu) rdc=-rdc=true ;;
        *) rdc= ;;
    esac
    # shellcheck disable=SC2086
    "$NVCC" $NVCC_FLAGS $rdc -ptx -arch=sm_80 "$cu" -o "${cu%.cu}.ptx"
done
# shellcheck disable=SC2086
"$NVCC" $NVCC_FLAGS -ptx -arch=sm_90 bf16.cu -o bf16_sm90.ptx
