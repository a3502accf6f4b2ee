#!/usr/bin/env bash
# Fuzz campaigns over every parser: the fuzz tests of the integration suite (tests/integration/
# fuzz_*.rs), run with many cases in an optimised build that keeps overflow checks and debug
# assertions on, so that an integer overflow is a failure as it is in the debug suite. Runs on the
# build machine, from anywhere in the checkout.
#
#   scripts/bench/fuzz.sh [CASES] [SEED] [PARSER...]
#
# CASES per parser (default 1,000,000), in chunks of 50,000 so counts show as they come; SEED of
# the campaign (default 1); PARSER among nsys, kineto, pickle, snapshot, gzip, many (default all:
# snapshot builds snapshots field by field where pickle changes the bytes of real ones; many
# profiles and exports to Parquet folders of mutated rank files). FUZZ_THREADS
# sets the worker threads (default 2); FUZZ_START the number of the first case (default 0), so
# that a campaign cut short goes on where it stopped. A case is replayed alone with
#   FUZZ_SEED=S FUZZ_FIRST=N FUZZ_CASES=1 cargo test --release --test integration fuzz_PARSER
# A failing case's input is kept in target/fuzz-failures/. A case hangs when, while it ran, the
# process has worked FUZZ_HANG_SECS seconds of CPU time per worker thread (see
# tests/integration/fuzz_engine.rs), so that waiting for a core beside other work is not taken
# for a hang; the process may hold FUZZ_MEMORY_GIB GiB (default 8), past which the cases running
# fail. Ends with one line per parser: inputs, loaded, refused (one error line each), failed, the
# slowest case and its number.
set -euo pipefail
cd "$(dirname "$0")/../.."

CASES=${1:-1000000}
SEED=${2:-1}
shift $(($# < 2 ? $# : 2))
PARSERS=("$@")
if [[ ${#PARSERS[@]} -eq 0 ]]; then
    PARSERS=(nsys kineto pickle snapshot gzip many)
fi
CHUNK=${FUZZ_CHUNK:-50000}
START=${FUZZ_START:-0}
export FUZZ_THREADS=${FUZZ_THREADS:-2}
export FUZZ_HANG_SECS=${FUZZ_HANG_SECS:-10}
export FUZZ_MEMORY_GIB=${FUZZ_MEMORY_GIB:-8}
export CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true
export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
TARGET=target/fuzz

cargo test --release --target-dir "$TARGET" --test integration --no-run -q
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
declare -A SUMMARY
status=0
for p in "${PARSERS[@]}"; do
    inputs=0 loaded=0 refused=0 failed=0 slowest=0 slowest_case=- started=$SECONDS
    for ((first = START; first < START + CASES; first += CHUNK)); do
        n=$((START + CASES - first < CHUNK ? START + CASES - first : CHUNK))
        if ! FUZZ_SEED=$SEED FUZZ_FIRST=$first FUZZ_CASES=$n \
            cargo test --release --target-dir "$TARGET" -q --test integration "fuzz_$p::" \
            -- --nocapture >"$LOG" 2>&1; then
            status=1
            grep -E '^(case [0-9]+:|fuzz )' "$LOG" >&2 || tail -20 "$LOG" >&2
        fi
        # The counts line only: `cargo test -q` prints a test's `.` on the same line when another
        # test of the file ends first (Kineto's), and a failed campaign's panic message also
        # starts `fuzz NAME: ` (`N failing cases`), which has no counts. A chunk without the
        # counts line (a hang aborts the process) counts as failed whole.
        line=$(grep -oE "fuzz $p: [0-9]+ inputs .*" "$LOG" | tail -1 || true)
        counts=$(sed -nE 's/^fuzz [a-z]+: ([0-9]+) inputs .*: ([0-9]+) loaded, ([0-9]+) refused .*, ([0-9]+) failed; slowest case ([0-9]+) ms \(case ([0-9]+)\).*/\1 \2 \3 \4 \5 \6/p' <<<"$line")
        if [[ -z $counts ]]; then
            failed=$((failed + n))
            echo "fuzz $p: cases $first..$((first + n)) gave no counts; all counted as failed" >&2
            continue
        fi
        read -r i l r f s c <<<"$counts"
        inputs=$((inputs + i)) loaded=$((loaded + l)) refused=$((refused + r)) failed=$((failed + f))
        if ((s > slowest)); then
            slowest=$s slowest_case=$c
        fi
        echo "fuzz $p: $inputs inputs so far ($((SECONDS - started)) s)" >&2
    done
    SUMMARY[$p]=$(printf '%-7s %10d %10d %10d %7d %8d ms %9s %7d s' "$p" "$inputs" "$loaded" "$refused" "$failed" "$slowest" "$slowest_case" $((SECONDS - started)))
done
echo
echo "seed $SEED, cases from $START, $FUZZ_THREADS threads, $(nproc) CPUs"
printf '%-7s %10s %10s %10s %7s %11s %9s %9s\n' parser inputs loaded refused failed slowest case time
for p in "${PARSERS[@]}"; do
    echo "${SUMMARY[$p]}"
done
exit $status
