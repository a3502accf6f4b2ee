#!/usr/bin/env python3
"""Load a collect memory snapshot with PyTorch and check it against the results JSON. Runs where
PyTorch is installed (the GPU machine; no GPU is used); scripts/gpu/tracing_acceptance.sh calls it.

    python3 scripts/reference/snapshot_check.py SNAPSHOT.pickle RESULTS.json

pickle.load must accept it; torch.cuda._memory_viz's segment summary and trace formatter must
run on it; and the peak replayed from its trace (allocations live when recording began, from the
end-state segments minus what the trace did, then the running sum of alloc minus free_completed)
must equal the allocator's peak in the results file. Exits 1 when they differ.
"""
import json
import pickle
import sys

import torch
from torch.cuda import _memory_viz as mv


def main(snap_path, results_path):
    with open(snap_path, "rb") as f:
        snap = pickle.load(f)
    print("torch", torch.__version__)
    print("keys", sorted(snap.keys()))
    segs = snap["segments"]
    trace = snap["device_traces"][0]
    print(f"segments {len(segs)}, trace entries {len(trace)}")
    actions = {}
    for e in trace:
        actions[e["action"]] = actions.get(e["action"], 0) + 1
    print("actions", actions)
    frames = sorted({f["name"] for e in trace for f in e["frames"]})
    print(f"{len(frames)} distinct frames, e.g.", frames[:12])
    print(mv.segsum(snap)[:600])
    end_allocated = sum(b["size"] for s in segs for b in s["blocks"] if b["state"] == "active_allocated")
    net = 0
    peak_net = 0
    for e in trace:
        if e["action"] == "alloc":
            net += e["size"]
        elif e["action"] == "free_completed":
            net -= e["size"]
        peak_net = max(peak_net, net)
    start = end_allocated - net
    peak = start + peak_net
    with open(results_path) as f:
        res = json.load(f)["results"][0]
    want = res["memory"]["allocator"]["max_allocated_bytes"]
    print(f"allocated at start {start}, at end {end_allocated}, replayed peak {peak}, "
          f"allocator peak {want}, results peak {res['memory']['peak_bytes']}")
    if peak != want or res["memory"]["peak_bytes"] != want:
        print("MISMATCH")
        return 1
    print("peak: equal")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
