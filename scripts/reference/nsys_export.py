"""Rows of an SQL query over an Nsight Systems SQLite export, plain or gzip-compressed (standard
library only); shared by kernel_names.py and scripts/gpu/trace_vs_nsys.py."""
import gzip
import os
import shutil
import sqlite3


def query(path, sql, tmp):
    """The rows of `sql` over the export at `path`, opened read-only; a .gz export is unpacked
    into the folder `tmp` first."""
    if path.endswith(".gz"):
        plain = os.path.join(tmp, os.path.basename(path)[:-3])
        with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        path = plain
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(con.execute(sql))
    finally:
        con.close()
