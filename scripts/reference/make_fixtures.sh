#!/usr/bin/env bash
# Re-make every file of fixtures/ into OUT_DIR, in the same layout (nsys/, nsys/stats/, memsnap/,
# kineto/, collect/, collect/stats/), the way fixtures/README.md says each was made. Runs on the
# GPU machine (an NVIDIA H200 made the committed ones), from the project root, with:
#   - COLLECT_BINARY: a release build of collect made on a build machine
#     (`cargo build --release --bin collect`, then bring target/release/collect along);
#   - Nsight Systems 2025.3 (`nsys` on PATH or named by NSYS; `nsys export` and `nsys stats` need
#     libdw.so.1 on the loader path);
#   - python3 with PyTorch 2.11 (CUDA) for torch_ref.py, beside this script.
#
#   scripts/reference/make_fixtures.sh COLLECT_BINARY OUT_DIR [PART...]
#
# PART is one or more of nsys, memsnap, kineto, collect, grid (default: all five; grid, the
# 80-configuration `collect bench` sweep, takes longest). Intermediate files (.nsys-rep captures,
# unpacked exports, logs) go to OUT_DIR/work. Every output is gzip -9 of what the tool wrote, so it
# is byte-identical once unpacked. A new run gives new times, addresses and ids: compare it with
# fixtures/ through `analyze` and the tests (kernel names, counts, peaks), not byte for byte.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    sed -n '2,17p' "$0" >&2
    exit 2
fi
bin=$1
out=$2
shift 2
parts=("$@")
[[ ${#parts[@]} -eq 0 ]] && parts=(nsys memsnap kineto collect grid)

here=$(cd "$(dirname "$0")" && pwd)
ref=$here/torch_ref.py
NSYS=${NSYS:-$(command -v nsys || true)}
if [[ -z $NSYS ]] && [[ " ${parts[*]} " =~ " nsys " || " ${parts[*]} " =~ " collect " ]]; then
    echo "make_fixtures: nsys not found: put it on PATH or name it with NSYS" >&2
    exit 2
fi
mkdir -p "$out/work"
out=$(cd "$out" && pwd)
work=$out/work

# logged LOG COMMAND...: run COMMAND with its output in LOG; on failure show LOG and stop.
logged() {
    local log=$1
    shift
    if ! "$@" >> "$log" 2>&1; then
        echo "make_fixtures: failed: $*" >&2
        tail -n 40 "$log" >&2
        exit 1
    fi
}

gz() { # gz SRC DEST: gzip -9 copy of SRC at DEST
    mkdir -p "$(dirname "$2")"
    gzip -9 -n -c "$1" > "$2.tmp" && mv "$2.tmp" "$2"
}

# stats_csvs EXPORT DEST_DIR NAME REPORT...: what `nsys stats --format csv` prints for each report,
# as DEST_DIR/NAME_REPORT.csv (`:` in a report name becomes `_`, as in cuda_gpu_kern_sum_base).
# One report per call, into an empty folder, so the file's name never depends on nsys's rule.
stats_csvs() {
    local export=$1 dest=$2 name=$3 r tmp csvs
    shift 3
    mkdir -p "$dest"
    for r in "$@"; do
        tmp=$(mktemp -d "$work/stats.XXXXXX")
        "$NSYS" stats --report "$r" --format csv --force-overwrite=true --output "$tmp/out" \
            "$export" > "$tmp/log" 2>&1 || true
        csvs=("$tmp"/*.csv)
        if [[ ${#csvs[@]} -ne 1 || ! -f ${csvs[0]} ]]; then
            echo "make_fixtures: nsys stats --report $r on $export wrote no CSV:" >&2
            cat "$tmp/log" >&2
            exit 1
        fi
        mv "${csvs[0]}" "$dest/${name}_${r//:/_}.csv"
        rm -rf "$tmp"
    done
}

# nsys/: torch_ref.py under Nsight Systems, two warm-up steps, then `measurement` with N steps.
make_nsys() {
    local spec name size ctx mode precision steps amp
    local reports=(cuda_gpu_kern_sum cuda_gpu_kern_sum:base cuda_api_sum cuda_gpu_mem_time_sum
        cuda_gpu_mem_size_sum nvtx_sum nvtx_kern_sum nvtx_gpu_proj_sum)
    for spec in "small 128 forward fp32 2" "small 128 train fp32 2" "small 256 train bf16 2" \
        "medium 256 forward fp32 2" "large 512 train fp32 1"; do
        read -r size ctx mode precision steps <<< "$spec"
        name=torch_${size}_ctx${ctx}_${mode/forward/fwd}_${precision}
        amp=()
        [[ $precision == bf16 ]] && amp=(--amp)
        echo "nsys: $name"
        : > "$work/$name.log"
        logged "$work/$name.log" "$NSYS" profile --trace=cuda,nvtx --sample=none --cpuctxsw=none \
            -o "$work/$name" --force-overwrite=true python3 "$ref" nsys-target --nvtx-attn \
            --size "$size" --ctx "$ctx" --mode "$mode" --steps "$steps" "${amp[@]}"
        logged "$work/$name.log" "$NSYS" export --type sqlite --force-overwrite=true \
            -o "$work/$name.sqlite" "$work/$name.nsys-rep"
        stats_csvs "$work/$name.sqlite" "$out/nsys/stats" "$name" "${reports[@]}"
        gz "$work/$name.sqlite" "$out/nsys/$name.sqlite.gz"
    done
}

# memsnap/: one recorded step per configuration after two warm-up steps and a peak reset;
# peaks.jsonl gets torch.cuda.max_memory_allocated() of each, in the order of the runs.
make_memsnap() {
    local spec size ctx mode precision amp log
    mkdir -p "$out/memsnap"
    : > "$work/memsnap.jsonl"
    for spec in "medium 128 forward fp32" "medium 128 train fp32" "medium 256 forward fp32" \
        "medium 256 train fp32" "medium 512 forward fp32" "medium 512 train fp32" \
        "medium 256 train bf16" "small 128 forward fp32" "small 128 train fp32" \
        "small 128 train bf16"; do
        read -r size ctx mode precision <<< "$spec"
        amp=()
        [[ $precision == bf16 ]] && amp=(--amp)
        echo "memsnap: $size ctx $ctx $mode $precision"
        log=$work/memsnap_${size}_ctx${ctx}_${mode}_${precision}.log
        : > "$log"
        logged "$log" python3 "$ref" memsnap --size "$size" --ctx "$ctx" --mode "$mode" "${amp[@]}" \
            --out "$out/memsnap"
        # torch_ref.py's last line: {"snapshot": NAME, "bytes": N, "peak_allocated": N}
        grep '^{"snapshot"' "$log" | tail -n 1 >> "$work/memsnap.jsonl"
    done
    python3 - "$work/memsnap.jsonl" > "$out/memsnap/peaks.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(json.dumps({"file": r["snapshot"] + ".gz", "max_memory_allocated": r["peak_allocated"]}))
EOF
}

# kineto/: torch.profiler over one training step of the small model (ctx 128, fp32).
make_kineto() {
    mkdir -p "$out/kineto"
    echo "kineto: small ctx 128 train fp32"
    : > "$work/kineto.log"
    logged "$work/kineto.log" python3 "$ref" kineto --size small --ctx 128 --mode train \
        --out "$out/kineto"
}

# collect/: collect's own trace, snapshot and results of small ctx 128 train fp32 and an nsys
# capture of the same command (scripts/gpu/tracing_acceptance.sh), nsys stats of the trace, and
# the kernel-name table of the PyTorch and collect nsys captures.
make_collect() {
    local acc=$work/acceptance name=collect_small_ctx128_train_fp32 torch_exports
    echo "collect: tracing acceptance into $acc"
    # It goes on past a failed step and prints each step's exit status; a missing output stops
    # the copies below.
    "$here/../gpu/tracing_acceptance.sh" "$bin" "$acc" > "$work/acceptance.log" 2>&1 || true
    cat "$work/acceptance.log"
    for f in sqlite pickle json; do
        gz "$acc/collect_small_fp32.$f" "$out/collect/$name.$f.gz"
    done
    gz "$acc/nsys_small_fp32.sqlite" "$out/collect/nsys_$name.sqlite.gz"
    stats_csvs "$acc/collect_small_fp32.sqlite" "$out/collect/stats" "$name" \
        cuda_gpu_kern_sum nvtx_sum nvtx_kern_sum
    # The PyTorch captures of this run when it made them, else the committed ones.
    torch_exports=("$out"/nsys/torch_*.sqlite.gz)
    [[ -f ${torch_exports[0]} ]] || torch_exports=(fixtures/nsys/torch_*.sqlite.gz)
    python3 "$here/kernel_names.py" "$out/collect/kernel_names_nsys.tsv" "${torch_exports[@]}" \
        "$acc/nsys_small_fp32.sqlite" "$acc/nsys_small_bf16.sqlite" "$acc/nsys_large.sqlite"
}

# collect/bench_grid_h200.json.gz: the whole grid in one `collect bench` invocation.
make_grid() {
    echo "grid: 5 sizes x ctx 128-1024 x forward/train x fp32/bf16"
    : > "$work/grid.log"
    logged "$work/grid.log" "$bin" bench --size small,medium,large,xl,2.7B --ctx 128,256,512,1024 \
        --mode forward,train --precision fp32,bf16 --out "$work/grid.json"
    gz "$work/grid.json" "$out/collect/bench_grid_h200.json.gz"
}

for part in "${parts[@]}"; do
    case $part in
        nsys) make_nsys ;;
        memsnap) make_memsnap ;;
        kineto) make_kineto ;;
        collect) make_collect ;;
        grid) make_grid ;;
        *)
            echo "make_fixtures: unknown part $part (nsys, memsnap, kineto, collect, grid)" >&2
            exit 2
            ;;
    esac
done
find "$out" -path "$work" -prune -o -type f -print | sort
