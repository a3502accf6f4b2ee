"""Join `collect bench --out` and `torch_bench.py --out` results measured in one run and print a
Markdown table: median step times, their ratio (collect / PyTorch eager; below 1 means collect is
faster), and for bf16 train steps the model FLOPs utilisation 6 * parameters * tokens / step time /
the H200's measured bf16 matrix peak (790 TFLOP/s, an 8192^3 product on random data).
Standard library only; runs anywhere, and scripts/bench/bench_vs_torch.sh calls it on the GPU
machine.

    python3 scripts/reference/compare_bench.py collect.json torch.json"""
import json
import sys

PEAK_BF16 = 790e12


def main():
    ours = json.load(open(sys.argv[1]))
    torch_rows = json.load(open(sys.argv[2]))
    ref = {(r["size"], r["ctx"], r["mode"], r["precision"]): r for r in torch_rows}
    print("| size | ctx | mode | precision | collect median (ms) | PyTorch eager median (ms) | ratio | MFU |")
    print("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: |")
    for r in ours["results"]:
        key = (r["size"], r["ctx"], r["mode"], r["precision"])
        t = ref.get(key)
        if r["status"] != "ok":
            c = "OOM"
        else:
            c = f'{r["host"]["median_ms"]:.2f}'
        if t is None:
            tm = "-"
        elif t.get("oom"):
            tm = "OOM"
        else:
            tm = f'{t["median_ms"]:.2f}'
        ratio = "-"
        if r["status"] == "ok" and t is not None and not t.get("oom"):
            ratio = f'{r["host"]["median_ms"] / t["median_ms"]:.2f}'
        mfu = "-"
        if r["status"] == "ok" and r["mode"] == "train" and r["precision"] == "bf16":
            tokens = r["batch"] * r["ctx"]
            mfu = f'{6 * r["parameters"] * tokens / (r["host"]["median_ms"] / 1e3) / PEAK_BF16 * 100:.1f}%'
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {c} | {tm} | {ratio} | {mfu} |")


if __name__ == "__main__":
    main()
