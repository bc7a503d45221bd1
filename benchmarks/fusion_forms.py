"""LASER-VFL's class-space fusion in three forms, one training step each (forward + backward).

    python benchmarks/fusion_forms.py

LASER-VFL projects every block's representation with every head (one matrix product) and then fuses
each drawn subset in class space: ``logits[b, i, s] = sum_j agg[b, i, s, j] proj[b, i, j]``. The
trainer does this with ``torch.matmul`` (B x heads tiny (sizes x K)(K x C) products). This script
times that against a broadcast multiply-and-sum and ``einsum`` at one thread, interleaved, and
checks that the three agree. Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def forms(emb, w, bias, agg):
    k, b, d = emb.shape
    h, _, c = w.shape

    def proj():
        return (emb.reshape(k * b, d) @ w.permute(1, 0, 2).reshape(d, h * c)).view(k, b, h, c).permute(1, 2, 0, 3)

    return {
        "matmul (vflbench)": lambda: torch.matmul(agg, proj().contiguous()) + bias[None, :, None, :],
        "broadcast mul-sum": lambda: (agg[..., None] * proj()[:, :, None]).sum(-2) + bias[None, :, None, :],
        "einsum": lambda: torch.einsum("bisj,bijc->bisc", agg, proj()) + bias[None, :, None, :],
    }


def bench(b: int, h: int, k: int, c: int, d: int, steps: int, rounds: int) -> None:
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(k, b, d, generator=g, requires_grad=True)
    w = torch.randn(h, d, c, generator=g, requires_grad=True)
    bias = torch.randn(h, c, generator=g, requires_grad=True)
    agg, wts = torch.rand(b, h, k, k, generator=g), torch.rand(b, h, k, generator=g)
    y = torch.randint(0, c, (b,), generator=g)
    fs = forms(emb, w, bias, agg)

    def step(f):
        lg = f()
        ce = torch.nn.functional.cross_entropy(
            lg.reshape(-1, c), y[:, None, None].expand(b, h, k).reshape(-1), reduction="none"
        )
        (ce.view(b, h, k) * wts).sum().backward()

    ref = fs["matmul (vflbench)"]()
    for name, f in fs.items():
        step(f)
        assert torch.allclose(f(), ref, atol=1e-5), name
    times = {name: [] for name in fs}
    for _ in range(rounds):
        for name, f in fs.items():
            t = time.perf_counter()
            for _ in range(steps):
                step(f)
            times[name].append((time.perf_counter() - t) / steps * 1e6)
    base = statistics.median(times["matmul (vflbench)"])
    print(f"B={b} heads={h} K={k} C={c} D={d}:")
    for name, v in times.items():
        print(
            f"  {name:20s} {statistics.median(v):8.1f} us/step  ({base / statistics.median(v):.2f}x the matmul's speed)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    bench(128, 4, 4, 2, 10, args.steps, args.rounds)  # Credit, compat: 4 heads, 4 blocks, 2 classes
    bench(128, 1, 8, 26, 128, args.steps, args.rounds)  # Isolet under the FALSE-VFL protocol: one head
    bench(128, 4, 4, 10, 64, args.steps, args.rounds)  # Fashion-MNIST quadrants


if __name__ == "__main__":
    main()
