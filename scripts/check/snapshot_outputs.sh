#!/usr/bin/env bash
# Writes the outputs of `analyze stats --report all`, `profile --format json`,
# `memory --format json` and `report` over every fixture into OUTDIR, one file per input and
# command, so that two builds can be compared with `diff -r`. Runs on the build machine (no GPU),
# over fixtures/ and, when present, the shared fixtures beside the checkout (../shared/fixtures).
#   scripts/check/snapshot_outputs.sh ANALYZE_BINARY OUTDIR
#   e.g. snapshot_outputs.sh old/analyze before/; snapshot_outputs.sh target/release/analyze after/;
#        diff -r before after
set -uo pipefail
bin=$1 out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=$(cd "$root/.." && pwd)/shared/fixtures
mkdir -p "$out"
name() { echo "$1" | sed "s|^$root/||; s|^$shared/|shared/|; s|/|__|g"; }
traces=$(ls "$root"/fixtures/nsys/*.sqlite.gz "$root"/fixtures/collect/*.sqlite.gz "$root"/fixtures/kineto/*.json.gz \
  "$shared"/ours/nsys/*.sqlite "$shared"/public/nsys/*.sqlite "$shared"/public/kineto/*.json.gz 2>/dev/null)
for f in $traces; do
  n=$(name "$f")
  case "$f" in *.sqlite|*.sqlite.gz) "$bin" stats --report all "$f" > "$out/$n.stats.txt" 2>&1; echo "exit $?" >> "$out/$n.stats.txt";; esac
  "$bin" profile --format json "$f" > "$out/$n.profile.json" 2>&1; echo "exit $?" >> "$out/$n.profile.json"
done
snaps=$(ls "$root"/fixtures/memsnap/*.pickle.gz "$root"/fixtures/collect/*.pickle.gz "$shared"/ours/memsnap/*.pickle.gz "$shared"/public/memsnap/*.pickle.gz 2>/dev/null)
for f in $snaps; do
  n=$(name "$f")
  "$bin" memory --format json "$f" > "$out/$n.memory.json" 2>&1; echo "exit $?" >> "$out/$n.memory.json"
done
for d in fixtures "$shared/ours"; do
  n=$(name "$d")
  "$bin" report -q --no-plots -o "$out/report.$n" "$d" > "$out/report.$n.stdout" 2>&1; echo "exit $?" >> "$out/report.$n.stdout"
done
