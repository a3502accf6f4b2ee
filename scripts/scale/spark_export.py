"""Many ranks on a cluster: `analyze export` mapped over a list of input files on Spark's
executors, the per-file datasets gathered into one, and the queries of docs/sql/ run over it with
Spark SQL. This is how a 1,000-rank job is analysed: each executor reads its own files (a
gigabyte each) with `analyze`, and only the attributed Parquet rows meet in Spark.

    spark-submit scripts/scale/spark_export.py --analyze /opt/bin/analyze --ship --out OUT files.txt
    python3 scripts/scale/spark_export.py --master 'local[2]' --analyze target/release/analyze --out /tmp/ds files.txt

FILES: text files listing one input per line (nsys exports, .nsys-rep, Kineto traces), or the
inputs themselves. Each task exports one file with `--clock unix` (times as Unix nanoseconds from
the clock origin the file records, so that files exported apart line up as far as their hosts'
clocks agree) into OUT/parts/I, then moves each table's file into
OUT/TABLE/rank=N/part-I.parquet: OUT is one dataset, partitioned by rank. Each file must say its
own rank (the RANK nsys recorded, Kineto's distributedInfo, or `rank3`/`_3.` in its name), as
`analyze profile` reads one file per rank. The answers go to OUT/answers.spark.json in the form
scripts/scale/check.py compares with `analyze profile --format json` of the same files:

    python3 scripts/scale/check.py OUT profile.json --answers OUT/answers.spark.json

OUT must be a folder on storage every executor and the driver see (local disk in local mode, a
shared file system on a cluster). --ship sends the analyze binary to the executors with the job."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SQL = os.path.join(HERE, "..", "..", "docs", "sql")
TABLES = ["ops", "ranges", "rank_steps"]
QUERIES = ["phases", "top_non_gemm", "ranks", "straggler"]
sys.path.insert(0, HERE)
from sql_duckdb import statements  # noqa: E402  (one reader of .sql files)


def export_one(task, analyze, ship, out, extra):
    """Export input `task` = (index, path) into OUT/parts/index, move its tables into place;
    what it wrote and how long it took."""
    i, path = task
    if ship:
        from pyspark import SparkFiles

        analyze = SparkFiles.get(os.path.basename(analyze))
        os.chmod(analyze, 0o755)
    part = os.path.join(out, "parts", str(i))
    started = time.time()
    run = subprocess.run(
        [analyze, "export", "-q", "--clock", "unix", part, path] + extra,
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        return {"input": path, "error": run.stderr.strip()}
    seconds = time.time() - started
    with open(os.path.join(part, "export.json")) as f:
        manifest = json.load(f)
    for table in TABLES:
        for rank_dir in os.listdir(os.path.join(part, table)):
            to = os.path.join(out, table, rank_dir)
            os.makedirs(to, exist_ok=True)
            os.replace(os.path.join(part, table, rank_dir, "part-0.parquet"), os.path.join(to, f"part-{i}.parquet"))
    os.makedirs(os.path.join(out, "exports"), exist_ok=True)
    os.replace(os.path.join(part, "export.json"), os.path.join(out, "exports", f"{i}.json"))
    shutil.rmtree(part)
    return {"input": path, "seconds": seconds, "rows": manifest["rows"]}


def inputs(args):
    files = []
    for a in args:
        if a.endswith(".txt"):
            with open(a) as f:
                files += [l.strip() for l in f if l.strip() and not l.startswith("#")]
        else:
            files.append(a)
    return [os.path.abspath(f) for f in files]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True, help="the dataset folder (replaced)")
    ap.add_argument("--analyze", default="analyze", help="the analyze binary (default: on PATH)")
    ap.add_argument("--ship", action="store_true", help="send the binary to the executors")
    ap.add_argument("--master", help="Spark master, e.g. local[2] (default: spark-submit's)")
    ap.add_argument("--tasks", type=int, help="export tasks (default: one per file)")
    ap.add_argument("--export-arg", action="append", default=[], help="passed to analyze export (--steps ..., --phases ...)")
    a = ap.parse_args()
    files = inputs(a.files)
    out = os.path.abspath(a.out)
    analyze = a.analyze if a.ship else shutil.which(a.analyze) or os.path.abspath(a.analyze)

    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("analyze export")
    if a.master:
        builder = builder.master(a.master)
    spark = (builder.config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", str(max(4, min(200, len(files)))))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    if a.ship:
        spark.sparkContext.addFile(a.analyze)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)

    timings = {}
    t = time.time()
    tasks = spark.sparkContext.parallelize(list(enumerate(files)), a.tasks or len(files))
    extra = a.export_arg
    done = tasks.map(lambda task: export_one(task, analyze, a.ship, out, extra)).collect()
    timings["export_s"] = time.time() - t
    failed = [d for d in done if "error" in d]
    for d in failed:
        print(f"error: {d['input']}: {d['error']}", file=sys.stderr)
    if failed:
        sys.exit(2)
    shutil.rmtree(os.path.join(out, "parts"), ignore_errors=True)

    t = time.time()
    # The Spark preamble of docs/sql/, its relative paths made the dataset's.
    for s in statements(os.path.join(SQL, "preamble.spark.sql")):
        for table in TABLES:
            s = s.replace(f"(path '{table}')", f"(path '{os.path.join(out, table)}')")
        spark.sql(s)
    for s in statements(os.path.join(SQL, "views.sql")):
        spark.sql(s)
    answers = {}
    for q in QUERIES:
        (s,) = statements(os.path.join(SQL, q + ".sql"))
        answers[q] = [r.asDict() for r in spark.sql(s).collect()]
    timings["queries_s"] = time.time() - t

    ops = sum(sum(d["rows"]["ops"].values()) for d in done)
    summary = {
        "inputs": len(files),
        "ops_rows": ops,
        "export_task_s": sorted(round(d["seconds"], 3) for d in done),
        **{k: round(v, 3) for k, v in timings.items()},
    }
    with open(os.path.join(out, "answers.spark.json"), "w") as f:
        json.dump(answers, f, indent=1)
    with open(os.path.join(out, "spark_run.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "export_task_s"}))
    for r in answers["ranks"][:8]:
        print(r)
    print("straggler:", answers["straggler"] or "none")
    spark.stop()


if __name__ == "__main__":
    main()
