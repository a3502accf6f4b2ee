#!/usr/bin/env bash
# Time `analyze stats` (release build) on a large Nsight Systems export, report by report and all
# reports in one run, with peak memory; and `nsys stats` on the same file when nsys is found
# (on PATH or named by NSYS). Runs on the build machine (no GPU), from anywhere in the checkout.
#
#   scripts/bench/bench_stats.sh [EXPORT.sqlite[.gz]] [RUNS]
#
# The default export is the 60-step, 137k-kernel one of the shared fixtures. A .gz export is timed
# as given (we unpack it ourselves) and unpacked, since nsys reads only the .sqlite. Uses hyperfine
# when installed, else a loop timed with `date`, reporting the mean and the minimum. Set ANALYZE to
# a prebuilt binary to skip the build.
set -euo pipefail
cd "$(dirname "$0")/../.."

EXPORT=${1:-../shared/fixtures/ours/large/torch_small_ctx128_train_fp32_60steps.sqlite.gz}
RUNS=${2:-10}
# The trace reports (a row per kernel or API call, not part of `all`) last; nsys is timed on the
# first three.
REPORTS=(cuda_gpu_kern_sum nvtx_kern_sum nvtx_gpu_proj_sum all cuda_gpu_trace cuda_kern_exec_trace cuda_api_trace)

if [[ ! -f $EXPORT ]]; then
    echo "bench_stats: $EXPORT not found" >&2
    exit 2
fi
if [[ -z ${ANALYZE:-} ]]; then
    cargo build --release -q --bin analyze
    ANALYZE=target/release/analyze
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
INPUTS=("$EXPORT")
SQLITE=$EXPORT
if [[ $EXPORT == *.gz ]]; then
    SQLITE=$WORK/$(basename "${EXPORT%.gz}")
    gunzip -c "$EXPORT" >"$SQLITE"
    INPUTS+=("$SQLITE")
fi

NSYS_BIN=${NSYS:-$(command -v nsys || true)}

echo "machine: $(nproc) CPUs, $(uname -m); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "export:  $EXPORT ($(du -h "$SQLITE" | cut -f1) unpacked)"
echo

# Mean and minimum wall time of RUNS runs of "$@", in seconds.
time_loop() {
    local times=() start end
    "$@" >/dev/null 2>&1 # warm-up: file cache
    for ((i = 0; i < RUNS; i++)); do
        start=$(date +%s.%N)
        "$@" >/dev/null 2>&1
        end=$(date +%s.%N)
        times+=("$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')")
    done
    printf '%s\n' "${times[@]}" | awk '{s += $1; if (min == "" || $1 < min) min = $1}
        END {printf "mean %.3f s  min %.3f s  (%d runs)", s / NR, min, NR}'
}

# CPU time (user + system) and peak resident memory of one run: less sensitive than wall time to
# other work on a shared machine.
resources() {
    if [[ -x /usr/bin/time ]]; then
        /usr/bin/time -f '%U %S %M' "$@" 2>&1 >/dev/null | tail -1 |
            awk '{printf "cpu %.2f s, peak memory %.0f MB", $1 + $2, $3 / 1024}'
    else
        echo "cpu and memory n/a (no /usr/bin/time)"
    fi
}

bench() {
    local label=$1
    shift
    if command -v hyperfine >/dev/null; then
        hyperfine --warmup 1 --runs "$RUNS" --style basic -N "$*" 2>/dev/null |
            grep -E 'Time|Range' | sed "s|^|$label: |"
    else
        echo "$label: $(time_loop "$@")"
    fi
}

for input in "${INPUTS[@]}"; do
    echo "== analyze stats on $(basename "$input")"
    for r in "${REPORTS[@]}"; do
        bench "$r" "$ANALYZE" stats --format csv --report "$r" "$input"
        echo "$r: $(resources "$ANALYZE" stats --format csv --report "$r" "$input")"
    done
    echo
done

if [[ -n $NSYS_BIN ]]; then
    echo "== nsys stats ($("$NSYS_BIN" --version 2>/dev/null | head -1)) on $(basename "$SQLITE")"
    for r in "${REPORTS[@]:0:3}"; do
        bench "nsys $r" "$NSYS_BIN" stats --format csv --report "$r" "$SQLITE"
    done
else
    echo "(nsys not found: set NSYS or put nsys on PATH to time nsys stats too)"
fi
