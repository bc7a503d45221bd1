"""LASER-VFL's cost over Standard VFL per training epoch (the target: at most 1.2x), side by side.

    python benchmarks/laser_overhead.py            # Credit (compat and clean) and a CIFAR-10-shaped synthetic run
    python benchmarks/laser_overhead.py --cifar-batches 2 --rounds 3

Each line times one epoch of each method per round, the two interleaved (Standard VFL, LASER-VFL,
Standard VFL, ...), and reports the median over rounds of the per-round ratio. Credit runs one
intra-op thread (the product's default for tabular models) on the CPU. The CIFAR-10-shaped run is
the registered ``synthetic`` dataset with ``shape=3x32x32`` (10 classes), four parties of 16x16
tiles, ResNet-18-half extractors with a 1024-wide cut and batches of 1024 (the LASER-VFL Table 1
setting), on CUDA when present (``--device auto``'s rule for image models), else on the CPU with all
its threads, timing the first ``--cifar-batches`` batches of an epoch. ``make bench`` prints it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_methods import bench_dataset, paired_ratio  # noqa: E402

from vflbench.runs.devices import choose_device  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15, help="timed epochs per method, interleaved (Credit)")
    ap.add_argument("--cifar-rounds", type=int, default=3)
    ap.add_argument(
        "--cifar-batches",
        type=int,
        default=2,
        help="batches of 1024 timed per CIFAR-shaped epoch on a CPU (all on a GPU)",
    )
    ap.add_argument("--skip-cifar", action="store_true")
    a = ap.parse_args()
    lines = []
    torch.set_num_threads(1)
    for proto in ("compat", "clean"):
        rows = bench_dataset("credit", proto, "none", a.rounds, None, {}, methods=["svfl", "laser"])
        lines.append((f"Credit, {proto}, CPU, 1 thread", rows, paired_ratio(rows, "laser")))
    if not a.skip_cifar:
        dev, _ = choose_device("auto", "resnet18-half")
        torch.set_num_threads(os.cpu_count() or 1)
        n = 50_000 if dev.type == "cuda" else 1024 * (a.cifar_batches + 1) + 2048
        rows = bench_dataset(
            "synthetic",
            "compat",
            "none",
            a.cifar_rounds,
            None if dev.type == "cuda" else a.cifar_batches,
            {"batch_size": 1024},
            methods=["svfl", "laser"],
            data_options={"shape": "3x32x32", "n": n, "n_classes": 10, "test_size": 0.04},
            model={"arch": "resnet18-half", "cut": 1024},
            device=str(dev),
        )
        lines.append(
            (
                f"CIFAR-10-shaped synthetic, ResNet-18-half, {dev.type}"
                + ("" if dev.type == "cuda" else f", {torch.get_num_threads()} threads"),
                rows,
                paired_ratio(rows, "laser"),
            )
        )
    for what, rows, ratio in lines:
        s = {r["method"]: r["s_per_epoch"] for r in rows}
        ext = " (extrapolated from the first batches)" if rows[0]["extrapolated"] else ""
        print(
            f"LASER-VFL / Standard VFL per epoch, {what}: {ratio:.3f}x  (median s/epoch {s['laser']:.3f} vs "
            f"{s['svfl']:.3f}{ext}; "
            f"target <= 1.20: {'met' if ratio <= 1.2 else 'NOT met'})"
        )


if __name__ == "__main__":
    main()
