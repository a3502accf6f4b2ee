#!/usr/bin/env python3
"""Write fixtures/collect/kernel_names_nsys.tsv: every distinct kernel of the given Nsight Systems
exports as `mangledName`, `demangledName`, `shortName` (tab-separated, no header, sorted by mangled
name, one line per mangled name), read from the exports with SQL. Runs anywhere (standard library
only); make_fixtures.sh calls it with the PyTorch captures of fixtures/nsys and collect's nsys
captures (small fp32 and bf16 at ctx 128, large fp32 at ctx 256).

    python3 scripts/reference/kernel_names.py OUT.tsv EXPORT.sqlite[.gz]...
"""
import os
import sys
import tempfile

import nsys_export

QUERY = """
SELECT DISTINCT m.value, d.value, s.value
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
JOIN StringIds AS m ON m.id = k.mangledName
JOIN StringIds AS d ON d.id = k.demangledName
JOIN StringIds AS s ON s.id = k.shortName
"""


def names(path, tmp):
    return nsys_export.query(path, QUERY, tmp)


def main(out, exports):
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in exports:
            for mangled, demangled, short in names(path, tmp):
                seen = rows.setdefault(mangled, (demangled, short))
                if seen != (demangled, short):
                    sys.exit(f"kernel_names: {mangled} has two spellings: {seen} and "
                             f"{(demangled, short)} ({path})")
    # Byte order of the UTF-8 text, as `LC_ALL=C sort` orders lines.
    ordered = sorted(rows.items(), key=lambda kv: kv[0].encode())
    tmp_out = out + ".tmp"
    with open(tmp_out, "w", encoding="utf-8", newline="\n") as f:
        for mangled, (demangled, short) in ordered:
            f.write(f"{mangled}\t{demangled}\t{short}\n")
    os.replace(tmp_out, out)
    print(f"{out}: {len(ordered)} kernels from {len(exports)} exports")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
