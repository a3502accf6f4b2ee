#!/usr/bin/env bash
# What recording costs: collect bench with nothing recorded, with the caching allocator alone,
# with --trace, with --memory-snapshot and with both, side by side on one GPU in one run,
# alternating the variants REPEATS times so that drift of the machine hits each alike. Runs on
# the GPU machine, with a collect binary built elsewhere; needs python3 (standard library).
#   scripts/gpu/trace_overhead.sh COLLECT_BINARY OUT_DIR [REPEATS] [SIZES] [CTX]
# Defaults: 2 repeats, sizes small,large, ctx 256; train, fp32, 5 warm-up and 20 timed steps.
# Leaves one results JSON per run (SIZE-VARIANT-REPEAT.json) and the traces and snapshots in
# OUT_DIR, and prints the table of trace_overhead.py (beside this script).
set -euo pipefail
bin=$1
out=$2
repeats=${3:-2}
sizes=${4:-small,large}
ctx=${5:-256}
here=$(dirname "$0")
mkdir -p "$out"
for size in ${sizes//,/ }; do
    for r in $(seq 1 "$repeats"); do
        for v in plain caching trace snapshot both; do
            case $v in
                plain) extra=() ;;
                caching) extra=(--allocator caching) ;;
                trace) extra=(--trace "$out/$size-$r.sqlite") ;;
                snapshot) extra=(--memory-snapshot "$out/$size-$r.pickle") ;;
                both) extra=(--trace "$out/$size-$r-both.sqlite" --memory-snapshot "$out/$size-$r-both.pickle") ;;
            esac
            "$bin" bench --size "$size" --ctx "$ctx" --mode train --precision fp32 \
                --warmup 5 --steps 20 --out "$out/$size-$v-$r.json" "${extra[@]}" > /dev/null
        done
    done
done
python3 "$here/trace_overhead.py" "$out"
