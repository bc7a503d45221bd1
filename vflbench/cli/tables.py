"""Commands that read results: `table` (a sweep's table, with a paper's numbers or statistics), `rank` (conclusions
across a suite's tables) and `plot`."""

from __future__ import annotations

from pathlib import Path

import typer

from ..core.errors import VFLBenchError
from .app import (
    app,
    console,
    friendly,
    out_path,
)


@app.command()
@friendly
def table(
    results: list[Path] = typer.Argument(
        ..., help="a sweep directory, a results.csv, or a directory of runs (several: their rows together)"
    ),
    layout: str | None = typer.Option(
        None,
        help="laser-table1 | laser-table3 | pbm-table3 | false-tables | generic [default: a sweep folder's "
        "own (its experiment's layout:), else laser-table1]",
    ),
    reference: str | None = typer.Option(
        None,
        help="the published numbers beside ours: laser-table1 | laser-table3 | pbm-table3 | false-tables | a "
        "reference CSV path | none [default: a sweep folder's own]",
    ),
    fmt: str = typer.Option("md", "--format", help="md | csv | latex"),
    out: str | None = typer.Option(None, help="write to this file instead of stdout"),
    epoch: str | None = typer.Option(
        None,
        help="table a budget recorded with --eval-epochs: an epoch, or a share of each run such as 50% (default: each "
        "run's final epoch)",
    ),
    by_budget: bool = typer.Option(
        False,
        "--by-budget",
        help="instead: the best method of every condition at every budget recorded with --eval-epochs",
    ),
    stats: bool = typer.Option(
        False,
        "--stats",
        help="each method against its condition's best: a paired test over seeds (t below 6 seeds, Wilcoxon from "
        "6), Holm-corrected over the table, with 95%% intervals; md marks ties and significant losses, csv gives "
        "p-values (docs/STATISTICS.md)",
    ),
):
    """Mean +- std tables in the paper's layout, optionally beside the published numbers. Given one
    sweep folder, its experiment's layout, reference and title are the defaults (the bare command
    rebuilds the folder's table.md); the flags override them."""
    out = out_path(out)
    from ..results.loading import folder_table_args, load_many
    from ..results.outputs import atomic_write_text
    from ..results.report import budget_ranking, make_table

    own = folder_table_args(results[0]) if len(results) == 1 else None
    title = own["title"] if own else None
    if layout is None:
        layout = own["layout"] if own else "laser-table1"
    if reference is None:  # the folder's reference belongs to its layout, not to one given with --layout
        reference = own["reference"] if own and layout == own["layout"] else None
    elif reference.strip().lower() == "none":
        reference = None
    if out:
        from ..results.outputs import check_output_file

        check_output_file(out)
    if by_budget:
        if stats:
            raise VFLBenchError("--by-budget and --stats are two views; give one.")
        if epoch is not None or reference:
            raise VFLBenchError("--by-budget lists every recorded budget; drop --epoch and --reference.")
        if fmt not in ("md", "csv"):
            raise VFLBenchError("--by-budget writes md or csv (--format).")
        text = budget_ranking(load_many(results), layout, fmt)
    else:
        if stats and reference and len(results) > 1:
            raise VFLBenchError("--stats compares the methods of the results; drop --reference (or table it apart).")
        text, _ = make_table(
            load_many(results), layout, None if stats else reference, fmt, epoch=epoch, title=title, stats=stats
        )
    if out:
        atomic_write_text(out, text)
        console.print(f"-> {out}")
    else:
        print(text, end="" if text.endswith("\n") else "\n")  # the table as the file holds it, byte for byte


@app.command()
@friendly
def rank(
    results: Path = typer.Argument(..., help="a sweep folder over many tables (e.g. results/suite)"),
    reference: str = typer.Option("xgboost", help="the method every other is set against, paired over seeds"),
    out: str | None = typer.Option(None, help="folder for ranks.csv, versus_REF.csv, CD diagrams (default: RESULTS)"),
    methods: str | None = typer.Option(None, help="rank only these methods (comma-separated; the reference joins)"),
    tables: str | None = typer.Option(
        None,
        help="rank only these tables: holdout (experiments/suite_holdout.yaml's, ranked apart), chosen (the "
        "tables that chose the defaults) or suite tables, comma-separated",
    ),
):
    """Conclusions across tables: per training x test condition, each method's mean rank over the tables, Friedman's
    test and a critical-difference diagram; each method's wins, ties and losses against --reference (paired over
    seeds) and its median gap in points. A table's metric: AUPRC for a binary target, accuracy otherwise."""
    from ..results.across_tables import report
    from ..results.verdicts import display

    folder = out_path(out) if out else Path(results)
    from ..core.textlists import split_items

    chosen = split_items(methods, "--methods", "laser,xgboost") if methods else None
    from ..data.datasets.suite import table_sources

    text = report(Path(results), folder, reference, display, chosen, table_sources(tables) if tables else None)
    print(text)
    console.print(f"-> {folder / 'across_tables.md'}")


@app.command()
@friendly
def plot(
    kind: str = typer.Argument(
        ...,
        help="scalability | curves | bars | budget | frontier (PBM-VFL: metric against certified epsilon) | "
        "communication (utility against training bytes, per protocol) | cd "
        "(critical-difference diagram over every dataset and condition of the results) | privacy (utility against "
        "an attack's success, epsilons marked)",
    ),
    results: list[Path] = typer.Argument(
        ...,
        help="sweep directory (with runs/); cd takes several (each its own conditions; A+B: two folders' rows "
        "together, e.g. a method run apart)",
    ),
    out: str = typer.Option("results/figure", help="output path without extension (.png and .pdf are written)"),
    metric: str | None = typer.Option(
        None, help="metric (scalability: default accuracy; budget: auprc when recorded, else accuracy)"
    ),
    test_missing: str | None = typer.Option(None, help="test setting to plot (scalability, budget)"),
    panel: str | None = typer.Option(
        None, help="budget plot: one panel per value of this column (e.g. beta); default per train/test setting"
    ),
    attack_metric: str | None = typer.Option(
        None, help="privacy plot: the attack metric on the x axis (default: the first auc, r2 or accuracy recorded)"
    ),
):
    """Figures to PNG and PDF (and the points as CSV where a figure has them): one kind per call."""
    trailing = str(out).endswith("/")
    out = out_path(out)
    if trailing or out.is_dir():
        raise VFLBenchError(f"--out {out} is a directory; give a file path without extension, e.g. {out / 'figure'}.")
    if kind not in PLOTS:
        raise VFLBenchError(f"Unknown plot '{kind}'. Choices: {', '.join(PLOTS)}.")
    if kind != "cd" and len(results) != 1:
        raise VFLBenchError(f"The {kind} plot takes one results folder; the cd plot takes several.")
    given = {"metric": metric, "test_missing": test_missing, "panel": panel, "attack_metric": attack_metric}
    for flag, value in given.items():
        if value is not None and flag not in PLOTS[kind][0]:
            plots = ", ".join(k for k, (takes, _) in PLOTS.items() if flag in takes)
            raise VFLBenchError(
                f"The {kind} plot does not take --{flag.replace('_', '-')}; it applies to the {plots} plot(s)."
            )
    from ..results.outputs import check_output_file

    check_output_file(out.with_suffix(".png"))
    paths = PLOTS[kind][1](results if kind == "cd" else results[0], out, **{k: given[k] for k in PLOTS[kind][0]})
    for p in paths:
        console.print(f"-> {p}")


def _plot_cd(results: list[Path], out: Path) -> list[Path]:
    """A critical-difference diagram over every folder's conditions (A+B: two folders' rows as one)."""
    import pandas as pd

    from ..results.loading import load_many
    from ..results.report import make_table
    from ..results.stats import critical_difference
    from ..results.verdicts import display

    parts = []
    for folder in results:  # a condition: a folder's dataset x train x test, on the dataset's own metric
        joined = [Path(p) for p in str(folder).split("+")]  # A+B: two folders' rows as one (methods side by side)
        _, agg = make_table(load_many(joined), "generic")
        headline = agg.groupby("dataset", sort=False)["metric"].first()  # the generic layout lists it first
        parts.append(agg[agg["metric"] == agg["dataset"].map(headline)].assign(source=str(folder)))
    table = pd.concat(parts).pivot_table(
        index=["source", "dataset", "train_missing", "test_missing"], columns="method", values="mean"
    )
    table.columns = [display(m) for m in table.columns]
    paths, text = critical_difference(table, out)
    console.print(text, highlight=False)
    return paths


def _plot_bars(results: Path, out: Path) -> list[Path]:
    from ..results.plot import plot_bars
    from ..results.report import class_weighting, make_table

    _, agg = make_table(results, "generic")
    seeds = "/".join(map(str, sorted(set(agg["n_seeds"]))))
    title = f"{', '.join(dict.fromkeys(agg['dataset']))}: mean ± std over {seeds} seeds"
    weighting = class_weighting(results)  # a comparison at unequal class weights says so on its face
    return plot_bars(agg, out, title=f"{title}\n{weighting}" if weighting else title)


def _drawer(name: str):
    """A plot of vflbench.results.plot, imported when drawn (matplotlib is heavy)."""

    def draw(results, out, *args, **kw):
        from ..results import plot as plots

        return getattr(plots, name)(results, out, *args, **kw)

    return draw


# kind -> (the options it takes, how it is drawn): the registry of `vflbench plot`
PLOTS = {
    "scalability": (
        {"metric", "test_missing"},
        lambda r, o, metric, test_missing: _drawer("plot_scalability")(r, o, metric or "accuracy", test_missing),
    ),
    "curves": (set(), _drawer("plot_curves")),
    "bars": (set(), _plot_bars),
    "budget": (
        {"metric", "test_missing", "panel"},
        lambda r, o, metric, test_missing, panel: _drawer("plot_budget")(r, o, metric, panel, test_missing),
    ),
    "frontier": ({"metric"}, _drawer("plot_frontier")),
    "communication": (
        {"metric", "test_missing"},
        lambda r, o, metric, test_missing: _drawer("plot_communication")(r, o, metric, test_missing or "none"),
    ),
    "cd": (set(), _plot_cd),
    "privacy": (
        {"metric", "test_missing", "attack_metric"},
        lambda r, o, metric, test_missing, attack_metric: _drawer("plot_privacy")(
            r, o, attack_metric, metric, test_missing or "none"
        ),
    ),
}


@app.command()
@friendly
def report(
    study: Path = typer.Argument(None, metavar="FOLDER", help="a study folder under results/, e.g. results/faults"),
    list_: bool = typer.Option(False, "--list", help="list the studies that declare a report, and what each writes"),
    run: bool = typer.Option(False, "--run", help="first run the study's own measurements (studies that have them)"),
    workers: int = typer.Option(2, help="parallel runs for --run, where the study sweeps"),
):
    """Rebuild a study's summary files (its README's tables) from its runs, by the report the study declares
    (vflbench/studies/: one module a study). Every file is built before any is written."""
    from ..studies import REPORTS, write_report

    if list_ or study is None:
        if study is None and not list_:
            raise VFLBenchError("give a study folder (e.g. results/faults), or --list for the studies with a report.")
        for name, rep in sorted(REPORTS.items()):
            console.print(f"results/{name}: {rep.what}" + (" [--run]" if rep.run else ""), highlight=False)
        return
    for path in write_report(study, run=run, workers=workers):
        console.print(f"wrote {path}", highlight=False)
