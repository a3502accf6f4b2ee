#!/usr/bin/env bash
# Benchmarks of `analyze` at scale (not tests): time and peak memory of `stats --report all`,
# `stats --report cuda_gpu_kern_sum`, `profile` and `memory` on inputs of about 1 GB and 4 GB made
# from real ones, and whether the outputs equal those of a reference build. Runs on the build
# machine, from anywhere in the checkout; needs Python 3 and /usr/bin/time.
#
#   scripts/bench/bench_scale.sh [REFERENCE_ANALYZE] [WORK_DIR]
#
# WORK_DIR (default /tmp/analyze-scale) receives the large inputs, made once with make_large.py
# (they take minutes and about 11 GB of disk): the shared 60-step export ×50 (1.09 GB) and ×200
# (about 4.4 GB), the shared Kineto trace ×150 (about 1 GB; and its gzip), a memory snapshot ×1100 (about 1 GB; MEMSNAP_COPIES), and a
# folder of 20 copies of the 60-step export (`report` over it against `profile` of each file, the
# `profile_each` row, one after the other in one timed shell; its peak is the largest), and the
# 60-step export as the 64 per-rank files of one run (`ranks64`, each with its own process ids and
# RANK, profiled as one run) beside one export of the same size (×64). With a
# REFERENCE_ANALYZE binary, each command runs with it too (its outputs kept in WORK_DIR for the next
# run) and the table says whether the outputs are equal byte for byte. ANALYZE names a prebuilt
# binary instead of building one; ONLY runs (and makes the inputs of) the rows whose input name
# matches an extended regular expression (x50, x200, x64, ranks64, kineto, memsnap, copies20,
# `x50|copies20`);
# SHARED names another folder holding the shared fixtures' `ours/` files. The memory check of
# both is off (ANALYZE_MEMORY_LIMIT=off), since the
# reference build may predate it and the figures compare the work, not the refusal.
set -euo pipefail
cd "$(dirname "$0")/../.."

REF=${1:-}
WORK=${2:-/tmp/analyze-scale}
ONLY=${ONLY:-}
SHARED=${SHARED:-../shared/fixtures/ours}
MEMSNAP_BASE=${MEMSNAP_BASE:-fixtures/memsnap/memsnap_medium_ctx512_train_fp32.pickle.gz}
MEMSNAP_COPIES=${MEMSNAP_COPIES:-1100}
mkdir -p "$WORK"

if [[ -z ${ANALYZE:-} ]]; then
    cargo build --release -q --bin analyze
    ANALYZE=target/release/analyze
fi
export ANALYZE_MEMORY_LIMIT=off

make_input() { # kind input output copies
    [[ -n $ONLY && ! $(basename "$3") =~ $ONLY ]] && return
    if [[ ! -f $3 ]]; then
        echo "making $3 ($1 ×$4) ..." >&2
        python3 scripts/bench/make_large.py "$1" "$2" "$3" --copies "$4" 2>/dev/null
    fi
}
make_input nsys "$SHARED/large/torch_small_ctx128_train_fp32_60steps.sqlite.gz" "$WORK/x50.sqlite" 50
make_input nsys "$SHARED/large/torch_small_ctx128_train_fp32_60steps.sqlite.gz" "$WORK/x200.sqlite" 200
make_input kineto "$SHARED/kineto/kineto_small_ctx128_train_fp32.pt.trace.json.gz" "$WORK/kineto_x150.json" 150
if [[ -f $WORK/kineto_x150.json && ! -f $WORK/kineto_x150.json.gz ]]; then
    echo "making $WORK/kineto_x150.json.gz ..." >&2
    gzip -c "$WORK/kineto_x150.json" >"$WORK/kineto_x150.json.gz.part"
    mv "$WORK/kineto_x150.json.gz.part" "$WORK/kineto_x150.json.gz"
fi
make_input memsnap "$MEMSNAP_BASE" "$WORK/memsnap_x$MEMSNAP_COPIES.pickle" "$MEMSNAP_COPIES"
make_input nsys "$SHARED/large/torch_small_ctx128_train_fp32_60steps.sqlite.gz" "$WORK/x64.sqlite" 64
if [[ -z $ONLY || ranks64 =~ $ONLY ]]; then
    mkdir -p "$WORK/ranks64"
    for i in $(seq 0 63); do
        f=$WORK/ranks64/run_rank$i.sqlite
        [[ -f $f ]] || python3 scripts/bench/make_large.py nsys "$SHARED/large/torch_small_ctx128_train_fp32_60steps.sqlite.gz" "$f" --copies 1 --rank "$i" 2>/dev/null
    done
fi
[[ -z $ONLY || copies20 =~ $ONLY ]] && mkdir -p "$WORK/copies20"
[[ -d $WORK/copies20 ]] && for i in $(seq -w 1 20); do
    [[ -f $WORK/copies20/run$i.sqlite.gz ]] || cp "$SHARED/large/torch_small_ctx128_train_fp32_60steps.sqlite.gz" "$WORK/copies20/run$i.sqlite.gz"
done
# `each.sh BINARY ARGS... DIR`: the command on every file of DIR, one after the other.
cat >"$WORK/each.sh" <<'SH'
#!/usr/bin/env bash
set -e
dir=${@: -1}
for f in "$dir"/*; do "${@:1:$#-1}" "$f"; done
SH
chmod +x "$WORK/each.sh"

# name | input | arguments
RUNS=(
    "stats_all|x50.sqlite|stats --report all"
    "stats_kern_sum|x50.sqlite|stats --report cuda_gpu_kern_sum"
    "profile|x50.sqlite|profile"
    "profile_device0|x50.sqlite|profile --device 0"
    "report|copies20|report -q --no-plots -o @TMP@"
    "profile|x64.sqlite|profile"
    "profile|ranks64|profile"
    "profile_each|copies20|profile"
    "stats_all|x200.sqlite|stats --report all"
    "stats_kern_sum|x200.sqlite|stats --report cuda_gpu_kern_sum"
    "profile|x200.sqlite|profile"
    "profile|kineto_x150.json|profile"
    "profile_gz|kineto_x150.json.gz|profile"
    "profile_by_op|kineto_x150.json|profile --by op"
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
    [[ -n $ONLY && ! $input =~ $ONLY ]] && continue
    file=$WORK/$input
    stem=${input%%.*}_$name
    # A run over every file of a folder goes through each.sh; @TMP@ is a fresh folder.
    run_with() { # binary out
        local a=${args//@TMP@/$(mktemp -d)}
        if [[ $name == *_each ]]; then
            timed "$WORK/each.sh" "$2" "$1" $a "$file"
        else
            timed "$1" "$2" $a "$file"
        fi
    }
    read -r secs mb status < <(run_with "$ANALYZE" "$WORK/new_$stem.txt")
    ref_s=- ref_mb=- same=-
    if [[ -n $REF ]]; then
        if [[ ! -f $WORK/ref_$stem.txt ]]; then
            read -r ref_s ref_mb _ < <(run_with "$REF" "$WORK/ref_$stem.txt")
        fi
        if cmp -s "$WORK/new_$stem.txt" "$WORK/ref_$stem.txt"; then same=yes; else same=NO; fi
    fi
    [[ $status -ne 0 ]] && same="exit $status: $(head -c 200 "$WORK/new_$stem.txt.err")"
    printf '%-16s %-24s %7s %9s %9s %9s %9s %s\n' "$name" "$input" "$(size_of "$file")" "$secs" "$mb" "$ref_s" "$ref_mb" "$same"
done
