#!/usr/bin/env bash
# `analyze export` at scale, on a build machine: RANKS per-rank copies of the 60-step export of the
# shared fixtures (make_large.py --rank: each its own process ids and RANK), exported together,
# profiled together, DuckDB's answers to docs/sql/ checked against the profile, then the same files
# through the PySpark job in local mode (each exported alone, --clock unix) and its answers
# checked. Prints the time and peak memory of each step; the figures of docs/validation.md.
#
#   scripts/scale/scale_acceptance.sh [ANALYZE_BINARY] [WORK_DIR] [RANKS]
#
# Needs Python 3 with duckdb and pyspark (pip install duckdb pyspark) and Java 17 for Spark.
# Defaults: target/release/analyze, /tmp/analyze-export-scale, 64 ranks. WORK_DIR is replaced.
set -euo pipefail
cd "$(dirname "$0")/../.."
analyze=$(realpath "${1:-target/release/analyze}")
work=${2:-/tmp/analyze-export-scale}
ranks=${3:-64}
source=../shared/fixtures/ours/large/torch_small_ctx128_train_fp32_60steps.sqlite.gz
rm -rf "$work" && mkdir -p "$work/files"

timed() { # LABEL COMMAND...: run it, print wall time, CPU time and peak memory
  local label=$1; shift
  /usr/bin/time -o "$work/time" -f "%e %U %S %M" "$@"
  awk -v l="$label" '{printf "%-34s %7.1f s wall %7.1f s CPU %7.2f GB peak\n", l, $1, $2 + $3, $4 / 1048576}' "$work/time"
}

for r in $(seq 0 $((ranks - 1))); do
  python3 scripts/bench/make_large.py nsys "$source" "$work/files/run_rank$r.sqlite" --copies 1 --rank "$r" 2>/dev/null
done
ls "$work"/files/*.sqlite > "$work/files.txt"
echo "$ranks files, $(du -sh "$work/files" | cut -f1)"

timed "analyze export ($ranks files)" "$analyze" export -q "$work/out" "$work/files"
timed "analyze profile ($ranks files)" sh -c "'$analyze' profile -q --format json '$work/files' > '$work/profile.json'"
timed "docs/sql on DuckDB" sh -c "python3 scripts/scale/sql_duckdb.py '$work/out' > '$work/answers.duckdb.json'"
python3 scripts/scale/check.py "$work/out" "$work/profile.json" --answers "$work/answers.duckdb.json"
timed "PySpark job, local[2] (CPU: driver)" sh -c "python3 scripts/scale/spark_export.py --master 'local[2]' --analyze '$analyze' --out '$work/spark' '$work/files.txt' > '$work/spark.log' 2>&1"
python3 -c "
import json, sys
d = json.load(open(sys.argv[1])); t = d['export_task_s']
print(f\"Spark: {d['inputs']} export tasks in {d['export_s']:.1f} s (each {t[0]:.2f} to {t[-1]:.2f} s, median {t[len(t) // 2]:.2f} s), queries {d['queries_s']:.1f} s\")
" "$work/spark/spark_run.json"
python3 scripts/scale/check.py "$work/spark" "$work/profile.json" --answers "$work/spark/answers.spark.json" --own-ids
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('ops rows:', sum(d['rows']['ops'].values()))" "$work/out/export.json"
echo "dataset: $(du -sh "$work/out" | cut -f1)"
