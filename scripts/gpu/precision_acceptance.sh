#!/usr/bin/env bash
# The mixed-precision experiments on the GPU and their acceptance points: `collect precision all`
# (the accumulation, the ToyModel under autocast, LayerNorm in fp16 and bf16) computed by the
# kernels of kernels/precision.cu, checked against PyTorch's answers
# (fixtures/collect/torch_precision_h200.json) and against the CPU emulation of the same kernels.
# Runs on the GPU machine, from the project root, with a release collect binary built elsewhere;
# needs python3 (not PyTorch).
#   scripts/gpu/precision_acceptance.sh COLLECT_BINARY OUT_DIR
# Writes OUT_DIR/precision_h200.json (what fixtures/collect/precision_h200.json is a copy of),
# OUT_DIR/precision.md (the tables of docs/precision.md) and OUT_DIR/precision_cpu.json (the
# emulation); prints one PASS or FAIL line per point and exits 1 if any failed.
set -euo pipefail
bin=$1
out=$2
torch=$(dirname "$0")/../../fixtures/collect/torch_precision_h200.json
mkdir -p "$out"
"$bin" precision all --format json > "$out/precision_h200.json"
"$bin" precision all --format markdown > "$out/precision.md"
"$bin" precision all --cpu --format json > "$out/precision_cpu.json"
python3 - "$out/precision_h200.json" "$out/precision_cpu.json" "$torch" <<'EOF'
import json, math, sys

gpu, cpu, torch = (json.load(open(p)) for p in sys.argv[1:4])
rows = gpu["rows"]
failed = False


def report(ok, what):
    global failed
    failed |= not ok
    print(("PASS " if ok else "FAIL ") + what)


def find(rows, **keys):
    return [r for r in rows if all(r.get(k) == v for k, v in keys.items())]


# 1. The accumulated sums equal PyTorch's to every printed digit.
bad = []
for t in find(torch["rows"], experiment="accumulate"):
    ours = find(rows, experiment="accumulate", case=t["case"])
    want = f"{t['value']:.8f}"
    got = ours[0]["printed"] if ours else "missing"
    if got != want or not ours or ours[0]["value"] != t["value"]:
        bad.append(f"{t['case']}: {got}, PyTorch {want}")
sums = ", ".join(f"{r['case']} {r['printed']}" for r in find(rows, experiment="accumulate"))
report(not bad and len(find(rows, experiment="accumulate")) == 7,
       f"accumulate equals PyTorch to 8 decimals ({sums})" + (f": {bad}" if bad else ""))

# 2. The ToyModel's dtypes equal PyTorch's, row for row.
bad = []
toy = find(torch["rows"], experiment="toy")
for t in toy:
    ours = find(rows, experiment="toy", autocast=t["autocast"], case=t["case"])
    got = ours[0]["value"] if ours else "missing"
    if got != t["value"]:
        bad.append(f"{t['autocast']} {t['case']}: {got}, PyTorch {t['value']}")
report(not bad and len(toy) == 12, f"toy dtypes equal PyTorch's ({len(toy)} rows)"
       + (f": {bad}" if bad else ""))


# 3. An input where LayerNorm in fp16 fails (not finite, or an output error over 10%) and in bf16
#    does not (under 5%).
def output_error(case, fmt):
    r = find(rows, experiment="layernorm", case=case, format=fmt,
             statistic="output max relative error (two-pass)")
    v = r[0]["value"] if r else "NaN"
    return float(v) if not isinstance(v, str) else {"inf": math.inf, "-inf": -math.inf}.get(v, math.nan)


found = []
for case in dict.fromkeys(r["case"] for r in find(rows, experiment="layernorm")):
    h, b = output_error(case, "fp16"), output_error(case, "bf16")
    fp16_fails = not math.isfinite(h) or h > 0.1
    bf16_holds = math.isfinite(b) and b < 0.05
    if fp16_fails and bf16_holds:
        found.append(f"{case}: fp16 {h:.2g}, bf16 {b:.2g}")
report(bool(found), "layernorm: fp16 fails where bf16 does not ("
       + ("; ".join(found) if found else "no such input") + ")")

# 4. The kernels equal their CPU emulation, row for row (the emulation is what the unit tests
#    check against PyTorch).
strip = lambda rs: [{k: v for k, v in r.items() if k != "torch"} for r in rs]
same = strip(rows) == strip(cpu["rows"])
report(same, f"the GPU's {len(rows)} rows equal the CPU emulation's")
print(f"device: {gpu['device']}")
sys.exit(1 if failed else 0)
EOF
