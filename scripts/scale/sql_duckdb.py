"""Run the queries of docs/sql/ on DuckDB over an `analyze export` dataset; print the answers as
JSON ({"phases": [{column: value, ...}, ...], "top_non_gemm": [...], "ranks": [...],
"straggler": [...]}), the form scripts/scale/check.py compares with `analyze profile`.

    python3 scripts/scale/sql_duckdb.py OUT [QUERY ...]

Needs Python 3 with DuckDB (`pip install duckdb`). The preamble (docs/sql/preamble.duckdb.sql)
reads the dataset's folders by relative paths, so it runs from inside OUT."""
import argparse
import json
import os
import sys

SQL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "sql")
QUERIES = ["phases", "top_non_gemm", "ranks", "straggler"]


def statements(path):
    """The statements of a .sql file, comments dropped."""
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if not l.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def answers(dataset, queries=QUERIES, sql=SQL):
    import duckdb

    con = duckdb.connect()
    here = os.getcwd()
    os.chdir(dataset)
    try:
        for name in ["preamble.duckdb", "views"]:
            for s in statements(os.path.join(sql, name + ".sql")):
                con.execute(s)
        out = {}
        for q in queries:
            (s,) = statements(os.path.join(sql, q + ".sql"))
            r = con.execute(s)
            cols = [d[0] for d in r.description]
            out[q] = [dict(zip(cols, row)) for row in r.fetchall()]
        return out
    finally:
        os.chdir(here)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("queries", nargs="*", default=QUERIES)
    a = ap.parse_args()
    json.dump(answers(a.dataset, a.queries), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
