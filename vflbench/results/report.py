"""Tables from tidy results, for any registered artefact (:mod:`vflbench.results.artefacts`): mean +-
population std over seeds (as the papers), best per test condition in bold, seed counts, and
optionally the published numbers with differences and a tolerance summary. An artefact supplies its
layout, its reference and its verdict, or a table of its own; nothing here names a method or a paper."""

from __future__ import annotations

from importlib import resources
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import VFLBenchError
from . import artefacts
from .artefacts import Layout
from .loading import load_results, with_attack_variants, with_variants  # what a table reads

# re-exported: the table's text
from .verdicts import best_counts, display, label, method_order, ref_key, tolerance_line  # noqa: F401

METRIC_ORDER = ("accuracy", "f1", "auprc")


def load_reference(name: str) -> pd.DataFrame:
    refs = artefacts.references()
    if name not in refs:
        p = Path(name)
        if p.exists():
            try:
                ref = pd.read_csv(p, dtype={"p_miss_train": str, "p_miss_test": str})
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
                raise VFLBenchError(f"--reference {p} is not a readable CSV ({e}).") from None
            return ref
        raise VFLBenchError(f"Unknown reference '{name}'. Built in: {', '.join(refs)}; or pass a CSV path.")
    text = resources.files("vflbench.results.reference").joinpath(refs[name]).read_text()
    df = pd.read_csv(StringIO(text), dtype={"p_miss_train": str, "p_miss_test": str, "b": str})
    return df


def aggregate(df: pd.DataFrame, layout: Layout) -> pd.DataFrame:
    """One row per (dataset, method, train, test): mean, population std, seed count of the layout's metric."""
    out = []
    for ds, gd in df.groupby("dataset", sort=False):
        first = layout.metric_by_dataset.get(ds, layout.default_metric)
        if layout.all_metrics:  # the dataset's headline metric first, then the others recorded
            rec = [
                m for m in dict.fromkeys(gd["metric"]) if "@" not in str(m)
            ]  # variants (metric@exact) stay in the CSV
            metrics = (
                [first] * (first in rec)
                + [m for m in METRIC_ORDER if m in rec and m != first]
                + [m for m in rec if m not in (first, *METRIC_ORDER)]
            )
        else:  # the dataset's metric, and every attack recorded beside it (a paper layout drops no attack)
            metrics = [first] + [m for m in dict.fromkeys(gd["metric"]) if str(m).startswith("attack:")]
        for metric in metrics:
            g = gd[gd["metric"] == metric]
            if layout.train is not None:
                g = g[g["train_missing"].isin(layout.train)]
            if layout.test is not None and not str(metric).startswith("attack:"):  # an attack's rows are by adversary
                g = g[g["test_missing"].isin(layout.test)]
            if str(metric).startswith("attack:") and "adversary" in g.columns:  # an attack's rows: by adversary
                g = g.assign(test_missing=g["adversary"])
            for (m, tr, te), h in g.groupby(["method", "train_missing", "test_missing"], sort=False):
                h = h.drop_duplicates(subset=["seed"], keep="last")
                vals = h["value"].to_numpy(float)
                out.append(
                    {
                        "dataset": ds,
                        "metric": metric,
                        "method": m,
                        "train_missing": tr,
                        "test_missing": te,
                        "mean": float(np.mean(vals)),
                        "std": float(np.std(vals)),
                        "n_seeds": len(vals),
                        "seeds": ",".join(map(str, sorted(h["seed"]))),
                    }
                )
    return pd.DataFrame(out)


REFERENCE_COLUMNS = {"dataset", "method", "p_miss_train", "p_miss_test", "mean", "std"}


def attach_reference(agg: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    missing = REFERENCE_COLUMNS - set(ref.columns)
    if missing:
        raise VFLBenchError(
            f"The reference CSV lacks column(s) {', '.join(sorted(missing))}; a reference for this layout has "
            f"{', '.join(sorted(REFERENCE_COLUMNS))} (as the built-in references in vflbench/results/reference/)."
        )
    ref = ref.copy()
    ref["key"] = (
        ref["dataset"]
        + "|"
        + ref["method"]
        + "|"
        + ref["p_miss_train"].map(_norm_p)
        + "|"
        + ref["p_miss_test"].map(_norm_p)
    )
    lookup = ref.set_index("key")[["mean", "std"]]
    keys = (
        agg["dataset"]
        + "|"
        + agg["method"].map(display)
        + "|"
        + agg["train_missing"].map(ref_key)
        + "|"
        + agg["test_missing"].map(ref_key)
    )
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


def leak_note(metric: str) -> str:
    """The line under an attack's table: which way its metric leaks."""
    way = "lower" if metric.endswith(":mse") else "higher"
    return f"{metric}: {way} means more leaked (bold: the highest value of the row)."


def _cell(r, bold: bool, with_ref: bool, fmt: str) -> str:
    digits = 3 if str(r.get("metric", "")).startswith("attack:") else 1  # AUC and R^2 live in [0, 1]
    txt = f"{r['mean']:.{digits}f} ± {r['std']:.{digits}f}"
    if bold:
        txt = f"**{txt}**" if fmt == "md" else f"\\textbf{{{txt}}}"
    if with_ref and not pd.isna(r.get("paper_mean", np.nan)):
        sep = " · " if fmt == "md" else " / "
        txt += f"{sep}paper {r['paper_mean']:.1f} ± {r['paper_std']:.1f} ({r['diff']:+.1f})"
    return txt


def render(
    agg: pd.DataFrame,
    layout: Layout,
    fmt: str = "md",
    title: str | None = None,
    protocol: str | None = None,
    verdict=None,
) -> str:
    """The method-column table; ``verdict(g, fmt)`` gives the lines under each dataset's table (the
    artefact's; by default how often each method is best)."""
    if fmt == "csv":
        return agg.to_csv(index=False)
    if fmt not in ("md", "latex"):
        raise VFLBenchError(f"Unknown format '{fmt}'. Choices: md, csv, latex.")
    if agg.empty:
        raise VFLBenchError("No results match this layout (check --layout and that the sweep has finished runs).")
    with_ref = "paper_mean" in agg.columns
    with_stats = "verdict" in agg.columns
    if with_stats:
        from .stats import stats_cell, verdict_lines

        verdict = verdict_lines
    lines: list[str] = []
    if title and fmt == "md":
        lines += [f"# {title}", ""]
    for (ds, _metric), g in agg.groupby(["dataset", "metric"], sort=False):
        methods = method_order(g["method"])
        metric = g["metric"].iloc[0]
        attack = str(metric).startswith("attack:")  # an attack's table: rows by adversary; the most leaked in bold
        trains = layout.train or list(dict.fromkeys(g["train_missing"]))
        # an attack's rows are its adversaries (in its test_missing column), whatever test settings the layout names
        tests = (
            list(dict.fromkeys(g["test_missing"])) if attack else layout.test or list(dict.fromkeys(g["test_missing"]))
        )
        mlabel = {"f1": "F1 x 100", "auprc": "AUPRC x 100", "accuracy": "accuracy (%)"}.get(metric, metric)
        seeds = sorted(set(g["n_seeds"]))
        spread = "mean [95% t interval]" if with_stats else "mean ± population std"
        head = f"{ds}: {mlabel}, {spread} over {'/'.join(map(str, seeds))} seeds" + (
            f" ({protocol} protocol)" if protocol else ""
        )
        cols = ["p_miss train", "adversary" if attack else "p_miss test"] + [display(m) for m in methods]
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
                    if r.empty:
                        txt = "–"
                    elif with_stats:  # --stats: the interval and the paired test's verdict (vflbench.results.stats)
                        txt = stats_cell(r.iloc[0], fmt)
                    else:
                        txt = _cell(r.iloc[0], bool(np.isclose(r.iloc[0]["mean"], best)), with_ref, fmt)
                    if (
                        not r.empty and r.iloc[0]["n_seeds"] < most
                    ):  # a mean over fewer seeds than its neighbours says so
                        txt += f" (n={int(r.iloc[0]['n_seeds'])} of {int(most)})"
                    vals.append(txt)
                rows.append([label(tr), te if attack else label(te)] + vals)
        if fmt == "md":
            lines += [f"## {head}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            lines += ["| " + " | ".join(r) + " |" for r in rows]
        else:
            lines += [
                f"% {head}",
                "\\begin{tabular}{ll" + "c" * len(methods) + "}",
                "\\toprule",
                " & ".join(cols) + " \\\\",
                "\\midrule",
            ]
            lines += [" & ".join(c.replace("±", "$\\pm$").replace("_", "\\_") for c in r) + " \\\\" for r in rows]
            lines += ["\\bottomrule", "\\end{tabular}"]
        under = (
            [f"{'% ' if fmt != 'md' else ''}{leak_note(metric)}"]
            if attack
            else verdict(g, fmt)
            if verdict is not None
            else best_counts(g, fmt)
        )
        lines += [""] + under + [""]
    return "\n".join(lines)


def _excluded_note(excluded: list[str], fmt: str) -> str:
    if not excluded:
        return ""
    pre = "" if fmt == "md" else "% "
    return f"\n{pre}**Excluded: {len(excluded)} run(s)** whose training did not finish: " + "; ".join(excluded) + ".\n"


def _at_share(df: pd.DataFrame, share: float) -> pd.Series:
    """Rows at ``share`` % of their run's epochs, rounded exactly as ``--eval-epochs 25%`` rounds."""
    from ..runs.settings import share_epoch

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
            raise VFLBenchError(
                "These results hold final evaluations only (no epoch column); re-run with --eval-epochs to table "
                "other budgets."
            )
        return df
    final = df.groupby("run_id")["epoch"].transform("max")
    if epoch is None:
        return df[df["epoch"].isna() | (df["epoch"] == final)]
    if isinstance(epoch, str) and epoch.strip().endswith("%"):
        try:
            share = int(round(float(epoch.strip()[:-1])))
        except ValueError:
            raise VFLBenchError(
                f"--epoch takes an epoch (e.g. 20) or a share of each run (e.g. 50%); got {epoch!r}."
            ) from None
        if not 0 < share <= 100:
            raise VFLBenchError(f"--epoch {epoch}: a share of each run must be in (0%, 100%].")
        sel = df[_at_share(df, share)]
        if sel.empty:
            raise VFLBenchError(
                f"No rows at {share}% of a run; recorded shares: {', '.join(f'{v}%' for v in _recorded_shares(df))}."
            )
        return sel
    try:
        epoch = int(epoch)
    except (TypeError, ValueError):
        raise VFLBenchError(
            f"--epoch takes an epoch (e.g. 20) or a share of each run (e.g. 50%); got {epoch!r}."
        ) from None
    sel = df[df["epoch"] == epoch]
    if sel.empty:
        have = sorted({int(e) for e in df["epoch"].dropna()})
        raise VFLBenchError(f"No rows at epoch {epoch}; recorded budgets: {', '.join(map(str, have))}.")
    return sel


def make_table(
    results,
    layout_name: str = "generic",
    reference: str | None = None,
    fmt: str = "md",
    title: str | None = None,
    epoch: int | str | None = None,
    stats: bool = False,
) -> tuple[str, pd.DataFrame]:
    """The table of the artefact ``layout_name`` from a results folder, CSV or frame (``reference``:
    a built-in reference name or a CSV path). ``stats``: each method against its condition's best by a
    paired test over seeds, Holm-corrected, with 95% intervals (:mod:`vflbench.results.stats`)."""
    if layout_name not in artefacts.names():
        raise VFLBenchError(f"Unknown layout '{layout_name}'. Choices: {', '.join(artefacts.names())}.")
    art = artefacts.get(layout_name)
    layout = art.layout
    df = with_attack_variants(results) if isinstance(results, pd.DataFrame) else load_results(results)
    all_budgets = df
    df = at_budget(df, epoch)
    if (
        isinstance(epoch, str) and epoch.strip().endswith("%") and "epoch" in df.columns
    ):  # say which epochs the share picked
        used = sorted({int(e) for e in df["epoch"].dropna()})
        title = (title or layout_name) + f" [at {epoch.strip()} of each run: epoch {', '.join(map(str, used))}]"
    excluded = []
    if "status" in df.columns:  # runs that diverged (or otherwise failed) are never averaged in
        bad = df["status"].fillna("ok") != "ok"
        for _, r in df[bad].drop_duplicates("run_id").iterrows():
            why = r["error"] if "error" in r and isinstance(r["error"], str) else r["status"]
            excluded.append(
                f"{display(r['method'])} on {r['dataset']} (K={r['parties']}, train {label(r['train_missing'])}, seed "
                f"{r['seed']}): {why}"
            )
        df = df[~bad]
    if fmt not in art.formats:
        raise VFLBenchError(f"Unknown format '{fmt}' for the {layout_name} layout. Choices: {', '.join(art.formats)}.")
    own = None if stats else art.table(df, load_reference(reference) if reference else None, fmt, title)
    if own is not None:  # an artefact with a layout of its own
        text, agg = own
        return text + _excluded_note(excluded, fmt), agg
    raw = with_variants(df)
    agg = aggregate(raw, layout)
    if reference and not stats:
        agg = attach_reference(agg, load_reference(reference))
    if stats:
        from .stats import compare

        agg = compare(raw, agg)
    protocol = ",".join(sorted(set(df["protocol"]))) if "protocol" in df.columns else None
    if "quick" in df.columns and df["quick"].any():
        title = (title or "") + " [QUICK SMOKE RUN: reduced epochs/seeds, not a reproduction]"
    text = render(agg, layout, fmt, title, protocol, art.verdict)
    if epoch is None and "epoch" in all_budgets.columns:
        text += convergence_note(all_budgets, layout, fmt)
    text += _excluded_note(excluded, fmt)
    return text, agg


def _ranked_by_budget(
    df: pd.DataFrame, layout: Layout, last: int | None = None
) -> tuple[bool, list[int], dict[tuple, dict[int, pd.DataFrame]]]:
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
            ranked.setdefault(cond, {})[ep] = g.sort_values(
                "mean", ascending=False, kind="stable"
            )  # ties: first listed, as idxmax
    return shares, budgets, ranked


def budget_ranking(results, layout_name: str = "generic", fmt: str = "md") -> str:
    """The best method of every condition at every recorded budget, one row per condition: how a
    ranking depends on the training budget, read off one set of runs recorded with --eval-epochs.
    A cell is the best method, its lead over the runner-up in points, and ``≈`` when the runner-up
    is within one std of it (the order of the two is not settled by the seeds)."""
    ranked_layouts = [n for n in artefacts.names() if artefacts.get(n).by_budget]
    if layout_name not in ranked_layouts:
        raise VFLBenchError(
            f"--by-budget takes a method-column layout ({', '.join(ranked_layouts)}); got {layout_name!r}."
        )
    layout = artefacts.get(layout_name).layout
    df = results if isinstance(results, pd.DataFrame) else load_results(results)
    if "epoch" not in df.columns or df["epoch"].isna().all():
        raise VFLBenchError(
            "These results hold final evaluations only (no epoch column); re-run with --eval-epochs to compare budgets."
        )
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
    lines.append(
        "\nCell: the best method by mean over seeds, its lead in points over the runner-up; ≈ when the runner-up "
        "is within one std of the best."
    )
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
    lines = [
        f"\n{pre}Convergence: the best method is the same {word} {prev}{unit} and "
        f"{last}{unit}{' ' + at if at else ''} in {stable}/{stable + len(unstable)} conditions."
    ]
    for (ds, tr, te), v in unstable:
        lines.append(
            f"{pre}**Ranking not yet stable** on {ds}, train {label(tr)}, test {label(te)}: best {display(v[prev])} "
            f"at {'' if shares else 'epoch '}{prev}{unit}, "
            f"{display(v[last])} at {'' if shares else 'epoch '}{last}{unit}."
        )
    return "\n".join(lines) + "\n"


def class_weighting(results: Path) -> str:
    """One line saying how the runs of ``results`` weigh the classes, from their manifests (each run's method and
    its protocol's class-balanced sampling, :meth:`vflbench.methods.base.Method.class_weighting`): ``class weighting:
    none (every method)``, or each kind with its methods; empty when no manifest says."""
    from ..methods import METHODS
    from .outputs import sweep_manifests

    kinds: dict[str, set[str]] = {}
    for m in sweep_manifests(Path(results)) if Path(results).is_dir() else []:
        cfg = m.get("config") or {}
        balanced = (cfg.get("protocol") or {}).get("balanced_sampler")
        if cfg.get("method") in METHODS and balanced is not None:
            kind = METHODS.get(cfg["method"]).class_weighting(bool(balanced))
            kinds.setdefault(kind, set()).add(display(cfg["method"]))
    if len(kinds) <= 1:
        return f"class weighting: {next(iter(kinds))} (every method)" if kinds else ""
    return "class weighting: " + "; ".join(f"{k}: {', '.join(sorted(v))}" for k, v in sorted(kinds.items()))
