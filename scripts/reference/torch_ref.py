"""The PyTorch workload (CS336 BasicsTransformerLM) that made the nsys, memsnap and kineto fixtures; runs on the GPU machine.
Called by make_fixtures.sh: python3 torch_ref.py {nsys-target|memsnap|kineto|bench} --size S --ctx N --mode forward|train [--amp] [--nvtx-attn] [--steps N] [--out DIR]. Keep its line numbers: snapshot frames name them."""
import argparse, gzip, json, math, os, shutil, tempfile, time
import torch
import torch.nn as nn
import torch.cuda.nvtx as nvtx

CONFIGS = {
    "small": (768, 3072, 12, 12), "medium": (1024, 4096, 24, 16), "large": (1280, 5120, 36, 20),
    "xl": (1600, 6400, 48, 25), "2.7B": (2560, 10240, 32, 32),
}
NVTX_ATTN = False

class Linear(nn.Module):
    def __init__(s, i, o):
        super().__init__(); std = math.sqrt(2 / (i + o))
        s.weight = nn.Parameter(nn.init.trunc_normal_(torch.empty(o, i), std=std, a=-3 * std, b=3 * std))
    def forward(s, x): return torch.einsum("...i,oi->...o", x, s.weight)

class RMSNorm(nn.Module):
    def __init__(s, d, eps=1e-5):
        super().__init__(); s.weight = nn.Parameter(torch.ones(d)); s.eps = eps
    def forward(s, x):
        dt = x.dtype; x = x.to(torch.float32)
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps) * s.weight).to(dt)

def softmax(x, dim):
    m = x.max(dim=dim, keepdim=True).values; e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True)

def sdpa(q, k, v, mask):
    d = k.shape[-1]
    with nvtx.range("attention_matmul_QK") if NVTX_ATTN else _null():
        s = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(d)
        s = torch.where(mask, s, float("-inf"))
    with nvtx.range("attention_softmax") if NVTX_ATTN else _null():
        p = softmax(s, -1)
    with nvtx.range("attention_matmul_V") if NVTX_ATTN else _null():
        return torch.einsum("...qk,...kd->...qd", p, v)

class _null:
    def __enter__(s): pass
    def __exit__(s, *a): pass

class RoPE(nn.Module):
    def __init__(s, dk, ctx, theta=10000.0):
        super().__init__()
        inv = theta ** (-torch.arange(0, dk, 2).float() / dk)
        ang = torch.outer(torch.arange(ctx).float(), inv)
        s.register_buffer("cos", ang.cos(), persistent=False); s.register_buffer("sin", ang.sin(), persistent=False)
    def forward(s, x, pos):
        c, sn = s.cos[pos], s.sin[pos]; x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * c - x2 * sn, x1 * sn + x2 * c), -1).flatten(-2)

class Block(nn.Module):
    def __init__(s, d, dff, h, ctx):
        super().__init__(); s.h = h
        s.q, s.k, s.v, s.o = (Linear(d, d) for _ in range(4))
        s.w1, s.w2, s.w3 = Linear(d, dff), Linear(dff, d), Linear(d, dff)
        s.ln1, s.ln2 = RMSNorm(d), RMSNorm(d); s.rope = RoPE(d // h, ctx)
    def forward(s, x):
        B, T, D = x.shape; y = s.ln1(x)
        q, k, v = (t.view(B, T, s.h, D // s.h).transpose(1, 2) for t in (s.q(y), s.k(y), s.v(y)))
        pos = torch.arange(T, device=x.device); q, k = s.rope(q, pos), s.rope(k, pos)
        mask = torch.tril(torch.ones(T, T, device=x.device, dtype=torch.bool))
        a = sdpa(q, k, v, mask).transpose(1, 2).reshape(B, T, D)
        x = x + s.o(a); y = s.ln2(x)
        return x + s.w2(torch.nn.functional.silu(s.w1(y)) * s.w3(y))

class LM(nn.Module):
    def __init__(s, vocab, ctx, d, dff, L, h):
        super().__init__()
        s.emb = nn.Parameter(nn.init.trunc_normal_(torch.empty(vocab, d), std=1, a=-3, b=3))
        s.layers = nn.ModuleList(Block(d, dff, h, ctx) for _ in range(L)); s.ln = RMSNorm(d); s.head = Linear(d, vocab)
    def forward(s, ids):
        x = s.emb[ids]
        for l in s.layers: x = l(x)
        return s.head(s.ln(x))

def step(model, opt, ids, mode, amp):
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if amp else _null()
    with nvtx.range("forward"):
        with ctx: out = model(ids)
    if mode == "forward": return
    with nvtx.range("backward"):
        loss = torch.nn.functional.cross_entropy(out.float().view(-1, out.shape[-1]), ids.view(-1)); loss.backward()
    if mode == "train":
        with nvtx.range("optimizer"): opt.step(); opt.zero_grad(set_to_none=True)

def build(size, ctx):
    d, dff, L, h = CONFIGS[size]
    m = LM(10000, ctx, d, dff, L, h).cuda(); opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    return m, opt

def bench(size, ctx, mode, amp, warm=3, n=10, batch=4, compile=False):
    m, opt = build(size, ctx); ids = torch.randint(0, 10000, (batch, ctx), device="cuda")
    if compile: m = torch.compile(m)
    for _ in range(warm): step(m, opt, ids, mode, amp)
    torch.cuda.synchronize(); ts = []
    for i in range(n):
        t = time.perf_counter()
        with nvtx.range(f"step_{i}"): step(m, opt, ids, mode, amp)
        torch.cuda.synchronize(); ts.append((time.perf_counter() - t) * 1e3)
    ts.sort(); del m, opt; torch.cuda.empty_cache()
    return {"size": size, "ctx": ctx, "mode": mode, "bf16": amp, "median_ms": ts[len(ts)//2], "min_ms": ts[0], "max_ms": ts[-1], "compiled": compile}

if __name__ == "__main__":
    ap = argparse.ArgumentParser(); ap.add_argument("what"); ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--size", default="small"); ap.add_argument("--ctx", type=int, default=128); ap.add_argument("--mode", default="train")
    ap.add_argument("--amp", action="store_true"); ap.add_argument("--nvtx-attn", action="store_true"); ap.add_argument("--steps", type=int, default=2); ap.add_argument("--compile", action="store_true"); ap.add_argument("--precisions", default="fp32,bf16")
    a = ap.parse_args(); NVTX_ATTN = a.nvtx_attn
    torch.manual_seed(0)
    if a.what == "memsnap":
        m, opt = build(a.size, a.ctx); ids = torch.randint(0, 10000, (4, a.ctx), device="cuda")
        for _ in range(2): step(m, opt, ids, a.mode, a.amp)
        torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
        torch.cuda.memory._record_memory_history(max_entries=1000000)
        step(m, opt, ids, a.mode, a.amp); torch.cuda.synchronize()
        name = f"memsnap_{a.size}_ctx{a.ctx}_{a.mode}_{'bf16' if a.amp else 'fp32'}.pickle"
        p = os.path.join(tempfile.gettempdir(), name); torch.cuda.memory._dump_snapshot(p); torch.cuda.memory._record_memory_history(enabled=None)
        with open(p, "rb") as f, gzip.open(os.path.join(a.out, name + ".gz"), "wb") as g: shutil.copyfileobj(f, g)
        print(json.dumps({"snapshot": name, "bytes": os.path.getsize(p), "peak_allocated": torch.cuda.max_memory_allocated()}))
    elif a.what == "kineto":
        m, opt = build(a.size, a.ctx); ids = torch.randint(0, 10000, (4, a.ctx), device="cuda")
        for _ in range(2): step(m, opt, ids, a.mode, a.amp)
        torch.cuda.synchronize()
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step(m, opt, ids, a.mode, a.amp); torch.cuda.synchronize()
        name = f"kineto_{a.size}_ctx{a.ctx}_{a.mode}_{'bf16' if a.amp else 'fp32'}.pt.trace.json"
        p = os.path.join(tempfile.gettempdir(), name); prof.export_chrome_trace(p)
        with open(p, "rb") as f, gzip.open(os.path.join(a.out, name + ".gz"), "wb") as g: shutil.copyfileobj(f, g)
        print(json.dumps({"kineto": name, "bytes": os.path.getsize(p)}))
    elif a.what == "bench":
        res = []
        for size in a.size.split(","):
            for mode in a.mode.split(","):
                for amp in [p == "bf16" for p in a.precisions.split(",")]:
                    try: r = bench(size, a.ctx, mode, amp, compile=a.compile)
                    except torch.cuda.OutOfMemoryError: r = {"size": size, "mode": mode, "bf16": amp, "oom": True}; torch.cuda.empty_cache()
                    print(json.dumps(r), flush=True); res.append(r)
        with open(os.path.join(a.out, f"bench_ctx{a.ctx}{'_compiled' if a.compile else ''}.json"), "w") as f: json.dump(res, f, indent=1)
    elif a.what == "nsys-target":
        m, opt = build(a.size, a.ctx); ids = torch.randint(0, 10000, (4, a.ctx), device="cuda")
        for _ in range(2): step(m, opt, ids, a.mode, a.amp)
        with nvtx.range("measurement"):
            for i in range(a.steps):
                with nvtx.range(f"step_{i}"): step(m, opt, ids, a.mode, a.amp)
        torch.cuda.synchronize(); print("nsys target done")
