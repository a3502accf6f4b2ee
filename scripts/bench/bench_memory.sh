#!/usr/bin/env sh
# Time `analyze memory` (read, replay, peak, categories, tables) on a snapshot, release build,
# side by side with Python's `pickle.load` of the same file (the floor: reading the pickle
# alone) and, when given, another `analyze` binary (an older build): the commands alternate,
# three rounds, and the medians of wall time, user CPU time and peak memory are printed. Fails
# when the median wall time of `analyze memory` is above the budget (0.5 s by default, for the
# default snapshot).
# Runs on the build machine (no GPU), from anywhere in the checkout. The default snapshot is in
# the shared fixtures beside the checkout; without it the script says so and exits 0. A large
# snapshot is made with `make_large.py memsnap`.
#
#   scripts/bench/bench_memory.sh [SNAPSHOT] [BUDGET_SECONDS] [BASELINE_ANALYZE]
set -eu
cd "$(dirname "$0")/../.."
file="${1:-../shared/fixtures/public/memsnap/kkaitlyn-a2__memory_files_memory_ctx128_fullstep_.pickle.gz}"
budget="${2:-0.5}"
baseline="${3:-}"
if [ ! -f "$file" ]; then
    echo "skipped: $file not found" >&2
    exit 0
fi
cargo build --release -q --bin analyze
target="${CARGO_TARGET_DIR:-target}"
ours="$target/release/analyze"
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# One timed run: NAME COMMAND...; appends "NAME wall user KB" to the results.
timed() {
    name=$1
    shift
    /usr/bin/time -f "$name %e %U %M" -a -o "$results" "$@" >/dev/null
}

for _ in 1 2 3; do
    case "$file" in
    *.gz) timed pickle.load python3 -c "import gzip,pickle,sys; pickle.load(gzip.open(sys.argv[1],'rb'))" "$file" ;;
    *) timed pickle.load python3 -c "import pickle,sys; pickle.load(open(sys.argv[1],'rb'))" "$file" ;;
    esac
    if [ -n "$baseline" ]; then
        timed baseline "$baseline" memory "$file"
    fi
    timed analyze "$ours" memory "$file"
done

printf '%s: every run, then the median of each column over 3 rounds\n' "$(basename "$file")"
awk '{ printf "  %-12s %7.2f s wall %7.2f s user %8.0f MB peak\n", $1, $2, $3, $4 / 1000 }' "$results"
med() { grep "^$1 " "$results" | awk -v c="$2" '{ print $c }' | sort -g | sed -n 2p; }
for name in pickle.load baseline analyze; do
    grep -q "^$name " "$results" || continue
    printf '  median %-12s %7.2f s wall %7.2f s user %8.0f MB peak\n' "$name" \
        "$(med "$name" 2)" "$(med "$name" 3)" "$(echo "$(med "$name" 4) / 1000" | bc -l)"
done
median=$(med analyze 2)
printf '  budget %s s\n' "$budget"
[ "$(echo "$median <= $budget" | bc -l)" -eq 1 ]
