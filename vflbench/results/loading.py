"""Reading results back: a sweep folder's runs (checked against their manifests' checksums), a results CSV, several
folders stacked, and a folder's own table settings; attack and option variants as rows of their own. What the tables,
ranks and plots read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.errors import VFLBenchError, VFLBenchWarning


def with_variants(df: pd.DataFrame) -> pd.DataFrame:
    """Runs of one method with different user-set options (an experiment's ``method_grid``) or run
    settings (``--mechanism``: the ``settings`` column) become separate table columns: ``method`` ->
    ``method[options]``."""
    cols = [c for c in ("options", "settings") if c in df.columns]
    if not cols:
        return df
    parts = [df[c].fillna("").astype(str) for c in cols]
    opts = parts[0]
    for p in parts[1:]:
        opts = np.where((opts != "") & (p != ""), opts + ";" + p, np.where(opts != "", opts, p))
    opts = pd.Series(opts, index=df.index)
    df = df.copy()
    df["method"] = np.where(opts != "", df["method"] + "[" + opts + "]", df["method"])
    return df


def _attack_options(spec: str) -> tuple[str, dict[str, str]]:
    """An ``--attack`` spec's name and options as text, the attack's defaults filled in where it is registered."""
    name, _, rest = str(spec).partition(":")
    try:
        from ..privacy.attacks import parse_attack  # only when a table holds two variants of one attack

        name, opts = parse_attack(spec)
        return name, {k: str(v) for k, v in opts.items()}
    except VFLBenchError:  # an attack this install does not register (a plugin's): its spec as written
        return name.strip(), dict(
            (k.strip(), v.strip()) for k, _, v in (x.partition("=") for x in rest.split(",") if x.strip())
        )


def with_attack_variants(df: pd.DataFrame) -> pd.DataFrame:
    """Two variants of one attack in these results (``--attack inversion:known=0.1 --attack
    inversion:known=0.1,decoder=linear``) stay apart: their rows' metric ``attack:NAME:METRIC`` becomes
    ``attack:NAME[OPTIONS]:METRIC``, OPTIONS the options whose values differ between the variants (defaults filled
    in). One variant of an attack keeps its metric name. Labels are made from the whole frame each time (a label
    already there is recomputed), so results read apart and then joined are labelled alike."""
    if "attack" not in df.columns or "metric" not in df.columns:
        return df
    metric = df["metric"].astype(str)
    is_attack = metric.str.startswith("attack:") & df["attack"].notna()
    if not is_attack.any():
        return df
    base = metric[is_attack].str.replace(r"^attack:([^:\[]+)\[[^\]]*\]:", r"attack:\1:", regex=True)
    # tables are per dataset: variants are told apart among the runs of one dataset
    datasets = df["dataset"].astype(str) if "dataset" in df.columns else pd.Series("", index=df.index)
    labels: dict[tuple[str, str], str] = {}
    pairs = pd.DataFrame({"dataset": datasets[is_attack], "spec": df.loc[is_attack, "attack"].astype(str)})
    for ds, specs in pairs.drop_duplicates().groupby("dataset", sort=False)["spec"]:
        by_name: dict[str, dict[str, dict[str, str]]] = {}
        for spec in specs:
            name, opts = _attack_options(spec)
            by_name.setdefault(name, {})[spec] = opts
        for name, variants in by_name.items():
            keys = sorted({k for o in variants.values() for k in o})
            differ = [k for k in keys if len({o.get(k, "-") for o in variants.values()}) > 1]
            for spec, o in variants.items():
                tag = ",".join(f"{k}={o.get(k, '-')}" for k in differ)
                labels[(ds, spec)] = name + (f"[{tag}]" if tag else "")
    parts = base.str.split(":", n=2)
    keys = zip(datasets[is_attack], df.loc[is_attack, "attack"].astype(str), strict=True)
    new = [f"attack:{labels[key]}:{p[2]}" for key, p in zip(keys, parts, strict=True)]
    if list(metric[is_attack]) == new:
        return df
    df = df.copy()
    df.loc[is_attack, "metric"] = new
    return df


def load_results(path: str | Path) -> pd.DataFrame:
    """A sweep's results, verified: from a folder with ``runs/``, each run's own CSV, read only when it
    matches the sha256 its manifest recorded (runs that fail are named in a warning and left out;
    a sweep's ``sweep.json`` says which runs belong to it). A CSV file given directly is read as it
    is, and a warning says it was not checked against any run."""
    import json
    import warnings

    from .outputs import (
        SUPERSEDED,
        finished_results,
        gathered_runs,
        is_sweep_folder,
        read_results_csv,
        read_results_texts,
    )

    p = Path(path)
    if p.is_dir():
        runs = p / "runs" if is_sweep_folder(p) else p
        meta = {}
        if (p / "sweep.json").exists():
            try:
                meta = json.loads((p / "sweep.json").read_text())
            except (OSError, ValueError):
                meta = {}
        # the last sweep's runs, then every gathered run (a folder several sweeps wrote: gather keeps them all)
        ids = list(dict.fromkeys([*(meta.get("run_ids") or []), *sorted(gathered_runs(p))])) or sorted(
            {d.name for d in (runs.iterdir() if runs.is_dir() else []) if (d / "manifest.json").exists()}
            | {d.name for d in (runs.iterdir() if runs.is_dir() else []) if (d / "results.csv").exists()}
            | set(gathered_runs(p))
        )
        if not is_sweep_folder(p) and not any((runs / i).is_dir() for i in ids) and (p / "results.csv").exists():
            return load_results(p / "results.csv")  # a table committed without any of its runs (fmnist_gpu)
        superseded = gathered_runs(p / SUPERSEDED)  # runs an experiment no longer asks for: out, and no warning
        texts, dropped = [], []
        for rid in (i for i in ids if i not in superseded):
            data, why = finished_results(runs / rid)
            if data is not None:
                texts.append(data)
            else:
                dropped.append(f"{rid} ({why or 'not finished'})")
        if dropped:
            warnings.warn(
                f"{len(dropped)} run(s) under {runs} are left out: "
                + "; ".join(dropped[:10])
                + (" ..." if len(dropped) > 10 else ""),
                VFLBenchWarning,
                stacklevel=2,
            )
        if not texts:
            if (p / "results.csv").exists():  # the folder's table without its runs (e.g. a GPU sweep's, committed)
                return load_results(p / "results.csv")
            raise VFLBenchError(
                f"No results under {path}: expected runs/*/results.csv (finished runs) or a results.csv."
            )
        df = read_results_texts(texts)
        if meta.get("quick"):
            df["quick"] = True
        return with_attack_variants(_numeric_values(df, p))
    if not p.exists():
        raise VFLBenchError(f"Results path {path} does not exist.")
    from .outputs import csv_problem

    problem = csv_problem(p)
    if problem:
        raise VFLBenchError(
            f"{p} {problem}: the file is damaged (truncated?); rebuild it with `vflbench sweep` on the same "
            "experiment (finished runs are kept)."
        )
    try:
        df = read_results_csv(p)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise VFLBenchError(f"{p} is not a readable results CSV ({e}).") from None
    need = {"dataset", "method", "train_missing", "test_missing", "seed", "metric", "value"}
    if not need <= set(df.columns):
        raise VFLBenchError(
            f"{p} lacks columns {', '.join(sorted(need - set(df.columns)))}; is it a vflbench results CSV?"
        )
    if is_sweep_folder(p.parent):
        warnings.warn(
            f"read {p} as it is, without checking it against the runs' checksums; give the folder {p.parent} to read "
            "the verified runs.",
            VFLBenchWarning,
            stacklevel=2,
        )
    return with_attack_variants(_numeric_values(df, p))


def _numeric_values(df: pd.DataFrame, where) -> pd.DataFrame:
    """The ``value`` column must hold numbers (or be empty): text there means an edited or foreign file."""
    vals = pd.to_numeric(df["value"], errors="coerce")
    bad = vals.isna() & df["value"].notna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise VFLBenchError(
            f"{where}: the 'value' column holds text (row {i + 2}: {df['value'].iloc[i]!r}); "
            "the file was edited or is not a vflbench results CSV."
        )
    df["value"] = vals
    return df


def load_many(paths: list[str | Path]):
    """One results path as it is (read by the report), or several read and stacked; a run found in
    two of them is kept once."""
    if len(paths) == 1:
        return paths[0]
    df = with_attack_variants(pd.concat([load_results(p) for p in paths], ignore_index=True))
    keys = [c for c in ("run_id", "test_missing", "metric", "epoch") if c in df.columns]
    df = df.drop_duplicates(keys)
    same = [
        c
        for c in (
            "dataset",
            "method",
            "options",
            "settings",
            "protocol",
            "protocol_options",
            "parties",
            "partitioner",
            "train_missing",
            "test_missing",
            "seed",
            "metric",
        )
        if c in df.columns
    ]
    final = df
    if "epoch" in df.columns:  # a run's final rows (runs evaluated at several budgets have one row set per budget)
        final = df[df["epoch"].isna() | (df["epoch"] == df.groupby("run_id")["epoch"].transform("max"))]
    twice = final[final.duplicated(same, keep=False)]
    if len(twice):
        import warnings

        one = twice.iloc[0]
        warnings.warn(
            f"{twice['run_id'].nunique()} runs of these folders repeat a (method, options, seed) another folder holds "
            "under a "
            f"different run id (e.g. {one['method']} seed {one['seed']}, {one['run_id']}); both are averaged in. Give "
            "each "
            "setting's runs once.",
            VFLBenchWarning,
            stacklevel=2,
        )
    return df


def folder_table_args(path: str | Path) -> dict[str, Any] | None:
    """How a sweep folder's ``table.md`` was made (its experiment's layout, reference and title, from
    ``sweep.json``; earlier folders keep them in the recorded experiment spec), or None for a path that
    is not a sweep folder. ``vflbench table DIR`` uses them unless a flag says otherwise."""
    import json

    path = Path(path)
    meta_path = (
        path.parent if path.name == "results.csv" else path
    ) / "sweep.json"  # a folder, or the results.csv it wrote
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    spec = meta.get("spec") or {}
    return {
        "layout": meta.get("layout", spec.get("layout") or "generic"),
        "reference": meta.get("reference", spec.get("reference")),
        "title": meta.get("title", meta.get("experiment")),
    }
