#!/bin/sh
# Regenerates the checked-in PTX of the test kernels with nvcc
# (set NVCC, or have nvcc on PATH). The tests read only the .ptx files.
set -eu
cd "$(dirname "$0")"
NVCC="${NVCC:-nvcc}"
for cu in *.cu; do
    "$NVCC" -ptx -arch=sm_80 "$cu" -o "${cu%.cu}.ptx"
done
