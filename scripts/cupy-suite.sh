#!/usr/bin/env bash
# Runs CuPy's own test files (from CuPy's source tree, of the version the
# CuPy wheel in the CUDA toolchain is) through fairgpu on SimGpu: each file
# is one pytest process against a fresh daemon (`fairgpu serve`, executor
# "sim", one VM), CuPy unmodified from PyPI, the guest library as
# libcuda.so.1 and fairgpu's NVRTC shim as libnvrtc.so.12 (CuPy then
# compiles its kernels to PTX, which SimGpu executes), with
# CUPY_TEST_GPU_LIMIT=1 (CuPy's own setting: the vGPU is one device, so the
# tests that need two are skipped) and NVCC naming the toolchain's nvcc
# (the files that test CuPy's nvcc backend ask for it). Every test
# compares CuPy's result with NumPy's on the CPU, as CuPy's suite does on
# a GPU.
#
# Usage: scripts/cupy-suite.sh [options] CUPY_TESTS OUT [FILE...]
#   CUPY_TESTS   the tests/ folder of a CuPy source tree of the wheel's
#                version (e.g. `git archive v14.2.0 tests | tar -x` in a
#                clone of github.com/cupy/cupy); it is not changed
#   OUT          results, logs and a pytest install go here
#   FILE         test files relative to CUPY_TESTS (default: the list
#                below, reductions, elementwise math, sorting, indexing,
#                creation and statistics)
#
# Output:
#   OUT/results.tsv   file, passed, failed, errors, skipped, math_library,
#                     timed_out, seconds, status (math_library: failed or
#                     errored tests that stopped at a CUDA math library CuPy
#                     could not load, cuBLAS or cuRAND, which are not
#                     installed; timed_out: past --test-timeout)
#   OUT/logs/NAME.out (pytest's output), NAME.xml (JUnit), NAME.daemon.log
#   and a summary line per file on stdout, totals at the end.
#
# A file's status: PASS (no test failed or errored), FAIL, TIMEOUT (the
# file did not finish within --timeout), or CRASH (pytest did not report:
# the process died).
#
# Options (environment variables in brackets):
#   --fairgpu PATH        the fairgpu binary [FAIRGPU_BIN; default
#                         target/release/fairgpu of this repository]
#   --guest-lib PATH      the guest library [FAIRGPU_GUEST_LIB; default
#                         target/release/libcuda.so]; fairgpu's NVRTC shim
#                         libfairgpu_nvrtc12.so is taken from beside it
#   --timeout SECONDS     per-file timeout [CUPY_FILE_TIMEOUT; 1800]
#   --test-timeout SECONDS  per-test timeout (pytest-timeout): a test that
#                         takes longer fails, and the file goes on
#                         [CUPY_TEST_TIMEOUT; 120]
#   --max-instructions N  SimGpu's sim.max_instructions per launch
#                         [SIM_MAX_INSTRUCTIONS; 20000000000]
#   -k EXPR               pytest's -k, for every file
#   --region PATH         the daemon VM's region [/dev/shm/fairgpu-cupy-PID]
#   -h, --help            this text
#
# CuPy (and cuRAND, for CuPy's random module: its kernels run as the PTX
# its fatbins carry) comes from scripts/cuda-toolchain.sh --with-cupy, found through
# FAIRGPU_CUDA_PREFIX (default target/cuda-toolchain of this repository);
# pytest and pytest-timeout are installed from PyPI into OUT/pytest on
# the first run.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
    sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

die() {
    echo "cupy-suite: $*" >&2
    exit 2
}

default_files=(
    cupy_tests/core_tests/test_ndarray_reduction.py
    cupy_tests/core_tests/test_cub_reduction.py
    cupy_tests/core_tests/test_reduction.py
    cupy_tests/core_tests/test_elementwise.py
    cupy_tests/core_tests/test_ndarray_elementwise_op.py
    cupy_tests/core_tests/test_ndarray_indexing.py
    cupy_tests/core_tests/test_scan.py
    cupy_tests/core_tests/test_userkernel.py
    cupy_tests/core_tests/test_raw.py
    cupy_tests/math_tests/test_sumprod.py
    cupy_tests/math_tests/test_explog.py
    cupy_tests/math_tests/test_trigonometric.py
    cupy_tests/math_tests/test_rounding.py
    cupy_tests/math_tests/test_misc.py
    cupy_tests/math_tests/test_arithmetic.py
    cupy_tests/sorting_tests/test_sort.py
    cupy_tests/sorting_tests/test_search.py
    cupy_tests/statistics_tests/test_meanvar.py
    cupy_tests/statistics_tests/test_order.py
    cupy_tests/creation_tests/test_ranges.py
    cupy_tests/creation_tests/test_basic.py
    cupy_tests/manipulation_tests/test_shape.py
    cupy_tests/manipulation_tests/test_transpose.py
    cupy_tests/indexing_tests/test_indexing.py
    cupy_tests/logic_tests/test_comparison.py
)

fairgpu_bin=${FAIRGPU_BIN:-$repo/target/release/fairgpu}
guest_lib=${FAIRGPU_GUEST_LIB:-$repo/target/release/libcuda.so}
timeout_s=${CUPY_FILE_TIMEOUT:-1800}
test_timeout=${CUPY_TEST_TIMEOUT:-120}
max_instr=${SIM_MAX_INSTRUCTIONS:-20000000000}
kexpr=""
region=""
positional=()
while [[ $# -gt 0 ]]; do
    case $1 in
    --fairgpu) fairgpu_bin=$2; shift 2 ;;
    --guest-lib) guest_lib=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --test-timeout) test_timeout=$2; shift 2 ;;
    --max-instructions) max_instr=$2; shift 2 ;;
    -k) kexpr=$2; shift 2 ;;
    --region) region=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) positional+=("$1"); shift ;;
    esac
done
[[ ${#positional[@]} -ge 2 ]] || { usage >&2; exit 2; }
tests=$(cd "${positional[0]}" 2>/dev/null && pwd) || die "no folder ${positional[0]}"
out=${positional[1]}
files=("${positional[@]:2}")
[[ ${#files[@]} -gt 0 ]] || files=("${default_files[@]}")
[[ -f $tests/conftest.py && -d $tests/cupy_tests ]] ||
    die "$tests is not CuPy's tests/ folder (no conftest.py and cupy_tests/)"
[[ -x $fairgpu_bin ]] || die "no fairgpu binary at $fairgpu_bin (cargo build --release)"
[[ -f $guest_lib ]] || die "no guest library at $guest_lib (cargo build --release -p fairgpu-guest)"
shim=$(cd "$(dirname "$guest_lib")" && pwd)/libfairgpu_nvrtc12.so
[[ -f $shim ]] || die "no NVRTC shim at $shim (cargo build --release -p fairgpu-guest-nvrtc12)"

prefix=${FAIRGPU_CUDA_PREFIX:-$repo/target/cuda-toolchain}
[[ -f $prefix/env.sh ]] || die "no CUDA toolchain in $prefix (scripts/cuda-toolchain.sh --with-cupy)"
# shellcheck source=/dev/null
. "$prefix/env.sh"
[[ -n ${CUPY_PYTHONPATH:-} ]] || die "no CuPy in $prefix (scripts/cuda-toolchain.sh --with-cupy)"

mkdir -p "$out/logs" "$out/lib" "$out/kernel-cache"
out=$(cd "$out" && pwd)
if [[ ! -f $out/pytest/.installed ]]; then
    rm -rf "$out/pytest"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
        --no-input --only-binary=:all: --target "$out/pytest" pytest pytest-timeout ||
        die "pip could not install pytest and pytest-timeout into $out/pytest"
    touch "$out/pytest/.installed"
fi
# The guest library under the names the loader and CuPy look for.
ln -sfn "$(cd "$(dirname "$guest_lib")" && pwd)/$(basename "$guest_lib")" "$out/lib/libcuda.so.1"
ln -sfn "$out/lib/libcuda.so.1" "$out/lib/libcuda.so"
ln -sfn "$shim" "$out/lib/libnvrtc.so.12"

fairgpu_bin=$(cd "$(dirname "$fairgpu_bin")" && pwd)/$(basename "$fairgpu_bin")
# shellcheck source=lib/sim-daemon.sh
. "$here/lib/sim-daemon.sh"
trap stop_daemon EXIT
sim_daemon_setup "$out/daemon" "${region:-/dev/shm/fairgpu-cupy-$$}" cupy "$max_instr"

results=$out/results.tsv
printf 'file\tpassed\tfailed\terrors\tskipped\tmath_library\ttimed_out\tseconds\tstatus\n' >"$results"
tp=0 tf=0 te=0 ts=0 tml=0 tto=0
for f in "${files[@]}"; do
    [[ -f $tests/$f ]] || die "no test file $tests/$f"
    name=$(echo "$f" | tr '/' '_' | sed 's/\.py$//')
    log=$out/logs/$name.out
    xml=$out/logs/$name.xml
    rm -f "$xml"
    if ! start_daemon "$out/logs/$name.daemon.log"; then
        stop_daemon
        printf '%s\t-\t-\t-\t-\t-\t-\t-\tCRASH\n' "$f" >>"$results"
        echo "$f: the daemon did not start"
        continue
    fi
    kargs=()
    [[ -z $kexpr ]] || kargs=(-k "$kexpr")
    start=$(date +%s.%N)
    rc=0
    (cd "$tests" && env PYTHONPATH="$CUPY_PYTHONPATH:$out/pytest" CUDA_PATH="$CUPY_CUDA_PATH" \
        LD_LIBRARY_PATH="$out/lib:$CUPY_NVRTC_LIB${CUPY_CURAND_LIB:+:$CUPY_CURAND_LIB}" FAIRGPU_REGION="$region" \
        CUPY_CACHE_DIR="$out/kernel-cache" CUPY_TEST_GPU_LIMIT=1 NVCC="${CUDA_NVCC:-nvcc}" \
        timeout -k 10 "$timeout_s" python3 -m pytest -v -p no:cacheprovider -o addopts= \
        --timeout "$test_timeout" --durations 10 --junitxml="$xml" "${kargs[@]}" "$f" </dev/null >"$log" 2>&1) || rc=$?
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
    stop_daemon
    counts=$(python3 - "$xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print("- - - - - -")
    sys.exit()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
t = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
# Of the failed and errored: those that stopped at a CUDA math library
# CuPy could not load (cuBLAS, cuRAND, ...: not installed, and outside
# the driver API fairgpu carries), and those past the per-test timeout.
mathlib = timeouts = 0
for case in root.iter("testcase"):
    for bad in list(case.findall("failure")) + list(case.findall("error")):
        text = (bad.get("message") or "") + (bad.text or "")
        if "DynamicLibNotFoundError" in text:
            mathlib += 1
        elif "Timeout" in (bad.get("message") or ""):
            timeouts += 1
print(t["tests"] - t["failures"] - t["errors"] - t["skipped"], t["failures"], t["errors"],
      t["skipped"], mathlib, timeouts)
EOF
    )
    read -r p fl e s ml to <<<"$counts"
    if [[ $rc == 124 || $rc == 137 ]]; then
        status=TIMEOUT
    elif [[ $p == - ]]; then
        status=CRASH
    elif [[ $fl == 0 && $e == 0 ]]; then
        status=PASS
    else
        status=FAIL
    fi
    if [[ $p != - ]]; then
        tp=$((tp + p)) tf=$((tf + fl)) te=$((te + e)) ts=$((ts + s)) tml=$((tml + ml)) tto=$((tto + to))
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$f" "$p" "$fl" "$e" "$s" "$ml" "$to" "$secs" "$status" >>"$results"
    printf '%-56s %-7s %5s passed %4s failed %4s errors %5s skipped (%s math library, %s timed out) %5ss\n' \
        "$f" "$status" "$p" "$fl" "$e" "$s" "$ml" "$to" "$secs"
done
echo "total: $tp passed, $tf failed, $te errors, $ts skipped; of the failed and errored, $tml stopped at a CUDA math library that is not installed and $tto at the per-test timeout (results in $results)"
