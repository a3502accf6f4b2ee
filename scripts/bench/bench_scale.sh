#!/usr/bin/env bash
# Benchmarks of `analyze` at scale (not tests): time and peak memory of `stats --report all`,
# `stats --report cuda_gpu_kern_sum`, `profile` and `memory` on inputs of about 1 GB and 4 GB made
# from real ones, and whether the outputs equal those of a reference build. Runs on the build
# machine, from anywhere in the checkout; needs Python 3 and /usr/bin/time.
#
#   scripts/bench/bench_scale.sh [REFERENCE_ANALYZE] [WORK_DIR]
#
# WORK_DIR (default /tmp/analyze-scale) receives the large inputs, made once with make_large.py
# (they take minutes and about 8 GB of disk): the shared 60-step export ×50 (1.09 GB) and ×200
# (about 4.4 GB), the shared Kineto trace ×150 (about 1 GB), a memory snapshot ×1100 (about 1 GB; MEMSNAP_COPIES). With a
# REFERENCE_ANALYZE binary, each command runs with it too (its outputs kept in WORK_DIR for the next
# run) and the table says whether the outputs are equal byte for byte. ANALYZE names a prebuilt
# binary instead of building one; ONLY runs the rows whose input name matches a pattern (x50,
# x200, kineto, memsnap). The memory check of both is off (ANALYZE_MEMORY_LIMIT=off), since the
# reference build may predate it and the figures compare the work, not the refusal.
set -euo pipefail
cd "$(dirname "$0")/../.."

REF=${1:-}
WORK=${2:-/tmp/analyze-scale}
ONLY=${ONLY:-}
SHARED=../shared/fixtures/ours
MEMSNAP_BASE=${MEMSNAP_BASE:-fixtures/memsnap/memsnap_medium_ctx512_train_fp32.pickle.gz}
MEMSNAP_COPIES=${MEMSNAP_COPIES:-1100}
mkdir -p "$WORK"

if [[ -z ${ANALYZE:-} ]]; then
    cargo build --release -q --bin analyze
    ANALYZE=target/release/analyze
fi
export ANALYZE_MEMORY_LIMIT=off

make_input() { # kind input output copies
    if [[ ! -f $3 ]]; then
        echo "making $3 ($1 ×$4) ..." >&2
        python3 scripts/bench/make_large.py "$1" "$2" "$3" --copies "$4" 2>/dev/null
    fi
}
make_input nsys "$SHARED/large/torch_small_ctx128_train_fp32_60steps.sqlite.gz" "$WORK/x50.sqlite" 50
make_input nsys "$SHARED/large/torch_small_ctx128_train_fp32_60steps.sqlite.gz" "$WORK/x200.sqlite" 200
make_input kineto "$SHARED/kineto/kineto_small_ctx128_train_fp32.pt.trace.json.gz" "$WORK/kineto_x150.json" 150
make_input memsnap "$MEMSNAP_BASE" "$WORK/memsnap_x$MEMSNAP_COPIES.pickle" "$MEMSNAP_COPIES"

# name | input | arguments
RUNS=(
    "stats_all|x50.sqlite|stats --report all"
    "stats_kern_sum|x50.sqlite|stats --report cuda_gpu_kern_sum"
    "profile|x50.sqlite|profile"
    "stats_all|x200.sqlite|stats --report all"
    "stats_kern_sum|x200.sqlite|stats --report cuda_gpu_kern_sum"
    "profile|x200.sqlite|profile"
    "profile|kineto_x150.json|profile"
    "stats_all|kineto_x150.json|stats --report all"
    "memory|memsnap_x$MEMSNAP_COPIES.pickle|memory"
)

# Run one command with /usr/bin/time; prints "seconds peak_MB status".
timed() { # binary out args...
    local bin=$1 out=$2
    shift 2
    local t
    t=$(mktemp)
    local status=0
    /usr/bin/time -f '%e %M' -o "$t" "$bin" "$@" >"$out" 2>"$out.err" || status=$?
    read -r secs kb <"$t"
    rm -f "$t"
    echo "$secs $((kb / 1024)) $status"
}

size_of() { du -h --apparent-size "$1" | cut -f1; }

echo "machine: $(nproc) CPUs, $(free -g | awk '/Mem:/ {print $2}') GiB; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-16s %-24s %7s %9s %9s %9s %9s %s\n' command input size time_s peak_MB ref_s ref_MB same
for run in "${RUNS[@]}"; do
    IFS='|' read -r name input args <<<"$run"
    [[ -n $ONLY && $input != *$ONLY* ]] && continue
    file=$WORK/$input
    stem=${input%%.*}_$name
    read -r secs mb status < <(timed "$ANALYZE" "$WORK/new_$stem.txt" $args "$file")
    ref_s=- ref_mb=- same=-
    if [[ -n $REF ]]; then
        if [[ ! -f $WORK/ref_$stem.txt ]]; then
            read -r ref_s ref_mb _ < <(timed "$REF" "$WORK/ref_$stem.txt" $args "$file")
        fi
        if cmp -s "$WORK/new_$stem.txt" "$WORK/ref_$stem.txt"; then same=yes; else same=NO; fi
    fi
    [[ $status -ne 0 ]] && same="exit $status: $(head -c 200 "$WORK/new_$stem.txt.err")"
    printf '%-16s %-24s %7s %9s %9s %9s %9s %s\n' "$name" "$input" "$(size_of "$file")" "$secs" "$mb" "$ref_s" "$ref_mb" "$same"
done
