#!/usr/bin/env bash
# Time collect and PyTorch eager side by side on one GPU, in one run, on the same grid: runs on
# the GPU machine (PyTorch with CUDA), with a collect binary built elsewhere.
#   scripts/bench/bench_vs_torch.sh COLLECT_BINARY OUT_DIR --size small,large --ctx 256 \
#       --mode forward,train --precision fp32,bf16 --warmup 5 --steps 10
# Leaves collect.json, collect.txt, torch.json and compare.md in OUT_DIR and prints the
# comparison table (scripts/reference/compare_bench.py).
set -euo pipefail
bin=$1
out=$2
shift 2
ref=$(dirname "$0")/../reference
mkdir -p "$out"
"$bin" bench "$@" --out "$out/collect.json" | tee "$out/collect.txt"
python3 "$ref/torch_bench.py" "$@" --out "$out/torch.json"
python3 "$ref/compare_bench.py" "$out/collect.json" "$out/torch.json" | tee "$out/compare.md"
