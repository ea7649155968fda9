#!/usr/bin/env bash
# Runs fairgpu's fuzz targets (fuzz/) with libFuzzer on the stable toolchain,
# each for a bounded time, and fails if any target finds a crash.
#
# Usage: scripts/fuzz.sh [--seconds N] [--runs N] [TARGET...]
#
#   --seconds N   how long each target runs (default 20; libFuzzer's
#                 -max_total_time)
#   --runs N      stop each target after N executions instead (-runs)
#   TARGET...     the targets to run (default: every [[bin]] of
#                 fuzz/Cargo.toml)
#
# Builds the targets in release with the coverage instrumentation cargo-fuzz
# would add (no AddressSanitizer: the targets and the decoders they reach use
# no unsafe code), which needs a C++ compiler for libFuzzer itself. Corpora
# live in target/fuzz-corpus/<target> (kept between runs, so runs build on
# each other); a crashing input is written to target/fuzz-artifacts/<target>/
# and printed. Each target's final libFuzzer statistics (executions, corpus
# size, coverage) are printed, for docs/results.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=20
runs=
targets=()
while [[ $# -gt 0 ]]; do
    case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
    esac
done
if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <(awk -F'"' '/^\[\[bin\]\]/ { b = 1 } b && /^name/ { print $2; b = 0 }' fuzz/Cargo.toml)
fi
command -v c++ >/dev/null || { echo "error: libFuzzer needs a C++ compiler (c++)" >&2; exit 1; }

host=$(rustc -vV | awk '/^host:/ { print $2 }')
flags="--cfg fuzzing -Cdebug-assertions -Coverflow-checks -Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares"
# --target keeps the flags away from build scripts and proc macros.
RUSTFLAGS=$flags cargo build --manifest-path fuzz/Cargo.toml --release --bins --target "$host"

root=$PWD/target
failed=()
for t in "${targets[@]}"; do
    bin=fuzz/target/$host/release/$t
    [[ -x $bin ]] || { echo "error: no fuzz target $t ($bin)" >&2; exit 2; }
    corpus=$root/fuzz-corpus/$t
    artifacts=$root/fuzz-artifacts/$t/
    mkdir -p "$corpus" "$artifacts"
    limit=(-max_total_time="$seconds")
    [[ -n $runs ]] && limit=(-runs="$runs")
    log=$(mktemp)
    printf '\n== fuzz %s (%s) ==\n' "$t" "${limit[*]}"
    # Committed seeds (fuzz/seeds/<target>/), when a target has them, are
    # read at the start; new inputs go to the corpus only.
    seeds=()
    [[ -d fuzz/seeds/$t ]] && seeds=("fuzz/seeds/$t")
    if "$bin" "$corpus" "${seeds[@]}" "${limit[@]}" -artifact_prefix="$artifacts" -print_final_stats=1 \
        -rss_limit_mb=4096 -timeout=10 >"$log" 2>&1; then
        grep -E '^(Done|stat::number_of_executed_units|stat::new_units_added|stat::peak_rss_mb)|#[0-9]+.*DONE' "$log" || true
        echo "corpus: $(find "$corpus" -type f | wc -l) inputs"
    else
        tail -40 "$log"
        failed+=("$t")
    fi
    rm -f "$log"
done
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "error: fuzz targets failed: ${failed[*]} (inputs in target/fuzz-artifacts/)" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} targets ran without a crash"
