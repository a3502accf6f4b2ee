#!/usr/bin/env python3
"""Summarise scripts/gpu/trace_overhead.sh: per size and variant, the median host-clock step time
(the median over the repeats of each run's median) and its overhead against the plain run.
trace_overhead.sh calls it on the GPU machine; it runs anywhere on that script's OUT_DIR.

    python3 scripts/gpu/trace_overhead.py OUT_DIR

Also prints, for the recorded variants, the time of the last timed step on its own (the one the
memory history covers) against the plain run's median. Standard library only.
"""
import glob
import json
import os
import re
import statistics
import sys

VARIANTS = ["plain", "caching", "trace", "snapshot", "both"]
WHAT = {
    "plain": "nothing recorded (stream-ordered pool)",
    "caching": "caching allocator, nothing recorded",
    "trace": "--trace (CUPTI + NVTX, pool)",
    "snapshot": "--memory-snapshot (caching allocator + history)",
    "both": "--trace --memory-snapshot",
}


def main(out):
    runs = {}
    for path in glob.glob(os.path.join(out, "*.json")):
        m = re.match(r"(.+)-(plain|caching|trace|snapshot|both)-(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        size, variant, _ = m.groups()
        with open(path) as f:
            r = json.load(f)["results"][0]
        runs.setdefault((size, variant), []).append(r)
    sizes = sorted({s for s, _ in runs}, key=lambda s: ["small", "medium", "large", "xl", "2.7B"].index(s)
                   if s in ["small", "medium", "large", "xl", "2.7B"] else 9)
    print("| size | variant | runs | median step (ms) | overhead | last step (ms) | last step vs plain |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for size in sizes:
        base = statistics.median(r["host"]["median_ms"] for r in runs.get((size, "plain"), []))
        for v in VARIANTS:
            rs = runs.get((size, v))
            if not rs:
                continue
            med = statistics.median(r["host"]["median_ms"] for r in rs)
            last = statistics.median(r["host_step_ms"][-1] for r in rs)
            print(f"| {size} | {WHAT[v]} | {len(rs)} | {med:.2f} | {100 * (med / base - 1):+.1f}% "
                  f"| {last:.2f} | {100 * (last / base - 1):+.1f}% |")


if __name__ == "__main__":
    main(sys.argv[1])
