"""Large inputs made from real ones, for benchmarks of `analyze` at scale (not for tests).

    python3 scripts/bench/make_large.py nsys  IN.sqlite[.gz] OUT.sqlite  --copies 50
    python3 scripts/bench/make_large.py kineto IN.json[.gz] OUT.json     --copies 150
    python3 scripts/bench/make_large.py memsnap IN.pickle[.gz] OUT.pickle --copies 400
    python3 scripts/bench/make_large.py nsys  IN.sqlite[.gz] run_rank3.sqlite --copies 1 --rank 3

nsys: every event table (a table with `start` and `end`: kernels, API calls, NVTX, memcpy,
memset, synchronisation, ...) is replicated COPIES times in a row, each copy's times shifted past
the end of the previous one, its correlation ids (and NVTX range ids) offset past the largest, so
that launches still pair with their kernels and every step of the original appears once per copy.
Tables without times (strings, GPU info, metadata) are kept once. With --rank N the copy stands
for rank N of a run of one process per rank: every process id is moved up by N (in the
globalPid/globalTid columns of every table and the process tables), and `RANK=N` is recorded in
the environment nsys keeps (TARGET_INFO_SYSTEM_ENV's DeviceEnvironment), where `analyze` reads a
file's rank; times, devices and the session start stay, so the ranks' clocks agree.
kineto: the `traceEvents` replicated the same way (`ts` shifted, correlation / External id args
offset). memsnap: each device trace's entries replicated with times shifted; the segments (the
state at the dump) kept as they are. Runs on any machine with Python 3; runs for minutes at
gigabyte sizes."""
import argparse
import gzip
import json
import os
import pickle
import shutil
import sqlite3
import sys


def open_maybe_gzip(path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def nsys(a):
    tmp = a.output + ".part"
    with open_maybe_gzip(a.input) as f, open(tmp, "wb") as g:
        shutil.copyfileobj(f, g, 1 << 20)
    db = sqlite3.connect(tmp)
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    events = {}
    for t in tables:
        cols = [r[1] for r in db.execute(f"PRAGMA table_info([{t}])")]
        if "start" in cols and "end" in cols and db.execute(f"SELECT count(*) FROM [{t}]").fetchone()[0]:
            events[t] = cols
    lo = min(db.execute(f"SELECT min(start) FROM [{t}]").fetchone()[0] for t in events)
    hi = max(db.execute(f"SELECT max(coalesce(end, start)) FROM [{t}]").fetchone()[0] for t in events)
    span = hi - lo + 1_000_000  # copies 1 ms apart
    corr = 1 + max((db.execute(f"SELECT max(correlationId) FROM [{t}]").fetchone()[0] or 0)
                   for t, cols in events.items() if "correlationId" in cols)
    rid = 1 + max((db.execute(f"SELECT max(rangeId) FROM [{t}]").fetchone()[0] or 0)
                  for t, cols in events.items() if "rangeId" in cols)
    for t, cols in events.items():
        n = db.execute(f"SELECT max(rowid) FROM [{t}]").fetchone()[0]
        for c in range(1, a.copies):
            exprs = []
            for col in cols:
                if col in ("start", "end"):
                    exprs.append(f"[{col}] + {c * span}")
                elif col == "correlationId":
                    exprs.append(f"CASE WHEN correlationId > 0 THEN correlationId + {c * corr} ELSE correlationId END")
                elif col == "rangeId":
                    exprs.append(f"CASE WHEN rangeId IS NULL THEN NULL ELSE rangeId + {c * rid} END")
                else:
                    exprs.append(f"[{col}]")
            names = ", ".join(f"[{col}]" for col in cols)
            db.execute(f"INSERT INTO [{t}] ({names}) SELECT {', '.join(exprs)} FROM [{t}] WHERE rowid <= {n}")
        db.commit()
        print(f"{t}: {n} rows -> {n * a.copies}", file=sys.stderr)
    if a.rank is not None:
        per_rank_ids(db, tables, a.rank)
    db.close()
    os.replace(tmp, a.output)


def per_rank_ids(db, tables, rank):
    """Process ids moved up by `rank`, and RANK=`rank` in the recorded environment."""
    pid = rank << 24  # globalPid and globalTid hold the pid in bits 24..47
    for t in tables:
        cols = [r[1] for r in db.execute(f"PRAGMA table_info([{t}])")]
        for col in cols:
            if col in ("globalPid", "globalTid", "endGlobalTid"):
                db.execute(f"UPDATE [{t}] SET [{col}] = [{col}] + {pid} WHERE [{col}] IS NOT NULL")
            elif (t, col) in (("PROCESSES", "pid"), ("TARGET_INFO_CUDA_DEVICE", "pid"),
                              ("TARGET_INFO_CUDA_CONTEXT_INFO", "processId")):
                db.execute(f"UPDATE [{t}] SET [{col}] = [{col}] + {rank}")
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        db.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'")
        db.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV (globalVid, devStateName, name, nameEnum, value) "
                   "SELECT globalVid, devStateName, 'DeviceEnvironment', 0, ? FROM TARGET_INFO_SYSTEM_ENV LIMIT 1",
                   (f"RANK={rank};LOCAL_RANK=0",))
    db.commit()


def kineto(a):
    with open_maybe_gzip(a.input) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    timed = [e for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    lo = min(e["ts"] for e in timed)
    hi = max(e["ts"] + e.get("dur", 0) for e in timed)
    span = hi - lo + 1000.0  # microseconds
    ids = [e.get("args", {}).get(k) for e in timed for k in ("correlation", "External id")]
    off = 1 + max(i for i in ids if isinstance(i, int))
    out = list(events)
    for c in range(1, a.copies):
        for e in timed:
            e2 = dict(e)
            e2["ts"] = e["ts"] + c * span
            if isinstance(e.get("args"), dict):
                args = dict(e["args"])
                for k in ("correlation", "External id"):
                    if isinstance(args.get(k), int):
                        args[k] += c * off
                e2["args"] = args
            if isinstance(e.get("id"), int):
                e2["id"] = e["id"] + c * off
            out.append(e2)
    if isinstance(doc, dict):
        doc["traceEvents"] = out
    else:
        doc = out
    tmp = a.output + ".part"
    with open(tmp, "w") as g:
        json.dump(doc, g)
    os.replace(tmp, a.output)


def memsnap(a):
    with open_maybe_gzip(a.input) as f:
        snap = pickle.load(f)
    traces = snap["device_traces"] if isinstance(snap, dict) else []
    for d, entries in enumerate(traces):
        if not entries:
            continue
        times = [e.get("time_us", 0) for e in entries]
        span = max(times) - min(times) + 1000
        base = list(entries)
        for c in range(1, a.copies):
            for e in base:
                e2 = dict(e)
                if "time_us" in e2:
                    e2["time_us"] = e["time_us"] + c * span
                entries.append(e2)
        print(f"device {d}: {len(base)} entries -> {len(entries)}", file=sys.stderr)
    tmp = a.output + ".part"
    with open(tmp, "wb") as g:
        pickle.dump(snap, g, protocol=4)
    os.replace(tmp, a.output)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["nsys", "kineto", "memsnap"])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--copies", type=int, default=50)
    ap.add_argument("--rank", type=int, help="nsys: make the copy rank N's (its process ids, RANK=N)")
    a = ap.parse_args()
    if a.rank is not None and a.kind != "nsys":
        ap.error("--rank is for nsys exports")
    {"nsys": nsys, "kineto": kineto, "memsnap": memsnap}[a.kind](a)


if __name__ == "__main__":
    main()
