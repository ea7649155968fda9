#!/usr/bin/env bash
# Builds the OpenCL test programs into OUTDIR: one executable NAME for every
# NAME.c beside this script, compiled with
#
#   ${CC:-cc} -O2 -Wall -Werror -std=c11 $OPENCL_TEST_CFLAGS NAME.c -o OUTDIR/NAME -lOpenCL
#
# against the system's OpenCL headers (CL/cl.h) and ICD loader (libOpenCL),
# which picks the platform at run time (/etc/OpenCL/vendors, OCL_ICD_VENDORS).
# The programs know nothing of fairgpu; OPENCL_PLATFORM picks a platform by a
# substring of its name (see common.h). Outputs newer than their sources are
# kept. Prints the built programs, one path a line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $# -eq 1 ]] || {
    echo "usage: $0 OUTDIR" >&2
    exit 2
}
mkdir -p "$1"
out=$(cd "$1" && pwd)

cc=${CC:-cc}
read -r -a extra <<<"${OPENCL_TEST_CFLAGS:-}"

command -v "$cc" >/dev/null 2>&1 || {
    echo "error: C compiler '$cc' not found (Debian: apt-get install gcc)" >&2
    exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The headers: CL/cl.h, with the OpenCL 1.2 APIs.
printf '#define CL_TARGET_OPENCL_VERSION 120\n#include <CL/cl.h>\nint main(void) { return (int)sizeof(cl_int) - 4; }\n' >"$tmp/h.c"
if ! "$cc" -std=c11 "${extra[@]}" -c "$tmp/h.c" -o "$tmp/h.o" 2>"$tmp/h.err"; then
    echo "error: the OpenCL headers (CL/cl.h) are missing or unusable" >&2
    echo "       (Debian: apt-get install opencl-c-headers):" >&2
    sed 's/^/       /' "$tmp/h.err" >&2
    exit 1
fi
# The ICD loader: libOpenCL.so (the development symlink) with clGetPlatformIDs.
printf '#define CL_TARGET_OPENCL_VERSION 120\n#include <CL/cl.h>\nint main(void) { cl_uint n; return clGetPlatformIDs(0, NULL, &n) == 12345; }\n' >"$tmp/l.c"
if ! "$cc" -std=c11 "${extra[@]}" "$tmp/l.c" -o "$tmp/l" -lOpenCL 2>"$tmp/l.err"; then
    echo "error: cannot link against libOpenCL (the OpenCL ICD loader)" >&2
    echo "       (Debian: apt-get install ocl-icd-opencl-dev):" >&2
    sed 's/^/       /' "$tmp/l.err" >&2
    exit 1
fi

# The flags are part of every program: a change rebuilds them. The stamp
# lives in a subdirectory so that OUTDIR's plain files are the programs.
mkdir -p "$out/obj"
stamp="$out/obj/cflags"
flags_now="$cc ${extra[*]}"
if [[ ! -f $stamp || $(cat "$stamp") != "$flags_now" ]]; then
    printf '%s\n' "$flags_now" >"$stamp"
fi

shopt -s nullglob
srcs=("$here"/*.c)
[[ ${#srcs[@]} -gt 0 ]] || {
    echo "error: no .c files in $here" >&2
    exit 1
}
for src in "${srcs[@]}"; do
    name=$(basename "$src" .c)
    bin="$out/$name"
    rebuild=0
    [[ -e $bin ]] || rebuild=1
    for dep in "$src" "$here/common.h" "$here/build.sh" "$stamp"; do
        [[ $dep -nt $bin ]] && rebuild=1
    done
    if [[ $rebuild == 1 ]]; then
        if ! "$cc" -O2 -Wall -Werror -std=c11 -D_POSIX_C_SOURCE=200809L "${extra[@]}" \
            "$src" -o "$bin.tmp" -lOpenCL -lpthread; then
            echo "error: failed to compile $src" >&2
            rm -f "$bin.tmp"
            exit 1
        fi
        mv "$bin.tmp" "$bin"
    fi
    printf '%s\n' "$bin"
done
