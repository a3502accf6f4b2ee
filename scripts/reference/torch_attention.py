"""PyTorch's attention on the grids of `collect attention`, timed and counted the way it times and
counts its own, writing rows with the same fields. Runs on the GPU machine (PyTorch with CUDA),
from the project root; scripts/gpu/attention_acceptance.sh runs it beside `collect attention`.

    python3 scripts/reference/torch_attention.py [--preset pytorch-attention|flash-benchmarking|leaderboard]
        [--impl torch_naive,torch_compiled,torch_sdpa] [--d 16,32] [--seq 256,1024] [--batch 8]
        [--heads 1] [--precision fp32,bf16] [--no-causal] [--passes 100] [--warmup 5]
        [--max-seconds 3] --out rows.json

Implementations:
- torch_naive: attention as the CS336 assignment writes it, eager: scores = Q K^T / sqrt(d), the
  causal mask through torch.where, softmax, times V (autograd keeps P and the mask);
- torch_compiled: torch.compile of that same function (dynamic=False: one compile per shape; the
  first pass, which compiles forward and backward, is timed on its own and printed on stderr, never
  counted among the timed passes);
- torch_sdpa: F.scaled_dot_product_attention(is_causal=...), whichever fused kernel PyTorch picks;
  torch_sdpa_cudnn and torch_sdpa_flash: the same with the cuDNN or the FlashAttention-2 backend
  forced (an error row where that backend refuses the shape).

Per row, as `collect attention` does: dO made first, then Q, K, V ([batch, heads, seq, d],
standard normal, requires_grad); warm-up passes (forward and backward); timed forward passes;
then backward passes, each after an untimed forward, with the memory in use before it; every pass
timed by time.perf_counter around the call and a torch.cuda.synchronize(). A phase stops once
its passes have taken --max-seconds, after at least 5. Memory is torch.cuda.memory_allocated()
and max_memory_allocated() beyond what was in use before Q, K, V (so dO is not counted, nor the
cuBLAS workspaces, made by a small pass of each implementation before the first row); the
gradients of Q, K, V are dropped after every backward. TF32 is off (collect's fp32 GEMMs are
true FP32). TFLOP/s: forward 4 * batch * heads * seq^2 * d, halved when causal; backward 2.5 x.

Each row: impl, batch, heads, d, seq, precision, causal, fwd_ms, bwd_ms, mem_before_bwd_mib,
peak_mib, status ("OK", "OOM" or the error), tflops_fwd, tflops_bwd; the file is a JSON array.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

MIN_PASSES = 5
PRESETS = {
    "pytorch-attention": dict(batch=8, heads=1, d=[16, 32, 64, 128],
                              seq=[256, 1024, 4096, 8192, 16384], precision=["fp32"]),
    "flash-benchmarking": dict(batch=1, heads=1, d=[16, 32, 64, 128],
                               seq=[2 ** p for p in range(7, 17)], precision=["fp32", "bf16"]),
    "leaderboard": dict(batch=1, heads=16, d=[64], seq=[16384], precision=["bf16"]),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def naive_attention(q, k, v, causal):
    """The assignment's scaled dot-product attention with a causal mask."""
    d = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if causal:
        n = q.shape[-2]
        mask = torch.tril(torch.ones(n, n, dtype=torch.bool, device=q.device))
        scores = torch.where(mask, scores, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def sdpa_with(backend):
    """SDPA with one backend forced (torch.nn.attention.SDPBackend), for the backward too: the
    autograd node keeps the kernel its forward ran."""
    from torch.nn.attention import sdpa_kernel

    def fn(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def implementations():
    for name, value in [("cache_size_limit", 4096), ("recompile_limit", 4096),
                        ("accumulated_cache_size_limit", 65536),
                        ("accumulated_recompile_limit", 65536)]:
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, value)
    return {
        "torch_naive": naive_attention,
        "torch_compiled": torch.compile(naive_attention, dynamic=False),
        "torch_sdpa": sdpa,
        "torch_sdpa_cudnn": sdpa_with(SDPBackend.CUDNN_ATTENTION),
        "torch_sdpa_flash": sdpa_with(SDPBackend.FLASH_ATTENTION),
    }


def timed(passes, max_seconds, run_pass, minimum=MIN_PASSES):
    total, n = 0.0, 0
    while n < passes:
        total += run_pass()
        n += 1
        if n >= minimum and total >= max_seconds * 1e3:
            break
    return total / max(n, 1), n


def sync_ms(t0):
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def flops_fwd(batch, heads, seq, d, causal):
    full = 4.0 * batch * heads * seq * seq * d
    return full / 2 if causal else full


def run_row(fn, impl, batch, heads, d, seq, precision, causal, a):
    row = dict(impl=impl, batch=batch, heads=heads, d=d, seq=seq, precision=precision,
               causal=causal, fwd_ms=None, bwd_ms=None, mem_before_bwd_mib=None, peak_mib=None,
               status="OK", tflops_fwd=None, tflops_bwd=None)
    dtype, shape = DTYPES[precision], (batch, heads, seq, d)
    mib = 1024.0 * 1024.0
    tensors = {}
    try:
        g = torch.Generator(device="cuda").manual_seed(a.seed)
        tensors["dout"] = torch.randn(shape, device="cuda", dtype=dtype, generator=g)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        for name in ("q", "k", "v"):
            tensors[name] = torch.randn(shape, device="cuda", dtype=dtype, generator=g,
                                        requires_grad=True)
        q, k, v, dout = tensors["q"], tensors["k"], tensors["v"], tensors["dout"]
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

        def clear_grads():
            q.grad = k.grad = v.grad = None

        def warm():
            t0 = time.perf_counter()
            out = fn(q, k, v, causal)
            out.backward(dout)
            ms = sync_ms(t0)
            del out
            clear_grads()
            return ms

        if impl == "torch_compiled":
            first = warm()
            torch.cuda.reset_peak_memory_stats()
            print(f"  {impl} d{d} seq{seq} {precision}: first pass (compiles forward and "
                  f"backward) {first / 1e3:.1f} s", file=sys.stderr, flush=True)
        if a.warmup > 0:
            timed(a.warmup, a.max_seconds, warm, minimum=1)

        def forward_pass():
            t0 = time.perf_counter()
            out = fn(q, k, v, causal)
            ms = sync_ms(t0)
            del out
            return ms

        fwd_ms, fwd_n = timed(a.passes, a.max_seconds, forward_pass)
        before = [0]

        def backward_pass():
            out = fn(q, k, v, causal)
            torch.cuda.synchronize()
            before[0] = max(before[0], torch.cuda.memory_allocated() - base)
            t0 = time.perf_counter()
            out.backward(dout)
            ms = sync_ms(t0)
            del out
            clear_grads()
            return ms

        bwd_ms, bwd_n = timed(a.passes, a.max_seconds, backward_pass)
        f = flops_fwd(batch, heads, seq, d, causal)
        row.update(fwd_ms=fwd_ms, bwd_ms=bwd_ms, mem_before_bwd_mib=before[0] / mib,
                   peak_mib=(torch.cuda.max_memory_allocated() - base) / mib,
                   tflops_fwd=f / (fwd_ms * 1e-3) / 1e12,
                   tflops_bwd=2.5 * f / (bwd_ms * 1e-3) / 1e12)
        passes = f"{fwd_n}/{bwd_n}"
    except torch.cuda.OutOfMemoryError:
        row["status"], passes = "OOM", "-"
    except RuntimeError as e:  # a kernel or compile refusing the shape
        row["status"], passes = str(e).strip().splitlines()[0][:200], "-"
    finally:
        tensors.clear()
        torch.cuda.empty_cache()
    print(f"  {impl} d{d} seq{seq} {precision}: {row['status']}, fwd {row['fwd_ms']}, "
          f"bwd {row['bwd_ms']}, passes {passes}", file=sys.stderr, flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="pytorch-attention")
    ap.add_argument("--impl", default="torch_naive,torch_compiled,torch_sdpa")
    ap.add_argument("--d")
    ap.add_argument("--seq")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--precision")
    ap.add_argument("--no-causal", action="store_true")
    ap.add_argument("--passes", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    grid = dict(PRESETS[a.preset])
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    if a.d:
        grid["d"] = ints(a.d)
    if a.seq:
        grid["seq"] = ints(a.seq)
    if a.precision:
        grid["precision"] = a.precision.split(",")
    for key in ("batch", "heads"):
        if getattr(a, key) is not None:
            grid[key] = getattr(a, key)
    causal = not a.no_causal
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    fns = implementations()
    impls = a.impl.split(",")
    unknown = [i for i in impls if i not in fns]
    if unknown:
        sys.exit(f"error: unknown implementation {unknown[0]} (expected {', '.join(fns)})")
    # cuBLAS and cuBLASLt take their workspaces from the caching allocator at their first use,
    # and keep them: make them now, so that no row counts them.
    for precision in grid["precision"]:
        x = torch.randn((1, 1, 64, 64), device="cuda", dtype=DTYPES[precision], requires_grad=True)
        for impl in impls:
            try:
                fns[impl](x, x, x, causal).sum().backward()
            except RuntimeError:  # a backend refusing the type: its rows say so
                pass
        del x
    torch.cuda.synchronize()
    rows, start = [], time.perf_counter()
    for precision in grid["precision"]:
        for d in grid["d"]:
            for seq in grid["seq"]:
                for impl in impls:
                    rows.append(run_row(fns[impl], impl, grid["batch"], grid["heads"], d, seq,
                                        precision, causal, a))
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rows, f, indent=2)
        f.write("\n")
    os.replace(tmp, a.out)
    print(f"{len(rows)} rows in {time.perf_counter() - start:.0f} s to {a.out} "
          f"({torch.cuda.get_device_name()}, PyTorch {torch.__version__})", file=sys.stderr)


if __name__ == "__main__":
    main()
