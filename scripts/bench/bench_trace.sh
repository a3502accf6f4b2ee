#!/usr/bin/env bash
# The per-instance reports of `analyze stats` (`cuda_gpu_trace`, `cuda_kern_exec_trace`,
# `cuda_api_trace`) timed against `cuda_gpu_kern_sum` on one large export (not a test): every
# report ROUNDS times with this build and, when given, a reference build, in one run and
# interleaved (round by round, report by report, the two builds one after the other), so that the
# ratios compare runs made under the same load. Runs on the build machine, from anywhere in the
# checkout; needs /usr/bin/time.
#
#   scripts/bench/bench_trace.sh [REFERENCE_ANALYZE] [EXPORT] [ROUNDS]
#
# EXPORT defaults to the 60-step export ×50 that bench_scale.sh makes (1.09 GB), ROUNDS to 3.
# ANALYZE names a prebuilt binary instead of building one. The reports go to /dev/null (they print
# gigabytes of CSV; what is timed is the tool, not the disk). After the timing, each report of
# the two builds is compared byte for byte, both outputs streamed into `cmp`. The table gives, per
# report and build, the medians over the rounds of the wall and CPU time (user + system), the
# largest peak memory, and the median over the rounds of the report's wall time divided by that of
# `cuda_gpu_kern_sum` of the same build in the same round.
set -euo pipefail
cd "$(dirname "$0")/../.."

REF=${1:-}
EXPORT=${2:-/tmp/analyze-scale/x50.sqlite}
ROUNDS=${3:-3}
REPORTS=(cuda_gpu_kern_sum cuda_gpu_trace cuda_kern_exec_trace cuda_api_trace)

if [[ ! -f $EXPORT ]]; then
    echo "bench_trace: $EXPORT not found (scripts/bench/bench_scale.sh makes it: ONLY=x50)" >&2
    exit 2
fi
if [[ -z ${ANALYZE:-} ]]; then
    cargo build --release -q --bin analyze
    ANALYZE=target/release/analyze
fi
export ANALYZE_MEMORY_LIMIT=off
BUILDS=(new)
declare -A BIN=([new]=$ANALYZE)
[[ -n $REF ]] && BUILDS+=(ref) && BIN[ref]=$REF

# One run of a report with /usr/bin/time; prints "wall_s cpu_s peak_MB".
timed() { # binary report
    local t
    t=$(mktemp)
    /usr/bin/time -f '%e %U %S %M' -o "$t" "$1" stats -q --format csv --report "$2" "$EXPORT" >/dev/null
    awk '{printf "%s %.2f %d\n", $1, $2 + $3, $4 / 1024}' "$t"
    rm -f "$t"
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "machine: $(nproc) CPUs; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "export:  $EXPORT ($(du -h --apparent-size "$EXPORT" | cut -f1)), $ROUNDS rounds"
declare -A WALL CPU PEAK RATIO
"${BIN[new]}" stats -q --format csv --report cuda_gpu_kern_sum "$EXPORT" >/dev/null # file cache
for ((round = 1; round <= ROUNDS; round++)); do
    declare -A SUM=()
    for report in "${REPORTS[@]}"; do
        for build in "${BUILDS[@]}"; do
            read -r wall cpu mb < <(timed "${BIN[$build]}" "$report")
            key=$build/$report
            WALL[$key]+="$wall "
            CPU[$key]+="$cpu "
            PEAK[$key]=$(((${PEAK[$key]:-0} > mb) ? ${PEAK[$key]:-0} : mb))
            [[ $report == cuda_gpu_kern_sum ]] && SUM[$build]=$wall
            RATIO[$key]+="$(awk -v a="$wall" -v b="${SUM[$build]}" 'BEGIN {printf "%.2f", a / b}') "
        done
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

printf '\n%-22s %-5s %8s %8s %8s %12s  %s\n' report build wall_s cpu_s peak_MB "× kern_sum" "wall of each round"
for report in "${REPORTS[@]}"; do
    for build in "${BUILDS[@]}"; do
        key=$build/$report
        printf '%-22s %-5s %8s %8s %8s %12s  %s\n' "$report" "$build" \
            "$(tr ' ' '\n' <<<"${WALL[$key]}" | grep . | median)" \
            "$(tr ' ' '\n' <<<"${CPU[$key]}" | grep . | median)" "${PEAK[$key]}" \
            "$(tr ' ' '\n' <<<"${RATIO[$key]}" | grep . | median)" "${WALL[$key]}"
    done
done

if [[ -n $REF ]]; then
    echo
    for report in "${REPORTS[@]}"; do
        if cmp -s <("$ANALYZE" stats -q --format csv --report "$report" "$EXPORT") \
            <("$REF" stats -q --format csv --report "$report" "$EXPORT"); then
            echo "$report: the same bytes as the reference"
        else
            echo "$report: DIFFERS from the reference"
        fi
    done
fi
