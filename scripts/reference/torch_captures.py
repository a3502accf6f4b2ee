"""Training steps of the reference model made the ways users capture them, for `analyze`'s
tests on captures it did not make itself. Runs on the GPU machine, from the project root.

    # CUDA graphs: a torch.compile(mode="reduce-overhead") step, under nsys twice
    nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none -o graphs ...  \\
        python3 scripts/reference/torch_captures.py graphs
    nsys profile ... --cuda-graph-trace=node ... python3 scripts/reference/torch_captures.py graphs
    # Kineto with a schedule (ProfilerStep#N), written to --out
    python3 scripts/reference/torch_captures.py kineto-schedule --out DIR
    # Kineto with shapes, FLOPs and modules (record_shapes, with_flops, with_modules); with
    # --precision bf16 (autocast), --tf32 (fp32 products on TF32) or --attention sdpa
    # (scaled_dot_product_attention; sdpa-flash, -efficient, -cudnn force its backend) the file
    # name says so
    python3 scripts/reference/torch_captures.py kineto-ops --out DIR
    # Steps whose GPU work overlaps: no synchronize between steps, and a spin kernel on a side
    # stream in each step that outlives it
    nsys profile ... python3 scripts/reference/torch_captures.py overlap
    # PyTorch's own NVTX ranges per operator (emit_nvtx with record_shapes), under nsys
    nsys profile ... python3 scripts/reference/torch_captures.py emit-nvtx
    # DDP on two GPUs (one export holds both ranks); rank --slow-rank runs extra work per step
    nsys profile ... torchrun --nproc_per_node 2 scripts/reference/torch_captures.py ddp
    # The same with one file per rank: nsys around each rank (torchrun --no-python wrap.sh,
    # wrap.sh running `nsys profile -o run_rank$RANK python3 ... ddp`), or torch.profiler in
    # each rank writing kineto_ddp_rankN.pt.trace.json.gz into --out
    torchrun --nproc_per_node 2 scripts/reference/torch_captures.py ddp --kineto

Every variant marks `measurement` > `step_N` > `forward`, `backward`, `optimizer` with NVTX
(except kineto-schedule and ddp --kineto, whose steps are the profiler's own `ProfilerStep#N`;
there the phases are `record_function` ranges)."""
import argparse
import gzip
import json
import os
import shutil
import sys

import contextlib

import torch
import torch.cuda.nvtx as nvtx
from torch.profiler import record_function

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402


def model_and_opt(size, ctx, layers):
    d, dff, n, h = torch_model.CONFIGS[size]
    torch_model.CONFIGS["capture"] = (d, dff, layers or n, h)
    model = torch_model.build("capture", ctx)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt


# The step's numerics, set from the arguments: autocast to bf16 around the forward and loss.
AUTOCAST = False


@contextlib.contextmanager
def phase(name):
    """An NVTX range for nsys and a `record_function` range for torch.profiler (free when no
    profiler runs)."""
    with nvtx.range(name), record_function(name):
        yield


def step(model, opt, ids, extra=None, graphs=False):
    if graphs:
        # Each step replays the graphs anew; without this the next forward would overwrite
        # outputs the backward still reads.
        torch.compiler.cudagraph_mark_step_begin()
    cast = torch.autocast("cuda", dtype=torch.bfloat16) if AUTOCAST else contextlib.nullcontext()
    with phase("forward"), cast:
        out = model(ids)
    with phase("backward"):
        if extra is not None:
            extra()
        with cast:
            loss = torch.nn.functional.cross_entropy(out.float().view(-1, out.shape[-1]), ids.view(-1))
        loss.backward()
    with phase("optimizer"):
        opt.step()
        opt.zero_grad(set_to_none=True)


def measured(model, opt, ids, warmup, steps, extra=None, graphs=False):
    for _ in range(warmup):
        step(model, opt, ids, extra, graphs)
    torch.cuda.synchronize()
    with nvtx.range("measurement"):
        for i in range(steps):
            with nvtx.range(f"step_{i}"):
                step(model, opt, ids, extra, graphs)
                torch.cuda.synchronize()


def graphs(a):
    model, opt = model_and_opt(a.size, a.ctx, a.layers)
    compiled = torch.compile(model, mode="reduce-overhead")
    ids = torch.randint(0, torch_model.VOCAB, (a.batch, a.ctx), device="cuda")
    measured(compiled, opt, ids, a.warmup, a.steps, graphs=True)
    print("graphs done", flush=True)


def kineto_schedule(a, kind="schedule", **extra):
    from torch.profiler import ProfilerActivity, profile, schedule

    model, opt = model_and_opt(a.size, a.ctx, a.layers)
    ids = torch.randint(0, torch_model.VOCAB, (a.batch, a.ctx), device="cuda")
    variant = a.precision + ("_tf32" if a.tf32 else "") + ("" if a.attention == "explicit" else "_" + a.attention.replace("-", "_"))
    name = f"kineto_{kind}_{a.size}_l{a.layers}_ctx{a.ctx}_train_{variant}.pt.trace.json"
    tmp = os.path.join("/tmp", name)

    def ready(prof):
        prof.export_chrome_trace(tmp)
        if extra.get("with_flops"):
            # PyTorch's own FLOP counts per operator over the recorded steps, beside the trace
            # (the trace's events carry none in the versions tried).
            counts = {e.key: {"calls": e.count, "flops": e.flops}
                      for e in prof.key_averages() if e.flops}
            with open(os.path.join(a.out, name.replace(".pt.trace.json", ".flops.json")), "w") as f:
                json.dump(counts, f, indent=1, sort_keys=True)

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=1, warmup=1, active=2, repeat=1), on_trace_ready=ready,
                 **extra) as prof:
        for _ in range(5):
            step(model, opt, ids)
            torch.cuda.synchronize()
            prof.step()
    with open(tmp, "rb") as f, gzip.open(os.path.join(a.out, name + ".gz"), "wb") as g:
        shutil.copyfileobj(f, g)
    print(json.dumps({"kineto": name, "bytes": os.path.getsize(tmp)}))


def kineto_ops(a):
    kineto_schedule(a, "ops", record_shapes=True, with_flops=True, with_modules=True)


def overlap(a):
    model, opt = model_and_opt(a.size, a.ctx, a.layers)
    ids = torch.randint(0, torch_model.VOCAB, (a.batch, a.ctx), device="cuda")
    side = torch.cuda.Stream()
    cycles = int(a.slow_ms * 1.98e6)
    for _ in range(a.warmup):
        step(model, opt, ids)
    torch.cuda.synchronize()
    with nvtx.range("measurement"):
        for i in range(a.steps):
            with nvtx.range(f"step_{i}"):
                step(model, opt, ids)
                with torch.cuda.stream(side):
                    torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
    print("overlap done", flush=True)


def emit_nvtx(a):
    model, opt = model_and_opt(a.size, a.ctx, a.layers)
    ids = torch.randint(0, torch_model.VOCAB, (a.batch, a.ctx), device="cuda")
    with torch.autograd.profiler.emit_nvtx(record_shapes=True):
        measured(model, opt, ids, a.warmup, a.steps)
    print("emit_nvtx done", flush=True)


def ddp(a):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    model, _ = model_and_opt(a.size, a.ctx, a.layers)
    model = DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(1 + rank)
    ids = torch.randint(0, torch_model.VOCAB, (a.batch, a.ctx), device="cuda")
    # The straggler: a spin kernel of about --slow-ms on one rank per step, so the other waits
    # for it inside NCCL's all-reduce.
    cycles = int(a.slow_ms * 1.98e6)
    extra = (lambda: torch.cuda._sleep(cycles)) if rank == a.slow_rank and a.slow_ms > 0 else None
    if a.kineto:
        from torch.profiler import ProfilerActivity, profile, schedule

        name = f"kineto_ddp{dist.get_world_size()}_{a.size}_l{a.layers}_ctx{a.ctx}_train_fp32"
        name += f"_slow{a.slow_rank}_{a.slow_ms:g}ms" if a.slow_ms > 0 else "_even"
        name += f"_rank{rank}.pt.trace.json"
        tmp = os.path.join("/tmp", name)
        sched = schedule(wait=0, warmup=a.warmup, active=a.steps, repeat=1)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
                     on_trace_ready=lambda p: p.export_chrome_trace(tmp)) as prof:
            for _ in range(a.warmup + a.steps):
                step(model, opt, ids, extra)
                torch.cuda.synchronize()
                prof.step()
        with open(tmp, "rb") as f, gzip.open(os.path.join(a.out, name + ".gz"), "wb") as g:
            shutil.copyfileobj(f, g)
    else:
        measured(model, opt, ids, a.warmup, a.steps, extra)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["graphs", "kineto-schedule", "kineto-ops", "emit-nvtx", "overlap", "ddp"])
    ap.add_argument("--size", default="small")
    ap.add_argument("--layers", type=int, default=4, help="layers (0: the size's own)")
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--slow-ms", type=float, default=20.0)
    ap.add_argument("--kineto", action="store_true",
                    help="ddp: torch.profiler in each rank instead of NVTX for nsys")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: the forward and loss under autocast")
    ap.add_argument("--tf32", action="store_true", help="fp32 matrix products on TF32")
    ap.add_argument("--attention", default="explicit",
                    choices=["explicit", "sdpa", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    global AUTOCAST
    AUTOCAST = a.precision == "bf16"
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch_model.ATTENTION = a.attention
    torch.manual_seed(0)
    {"graphs": graphs, "kineto-schedule": kineto_schedule, "kineto-ops": kineto_ops,
     "emit-nvtx": emit_nvtx, "overlap": overlap, "ddp": ddp}[a.what](a)


if __name__ == "__main__":
    main()
