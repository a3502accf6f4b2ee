"""PyTorch eager timings of the reference model, step for step as `collect bench` times its own:
the same modes (forward, forward-backward, train with AdamW lr 1e-3, betas (0.9, 0.999), eps 1e-8,
weight decay 0.01), a synchronize after each step, host clock around step + synchronize.
Runs on the GPU machine (PyTorch with CUDA), from the project root; scripts/bench/bench_vs_torch.sh
calls it beside `collect bench`.

    python3 scripts/reference/torch_bench.py --size small,large --ctx 256 --mode forward,train \\
        --precision fp32,bf16 --warmup 5 --steps 10 --out torch.json

Prints one JSON line per configuration (OOM rows included) and writes them all to --out."""
import argparse
import json
import statistics
import sys
import os
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402


def step(model, opt, ids, mode, amp):
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if amp else torch_model._Null()
    with torch_model.rng("forward", True):
        with ctx:
            out = model(ids)
    if mode == "forward":
        return
    with torch_model.rng("backward", True):
        loss = torch.nn.functional.cross_entropy(out.float().view(-1, out.shape[-1]), ids.view(-1))
        loss.backward()
    if mode == "train":
        with torch_model.rng("optimizer", True):
            opt.step()
            opt.zero_grad(set_to_none=True)


def bench(size, ctx, mode, amp, warmup, steps, batch):
    model = torch_model.build(size, ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    ids = torch.randint(0, torch_model.VOCAB, (batch, ctx), device="cuda")
    for _ in range(warmup):
        step(model, opt, ids, mode, amp)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ts = []
    for _ in range(steps):
        t = time.perf_counter()
        step(model, opt, ids, mode, amp)
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    peak = torch.cuda.max_memory_allocated()
    del model, opt
    torch.cuda.empty_cache()
    return {"size": size, "ctx": ctx, "mode": mode, "precision": "bf16" if amp else "fp32",
            "mean_ms": statistics.mean(ts), "median_ms": statistics.median(ts), "min_ms": min(ts),
            "max_ms": max(ts), "step_ms": ts, "peak_allocated": peak}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="small")
    ap.add_argument("--ctx", default="256")
    ap.add_argument("--mode", default="train")
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    rows = []
    for size in a.size.split(","):
        for ctx in (int(c) for c in a.ctx.split(",")):
            for mode in a.mode.split(","):
                for p in a.precision.split(","):
                    try:
                        r = bench(size, ctx, mode, p == "bf16", a.warmup, a.steps, a.batch)
                    except torch.cuda.OutOfMemoryError:
                        r = {"size": size, "ctx": ctx, "mode": mode, "precision": p, "oom": True}
                        torch.cuda.empty_cache()
                    print(json.dumps({k: v for k, v in r.items() if k != "step_ms"}), flush=True)
                    rows.append(r)
    if a.out:
        write_json(a.out, rows)


def write_json(path, rows):
    """`rows` as a JSON array in `path`, written whole or not at all (through a .tmp beside it)."""
    with open(path + ".tmp", "w") as f:
        json.dump(rows, f, indent=1)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
