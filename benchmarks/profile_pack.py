"""Where a packed training step's time goes: cProfile over a few epochs of one pack (LASER-VFL on
Credit by default, compat, one thread), reduced to the parts of a step.

    python benchmarks/profile_pack.py --seeds 5 --train-missing none,mcar:0.1,mcar:0.2 --epochs 3

Prints the milliseconds per step (profiler on, so every figure is inflated alike) of the autograd
backward, the vmapped loss, pytree flattening (inside ``torch.func.vmap``), the masked optimiser
step, the batch gather, and the whole training loop.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

import torch

from vflbench.runs.config import RunConfig, resolve
from vflbench.training.pipeline import execute_pack

PARTS = {  # (file suffix, function name) -> label
    ("training.py", "fit"): "training loop, whole",
    ("", "<method 'run_backward' of 'torch._C._EngineBase' objects>"): "autograd backward",
    ("packing.py", "_member_loss"): "the method's loss under vmap",
    ("_pytree.py", "tree_flatten"): "pytree flattening",
    ("optim.py", "step"): "masked optimiser step",
    ("packing.py", "batches"): "batch gather",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", default="laser")
    ap.add_argument("--dataset", default="credit")
    ap.add_argument("--protocol", default="compat")
    ap.add_argument(
        "--train-missing",
        default="none,mcar:0.1,mcar:0.2",
        help="comma-separated; the pack holds every seed under every setting",
    )
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
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
    execute_pack(runs[:1], device="cpu")  # warm-up: imports, data cache
    prof = cProfile.Profile()
    prof.enable()
    execute_pack(runs, device="cpu")
    prof.disable()
    stats = pstats.Stats(prof).stats
    found = {}
    for (file, _, name), (_, _, _, cum, _) in stats.items():
        for (suffix, fn), label in PARTS.items():
            if name == fn and file.endswith(suffix):
                found[label] = found.get(label, 0.0) + cum
    calls = next(c for (_, _, name), (c, *_) in stats.items() if name == "_member_loss")  # one call per step
    print(
        f"{a.method} on {a.dataset}, {a.protocol}: a pack of {len(runs)}, {a.epochs} epochs, {calls} steps, 1 thread, "
        "cProfile on"
    )
    for label in PARTS.values():
        if label in found:
            print(f"  {label:32s} {found[label] / calls * 1e3:6.2f} ms per step")


if __name__ == "__main__":
    main()
