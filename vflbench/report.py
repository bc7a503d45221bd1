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

from .errors import VFLBenchError


def method_order(names) -> list[str]:
    """Methods in registry order (the only list of methods), unknown names after, sorted."""
    from .methods import method_order as order

    return order(names)


def display(name: str) -> str:
    from .methods import display_name

    return display_name(name)


@dataclass
class Layout:
    name: str
    train: list[str] | None  # train settings (rows); None = whatever the results hold
    test: list[str] | None
    metric_by_dataset: dict[str, str] = field(default_factory=dict)
    default_metric: str = "accuracy"
    reference: str | None = None


LAYOUTS = {
    "laser-table1": Layout("laser-table1", ["none", "mcar:0.1", "mcar:0.5"], ["none", "mcar:0.1", "mcar:0.5"], {"credit": "f1", "mimic4": "f1"}, "accuracy", "laser-table1"),
    "laser-table3": Layout("laser-table3", ["mcar-beta:2,2"], ["none", "mcar:0.1", "mcar:0.5", "mcar-beta:2,2"], {"credit": "f1", "mimic4": "f1"}, "accuracy", "laser-table3"),
    "generic": Layout("generic", None, None, {"credit": "f1", "mimic4": "f1"}, "accuracy", None),
}
REFERENCES = {"laser-table1": "laser_table1.csv", "laser-table3": "laser_table3.csv"}


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
    p = Path(path)
    if p.is_dir():
        if (p / "results.csv").exists():
            p = p / "results.csv"
        else:
            from .outputs import run_finished

            frames = [pd.read_csv(f) for f in sorted(p.glob("**/results.csv")) if run_finished(f.parent)[0]]
            if not frames:
                raise VFLBenchError(f"No results under {path}: expected results.csv or runs/*/results.csv.")
            return pd.concat(frames, ignore_index=True)
    if not p.exists():
        raise VFLBenchError(f"Results path {path} does not exist.")
    from .outputs import csv_problem

    problem = csv_problem(p)
    if problem:
        raise VFLBenchError(f"{p} {problem}: the file is damaged (truncated?); rebuild it with `vflbench sweep` on the same experiment (finished runs are kept).")
    try:
        df = pd.read_csv(p)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise VFLBenchError(f"{p} is not a readable results CSV ({e}).") from None
    need = {"dataset", "method", "train_missing", "test_missing", "seed", "metric", "value"}
    if not need <= set(df.columns):
        raise VFLBenchError(f"{p} lacks columns {', '.join(sorted(need - set(df.columns)))}; is it a vflbench results CSV?")
    return df


def load_reference(name: str) -> pd.DataFrame:
    if name not in REFERENCES:
        p = Path(name)
        if p.exists():
            return pd.read_csv(p, dtype={"p_miss_train": str, "p_miss_test": str})
        raise VFLBenchError(f"Unknown reference '{name}'. Built in: {', '.join(REFERENCES)}; or pass a CSV path.")
    text = resources.files("vflbench.reference").joinpath(REFERENCES[name]).read_text()
    df = pd.read_csv(StringIO(text), dtype={"p_miss_train": str, "p_miss_test": str})
    return df


def aggregate(df: pd.DataFrame, layout: Layout) -> pd.DataFrame:
    """One row per (dataset, method, train, test): mean, population std, seed count of the layout's metric."""
    out = []
    for ds, g in df.groupby("dataset", sort=False):
        metric = layout.metric_by_dataset.get(ds, layout.default_metric)
        g = g[g["metric"] == metric]
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


def attach_reference(agg: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
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
    for ds, g in agg.groupby("dataset", sort=False):
        methods = method_order(g["method"])
        trains = layout.train or list(dict.fromkeys(g["train_missing"]))
        tests = layout.test or list(dict.fromkeys(g["test_missing"]))
        metric = g["metric"].iloc[0]
        mlabel = "F1 x 100" if metric == "f1" else ("AUPRC x 100" if metric == "auprc" else "accuracy (%)")
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
                vals = []
                for m in methods:
                    r = cell[cell["method"] == m]
                    vals.append("–" if r.empty else _cell(r.iloc[0], bool(np.isclose(r.iloc[0]["mean"], best)), with_ref, fmt))
                rows.append([label(tr), label(te)] + vals)
        if fmt == "md":
            lines += [f"## {head}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            lines += ["| " + " | ".join(r) + " |" for r in rows]
        else:
            lines += [f"% {head}", "\\begin{tabular}{ll" + "c" * len(methods) + "}", "\\toprule", " & ".join(cols) + " \\\\", "\\midrule"]
            lines += [" & ".join(c.replace("±", "$\\pm$").replace("_", "\\_") for c in r) + " \\\\" for r in rows]
            lines += ["\\bottomrule", "\\end{tabular}"]
        lines += [""] + summary_lines(g, with_ref, fmt) + [""]
    return "\n".join(lines)


def summary_lines(g: pd.DataFrame, with_ref: bool, fmt: str) -> list[str]:
    out = []
    pre = "" if fmt == "md" else "% "
    if with_ref:
        h = g.dropna(subset=["paper_mean"])
        n_ok, n = int(h["within_tolerance"].sum()), len(h)
        out.append(f"{pre}Within tolerance of the paper (|diff| <= max(2 x paper std, 2.0)): **{n_ok}/{n}** cells." if fmt == "md" else f"{pre}Within tolerance: {n_ok}/{n} cells.")
    v = laser_verdicts(g)
    if v:
        ok = sum(x["ok"] for x in v)
        fails = [f"{label(x['train'])}->{label(x['test'])} (best {display(x['best'])}, +{x['gap']:.1f})" for x in v if not x["ok"]]
        line = f"{pre}LASER-VFL best or within one std of the best: {ok}/{len(v)} conditions" + (f"; not in {', '.join(fails)}" if fails else "") + "."
        out.append(line)
    return out


def make_table(results, layout_name: str = "laser-table1", reference: str | None = None, fmt: str = "md", title: str | None = None) -> tuple[str, pd.DataFrame]:
    if layout_name not in LAYOUTS:
        raise VFLBenchError(f"Unknown layout '{layout_name}'. Choices: {', '.join(LAYOUTS)}.")
    layout = LAYOUTS[layout_name]
    df = results if isinstance(results, pd.DataFrame) else load_results(results)
    excluded = []
    if "status" in df.columns:  # runs that diverged (or otherwise failed) are never averaged in
        bad = df["status"].fillna("ok") != "ok"
        for _, r in df[bad].drop_duplicates("run_id").iterrows():
            why = r["error"] if "error" in r and isinstance(r["error"], str) else r["status"]
            excluded.append(f"{display(r['method'])} on {r['dataset']} (K={r['parties']}, train {label(r['train_missing'])}, seed {r['seed']}): {why}")
        df = df[~bad]
    agg = aggregate(df, layout)
    if reference:
        agg = attach_reference(agg, load_reference(reference))
    protocol = ",".join(sorted(set(df["protocol"]))) if "protocol" in df.columns else None
    if "quick" in df.columns and df["quick"].any():
        title = (title or "") + " [QUICK SMOKE RUN: reduced epochs/seeds, not a reproduction]"
    text = render(agg, layout, fmt, title, protocol)
    if excluded:
        pre = "" if fmt == "md" else "% "
        text += f"\n{pre}**Excluded: {len(excluded)} run(s)** whose training did not finish: " + "; ".join(excluded) + ".\n"
    return text, agg
