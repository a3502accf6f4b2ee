#!/usr/bin/env bash
# Everything GPU-side of FlashAttention in collect, in one run: the GPU test binary, the 2.7B
# long-context training rows with --attention flash, numerics of the flash model against PyTorch,
# and the attention benchmark beside PyTorch's. Runs on the GPU machine, from the project root,
# with binaries built elsewhere (there is no cargo there):
#   cargo build --release --bin collect
#   cargo test --release --test gpu --no-run     # prints target/release/deps/gpu-<hash>
#   scripts/gpu/flash_acceptance.sh COLLECT_BINARY GPU_TEST_BINARY WORK_DIR [PART...]
# Parts (default: all four, in this order; about 12 minutes on an H200, so give them in two runs
# where a run is limited to 10):
#   tests      the GPU test binary, one test at a time (about 2 minutes)
#   bench      collect bench --size 2.7B --mode train --precision bf16 --attention flash, ctx 8192 x
#              batch 4 and ctx 16384 x batch 1, each beside its plan (about 1 minute)
#   numerics   scripts/gpu/numerics_acceptance.sh with --attention flash, small (heads of 64) and
#              2.7B (heads of 80, padded to 128), fp32 and bf16 (about 1 minute)
#   attention  scripts/gpu/attention_acceptance.sh (about 7 minutes)
# Leaves each part's logs and files in WORK_DIR and ends with a summary, one line per part;
# exits 1 if any part failed.
set -uo pipefail
bin=$1
tests=$2
w=$3
shift 3
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(tests bench numerics attention)
here=$(dirname "$0")
mkdir -p "$w"
start=$SECONDS
summary=()
status=0
note() { summary+=("$1"); }
fail() { summary+=("$1 (FAILED)"); status=1; }

run_tests() {
    echo "[$((SECONDS - start)) s] GPU tests" >&2
    "$tests" --test-threads=1 > "$w/gpu_tests.log" 2>&1
    local rc=$?
    local line
    line=$(grep -E '^test result:' "$w/gpu_tests.log" | tail -1)
    local skipped
    skipped=$(grep -c '^skipped:' "$w/gpu_tests.log")
    if [ $rc -eq 0 ] && [ "$skipped" -eq 0 ]; then
        note "tests: ${line:-no result line}"
    else
        fail "tests: ${line:-no result line}, $skipped skipped; see $w/gpu_tests.log"
    fi
}

run_bench() {
    for shape in 8192:4 16384:1; do
        IFS=: read -r ctx batch <<< "$shape"
        local name="bench_2.7B_ctx${ctx}_batch${batch}_flash"
        echo "[$((SECONDS - start)) s] $name" >&2
        local args=(--size 2.7B --ctx "$ctx" --batch "$batch" --mode train --precision bf16
            --attention flash)
        "$bin" plan "${args[@]}" --format json > "$w/$name.plan.json" 2>> "$w/$name.log"
        if ! "$bin" bench "${args[@]}" --warmup 2 --steps 5 --out "$w/$name.json" \
            --format markdown > "$w/$name.md" 2>> "$w/$name.log"; then
            fail "bench ctx $ctx batch $batch: collect failed; see $w/$name.log"
            continue
        fi
        local line
        line=$(python3 - "$w/$name.json" "$w/$name.plan.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
planned = json.load(open(sys.argv[2]))["memory"]["peak"]
gib = 1024.0 ** 3
if r.get("status") != "ok":
    print(f"{r.get('status')}: {r.get('oom', '')}; planned peak {planned / gib:.1f} GiB")
else:
    peak = r["memory"]["peak_bytes"]
    print(f"median {r['host']['median_ms']:.0f} ms/step, {r['tokens_per_s']:.0f} tokens/s, "
          f"peak {peak / gib:.2f} GiB, planned {planned / gib:.2f} GiB "
          f"({'equal' if peak == planned else 'DIFFERENT'})")
EOF
)
        note "bench 2.7B train bf16 flash ctx $ctx x batch $batch: $line"
    done
}

run_numerics() {
    echo "[$((SECONDS - start)) s] numerics" >&2
    if "$here/numerics_acceptance.sh" "$bin" "$w/numerics" small,2.7B fp32,bf16 256 flash \
        > "$w/numerics.md" 2> "$w/numerics.log"; then
        note "numerics (flash, small and 2.7B, fp32 and bf16): all within tolerance; $w/numerics.md"
    else
        fail "numerics: see $w/numerics.md and $w/numerics.log"
    fi
}

run_attention() {
    echo "[$((SECONDS - start)) s] attention benchmark beside PyTorch" >&2
    "$here/attention_acceptance.sh" "$bin" "$w/attention" > "$w/attention.md" 2> "$w/attention.log"
    case $? in
        0) note "attention: every check met; $w/attention.md, rows in $w/attention/attention_h200.json" ;;
        2) fail "attention: rows missing; see $w/attention.md and $w/attention.log" ;;
        *) fail "attention: a check missed; see $w/attention.md and $w/attention.log" ;;
    esac
}

for part in "${parts[@]}"; do
    case $part in
        tests) run_tests ;;
        bench) run_bench ;;
        numerics) run_numerics ;;
        attention) run_attention ;;
        *) echo "unknown part $part (tests, bench, numerics, attention)" >&2; exit 2 ;;
    esac
done

echo
echo "FlashAttention acceptance, $((SECONDS - start)) s:"
for line in "${summary[@]}"; do
    echo "- $line"
done
[ -f "$w/numerics.md" ] && { echo; cat "$w/numerics.md"; }
[ -f "$w/attention.md" ] && { echo; cat "$w/attention.md"; }
exit "$status"
