#!/usr/bin/env bash
# collect's attention benchmark and PyTorch's side by side in one run, merged into one array of
# rows (destined for fixtures/collect/attention_h200.json), then the acceptance tables. Runs on
# the GPU machine, from the project root, with a release collect binary built elsewhere and
# PyTorch with CUDA.
#   scripts/gpu/attention_acceptance.sh COLLECT_BINARY WORK_DIR [MAX_SECONDS]
# Grids: the assignment's (collect's default: naive and flash; torch_naive, torch_compiled,
# torch_sdpa), the flash-benchmarking preset (naive and flash; torch_naive and torch_sdpa:
# torch.compile would recompile for each of its 80 shapes), the leaderboard shape (all), and the
# shapes of the PyTorch reference's SDPA rows (bf16, causal, 16 heads of 64 or 8 of 128; flash
# and torch_sdpa). Each phase of a row stops after MAX_SECONDS of passes (default 0.5), once 5
# have run, so the whole run takes about 7 minutes on an H200. Leaves every tool's rows, tables
# and logs in WORK_DIR, the merged rows in WORK_DIR/attention_h200.json, prints the tables, and
# exits as attention_table.py does (1: a check missed; 2: a row it needs is missing).
set -uo pipefail
bin=$1
w=$2
cap=${3:-0.5}
here=$(dirname "$0")
ref=$here/../reference
mkdir -p "$w"
start=$SECONDS
status=0
step() { echo "[$((SECONDS - start)) s] $*" >&2; }

ours() { # NAME ARGS...: collect attention into WORK_DIR/collect_NAME.{json,md,log}
    local name=$1
    shift
    step "collect attention $name"
    "$bin" attention --max-seconds "$cap" "$@" --out "$w/collect_$name.json" --format markdown \
        > "$w/collect_$name.md" 2> "$w/collect_$name.log" || {
        echo "collect attention $name failed: see $w/collect_$name.log" >&2
        status=1
    }
}
theirs() { # NAME ARGS...: torch_attention.py into WORK_DIR/torch_NAME.{json,log}
    local name=$1
    shift
    step "torch_attention.py $name"
    python3 "$ref/torch_attention.py" --max-seconds "$cap" "$@" --out "$w/torch_$name.json" \
        2> "$w/torch_$name.log" || {
        echo "torch_attention.py $name failed: see $w/torch_$name.log" >&2
        status=1
    }
}

ours default
theirs default --impl torch_naive,torch_compiled,torch_sdpa
ours flash-benchmarking --preset flash-benchmarking
theirs flash-benchmarking --preset flash-benchmarking --impl torch_naive,torch_sdpa
ours leaderboard --preset leaderboard
theirs leaderboard --preset leaderboard --impl torch_naive,torch_compiled,torch_sdpa,torch_sdpa_cudnn
for shape in 64:16:64:4096 16:16:64:16384 4:16:64:65536 64:8:128:4096 16:8:128:16384 4:8:128:65536; do
    IFS=: read -r batch heads d seq <<< "$shape"
    grid=(--batch "$batch" --heads "$heads" --d "$d" --seq "$seq" --precision bf16)
    ours "sdpa-b$batch-h$heads-d$d-s$seq" --impl flash "${grid[@]}"
    theirs "sdpa-b$batch-h$heads-d$d-s$seq" --impl torch_sdpa,torch_sdpa_cudnn "${grid[@]}"
done

step "merging"
python3 - "$w" "$w/attention_h200.json" <<'EOF'
import glob, json, os, sys
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "collect_*.json"))) + \
        sorted(glob.glob(os.path.join(sys.argv[1], "torch_*.json"))):
    rows.extend(json.load(open(path)))
with open(sys.argv[2], "w") as f:
    json.dump(rows, f, indent=1)
    f.write("\n")
print(f"{len(rows)} rows in {sys.argv[2]}", file=sys.stderr)
EOF
python3 "$here/attention_table.py" "$w/attention_h200.json" | tee "$w/attention_tables.md"
table=${PIPESTATUS[0]}
step "done"
[ "$status" -ne 0 ] && exit "$status"
exit "$table"
