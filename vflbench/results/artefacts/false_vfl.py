"""The FALSE-VFL paper's tables from tidy results: Tables 12-17 (one per training regime; test
regimes as columns; dataset x method rows), Table 2 (the gap between the best FALSE-VFL variant and
the best baseline) and Table 18 (100 x accuracy trained under MCAR 5 / under MCAR 2).

Rules, as in the paper's captions:

* mean accuracy (%) over seeds and the **sample** standard deviation (ddof 1; the paper does not say
  which; a cell with one seed shows "(1 seed)" instead of a std);
* every baseline is run twice, with SimSiam pretraining (``pretrain=simsiam``) and on labeled data
  only (``pretrain=none``); a cell reports the better mean, with an asterisk when the labeled-only
  variant won;
* bold marks the best mean of a column within a dataset block;
* with a reference, each cell shows the paper's number beside ours, and a cell "agrees" when
  |ours - paper| <= max(2 x paper std, 2 points).

The paper's gaps (Table 2) take the best of four baselines, FedHSSL included; where our results lack
some baselines, the paper's gap is also given over the same baselines as ours.

Rows of a baseline run with options beyond ``pretrain`` (e.g. a reading of the paper's LASER-VFL,
``heads=active``) or with non-default protocol options (``protocol_options``, e.g.
``laser_epochs=100``) are printed under that baseline, labelled with those options, beside the
paper's row; they never enter the best-of-baselines gaps or the bold marks.

With validation rows (protocol option ``val_split``: ``val_accuracy`` per test regime), a section
compares the variant chosen on the test set (the paper's rule) with the one chosen on the
validation samples."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...core.errors import VFLBenchError
from .base import ARTEFACTS, Artefact, Layout

DATASETS = {"isolet": "Isolet", "hapt": "HAPT", "fashion-mnist": "FashionMNIST", "modelnet10": "ModelNet10"}
METHODS = {
    "svfl": "Vanilla VFL",
    "laser": "LASER-VFL",
    "plug": "PlugVFL",
    "fedhssl": "FedHSSL",
    "false1": "FALSE-VFL-I",
    "false2": "FALSE-VFL-II",
}
PAPER_ROWS = ["Vanilla VFL", "LASER-VFL", "PlugVFL", "FedHSSL", "FALSE-VFL-I", "FALSE-VFL-II"]
FALSE_ROWS = ("FALSE-VFL-I", "FALSE-VFL-II")
TRAIN = {
    "mcar:0.2": "MCAR 2",
    "mcar:0.5": "MCAR 5",
    "mar1": "MAR 1",
    "mar2": "MAR 2",
    "mnar:0.7": "MNAR 7",
    "mnar:0.9": "MNAR 9",
}
TEST = {"none": "MCAR 0", **TRAIN}
TABLE_OF = {"MCAR 2": 12, "MCAR 5": 13, "MAR 1": 14, "MAR 2": 15, "MNAR 7": 16, "MNAR 9": 17}
TEST_COLS = list(TEST.values())


def _options(options) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in str(options).split(";") if "=" in kv) if isinstance(options, str) else {}


def _pretrain(options) -> str:
    return _options(options).get("pretrain", "none")


def _reading(options, protocol_options, shared: frozenset = frozenset()) -> str:
    """The options that make a row another reading of its method: user options other than pretrain
    and other than ``shared`` (set alike on every run of the method in the table: the table's own
    configuration of it, e.g. a CPU-sized model, not an alternative reading), then non-default
    protocol options ("" for the paper's own row)."""
    extra = [f"{k}={v}" for k, v in sorted(_options(options).items()) if k != "pretrain" and f"{k}={v}" not in shared]
    extra += [kv for kv in str(protocol_options).split(";") if "=" in kv] if isinstance(protocol_options, str) else []
    return ", ".join(extra)


def paper_cells(df: pd.DataFrame, metric: str = "accuracy") -> pd.DataFrame:
    """Per (dataset, method row, train, test, variant): mean, sample std and seed count of ``metric``."""
    d = df[(df["metric"] == metric) & df["method"].isin(METHODS) & df["dataset"].isin(DATASETS)].copy()
    d = d[d["train_missing"].isin(TRAIN) & d["test_missing"].isin(TEST)]
    if d.empty:
        raise VFLBenchError(
            "No FALSE-VFL table cells in these results: expected accuracy rows of svfl/laser/plug/false1/false2 on "
            f"{', '.join(DATASETS)} under training regimes {', '.join(TRAIN)}."
        )
    d["Dataset"] = d["dataset"].map(DATASETS)
    opts = d["options"] if "options" in d.columns else pd.Series("", index=d.index)
    popts = d["protocol_options"] if "protocol_options" in d.columns else pd.Series("", index=d.index)
    pairs = [frozenset(f"{k}={v}" for k, v in _options(o).items() if k != "pretrain") for o in opts]
    shared = {
        m: frozenset.intersection(*[p for p, mm in zip(pairs, d["method"], strict=True) if mm == m])
        for m in set(d["method"])
    }
    reading = [_reading(o, p, shared[m]) for o, p, m in zip(opts, popts, d["method"], strict=True)]
    d["Method"] = [METHODS[m] + (f" ({r})" if r else "") for m, r in zip(d["method"], reading, strict=True)]
    d["Train"] = d["train_missing"].map(TRAIN)
    d["Test"] = d["test_missing"].map(TEST)
    d["variant"] = opts.map(_pretrain)
    g = d.groupby(["Dataset", "Method", "Train", "Test", "variant"], sort=False)["value"]
    out = g.agg(mean="mean", std=lambda v: float(np.std(v, ddof=1)) if len(v) > 1 else np.nan, n="count").reset_index()
    return out


def best_of_variants(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, method, train, test): the better variant's numbers; ``labeled_only``
    when the labeled-only run (no pretraining) won while a pretrained one was also run."""
    rows = []
    for key, g in cells.groupby(["Dataset", "Method", "Train", "Test"], sort=False):
        best = g.loc[g["mean"].idxmax()]
        variants = set(g["variant"])
        rows.append(
            {
                **dict(zip(["Dataset", "Method", "Train", "Test"], key, strict=True)),
                "mean": best["mean"],
                "std": best["std"],
                "n": int(best["n"]),
                "labeled_only": bool(best["variant"] == "none" and "simsiam" in variants and key[1] not in FALSE_ROWS),
                "variants": ",".join(sorted(variants)),
                "reading": key[1] not in PAPER_ROWS,
                "variant": best["variant"],
            }
        )
    return pd.DataFrame(rows)


def base_row(method: str) -> str:
    """The paper row a reading belongs to: "LASER-VFL (missing=zero)" -> "LASER-VFL"."""
    return method.split(" (", 1)[0]


def load_paper(ref: pd.DataFrame) -> pd.DataFrame:
    need = {"dataset", "method", "train_mechanism", "test_mechanism", "mean", "std", "labeled_only_variant"}
    if need - set(ref.columns):
        raise VFLBenchError(
            f"The reference CSV lacks column(s) {', '.join(sorted(need - set(ref.columns)))}; the false-tables layout "
            "reads "
            "vflbench/results/reference/false_tables12_17.csv's columns."
        )
    r = ref.rename(
        columns={
            "dataset": "Dataset",
            "method": "Method",
            "train_mechanism": "Train",
            "test_mechanism": "Test",
            "mean": "paper_mean",
            "std": "paper_std",
            "labeled_only_variant": "paper_labeled_only",
        }
    )
    r["paper_labeled_only"] = r["paper_labeled_only"].astype(str).str.lower() == "true"
    return r[["Dataset", "Method", "Train", "Test", "paper_mean", "paper_std", "paper_labeled_only"]]


def agrees(ours: float, paper: float, paper_std: float) -> bool:
    return abs(ours - paper) <= max(2 * paper_std, 2.0)


def _cell(r, bold: bool, with_ref: bool, table_n: int | None = None) -> str:
    """``mean (std)``; the seed count is added where it differs from the table's (``table_n``)."""
    std = "1 seed" if r["n"] < 2 or pd.isna(r["std"]) else f"{r['std']:.1f}"
    if r["n"] >= 2 and table_n is not None and int(r["n"]) != table_n:
        std += f", {int(r['n'])} seeds"
    s = f"{r['mean']:.1f} ({std}){'*' if r['labeled_only'] else ''}"
    if bold:
        s = f"**{s}**"
    if with_ref and not pd.isna(r.get("paper_mean", np.nan)):
        s += f" [{r['paper_mean']:.1f}{'*' if r['paper_labeled_only'] else ''}]"
    return s


def gaps(best: pd.DataFrame, value: str = "mean", baselines=None) -> pd.DataFrame:
    """Per (dataset, train, test): best FALSE-VFL minus best baseline (``baselines``: which rows)."""
    out = []
    for key, g in best.groupby(["Dataset", "Train", "Test"], sort=False):
        f = g[g["Method"].isin(FALSE_ROWS)][value].dropna()
        b = g[~g["Method"].isin(FALSE_ROWS) & (g["Method"].isin(baselines) if baselines else True)][value].dropna()
        if len(f) and len(b):
            out.append({**dict(zip(["Dataset", "Train", "Test"], key, strict=True)), "gap": float(f.max() - b.max())})
    return pd.DataFrame(out, columns=["Dataset", "Train", "Test", "gap"])


def _md(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *["| " + " | ".join(r) + " |" for r in rows]]


def false_tables(df: pd.DataFrame, ref: pd.DataFrame | None, title: str | None = None) -> tuple[str, pd.DataFrame]:
    """The Markdown tables and the cell frame (ours, with the paper's numbers when ``ref`` is given)."""
    best = best_of_variants(paper_cells(df))
    with_ref = ref is not None
    if with_ref:
        best = (
            best.assign(Row=best["Method"].map(base_row))
            .merge(
                load_paper(ref).rename(columns={"Method": "Row"}), on=["Dataset", "Row", "Train", "Test"], how="left"
            )
            .drop(columns="Row")
        )
    lines = [f"# {title or 'FALSE-VFL Tables 12-17'}", ""]
    lines += [
        'Mean accuracy (%) and sample std over seeds (in parentheses; "1 seed" where only one ran). Baselines: the '
        "better of "
        "SimSiam-pretrained and labeled-only, with * where labeled-only won. Bold: best in its column within a dataset."
        + (" In brackets: the paper's number." if with_ref else ""),
        "",
    ]
    test_cols = [t for t in TEST_COLS if t in set(best["Test"])]
    for train in [t for t in TRAIN.values() if t in set(best["Train"])]:
        ns = best.loc[best["Train"] == train, "n"].astype(int)
        table_n = int(ns.mode().iloc[0])  # the usual seed count of this table; other counts are named in their cells
        lines += [
            f"## Table {TABLE_OF[train]}: trained under {train} ({table_n} seed{'s' if table_n != 1 else ''} per cell"
            + (", except where a cell says otherwise" if ns.nunique() > 1 else "")
            + ")",
            "",
        ]
        rows = []
        for ds in [d for d in DATASETS.values() if d in set(best["Dataset"])]:
            block = best[(best["Train"] == train) & (best["Dataset"] == ds)]
            top = block[~block["reading"]].groupby("Test")["mean"].max()
            readings = sorted(m for m in set(block["Method"]) if m not in PAPER_ROWS)
            order = [
                x
                for m in PAPER_ROWS
                for x in ([m] if m in set(block["Method"]) else []) + [r for r in readings if base_row(r) == m]
            ]
            for method in order:
                cells = []
                for t in test_cols:
                    r = block[(block["Method"] == method) & (block["Test"] == t)]
                    cells.append(
                        ""
                        if r.empty
                        else _cell(
                            r.iloc[0],
                            t in top.index and bool(np.isclose(r.iloc[0]["mean"], top[t])) and not r.iloc[0]["reading"],
                            with_ref,
                            table_n,
                        )
                    )
                rows.append([ds, method, *cells])
        lines += _md(["Dataset", "Method", *test_cols], rows) + [""]
    readings = best[best["reading"]]
    best = best[~best["reading"]]
    lines += table2(best, ref, readings) + table18(best, ref) + validation_choice(df)
    if with_ref:
        m = best.dropna(subset=["paper_mean"])
        ok = [agrees(a, b, s) for a, b, s in zip(m["mean"], m["paper_mean"], m["paper_std"], strict=True)]
        lines += [
            "## Agreement with the paper",
            "",
            f"{int(np.sum(ok))} of {len(ok)} cells within max(2 x paper std, 2 points) of the paper.",
        ]
        per = m.assign(ok=ok).groupby(["Dataset", "Method"], sort=False)["ok"].agg(["sum", "count"])
        lines += [f"- {ds}, {meth}: {int(r['sum'])}/{int(r['count'])}" for (ds, meth), r in per.iterrows()] + [""]
        rd = readings.dropna(subset=["paper_mean"])
        if len(rd):
            rok = [agrees(a, b, s) for a, b, s in zip(rd["mean"], rd["paper_mean"], rd["paper_std"], strict=True)]
            per = rd.assign(ok=rok).groupby(["Dataset", "Method"], sort=False)["ok"].agg(["sum", "count"])
            lines += ["Readings, against the paper's row of their baseline (not counted above):", ""]
            lines += [f"- {ds}, {meth}: {int(r['sum'])}/{int(r['count'])}" for (ds, meth), r in per.iterrows()] + [""]
            lines += reading_gaps(m, rd, test_cols)
    return "\n".join(lines) + "\n", best


def reading_gaps(rows: pd.DataFrame, readings: pd.DataFrame, test_cols: list[str]) -> list[str]:
    """Per cell, ours minus the paper (points) for each reading and, above it, the row it reads, on the cells
    the readings ran; the last column counts the cells in agreement."""
    out = []
    for (ds, train), rd in readings.groupby(["Dataset", "Train"], sort=False):
        cols = [t for t in test_cols if t in set(rd["Test"])]
        table = []
        for meth in [*dict.fromkeys(map(base_row, rd["Method"])), *dict.fromkeys(rd["Method"])]:
            src = rd if meth in set(rd["Method"]) else rows
            r = src[(src["Dataset"] == ds) & (src["Train"] == train) & (src["Method"] == meth)].set_index("Test")
            if r.empty:
                continue
            gaps = [f"{r.at[t, 'mean'] - r.at[t, 'paper_mean']:+.1f}" if t in r.index else "" for t in cols]
            ok = [agrees(r.at[t, "mean"], r.at[t, "paper_mean"], r.at[t, "paper_std"]) for t in cols if t in r.index]
            table.append([meth, *gaps, f"{int(np.sum(ok))}/{len(ok)}"])
        out += [f"Gap to the paper per cell (ours - paper, points), {ds}, trained under {train}:", ""]
        out += _md(["Method", *cols, "agree"], table) + [""]
    return out


def _mean_gap_on(p: pd.DataFrame | None, keys: set) -> str:
    """The paper's mean gap over the same (dataset, train, test) cells as ours."""
    if p is None:
        return ""
    sel = p[[k in keys for k in zip(p["Dataset"], p["Train"], p["Test"], strict=True)]]
    return f"{sel['gap'].mean():+.1f}" if len(sel) else ""


def _gap_rows(
    ours: pd.DataFrame, paper4: pd.DataFrame | None, paper3: pd.DataFrame | None, by: str, order: list[str]
) -> list[list[str]]:
    rows = []
    for v in [o for o in order if o in set(ours[by])]:
        o = ours[ours[by] == v]
        keys = set(zip(o["Dataset"], o["Train"], o["Test"], strict=True))
        p3, p4 = _mean_gap_on(paper3, keys), _mean_gap_on(paper4, keys)
        same = "" if not p3 else ("yes" if np.sign(o["gap"].mean()) == np.sign(float(p3)) else "no")
        rows.append([v, str(len(o)), f"{o['gap'].mean():+.1f}", p3, p4, same])
    return rows


def table2(best: pd.DataFrame, ref: pd.DataFrame | None, readings: pd.DataFrame | None = None) -> list[str]:
    ours = gaps(best)
    if ours.empty:
        return []
    paper4 = paper3 = None
    have = sorted(set(best["Method"]) - set(FALSE_ROWS))
    if ref is not None:
        p = load_paper(ref).rename(columns={"paper_mean": "mean"})
        paper4 = gaps(p)
        paper3 = gaps(p, baselines=have)
    header = ["", "cells", "ours", f"paper (same {len(have)} baselines)", "paper (published, 4 baselines)", "same sign"]
    lines = ["## Table 2: gap of the best FALSE-VFL to the best baseline (points, averaged over the cells we ran)", ""]
    if readings is not None and len(readings):
        rows = []
        for name in sorted(set(readings["Method"])):
            r = readings[readings["Method"] == name]
            keys = set(zip(r["Dataset"], r["Train"], r["Test"], strict=True))
            sub = best[[k in keys for k in zip(best["Dataset"], best["Train"], best["Test"], strict=True)]]
            swapped = pd.concat(
                [sub[sub["Method"] != base_row(name)], r.assign(Method=base_row(name))], ignore_index=True
            )
            g0, g1 = gaps(sub), gaps(swapped)
            p3 = _mean_gap_on(paper3, keys)
            rows.append([name, str(len(g1)), f"{g0['gap'].mean():+.1f}", f"{g1['gap'].mean():+.1f}", p3])
        lines += ["With a reading of a baseline in place of our row (same cells only):", ""]
        lines += _md(
            ["reading", "cells", "gap, ours", "gap with the reading", f"paper (same {len(have)} baselines)"], rows
        ) + [""]
    lines += (
        ["### (b) per training regime", ""]
        + _md(["training regime", *header[1:]], _gap_rows(ours, paper4, paper3, "Train", list(TRAIN.values())))
        + [""]
    )
    lines += (
        ["### (a) per dataset", ""]
        + _md(["dataset", *header[1:]], _gap_rows(ours, paper4, paper3, "Dataset", list(DATASETS.values())))
        + [""]
    )
    lines += (
        ["### (c) per test regime", ""]
        + _md(["test regime", *header[1:]], _gap_rows(ours, paper4, paper3, "Test", TEST_COLS))
        + [""]
    )
    return lines


def table18(best: pd.DataFrame, ref: pd.DataFrame | None) -> list[str]:
    """100 x mean accuracy trained under MCAR 5 / under MCAR 2, per method and test regime."""
    if not {"MCAR 2", "MCAR 5"} <= set(best["Train"]):
        return [
            "## Table 18",
            "",
            "Needs both MCAR 2 and MCAR 5 training regimes; these results lack "
            + " and ".join(t for t in ("MCAR 2", "MCAR 5") if t not in set(best["Train"]))
            + ".",
            "",
        ]
    piv = best.pivot_table(index=["Dataset", "Method", "Test"], columns="Train", values="mean")
    ratio = (100 * piv["MCAR 5"] / piv["MCAR 2"]).dropna()
    pr = None
    if ref is not None:
        p = load_paper(ref).pivot_table(index=["Dataset", "Method", "Test"], columns="Train", values="paper_mean")
        pr = 100 * p["MCAR 5"] / p["MCAR 2"]
    test_cols = [t for t in TEST_COLS if t in set(ratio.index.get_level_values("Test"))]
    rows = []
    have = set(zip(ratio.index.get_level_values("Dataset"), ratio.index.get_level_values("Method"), strict=True))
    for ds in DATASETS.values():
        for meth in PAPER_ROWS:
            if (ds, meth) not in have:
                continue
            vals = ratio.loc[(ds, meth)]
            rows.append(
                [
                    ds,
                    meth,
                    *[
                        (
                            f"{vals[t]:.1f}"
                            + (f" [{pr[(ds, meth, t)]:.1f}]" if pr is not None and (ds, meth, t) in pr else "")
                        )
                        if t in vals
                        else ""
                        for t in test_cols
                    ],
                ]
            )
    note = (
        " In brackets: the same ratio from the paper's Tables 12 and 13 (its printed Table 18 differs slightly for "
        "the baselines, "
        "which it appears to compute from one fixed variant)."
        if pr is not None
        else ""
    )
    return (
        [
            "## Table 18: 100 x accuracy trained under MCAR 5 / trained under MCAR 2",
            "",
            "Ratios of the better-variant means above." + note,
            "",
        ]
        + _md(["Dataset", "Method", *test_cols], rows)
        + [""]
    )


def validation_choice(df: pd.DataFrame) -> list[str]:
    """The variant (SimSiam-pretrained or labeled-only) chosen per cell on the test set, as the paper
    does, against the one chosen on validation samples held out of training (``val_split``)."""
    if "val_accuracy" not in set(df["metric"]):
        return []
    test = paper_cells(df)
    val = paper_cells(df, "val_accuracy")
    keys = ["Dataset", "Method", "Train", "Test"]
    m = test.merge(val[[*keys, "variant", "mean"]].rename(columns={"mean": "val_mean"}), on=[*keys, "variant"])
    rows, agree, total = [], 0, 0
    for key, g in m.groupby(keys, sort=False):
        if len(g) < 2 or base_row(key[1]) in FALSE_ROWS:
            continue
        by_test, by_val = g.loc[g["mean"].idxmax()], g.loc[g["val_mean"].idxmax()]
        total += 1
        agree += by_test["variant"] == by_val["variant"]
        rows.append(
            [
                *key,
                by_test["variant"],
                f"{by_test['mean']:.1f}",
                by_val["variant"],
                f"{by_val['mean']:.1f}",
                f"{by_val['mean'] - by_test['mean']:+.1f}",
                str(int(by_val["n"])),
            ]
        )
    if not rows:
        return []
    return (
        [
            "## Variant chosen on validation samples instead of the test set",
            "",
            "Protocol option val_split holds labeled samples out of training; per cell, the variant with the better "
            "mean validation "
            f"accuracy is reported at its test accuracy. Same choice in {agree} of {total} cells.",
            "",
        ]
        + _md(
            [
                "Dataset",
                "Method",
                "Train",
                "Test",
                "chosen on test",
                "test acc.",
                "chosen on validation",
                "its test acc.",
                "difference",
                "seeds",
            ],
            rows,
        )
        + [""]
    )


@ARTEFACTS.register("false-tables")
class FalseTables(Artefact):
    name = "false-tables"
    paper = "FALSE-VFL (Hong, Park & Hwang, 2025)"
    experiment = "experiments/false_tables.yaml"
    reference = "false_tables12_17.csv"
    layout = Layout("false-tables", None, None, {}, "accuracy")
    by_budget = False
    formats = ("md",)

    def table(self, df, ref, fmt, title):
        return false_tables(df, ref, title)
