#!/usr/bin/env bash
# The per-instance reports of `analyze stats` (`cuda_gpu_trace`, `cuda_kern_exec_trace`,
# `cuda_api_trace`) timed against `cuda_gpu_kern_sum` on one large export (not a test), in CSV
# (`--format csv`) and in the default aligned text: every report in each format ROUNDS times with
# this build and, when given, a reference build, in one run and interleaved (round by round,
# format by format, report by report, the two builds one after the other), so that the ratios
# compare runs made under the same load. Runs on the build machine, from anywhere in the
# checkout; needs /usr/bin/time.
#
#   scripts/bench/bench_trace.sh [REFERENCE_ANALYZE] [EXPORT] [ROUNDS]
#
# EXPORT defaults to the 60-step export ×50 that bench_scale.sh makes (1.09 GB), ROUNDS to 3.
# ANALYZE names a prebuilt binary instead of building one; FORMATS (default "csv text") and
# REPORTS (default all four) narrow the run. The reports go to /dev/null (they print gigabytes;
# what is timed is the tool, not the disk). After the timing, each report of the two builds is
# compared byte for byte in each format, both outputs streamed into `cmp`. The table gives, per
# format, report and build, the medians over the rounds of the wall and CPU time (user + system),
# the largest peak memory, and the medians over the rounds of the report's wall and CPU time
# divided by those of `cuda_gpu_kern_sum` of the same build, in the same format, in the same
# round.
set -euo pipefail
cd "$(dirname "$0")/../.."

REF=${1:-}
EXPORT=${2:-/tmp/analyze-scale/x50.sqlite}
ROUNDS=${3:-3}
read -r -a FORMATS <<<"${FORMATS:-csv text}"
read -r -a REPORTS <<<"${REPORTS:-cuda_gpu_trace cuda_kern_exec_trace cuda_api_trace}"
REPORTS=(cuda_gpu_kern_sum "${REPORTS[@]/cuda_gpu_kern_sum/}")

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

# The arguments of `stats` for a report in a format: text is the default, no flag.
args() { # report format
    if [[ $2 == text ]]; then
        echo "stats -q --report $1 $EXPORT"
    else
        echo "stats -q --format $2 --report $1 $EXPORT"
    fi
}

# One run of a report with /usr/bin/time; prints "wall_s cpu_s peak_MB".
timed() { # binary report format
    local t
    t=$(mktemp)
    # shellcheck disable=SC2046
    /usr/bin/time -f '%e %U %S %M' -o "$t" "$1" $(args "$2" "$3") >/dev/null
    awk '{printf "%s %.2f %d\n", $1, $2 + $3, $4 / 1024}' "$t"
    rm -f "$t"
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "machine: $(nproc) CPUs; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "export:  $EXPORT ($(du -h --apparent-size "$EXPORT" | cut -f1)), $ROUNDS rounds"
declare -A WALL CPU PEAK RATIO CPU_RATIO
"${BIN[new]}" stats -q --format csv --report cuda_gpu_kern_sum "$EXPORT" >/dev/null # file cache
for ((round = 1; round <= ROUNDS; round++)); do
    for format in "${FORMATS[@]}"; do
        declare -A SUM=() SUM_CPU=()
        for report in "${REPORTS[@]}"; do
            [[ -z $report ]] && continue
            for build in "${BUILDS[@]}"; do
                read -r wall cpu mb < <(timed "${BIN[$build]}" "$report" "$format")
                key=$build/$format/$report
                WALL[$key]+="$wall "
                CPU[$key]+="$cpu "
                PEAK[$key]=$(((${PEAK[$key]:-0} > mb) ? ${PEAK[$key]:-0} : mb))
                [[ $report == cuda_gpu_kern_sum ]] && SUM[$build]=$wall && SUM_CPU[$build]=$cpu
                RATIO[$key]+="$(awk -v a="$wall" -v b="${SUM[$build]}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else printf "-"}') "
                CPU_RATIO[$key]+="$(awk -v a="$cpu" -v b="${SUM_CPU[$build]}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else printf "-"}') "
            done
        done
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
printf '\n%-6s %-22s %-5s %8s %8s %8s %9s %9s  %s\n' format report build wall_s cpu_s peak_MB \
    "wall/sum" "cpu/sum" "wall of each round"
for format in "${FORMATS[@]}"; do
    for report in "${REPORTS[@]}"; do
        [[ -z $report ]] && continue
        for build in "${BUILDS[@]}"; do
            key=$build/$format/$report
            printf '%-6s %-22s %-5s %8s %8s %8s %9s %9s  %s\n' "$format" "$report" "$build" \
                "$(med "${WALL[$key]}")" "$(med "${CPU[$key]}")" "${PEAK[$key]}" \
                "$(med "${RATIO[$key]}")" "$(med "${CPU_RATIO[$key]}")" "${WALL[$key]}"
        done
    done
done

if [[ -n $REF ]]; then
    echo
    for format in "${FORMATS[@]}"; do
        for report in "${REPORTS[@]}"; do
            [[ -z $report ]] && continue
            # shellcheck disable=SC2046
            if cmp -s <("$ANALYZE" $(args "$report" "$format")) <("$REF" $(args "$report" "$format")); then
                echo "$format $report: the same bytes as the reference"
            else
                echo "$format $report: DIFFERS from the reference"
            fi
        done
    done
fi
