"""What a table says beside its numbers, over the cells it aggregated: how methods are named and
ordered (``display``, ``method_order``), how test settings are labelled against a paper's table
(``ref_key``, ``label``), and the verdict lines (``best_counts``: best or within one std;
``tolerance_line``: cells within tolerance of the published numbers). Used by :mod:`vflbench.results.report`
and by the artefacts' own tables (:mod:`vflbench.results.artefacts`), which sit between the two."""

from __future__ import annotations

import pandas as pd

from ..core.errors import VFLBenchError


def method_order(names) -> list[str]:
    """Methods in registry order (the only list of methods), each method's option variants
    (``name[opts]``) right after it, unknown names after, sorted."""
    from ..methods import method_order as order

    names = list(dict.fromkeys(names))
    bases = order(n.split("[", 1)[0] for n in names)
    return [n for b in bases for n in sorted(x for x in names if x.split("[", 1)[0] == b)]


def display(name: str) -> str:
    from ..methods import display_name

    base, _, opts = name.partition("[")
    return display_name(base) + (f" ({opts.rstrip(']').replace(';', ', ')})" if opts else "")


def ref_key(spec: str) -> str:
    """Setting spec -> the reference tables' p_miss label: none -> 0.0, mcar:0.1 -> 0.1, mcar-beta:2,2 -> beta(2,2)."""
    s = spec.strip().lower()
    try:
        from ..data.missingness import p_key

        k = p_key(s)
    except VFLBenchError:
        return s
    return str(k)


def label(spec: str) -> str:
    k = ref_key(spec)
    return k if k != spec.strip().lower() else spec


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
    return [
        pre
        + "Best or within one std of the best: "
        + ", ".join(f"{k} {v}/{len(conds)}" for k, v in counts.items())
        + "."
    ]


def tolerance_line(g: pd.DataFrame, fmt: str) -> list[str]:
    """How many cells lie within tolerance of the published numbers (when a reference is attached)."""
    if "paper_mean" not in g.columns:
        return []
    pre = "" if fmt == "md" else "% "
    h = g.dropna(subset=["paper_mean"])
    n_ok, n = int(h["within_tolerance"].sum()), len(h)
    if not n:  # methods the paper's table has no column for get no count
        return []
    return [
        f"{pre}Within tolerance of the paper (|diff| <= max(2 x paper std, 2.0)): **{n_ok}/{n}** cells."
        if fmt == "md"
        else f"{pre}Within tolerance: {n_ok}/{n} cells."
    ]
