"""Paper-layout tables from tidy results: mean +- population std over seeds (as the papers), best per
test condition in bold, seed counts, and optionally the published numbers with differences and a
tolerance summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import VFLBenchError, VFLBenchWarning


def method_order(names) -> list[str]:
    """Methods in registry order (the only list of methods), each method's option variants
    (``name[opts]``) right after it, unknown names after, sorted."""
    from .methods import method_order as order

    names = list(dict.fromkeys(names))
    bases = order(n.split("[", 1)[0] for n in names)
    return [n for b in bases for n in sorted(x for x in names if x.split("[", 1)[0] == b)]


def display(name: str) -> str:
    from .methods import display_name

    base, _, opts = name.partition("[")
    return display_name(base) + (f" ({opts.rstrip(']').replace(';', ', ')})" if opts else "")


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


@dataclass
class Layout:
    name: str
    train: list[str] | None  # train settings (rows); None = whatever the results hold
    test: list[str] | None
    metric_by_dataset: dict[str, str] = field(default_factory=dict)
    default_metric: str = "accuracy"
    reference: str | None = None
    all_metrics: bool = False  # one table per recorded metric (the generic layout), not the dataset's one


METRIC_ORDER = ("accuracy", "f1", "auprc")


LAYOUTS = {
    "laser-table1": Layout("laser-table1", ["none", "mcar:0.1", "mcar:0.5"], ["none", "mcar:0.1", "mcar:0.5"], {"credit": "f1", "mimic4": "f1"}, "accuracy", "laser-table1"),
    "laser-table3": Layout("laser-table3", ["mcar-beta:2,2"], ["none", "mcar:0.1", "mcar:0.5", "mcar-beta:2,2"], {"credit": "f1", "mimic4": "f1"}, "accuracy", "laser-table3"),
    "generic": Layout("generic", None, None, {"credit": "f1", "mimic4": "f1"}, "accuracy", None, all_metrics=True),
    "pbm-table3": Layout("pbm-table3", None, None, {"phishing": "auprc", "credit": "f1"}, "accuracy", "pbm-table3"),
    "false-tables": Layout("false-tables", None, None, {}, "accuracy", "false-tables"),  # vflbench.report_false
}
REFERENCES = {"laser-table1": "laser_table1.csv", "laser-table3": "laser_table3.csv", "pbm-table3": "pbm_tables1_3.csv",
              "false-tables": "false_tables12_17.csv"}


def ref_key(spec: str) -> str:
    """Setting spec -> the reference tables' p_miss label: none -> 0.0, mcar:0.1 -> 0.1, mcar-beta:2,2 -> beta(2,2)."""
    s = spec.strip().lower()
    try:
        from .missingness import p_key

        k = p_key(s)
    except VFLBenchError:
        return s
    return str(k)


def label(spec: str) -> str:
    k = ref_key(spec)
    return k if k != spec.strip().lower() else spec


def load_results(path: str | Path) -> pd.DataFrame:
    """A sweep's results, verified: from a folder with ``runs/``, each run's own CSV, read only when it
    matches the sha256 its manifest recorded (runs that fail are named in a warning and left out;
    a sweep's ``sweep.json`` says which runs belong to it). A CSV file given directly is read as it
    is, and a warning says it was not checked against any run."""
    import json
    import warnings

    from .outputs import read_results_csv, run_finished

    p = Path(path)
    if p.is_dir():
        runs = p / "runs" if (p / "runs").is_dir() else p
        meta = {}
        if (p / "sweep.json").exists():
            try:
                meta = json.loads((p / "sweep.json").read_text())
            except (OSError, ValueError):
                meta = {}
        ids = meta.get("run_ids") or sorted(d.name for d in runs.iterdir() if (d / "manifest.json").exists() or (d / "results.csv").exists())
        frames, dropped = [], []
        for rid in ids:
            ok, why = run_finished(runs / rid)
            if ok:
                frames.append(read_results_csv(runs / rid / "results.csv"))
            else:
                dropped.append(f"{rid} ({why or 'not finished'})")
        if dropped:
            warnings.warn(f"{len(dropped)} run(s) under {runs} are left out: " + "; ".join(dropped[:10]) + (" ..." if len(dropped) > 10 else ""),
                          VFLBenchWarning, stacklevel=2)
        if not frames:
            if (p / "results.csv").exists() and not ids:
                return load_results(p / "results.csv")
            raise VFLBenchError(f"No results under {path}: expected runs/*/results.csv (finished runs) or a results.csv.")
        df = pd.concat(frames, ignore_index=True)
        if meta.get("quick"):
            df["quick"] = True
        return _numeric_values(df, p)
    if not p.exists():
        raise VFLBenchError(f"Results path {path} does not exist.")
    from .outputs import csv_problem

    problem = csv_problem(p)
    if problem:
        raise VFLBenchError(f"{p} {problem}: the file is damaged (truncated?); rebuild it with `vflbench sweep` on the same experiment (finished runs are kept).")
    try:
        df = read_results_csv(p)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise VFLBenchError(f"{p} is not a readable results CSV ({e}).") from None
    need = {"dataset", "method", "train_missing", "test_missing", "seed", "metric", "value"}
    if not need <= set(df.columns):
        raise VFLBenchError(f"{p} lacks columns {', '.join(sorted(need - set(df.columns)))}; is it a vflbench results CSV?")
    if (p.parent / "runs").is_dir():
        warnings.warn(f"read {p} as it is, without checking it against the runs' checksums; give the folder {p.parent} to read the verified runs.",
                      VFLBenchWarning, stacklevel=2)
    return _numeric_values(df, p)


def _numeric_values(df: pd.DataFrame, where) -> pd.DataFrame:
    """The ``value`` column must hold numbers (or be empty): text there means an edited or foreign file."""
    vals = pd.to_numeric(df["value"], errors="coerce")
    bad = vals.isna() & df["value"].notna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise VFLBenchError(f"{where}: the 'value' column holds text (row {i + 2}: {df['value'].iloc[i]!r}); "
                            "the file was edited or is not a vflbench results CSV.")
    df["value"] = vals
    return df


def load_reference(name: str) -> pd.DataFrame:
    if name not in REFERENCES:
        p = Path(name)
        if p.exists():
            try:
                ref = pd.read_csv(p, dtype={"p_miss_train": str, "p_miss_test": str})
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
                raise VFLBenchError(f"--reference {p} is not a readable CSV ({e}).") from None
            return ref
        raise VFLBenchError(f"Unknown reference '{name}'. Built in: {', '.join(REFERENCES)}; or pass a CSV path.")
    text = resources.files("vflbench.reference").joinpath(REFERENCES[name]).read_text()
    df = pd.read_csv(StringIO(text), dtype={"p_miss_train": str, "p_miss_test": str, "b": str})
    return df


def aggregate(df: pd.DataFrame, layout: Layout) -> pd.DataFrame:
    """One row per (dataset, method, train, test): mean, population std, seed count of the layout's metric."""
    out = []
    for ds, gd in df.groupby("dataset", sort=False):
        first = layout.metric_by_dataset.get(ds, layout.default_metric)
        if layout.all_metrics:  # the dataset's headline metric first, then the others recorded
            rec = [m for m in dict.fromkeys(gd["metric"]) if "@" not in str(m)]  # variants (metric@exact) stay in the CSV
            metrics = [first] * (first in rec) + [m for m in METRIC_ORDER if m in rec and m != first] + [m for m in rec if m not in (first, *METRIC_ORDER)]
        else:
            metrics = [first]
        for metric in metrics:
            g = gd[gd["metric"] == metric]
            if layout.train is not None:
                g = g[g["train_missing"].isin(layout.train)]
            if layout.test is not None:
                g = g[g["test_missing"].isin(layout.test)]
            for (m, tr, te), h in g.groupby(["method", "train_missing", "test_missing"], sort=False):
                h = h.drop_duplicates(subset=["seed"], keep="last")
                vals = h["value"].to_numpy(float)
                out.append({"dataset": ds, "metric": metric, "method": m, "train_missing": tr, "test_missing": te,
                            "mean": float(np.mean(vals)), "std": float(np.std(vals)), "n_seeds": len(vals), "seeds": ",".join(map(str, sorted(h["seed"])))})
    return pd.DataFrame(out)


REFERENCE_COLUMNS = {"dataset", "method", "p_miss_train", "p_miss_test", "mean", "std"}


def attach_reference(agg: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    missing = REFERENCE_COLUMNS - set(ref.columns)
    if missing:
        raise VFLBenchError(f"The reference CSV lacks column(s) {', '.join(sorted(missing))}; a reference for this layout has "
                            f"{', '.join(sorted(REFERENCE_COLUMNS))} (see vflbench/reference/laser_table1.csv).")
    ref = ref.copy()
    ref["key"] = ref["dataset"] + "|" + ref["method"] + "|" + ref["p_miss_train"].map(_norm_p) + "|" + ref["p_miss_test"].map(_norm_p)
    lookup = ref.set_index("key")[["mean", "std"]]
    keys = agg["dataset"] + "|" + agg["method"].map(display) + "|" + agg["train_missing"].map(ref_key) + "|" + agg["test_missing"].map(ref_key)
    agg = agg.copy()
    agg["paper_mean"] = keys.map(lookup["mean"]) if len(agg) else []
    agg["paper_std"] = keys.map(lookup["std"]) if len(agg) else []
    agg["diff"] = agg["mean"] - agg["paper_mean"]
    agg["tolerance"] = np.maximum(2 * agg["paper_std"], 2.0)
    agg["within_tolerance"] = agg["diff"].abs() <= agg["tolerance"]
    return agg


def _norm_p(v: str) -> str:
    try:
        return str(float(v))
    except (TypeError, ValueError):
        return str(v).replace(" ", "").lower()


def laser_verdicts(agg: pd.DataFrame) -> list[dict]:
    """Per (dataset, train, test) condition: is LASER-VFL best, or within one std (of the best method) of it?"""
    out = []
    for (ds, tr, te), g in agg.groupby(["dataset", "train_missing", "test_missing"], sort=False):
        if "laser" not in set(g["method"]):
            continue
        best = g.loc[g["mean"].idxmax()]
        las = g[g["method"] == "laser"].iloc[0]
        gap = best["mean"] - las["mean"]
        out.append({"dataset": ds, "train": tr, "test": te, "best": best["method"], "gap": gap, "best_std": best["std"],
                    "ok": bool(best["method"] == "laser" or gap <= best["std"] + 1e-9)})
    return out


def _cell(r, bold: bool, with_ref: bool, fmt: str) -> str:
    txt = f"{r['mean']:.1f} ± {r['std']:.1f}"
    if bold:
        txt = f"**{txt}**" if fmt == "md" else f"\\textbf{{{txt}}}"
    if with_ref and not pd.isna(r.get("paper_mean", np.nan)):
        sep = " · " if fmt == "md" else " / "
        txt += f"{sep}paper {r['paper_mean']:.1f} ± {r['paper_std']:.1f} ({r['diff']:+.1f})"
    return txt


def render(agg: pd.DataFrame, layout: Layout, fmt: str = "md", title: str | None = None, protocol: str | None = None) -> str:
    if fmt == "csv":
        return agg.to_csv(index=False)
    if fmt not in ("md", "latex"):
        raise VFLBenchError(f"Unknown format '{fmt}'. Choices: md, csv, latex.")
    if agg.empty:
        raise VFLBenchError("No results match this layout (check --layout and that the sweep has finished runs).")
    with_ref = "paper_mean" in agg.columns
    lines: list[str] = []
    if title and fmt == "md":
        lines += [f"# {title}", ""]
    for (ds, _metric), g in agg.groupby(["dataset", "metric"], sort=False):
        methods = method_order(g["method"])
        trains = layout.train or list(dict.fromkeys(g["train_missing"]))
        tests = layout.test or list(dict.fromkeys(g["test_missing"]))
        metric = g["metric"].iloc[0]
        mlabel = {"f1": "F1 x 100", "auprc": "AUPRC x 100", "accuracy": "accuracy (%)"}.get(metric, metric)
        seeds = sorted(set(g["n_seeds"]))
        head = f"{ds}: {mlabel}, mean ± population std over {'/'.join(map(str, seeds))} seeds" + (f" ({protocol} protocol)" if protocol else "")
        cols = ["p_miss train", "p_miss test"] + [display(m) for m in methods]
        rows = []
        for tr in trains:
            for te in tests:
                cell = g[(g["train_missing"] == tr) & (g["test_missing"] == te)]
                if cell.empty:
                    continue
                best = cell["mean"].max()
                most = cell["n_seeds"].max()
                vals = []
                for m in methods:
                    r = cell[cell["method"] == m]
                    txt = "–" if r.empty else _cell(r.iloc[0], bool(np.isclose(r.iloc[0]["mean"], best)), with_ref, fmt)
                    if not r.empty and r.iloc[0]["n_seeds"] < most:  # a mean over fewer seeds than its neighbours says so
                        txt += f" (n={int(r.iloc[0]['n_seeds'])} of {int(most)})"
                    vals.append(txt)
                rows.append([label(tr), label(te)] + vals)
        if fmt == "md":
            lines += [f"## {head}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            lines += ["| " + " | ".join(r) + " |" for r in rows]
        else:
            lines += [f"% {head}", "\\begin{tabular}{ll" + "c" * len(methods) + "}", "\\toprule", " & ".join(cols) + " \\\\", "\\midrule"]
            lines += [" & ".join(c.replace("±", "$\\pm$").replace("_", "\\_") for c in r) + " \\\\" for r in rows]
            lines += ["\\bottomrule", "\\end{tabular}"]
        lines += [""] + (best_counts(g, fmt) if layout.all_metrics else summary_lines(g, with_ref, fmt)) + [""]
    return "\n".join(lines)


def best_counts(g: pd.DataFrame, fmt: str) -> list[str]:
    """Per method: in how many conditions it is best, or within one std (of the best method) of it."""
    conds = list(g.groupby(["train_missing", "test_missing"], sort=False))
    counts = {}
    for m in method_order(g["method"]):
        n = 0
        for _, c in conds:
            best = c.loc[c["mean"].idxmax()]
            r = c[c["method"] == m]
            n += int(not r.empty and r.iloc[0]["mean"] >= best["mean"] - best["std"])
        counts[display(m)] = n
    pre = "" if fmt == "md" else "% "
    return [pre + "Best or within one std of the best: " + ", ".join(f"{k} {v}/{len(conds)}" for k, v in counts.items()) + "."]


def summary_lines(g: pd.DataFrame, with_ref: bool, fmt: str) -> list[str]:
    out = []
    pre = "" if fmt == "md" else "% "
    if with_ref:
        h = g.dropna(subset=["paper_mean"])
        n_ok, n = int(h["within_tolerance"].sum()), len(h)
        if n:  # methods the paper's table has no column for (e.g. PBM-VFL beside Table 1) get no count
            out.append(f"{pre}Within tolerance of the paper (|diff| <= max(2 x paper std, 2.0)): **{n_ok}/{n}** cells." if fmt == "md" else f"{pre}Within tolerance: {n_ok}/{n} cells.")
    v = laser_verdicts(g)
    if v:
        ok = sum(x["ok"] for x in v)
        fails = [f"{label(x['train'])}->{label(x['test'])} (best {display(x['best'])}, +{x['gap']:.1f})" for x in v if not x["ok"]]
        line = f"{pre}LASER-VFL best or within one std of the best: {ok}/{len(v)} conditions" + (f"; not in {', '.join(fails)}" if fails else "") + "."
        out.append(line)
    return out


def _excluded_note(excluded: list[str], fmt: str) -> str:
    if not excluded:
        return ""
    pre = "" if fmt == "md" else "% "
    return f"\n{pre}**Excluded: {len(excluded)} run(s)** whose training did not finish: " + "; ".join(excluded) + ".\n"


def _at_share(df: pd.DataFrame, share: float) -> pd.Series:
    """Rows at ``share`` % of their run's epochs, rounded exactly as ``--eval-epochs 25%`` rounds."""
    from .config import share_epoch

    target = df["epochs"].map(lambda total: share_epoch(share, int(total)) if pd.notna(total) else np.nan)
    return df["epoch"].notna() & (df["epoch"] == target)


def _recorded_shares(df: pd.DataFrame) -> list[int]:
    """The shares recorded, read off the longest run (the finest resolution)."""
    d = df[df["epoch"].notna()]
    longest = d[d["epochs"] == d["epochs"].max()]
    return sorted({int(round(100 * e / t)) for e, t in zip(longest["epoch"], longest["epochs"], strict=True)})


def relative_budgets(df: pd.DataFrame) -> bool:
    """True when the runs train for different numbers of epochs (e.g. each method its paper budget):
    budgets then line up as shares of each run (``--eval-epochs 25%,50%``), not as epochs."""
    return "epochs" in df.columns and df["epoch"].notna().any() and df.loc[df["epoch"].notna(), "epochs"].nunique() > 1


def at_budget(df: pd.DataFrame, epoch: int | str | None = None) -> pd.DataFrame:
    """Rows of one training budget: each run's final epoch (default), ``epoch`` for runs recorded
    with ``--eval-epochs``, or ``"50%"``: each run's row at that share of its own epochs. Results
    without an ``epoch`` column hold final rows only."""
    if "epoch" not in df.columns:
        if epoch is not None:
            raise VFLBenchError("These results hold final evaluations only (no epoch column); re-run with --eval-epochs to table other budgets.")
        return df
    final = df.groupby("run_id")["epoch"].transform("max")
    if epoch is None:
        return df[df["epoch"].isna() | (df["epoch"] == final)]
    if isinstance(epoch, str) and epoch.strip().endswith("%"):
        try:
            share = int(round(float(epoch.strip()[:-1])))
        except ValueError:
            raise VFLBenchError(f"--epoch takes an epoch (e.g. 20) or a share of each run (e.g. 50%); got {epoch!r}.") from None
        if not 0 < share <= 100:
            raise VFLBenchError(f"--epoch {epoch}: a share of each run must be in (0%, 100%].")
        sel = df[_at_share(df, share)]
        if sel.empty:
            raise VFLBenchError(f"No rows at {share}% of a run; recorded shares: {', '.join(f'{v}%' for v in _recorded_shares(df))}.")
        return sel
    try:
        epoch = int(epoch)
    except (TypeError, ValueError):
        raise VFLBenchError(f"--epoch takes an epoch (e.g. 20) or a share of each run (e.g. 50%); got {epoch!r}.") from None
    sel = df[df["epoch"] == epoch]
    if sel.empty:
        have = sorted({int(e) for e in df["epoch"].dropna()})
        raise VFLBenchError(f"No rows at epoch {epoch}; recorded budgets: {', '.join(map(str, have))}.")
    return sel


def load_many(paths: list[str | Path]):
    """One results path as it is (read by the report), or several read and stacked; a run found in
    two of them is kept once."""
    if len(paths) == 1:
        return paths[0]
    df = pd.concat([load_results(p) for p in paths], ignore_index=True)
    keys = [c for c in ("run_id", "test_missing", "metric", "epoch") if c in df.columns]
    df = df.drop_duplicates(keys)
    same = [c for c in ("dataset", "method", "options", "settings", "protocol", "protocol_options", "parties", "partitioner", "train_missing", "test_missing",
                        "seed", "metric") if c in df.columns]
    final = df
    if "epoch" in df.columns:  # a run's final rows (runs evaluated at several budgets have one row set per budget)
        final = df[df["epoch"].isna() | (df["epoch"] == df.groupby("run_id")["epoch"].transform("max"))]
    twice = final[final.duplicated(same, keep=False)]
    if len(twice):
        import warnings

        one = twice.iloc[0]
        warnings.warn(f"{twice['run_id'].nunique()} runs of these folders repeat a (method, options, seed) another folder holds under a "
                      f"different run id (e.g. {one['method']} seed {one['seed']}, {one['run_id']}); both are averaged in. Give each "
                      "setting's runs once.", VFLBenchWarning, stacklevel=2)
    return df


def make_table(results, layout_name: str = "laser-table1", reference: str | None = None, fmt: str = "md", title: str | None = None,
               epoch: int | str | None = None) -> tuple[str, pd.DataFrame]:
    if layout_name not in LAYOUTS:
        raise VFLBenchError(f"Unknown layout '{layout_name}'. Choices: {', '.join(LAYOUTS)}.")
    layout = LAYOUTS[layout_name]
    df = results if isinstance(results, pd.DataFrame) else load_results(results)
    all_budgets = df
    df = at_budget(df, epoch)
    if isinstance(epoch, str) and epoch.strip().endswith("%") and "epoch" in df.columns:  # say which epochs the share picked
        used = sorted({int(e) for e in df["epoch"].dropna()})
        title = (title or layout_name) + f" [at {epoch.strip()} of each run: epoch {', '.join(map(str, used))}]"
    excluded = []
    if "status" in df.columns:  # runs that diverged (or otherwise failed) are never averaged in
        bad = df["status"].fillna("ok") != "ok"
        for _, r in df[bad].drop_duplicates("run_id").iterrows():
            why = r["error"] if "error" in r and isinstance(r["error"], str) else r["status"]
            excluded.append(f"{display(r['method'])} on {r['dataset']} (K={r['parties']}, train {label(r['train_missing'])}, seed {r['seed']}): {why}")
        df = df[~bad]
    if layout_name == "pbm-table3":
        text, agg = pbm_table(df, load_reference(reference) if reference else None, fmt, title)
        return text + _excluded_note(excluded, fmt), agg
    if layout_name == "false-tables":
        from .report_false import false_tables

        if fmt != "md":
            raise VFLBenchError("The false-tables layout is Markdown only (--format md); its cells are in the tidy CSV.")
        text, agg = false_tables(df, load_reference(reference) if reference else None, title)
        return text + _excluded_note(excluded, fmt), agg
    agg = aggregate(with_variants(df), layout)
    if reference:
        agg = attach_reference(agg, load_reference(reference))
    protocol = ",".join(sorted(set(df["protocol"]))) if "protocol" in df.columns else None
    if "quick" in df.columns and df["quick"].any():
        title = (title or "") + " [QUICK SMOKE RUN: reduced epochs/seeds, not a reproduction]"
    text = render(agg, layout, fmt, title, protocol)
    if epoch is None and "epoch" in all_budgets.columns:
        text += convergence_note(all_budgets, layout, fmt)
    text += _excluded_note(excluded, fmt)
    return text, agg


# ---------------------------------------------------------------- PBM-VFL (epochs and cost to a target)
def _epochs_cell(vals: np.ndarray) -> str:
    reached = vals[np.isfinite(vals)]
    if len(reached) == 0:
        return "∞"
    txt = f"{reached.mean():.1f} ± {reached.std():.1f}"
    return txt if len(reached) == len(vals) else f"{txt} ({len(reached)}/{len(vals)} reached; others ∞)"


def pbm_aggregate(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, parties, mechanism, b, beta): epochs to the target and the cost up to it
    (the paper's formula, bits / 1e9, and the exact wire bytes / 1e9), the final test metric and
    epsilon, over seeds."""
    need = {"mechanism", "epochs_to_target"}
    if not need <= set(df.columns):
        raise VFLBenchError("These results have no PBM-VFL target columns (run with --method pbm and --target).")
    out = []
    keys = ["dataset", "parties", "mechanism", "b", "beta", "ldp_match"]
    runs = df.drop_duplicates("run_id").copy()
    runs["ldp_match"] = runs["ldp_match"].fillna("") if "ldp_match" in runs else ""  # LDP's calibration keeps its own row
    for (ds, k, mech, b, beta, match), g in runs.groupby(keys, sort=True, dropna=False):
        metric = "auprc" if "auprc" in set(df[df["dataset"] == ds]["metric"]) else "accuracy"
        test = df[df["run_id"].isin(g["run_id"]) & (df["metric"] == metric) & (df["test_missing"] == "none")]["value"].to_numpy(float)
        ep = g["epochs_to_target"].to_numpy(float)
        wire = ((g["comm_bytes_up_at_target"] + g["comm_bytes_down_at_target"]) / 1e9).to_numpy(float)
        paper_bits = (g["comm_bits_paper_at_target"] / 1e9).to_numpy(float)
        finite = np.isfinite(ep)
        out.append({
            "dataset": ds, "parties": int(k), "mechanism": mech, "b": b, "beta": beta, "ldp_match": match, "n_seeds": len(g), "target": g["target"].iloc[0],
            "epochs_seeds": ",".join("inf" if not np.isfinite(e) else str(int(e)) for e in ep), "reached": int(finite.sum()),
            "epochs_mean": float(ep[finite].mean()) if finite.any() else float("inf"), "epochs_std": float(ep[finite].std()) if finite.any() else float("nan"),
            "cost_paper_gbit": float(paper_bits[finite].mean()) if finite.any() else float("inf"),
            "cost_wire_gbyte": float(wire[finite].mean()) if finite.any() else float("inf"),
            "test_metric": metric, "test_mean": float(np.mean(test)) if len(test) else float("nan"), "test_std": float(np.std(test)) if len(test) else float("nan"),
            "accountant": str(g["accountant"].iloc[0]) if "accountant" in g else "paper",
            # one horizon per column: epsilon at the target (over the seeds that reached it) and after the whole run
            "eps_target": _finite_mean(g, "epsilon_feature_record_no_local_training_at_target", finite),
            "eps_block_target": _finite_mean(g, "epsilon_column_block_at_target", finite),
            "eps_run": _finite_mean(g, "epsilon_feature_record_no_local_training", None),
            "eps_paper_run": _finite_mean(g, "epsilon_feature_paper_formula", None) if "epsilon_feature_paper_formula" in g else _finite_mean(g, "epsilon_feature", None),
            "epochs_run": float(g["epochs"].max()) if "epochs" in g else float("nan"),
            "epochs_list": ep,
        })
    return pd.DataFrame(out)


def _finite_mean(g: pd.DataFrame, col: str, rows: np.ndarray | None) -> float:
    """Mean of ``col`` over ``rows`` (a boolean mask; None: all); NaN when the column is absent,
    inf when no row is selected (a target never reached costs an unbounded epsilon)."""
    if col not in g:
        return float("nan")
    v = g[col].to_numpy(float)
    if rows is not None:
        v = v[rows]
    return float(v.mean()) if len(v) else float("inf")


def _pbm_ref(agg: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    need = {"dataset", "parties", "b", "beta", "epochs_to_target", "comm_cost", "comm_unit"}
    if need - set(ref.columns):
        raise VFLBenchError(f"The reference CSV lacks column(s) {', '.join(sorted(need - set(ref.columns)))}; the pbm-table3 layout reads "
                            "vflbench/reference/pbm_tables1_3.csv's columns.")
    ref = ref.copy()
    ref["dataset"] = ref["dataset"].str.extract(r"\((.*)\)")[0].fillna(ref["dataset"]).str.strip()  # "activity(uci-har)" -> uci-har

    def key(ds, k, mech, b, beta):
        if mech == "npq":
            return (ds, int(k), "NPQ", "")
        return (ds, int(k), str(int(float(b))), f"{float(beta):g}")

    lookup = {(r.dataset, int(r.parties), str(r.b), "" if pd.isna(r.beta) else f"{float(r.beta):g}"): (float(r.epochs_to_target), float(r.comm_cost), r.comm_unit)
              for r in ref.itertuples()}
    agg = agg.copy()
    hits = [lookup.get(key(r.dataset, r.parties, r.mechanism, r.b, r.beta)) for r in agg.itertuples()]
    agg["paper_epochs"] = [h[0] if h else np.nan for h in hits]
    agg["paper_cost"] = [h[1] if h else np.nan for h in hits]
    agg["paper_unit"] = [h[2] if h else "" for h in hits]
    ours_reached = agg["reached"] * 2 > agg["n_seeds"]  # a majority of seeds reached the target
    paper_reached = np.isfinite(agg["paper_epochs"].astype(float))
    has = agg["paper_epochs"].notna()
    agg["agree_reach"] = np.where(has, ours_reached == paper_reached, np.nan)
    ratio = agg["epochs_mean"] / agg["paper_epochs"]
    agg["within_2x"] = np.where(has & ours_reached & paper_reached, (ratio >= 0.5) & (ratio <= 2.0), np.nan)
    # within max(2 sd, 2) epochs of the paper (both reach it), or both never reach it
    tol = np.maximum(2 * agg["epochs_std"].fillna(0).to_numpy(float), 2.0)
    close = np.abs(agg["epochs_mean"].to_numpy(float) - agg["paper_epochs"].to_numpy(float)) <= tol
    agg["within_tol"] = np.where(has, np.where(ours_reached & paper_reached, close, ~ours_reached & ~paper_reached), np.nan)
    return agg


def pbm_table(df: pd.DataFrame, ref: pd.DataFrame | None, fmt: str = "md", title: str | None = None) -> tuple[str, pd.DataFrame]:
    agg = pbm_aggregate(df)
    if ref is not None:
        agg = _pbm_ref(agg, ref)
    if fmt == "csv":
        return agg.drop(columns=["epochs_list"]).to_csv(index=False), agg
    if fmt != "md":
        raise VFLBenchError(f"The pbm-table3 layout is written as md or csv, not {fmt}.")
    lines = [f"# {title}", ""] if title else []
    for (ds, k), g in agg.groupby(["dataset", "parties"], sort=False):
        g = pd.concat([g[g["mechanism"] != "pbm"], g[g["mechanism"] == "pbm"]])
        tgt = g["target"].iloc[0]
        lines += [f"## {ds}, M = {k}: epochs to {tgt} and communication up to it (mean ± std over reached seeds; {g['n_seeds'].max()} seeds)", ""]
        modes = [m for m in g["accountant"].dropna().astype(str) if m != "none"]
        mode = modes[0] if modes else "paper"  # results written before the accountant column named it
        run_ep = g["epochs_run"].max()
        run_ep = f"{run_ep:g}" if np.isfinite(run_ep) else "the run's"
        cert = "certified" if mode in ("pld", "exact") else "NOT an upper bound"
        cols = ["mechanism", "b", "β", "epochs (per seed)", "epochs", "cost, paper formula (Gbit)", "wire (GB)", f"test {g['test_metric'].iloc[0].upper()} x 100",
                f"ε record at target ({mode}, {cert})", f"ε column block at target ({mode})", f"ε record at {run_ep} epochs ({mode})", f"ε paper's formula (Thm 6.1, c0, {run_ep} epochs)"]
        with_ref = "paper_epochs" in g
        if with_ref:
            cols += ["paper epochs", "paper cost (GB)", "agree: reach", "within 2x", "within max(2 sd, 2)"]
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in g.itertuples():
            fb = "–" if pd.isna(r.b) or r.mechanism == "npq" else str(int(float(r.b)))
            fbeta = "–" if pd.isna(r.beta) or r.mechanism == "npq" else f"{float(r.beta):g}"
            cost = "∞" if not np.isfinite(r.cost_paper_gbit) else f"{r.cost_paper_gbit:.2f}"
            wire = "∞" if not np.isfinite(r.cost_wire_gbyte) else f"{r.cost_wire_gbyte:.3f}"
            mech = r.mechanism.upper() + (f" (σ: {r.ldp_match})" if r.ldp_match else "")
            row = [mech, fb, fbeta, r.epochs_seeds, _epochs_cell(r.epochs_list), cost, wire, f"{r.test_mean:.1f} ± {r.test_std:.1f}",
                   *(_eps_cell(v) for v in (r.eps_target, r.eps_block_target, r.eps_run, r.eps_paper_run))]
            if with_ref:
                pe = "–" if pd.isna(r.paper_epochs) else ("∞" if not np.isfinite(r.paper_epochs) else f"{r.paper_epochs:g}")
                pc = "–" if pd.isna(r.paper_cost) else ("∞" if not np.isfinite(r.paper_cost) else f"{r.paper_cost:g}")
                ag = "–" if pd.isna(r.agree_reach) else ("yes" if r.agree_reach else "**no**")
                w2 = "–" if pd.isna(r.within_2x) else ("yes" if r.within_2x else "**no**")
                wt = "–" if pd.isna(r.within_tol) else ("yes" if r.within_tol else "**no**")
                row += [pe, pc, ag, w2, wt]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        if with_ref:
            h = g[g["paper_epochs"].notna()]
            n_reach = int(h["agree_reach"].astype(bool).sum())
            w = h["within_2x"].dropna()
            t = h["within_tol"].dropna()
            lines.append(f"Agree with the paper on reaching the target or not: **{n_reach}/{len(h)}** rows; "
                         f"epochs within a factor of 2 where both reach it: **{int(w.astype(bool).sum())}/{len(w)}**; "
                         f"within max(2 sd, 2) epochs of the paper (or both never reaching it): **{int(t.astype(bool).sum())}/{len(t)}**.")
        lines += pbm_claims(g)
        lines += ["", "Cost, paper formula: E_target x ceil(N/B) x B x M x P x (ln(bM) + 32) bits for PBM, x 64 for NPQ (PBM-VFL Tables 1-3, "
                  "reported there as 'GB'). Wire: ceil(log2(Mb+1)) bits per masked integer up plus 32 per float down, in bytes.",
                  "", "ε at δ = 1e-5. *Record*: one party's features of one record, assuming the record does not enter local training (the unit of the "
                  "paper's Thm 6.1); *column block*: one party's whole block, the unit that holds for Algorithm 2 as trained. At the target, ε counts "
                  "the training steps and the monitoring passes up to and including the one that met the target (each is a release of the training "
                  "samples' sums). The paper's-formula column is Thm 6.1 with the constant c0, for comparison: it is not an upper bound.", ""]
    return "\n".join(lines), agg


def _eps_cell(v: float) -> str:
    if pd.isna(v):
        return "–"
    return "∞" if not np.isfinite(v) else f"{v:.4g}"


def _rises(rows: pd.DataFrame, by: str, along: str) -> int:
    """How often the paper-formula cost goes up as ``along`` grows with ``by`` fixed (inf = not reached)."""
    n = 0
    for _, h in rows.groupby(by):
        c = h.sort_values(along)["cost_paper_gbit"].to_numpy(float)
        n += int(np.sum(np.diff(np.where(np.isfinite(c), c, np.inf)) > 1e-12))
    return n


def pbm_claims(g: pd.DataFrame) -> list[str]:
    """The paper's qualitative claims, checked on the rows at hand."""
    pbm = g[g["mechanism"] == "pbm"].assign(bf=lambda d: d["b"].astype(float), betaf=lambda d: d["beta"].astype(float))
    if pbm.empty:
        return []
    out = []
    for by, along, what in (("betaf", "bf", "b at fixed β"), ("bf", "betaf", "β at fixed b")):
        n = _rises(pbm, by, along)
        out.append(f"cost never rises with {what}: {'yes' if n == 0 else f'no ({n} rises)'}")
    ldp = g[g["mechanism"] == "ldp"]
    if len(ldp):
        for match, lg in ldp.groupby("ldp_match"):
            pairs = pbm.merge(lg.assign(bf=lg["b"].astype(float), betaf=lg["beta"].astype(float)), on=["bf", "betaf"], suffixes=("", "_ldp"))
            wins = int((pairs["test_mean"] > pairs["test_mean_ldp"]).sum())
            cal = f" (σ: {match})" if match else ""
            out.append(f"PBM-VFL above LDP{cal} in test {g['test_metric'].iloc[0].upper()}: {wins}/{len(pairs)} (b, β) settings")
    return ["Paper's claims, checked on these rows: " + "; ".join(out) + "."]


def _ranked_by_budget(df: pd.DataFrame, layout: Layout, last: int | None = None) -> tuple[bool, list[int], dict[tuple, dict[int, pd.DataFrame]]]:
    """Per condition (dataset, train, test) and recorded budget, the aggregated methods sorted best
    first. Budgets are epochs, or shares of each run when runs have different lengths (``shares``);
    ``last=N`` ranks only the N largest budgets (the convergence note needs two, not every epoch)."""
    if "status" in df.columns:
        df = df[df["status"].fillna("ok") == "ok"]
    shares = relative_budgets(df)  # runs of different lengths: compare shares of each run
    budgets = _recorded_shares(df) if shares else sorted({int(e) for e in df["epoch"].dropna()})
    if last is not None:
        budgets = budgets[-last:]
    ranked: dict[tuple, dict[int, pd.DataFrame]] = {}
    for ep in budgets:
        agg = aggregate(with_variants(df[_at_share(df, ep) if shares else df["epoch"] == ep]), layout)
        for cond, g in agg.groupby(["dataset", "train_missing", "test_missing"], sort=False):
            ranked.setdefault(cond, {})[ep] = g.sort_values("mean", ascending=False, kind="stable")  # ties: first listed, as idxmax
    return shares, budgets, ranked


def budget_ranking(results, layout_name: str = "laser-table1", fmt: str = "md") -> str:
    """The best method of every condition at every recorded budget, one row per condition: how a
    ranking depends on the training budget, read off one set of runs recorded with --eval-epochs.
    A cell is the best method, its lead over the runner-up in points, and ``≈`` when the runner-up
    is within one std of it (the order of the two is not settled by the seeds)."""
    if layout_name not in LAYOUTS or layout_name in ("pbm-table3", "false-tables"):
        raise VFLBenchError(f"--by-budget takes a method-column layout (laser-table1, laser-table3, generic); got {layout_name!r}.")
    layout = LAYOUTS[layout_name]
    df = results if isinstance(results, pd.DataFrame) else load_results(results)
    if "epoch" not in df.columns or df["epoch"].isna().all():
        raise VFLBenchError("These results hold final evaluations only (no epoch column); re-run with --eval-epochs to compare budgets.")
    shares, budgets, ranked = _ranked_by_budget(df, layout)
    unit = "%" if shares else ""
    cells: dict[tuple, dict[int, str]] = {}
    for cond, by_ep in ranked.items():
        for ep, g in by_ep.items():
            best = g.iloc[0]
            cell = display(best["method"])
            if len(g) > 1:
                second = g.iloc[1]
                close = second["mean"] >= best["mean"] - best["std"]
                cell += f" +{best['mean'] - second['mean']:.1f}" + (" ≈" if close else "")
            cells.setdefault(cond, {})[ep] = cell
    head = ["dataset", "train", "test"] + [f"{'' if shares else 'epoch '}{b}{unit}" for b in budgets]
    rows = [[ds, label(tr), label(te)] + [v.get(b, "") for b in budgets] for (ds, tr, te), v in cells.items()]
    if fmt == "csv":
        return pd.DataFrame(rows, columns=head).to_csv(index=False)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines.append("\nCell: the best method by mean over seeds, its lead in points over the runner-up; ≈ when the runner-up "
                 "is within one std of the best.")
    return "\n".join(lines) + "\n"


def convergence_note(df: pd.DataFrame, layout: Layout, fmt: str = "md") -> str:
    """Does the best method of each condition change between the last two recorded budgets? A table
    of a run recorded with --eval-epochs says so in its footer, with a warning per unstable condition."""
    shares, budgets, ranked = _ranked_by_budget(df, layout, last=2)
    if len(budgets) < 2:
        return ""
    prev, last = budgets[-2], budgets[-1]
    unit = "%" if shares else ""
    best = {cond: {ep: g.iloc[0]["method"] for ep, g in by_ep.items()} for cond, by_ep in ranked.items()}
    pre = "" if fmt == "md" else "% "
    unstable = [(k, v) for k, v in best.items() if len(v) == 2 and v[prev] != v[last]]
    stable = sum(1 for v in best.values() if len(v) == 2) - len(unstable)
    at = "of each run's epochs" if shares else ""
    word = "at" if shares else "at epochs"
    lines = [f"\n{pre}Convergence: the best method is the same {word} {prev}{unit} and {last}{unit}{' ' + at if at else ''} in {stable}/{stable + len(unstable)} conditions."]
    for (ds, tr, te), v in unstable:
        lines.append(f"{pre}**Ranking not yet stable** on {ds}, train {label(tr)}, test {label(te)}: best {display(v[prev])} at {'' if shares else 'epoch '}{prev}{unit}, "
                     f"{display(v[last])} at {'' if shares else 'epoch '}{last}{unit}.")
    return "\n".join(lines) + "\n"
