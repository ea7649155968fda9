#!/usr/bin/env bash
# Builds NVIDIA's CUDA samples (github.com/NVIDIA/cuda-samples) with nvcc and
# runs each through fairgpu: the guest library as libcuda.so.1, against a
# daemon on SimGpu (the PTX interpreter), and tabulates what passes and why
# the others fail.
#
#   scripts/cuda-samples.sh [OPTIONS] SAMPLES_TREE OUTDIR
#
# SAMPLES_TREE is a cuda-samples checkout (it has Common/ and Samples/).
#
# Which samples: every Samples/<category>/<sample> with a CMakeLists.txt,
# except (each exclusion is listed, with its reason, in OUTDIR/excluded.tsv):
#   - 7_libNVVM (libNVVM, not the CUDA runtime/driver) and
#     8_Platform_Specific (Tegra and other platforms);
#   - graphics interop: find_package OpenGL, GLUT, Vulkan or EGL; NvSci;
#     Direct3D (Windows);
#   - CUDA math libraries: links cuBLAS, cuFFT, cuRAND (the host API: the
#     device API in curand_kernel.h is only headers and is kept), cuSPARSE,
#     cuSOLVER, NPP (or FreeImage, which only the NPP samples use), nvJPEG;
#   - MPI or OpenMP (find_package MPI/OpenMP);
#   - samples that need two or more GPUs ("min_gpus" in the tree's
#     test_args.json).
#
# Build: no CMake. The sources of the sample's add_executable() (its .cu,
# .cpp and .c files), one nvcc command, nice -n 19, one at a time:
#   nvcc -std=c++17 -O2 --extended-lambda -I<tree>/Common -I<sample dir>
#        -gencode arch=compute_90,code=[compute_90,sm_90]  (PTX embedded)
#        -L<cudart dir>  (static cudart, nvcc's default)
# Whole-program compilation (no -rdc), unlike the samples' CMake files
# (CUDA_SEPARABLE_COMPILATION ON): if that fails, the build is retried with
# -rdc=true -lcudadevrt (dynamic parallelism needs it); --rdc forces
# -rdc=true for every sample. Samples on the driver API are linked with
# -lcuda against the guest library; their kernel fatbin/PTX files (the
# CUDA_FATBIN_FILE/CUDA_PTX_FILE of the CMake file) are built beside the
# run directory with the same -gencode (PTX: -arch=compute_90).
# The toolchain scripts/cuda-toolchain.sh installs lacks CCCL (nv/target,
# which cuda_fp16.h, cooperative_groups and Thrust/CUB need),
# cuda_profiler_api.h, NVRTC, nvJitLink and curand_kernel.h: give their
# include and lib folders with --extra-include/--extra-lib or those samples
# fail to build. From PyPI (version 13.0.x, matching nvcc 13.0; unpack the
# wheels with `python3 -m zipfile -e`): nvidia-cuda-cccl,
# nvidia-cuda-profiler-api, nvidia-cuda-nvrtc, nvidia-nvjitlink,
# nvidia-curand; then nvidia/cu13/include, nvidia/cu13/include/cccl and
# nvidia/cu13/lib (add the links libnvrtc.so, libnvJitLink.so there).
# A sample that fails to build is recorded and not run. A built sample
# whose sources did not change is kept.
#
# Run: each sample gets a fresh daemon (`fairgpu serve`, executor "sim", one
# VM with 8 GiB and 8 channels), so one sample's failure or timeout cannot
# affect the next and the daemon's warnings are the sample's. It runs in
# OUTDIR/run/Samples/<category>/<sample>/, a copy of its source folder made
# of symlinks (so data/ and the kernel files are found as the samples look
# for them), with stdin from /dev/null, the arguments test_args.json gives
# (the first of its "runs"), LD_LIBRARY_PATH holding the guest library as
# libcuda.so.1, fairgpu's NVRTC and nvJitLink shims as libnvrtc.so.12/13 and
# libnvJitLink.so.12/13 where they were built beside the guest library (and
# the --extra-lib folders), FAIRGPU_REGION set, stdout
# and stderr line-buffered (stdbuf, so a timed-out sample's last line is
# kept), and a timeout (default 300 s, then SIGTERM, 10 s later SIGKILL).
# NVRTC samples also get the headers their CMake file copies beside them
# (cooperative_groups.h, cooperative_groups/, CCCL's nv/ and cuda/).
# After the sample ends, `fairgpu status` tells how many kernels the
# daemon executed for it: a PASS with 0 kernels ran none (deviceQuery need
# not, a sample that ignores launch errors may "pass" that way).
#
# Verdicts:
#   PASS     exit 0 and no failure verdict printed ("Test failed",
#            "Result = FAIL", "FAILED", ...); the telling column still
#            notes a PASS during which the guest library refused a call or
#            no kernel completed (samples that ignore errors "pass" so)
#   WAIVED   exit 2 (the samples' EXIT_WAIVED) or "waiv" printed; a failure
#   TIMEOUT  the timeout stopped it
#   FAIL     anything else (exit status, signal, or exit 0 with a failure
#            verdict printed)
# For each failure, the most telling line: the daemon's "SimGpu cannot
# execute this kernel: ..." warning, else the guest library's
# "fairgpu guest-lib: cuXxx is not supported" line, else the first line of
# the sample's output that reports an error, else its last line. Every
# driver call the guest library reported unsupported is listed as well.
#
# Output in OUTDIR:
#   results.tsv   sample, category, build, exit, status, seconds, telling
#                 line, unsupported driver calls, kernels executed
#                 (tab-separated, one a line)
#   results.md    the same as a markdown table, with counts
#   excluded.tsv  sample, reason
#   build/NAME.log, logs/NAME.out (stdout+stderr), logs/NAME.daemon.log
#   bin/NAME, run/...
#
# Options (environment variables in brackets):
#   --fairgpu PATH        the fairgpu binary [FAIRGPU_BIN; default
#                         target/release/fairgpu of this repository]
#   --guest-lib PATH      the guest library [FAIRGPU_GUEST_LIB; default
#                         target/release/libcuda.so]
#   --timeout SECONDS     per-sample run timeout [SAMPLE_TIMEOUT; 300]
#   --max-instructions N  SimGpu's sim.max_instructions per launch
#                         [SIM_MAX_INSTRUCTIONS; 1000000000000, the most
#                         it takes, so that the timeout, not the daemon's
#                         500 million default, is what stops long kernels]
#   --sim-threads N       SimGpu's sim.threads: host threads one launch's
#                         blocks may run on [SIM_THREADS; 0, the host's CPUs]
#   --only LIST           only these samples (comma-separated names)
#   --build-only | --run-only   one phase (--run-only runs what is built)
#   --rebuild             rebuild even built samples
#   --rdc                 -rdc=true for every sample, as CMake builds them
#   --gencode STR         nvcc -gencode value [compute_90,code=[compute_90,sm_90]
#                         as arch=...]
#   --extra-include DIR   another include folder (repeatable)
#   --extra-lib DIR       another library folder, also on LD_LIBRARY_PATH
#                         and the run path (repeatable)
#   --region PATH         the daemon VM's region [/dev/shm/fairgpu-samples-PID]
#   --report-only         only remake results.md from results.tsv
#   -h, --help            this text
#
# The CUDA toolchain comes from scripts/cuda-toolchain.sh, found through
# FAIRGPU_CUDA_PREFIX (default target/cuda-toolchain of this repository).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
    sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

die() {
    echo "cuda-samples: $*" >&2
    exit 2
}

fairgpu_bin=${FAIRGPU_BIN:-$repo/target/release/fairgpu}
guest_lib=${FAIRGPU_GUEST_LIB:-$repo/target/release/libcuda.so}
timeout_s=${SAMPLE_TIMEOUT:-300}
max_instr=${SIM_MAX_INSTRUCTIONS:-1000000000000}
sim_threads=${SIM_THREADS:-0}
only=""
phase_build=1
phase_run=1
rebuild=0
rdc_all=0
report_only=0
gencode='arch=compute_90,code=[compute_90,sm_90]'
extra_inc=()
extra_lib=()
region=""
positional=()

while [[ $# -gt 0 ]]; do
    case $1 in
    --fairgpu) fairgpu_bin=$2; shift 2 ;;
    --guest-lib) guest_lib=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --max-instructions) max_instr=$2; shift 2 ;;
    --sim-threads) sim_threads=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --build-only) phase_run=0; shift ;;
    --run-only) phase_build=0; shift ;;
    --rebuild) rebuild=1; shift ;;
    --rdc) rdc_all=1; shift ;;
    --gencode) gencode=$2; shift 2 ;;
    --extra-include) extra_inc+=("$(cd "$2" && pwd)") || die "no folder $2"; shift 2 ;;
    --extra-lib) extra_lib+=("$(cd "$2" && pwd)") || die "no folder $2"; shift 2 ;;
    --region) region=$2; shift 2 ;;
    --report-only) report_only=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; positional+=("$@"); break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) positional+=("$1"); shift ;;
    esac
done
[[ ${#positional[@]} -eq 2 ]] || { usage >&2; exit 2; }
[[ -d ${positional[0]}/Samples && -d ${positional[0]}/Common ]] ||
    die "${positional[0]} is not a cuda-samples tree (no Samples/ and Common/)"
tree=$(cd "${positional[0]}" && pwd)
mkdir -p "${positional[1]}" || die "cannot create ${positional[1]}"
out=$(cd "${positional[1]}" && pwd)
[[ $timeout_s =~ ^[0-9]+$ && $timeout_s -gt 0 ]] || die "--timeout wants seconds"
[[ $max_instr =~ ^[0-9]+$ ]] || die "--max-instructions wants a number"
[[ $sim_threads =~ ^[0-9]+$ ]] || die "--sim-threads wants a number"

results="$out/results.tsv"
tab=$'\t'

# ---------------------------------------------------------------- report
# write_report: results.tsv -> results.md
write_report() {
    [[ -f $results ]] || return 0
    local md="$out/results.md" n built pass fail timeout waived
    n=$(tail -n +2 "$results" | wc -l)
    built=$(tail -n +2 "$results" | awk -F'\t' '$3 ~ /^ok/' | wc -l)
    pass=$(tail -n +2 "$results" | awk -F'\t' '$5 == "PASS"' | wc -l)
    fail=$(tail -n +2 "$results" | awk -F'\t' '$5 == "FAIL"' | wc -l)
    timeout=$(tail -n +2 "$results" | awk -F'\t' '$5 == "TIMEOUT"' | wc -l)
    waived=$(tail -n +2 "$results" | awk -F'\t' '$5 == "WAIVED"' | wc -l)
    {
        echo "# CUDA samples through fairgpu on SimGpu"
        echo
        echo "Tree: \`$tree\`. Timeout ${timeout_s} s per sample."
        echo
        echo "| eligible | built | PASS | FAIL | TIMEOUT | WAIVED | not built |"
        echo "|---|---|---|---|---|---|---|"
        echo "| $n | $built | $pass | $fail | $timeout | $waived | $((n - built)) |"
        echo
        echo "| sample | category | build | exit | status | s | kernels | most telling line | unsupported driver calls |"
        echo "|---|---|---|---|---|---|---|---|---|"
        tail -n +2 "$results" | sort -t"$tab" -k2,2 -k1,1 |
            awk -F'\t' '{ for (i = 1; i <= NF; i++) gsub(/\|/, "\\|", $i);
                printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $9, $7, $8 }'
        if [[ -f $out/excluded.tsv ]]; then
            echo
            echo "Excluded: $(wc -l <"$out/excluded.tsv") samples (excluded.tsv)."
            echo
            cut -f2 "$out/excluded.tsv" | sort | uniq -c | sort -rn |
                while read -r c reason; do echo "- $reason: $c"; done
        fi
    } >"$md"
    echo "cuda-samples: $n eligible, $built built, $pass PASS, $fail FAIL, $timeout TIMEOUT, $waived WAIVED; see $md"
}

if [[ $report_only == 1 ]]; then
    write_report
    exit 0
fi

# ---------------------------------------------------------------- toolchain
prefix=${FAIRGPU_CUDA_PREFIX:-$repo/target/cuda-toolchain}
[[ -f $prefix/env.sh ]] || die "CUDA toolchain not installed in $prefix (run scripts/cuda-toolchain.sh)"
# shellcheck source=/dev/null
. "$prefix/env.sh"
[[ -x ${CUDA_NVCC:-} ]] || die "no nvcc in $prefix"
command -v g++ >/dev/null 2>&1 || die "g++ not found; nvcc needs it"
[[ -f $guest_lib ]] || die "no guest library at $guest_lib (cargo build --release -p fairgpu-guest)"
[[ $phase_run == 0 || -x $fairgpu_bin ]] || die "no fairgpu binary at $fairgpu_bin"
command -v timeout >/dev/null 2>&1 || die "timeout (coreutils) not found"
command -v setsid >/dev/null 2>&1 || die "setsid (util-linux) not found"

mkdir -p "$out/bin" "$out/build" "$out/logs" "$out/lib" "$out/run"
# The guest library as the driver: libcuda.so.1 for the loader, libcuda.so
# for the linker (driver-API samples link -lcuda).
ln -sfn "$(cd "$(dirname "$guest_lib")" && pwd)/$(basename "$guest_lib")" "$out/lib/libcuda.so.1"
ln -sfn libcuda.so.1 "$out/lib/libcuda.so"
# fairgpu's NVRTC shim beside it where it was built (cargo build -p
# fairgpu-guest-nvrtc12 -p fairgpu-guest-nvrtc13) and NVIDIA's
# libnvrtc.so.N is in an --extra-lib folder: NVRTC samples ask for a cubin
# of the device's architecture, which the shim answers with PTX on SimGpu
# (NVIDIA's library does the compiling).
# The same for fairgpu's nvJitLink shim (-p fairgpu-guest-nvjitlink12 -p
# fairgpu-guest-nvjitlink13): jitLto links LTO-IR for the device's
# architecture, which the shim answers with PTX on SimGpu.
for v in 12 13; do
    for pair in libnvrtc:libfairgpu_nvrtc libnvJitLink:libfairgpu_nvjitlink; do
        name=${pair%%:*}
        rm -f "$out/lib/$name.so.$v"
        shim="$(cd "$(dirname "$guest_lib")" && pwd)/${pair#*:}$v.so"
        for d in "${extra_lib[@]}"; do
            if [[ -f $shim && -e $d/$name.so.$v ]]; then
                ln -sfn "$shim" "$out/lib/$name.so.$v"
                break
            fi
        done
    done
done
ln -sfn "$tree/Common" "$out/run/Common"

# ---------------------------------------------------------------- test_args.json
# name<TAB>min_gpus<TAB>arg<US>arg... for every sample test_args.json names.
declare -A min_gpus=() run_args=()
if [[ -f $tree/test_args.json ]] && command -v python3 >/dev/null 2>&1; then
    while IFS=$'\t' read -r name gpus args; do
        min_gpus[$name]=$gpus
        run_args[$name]=$args
    done < <(python3 - "$tree/test_args.json" <<'EOF'
import json, sys
for name, v in json.load(open(sys.argv[1])).items():
    args = v.get("args")
    if args is None and v.get("runs"):
        args = v["runs"][0].get("args", [])
    print("%s\t%s\t%s" % (name, v.get("min_gpus", 1), "\x1f".join(args or [])))
EOF
    )
fi

# ---------------------------------------------------------------- eligibility
# exclusion DIR: prints why the sample in DIR is excluded, nothing if not.
exclusion() {
    local dir=$1 name cm cat
    name=$(basename "$dir")
    cat=$(basename "$(dirname "$dir")")
    cm="$dir/CMakeLists.txt"
    case $cat in
    7_libNVVM) echo "libNVVM (7_libNVVM)"; return ;;
    8_Platform_Specific) echo "platform specific (8_Platform_Specific)"; return ;;
    esac
    if grep -qE 'find_package\((OpenGL|GLUT|Vulkan|EGL)[ )]' "$cm"; then
        echo "graphics interop (OpenGL/GLUT/Vulkan/EGL)"
    elif grep -qiE 'find_package\(NVSCI|nvsci' "$cm"; then
        echo "NvSci interop"
    elif [[ $name == *D3D* ]] || grep -qiE 'd3d1[12]|dxgi' "$cm"; then
        echo "Direct3D (Windows only)"
    elif grep -qE 'CUDA::(cublas|cufft|curand|cusparse|cusolver|npp|nvjpeg)|find_package\(FreeImage' "$cm"; then
        echo "CUDA math library ($(grep -oE 'CUDA::(cublas|cufft|curand|cusparse|cusolver|npp|nvjpeg)[a-z_]*' "$cm" |
            sed 's/CUDA:://' | sort -u | tr '\n' ' ' | sed 's/ $//'))"
    elif grep -qE 'find_package\((MPI|OpenMP)[ )]' "$cm"; then
        echo "MPI/OpenMP"
    elif [[ ${min_gpus[$name]:-1} -ge 2 ]]; then
        echo "needs ${min_gpus[$name]} GPUs (test_args.json)"
    fi
}

# sources DIR: the add_executable() sources of the sample in DIR, one a line,
# as paths relative to DIR.
sources() {
    local dir=$1 name
    name=$(basename "$dir")
    tr '\n' ' ' <"$dir/CMakeLists.txt" | grep -oE 'add_executable\([^)]*\)' |
        awk -v n="$name" '{ sub(/^add_executable\(/, ""); sub(/\)$/, "");
            if ($1 == n) { for (i = 2; i <= NF; i++) print $i; exit } }' |
        grep -E '\.(cu|cpp|cc|c)$'
}

# kernel_files DIR: KIND<TAB>OUTPUT<TAB>SOURCE for the kernel fatbin/PTX
# files the CMake file builds with custom commands.
kernel_files() {
    local cm="$1/CMakeLists.txt" kind file src
    src=$(grep -oE 'set\(CUDA_KERNEL_SOURCE "[^"]*"' "$cm" | head -n 1 | sed -E 's/.*\/([^/"]+)"$/\1/')
    [[ -n $src ]] || return 0
    for kind in FATBIN PTX; do
        file=$(grep -oE "set\\(CUDA_${kind}_FILE \"[^\"]*\"" "$cm" | head -n 1 | sed -E 's/.*\/([^/"]+)"$/\1/')
        [[ -n $file ]] && printf '%s\t%s\t%s\n' "$kind" "$file" "$src"
    done
}

declare -a eligible=()
: >"$out/excluded.tsv"
while IFS= read -r cm; do
    dir=$(dirname "$cm")
    name=$(basename "$dir")
    # 8_Platform_Specific/Tegra only gathers the samples listed below.
    [[ $dir == */8_Platform_Specific/* ]] && continue
    if [[ -n $only && ",$only," != *",$name,"* ]]; then
        continue
    fi
    why=$(exclusion "$dir")
    if [[ -n $why ]]; then
        printf '%s\t%s\n' "$name" "$why" >>"$out/excluded.tsv"
    else
        eligible+=("$dir")
    fi
done < <(find "$tree/Samples" -mindepth 3 -maxdepth 3 -name CMakeLists.txt | sort)
# 8_Platform_Specific nests deeper (Tegra/<sample>): list those too.
while IFS= read -r cm; do
    name=$(basename "$(dirname "$cm")")
    [[ -n $only && ",$only," != *",$name,"* ]] && continue
    printf '%s\t%s\n' "$name" "platform specific (8_Platform_Specific)" >>"$out/excluded.tsv"
done < <(find "$tree/Samples/8_Platform_Specific" -mindepth 3 -name CMakeLists.txt 2>/dev/null | sort)
echo "cuda-samples: ${#eligible[@]} eligible, $(wc -l <"$out/excluded.tsv") excluded"

# ---------------------------------------------------------------- build
nvcc_base=(nice -n 19 "$CUDA_NVCC" -std=c++17 -O2 --extended-lambda -Wno-deprecated-gpu-targets
    -I"$tree/Common")
for d in "${extra_inc[@]}"; do nvcc_base+=(-I"$d"); done
link_base=(-L"$CUDA13_LIB" -L"$out/lib")
for d in "${extra_lib[@]}"; do link_base+=(-L"$d" -Xlinker -rpath -Xlinker "$d"); done

# build DIR: builds bin/NAME and the kernel files; the build log is
# build/NAME.log, its first line "ok", "ok rdc" or "FAIL ...".
build() {
    local dir=$1 name log cm srcs=() s f inc=() libs=() stamp kind file src mode
    name=$(basename "$dir")
    log="$out/build/$name.log"
    cm="$dir/CMakeLists.txt"
    mapfile -t srcs < <(sources "$dir")
    if [[ ${#srcs[@]} -eq 0 ]]; then
        echo "FAIL no sources found in add_executable()" >"$log"
        return
    fi
    # Keep a build newer than every file of the sample and the flags.
    stamp="$out/build/$name.flags"
    local flags="${nvcc_base[*]} ${link_base[*]} $gencode rdc=$rdc_all"
    if [[ $rebuild == 0 && -x $out/bin/$name && -f $log && -f $stamp && $(cat "$stamp") == "$flags" ]] &&
        [[ -z $(find "$dir" -newer "$out/bin/$name" -type f -print -quit) ]]; then
        return
    fi
    printf '%s\n' "$flags" >"$stamp"
    rm -f "$out/bin/$name"
    inc=(-I"$dir")
    for s in inc src include; do [[ -d $dir/$s ]] && inc+=(-I"$dir/$s"); done
    grep -q 'CUDA::cuda_driver' "$cm" && libs+=(-lcuda)
    grep -q 'CUDA::nvrtc' "$cm" && libs+=(-lnvrtc)
    grep -qi 'nvJitLink' "$cm" && libs+=(-lnvJitLink)
    local files=()
    for s in "${srcs[@]}"; do files+=("$dir/$s"); done
    {
        echo "sources: ${srcs[*]}"
        # Kernel files the sample loads at run time (driver API).
        while IFS=$'\t' read -r kind file src; do
            mkdir -p "$out/kernels/$name"
            if [[ $kind == FATBIN ]]; then
                echo "+ nvcc -fatbin $src -o $file"
                "${nvcc_base[@]}" "${inc[@]}" -gencode "$gencode" -fatbin "$dir/$src" -o "$out/kernels/$name/$file"
            else
                echo "+ nvcc -ptx $src -o $file"
                "${nvcc_base[@]}" "${inc[@]}" -arch=compute_90 -ptx "$dir/$src" -o "$out/kernels/$name/$file"
            fi || echo "kernel file $file failed"
        done < <(kernel_files "$dir")
    } >"$log.tmp" 2>&1
    mode=""
    if [[ $rdc_all == 0 ]]; then
        echo "+ nvcc ${files[*]##*/}" >>"$log.tmp"
        if "${nvcc_base[@]}" "${inc[@]}" -gencode "$gencode" "${files[@]}" -o "$out/bin/$name" \
            "${link_base[@]}" "${libs[@]}" >>"$log.tmp" 2>&1; then
            mode=ok
        fi
    fi
    if [[ -z $mode ]]; then
        echo "+ nvcc -rdc=true ${files[*]##*/}" >>"$log.tmp"
        if "${nvcc_base[@]}" "${inc[@]}" -rdc=true -gencode "$gencode" "${files[@]}" -o "$out/bin/$name" \
            "${link_base[@]}" "${libs[@]}" -lcudadevrt >>"$log.tmp" 2>&1; then
            mode="ok rdc"
        fi
    fi
    if grep -q '^kernel file .* failed$' "$log.tmp"; then
        mode=""
    fi
    if [[ -n $mode ]]; then
        { echo "$mode"; cat "$log.tmp"; } >"$log"
    else
        rm -f "$out/bin/$name"
        local why
        why=$(grep -m1 -E 'error|undefined reference|cannot find|failed' "$log.tmp" | tr '\t' ' ' | cut -c1-300)
        { echo "FAIL ${why:-see log}"; cat "$log.tmp"; } >"$log"
    fi
    rm -f "$log.tmp"
}

if [[ $phase_build == 1 ]]; then
    i=0
    for dir in "${eligible[@]}"; do
        i=$((i + 1))
        build "$dir"
        printf 'build %3d/%d %-32s %s\n' "$i" "${#eligible[@]}" "$(basename "$dir")" \
            "$(head -n 1 "$out/build/$(basename "$dir").log" | cut -c1-100)"
    done
fi

[[ $phase_run == 1 ]] || exit 0

# ---------------------------------------------------------------- daemon
# shellcheck source=lib/sim-daemon.sh
source "$(dirname "$0")/lib/sim-daemon.sh"
sim_daemon_setup "$out/daemon" "${region:-/dev/shm/fairgpu-samples-$$}" samples "$max_instr" "$sim_threads"
trap 'stop_daemon' EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- run
# telling OUT DLOG: the most telling line of a failed run.
telling() {
    local o=$1 d=$2 line
    line=$(grep -m1 -oE 'SimGpu cannot execute this kernel: .*' "$d")
    [[ -z $line ]] && line=$(grep -m1 -E 'fairgpu guest-lib: .* is not supported' "$o")
    [[ -z $line ]] && line=$(grep -m1 -E 'fairgpu guest-lib:' "$o")
    [[ -z $line ]] && line=$(grep -m1 -E 'worker .*(exited|died|crash|panic)|panicked' "$d")
    [[ -z $line ]] && line=$(grep -m1 -iE 'CUDA error|cuda failure|Driver API error|error( |:|=)|what\(\)|Aborted|Segmentation|core dumped' "$o")
    [[ -z $line ]] && line=$(grep -m1 -iE 'failed|FAIL|not found|mismatch|incorrect|invalid' "$o")
    [[ -z $line ]] && line=$(grep -v '^[[:space:]]*$' "$o" | tail -n 1)
    printf '%s' "$line" | tr '\t\r' '  ' | cut -c1-300
}

linebuf=()
command -v stdbuf >/dev/null 2>&1 && linebuf=(stdbuf -oL -eL)
ld_path="$out/lib"
for d in "${extra_lib[@]}"; do ld_path+=":$d"; done

printf 'sample\tcategory\tbuild\texit\tstatus\tseconds\ttelling\tunsupported\tkernels\n' >"$results.new"
i=0
for dir in "${eligible[@]}"; do
    i=$((i + 1))
    name=$(basename "$dir")
    category=$(basename "$(dirname "$dir")")
    blog="$out/build/$name.log"
    build_state=$(head -n 1 "$blog" 2>/dev/null || echo "FAIL not built")
    if [[ $build_state != ok* || ! -x $out/bin/$name ]]; then
        printf '%s\t%s\tFAIL\t-\tNOT BUILT\t-\t%s\t\t-\n' "$name" "$category" \
            "$(printf '%s' "${build_state#FAIL }" | tr '\t' ' ')" >>"$results.new"
        printf 'run %3d/%d %-32s NOT BUILT\n' "$i" "${#eligible[@]}" "$name"
        continue
    fi
    # The run folder: the sample's files as symlinks, the kernel files.
    rdir="$out/run/Samples/$category/$name"
    rm -rf "$rdir"
    mkdir -p "$rdir"
    for f in "$dir"/* "$out/kernels/$name"/*; do
        [[ -e $f ]] && ln -sfn "$f" "$rdir/$(basename "$f")"
    done
    # data/ is a folder of links: what a sample writes there stays here.
    if [[ -d $dir/data ]]; then
        rm -f "$rdir/data"
        mkdir -p "$rdir/data"
        for f in "$dir"/data/*; do
            [[ -e $f ]] && ln -sfn "$f" "$rdir/data/$(basename "$f")"
        done
    fi
    # NVRTC samples compile headers found beside them (their CMake file
    # copies them from the toolkit's include folder).
    if grep -q 'CUDA_INCLUDE_DIR}/cooperative_groups' "$dir/CMakeLists.txt"; then
        for f in cooperative_groups.h cooperative_groups cccl/nv cccl/cuda; do
            for d in "$CUDA13_INCLUDE" "${extra_inc[@]}"; do
                if [[ -e $d/$f ]]; then
                    ln -sfn "$d/$f" "$rdir/$(basename "$f")"
                    break
                elif [[ -e $d/${f#cccl/} ]]; then
                    ln -sfn "$d/${f#cccl/}" "$rdir/$(basename "$f")"
                    break
                fi
            done
        done
    fi
    args=()
    if [[ -n ${run_args[$name]:-} ]]; then
        IFS=$'\x1f' read -r -a args <<<"${run_args[$name]}"
    fi
    o="$out/logs/$name.out"
    dlog="$out/logs/$name.daemon.log"
    if ! start_daemon "$dlog"; then
        stop_daemon
        printf '%s\t%s\t%s\t-\tFAIL\t-\tthe daemon did not start\t\t-\n' "$name" "$category" "$build_state" >>"$results.new"
        continue
    fi
    start=$(date +%s.%N)
    rc=0
    (cd "$rdir" && env LD_LIBRARY_PATH="$ld_path" FAIRGPU_REGION="$region" \
        timeout -k 10 "$timeout_s" "${linebuf[@]}" "$out/bin/$name" "${args[@]}" </dev/null >"$o" 2>&1) || rc=$?
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    # The daemon publishes its counters about once a second.
    sleep 1.2
    kernels=$("$fairgpu_bin" status --socket "$sock" --json 2>/dev/null |
        sed -n 's/^ *"kernels": *\([0-9]*\).*/\1/p' | head -n 1)
    stop_daemon
    # Strip the log's colours.
    sed -i 's/\x1b\[[0-9;]*m//g' "$dlog"
    if [[ $rc == 124 || $rc == 137 ]]; then
        status=TIMEOUT
    elif [[ $rc == 2 ]] || grep -qi 'waiv' "$o"; then
        status=WAIVED
    elif [[ $rc == 0 ]] && ! grep -qE 'Test failed|Test FAILED|Result = FAIL|^FAILED|FAILED$|^FAIL\b' "$o"; then
        status=PASS
    else
        status=FAIL
    fi
    tell=""
    if [[ $status == TIMEOUT ]]; then
        tell="no exit within ${timeout_s} s; last line: $(grep -v '^[[:space:]]*$' "$o" | tail -n 1 | tr '\t\r' '  ' | cut -c1-200)"
    elif [[ $status != PASS ]]; then
        tell=$(telling "$o" "$dlog")
    fi
    unsup=$(grep -oE 'fairgpu guest-lib: [A-Za-z0-9_]+ is not supported' "$o" | awk '{ print $3 }' |
        sort -u | tr '\n' ' ' | sed 's/ $//')
    # A PASS is only what the sample checked: say what it did not.
    if [[ $status == PASS && -n $unsup ]]; then
        tell="exit 0, but the guest library refused $unsup"
    elif [[ $status == PASS && ${kernels:-} == 0 ]]; then
        tell="exit 0, but no kernel completed"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$category" "$build_state" "$rc" "$status" "$secs" \
        "$tell" "$unsup" "${kernels:-?}" >>"$results.new"
    printf 'run %3d/%d %-32s %-7s %6ss %5s kernels %s\n' "$i" "${#eligible[@]}" "$name" "$status" "$secs" \
        "${kernels:-?}" "$(printf '%s' "$tell" | cut -c1-120)"
done
# Keep the rows of samples this run did not cover (--only).
if [[ -f $results ]]; then
    cut -f1 "$results.new" >"$results.names"
    tail -n +2 "$results" | awk -F'\t' 'NR == FNR { seen[$1] = 1; next } !($1 in seen)' \
        "$results.names" - >>"$results.new"
    rm -f "$results.names"
fi
mv "$results.new" "$results"
write_report
