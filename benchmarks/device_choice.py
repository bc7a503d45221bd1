"""The measurement behind ``--device auto`` (vflbench/runs/devices.py): seconds per training epoch of a
tabular run, a pack of tabular runs and an image run, on every device this host has, side by side.

    python benchmarks/device_choice.py                 # Credit LASER-VFL alone and in packs of 4/16, CIFAR-10-shaped
    ResNet-18-half
    python benchmarks/device_choice.py --rounds 5 --packs 1,4,16,64

Per workload and device: one warm-up epoch, then ``--rounds`` epochs interleaved across devices,
median. The tabular rows run one intra-op thread on the CPU (the product's default for tabular
models: a sweep gives each worker one); the image rows all threads. The last column says which
device ``--device auto`` picks for the workload and whether the measurement agrees. On a host without
CUDA only the CPU rows print, and the rule's tabular/image split rests on the GPU measurement quoted
in vflbench/runs/devices.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vflbench.runs.config import RunConfig, resolve  # noqa: E402
from vflbench.runs.devices import choose_device  # noqa: E402
from vflbench.training import pipeline  # noqa: E402
from vflbench.training.packing import VectorisedStep  # noqa: E402
from vflbench.training.trainer import StageHP, fit  # noqa: E402


def epoch_timer(runs, device: str, max_batches: int | None = None):
    """A function that trains one epoch of ``runs`` (a pack when several) on ``device``; returns seconds."""
    inputs = [pipeline.prepare(r, device) for r in runs]
    methods = [pipeline.build(r, i) for r, i in zip(runs, inputs, strict=True)]
    sets = [i.train for i in inputs]
    scale = 1.0
    if max_batches:  # time the first batches, scaled to the full epoch
        from vflbench.training.trainer import TrainSet

        full = -(-sets[0].blocks.n // runs[0].hp.batch_size)
        m = max_batches * runs[0].hp.batch_size
        sets = [TrainSet(s.blocks.head(m), s.y[:m], s.obs[:m], None) for s in sets]
        scale = full / max_batches
    one = {k: StageHP(**{**hp.as_dict(), "epochs": 1}) for k, hp in runs[0].stage_hp.items()}
    policy = pipeline.policy(runs[0])
    seeds = [i.prep.streams.seed_for for i in inputs]

    def run_epoch() -> float:
        if len(runs) == 1:
            return sum(fit(methods[0], sets[0], one, policy, seeds[0]).seconds) * scale
        return sum(fit(methods, sets, one, policy, seeds, [[] for _ in runs], step=VectorisedStep)[0].seconds) * scale

    run_epoch()  # warm-up
    return run_epoch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--packs", default="1,4,16", help="pack widths of the tabular workload")
    ap.add_argument(
        "--image-batches",
        type=int,
        default=2,
        help="batches of 1024 per image epoch on a CPU (a GPU times the whole epoch)",
    )
    a = ap.parse_args()
    devices = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
    workloads = []
    for width in [int(x) for x in a.packs.split(",")]:
        runs = [
            resolve(RunConfig(dataset="credit", method="laser", test_missing=["none"], seed=s)) for s in range(width)
        ]
        workloads.append(
            (f"Credit LASER-VFL, pack of {width}" if width > 1 else "Credit LASER-VFL", runs, "mlp", None, 1)
        )
    image = resolve(
        RunConfig(
            dataset="synthetic",
            method="laser",
            test_missing=["none"],
            hp={"batch_size": 1024},
            data_options={
                "shape": "3x32x32",
                "n": 1024 * (a.image_batches + 1) + 2048,
                "n_classes": 10,
                "test_size": 0.04,
            },
            model={"arch": "resnet18-half", "cut": 1024},
        )
    )
    workloads.append(
        ("CIFAR-10-shaped LASER-VFL, ResNet-18-half", [image], "resnet18-half", a.image_batches, os.cpu_count() or 1)
    )
    print(f"{'workload':45s} {'device':6s} {'s/epoch':>9s} {'s/epoch/run':>12s}  auto")
    for name, runs, arch, batches, threads in workloads:
        torch.set_num_threads(threads)
        timers = {d: epoch_timer(runs, d, batches if d == "cpu" else None) for d in devices}
        times = {d: [] for d in devices}
        for _ in range(a.rounds):
            for d in devices:
                times[d].append(timers[d]())
        med = {d: statistics.median(times[d]) for d in devices}
        picked = choose_device("auto", arch)[0].type
        for d in devices:
            note = ""
            if d == picked:
                fastest = min(med, key=med.get)
                note = "<- auto" + (
                    "" if len(devices) == 1 else (" (fastest)" if fastest == d else f" (slower than {fastest})")
                )
            ext = f" (first {batches} batches, scaled to the epoch)" if batches and d == "cpu" else ""
            print(f"{name:45s} {d:6s} {med[d]:9.3f} {med[d] / len(runs):12.3f}  {note}{ext}")


if __name__ == "__main__":
    main()
