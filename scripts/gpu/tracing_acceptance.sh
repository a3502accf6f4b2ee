#!/usr/bin/env bash
# collect's recordings against Nsight Systems and PyTorch, in one go. Runs on the GPU machine,
# from the project root, with a collect binary built elsewhere, Nsight Systems (`nsys` on PATH or
# named by NSYS; `nsys export` and `nsys stats` need libdw.so.1 on the loader path) and PyTorch.
#   scripts/gpu/tracing_acceptance.sh COLLECT_BINARY WORK_DIR
# For small, ctx 128, train, fp32 and bf16 (2 warm-up and 2 timed steps, as the PyTorch
# captures in fixtures/nsys): collect with --trace and --memory-snapshot; the same
# configuration under Nsight Systems (a separate, plain run), exported to SQLite; `nsys stats`
# (cuda_gpu_kern_sum, nvtx_sum, nvtx_kern_sum) on both. The same for large, ctx 256 (trace
# only), and a two-configuration sweep (one file per configuration). On the fp32 snapshot:
# PyTorch's pickle.load, torch.cuda._memory_viz's segsum and the peak replayed from the trace
# (scripts/reference/snapshot_check.py), and the CLI's stats, trace and trace_plot. Ends with
# one row per configuration of the trace-against-nsys table (trace_vs_nsys.py). Logs and
# outputs, the .nsys-rep captures included, go to WORK_DIR; the exit codes go to stdout.
set -uo pipefail
bin=$1
w=$2
mkdir -p "$w"
NSYS=${NSYS:-$(command -v nsys || true)}
if [[ -z "$NSYS" ]]; then
    echo "tracing_acceptance: nsys not found: put it on PATH or name it with NSYS" >&2
    exit 2
fi
here=$(dirname "$0")
cfg=(--size small --ctx 128 --mode train --warmup 2 --steps 2)
for p in fp32 bf16; do
    "$bin" bench "${cfg[@]}" --precision "$p" --trace "$w/collect_small_$p.sqlite" \
        --memory-snapshot "$w/collect_small_$p.pickle" --out "$w/collect_small_$p.json" \
        --format markdown > "$w/collect_small_$p.md" 2> "$w/collect_small_$p.log"
    echo "collect $p: exit $?"
    "$NSYS" profile --trace=cuda,nvtx --sample=none --cpuctxsw=none -o "$w/nsys_small_$p" \
        --force-overwrite=true "$bin" bench "${cfg[@]}" --precision "$p" \
        --out "$w/nsys_small_$p.json" > "$w/nsys_small_$p.log" 2>&1
    echo "nsys profile $p: exit $?"
    "$NSYS" export --type sqlite --force-overwrite=true -o "$w/nsys_small_$p.sqlite" \
        "$w/nsys_small_$p.nsys-rep" >> "$w/nsys_small_$p.log" 2>&1
    echo "nsys export $p: exit $?"
    for f in collect nsys; do
        "$NSYS" stats --report cuda_gpu_kern_sum,nvtx_sum,nvtx_kern_sum --format csv \
            --force-overwrite=true --output "$w/${f}_small_$p" "$w/${f}_small_$p.sqlite" \
            > "$w/${f}_small_${p}_stats.log" 2>&1
        echo "nsys stats on $f $p: exit $?"
    done
done
# A larger model against nsys (trace only), and a sweep: one trace and one snapshot per
# configuration, CUPTI started again for each.
big=(--size large --ctx 256 --mode train --precision fp32 --warmup 1 --steps 2)
"$bin" bench "${big[@]}" --trace "$w/collect_large.sqlite" --out "$w/collect_large.json" \
    > /dev/null 2> "$w/collect_large.log"
echo "collect large: exit $?"
"$NSYS" profile --trace=cuda,nvtx --sample=none --cpuctxsw=none -o "$w/nsys_large" \
    --force-overwrite=true "$bin" bench "${big[@]}" > "$w/nsys_large.log" 2>&1
"$NSYS" export --type sqlite --force-overwrite=true -o "$w/nsys_large.sqlite" \
    "$w/nsys_large.nsys-rep" >> "$w/nsys_large.log" 2>&1
echo "nsys large: exit $?"
for f in collect nsys; do
    "$NSYS" stats --report cuda_gpu_kern_sum --format csv --force-overwrite=true \
        --output "$w/${f}_large" "$w/${f}_large.sqlite" > /dev/null 2>&1
done
"$bin" bench --size small --ctx 128 --mode forward,train --warmup 1 --steps 2 \
    --trace "$w/sweep.sqlite" --memory-snapshot "$w/sweep.pickle" > /dev/null 2> "$w/sweep.log"
echo "sweep: exit $?"
for f in "$w"/sweep.*.sqlite; do
    echo "$(basename "$f"): $(python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute('select count(*) from CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0], 'kernels,', c.execute('select count(*) from NVTX_EVENTS').fetchone()[0], 'ranges')" "$f")"
done
ls "$w"/sweep.*
python3 "$here/../reference/snapshot_check.py" "$w/collect_small_fp32.pickle" "$w/collect_small_fp32.json" \
    > "$w/snapshot_check.log" 2>&1
echo "snapshot check: exit $?"
for c in stats trace; do
    python3 -m torch.cuda._memory_viz "$c" "$w/collect_small_fp32.pickle" > "$w/memory_viz_$c.txt" 2>&1
    echo "memory_viz $c: exit $?"
done
python3 -m torch.cuda._memory_viz trace_plot "$w/collect_small_fp32.pickle" \
    -o "$w/memory_viz_trace_plot.html" > "$w/memory_viz_trace_plot.log" 2>&1
echo "memory_viz trace_plot: exit $?"
echo
echo "| configuration | kernel names | kernel instances (trace / nsys) | total kernel time (trace / nsys) |"
echo "| --- | ---: | ---: | ---: |"
python3 "$here/trace_vs_nsys.py" "$w/collect_small_fp32.sqlite" "$w/nsys_small_fp32.sqlite" \
    "small, ctx 128, train, fp32, 2 warm-up + 2 steps"
python3 "$here/trace_vs_nsys.py" "$w/collect_small_bf16.sqlite" "$w/nsys_small_bf16.sqlite" \
    "small, ctx 128, train, bf16, 2 + 2"
python3 "$here/trace_vs_nsys.py" "$w/collect_large.sqlite" "$w/nsys_large.sqlite" \
    "large, ctx 256, train, fp32, 1 + 2"
