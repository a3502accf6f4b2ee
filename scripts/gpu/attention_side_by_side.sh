#!/usr/bin/env bash
# Two collect builds' FlashAttention timed alternately in one run, with PyTorch's SDPA beside them
# once per shape, for comparing a kernel change with the build before it. Runs on the GPU machine,
# from the project root (torch_attention.py is read from beside this script):
#   scripts/gpu/attention_side_by_side.sh OLD_COLLECT NEW_COLLECT WORK_DIR [ROUNDS] [SHAPES...]
# SHAPES are batch:heads:d:seq (bf16, causal); the default is the leaderboard shape and the
# reference's SDPA shapes at seq 4096 and 16384 (those of attention_acceptance.sh without the
# 65536 rows, which take longest). Each round runs every shape with OLD then NEW (ROUNDS, default
# 3); every phase stops after 0.5 s of passes once 5 have run. Leaves each run's rows in WORK_DIR
# and prints one line per shape: the medians over the rounds of forward and backward ms for old,
# new and SDPA, and new over old.
set -uo pipefail
old=$1
new=$2
w=$3
rounds=${4:-3}
shift $(($# < 4 ? $# : 4))
shapes=("$@")
[ ${#shapes[@]} -eq 0 ] && shapes=(1:16:64:16384 64:16:64:4096 16:16:64:16384 64:8:128:4096 16:8:128:16384)
ref=$(dirname "$0")/../reference
mkdir -p "$w"
start=$SECONDS
status=0
for shape in "${shapes[@]}"; do
    IFS=: read -r batch heads d seq <<< "$shape"
    grid=(--batch "$batch" --heads "$heads" --d "$d" --seq "$seq" --precision bf16)
    name="b$batch-h$heads-d$d-s$seq"
    python3 "$ref/torch_attention.py" --max-seconds 0.5 --impl torch_sdpa "${grid[@]}" \
        --out "$w/sdpa_$name.json" 2> "$w/sdpa_$name.log" || {
        echo "torch_attention.py $name failed: see $w/sdpa_$name.log" >&2
        status=1
    }
    for r in $(seq 1 "$rounds"); do
        for which in old new; do
            bin=$old
            [ "$which" = new ] && bin=$new
            "$bin" attention --max-seconds 0.5 --impl flash "${grid[@]}" --out "$w/${which}_${name}_$r.json" \
                > /dev/null 2> "$w/${which}_${name}_$r.log" || {
                echo "collect ($which) $name round $r failed: see $w/${which}_${name}_$r.log" >&2
                status=1
            }
        done
    done
    echo "[$((SECONDS - start)) s] $name" >&2
done
python3 - "$w" "$rounds" "${shapes[@]}" <<'EOF'
import json, os, statistics, sys
w, rounds, shapes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def row(path):
    try:
        r = json.load(open(path))[0]
    except (OSError, ValueError, IndexError):
        return None
    return r if r["status"] == "OK" else None
print("| shape | old fwd, bwd ms | new fwd, bwd ms | sdpa fwd, bwd ms | new / old fwd, bwd "
      "| new / sdpa fwd, bwd | new fwd + bwd ms |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for shape in shapes:
    b, h, d, s = shape.split(":")
    name = f"b{b}-h{h}-d{d}-s{s}"
    med = {}
    for which in ("old", "new"):
        rows = [row(os.path.join(w, f"{which}_{name}_{r}.json")) for r in range(1, rounds + 1)]
        rows = [r for r in rows if r]
        if rows:
            med[which] = (statistics.median(r["fwd_ms"] for r in rows),
                          statistics.median(r["bwd_ms"] for r in rows))
    sd = row(os.path.join(w, f"sdpa_{name}.json"))
    if sd:
        med["sdpa"] = (sd["fwd_ms"], sd["bwd_ms"])
    def ms(k):
        return f"{med[k][0]:.3f}, {med[k][1]:.3f}" if k in med else "-"
    def ratio(a, b):
        if a not in med or b not in med:
            return "-"
        return f"{med[a][0] / med[b][0]:.3f}, {med[a][1] / med[b][1]:.3f}"
    total = f"{sum(med['new']):.3f}" if "new" in med else "-"
    print(f"| {name} | {ms('old')} | {ms('new')} | {ms('sdpa')} | {ratio('new', 'old')} "
          f"| {ratio('new', 'sdpa')} | {total} |")
EOF
exit "$status"
