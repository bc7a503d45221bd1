"""results/suite_protocol/summary.md: the suite under the referee's protocol (issue 79; experiments/suite.yaml).

The report reads the sweep as far as it has gone and writes:

1. **progress**: per table of each set (the 24 that chose the suite's defaults, ``chosen``, and the 12 hold-out tables
   of experiments/suite_holdout.yaml, ``holdout``) its finished runs, methods, trainings and splits; a table is
   *complete* with every method of the experiment, both trainings and 5 splits (Isolet: its official split, 5 seeds;
   a cell whose runs cost over 15 minutes each may be listed in ``FEWER_SPLITS`` with 3);
2. **ranks, each set apart**, over its complete tables only (a half-run table would leave the ranks unevenly):
   ``vflbench rank`` into ``chosen/`` and ``holdout/`` (ranks, Friedman and Nemenyi over every method, per table the
   corrected resampled t-test with Holm and the 0.5-point margin against xgboost, Wilcoxon over tables);
3. **which claims across tables hold**: per condition and method against xgboost, the old protocol's 24 tables
   (results/suite/all_methods), the complete chosen tables and the hold-out tables side by side, with a verdict (a
   claim: Wilcoxon over the tables passes Holm at 0.05 and the median gap is 0.5 points or more);
4. **the early-stopping default on the hold-out tables**: Standard VFL and LASER-VFL stopped early (this sweep's runs)
   against the fixed 30 epochs it replaced (``results/suite_holdout_defaults``,
   experiments/suite_holdout_defaults.yaml), paired by table, method, condition and split;
5. **the cost**: per method and per cell (a table and a method) the runs' summed hours, median and largest seconds
   and peak RSS, naming the cells over 15 minutes a run; each set's ranks carry their own tables' cost.

    vflbench sweep experiments/suite.yaml --out results/suite_protocol --gather
    vflbench report results/suite_protocol
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from ..data.datasets.suite import read_suite_table, table_sets
from ..methods.base import display_name
from ..results.across_tables import conditions, cost_rows, report, scores, with_train_rows
from ..results.loading import load_results
from ..results.stats import ALPHA, MARGIN, holm  # the per-table rule's thresholds, one place for both
from .registry import register

SPLITS = 5
FIXED = "results/suite_holdout_defaults"  # the fixed-epoch arm, beside this folder under results/
EARLY_STOPPED = ("svfl", "laser")
# cells whose runs cost over 15 minutes each, where 3 splits will do (issue 79): none. Isolet's SecureBoost took 20-36
# min a run in results/suite, but about 8 with early stopping (summary.md, "Cost"), so it has 5 seeds like the rest
FEWER_SPLITS: dict[tuple[str, str], int] = {}
COSTLY_S = 15 * 60  # a run over this many seconds makes its cell costly (issue 79's bar for 3 splits)
ROWWISE = "results/suite/all_methods"  # the 24 tables under the old protocol (one split, 3 seeds): the claims tested
# the pair results/suite/README.md names beside the claims against xgboost: is LASER-VFL the best method, or level
# with Combinatorial? Wilcoxon over the tables, Holm over the pair's four conditions
PAIR = ("laser", "combinatorial")


def progress(df: pd.DataFrame, methods: int) -> pd.DataFrame:
    """Per table of each set: finished runs, methods, trainings, splits, and whether it is complete."""
    rows = []
    for which, names in table_sets().items():
        for name in names:
            source = read_suite_table(name).source
            d = df[df["dataset"] == source]
            runs, m = d["run_id"].nunique(), d["method"].nunique()
            trainings, splits = d["train_missing"].nunique(), d["seed"].nunique()
            per = d.groupby(["method", "train_missing"])["seed"].nunique()  # splits per method and training
            need = [FEWER_SPLITS.get((name, method), SPLITS) for method, _ in per.index]
            full = m >= methods and trainings >= 2 and len(per) >= methods * 2 and bool((per.to_numpy() >= need).all())
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


def _direction(row) -> int:
    """+1 (ahead of xgboost) or -1 (behind) where the Wilcoxon test over the tables passes Holm at ALPHA and the
    median gap is at least MARGIN points that way; else 0 (not told apart, or too small to matter)."""
    if row is None:
        return 0
    p, gap = float(row["wilcoxon_p_holm"]), float(row["median_gap"])
    if not (p < ALPHA) or abs(gap) < MARGIN:
        return 0
    return 1 if gap > 0 else -1


def _cell(row) -> str:
    if row is None:
        return "-"
    p = float(row["wilcoxon_p_holm"])
    return f"{float(row['median_gap']):+.1f} (p = {p:.2g}, {int(row['tables'])})" if p == p else "-"


def _verdict(old: int, chosen: int, holdout: int) -> str:
    """The old claim (the 24 tables, one split) against the two sets of this protocol; each -1, 0 or +1."""
    word = {1: "ahead", -1: "behind"}
    found = [f"{word[v]} on the {n} tables" for n, v in (("chosen", chosen), ("hold-out", holdout)) if v]
    if old:
        if chosen == old and holdout == old:
            return f"{word[old]}: held on both sets"
        kept = [n for n, v in (("chosen", chosen), ("hold-out", holdout)) if v == old]
        return f"{word[old]}: held on the {kept[0]} tables only" if kept else f"{word[old]}: did not hold"
    if chosen and chosen == holdout:
        return f"no claim before; {word[chosen]} on both sets"
    return "no claim before; " + (", ".join(found) if found else "none on either set")


def claims_lines(folder: Path, versus: dict[str, pd.DataFrame]) -> list[str]:
    """Which across-table claims hold: per condition and method, its median gap to xgboost and Wilcoxon p (Holm) on
    the old protocol's 24 tables (``ROWWISE``), on this sweep's complete chosen tables and on its hold-out tables,
    and a verdict. A claim is a direction (ahead or behind) that needs Holm p < ALPHA and a median gap of MARGIN
    points or more; the chosen tables under this protocol are the same tables as the old 24 with splits that vary,
    grouped entities and audited columns, the hold-out tables are new."""
    old_file = folder.parent / Path(ROWWISE).relative_to("results") / "versus_xgboost.csv"
    sets = dict(versus)
    if old_file.exists():
        sets = {"rowwise": pd.read_csv(old_file), **sets}
    lines = ["## Which claims across tables hold", ""]
    if not {"chosen", "holdout"} <= set(sets):
        return [*lines, "(each set needs two complete tables or more: not compared yet)", ""]
    key = ["train_missing", "test_missing", "method"]
    index = {n: {tuple(r[k] for k in key): r for _, r in d.iterrows()} for n, d in sets.items()}
    cells = sorted(set().union(*(set(i) for i in index.values())))
    lines += [
        f"Each method against xgboost: the median over tables of its gap (points), the Wilcoxon signed-rank p over "
        f"the tables (Holm over the methods) and the tables counted. A claim is a direction that passes Holm at "
        f"{ALPHA} with a median gap of {MARGIN} points or more. `rowwise`: the 24 tables under the old protocol "
        f"(`{ROWWISE}`: one split, 3 seeds, entities across it); `chosen`: the same tables under this protocol, the "
        f"complete ones; `hold-out`: the 12 tables fixed before any run.",
        "",
        "| training -> test | method | rowwise | chosen | hold-out | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for cell in cells:
        rows = {n: index[n].get(cell) for n in index}
        tr, te, m = cell
        verdict = _verdict(_direction(rows.get("rowwise")), _direction(rows["chosen"]), _direction(rows["holdout"]))
        lines.append(
            f"| {tr} -> {te} | {display_name(m)} | {_cell(rows.get('rowwise'))} | {_cell(rows['chosen'])} | "
            f"{_cell(rows['holdout'])} | {verdict} |"
        )
    return [*lines, ""]


def pair_versus(sc: pd.DataFrame, pair: tuple[str, str] = PAIR) -> pd.DataFrame:
    """``pair[0]`` against ``pair[1]`` in each condition of these scores: per table the corrected t-test over the
    splits (Holm over the tables, the margin), over the tables the median gap and the Wilcoxon p, Holm over the
    conditions (the pair's tests, the family its claims come from)."""
    a, b = pair
    rows = []
    for cond in conditions(sc[sc["method"].isin(pair)], reference=b):
        if a in cond.versus.index:
            rows.append({"train_missing": cond.train, "test_missing": cond.test, "method": a,
                         **cond.versus.loc[a].drop("wilcoxon_p_holm").to_dict()})  # fmt: skip
    out = pd.DataFrame(rows)
    if len(out):
        out["wilcoxon_p_holm"] = holm(out["wilcoxon_p"].tolist())
    return out


def pair_lines(folder: Path, sc: pd.DataFrame, sets: dict, pair: tuple[str, str] = PAIR) -> list[str]:
    """The pair's claims on the old protocol's 24 tables (its runs in ``folder``'s sibling ``suite``), the complete
    chosen tables and the hold-out tables, with the claims table's verdicts."""
    a, b = pair
    found = {}
    old = folder.parent / Path(ROWWISE).relative_to("results").parent
    if (old / "results.csv").exists():
        found["rowwise"] = pair_versus(scores(with_train_rows(load_results(old), old)), pair)
    for which, (sources, _) in sets.items():
        if len(sources) >= 2:
            found[which] = pair_versus(sc[sc["dataset"].isin(sources)], pair)
    lines = [f"## {display_name(a)} against {display_name(b)}", ""]
    if not {"chosen", "holdout"} <= set(found):
        return [*lines, "(each set needs two complete tables or more: not compared yet)", ""]
    index = {n: {(r["train_missing"], r["test_missing"]): r for _, r in d.iterrows()} for n, d in found.items()}
    lines += [
        f"The pair `results/suite/README.md` names: {display_name(a)}'s median gap to {display_name(b)} over the "
        f"tables (points), the Wilcoxon signed-rank p over the tables with Holm over the pair's four conditions, the "
        f"tables counted, and per table {display_name(a)}'s wins / ties / losses (the corrected resampled t-test, "
        f"Holm over the tables, {MARGIN}-point margin). The sets and the verdict as in the claims table above.",
        "",
        "| training -> test | rowwise | chosen | hold-out | chosen W/T/L | hold-out W/T/L | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for cell in sorted(set().union(*(set(i) for i in index.values()))):
        rows = {n: index[n].get(cell) for n in index}
        wtl = {n: "-" if r is None else f"{r['wins']:.0f}/{r['ties']:.0f}/{r['losses']:.0f}" for n, r in rows.items()}
        verdict = _verdict(_direction(rows.get("rowwise")), _direction(rows["chosen"]), _direction(rows["holdout"]))
        lines.append(
            f"| {cell[0]} -> {cell[1]} | {_cell(rows.get('rowwise'))} | {_cell(rows['chosen'])} | "
            f"{_cell(rows['holdout'])} | {wtl['chosen']} | {wtl['holdout']} | {verdict} |"
        )
    return [*lines, ""]


def cost_lines(costs: pd.DataFrame, names: dict[str, str], top: int = 8) -> list[str]:
    """The sweep's cost: per method (runs, summed hours, median and largest seconds a run, largest peak RSS) and the
    ``top`` costliest cells (a table and a method, by median seconds a run), naming the cells over 15 minutes a run.
    ``costs``: one row per run (``cost_rows``); ``names``: source -> suite table name."""
    if costs.empty:
        return []
    per = dict(runs=("seconds", "size"), hours=("seconds", "sum"), median_s=("seconds", "median"),
               max_s=("seconds", "max"), rss=("peak_rss_gb", "max"))  # fmt: skip
    by_method = costs.groupby("method").agg(**per).sort_values("hours", ascending=False)
    cells = costs.groupby(["dataset", "method"]).agg(**per).sort_values("median_s", ascending=False)
    slow = cells[cells["median_s"] > COSTLY_S]
    lines = [
        f"## Cost: {len(costs)} runs, {costs['seconds'].sum() / 3600:.2f} hours of run time summed, the largest peak "
        f"RSS {costs['peak_rss_gb'].max():.2f} GB",
        "",
        "Each run's wall seconds and peak RSS from its manifest (two workers on a 2-core VM, so a run's seconds "
        f"include sharing the machine; {int((costs['pack'] > 1).sum())} runs were trained in packs, a vectorised bank "
        "of the runs that differ only in their seed and training, and count their share of the pack's seconds).",
        "",
        "| method | runs | hours summed | median s a run | largest s | largest peak RSS (GB) |",
        "|---|---|---|---|---|---|",
        *(
            f"| {display_name(m)} | {int(r.runs)} | {r.hours / 3600:.2f} | {r.median_s:.0f} | {r.max_s:.0f} | "
            f"{r.rss:.2f} |"
            for m, r in by_method.iterrows()
        ),
        "",
        f"The {top} costliest cells (a table and a method, both trainings), by median seconds a run; "
        + (
            "over 15 minutes a run: " + ", ".join(f"{names.get(d, d)}'s {display_name(m)}" for d, m in slow.index)
            if len(slow)
            else "no cell takes over 15 minutes a run"
        )
        + ":",
        "",
        "| table | method | runs | hours summed | median s a run | largest s | largest peak RSS (GB) |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {names.get(d, d)} | {display_name(m)} | {int(r.runs)} | {r.hours / 3600:.2f} | {r.median_s:.0f} | "
            f"{r.max_s:.0f} | {r.rss:.2f} |"
            for (d, m), r in cells.head(top).iterrows()
        ),
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
        f"{int((done['set'] == 'holdout').sum())} hold-out. Rebuilt by `vflbench report results/suite_protocol`. "
        + (
            "Fewer splits, where a run costs over 15 minutes: "
            + ", ".join(f"{t}'s {display_name(m)} ({n})" for (t, m), n in FEWER_SPLITS.items())
            + "."
            if FEWER_SPLITS
            else f"Every cell needs {SPLITS} splits (no cell takes the 3 allowed where a run costs over 15 minutes)."
        ),
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
    versus = {}
    for which in ("chosen", "holdout"):
        complete, names = sets[which]
        if len(complete) >= 2:
            versus[which] = pd.read_csv(io.BytesIO(_ranked(folder, complete)[1]["versus_xgboost.csv"]))
    lines += claims_lines(folder, versus)
    lines += pair_lines(folder, sc, sets)
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
    lines += cost_lines(cost_rows(folder), dict(zip(done["source"], done["table"], strict=True)))
    lines += early_stopping_lines(folder, sc)
    return {"summary.md": "\n".join(lines)}
