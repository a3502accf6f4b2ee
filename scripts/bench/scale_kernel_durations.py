#!/usr/bin/env python3
"""Copy an Nsight Systems SQLite export with every GPU kernel's duration scaled by a factor.

Each kernel keeps its start; its end becomes start + round((end - start) * factor). Nothing else
changes (API calls, NVTX ranges, memory operations), so the copy is the same run with slower (or
faster) kernels: a fixture for regression gates such as `analyze compare --fail-if-slower`.

The input is only read, never written: it is copied first (unpacked if it is gzip-compressed) and
the copy is changed. The output is written under a temporary name in its folder and renamed into
place when complete; a name ending in `.gz` is written gzip-compressed.

    scripts/bench/scale_kernel_durations.py IN.sqlite[.gz] OUT.sqlite[.gz] [--factor 1.1]

Standard library only (sqlite3, gzip); runs on any machine. The `analyze compare` tests call it
at this path, which is why it sits at the top of scripts/.
"""

import argparse
import gzip
import os
import shutil
import sqlite3
import sys
import tempfile

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
SQLITE_MAGIC = b"SQLite format 3\0"
GZIP_MAGIC = b"\x1f\x8b"


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def copy_unpacked(src, dst):
    """Copy `src` to `dst`, unpacking gzip; return False when it is not an SQLite file."""
    with open(src, "rb") as f:
        head = f.read(2)
    opener = gzip.open if head == GZIP_MAGIC else open
    with opener(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    with open(dst, "rb") as f:
        return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


def scale(db_path, factor):
    """Scale every kernel's duration in the export at `db_path`; return the number of kernels."""
    conn = sqlite3.connect(db_path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if KERNEL_TABLE not in tables:
            return None
        rows = conn.execute(f"SELECT rowid, start, end FROM {KERNEL_TABLE}").fetchall()
        conn.executemany(
            f"UPDATE {KERNEL_TABLE} SET end = ? WHERE rowid = ?",
            [(start + round((end - start) * factor), rowid) for rowid, start, end in rows],
        )
        conn.commit()
        return len(rows)
    finally:
        conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", help="Nsight Systems SQLite export (.sqlite or .sqlite.gz)")
    parser.add_argument("output", help="where to write the scaled copy (.gz: compressed)")
    parser.add_argument("--factor", type=float, default=1.1, help="duration factor (default 1.1)")
    parser.add_argument("--force", action="store_true", help="replace OUTPUT if it exists")
    args = parser.parse_args()

    if not args.factor > 0:
        fail(f"--factor must be a positive number, not {args.factor}")
    if not os.path.isfile(args.input):
        fail(f"{args.input}: no such file")
    if os.path.exists(args.output):
        if os.path.samefile(args.input, args.output):
            fail(f"{args.output}: is the input; the input is never modified")
        if not args.force:
            fail(f"{args.output}: already exists (use --force to replace it)")

    out_dir = os.path.dirname(os.path.abspath(args.output))
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".scale-") as work:
        db = os.path.join(work, "export.sqlite")
        if not copy_unpacked(args.input, db):
            fail(f"{args.input}: not an SQLite file")
        count = scale(db, args.factor)
        if count is None:
            fail(f"{args.input}: no {KERNEL_TABLE} table (not an nsys export with CUDA kernels)")
        staged = os.path.join(work, "out")
        if args.output.endswith(".gz"):
            with open(db, "rb") as fin, gzip.open(staged, "wb") as fout:
                shutil.copyfileobj(fin, fout)
        else:
            os.replace(db, staged)
        os.replace(staged, args.output)
    print(f"{args.output}: {count} kernel durations scaled by {args.factor}", file=sys.stderr)


if __name__ == "__main__":
    main()
