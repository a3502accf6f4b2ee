#!/usr/bin/env bash
# collect's numerics against PyTorch on the same weights and tokens, for a grid of sizes and
# precisions: `collect numerics` writes the weights, tokens, logits, loss and gradients, and
# scripts/reference/torch_numerics.py recomputes them with the reference model. Runs on the GPU
# machine, from the project root, with a collect binary built elsewhere and PyTorch with CUDA and
# safetensors.
#   scripts/gpu/numerics_acceptance.sh COLLECT_BINARY WORK_DIR [SIZES] [PRECISIONS] [CTX] [ATTENTION]
# Defaults: sizes small,medium,large,xl,2.7B; precisions fp32,bf16; ctx 256 (batch 4); attention
# naive (flash: collect's side runs FlashAttention-2, PyTorch's keeps its naive attention). Every
# gradient is compared for small and medium, the embedding, first and last block, final norm and
# head for the others. Leaves one folder per configuration and numerics.jsonl in WORK_DIR, prints
# the numerics table of docs/validation.md, and exits 1 if a configuration missed its tolerance.
set -uo pipefail
bin=$1
w=$2
sizes=${3:-small,medium,large,xl,2.7B}
precisions=${4:-fp32,bf16}
ctx=${5:-256}
attention=${6:-naive}
ref=$(dirname "$0")/../reference
mkdir -p "$w"
: > "$w/numerics.jsonl"
status=0
for size in ${sizes//,/ }; do
    for p in ${precisions//,/ }; do
        dir="$w/$size-$p"
        grads=()
        case $size in small | medium) grads=(--all-grads) ;; esac
        if ! "$bin" numerics --size "$size" --ctx "$ctx" --precision "$p" --attention "$attention" "${grads[@]}" \
            --out "$dir" > "$dir.log" 2>&1; then
            echo "collect numerics $size $p failed: see $dir.log" >&2
            status=1
            continue
        fi
        python3 "$ref/torch_numerics.py" "$dir" --size "$size" --ctx "$ctx" --precision "$p" \
            >> "$w/numerics.jsonl" 2>> "$dir.log" || status=1
    done
done
python3 - "$w/numerics.jsonl" <<'EOF'
import json, sys
print("| size | precision | collect loss | PyTorch loss | loss rel. err. | logits rel. err. "
      "| gradients compared | worst gradient rel. err. |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"| {r['size']} | {r['precision']} | {r['collect_loss']:.6f} | {r['torch_loss']:.6f} "
          f"| {r['loss_rel_err']:.1e} | {r['logits_rel_err']:.1e} | {r['grads_compared']} "
          f"| {r['worst_grad_rel_err']:.1e} |" + ("" if r["pass"] else " (missed its tolerance)"))
EOF
exit "$status"
