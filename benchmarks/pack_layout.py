"""The layout of a pack's batched products, measured: training epochs of one pack with the affine maps
posed as ``x @ W`` (``torch.baddbmm`` on N x K tall-thin products) against ``(W^T x^T)^T`` (what
packing uses, see ``vflbench.nn.models.affine``), interleaved in one process at one intra-op thread.

    python benchmarks/pack_layout.py --method laser --seeds 5 --train-missing none,mcar:0.1 --rounds 4
    python benchmarks/pack_layout.py --method svfl --seeds 5 --train-missing none,mcar:0.1,mcar:0.5
    python benchmarks/pack_layout.py --gemm     # only the bare batched products, both layouts

Each round trains the pack for ``--epochs`` epochs in each layout and keeps its fastest epoch; prints
the medians, their ratio, and whether seed 0's final training loss agrees between the layouts.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import vflbench.nn.models as models
from vflbench.runs.config import RunConfig, resolve
from vflbench.training.pipeline import execute_pack


def gemm(rounds: int = 5, calls: int = 300) -> None:
    """The bare batched products of a 15-run LASER-VFL Credit pack's extractors (15 x 4 products of a
    128-row batch by a small weight), posed ``x @ W`` and ``W^T x^T``; microseconds per call."""
    import time

    for rows, inner, out in ((128, 10, 10), (128, 6, 10), (512, 8, 10)):
        x, w = torch.randn(60, rows, inner), torch.randn(60, inner, out)
        xt, wt = x.transpose(1, 2).contiguous(), w.transpose(1, 2).contiguous()
        per: dict[str, list[float]] = {"x @ W": [], "W^T x^T": []}
        for _ in range(rounds):
            for name, (left, right) in (("x @ W", (x, w)), ("W^T x^T", (wt, xt))):
                for _ in range(20):
                    torch.bmm(left, right)
                t = time.perf_counter()
                for _ in range(calls):
                    torch.bmm(left, right)
                per[name].append((time.perf_counter() - t) / calls * 1e6)
        a, b = statistics.median(per["x @ W"]), statistics.median(per["W^T x^T"])
        print(
            f"60 products [{rows}, {inner}] @ [{inner}, {out}]: x @ W {a:.0f} us, W^T x^T {b:.0f} us per call "
            f"({a / b:.1f}x)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", default="laser")
    ap.add_argument("--dataset", default="credit")
    ap.add_argument("--protocol", default="compat")
    ap.add_argument(
        "--train-missing",
        default="none,mcar:0.1",
        help="comma-separated; the pack holds every seed under every setting",
    )
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument(
        "--gemm", action="store_true", help="time only the bare batched products (interleaved, medians of 5 rounds)"
    )
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.gemm:
        gemm()
        return
    runs = [
        resolve(
            RunConfig(
                dataset=a.dataset,
                method=a.method,
                protocol=a.protocol,
                train_missing=tm,
                test_missing=["none"],
                seed=s,
                hp={"epochs": a.epochs},
            )
        )
        for tm in a.train_missing.split(",")
        for s in range(a.seeds)
    ]
    print(
        f"{a.method} on {a.dataset}, {a.protocol}, a pack of {len(runs)} (seeds 0-{a.seeds - 1} x {a.train_missing}), "
        "1 thread",
        flush=True,
    )
    original = models.affine
    times: dict[bool, list[float]] = {False: [], True: []}
    losses: dict[bool, float] = {}
    for r in range(a.rounds):
        for wide in (False, True):
            models.affine = lambda bias, x, w, transposed=False, wide=wide: original(bias, x, w, wide)  # noqa: E731
            try:
                out = execute_pack(runs, device="cpu")
            finally:
                models.affine = original
            hist = out[0][1]["history"]
            times[wide].append(min(hist["seconds"]))
            losses[wide] = hist["loss"][-1]
        print(
            f"round {r + 1}: x @ W {times[False][-1]:.3f} s, (W^T x^T)^T {times[True][-1]:.3f} s per epoch", flush=True
        )
    a_, b_ = statistics.median(times[False]), statistics.median(times[True])
    ratios = [x / y for x, y in zip(times[False], times[True], strict=True)]
    print(
        f"median epoch: x @ W {a_:.3f} s, (W^T x^T)^T {b_:.3f} s: {a_ / b_:.2f}x "
        f"({min(ratios):.2f}-{max(ratios):.2f}x); "
        f"seed 0's last loss {losses[False]:.9f} vs {losses[True]:.9f}"
    )


if __name__ == "__main__":
    main()
