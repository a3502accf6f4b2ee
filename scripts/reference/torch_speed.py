"""PyTorch's training step of the reference model, eager and under torch.compile, timed step for
step as `collect bench` times its own (a synchronize after each step, host clock around step +
synchronize, median of the timed steps). Runs on the GPU machine (PyTorch with CUDA), from the
project root; scripts/gpu/speed.sh calls it beside `collect bench`.

    python3 scripts/reference/torch_speed.py --size small,large,2.7B --ctx 256 \\
        --precision fp32,bf16 --warmup 3 --steps 5 --compile blocks --out torch_speed.json

The step is torch_bench.py's (train: AdamW lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay
0.01; bf16 through autocast). --compile says what torch.compile compiles:
- blocks (the default): every transformer block (`Block.compile()`, regional compilation): the
  identical blocks of a model share one compiled graph, so a size and precision compiles once,
  in seconds; the embedding, final norm, head and loss stay eager.
- model: the whole LM, one graph per size and precision (minutes for the 2.7B model).
- none: eager rows only.
The first compiled steps compile; the warm-up absorbs them and their time is printed on stderr.
Prints one JSON line per configuration and writes them all to --out: size, ctx, mode, precision,
torch_eager_ms, torch_compile_ms (null when not run or out of memory), torch_compile_scope,
torch_compile_warmup_s."""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench  # noqa: E402
import torch_model  # noqa: E402


def timed(size, ctx, batch, amp, warmup, steps, compile_scope):
    """Median train step in ms and the warm-up's seconds, or None when out of memory."""
    model = torch_model.build(size, ctx)
    if compile_scope == "blocks":
        for layer in model.layers:
            layer.compile()
    elif compile_scope == "model":
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    ids = torch.randint(0, torch_model.VOCAB, (batch, ctx), device="cuda")
    try:
        t0 = time.perf_counter()
        for _ in range(warmup):
            torch_bench.step(model, opt, ids, "train", amp)
        torch.cuda.synchronize()
        warm_s = time.perf_counter() - t0
        ts = []
        for _ in range(steps):
            t = time.perf_counter()
            torch_bench.step(model, opt, ids, "train", amp)
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts), warm_s
    except torch.cuda.OutOfMemoryError:
        return None, None
    finally:
        del model, opt, ids
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="small,large,2.7B")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--compile", default="blocks", choices=["blocks", "model", "none"])
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    # One compiled block per size and precision: more shapes than the default cache holds.
    torch._dynamo.config.cache_size_limit = 64
    rows = []
    for size in a.size.split(","):
        for p in a.precision.split(","):
            amp = p == "bf16"
            eager, _ = timed(size, a.ctx, a.batch, amp, a.warmup, a.steps, None)
            compiled, warm_s = (None, None)
            if a.compile != "none":
                # Compiling takes the first steps: two more warm-up steps than eager.
                compiled, warm_s = timed(size, a.ctx, a.batch, amp, a.warmup + 2, a.steps,
                                         a.compile)
                if warm_s is not None:
                    print(f"  torch.compile ({a.compile}) {size} {p}: warm-up {warm_s:.1f} s",
                          file=sys.stderr, flush=True)
            r = {"size": size, "ctx": a.ctx, "mode": "train", "precision": p,
                 "torch_eager_ms": eager, "torch_compile_ms": compiled,
                 "torch_compile_scope": None if a.compile == "none" else a.compile,
                 "torch_compile_warmup_s": warm_s}
            print(json.dumps(r), flush=True)
            rows.append(r)
    if a.out:
        torch_bench.write_json(a.out, rows)


if __name__ == "__main__":
    main()
