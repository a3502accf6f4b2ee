#!/usr/bin/env bash
# The training step's speed: collect beside PyTorch eager and torch.compile in one run on one GPU,
# for small, large and 2.7B x fp32, bf16 at ctx 256, batch 4 (median train step), collect's bf16
# steps at ctx 256 replayed from CUDA graphs with FlashAttention (--cuda-graph --attention flash),
# and collect's 2.7B bf16 step at ctx 1024 with FlashAttention and its model FLOP utilisation
# (6 x parameters x tokens / step time / 790 TFLOP/s, the H200's dense bf16 peak). Runs on the
# GPU machine, from the project root, with a release collect binary built elsewhere and PyTorch
# installed; about 5 minutes on an H200, most of it PyTorch (torch.compile's compiles included).
#   scripts/gpu/speed.sh [COLLECT_BINARY] [OUT_DIR]
# COLLECT_BINARY defaults to target/release/collect, OUT_DIR to speed-out. WARMUP and STEPS
# (3 and 10) set the untimed and timed steps of every row; TORCH_COMPILE (blocks, model, none)
# what torch.compile compiles (scripts/reference/torch_speed.py).
# Leaves collect.json, collect_graph.json, collect_flash.json, torch.json and speed_h200.json (the
# JSON array of rows destined for fixtures/collect/speed_h200.json) in OUT_DIR and prints the rows.
set -euo pipefail
bin=${1:-target/release/collect}
out=${2:-speed-out}
warmup=${WARMUP:-3}
steps=${STEPS:-10}
here=$(dirname "$0")
mkdir -p "$out"
"$bin" bench --size small,large,2.7B --ctx 256 --batch 4 --mode train --precision fp32,bf16 \
    --warmup "$warmup" --steps "$steps" --out "$out/collect.json" | tee "$out/collect.txt"
"$bin" bench --size small,large,2.7B --ctx 256 --batch 4 --mode train --precision bf16 --cuda-graph \
    --attention flash --warmup "$warmup" --steps "$steps" --out "$out/collect_graph.json" \
    | tee "$out/collect_graph.txt"
"$bin" bench --size 2.7B --ctx 1024 --batch 4 --mode train --precision bf16 --attention flash \
    --warmup "$warmup" --steps "$steps" --out "$out/collect_flash.json" | tee "$out/collect_flash.txt"
python3 "$here/../reference/torch_speed.py" --size small,large,2.7B --ctx 256 --batch 4 \
    --precision fp32,bf16 --warmup "$warmup" --steps "$steps" --compile "${TORCH_COMPILE:-blocks}" \
    --out "$out/torch.json"
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
PEAK = 790e12  # H200 dense bf16 tensor-core FLOP/s

def collect_rows(path):
    with open(path) as f:
        return [r for r in json.load(f)["results"] if r.get("status") == "ok"]

torch_rows = {(r["size"], r["ctx"], r["precision"]): r for r in json.load(open(f"{out}/torch.json"))}
rows = []
for name, extra in (("collect", {}), ("collect_graph", {"attention": "flash", "cuda_graph": True})):
    for r in collect_rows(f"{out}/{name}.json"):
        t = torch_rows.get((r["size"], r["ctx"], r["precision"]), {})
        rows.append({"size": r["size"], "ctx": r["ctx"], "mode": r["mode"], "precision": r["precision"],
                     **extra, "collect_ms": round(r["host"]["median_ms"], 3),
                     "torch_eager_ms": t.get("torch_eager_ms") and round(t["torch_eager_ms"], 3),
                     "torch_compile_ms": t.get("torch_compile_ms") and round(t["torch_compile_ms"], 3),
                     "torch_compile_scope": t.get("torch_compile_scope")})
for r in collect_rows(f"{out}/collect_flash.json"):
    ms = r["host"]["median_ms"]
    flops = 6 * r["parameters"] * r["ctx"] * r["batch"]
    rows.append({"size": r["size"], "ctx": r["ctx"], "mode": r["mode"], "precision": r["precision"],
                 "attention": "flash", "collect_ms": round(ms, 3), "torch_eager_ms": None,
                 "torch_compile_ms": None, "mfu": round(flops / (ms / 1e3) / PEAK, 4)})
with open(f"{out}/speed_h200.json.tmp", "w") as f:
    json.dump(rows, f, indent=1)
    f.write("\n")
os.replace(f"{out}/speed_h200.json.tmp", f"{out}/speed_h200.json")
for r in rows:
    print(json.dumps(r))
PY
