"""The regression gate of an interface change: every committed result folder must still resolve and
re-run to its committed numbers.

1. Keys: every committed run's manifest is turned back into a request (``config_from_manifest``) and
   resolved; its run key must equal the committed one (so `vflbench sweep` finds every run: a dry run
   of the folder's experiment would schedule nothing), unless a behaviour version it uses was bumped since it was
   recorded (vflbench.runs.behaviour): such a key is listed with the bump that moved it, and is no failure (the
   run's numbers may have moved: `vflbench sweep` re-runs it).
2. Numbers: per folder, the cheapest run recorded on a CPU (least committed training time, optionally only tabular) is
   executed again the way it was trained (alone, or as a bank of one when it was trained in a pack: a
   member's numbers do not depend on its bank's size) and its CSV rows are compared value by value
   with the committed ones (timing columns excepted).

    python scripts/regression_gate.py results --out /tmp/gate.json            # keys and one re-run per folder
    python scripts/regression_gate.py results/pbm --keys-only
    python scripts/regression_gate.py --run results/X/runs/RUN --against b84f4aa   # HEAD against a revision, here

Prints one line per folder and exits 1 if any key moved or any value differs.

Bit-identical repeats hold on one kind of CPU: on another, MKL's and torch's kernels for its instruction set may
round differently, and a training run then drifts (README, "Reproducibility"). A difference prints the CPU that
recorded the run (manifests name it since 2026-11-26) beside this host's. ``--against REV`` tells a host difference
from a regression: it re-runs the same run with the code of revision REV (a temporary git worktree) on this host
and compares HEAD's numbers with those, not with the committed ones.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

TIME_COLUMNS = {
    "train_seconds",
    "seconds_per_epoch",
    "eval_seconds",
    "he_encrypt_s",
    "he_decrypt_s",
    "he_sum_s",
    "he_pack_s",
}


def folders(root: Path) -> list[Path]:
    """The sweep folders under ``root``: those with run folders (``runs/*/manifest.json``) and gathered ones
    (``manifests.jsonl``, vflbench gather)."""
    runs = {p.parent.parent.parent for p in root.rglob("runs/*/manifest.json")}
    return sorted(runs | {p.parent for p in root.rglob("manifests.jsonl")})


def folder_runs(folder: Path) -> list[tuple[Path, dict, str | None]]:
    """Every finished run of a sweep folder: (its run folder, its manifest, its CSV text when it is gathered)."""
    from vflbench.results.outputs import gathered_runs

    out = [(p.parent, json.loads(p.read_text()), None) for p in sorted(folder.glob("runs/*/manifest.json"))]
    have = {d.name for d, _, _ in out}
    for run_id, rec in sorted(gathered_runs(folder).items()):
        if run_id not in have:
            out.append((folder / "runs" / run_id, rec["manifest"], rec["results_csv"]))
    return [(d, m, t) for d, m, t in out if m.get("status", "ok") == "ok" and "config" in m]


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b or str(a) == str(b)


def _close(a, b, tolerance: float) -> bool:
    try:
        return abs(float(a) - float(b)) <= tolerance
    except (TypeError, ValueError):
        return False


def execute_rows(manifest: dict):
    """The run of ``manifest`` executed again the way it was trained, as a DataFrame of its CSV rows."""
    from dataclasses import replace

    import pandas as pd

    from vflbench.runs.config import config_from_manifest, resolve
    from vflbench.training.pipeline import execute, execute_pack

    run = resolve(config_from_manifest(manifest))
    # the request spells out every option; the row's `options` column lists those a user set, as recorded
    run = replace(run, option_sources=dict(manifest["method"]["option_sources"]))
    rows = execute_pack([run], device="cpu")[0][0] if "pack" in manifest else execute(run, device="cpu")[0]
    return pd.DataFrame(rows)


def rows_at(rev: str, manifest_dir: Path, tree: Path) -> Path:
    """The rows that the code of ``rev`` (checked out at ``tree``) produces for the run in ``manifest_dir``, here."""
    import os
    import subprocess

    out = tree / "_gate_rows" / f"{manifest_dir.name}.csv"
    out.parent.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}  # ahead of the editable install: that revision's vflbench
    cmd = [sys.executable, __file__, "--run", str(manifest_dir.resolve()), "--emit", str(out)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0 or not out.exists():
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"revision {rev} cannot re-run {manifest_dir.name}: {tail}")
    return out


# What float drift moves on another kind of CPU, in a metric's points (0-100): re-running the behaviour guard's 27
# neural golden runs here (AMD EPYC, AVX512) with torch's kernels forced to another instruction set
# (ATEN_CPU_CAPABILITY=default or avx2) moved a metric by at most 0.68 points (docs/DEVELOPMENT.md, "Behaviour
# versions"); the trees' integer sums and XGBoost's hist moved by nothing.
FOREIGN_CPU_TOLERANCE = 1.0


def rerun(manifest: dict, run_dir: Path, baseline: Path | None = None, tolerance: float = 0.0) -> list[str]:
    """Differences between the run executed again and ``baseline`` (default: its committed CSV); ``tolerance``:
    how far the ``value`` column may move, in points (0: bit for bit)."""
    from vflbench.results.outputs import read_results_csv

    new = execute_rows(manifest)
    old = read_results_csv(baseline or run_dir / "results.csv")
    ident = [
        c for c in ("test_missing", "metric", "epoch", "adversary") if c in old.columns
    ]  # attack rows: per adversary

    def key(df):  # a row's identity as text (a column a row lacks, e.g. a utility row's adversary, is "")
        return df[ident].astype(object).where(df[ident].notna(), "").astype(str).agg("|".join, axis=1)

    new.index, old.index = key(new), key(old)
    diffs = []
    missing = sorted(set(old.index) - set(new.index))
    if missing:
        diffs.append(f"{len(missing)} committed rows not produced, e.g. {missing[0]}")
    extra = sorted(set(new.index) - set(old.index))
    new = new.loc[[i for i in old.index if i in new.index]]
    old = old.loc[new.index]
    for col in sorted(set(old.columns) - TIME_COLUMNS):
        if col not in new.columns:
            diffs.append(f"column {col} gone")
            continue
        for i, (a, b) in enumerate(zip(old[col].tolist(), new[col].tolist(), strict=True)):
            if col == "value" and tolerance and _close(a, b, tolerance):
                continue
            if not same(a, b):
                diffs.append(f"{col}[{old.index[i]}]: {a!r} -> {b!r}")
                break
    if extra:  # rows a later version adds (a new metric or variant): reported, not a difference
        print(f"   ({len(extra)} rows not in the committed CSV, e.g. {extra[0]})", flush=True)
    if diffs and baseline is None:
        from vflbench.results.outputs import versions

        rec, here = manifest.get("versions", {}), versions()
        cpu = lambda v: f"{v.get('cpu', 'a CPU not named')} ({v.get('cpu_capability', '?')}, {v.get('platform')})"  # noqa: E731
        if (rec.get("cpu"), rec.get("cpu_capability")) != (here["cpu"], here["cpu_capability"]):
            diffs.append(f"recorded on {cpu(rec)}, re-run on {cpu(here)}: try --against REV to tell the two apart")
    return diffs


def run_record(run_dir: Path) -> tuple[dict, Path | None]:
    """A run's manifest and, for a gathered run (``SWEEP/runs/RUN_ID`` with no folder left), its committed rows as a
    file: a run folder's own results.csv is read where it is."""
    if (run_dir / "manifest.json").exists():
        return json.loads((run_dir / "manifest.json").read_text()), None
    from vflbench.results.outputs import gathered_runs

    rec = gathered_runs(run_dir.parent.parent).get(run_dir.name)
    if rec is None:
        raise SystemExit(f"{run_dir}: no run folder, and {run_dir.parent.parent}/manifests.jsonl has no such run")
    return rec["manifest"], gathered_baseline(rec["results_csv"])


def gathered_baseline(text: str | None) -> Path | None:
    """A gathered run's committed rows as a file to compare with (None: the run folder's results.csv)."""
    if text is None:
        return None
    import tempfile

    f = Path(tempfile.mkdtemp(prefix="gate-")) / "results.csv"
    f.write_text(text)
    return f


def rerun_folders(dirs: list[Path], against: str | None) -> int:
    import subprocess
    import tempfile

    bad, tree = False, None
    try:
        if against:
            tree = Path(tempfile.mkdtemp(prefix="gate-")) / "tree"
            r = subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), against], capture_output=True)
            if r.returncode != 0:
                tree = None
                print(f"--against {against}: git cannot check it out (is it a revision of this repository?)")
                return 2
        for d in dirs:
            m, committed = run_record(d)
            try:
                diffs = rerun(m, d, rows_at(against, d, tree) if tree else committed)
            except RuntimeError as e:  # that revision cannot run this manifest (an option it did not have yet)
                diffs = [str(e)]
            bad |= bool(diffs)
            what = f"against {against} here" if against else "against the committed CSV"
            print(f"{d} ({what}): " + ("identical" if not diffs else "; ".join(diffs[:6])), flush=True)
    finally:
        if tree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], check=False)
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="results")
    ap.add_argument("--keys-only", action="store_true")
    ap.add_argument("--tabular-only", action="store_true", help="re-run only MLP (tabular) runs")
    ap.add_argument("--out", help="write the report as JSON here")
    ap.add_argument(
        "--run", action="append", default=[], help="re-run just this run folder (repeatable) and compare it"
    )
    ap.add_argument(
        "--against",
        metavar="REV",
        help="with --run: compare with what the code of git revision REV gives here, not with the committed CSV",
    )
    ap.add_argument("--emit", help=argparse.SUPPRESS)  # with one --run: write its re-run rows here (--against)
    a = ap.parse_args()
    if a.emit:
        execute_rows(run_record(Path(a.run[0]))[0]).to_csv(a.emit, index=False)
        return 0
    if a.against and not a.run:
        ap.error("--against needs --run RUN_DIR")
    from vflbench.runs import behaviour
    from vflbench.runs.config import config_from_manifest, resolve

    if a.run:
        return rerun_folders(list(map(Path, a.run)), a.against)

    report, bad = {}, False
    for folder in folders(Path(a.root)):
        runs = folder_runs(folder)
        manifests = [(d, m) for d, m, _ in runs]
        csv_text = {m["run_id"]: t for _, m, t in runs if t is not None}
        moved, explained = [], {}
        for _, m in manifests:
            run = resolve(config_from_manifest(m))
            if run.key != m["run_key"]:
                why = behaviour.explain(m["config"].get("behaviour"), run.behaviour)
                (explained.__setitem__(m["run_id"], why) if why else moved.append(m["run_id"]))
        entry = {"runs": len(manifests), "keys_moved": moved, "keys_moved_by_a_bump": explained}
        if not a.keys_only:
            # bit-identical repeats are promised on CPU: a run recorded on a GPU draws other random numbers there
            pool = [
                (d, m)
                for d, m in manifests
                if (not a.tabular_only or m["config"]["model"].get("arch") == "mlp") and m.get("device", "cpu") == "cpu"
            ]
            if not pool and manifests:
                entry["note"] = (
                    f"every run was recorded on {manifests[0][1].get('device')}; a CPU re-run is not comparable"
                )
            if pool:
                d, m = min(pool, key=lambda dm: dm[1].get("timings", {}).get("train_s", 1e9))
                t = time.perf_counter()
                entry.update(
                    {
                        "rerun": m["run_id"],
                        "packed": "pack" in m,
                        "diffs": rerun(m, d, gathered_baseline(csv_text.get(m["run_id"]))),
                        "seconds": round(time.perf_counter() - t, 1),
                    }
                )
        bad |= bool(entry["keys_moved"]) or bool(entry.get("diffs"))
        report[str(folder)] = entry
        reasons = sorted({r for why in explained.values() for r in why})
        print(
            f"{folder}: {entry['runs']} runs, keys moved {len(moved)}"
            + (f", moved by a behaviour bump {len(explained)} ({'; '.join(reasons)})" if explained else "")
            + (f" ({entry['note']})" if "note" in entry else "")
            + (
                f", re-ran {entry['rerun']} ({'pack of 1' if entry['packed'] else 'alone'}, {entry['seconds']}s): "
                + ("identical" if not entry["diffs"] else "; ".join(entry["diffs"][:4]))
                if "rerun" in entry
                else ""
            ),
            flush=True,
        )
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
