#!/usr/bin/env sh
# Time `analyze memory` (read, replay, peak, categories, tables) on the largest public snapshot,
# release build, median of 7 runs; fails when the median is above the budget (0.5 s).
# Runs on the build machine (no GPU), from anywhere in the checkout. The default snapshot is in
# the shared fixtures beside the checkout; without it the script says so and exits 0.
#
#   scripts/bench/bench_memory.sh [SNAPSHOT] [BUDGET_SECONDS]
set -eu
cd "$(dirname "$0")/../.."
file="${1:-../shared/fixtures/public/memsnap/kkaitlyn-a2__memory_files_memory_ctx128_fullstep_.pickle.gz}"
budget="${2:-0.5}"
if [ ! -f "$file" ]; then
    echo "skipped: $file not found" >&2
    exit 0
fi
cargo build --release -q --bin analyze
times=""
for _ in 1 2 3 4 5 6 7; do
    start=$(date +%s.%N)
    ./target/release/analyze memory "$file" >/dev/null
    end=$(date +%s.%N)
    times="$times $(echo "$end - $start" | bc -l)"
done
median=$(printf '%s\n' $times | sort -g | sed -n 4p)
printf 'analyze memory %s: median %.3f s of 7 runs (budget %s s)\n' "$(basename "$file")" "$median" "$budget"
[ "$(echo "$median <= $budget" | bc -l)" -eq 1 ]
