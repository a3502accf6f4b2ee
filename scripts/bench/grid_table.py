#!/usr/bin/env python3
"""Print the grid table of docs/validation.md from a `collect bench --out` results file: one row
per size and context, the median host-clock step time (ms) of forward and train steps in fp32 and
bf16, and the train step's peak memory (GiB) in fp32 and bf16; `OOM` where a configuration ran out
of memory, `-` where the file has none. Runs anywhere (standard library only).

    python3 scripts/bench/grid_table.py RESULTS.json[.gz]
    python3 scripts/bench/grid_table.py fixtures/collect/bench_grid_h200.json.gz
"""
import gzip
import json
import sys

SIZES = ["tiny", "small", "medium", "large", "xl", "2.7B"]


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["results"]


def main(path):
    rows = {}
    for r in load(path):
        rows[(r["size"], r["ctx"], r["mode"], r["precision"])] = r

    def cell(key, what):
        r = rows.get(key)
        if r is None:
            return "-"
        if r["status"] != "ok":
            return "OOM"
        if what == "ms":
            return f'{r["host"]["median_ms"]:.1f}'
        return f'{r["memory"]["peak_bytes"] / 2**30:.1f}'

    grid = sorted({(s, c) for s, c, _, _ in rows},
                  key=lambda k: (SIZES.index(k[0]) if k[0] in SIZES else len(SIZES), k[0], k[1]))
    print("| size | ctx | forward fp32 | forward bf16 | train fp32 | train bf16 "
          "| train peak fp32 / bf16 (GiB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size, ctx in grid:
        ms = [cell((size, ctx, m, p), "ms") for m in ("forward", "train") for p in ("fp32", "bf16")]
        peak = " / ".join(cell((size, ctx, "train", p), "peak") for p in ("fp32", "bf16"))
        print(f"| {size} | {ctx} | {' | '.join(ms)} | {peak} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
