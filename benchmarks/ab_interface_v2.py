"""Speed gate of the method-interface refactor: epochs of the v1 code (git revision ``--base``,
default 8dfce91, the last commit before interface v2) against the working tree, in ONE process.

    python benchmarks/ab_interface_v2.py                       # Credit, 6 methods, 20 pairs each
    python benchmarks/ab_interface_v2.py --fmnist-batches 20   # also Fashion-MNIST (first 20 batches)

Why one process: on a shared 2-core VM the machine's speed drifts by up to 2x within minutes, so
two benchmark runs taken a few minutes apart (or two processes) compare the machine, not the code.
Here the base revision is exported with ``git archive`` under another package name (``vflbench_v1``;
its imports are relative) and both versions build the same method on the same data and masks; then
each round times one epoch of each, alternating which goes first (ABBA). Reported: per method the
median of the per-pair ratios new/old and its inter-quartile range. An A/A control (``--control``:
the new code against itself) shows the harness's own spread.

Equal work: the v1 code had no ``stale_updates``, so the new side runs with it off (the refactor is
timed, not the later faithful change of behaviour). Threads: 1 (``torch.set_num_threads``).
Not a test: numbers depend on the machine; issue notes quote them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VFLBENCH_DATA_MIRROR", str(ROOT.parent / "shared" / "data"))

from vflbench.runs.config import RunConfig, resolve  # noqa: E402
from vflbench.training import pipeline  # noqa: E402
from vflbench.training.trainer import StageHP, TrainSet, fit  # noqa: E402

METHODS = ["local", "svfl", "ensemble", "combinatorial", "plug", "laser"]


def export_base(rev: str, dest: Path) -> None:
    """``git archive REV vflbench`` unpacked as ``dest/vflbench_v1``."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "vflbench"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    (dest / "vflbench").rename(dest / "vflbench_v1")


def new_epoch(dataset: str, name: str, max_batches: int | None):
    run = resolve(
        RunConfig(
            dataset=dataset,
            method=name,
            train_missing="none",
            test_missing=["mcar:0.5"],
            protocol="compat",
            protocol_options={"stale_updates": False},
            hp={"batch_size": 128} if dataset != "credit" else {},
        )
    )
    inputs = pipeline.prepare(run, "cpu")
    method = pipeline.build(run, inputs)
    tr = inputs.train
    if max_batches:
        m = max_batches * run.hp.batch_size
        tr = TrainSet(tr.blocks.head(m), tr.y[:m], tr.obs[:m], None)
    one = {k: StageHP(**{**hp.as_dict(), "epochs": 1}) for k, hp in run.stage_hp.items()}
    args = (method, tr, one, pipeline.policy(run), inputs.prep.streams.seed_for)
    return lambda: sum(fit(*args).seconds)


def old_epoch(v1, dataset: str, name: str, max_batches: int | None):
    runner, setup, training, methods, models = (
        importlib.import_module(f"vflbench_v1.{m}") for m in ("runner", "setup", "training", "methods", "models")
    )
    r = runner.resolve(
        runner.RunConfig(
            dataset=dataset,
            method=name,
            train_missing="none",
            test_missing=["mcar:0.5"],
            protocol="compat",
            hp={"batch_size": 128} if dataset != "credit" else {},
        )
    )
    prep = setup.prepare(dataset, r["data_options"], 4, r["partitioner"], {}, 0)
    hp, proto = dict(r["hp"]), r["protocol"]
    bs = int(hp["batch_size"])
    xtr, ytr = prep.data.x_train, prep.data.y_train
    if max_batches:
        xtr, ytr = xtr[: max_batches * bs], ytr[: max_batches * bs]
    m_tr = setup.draw_masks(prep, "none", split="train", granularity=proto["train_granularity"], batch_size=bs)
    dev = torch.device("cpu")
    spec = r["model"]
    ctx = methods.MethodContext(
        k=4,
        n_classes=prep.data.n_classes,
        widths=prep.partition.widths(),
        in_ch=int(xtr.shape[1]) if xtr.ndim == 4 else 1,
        model=models.ModelSpec(spec["arch"], spec["cut"], tuple(spec.get("hidden", ()))),
        device=dev,
        streams=prep.streams,
        hp=hp,
        options=r["method_options"],
        positive_class=prep.data.info.positive_class,
    )
    method = methods.METHODS.get(name)(ctx)
    hp["epochs"] = 1
    args = (
        method,
        training.BlockData(xtr, prep.partition, dev),
        torch.as_tensor(ytr),
        torch.as_tensor(m_tr.observed[: len(ytr)]),
        hp,
        proto,
        prep.streams.seed_for,
    )
    return lambda: training.fit(*args).seconds[0]


def pairs(a, b, rounds: int) -> list[tuple[float, float]]:
    a(), b()  # warm-up epochs
    out = []
    for r in range(rounds):
        if r % 2 == 0:
            ta = a()
            tb = b()
        else:
            tb = b()
            ta = a()
        out.append((ta, tb))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="8dfce91", help="git revision of the v1 code")
    ap.add_argument("--rounds", type=int, default=20, help="timed pairs of epochs per method")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument(
        "--fmnist-batches", type=int, default=0, help="also Fashion-MNIST, this many batches per timed epoch (0: skip)"
    )
    ap.add_argument("--skip-credit", action="store_true")
    ap.add_argument("--control", action="store_true", help="A/A: the working tree against itself")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="vflbench-ab-"))
    v1 = None
    if not args.control:
        export_base(args.base, tmp)
        sys.path.insert(0, str(tmp))
        v1 = importlib.import_module("vflbench_v1")
    jobs = ([] if args.skip_credit else [("credit", None)]) + (
        [("fashion-mnist", args.fmnist_batches)] if args.fmnist_batches else []
    )
    print(
        f"{'A/A control' if args.control else f'v1 ({args.base}) vs working tree'}; 1 thread; {args.rounds} ABBA "
        "pairs per method; "
        "ratio = new/old per pair"
    )
    print(f"{'dataset':14s} {'method':14s} {'old s/epoch':>11s} {'new s/epoch':>11s} {'median ratio':>12s}  IQR")
    t0 = time.perf_counter()
    for dataset, mb in jobs:
        for name in args.methods.split(","):
            b = new_epoch(dataset, name, mb)
            a = new_epoch(dataset, name, mb) if args.control else old_epoch(v1, dataset, name, mb)
            ts = pairs(a, b, args.rounds)
            rs = sorted(tb / ta for ta, tb in ts)
            q = len(rs) // 4
            print(
                f"{dataset:14s} {name:14s} {statistics.median(t for t, _ in ts):11.3f} "
                f"{statistics.median(t for _, t in ts):11.3f} "
                f"{statistics.median(rs):12.3f}  [{rs[q]:.3f}, {rs[-1 - q]:.3f}]",
                flush=True,
            )
    print(f"wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
