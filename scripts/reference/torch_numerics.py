"""Check `collect numerics` against PyTorch on the same weights and tokens. Runs on the GPU
machine (PyTorch with CUDA and safetensors), from the project root;
scripts/gpu/numerics_acceptance.sh runs it for a grid of sizes and precisions.

    collect numerics --size small --ctx 256 --precision fp32 --out DIR
    python3 scripts/reference/torch_numerics.py DIR --size small --ctx 256 --precision fp32

Loads DIR/weights.safetensors into the reference model (torch_model.py, beside this file), runs one forward
and backward on DIR/outputs.safetensors's tokens and targets (fp32 with TF32 off, or under bf16
autocast), and compares with collect's logits, loss and gradients: relative errors
max|a-b|/max|b| for logits, |a-b|/|b| for the loss, and the worst ||a-b||/||b|| over the
gradients written. Prints one JSON line; exits 1 if a tolerance is missed
(fp32: logits 1e-4, loss 1e-5, gradients 1e-3; bf16: loss 1e-2)."""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--size", required=True)
    ap.add_argument("--ctx", type=int, required=True)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    model = torch_model.build(a.size, a.ctx)
    weights = load_file(os.path.join(a.dir, "weights.safetensors"), device="cuda")
    model.load_state_dict(weights, strict=True)
    del weights
    out = load_file(os.path.join(a.dir, "outputs.safetensors"), device="cuda")
    ids, targets = out["tokens"].long(), out["targets"].long()

    amp = a.precision == "bf16"
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(ids)
    logits = logits.float().view(-1, logits.shape[-1])
    loss = torch.nn.functional.cross_entropy(logits, targets.view(-1))
    loss.backward()

    ours = out["logits"]
    logit_err = ((ours - logits).abs().max() / logits.abs().max()).item()
    loss_err = abs(out["loss"].item() - loss.item()) / abs(loss.item())
    grads = dict(model.named_parameters())
    worst, worst_name = 0.0, None
    for k, v in out.items():
        if not k.startswith("grad."):
            continue
        ref = grads[k[5:]].grad
        e = ((v - ref).norm() / ref.norm()).item()
        if e > worst:
            worst, worst_name = e, k[5:]
    n_grads = sum(1 for k in out if k.startswith("grad."))
    if amp:
        ok = loss_err <= 1e-2
    else:
        ok = logit_err <= 1e-4 and loss_err <= 1e-5 and worst <= 1e-3
    print(json.dumps({
        "size": a.size, "ctx": a.ctx, "precision": a.precision, "collect_loss": out["loss"].item(),
        "torch_loss": loss.item(), "loss_rel_err": loss_err, "logits_rel_err": logit_err,
        "grads_compared": n_grads, "worst_grad_rel_err": worst, "worst_grad": worst_name, "pass": ok,
    }), flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
