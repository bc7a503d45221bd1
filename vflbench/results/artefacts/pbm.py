"""PBM-VFL (Tran, Castiglia, Patterson & Milanova, 2025), Tables 1-3: per (dataset, parties,
mechanism, b, beta), the epochs to reach a training target, the test metric at that point, the
communication to it (measured and by the paper's formula) and the certified epsilons; the paper's
claims checked on the rows (more bits or a larger beta: fewer epochs; PBM above LDP)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...core.errors import VFLBenchError
from .base import ARTEFACTS, Artefact, Layout


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
    runs["ldp_match"] = (
        runs["ldp_match"].fillna("") if "ldp_match" in runs else ""
    )  # LDP's calibration keeps its own row
    for (ds, k, mech, b, beta, match), g in runs.groupby(keys, sort=True, dropna=False):
        metric = "auprc" if "auprc" in set(df[df["dataset"] == ds]["metric"]) else "accuracy"
        test = df[df["run_id"].isin(g["run_id"]) & (df["metric"] == metric) & (df["test_missing"] == "none")][
            "value"
        ].to_numpy(float)
        ep = g["epochs_to_target"].to_numpy(float)
        wire = ((g["comm_bytes_up_at_target"] + g["comm_bytes_down_at_target"]) / 1e9).to_numpy(float)
        paper_bits = (g["comm_bits_paper_at_target"] / 1e9).to_numpy(float)
        finite = np.isfinite(ep)
        out.append(
            {
                "dataset": ds,
                "parties": int(k),
                "mechanism": mech,
                "b": b,
                "beta": beta,
                "ldp_match": match,
                "n_seeds": len(g),
                "target": g["target"].iloc[0],
                "epochs_seeds": ",".join("inf" if not np.isfinite(e) else str(int(e)) for e in ep),
                "reached": int(finite.sum()),
                "epochs_mean": float(ep[finite].mean()) if finite.any() else float("inf"),
                "epochs_std": float(ep[finite].std()) if finite.any() else float("nan"),
                "cost_paper_gbit": float(paper_bits[finite].mean()) if finite.any() else float("inf"),
                "cost_wire_gbyte": float(wire[finite].mean()) if finite.any() else float("inf"),
                "test_metric": metric,
                "test_mean": float(np.mean(test)) if len(test) else float("nan"),
                "test_std": float(np.std(test)) if len(test) else float("nan"),
                "accountant": str(g["accountant"].iloc[0]) if "accountant" in g else "paper",
                # one horizon per column: epsilon at the target (over the seeds that reached it) and after the whole run
                "eps_target": _finite_mean(g, "epsilon_feature_record_no_local_training_at_target", finite),
                "eps_block_target": _finite_mean(g, "epsilon_column_block_at_target", finite),
                "eps_run": _finite_mean(g, "epsilon_feature_record_no_local_training", None),
                "eps_paper_run": _finite_mean(g, "epsilon_feature_paper_formula", None)
                if "epsilon_feature_paper_formula" in g
                else _finite_mean(g, "epsilon_feature", None),
                "epochs_run": float(g["epochs"].max()) if "epochs" in g else float("nan"),
                "epochs_list": ep,
            }
        )
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
        raise VFLBenchError(
            f"The reference CSV lacks column(s) {', '.join(sorted(need - set(ref.columns)))}; the pbm-table3 layout "
            "reads "
            "vflbench/results/reference/pbm_tables1_3.csv's columns."
        )
    ref = ref.copy()
    ref["dataset"] = (
        ref["dataset"].str.extract(r"\((.*)\)")[0].fillna(ref["dataset"]).str.strip()
    )  # "activity(uci-har)" -> uci-har

    def key(ds, k, mech, b, beta):
        if mech == "npq":
            return (ds, int(k), "NPQ", "")
        return (ds, int(k), str(int(float(b))), f"{float(beta):g}")

    lookup = {
        (r.dataset, int(r.parties), str(r.b), "" if pd.isna(r.beta) else f"{float(r.beta):g}"): (
            float(r.epochs_to_target),
            float(r.comm_cost),
            r.comm_unit,
        )
        for r in ref.itertuples()
    }
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
    agg["within_tol"] = np.where(
        has, np.where(ours_reached & paper_reached, close, ~ours_reached & ~paper_reached), np.nan
    )
    return agg


def pbm_table(
    df: pd.DataFrame, ref: pd.DataFrame | None, fmt: str = "md", title: str | None = None
) -> tuple[str, pd.DataFrame]:
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
        lines += [
            f"## {ds}, M = {k}: epochs to {tgt} and communication up to it (mean ± std over reached seeds; "
            f"{g['n_seeds'].max()} seeds)",
            "",
        ]
        modes = [m for m in g["accountant"].dropna().astype(str) if m != "none"]
        mode = modes[0] if modes else "paper"  # results written before the accountant column named it
        run_ep = g["epochs_run"].max()
        run_ep = f"{run_ep:g}" if np.isfinite(run_ep) else "the run's"
        cert = "certified" if mode in ("pld", "exact") else "NOT an upper bound"
        cols = [
            "mechanism",
            "b",
            "β",
            "epochs (per seed)",
            "epochs",
            "cost, paper formula (Gbit)",
            "wire (GB)",
            f"test {g['test_metric'].iloc[0].upper()} x 100",
            f"ε record at target ({mode}, {cert})",
            f"ε column block at target ({mode})",
            f"ε record at {run_ep} epochs ({mode})",
            f"ε paper's formula (Thm 6.1, c0, {run_ep} epochs)",
        ]
        with_ref = "paper_epochs" in g
        if with_ref:
            cols += ["paper epochs", "paper cost (GB)", "agree: reach", "within 2x", "within max(2 sd, 2)"]
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_pbm_row(r, with_ref)) + " |" for r in g.itertuples()]
        lines.append("")
        if with_ref:
            h = g[g["paper_epochs"].notna()]
            n_reach = int(h["agree_reach"].astype(bool).sum())
            w = h["within_2x"].dropna()
            t = h["within_tol"].dropna()
            lines.append(
                f"Agree with the paper on reaching the target or not: **{n_reach}/{len(h)}** rows; "
                f"epochs within a factor of 2 where both reach it: **{int(w.astype(bool).sum())}/{len(w)}**; "
                "within max(2 sd, 2) epochs of the paper (or both never reaching it): "
                f"**{int(t.astype(bool).sum())}/{len(t)}**."
            )
        lines += pbm_claims(g)
        lines += [
            "",
            "Cost, paper formula: E_target x ceil(N/B) x B x M x P x (ln(bM) + 32) bits for PBM, x 64 for NPQ "
            "(PBM-VFL Tables 1-3, "
            "reported there as 'GB'). Wire: ceil(log2(Mb+1)) bits per masked integer up plus 32 per float down, in "
            "bytes.",
            "",
            "ε at δ = 1e-5. *Record*: one party's features of one record, assuming the record does not enter local "
            "training (the unit of the "
            "paper's Thm 6.1); *column block*: one party's whole block, the unit that holds for Algorithm 2 as "
            "trained. At the target, ε counts "
            "the training steps and the monitoring passes up to and including the one that met the target (each is a "
            "release of the training "
            "samples' sums). The paper's-formula column is Thm 6.1 with the constant c0, for comparison: it is not an "
            "upper bound.",
            "",
        ]
    return "\n".join(lines), agg


def _pbm_row(r, with_ref: bool) -> list[str]:
    """One row of the PBM-VFL table: the mechanism and its parameters, epochs, costs, utility and epsilons, and
    (with the paper's numbers) the paper's epochs and cost and the three agreements."""
    fb = "–" if pd.isna(r.b) or r.mechanism == "npq" else str(int(float(r.b)))
    fbeta = "–" if pd.isna(r.beta) or r.mechanism == "npq" else f"{float(r.beta):g}"
    cost = "∞" if not np.isfinite(r.cost_paper_gbit) else f"{r.cost_paper_gbit:.2f}"
    wire = "∞" if not np.isfinite(r.cost_wire_gbyte) else f"{r.cost_wire_gbyte:.3f}"
    mech = r.mechanism.upper() + (f" (σ: {r.ldp_match})" if r.ldp_match else "")
    row = [
        mech,
        fb,
        fbeta,
        r.epochs_seeds,
        _epochs_cell(r.epochs_list),
        cost,
        wire,
        f"{r.test_mean:.1f} ± {r.test_std:.1f}",
        *(_eps_cell(v) for v in (r.eps_target, r.eps_block_target, r.eps_run, r.eps_paper_run)),
    ]
    if with_ref:
        pe = "–" if pd.isna(r.paper_epochs) else ("∞" if not np.isfinite(r.paper_epochs) else f"{r.paper_epochs:g}")
        pc = "–" if pd.isna(r.paper_cost) else ("∞" if not np.isfinite(r.paper_cost) else f"{r.paper_cost:g}")
        ag = "–" if pd.isna(r.agree_reach) else ("yes" if r.agree_reach else "**no**")
        w2 = "–" if pd.isna(r.within_2x) else ("yes" if r.within_2x else "**no**")
        wt = "–" if pd.isna(r.within_tol) else ("yes" if r.within_tol else "**no**")
        row += [pe, pc, ag, w2, wt]
    return row


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
            pairs = pbm.merge(
                lg.assign(bf=lg["b"].astype(float), betaf=lg["beta"].astype(float)),
                on=["bf", "betaf"],
                suffixes=("", "_ldp"),
            )
            wins = int((pairs["test_mean"] > pairs["test_mean_ldp"]).sum())
            cal = f" (σ: {match})" if match else ""
            out.append(
                f"PBM-VFL above LDP{cal} in test {g['test_metric'].iloc[0].upper()}: {wins}/{len(pairs)} (b, β) "
                "settings"
            )
    return ["Paper's claims, checked on these rows: " + "; ".join(out) + "."]


@ARTEFACTS.register("pbm-table3")
class PBMTable3(Artefact):
    name = "pbm-table3"
    paper = "PBM-VFL (Tran et al., 2025)"
    experiment = "experiments/pbm_table3.yaml"
    reference = "pbm_tables1_3.csv"
    layout = Layout("pbm-table3", None, None, {"phishing": "auprc", "credit": "f1"}, "accuracy")
    by_budget = False
    formats = ("md", "csv")

    def table(self, df, ref, fmt, title):
        return pbm_table(df, ref, fmt, title)
