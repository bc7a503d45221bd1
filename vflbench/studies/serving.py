"""What a latency deadline costs each method (issue "serving"): results/serving/.

For each dataset and method, one model is trained under MCAR 0.5 with ``--save-model`` (seed 0, the method's default
preset), then served in one process (``vflbench.serving``: the same batching, deadline gather and prediction as
``vflbench serve``, without HTTP) under two delay scenarios:

* ``straggler``: the last party answers after lognormal(median 100 ms, sigma 0.5), the others after
  lognormal(median 5 ms, sigma 0.3);
* ``jitter``: every party answers after lognormal(median 30 ms, sigma 0.8).

At each deadline (5, 20, 50, 100, 200, 1000 ms) the same 100 requests of 64 test rows each (drawn once from seed 0)
are sent one after the other; F1 and accuracy are scored over their 6,400 rows (a row that no party answered in time
for, predicted -1, counts as wrong), latency is each request's time in the server (``latency_ms``, as the endpoint
reports it), ``answered`` the mean share of parties in time and ``answered_rows`` the share of rows with an answer.
A last row per method, ``lost``, serves with the last party dead (a 1,000 ms deadline). Writes serving.csv (the
measurements), summary.md (F1 and p99 latency per deadline) and serving.png/.pdf (the same against the deadline).

    vflbench report results/serving --run     # train (once: models/ is reused) and measure, then the report
    vflbench report results/serving           # summary.md and the figure from serving.csv
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import VFLBenchError
from ..methods.base import display_name
from .registry import register

DEADLINES = (5, 20, 50, 100, 200, 1000)
METHODS = ("laser", "svfl", "plug", "ensemble", "secureboost")
PARTIES = {"credit": 4, "phishing": 5}


def scenarios(k: int) -> dict[str, list[str]]:
    return {
        "straggler": ["lognormal:median=5,sigma=0.3", f"party{k - 1}=lognormal:median=100,sigma=0.5"],
        "jitter": ["lognormal:median=30,sigma=0.8"],
    }


def train(dataset: str, method: str, out: Path) -> Path:
    folder = out / "models" / f"{dataset}_{method}"
    done = list(folder.glob("*/model/model.json"))
    if done:
        return done[0].parent.parent
    cmd = [sys.executable, "-m", "vflbench", "run", "--dataset", dataset, "--method", method, "--parties",
           str(PARTIES[dataset]), "--train-missing", "mcar:0.5", "--test-missing", "none,mcar:0.5", "--seed", "0",
           "--save-model", "--quiet", "--out", str(folder)]  # fmt: skip
    subprocess.run(cmd, check=True)
    return next(folder.glob("*/model/model.json")).parent.parent


def f1_acc(pred: np.ndarray, y: np.ndarray, positive: int) -> tuple[float, float, float]:
    """F1 and accuracy over every requested row (a row no party answered in time, predicted -1, is a wrong answer and
    not a positive one), and the share of rows that got an answer."""
    from sklearn.metrics import f1_score

    hit = pred == y
    return (
        100 * float(f1_score(y == positive, pred == positive, zero_division=0)),
        100 * float(hit.mean()),
        float((pred >= 0).mean()),
    )


def row(ds, method, scenario, deadline, pred, truth, positive, lat, share, t0) -> dict:
    f1, acc, answered_rows = f1_acc(pred, truth, positive)
    return {
        "dataset": ds,
        "method": method,
        "scenario": scenario,
        "deadline_ms": deadline,
        "f1": f1,
        "accuracy": acc,
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "answered": share,
        "answered_rows": answered_rows,
        "requests": len(lat),
        "rows": len(pred),
        "seconds": time.perf_counter() - t0,
    }


async def measure(served, delays, deadline: float, requests: list[np.ndarray], lost: int | None = None):
    from ..serving.app import Server
    from ..serving.federation import InProcessParties, Link

    parties = InProcessParties(served, delays, Link(), seed=0)
    if lost is not None:
        parties.down.add(lost)
    server = Server(served, parties, deadline, batch_window_ms=0.0)
    await server.start()
    await server.submit(requests[0], requests[0].tolist(), "row")  # a warm-up request, not measured
    parties.rng = np.random.default_rng(0)  # the same delay draws for every method
    preds, lat, answered = [], [], []
    for rows in requests:
        out = await server.submit(rows, rows.tolist(), "row")
        preds.append([p["predicted"] for p in out["predictions"]])
        lat.append(out["latency_ms"])
        answered.append(len(out["predictions"][0]["parties"]) / served.k)
    await server.stop()
    return np.concatenate(preds), np.asarray(lat), float(np.mean(answered))


def run(folder: Path, workers: int = 1, n_requests: int = 100, n_rows: int = 64) -> None:
    """Train each dataset's and method's model (reused when models/ has it) and measure it: serving.csv."""
    from ..serving.federation import Served, parse_delays

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    rows_out = []
    for ds in PARTIES:
        for method in METHODS:
            run_dir = train(ds, method, out)
            served = Served(run_dir)
            y = served.inputs.y_test
            rng = np.random.default_rng(0)
            requests = [rng.choice(served.n_test, n_rows, replace=False) for _ in range(n_requests)]
            truth = np.concatenate([y[r] for r in requests])
            positive = served.positive if served.positive is not None else 1
            for name, spec in scenarios(served.k).items():
                delays = parse_delays(spec, served.k)
                for deadline in DEADLINES:
                    t0 = time.perf_counter()
                    pred, lat, share = asyncio.run(measure(served, delays, deadline, requests))
                    rows_out.append(row(ds, method, name, deadline, pred, truth, positive, lat, share, t0))
                    print(json.dumps(rows_out[-1]), flush=True)
            t0 = time.perf_counter()
            lost = served.k - 1
            pred, lat, share = asyncio.run(measure(served, parse_delays([], served.k), 1000, requests, lost=lost))
            rows_out.append(row(ds, method, "lost", 1000, pred, truth, positive, lat, share, t0))
            print(json.dumps(rows_out[-1]), flush=True)
            pd.DataFrame(rows_out).to_csv(out / "serving.csv", index=False)
    pd.DataFrame(rows_out).to_csv(out / "serving.csv", index=False)


def plot(df, stem: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(df["dataset"]))
    scen = ["straggler", "jitter"]
    fig, axes = plt.subplots(2 * len(datasets), 2, figsize=(10, 4.2 * len(datasets)), squeeze=False)
    for i, ds in enumerate(datasets):
        for j, sc in enumerate(scen):
            g = df[(df["dataset"] == ds) & (df["scenario"] == sc)]
            for m, h in g.groupby("method", sort=False):
                axes[2 * i, j].plot(h["deadline_ms"], h["f1"], marker="o", label=display_name(m))
                axes[2 * i + 1, j].plot(h["deadline_ms"], h["p99_ms"], marker="o", label=display_name(m))
            axes[2 * i, j].set(xscale="log", title=f"{ds}, {sc}: F1", xlabel="deadline (ms)", ylabel="F1 x 100")
            axes[2 * i + 1, j].set(
                xscale="log", yscale="log", title=f"{ds}, {sc}: p99 latency", xlabel="deadline (ms)", ylabel="ms"
            )
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(f"{stem}.{ext}", dpi=120)


def _measured(folder: Path) -> pd.DataFrame:
    if not (Path(folder) / "serving.csv").exists():
        raise VFLBenchError(f"{folder} has no serving.csv yet: vflbench report {folder} --run")
    return pd.read_csv(Path(folder) / "serving.csv")


def _figures(folder: Path) -> list[Path]:
    plot(_measured(folder), Path(folder) / "serving")
    return [Path(folder) / "serving.png", Path(folder) / "serving.pdf"]


@register("serving", "summary.md and serving.png/.pdf: F1 and p99 latency against the deadline", _figures, run)
def build(folder: Path) -> dict[str, str]:
    df = _measured(folder)
    lines = ["# What a deadline costs each method (from serving.csv; `vflbench report results/serving`)", ""]
    for (ds, sc), g in df.groupby(["dataset", "scenario"], sort=False):
        deadlines = list(dict.fromkeys(g["deadline_ms"]))
        lines += [f"## {ds}, {sc}: F1 x 100 / p99 ms by deadline (ms)", ""]
        lines += ["| method | " + " | ".join(f"{d:g}" for d in deadlines) + " |", "|---|" + "---|" * len(deadlines)]
        for m, h in g.groupby("method", sort=False):
            cell = h.set_index("deadline_ms")
            lines.append(
                f"| {display_name(m)} | "
                + " | ".join(f"{cell.loc[d, 'f1']:.1f} / {cell.loc[d, 'p99_ms']:.0f}" for d in deadlines)
                + " |"
            )
        lines.append("")
    return {"summary.md": "\n".join(lines)}
