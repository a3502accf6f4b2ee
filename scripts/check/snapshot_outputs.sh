#!/usr/bin/env bash
# Writes the outputs of `analyze stats --report all`, `profile --format json` (whole, and
# `--device 0`, `--process` of its first process), `memory --format json`, `compare --format json`
# (each trace against the next) and `report` over every fixture into OUTDIR, one file per input
# and command, so that two builds can be compared with `diff -r`. Runs on the build machine (no GPU),
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
traces=$(ls "$root"/fixtures/nsys/*.sqlite.gz "$root"/fixtures/collect/*.sqlite.gz "$root"/fixtures/captures/*.sqlite.gz \
  "$root"/fixtures/kineto/*.json.gz "$shared"/ours/nsys/*.sqlite "$shared"/ours/kineto/*.json.gz \
  "$shared"/public/nsys/*.sqlite "$shared"/public/kineto/*.json.gz 2>/dev/null)
prev=
for f in $traces; do
  n=$(name "$f")
  "$bin" stats --report all "$f" > "$out/$n.stats.txt" 2>&1; echo "exit $?" >> "$out/$n.stats.txt"
  "$bin" profile --format json "$f" > "$out/$n.profile.json" 2>&1; echo "exit $?" >> "$out/$n.profile.json"
  "$bin" profile --format json --device 0 "$f" > "$out/$n.profile_device0.json" 2>&1; echo "exit $?" >> "$out/$n.profile_device0.json"
  pid=$(grep -m1 -o '"process": *[0-9]*' "$out/$n.profile.json" | grep -o '[0-9]*$')
  if [ -n "$pid" ]; then
    "$bin" profile --format json --process "$pid" "$f" > "$out/$n.profile_process.json" 2>&1; echo "exit $?" >> "$out/$n.profile_process.json"
  fi
  if [ -n "$prev" ]; then
    "$bin" compare --format json "$prev" "$f" > "$out/$n.compare.json" 2>&1; echo "exit $?" >> "$out/$n.compare.json"
  fi
  prev=$f
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
