"""The CS336 BasicsTransformerLM in PyTorch, written as the reference script of the profiling study
writes it (einsum linears without bias, RMSNorm in fp32, RoPE on interleaved pairs, explicit
causal softmax, untied head), with state-dict names matching what `collect numerics` writes.
A module, not a command: torch_numerics.py and torch_bench.py import it from this folder, on the
GPU machine (PyTorch with CUDA)."""
import math

import torch
import torch.cuda.nvtx as nvtx
import torch.nn as nn

CONFIGS = {
    "small": (768, 3072, 12, 12), "medium": (1024, 4096, 24, 16), "large": (1280, 5120, 36, 20),
    "xl": (1600, 6400, 48, 25), "2.7B": (2560, 10240, 32, 32),
}
VOCAB = 10000
# The attention core: "explicit" (the reference's einsum, masked softmax, einsum), "sdpa"
# (torch.nn.functional.scaled_dot_product_attention, causal; PyTorch picks its backend), or
# "sdpa-flash", "sdpa-efficient", "sdpa-cudnn" (that backend forced).
ATTENTION = "explicit"


class _Null:
    def __enter__(self):
        pass

    def __exit__(self, *a):
        pass


def rng(name, on):
    return nvtx.range(name) if on else _Null()


class Linear(nn.Module):
    def __init__(s, i, o):
        super().__init__()
        std = math.sqrt(2 / (i + o))
        s.weight = nn.Parameter(nn.init.trunc_normal_(torch.empty(o, i), std=std, a=-3 * std, b=3 * std))

    def forward(s, x):
        return torch.einsum("...i,oi->...o", x, s.weight)


class RMSNorm(nn.Module):
    def __init__(s, d, eps=1e-5):
        super().__init__()
        s.weight = nn.Parameter(torch.ones(d))
        s.eps = eps

    def forward(s, x):
        dt = x.dtype
        x = x.to(torch.float32)
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps) * s.weight).to(dt)


def softmax(x, dim):
    m = x.max(dim=dim, keepdim=True).values
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True)


def sdpa(q, k, v, mask, nvtx_attn):
    d = k.shape[-1]
    with rng("attention_matmul_QK", nvtx_attn):
        s = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(d)
        s = torch.where(mask, s, float("-inf"))
    with rng("attention_softmax", nvtx_attn):
        p = softmax(s, -1)
    with rng("attention_matmul_V", nvtx_attn):
        return torch.einsum("...qk,...kd->...qd", p, v)


def sdpa_core(q, k, v):
    """Causal attention through PyTorch's scaled_dot_product_attention, on the backend ATTENTION
    names (PyTorch's choice for plain "sdpa")."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
               "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}.get(ATTENTION)
    ctx = sdpa_kernel(backend) if backend is not None else _Null()
    with ctx:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


class RoPE(nn.Module):
    def __init__(s, dk, ctx, theta=10000.0):
        super().__init__()
        inv = theta ** (-torch.arange(0, dk, 2).float() / dk)
        ang = torch.outer(torch.arange(ctx).float(), inv)
        s.register_buffer("cos", ang.cos(), persistent=False)
        s.register_buffer("sin", ang.sin(), persistent=False)

    def forward(s, x, pos):
        c, sn = s.cos[pos], s.sin[pos]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * c - x2 * sn, x1 * sn + x2 * c), -1).flatten(-2)


class Block(nn.Module):
    def __init__(s, d, dff, h, ctx):
        super().__init__()
        s.h = h
        s.q, s.k, s.v, s.o = (Linear(d, d) for _ in range(4))
        s.w1, s.w2, s.w3 = Linear(d, dff), Linear(dff, d), Linear(d, dff)
        s.ln1, s.ln2 = RMSNorm(d), RMSNorm(d)
        s.rope = RoPE(d // h, ctx)
        s.nvtx_attn = False

    def forward(s, x):
        B, T, D = x.shape
        y = s.ln1(x)
        q, k, v = (t.view(B, T, s.h, D // s.h).transpose(1, 2) for t in (s.q(y), s.k(y), s.v(y)))
        pos = torch.arange(T, device=x.device)
        q, k = s.rope(q, pos), s.rope(k, pos)
        if ATTENTION.startswith("sdpa"):
            a = sdpa_core(q, k, v)
        else:
            mask = torch.tril(torch.ones(T, T, device=x.device, dtype=torch.bool))
            a = sdpa(q, k, v, mask, s.nvtx_attn)
        a = a.transpose(1, 2).reshape(B, T, D)
        x = x + s.o(a)
        y = s.ln2(x)
        return x + s.w2(torch.nn.functional.silu(s.w1(y)) * s.w3(y))


class LM(nn.Module):
    def __init__(s, vocab, ctx, d, dff, L, h):
        super().__init__()
        s.emb = nn.Parameter(nn.init.trunc_normal_(torch.empty(vocab, d), std=1, a=-3, b=3))
        s.layers = nn.ModuleList(Block(d, dff, h, ctx) for _ in range(L))
        s.ln = RMSNorm(d)
        s.head = Linear(d, vocab)

    def forward(s, ids):
        x = s.emb[ids]
        for layer in s.layers:
            x = layer(x)
        return s.head(s.ln(x))


def build(size, ctx, device="cuda"):
    """The model with its parameters created (and initialised) directly on `device`."""
    d, dff, L, h = CONFIGS[size]
    with torch.device(device):
        return LM(VOCAB, ctx, d, dff, L, h)
