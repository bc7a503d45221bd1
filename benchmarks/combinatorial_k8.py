"""Combinatorial at K = 8 against Standard VFL (the target: at most 300x Standard VFL's training time), and what the
masked optimiser's per-member step gives, side by side with a base revision's optimiser in one process.

    python benchmarks/combinatorial_k8.py                       # base revision 2c69462 (before the per-member step)
    python benchmarks/combinatorial_k8.py --rounds 3 --methods svfl,laser,combinatorial

One epoch of each method on Isolet under the FALSE-VFL protocol (K = 8, MCAR 0.2, 1,280 training samples), one
intra-op thread, the base revision's ``MaskedOptimizer`` and the working tree's alternating (ABBA) per round.
Reported: the median training seconds of each, Combinatorial over Standard VFL with each optimiser, and new over
base per method. The base class is read with ``git show`` (a git checkout is needed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("VFLBENCH_DATA_MIRROR", str(ROOT.parent / "shared" / "data"))

from optimizer_step import base_optimizer  # noqa: E402

from vflbench.nn import optim  # noqa: E402
from vflbench.runs.config import RunConfig, resolve  # noqa: E402
from vflbench.training import pipeline, trainer  # noqa: E402


def train_seconds(method: str, cls) -> float:
    trainer.MaskedOptimizer = cls
    run = resolve(
        RunConfig(
            dataset="isolet",
            method=method,
            protocol="false",
            parties=8,
            hp={"epochs": 1},
            train_missing="mcar:0.2",
            test_missing=["none"],
            train_samples=1280,
        )
    )
    _, manifest = pipeline.execute(run, device="cpu")
    return float(manifest["timings"]["train_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="2c69462")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--methods", default="svfl,combinatorial")
    a = ap.parse_args()
    torch.set_num_threads(1)
    os.environ["VFLBENCH_THREADS"] = "1"
    classes = {"base": base_optimizer(a.base), "new": optim.MaskedOptimizer}
    methods = a.methods.split(",")
    secs = {(m, k): [] for m in methods for k in classes}
    for r in range(a.rounds):
        order = list(classes) if r % 2 == 0 else list(reversed(classes))
        for m in methods:
            for k in order:
                secs[(m, k)].append(train_seconds(m, classes[k]))
    trainer.MaskedOptimizer = optim.MaskedOptimizer
    med = {key: statistics.median(v) for key, v in secs.items()}
    print(f"Isolet, FALSE-VFL protocol, K=8, MCAR 0.2, 1,280 samples, 1 epoch; {a.rounds} rounds; base {a.base}")
    for m in methods:
        print(f"{m:14} base {med[(m, 'base')]:8.2f} s   new {med[(m, 'new')]:8.2f} s   new/base "
              f"{med[(m, 'new')] / med[(m, 'base')]:.3f}")  # fmt: skip
    if "svfl" in methods:
        for m in methods:
            if m != "svfl":
                print(f"{m} / svfl: base {med[(m, 'base')] / med[('svfl', 'base')]:.0f}x, "
                      f"new {med[(m, 'new')] / med[('svfl', 'new')]:.0f}x")  # fmt: skip


if __name__ == "__main__":
    main()
