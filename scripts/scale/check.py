"""Check the answers of the docs/sql/ queries over an `analyze export` dataset against
`analyze profile --format json` of the same files, to the nanosecond: every phase's (and the
measured steps' and the whole trace's) kernels, kernel time, GEMM time and fraction, memcpy and
memset time; each phase's top non-GEMM kernels (name, time, launches, share); the rank table
(steps, kernel time, per-step means, waiting done and caused); the straggler. With
--rank-profile, each rank's figures per phase against the profile of that rank's file alone.

    python3 scripts/scale/check.py OUT PROFILE.json [--answers ANSWERS.json] [--rank-profile RANK=P.json ...]

Answers are DuckDB's (scripts/scale/sql_duckdb.py) unless --answers gives others (Spark's, from
scripts/scale/spark_export.py). Ranks are matched by rank where the profile has a rank table, else
by device and process. --own-ids: the dataset was exported one file at a time, so each rank keeps
its file's own device and process ids where the profile of the merged run renamed clashing ones
(device 0 on every host): they are not compared. Prints what was compared; exits 1, naming each
difference, when any figure differs."""
import argparse
import json
import sys

PHASE_FIELDS = ["kernels", "kernel_ns", "gemm_ns", "gemm_fraction", "memcpy_ns", "memset_ns"]
RANK_FIELDS = ["steps", "kernel_ns", "step_ns", "compute_ns", "communication_ns",
               "exposed_communication_ns", "memcpy_ns", "idle_ns", "waited_ns", "wait_caused_ns"]


class Checker:
    def __init__(self):
        self.compared = 0
        self.differences = []

    def same(self, what, sql, json_value):
        self.compared += 1
        if sql != json_value:
            self.differences.append(f"{what}: SQL {sql!r}, profile {json_value!r}")


def parts(profile):
    """The profile's rows by name: each phase, the measured steps, the whole trace."""
    rows = list(profile["phases"])
    if profile.get("step"):
        rows.append(profile["step"])
    rows.append(profile["whole_trace"])
    return {p["name"]: p for p in rows}


def check_phases(c, answers, profile, rank=None):
    sql = {(r["phase"], r["rank"]): r for r in answers["phases"]}
    for name, p in parts(profile).items():
        row = sql.get((name, rank))
        if row is None:
            if p["kernels"] or p["memcpy_ns"] or p["memset_ns"]:
                c.differences.append(f"phase {name!r} rank {rank}: no SQL row")
            continue
        for f in PHASE_FIELDS:
            c.same(f"phase {name!r} rank {rank} {f}", row[f], p[f])


def check_top(c, answers, profile):
    sql = {}
    for r in answers["top_non_gemm"]:
        sql.setdefault(r["phase"], []).append(r)
    for name, p in parts(profile).items():
        got = [(r["name"], r["total_ns"], r["launches"], r["share"]) for r in sql.get(name, [])]
        want = [(k["name"], k["total_ns"], k["instances"], k["share"]) for k in p["top_non_gemm"]]
        c.same(f"top non-GEMM kernels of {name!r}", got[: len(want)], want)


def check_ranks(c, answers, profile, own_ids=False):
    # A run of several ranks has a rank table; one process on one device, its device row.
    want = profile.get("ranks") or [
        dict(d, rank=None, step_ns=(d["per_step"] or {}).get("span_ns"),
             **{f: (d["per_step"] or {}).get(f) for f in
                ["compute_ns", "communication_ns", "exposed_communication_ns", "memcpy_ns",
                 "idle_ns"]})
        for d in profile["devices"]
    ]
    by_rank = bool(profile.get("ranks"))
    key = (lambda r: r["rank"]) if by_rank else (lambda r: (r["device"], r["process"]))
    got = {key(r): r for r in answers["ranks"]}
    c.same("ranks", sorted(got), sorted(key(w) for w in want))
    ids = [] if own_ids else ["device", "process"]
    for w in want:
        row = got.get(key(w))
        if row is None:
            continue
        for f in ids + RANK_FIELDS:
            c.same(f"rank {row['rank']} {f}", row[f], w[f])
    s = profile.get("straggler")
    got = answers["straggler"]
    if s is None:
        c.same("straggler", got, [])
    else:
        c.same("straggler rows", len(got), 1)
        fields = ids + ["wait_caused_ns", "wait_caused_ns_per_step"]
        fields += ["rank"] if "rank" in s else []
        for f in fields:
            c.same(f"straggler {f}", got[0][f] if got else None, s[f])


def check(answers, profile, rank_profiles=(), own_ids=False):
    c = Checker()
    check_phases(c, answers, profile)
    for rank, p in rank_profiles:
        check_phases(c, answers, p, rank)
    check_top(c, answers, profile)
    check_ranks(c, answers, profile, own_ids)
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("profile")
    ap.add_argument("--answers")
    ap.add_argument("--rank-profile", action="append", default=[], metavar="RANK=JSON")
    ap.add_argument("--own-ids", action="store_true", help="ranks keep their files' own device and process ids")
    a = ap.parse_args()
    if a.answers:
        with open(a.answers) as f:
            answers = json.load(f)
    else:
        sys.path.insert(0, __import__("os").path.dirname(__file__))
        from sql_duckdb import answers as duckdb_answers
        answers = duckdb_answers(a.dataset)
    with open(a.profile) as f:
        profile = json.load(f)
    ranks = []
    for spec in a.rank_profile:
        rank, path = spec.split("=", 1)
        with open(path) as f:
            ranks.append((int(rank), json.load(f)))
    c = check(answers, profile, ranks, a.own_ids)
    print(f"{c.compared} figures compared, {len(c.differences)} differ"
          f" ({len(answers['ranks'])} ranks, {len(answers['phases'])} phase rows)")
    for d in c.differences:
        print("  " + d)
    sys.exit(1 if c.differences else 0)


if __name__ == "__main__":
    main()
