#!/usr/bin/env sh
# Fuzz the memory-snapshot reader and analyses with many mutated real snapshots (byte flips,
# truncations, insertions of bytes and pickle opcodes). Every input must load and analyse
# without a panic or be refused with one error line. Prints how many inputs it survived and
# exits non-zero (showing the minimal failing input) if one did not.
#
#   scripts/fuzz_pickle.sh            # 20,000 cases
#   scripts/fuzz_pickle.sh 200000     # more
set -eu
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
MEMSNAP_FUZZ_CASES="${1:-20000}" \
    cargo test --release -p analyze --test memory_fuzz -- --nocapture >"$out" 2>&1 || status=$?
grep -E "memory snapshot fuzz|test result" "$out" || true
if [ "$status" -ne 0 ]; then
    tail -n 40 "$out"
fi
exit "$status"
