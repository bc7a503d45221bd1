"""results/suite_protocol/summary.md: the suite under the referee's protocol (issue 79; experiments/suite.yaml).

The report reads the sweep as far as it has gone and writes:

1. **progress**: per table of each set (the 24 that chose the suite's defaults, ``chosen``, and the 12 hold-out tables
   of experiments/suite_holdout.yaml, ``holdout``) its finished runs, methods, trainings and splits; a table is
   *complete* with every method of the experiment, both trainings and 5 splits (Isolet: its official split, 5 seeds);
2. **ranks, each set apart**, over its complete tables only (a half-run table would leave the ranks unevenly):
   ``vflbench rank`` into ``chosen/`` and ``holdout/`` (ranks, Friedman and Nemenyi over every method, per table the
   corrected resampled t-test with Holm and the 0.5-point margin against xgboost, Wilcoxon over tables);
3. **the early-stopping default on the hold-out tables**: Standard VFL and LASER-VFL stopped early (this sweep's runs)
   against the fixed 30 epochs it replaced (``results/suite_holdout_defaults``,
   experiments/suite_holdout_defaults.yaml), paired by table, method, condition and split;
and, with each set's ranks, the cost: summed run hours, the largest peak RSS and the costliest runs.

    vflbench sweep experiments/suite.yaml --out results/suite_protocol --gather
    vflbench report results/suite_protocol
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..data.datasets.suite import read_suite_table, table_sets
from ..methods.base import display_name
from ..results.across_tables import report, scores, with_train_rows
from ..results.loading import load_results
from .registry import register

SPLITS = 5
FIXED = "results/suite_holdout_defaults"  # the fixed-epoch arm, beside this folder under results/
EARLY_STOPPED = ("svfl", "laser")


def progress(df: pd.DataFrame, methods: int) -> pd.DataFrame:
    """Per table of each set: finished runs, methods, trainings, splits, and whether it is complete."""
    rows = []
    for which, names in table_sets().items():
        for name in names:
            source = read_suite_table(name).source
            d = df[df["dataset"] == source]
            runs, m = d["run_id"].nunique(), d["method"].nunique()
            trainings, splits = d["train_missing"].nunique(), d["seed"].nunique()
            full = m >= methods and trainings >= 2 and splits >= SPLITS and runs >= methods * 2 * SPLITS
            rows.append(dict(set=which, table=name, source=source, runs=runs, methods=m, trainings=trainings,
                             splits=splits, complete=bool(full)))  # fmt: skip
    return pd.DataFrame(rows)


def early_stopping_lines(folder: Path, sc: pd.DataFrame) -> list[str]:
    """The early-stopped runs of this sweep against the fixed-epoch arm, on the hold-out tables, paired by table,
    method, condition and split: per method the cells ahead, the median gap and its range (points)."""
    fixed_dir = folder.parent / Path(FIXED).name
    lines = ["## The early-stopping default on the hold-out tables", ""]
    if not fixed_dir.exists():
        return [*lines, f"(`{FIXED}` not run yet: experiments/suite_holdout_defaults.yaml)", ""]
    fixed = scores(with_train_rows(load_results(fixed_dir), fixed_dir))
    key = ["dataset", "method", "train_missing", "test_missing", "seed"]
    both = sc[sc["method"].isin(EARLY_STOPPED)].merge(fixed[[*key, "value"]], on=key, suffixes=("_early", "_fixed"))
    if both.empty:
        return [*lines, "(no hold-out run of both arms yet)", ""]
    cells = both.groupby(["dataset", "method", "train_missing", "test_missing"])[["value_early", "value_fixed"]].mean()
    cells["gap"] = cells["value_early"] - cells["value_fixed"]
    lines += [
        "Stopped early (at most 100 epochs, the best epoch on the held-out 0.1 of the training rows, patience 10: "
        "this sweep's runs) minus the fixed 30 epochs it replaced, the same rows, splits and masks; a cell is a "
        "table, method and condition, its mean over the paired splits (points).",
        "",
        "| method | tables | cells | early stopping ahead | median gap | range | tables' mean gap: median |",
        "|---|---|---|---|---|---|---|",
    ]
    for m, g in cells.groupby(level="method"):
        per_table = g.groupby(level="dataset")["gap"].mean()
        lines.append(
            f"| {display_name(m)} | {len(per_table)} | {len(g)} | {int((g['gap'] > 0).sum())} | "
            f"{g['gap'].median():+.2f} | {g['gap'].min():+.2f} to {g['gap'].max():+.2f} | {per_table.median():+.2f} |"
        )
    worst = cells.sort_values("gap").head(3)
    lines += [
        "",
        "Worst cells: "
        + "; ".join(
            f"{d.split('/')[-1]} {display_name(m)} {tr}->{te} {r.gap:+.2f}" for (d, m, tr, te), r in worst.iterrows()
        )
        + ".",
        "",
    ]
    return lines


def complete_sets(folder: Path, df: pd.DataFrame | None = None) -> tuple[pd.DataFrame, dict]:
    """The progress table, and per set its complete tables' (sources, suite names)."""
    df = load_results(folder) if df is None else df
    done = progress(df, df["method"].nunique())
    sets = {}
    for which in ("chosen", "holdout"):
        rows = done[(done["set"] == which) & done["complete"]]
        sets[which] = (rows["source"].tolist(), rows["table"].tolist())
    return done, sets


# rank's output per (folder, tables), kept in memory by the summary's build (which writes nothing) so that the
# figures step writes the same files without ranking again: {(folder, tables): (Markdown, {file name: bytes})}
_RANKED: dict[tuple[str, tuple[str, ...]], tuple[str, dict[str, bytes]]] = {}


def _ranked(folder: Path, sources: list[str]) -> tuple[str, dict[str, bytes]]:
    """rank's Markdown and files for these tables, built once per process in a folder thrown away."""
    import tempfile

    from ..results.verdicts import display

    key = (str(folder.resolve()), tuple(sources))
    if key not in _RANKED:
        with tempfile.TemporaryDirectory() as tmp:
            text = report(folder, Path(tmp), "xgboost", display, None, sources)
            _RANKED[key] = (text, {f.name: f.read_bytes() for f in sorted(Path(tmp).iterdir()) if f.is_file()})
    return _RANKED[key]


def rank_sets(folder: Path) -> list[Path]:
    """``vflbench rank`` over each set's complete tables into ``chosen/`` and ``holdout/`` (ranks, tests and diagrams;
    the files the summary's build ranked, else ranked now); the paths written."""
    _, sets = complete_sets(folder)
    out = []
    for which, (sources, _) in sets.items():
        if len(sources) >= 2:
            (folder / which).mkdir(parents=True, exist_ok=True)
            for name, data in _ranked(folder, sources)[1].items():
                (folder / which / name).write_bytes(data)
            _RANKED.pop((str(folder.resolve()), tuple(sources)), None)  # used once: a later report ranks afresh
            out += sorted((folder / which).iterdir())
    return out


@register(
    "suite_protocol",
    "summary.md (progress per table, ranks of the complete tables of each set apart with the cost, the early-stopping "
    "default on the hold-out tables) and chosen/, holdout/ (vflbench rank over each set)",
    figures=rank_sets,
)
def build(folder: Path) -> dict[str, str]:
    df = load_results(folder)
    methods = df["method"].nunique()
    done, sets = complete_sets(folder, df)
    sc = scores(with_train_rows(df, folder))
    lines = [
        "# The suite under the referee's protocol: progress and conclusions so far",
        "",
        f"{df['run_id'].nunique()} runs finished of {len(done)} tables x {methods} methods x 2 trainings x {SPLITS} "
        f"splits; complete tables: {int(done[done['set'] == 'chosen']['complete'].sum())} of "
        f"{int((done['set'] == 'chosen').sum())} chosen, {int(done[done['set'] == 'holdout']['complete'].sum())} of "
        f"{int((done['set'] == 'holdout').sum())} hold-out. Rebuilt by `vflbench report results/suite_protocol`.",
        "",
        "| set | table | runs | methods | trainings | splits | complete |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {r.set} | {r.table} | {r.runs} | {r.methods} | {r.trainings} | {r.splits} | "
            f"{'yes' if r.complete else ''} |"
            for r in done.itertuples()
        ),
        "",
    ]
    for which in ("chosen", "holdout"):
        complete, names = sets[which]
        lines += [f"## Ranks over the complete {which} tables ({len(complete)})", ""]
        if len(complete) < 2:
            lines += ["(fewer than two complete tables: not ranked yet)", ""]
            continue
        text = _ranked(folder, complete)[0]
        lines += [
            f"`vflbench rank results/suite_protocol --tables {','.join(names)} --out results/suite_protocol/{which}`:",
            "",
        ]
        lines += [ln.replace("](cd_", f"]({which}/cd_") for ln in text.splitlines()] + [""]
    lines += early_stopping_lines(folder, sc)
    return {"summary.md": "\n".join(lines)}
