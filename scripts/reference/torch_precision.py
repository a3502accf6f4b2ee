"""PyTorch's side of the mixed-precision experiments (`collect precision`): what PyTorch prints
for the accumulation experiment and which dtypes autocast gives the ToyModel's tensors. Runs on
the GPU machine; prints one JSON document (the rows `collect precision` is checked against).

    python3 scripts/reference/torch_precision.py > torch_precision.json
"""
import json

import torch
import torch.nn as nn


def accumulate():
    """Add 0.01 to an accumulator 1000 times, as the assignment does, in each pairing."""
    rows = []
    cases = [
        ("fp32 += fp32", torch.float32, torch.float32, None),
        ("fp16 += fp16", torch.float16, torch.float16, None),
        ("fp32 += fp16", torch.float32, torch.float16, None),
        ("fp32 += fp16 as fp32", torch.float32, torch.float16, torch.float32),
        ("bf16 += bf16", torch.bfloat16, torch.bfloat16, None),
        ("fp32 += bf16", torch.float32, torch.bfloat16, None),
        ("fp32 += bf16 as fp32", torch.float32, torch.bfloat16, torch.float32),
    ]
    for name, acc_t, val_t, cast in cases:
        s = torch.tensor(0, dtype=acc_t, device="cuda")
        for _ in range(1000):
            x = torch.tensor(0.01, dtype=val_t, device="cuda")
            s += x.type(cast) if cast is not None else x
        rows.append({"experiment": "accumulate", "case": name, "value": float(s.item()),
                     "printed": f"{s.item():.8f}" if acc_t == torch.float32 else repr(s)})
    return rows


class ToyModel(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 10, bias=False)
        self.ln = nn.LayerNorm(10)
        self.fc2 = nn.Linear(10, out_features, bias=False)
        self.relu = nn.ReLU()

    def forward(self, x):
        x = self.relu(self.fc1(x))
        self.fc1_out = x
        x = self.ln(x)
        self.ln_out = x
        x = self.fc2(x)
        return x


def toy():
    rows = []
    for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        torch.manual_seed(0)
        model = ToyModel(20, 5).cuda()
        x = torch.randn(8, 20, device="cuda")
        y = torch.randint(0, 5, (8,), device="cuda")
        with torch.autocast("cuda", dtype=dt):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        seen = [
            ("parameters", model.fc1.weight.dtype),
            ("fc1 output", model.fc1_out.dtype),
            ("layer norm output", model.ln_out.dtype),
            ("logits", logits.dtype),
            ("loss", loss.dtype),
            ("gradients", model.fc1.weight.grad.dtype),
        ]
        for case, dtype in seen:
            rows.append({"experiment": "toy", "autocast": name, "case": case,
                         "value": str(dtype).replace("torch.", "")})
    return rows


if __name__ == "__main__":
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                      "rows": accumulate() + toy()}, indent=1))
