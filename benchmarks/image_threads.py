"""Intra-op threads for image runs, measured: the first ``--batches`` training batches of one image
method at 1 thread and at every core, interleaved (1, N, 1, N, ...) in one process, on an otherwise
idle machine. This is the measurement behind vflbench's default thread count for image runs (their
worker's share of the cores; tabular runs use one).

    python benchmarks/image_threads.py --method laser --batches 20 --rounds 4     # Fashion-MNIST quadrants

Prints seconds per batch at each thread count per round, the medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("VFLBENCH_DATA_MIRROR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))

from vflbench.runs.config import RunConfig, resolve  # noqa: E402
from vflbench.training import pipeline  # noqa: E402
from vflbench.training.trainer import StageHP, TrainSet, fit  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", default="laser")
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--arch", default=None, help="extractor (default: the preset's)")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="the many-thread side (default: every core)"
    )
    a = ap.parse_args()
    model = {"arch": a.arch} if a.arch else {}
    run = resolve(
        RunConfig(
            dataset=a.dataset,
            method=a.method,
            protocol="compat",
            train_missing="mcar:0.1",
            test_missing=["none"],
            model=model,
        )
    )
    inputs = pipeline.prepare(run, "cpu")
    method = pipeline.build(run, inputs)
    tr = inputs.train
    m = min(tr.blocks.n, a.batches * run.hp.batch_size)
    tr = TrainSet(tr.blocks.head(m), tr.y[:m], tr.obs[:m], None)
    one = {k: StageHP(**{**hp.as_dict(), "epochs": 1}) for k, hp in run.stage_hp.items()}
    args = (method, tr, one, pipeline.policy(run), inputs.prep.streams.seed_for)
    print(
        f"{run.method_display} on {a.dataset}, extractor {run.model['arch']}, batch {run.hp.batch_size}, first "
        f"{a.batches} batches; "
        f"1 thread against {a.threads}",
        flush=True,
    )
    torch.set_num_threads(1)
    fit(*args)  # warm-up
    per: dict[int, list[float]] = {1: [], a.threads: []}
    for r in range(a.rounds):
        for n in (1, a.threads):
            torch.set_num_threads(n)
            per[n].append(sum(fit(*args).seconds) / a.batches)
        print(
            f"round {r + 1}: 1 thread {per[1][-1] * 1e3:.1f} ms/batch, {a.threads} threads "
            f"{per[a.threads][-1] * 1e3:.1f} ms/batch",
            flush=True,
        )
    one_t, many = statistics.median(per[1]), statistics.median(per[a.threads])
    ratios = [x / y for x, y in zip(per[1], per[a.threads], strict=True)]
    print(
        f"median: 1 thread {one_t * 1e3:.1f} ms/batch, {a.threads} threads {many * 1e3:.1f} ms/batch; "
        f"{a.threads} threads {one_t / many:.2f}x faster ({min(ratios):.2f}-{max(ratios):.2f}x)"
    )


if __name__ == "__main__":
    main()
