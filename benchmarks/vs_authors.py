"""Time one full LASER-VFL Credit run of vflbench against the LASER-VFL authors' public code,
interleaved (A B A B ...), each process at one intra-op thread, and print the per-pair ratios.

Both sides see bit-identical data: the script writes the authors' Credit arrays
(``data/credit/X_train.npy`` ...) from vflbench's own Credit preprocessing.

Get the authors' code first (it is not shipped with vflbench)::

    git clone https://github.com/Valdeira/LASER-VFL /tmp/LASER-VFL        # the tables used commit eda6de2
    python benchmarks/vs_authors.py --authors /tmp/LASER-VFL --rounds 3
    python benchmarks/vs_authors.py --authors /tmp/LASER-VFL --rounds 3 --pack 5   # per seed of a 5-seed pack

``--authors`` may also be a bare git directory (it is exported with ``git archive``). The authors'
code imports ``wandb``, ``decorator`` and ``imblearn``; runs use ``--no_wandb`` and Credit, so when
one is missing the script puts a stand-in on the path (``wandb`` and ``imblearn`` are never called
on this path; ``decorator`` is only a call wrapper, which the stand-in reproduces). What is timed is the wall time of
each
whole process, start to exit: the authors' ``main.py --task_name credit --method laser --p_miss_train
P --seeds 0 --no_wandb`` (its per-epoch train/test evaluations and final four test settings
included), and ``vflbench run --dataset credit --method laser --protocol compat --train-missing
mcar:P --test-missing none,mcar:0.1,mcar:0.5`` (one evaluation per test setting at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WANDB_STUB = (
    "def init(*a, **k):\n    return None\n\n\ndef log(*a, **k):\n    return None\n\n\ndef finish(*a, **k):\n "
    "   return None\n"
)
DECORATOR_STUB = (
    "import functools\n\n\ndef decorator(caller):\n    def deco(func):\n        @functools.wraps(func)\n"
    "        def wrapper(*a, **k):\n            return caller(func, *a, **k)\n        return wrapper\n    return deco\n"
)


def export_authors(src: Path, dst: Path) -> Path:
    repo = dst / "LASER-VFL"
    if (src / "main.py").exists():
        shutil.copytree(src, repo, ignore=shutil.ignore_patterns(".git"))
    else:  # a bare git directory
        repo.mkdir(parents=True)
        got = subprocess.run(["git", "--git-dir", str(src), "archive", "HEAD"], capture_output=True)
        if got.returncode:
            sys.exit(
                f"{src} is neither a LASER-VFL checkout (no main.py) nor a git directory "
                f"({got.stderr.decode(errors='replace').strip()}); see this script's docstring for how to get it."
            )
        tar = got.stdout
        subprocess.run(["tar", "-x", "-C", str(repo)], input=tar, check=True)
    if not (repo / "main.py").exists():
        sys.exit(f"{src} is not the LASER-VFL repository (no main.py); see this script's docstring for how to get it.")
    return repo


def write_credit(dst: Path) -> None:
    import numpy as np

    from vflbench.data.datasets import load_dataset

    d = load_dataset("credit")
    out = dst / "data" / "credit"
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "X_train.npy", d.x_train.astype(np.float32))
    np.save(out / "y_train.npy", d.y_train.astype(np.int64))
    np.save(out / "X_test.npy", d.x_test.astype(np.float32))
    np.save(out / "y_test.npy", d.y_test.astype(np.int64))


IMBLEARN_STUB = (
    "class RandomOverSampler:\n    def __init__(self, *a, **k):\n"
    "        raise NotImplementedError('stand-in: only the MIMIC loader of the authors uses imblearn')\n"
)


def stubs(dst: Path) -> Path:
    """Stand-ins for the authors' imports that a Credit run with --no_wandb never exercises (or, for
    ``decorator``, only as a call wrapper), used only when the real package is missing."""
    s = dst / "stubs"
    s.mkdir()
    py = sys.executable
    for mod, rel, text in (
        ("wandb", "wandb.py", WANDB_STUB),
        ("decorator", "decorator.py", DECORATOR_STUB),
        ("imblearn", "imblearn/over_sampling.py", IMBLEARN_STUB),
    ):
        if subprocess.run([py, "-c", f"import {mod}"], capture_output=True).returncode != 0:
            f = s / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            if f.parent != s:
                (f.parent / "__init__.py").write_text("")
            f.write_text(text)
    return s


def set_epochs(repo: Path, epochs: int) -> None:
    cfg = repo / "configs" / "task_config.yaml"
    cfg.write_text(re.sub(r"num_epochs: *\d+", f"num_epochs: {epochs}", cfg.read_text()))


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--authors",
        type=Path,
        required=True,
        help="a checkout (or bare git directory) of github.com/Valdeira/LASER-VFL",
    )
    ap.add_argument("--rounds", type=int, default=3, help="pairs of runs (A B, then B A, alternating which goes first)")
    ap.add_argument("--p-train", type=float, default=0.1)
    ap.add_argument("--epochs", type=int, default=None, help="override both sides' epochs (default: the paper's 100)")
    ap.add_argument(
        "--pack",
        type=int,
        default=1,
        help="vflbench side: a one-worker sweep of N seeds trained as one pack; "
        "the ratio is then per seed (authors' run / (sweep wall / N))",
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="vs-authors-"))
    repo = export_authors(args.authors, work)
    write_credit(work)
    stub_dir = stubs(work)
    if args.epochs:
        set_epochs(repo, args.epochs)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "VFLBENCH_THREADS": "1"}
    authors_env = {**env, "PYTHONPATH": f"{stub_dir}{os.pathsep}{env.get('PYTHONPATH', '')}"}
    authors_cmd = [
        sys.executable,
        "main.py",
        "--task_name",
        "credit",
        "--method",
        "laser",
        "--p_miss_train",
        str(args.p_train),
        "--seeds",
        "0",
        "--no_wandb",
    ]
    ours_cmd = [
        sys.executable,
        "-m",
        "vflbench",
        "run",
        "--dataset",
        "credit",
        "--method",
        "laser",
        "--parties",
        "4",
        "--protocol",
        "compat",
        "--train-missing",
        f"mcar:{args.p_train}",
        "--test-missing",
        "none,mcar:0.1,mcar:0.5",
        "--seed",
        "0",
        "--quiet",
        "--threads",
        "1",
        "--out",
        str(work / "ours"),
    ]
    if args.epochs:
        ours_cmd += ["--epochs", str(args.epochs)]
    if args.pack > 1:  # N seeds in one pack: a sweep of one cell, from an empty folder every round
        import yaml

        exp = {
            "name": "vs-authors-pack",
            "protocol": "compat",
            "preset": "laser_table1",
            "methods": ["laser"],
            "parties": [4],
            "seeds": list(range(args.pack)),
            "train_missing": [f"mcar:{args.p_train}"],
            "test_missing": ["none", "mcar:0.1", "mcar:0.5"],
            "datasets": {"credit": {}},
            **({"hp": {"epochs": args.epochs}} if args.epochs else {}),
        }
        (work / "pack.yaml").write_text(yaml.safe_dump(exp))
    round_no = [0]

    def ours() -> float:
        if args.pack <= 1:
            return timed(ours_cmd, ROOT, env)
        round_no[0] += 1
        cmd = [
            sys.executable,
            "-m",
            "vflbench",
            "sweep",
            str(work / "pack.yaml"),
            "--workers",
            "1",
            "--threads",
            "1",
            "--pack",
            str(args.pack),
            "--out",
            str(work / f"pack{round_no[0]}"),
        ]
        return timed(cmd, ROOT, env) / args.pack

    pairs = []
    for i in range(args.rounds):
        order = ("authors", "vflbench") if i % 2 == 0 else ("vflbench", "authors")
        t = {}
        for side in order:
            t[side] = timed(authors_cmd, repo, authors_env) if side == "authors" else ours()
        pairs.append(t)
        print(
            f"round {i + 1}: authors {t['authors']:.1f} s, vflbench {t['vflbench']:.1f} "
            f"s{' per seed' if args.pack > 1 else ''}, ratio {t['authors'] / t['vflbench']:.2f}x",
            flush=True,
        )
    ratios = [p["authors"] / p["vflbench"] for p in pairs]
    summary = {
        "epochs": args.epochs or 100,
        "p_train": args.p_train,
        "rounds": args.rounds,
        "threads": 1,
        "pack": args.pack,
        "authors_median_s": statistics.median(p["authors"] for p in pairs),
        "vflbench_median_s": statistics.median(p["vflbench"] for p in pairs),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "pairs": pairs,
    }
    print(
        f"median wall: authors {summary['authors_median_s']:.1f} s, vflbench {summary['vflbench_median_s']:.1f} s; "
        f"ratio median {summary['ratio_median']:.2f}x (range {summary['ratio_min']:.2f}-{summary['ratio_max']:.2f}x)"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
