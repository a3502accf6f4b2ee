"""The attention acceptance tables from one merged array of `collect attention --out` rows and
`torch_attention.py` rows (attention_acceptance.sh writes it). Runs anywhere:

    python3 scripts/gpu/attention_table.py attention_h200.json

Prints, as Markdown:
1. the assignment's grid (batch 8, heads 1, fp32, causal): naive's memory before the backward
   against torch_naive's (within 5%?), and the time of naive, flash, torch_compiled and torch_sdpa
   as ratios to torch_naive's, forward and backward;
2. the leaderboard shape (batch 1, 16 heads, seq 16384, d 64, bf16, causal): flash forward +
   backward ms (at most 4.4, and below SDPA's?);
3. bf16, causal, d 64 and 128, seq >= 4096, every batch and head count both ran: flash TFLOP/s
   against SDPA's, forward at least 1.0x and backward at least 0.9x?
SDPA is torch_sdpa_cudnn (SDPA with the cuDNN backend forced) where the rows have it, else
torch_sdpa (SDPA's own choice of backend).
4. batch 8, seq 16384, d 128, fp32: flash's memory before the backward against 1.1 x (Q, K, V, O
   and L).
Exits 1 when a check misses, 2 when a row it needs is missing.
"""
import json
import sys

MIB = 1024.0 * 1024.0


def key(r):
    return (r["impl"], r["batch"], r["heads"], r["d"], r["seq"], r["precision"], r["causal"])


def main():
    rows = json.load(open(sys.argv[1]))
    by = {}
    for r in rows:
        by[key(r)] = r
    failed, missing = [], []

    def get(impl, batch, heads, d, seq, precision, causal=True):
        r = by.get((impl, batch, heads, d, seq, precision, causal))
        if r is None or r["status"] != "OK":
            missing.append(f"{impl} b{batch} h{heads} d{d} seq{seq} {precision}: "
                           + ("absent" if r is None else r["status"]))
            return None
        return r

    def sdpa(batch, heads, d, seq, precision):
        """SDPA's row for a shape: the cuDNN backend's where it ran, else SDPA's own choice."""
        r = by.get(("torch_sdpa_cudnn", batch, heads, d, seq, precision, True))
        if r is not None and r["status"] == "OK":
            return r
        return get("torch_sdpa", batch, heads, d, seq, precision)

    def ratio(a, b, field):
        if a is None or b is None or not b[field]:
            return "-"
        return f"{a[field] / b[field]:.2f}"

    print("## The assignment's grid (batch 8, no heads, fp32, causal)\n")
    print("| d | seq | naive MiB before bwd | torch_naive MiB | within 5% | naive fwd / bwd ms "
          "| naive / torch_naive fwd, bwd | flash / torch_naive fwd, bwd "
          "| torch_compiled / torch_naive fwd, bwd | torch_sdpa / torch_naive fwd, bwd |")
    print("| ---: | ---: | ---: | ---: | :---: | ---: | ---: | ---: | ---: | ---: |")
    for d in (16, 32, 64, 128):
        for seq in (256, 1024, 4096, 8192, 16384):
            n = get("naive", 8, 1, d, seq, "fp32")
            t = get("torch_naive", 8, 1, d, seq, "fp32")
            if n is None or t is None:
                continue
            f = by.get(("flash", 8, 1, d, seq, "fp32", True))
            c = by.get(("torch_compiled", 8, 1, d, seq, "fp32", True))
            s = by.get(("torch_sdpa", 8, 1, d, seq, "fp32", True))
            rel = abs(n["mem_before_bwd_mib"] / t["mem_before_bwd_mib"] - 1)
            ok = rel <= 0.05
            if not ok:
                failed.append(f"naive memory before the backward, d {d} seq {seq}: {rel:.1%} off")
            pair = lambda x: f"{ratio(x, t, 'fwd_ms')}, {ratio(x, t, 'bwd_ms')}"  # noqa: E731
            print(f"| {d} | {seq} | {n['mem_before_bwd_mib']:.1f} | {t['mem_before_bwd_mib']:.1f} "
                  f"| {'yes' if ok else 'NO'} ({rel:.1%}) | {n['fwd_ms']:.3f} / {n['bwd_ms']:.3f} "
                  f"| {pair(n)} | {pair(f)} | {pair(c)} | {pair(s)} |")

    print("\n## The leaderboard shape (batch 1, 16 heads, seq 16384, d 64, bf16, causal)\n")
    f = get("flash", 1, 16, 64, 16384, "bf16")
    s = sdpa(1, 16, 64, 16384, "bf16")
    if f is not None:
        total = f["fwd_ms"] + f["bwd_ms"]
        sdpa_total = s["fwd_ms"] + s["bwd_ms"] if s else None
        ok = total <= 4.4 and (sdpa_total is None or total < sdpa_total)
        if not ok:
            failed.append(f"leaderboard flash forward + backward {total:.2f} ms: over 4.4 ms "
                          f"or not below SDPA's {sdpa_total or 0:.2f} ms")
        print("| impl | fwd ms | bwd ms | fwd+bwd ms | at most 4.4 ms, below SDPA "
              "| ratio to SDPA |")
        print("| --- | ---: | ---: | ---: | :---: | ---: |")
        r = f"{total / sdpa_total:.2f}" if sdpa_total else "-"
        print(f"| flash | {f['fwd_ms']:.3f} | {f['bwd_ms']:.3f} | {total:.3f} | "
              f"{'yes' if ok else 'NO'} | {r} |")
        if s:
            print(f"| {s['impl']} | {s['fwd_ms']:.3f} | {s['bwd_ms']:.3f} | {sdpa_total:.3f} "
                  "| | 1.00 |")

    print("\n## bf16, causal, d 64 and 128, seq >= 4096: flash TFLOP/s against SDPA's\n")
    print("| batch | heads | d | seq | SDPA | flash fwd TFLOP/s | SDPA fwd TFLOP/s | ratio "
          "| at least 1.0 | flash bwd TFLOP/s | SDPA bwd TFLOP/s | ratio | at least 0.9 |")
    print("| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | :---: | ---: | ---: | ---: "
          "| :---: |")
    shapes = sorted({k[1:5] for k in by if k[0] == "flash" and k[5] == "bf16" and k[6]
                     and k[3] in (64, 128) and k[4] >= 4096}, key=lambda k: (k[2], k[3], k[0]))
    for batch, heads, d, seq in shapes:
        f = get("flash", batch, heads, d, seq, "bf16")
        s = sdpa(batch, heads, d, seq, "bf16")
        if f is None or s is None:
            continue
        marks = []
        for way, least in (("fwd", 1.0), ("bwd", 0.9)):
            r = f[f"tflops_{way}"] / s[f"tflops_{way}"]
            ok = r >= least
            if not ok:
                failed.append(f"flash {way}, batch {batch} heads {heads} d {d} seq {seq}: "
                              f"{r:.2f} of SDPA's TFLOP/s (at least {least})")
            marks.append(f"{f[f'tflops_{way}']:.0f} | {s[f'tflops_{way}']:.0f} | {r:.2f} "
                         f"| {'yes' if ok else 'NO'}")
        print(f"| {batch} | {heads} | {d} | {seq} | {s['impl']} | {marks[0]} | {marks[1]} |")

    print("\n## Batch 8, seq 16384, d 128, fp32: flash's memory before the backward\n")
    f = get("flash", 8, 1, 128, 16384, "fp32")
    if f is not None:
        n = 8 * 16384 * 128 * 4
        bound = 1.1 * (4 * n + 8 * 16384 * 4) / MIB
        ok = f["mem_before_bwd_mib"] <= bound
        if not ok:
            failed.append(f"flash memory before the backward {f['mem_before_bwd_mib']:.1f} MiB")
        print("| flash MiB before bwd | 1.1 x (Q, K, V, O, L) MiB | within |")
        print("| ---: | ---: | :---: |")
        print(f"| {f['mem_before_bwd_mib']:.1f} | {bound:.1f} | {'yes' if ok else 'NO'} |")

    for m in missing:
        print(f"missing: {m}", file=sys.stderr)
    for m in failed:
        print(f"missed: {m}", file=sys.stderr)
    sys.exit(1 if failed else 2 if missing else 0)


if __name__ == "__main__":
    main()
