"""Seconds per training epoch and per evaluation for every method.

    python benchmarks/bench_methods.py                 # Credit (K=4, batch 128) + Fashion-MNIST quadrants
    python benchmarks/bench_methods.py --full-run      # also time a whole 100-epoch LASER Credit run (CLI)

Credit epochs are timed whole (semi-supervised methods, FALSE-VFL, with the paper's 500 labeled and 100 aligned samples:
one epoch of each stage): after a warm-up epoch, one epoch per method per round, interleaved,
median over ``--rounds``. Fashion-MNIST epochs
are timed on the first ``--fmnist-batches`` batches and scaled to the 469 batches of a full epoch
(stated in the table). Evaluation is one pass over the test set under one test setting.
Not a test: numbers depend on the machine; the README and issue notes quote them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("VFLBENCH_DATA_MIRROR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))

from vflbench.methods import METHODS  # noqa: E402
from vflbench.runs.config import RunConfig, resolve  # noqa: E402
from vflbench.training import pipeline  # noqa: E402
from vflbench.training.trainer import StageHP, TrainSet, fit, predict  # noqa: E402


def bench_dataset(
    dataset: str,
    protocol: str,
    train_missing: str,
    rounds: int,
    max_batches: int | None,
    hp_over: dict,
    protocol_options: dict | None = None,
    methods: list[str] | None = None,
    data_options: dict | None = None,
    model: dict | None = None,
    device: str = "cpu",
) -> list[dict]:
    """Build every method through the run pipeline (same data and masks), then time one epoch of
    each method per round, interleaved (so machine-speed drift hits all methods alike); report the
    median over rounds."""
    setups = []
    names = [
        m
        for m in METHODS.names()
        if METHODS.get(m).__module__.startswith("vflbench.") and (not methods or m in methods)
    ]
    for name in names:
        semi = (
            {"labeled": 500, "aligned": 100} if METHODS.get(name).needs_labeled else {}
        )  # FALSE-VFL: the paper's split
        run = resolve(
            RunConfig(
                dataset=dataset,
                method=name,
                train_missing=train_missing,
                test_missing=["mcar:0.5"],
                protocol=protocol,
                protocol_options=dict(protocol_options or {}),
                hp=hp_over,
                data_options=dict(data_options or {}),
                model=dict(model or {}),
                **semi,
            )
        )
        inputs = pipeline.prepare(run, device)
        method = pipeline.build(run, inputs)
        tr = inputs.train
        full_batches = -(-tr.blocks.n // run.hp.batch_size)
        if max_batches:  # time the first batches only (image data), scaled to a full epoch below
            m = min(tr.blocks.n, max_batches * run.hp.batch_size)
            tr = TrainSet(tr.blocks.head(m), tr.y[:m], tr.obs[:m], None)
        one_epoch = {k: StageHP(**{**hp.as_dict(), "epochs": 1}) for k, hp in run.stage_hp.items()}
        args = (method, tr, one_epoch, pipeline.policy(run), inputs.prep.streams.seed_for)
        fit(*args)  # warm-up epoch
        obs_te = torch.as_tensor(inputs.test_masks["mcar:0.5"].observed, device=inputs.device)
        setups.append(
            (name, run, method, args, inputs.test, obs_te, full_batches / max_batches if max_batches else 1.0)
        )
    times: dict[str, list[float]] = {n: [] for n in names}
    evals: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(rounds):
        for name, run, method, args, te, obs_te, scale in setups:
            times[name].append(sum(fit(*args).seconds) * scale)
            t = time.perf_counter()
            predict(method, te, obs_te, run.eval_batch_size)
            evals[name].append(time.perf_counter() - t)
    return [
        {
            "dataset": dataset,
            "method": name,
            "display": run.method_display,
            "s_per_epoch": statistics.median(times[name]),
            "s_per_eval": statistics.median(evals[name]),
            "params": method.n_params(),
            "extrapolated": scale != 1.0,
            "epoch_s": times[name],
        }
        for name, run, method, _, _, _, scale in setups
    ]


def paired_ratio(rows: list[dict], method: str, base: str = "svfl") -> float:
    """Median over rounds of (method's epoch / base's epoch in the same round): timed side by side, so
    machine-speed drift between rounds cancels (a ratio of medians does not pair them)."""
    a = next(r for r in rows if r["method"] == method)["epoch_s"]
    b = next(r for r in rows if r["method"] == base)["epoch_s"]
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="timed epochs per method (interleaved)")
    ap.add_argument("--fmnist-batches", type=int, default=30)
    ap.add_argument("--train-missing", default="none")
    ap.add_argument("--protocol", default="compat")
    ap.add_argument(
        "--protocol-opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one protocol option, e.g. stale_updates=false (to compare with code that had none)",
    )
    ap.add_argument("--skip-fmnist", action="store_true")
    ap.add_argument("--full-run", action="store_true", help="also time `vflbench run` for 100-epoch LASER on Credit")
    ap.add_argument("--methods", default="", help="comma-separated method names (default: every method)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("VFLBENCH_THREADS", torch.get_num_threads())))
    popts = {}
    for kv in args.protocol_opt:
        k, _, v = kv.partition("=")
        popts[k] = {"true": True, "false": False}.get(v.lower(), v)
    only = [m.strip() for m in args.methods.split(",") if m.strip()] or None
    rows = bench_dataset("credit", args.protocol, args.train_missing, args.rounds, None, {}, popts, only)
    if not args.skip_fmnist:
        rows += bench_dataset(
            "fashion-mnist", args.protocol, args.train_missing, 2, args.fmnist_batches, {"batch_size": 128}, popts, only
        )
    con = Console()
    t = Table(
        title=f"vflbench speed ({args.protocol}, train missing {args.train_missing}, {torch.get_num_threads()} "
        f"threads, {os.cpu_count()} cores)"
    )
    for c in ("dataset", "method", "s/epoch", "s/eval", "x SVFL epoch (paired)", "params"):
        t.add_column(c, justify="right" if c not in ("dataset", "method") else "left")
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        for r in (r for r in rows if r["dataset"] == ds):
            r["ratio_to_svfl"] = paired_ratio([x for x in rows if x["dataset"] == ds], r["method"])
            t.add_row(
                ds + (" (extrapolated)" if r["extrapolated"] else ""),
                r["display"],
                f"{r['s_per_epoch']:.3f}",
                f"{r['s_per_eval']:.3f}",
                f"{r['ratio_to_svfl']:.2f}",
                str(r["params"]),
            )
    con.print(t)
    result = {"rows": rows}
    if args.full_run:
        cmd = [
            sys.executable,
            "-m",
            "vflbench",
            "run",
            "--dataset",
            "credit",
            "--method",
            "laser",
            "--train-missing",
            "mcar:0.1",
            "--test-missing",
            "none,mcar:0.1,mcar:0.5,mcar-beta:2,2",
            "--protocol",
            "compat",
            "--quiet",
            "--out",
            "/tmp/vflbench-bench",
        ]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        wall = time.perf_counter() - t0
        con.print(
            f"full 100-epoch LASER Credit run (compat, 4 test settings, process start to exit): {wall:.1f} s "
            "(against the authors' code: benchmarks/vs_authors.py, interleaved in one session)"
        )
        result["full_run_s"] = wall
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
