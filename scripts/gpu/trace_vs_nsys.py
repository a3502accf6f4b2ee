#!/usr/bin/env python3
"""Compare the kernels of a `collect bench --trace` file with an Nsight Systems export of the same
command: distinct kernel names (by demangled name), instances per kernel and total kernel time.
Prints one Markdown table row, the row format of the tracing table in docs/validation.md.
scripts/gpu/tracing_acceptance.sh calls it on the GPU machine; it runs anywhere (standard library
only) on two exports, plain or gzip-compressed.

    python3 scripts/gpu/trace_vs_nsys.py TRACE.sqlite[.gz] NSYS.sqlite[.gz] [LABEL]
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import nsys_export  # noqa: E402

QUERY = """
SELECT s.value, COUNT(*), SUM(k.end - k.start)
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s ON s.id = k.demangledName
GROUP BY s.value
"""


def kernels(path, tmp):
    """Per demangled name: (instances, total ns). A .gz export is unpacked into tmp first."""
    return {name: (n, ns) for name, n, ns in nsys_export.query(path, QUERY, tmp)}


def main(trace_path, nsys_path, label):
    with tempfile.TemporaryDirectory() as tmp:
        a = kernels(trace_path, tmp)
        b = kernels(nsys_path, tmp)
    if a.keys() == b.keys():
        names = f"{len(a)}, identical"
    else:
        names = f"{len(a)} / {len(b)}, {len(a.keys() ^ b.keys())} in one only"
    count_a = sum(n for n, _ in a.values())
    count_b = sum(n for n, _ in b.values())
    differ = sum(1 for k in a.keys() & b.keys() if a[k][0] != b[k][0])
    each = "each kernel equal" if differ == 0 and a.keys() == b.keys() else f"{differ} kernels differ"
    ns_a = sum(ns for _, ns in a.values())
    ns_b = sum(ns for _, ns in b.values())
    delta = (ns_a - ns_b) / ns_b * 100 if ns_b else float("nan")
    print(f"| {label} | {names} | {count_a:,} / {count_b:,}, {each} | "
          f"{ns_a / 1e6:.2f} / {ns_b / 1e6:.2f} ms ({delta:+.2f}%) |")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else os.path.basename(sys.argv[1]))
