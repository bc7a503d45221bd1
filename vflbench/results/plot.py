"""Figures via matplotlib: scalability (metric and time per epoch against K), training curves, and
metric against the training budget (runs recorded with ``--eval-epochs``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import VFLBenchError
from .loading import load_many, load_results
from .report import display, method_order


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _manifests(path: Path) -> list[dict]:
    """The run manifests of a sweep folder (run folders and gathered runs), or of a folder of run folders."""
    from .outputs import is_sweep_folder, sweep_manifests

    out = sweep_manifests(path) if is_sweep_folder(path) else []
    out = out or [json.loads(f.read_text()) for f in sorted(path.glob("*/manifest.json"))]
    if not out:
        raise VFLBenchError(f"No run manifests under {path}.")
    return out


def series_colours(names, keep_order: bool = False) -> dict[str, object]:
    """One colour per series name, the same in every panel of a figure (tab10; tab20 past ten series), so that
    one legend can serve every panel."""
    plt = _plt()
    names = list(dict.fromkeys(names)) if keep_order else sorted(set(names))
    palette = plt.cm.tab10.colors if len(names) <= 10 else plt.cm.tab20.colors
    return {n: palette[i % len(palette)] for i, n in enumerate(names)}


def legend_outside(fig, axes, fontsize: int = 7) -> None:
    """One legend for the figure, right of its panels, where it covers no data (the saved figure grows to hold
    it: ``bbox_inches="tight"``). Entries are the union of the panels' labels, first handle kept: a label
    means one series across panels (every plot here draws a series in one style throughout)."""
    seen: dict[str, object] = {}
    for ax in np.ravel(axes):
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, h)
    if seen:
        fig.legend(
            list(seen.values()),
            list(seen),
            loc="upper left",
            bbox_to_anchor=(1.0, 0.98),
            bbox_transform=fig.transFigure,
            fontsize=fontsize,
            frameon=False,
        )


def _finish(fig, axes, out: Path, points: pd.DataFrame | None = None, fontsize: int = 7) -> list[Path]:
    """Every figure's last steps: lay the panels out, put the legend beside them, write PNG and PDF (and the points
    as ``<out>.csv`` where the figure has them), close."""
    fig.tight_layout()
    legend_outside(fig, axes, fontsize=fontsize)
    paths = _save(fig, out)
    _plt().close(fig)
    if points is None:
        return paths
    csv = out.with_suffix(".csv")
    points.to_csv(csv, index=False)
    return [*paths, csv]


def _save(fig, out: Path) -> list[Path]:
    paths = []
    for ext in (".png", ".pdf"):
        p = out.with_suffix(ext)
        fig.savefig(p, dpi=150, bbox_inches="tight")
        paths.append(p)
    return paths


def plot_scalability(results: Path, out: Path, metric: str = "accuracy", test_missing: str | None = None) -> list[Path]:
    """Against the number of parties K (log scale, base 2): the metric (mean +- std over seeds), seconds per training
    epoch and, where the manifests record each run's own peak (``memory.of == "this run"``), peak resident memory.
    The points go to ``<out>.csv``."""
    plt = _plt()
    df = load_results(results)
    metrics = sorted(set(df["metric"]))
    if metric not in metrics:
        raise VFLBenchError(f"--metric {metric!r} is not in these results; they have {', '.join(metrics)}.")
    df = df[df["metric"] == metric]
    if test_missing:
        settings = list(dict.fromkeys(df["test_missing"]))
        df = df[df["test_missing"] == test_missing]
        if df.empty:
            raise VFLBenchError(
                f"--test-missing {test_missing!r} matches no result; the test settings are {', '.join(settings)}."
            )
    ks = sorted(set(df["parties"]))
    if len(ks) < 2:
        raise VFLBenchError(
            "The scalability plot needs results for at least two numbers of parties K; these have only K = "
            f"{', '.join(map(str, ks))}."
        )
    costs = pd.DataFrame(
        [
            {
                "method": m["config"]["method"],
                "parties": m["config"]["parties"],
                "seed": m["config"]["seed"],
                "s_per_epoch": m["timings"]["seconds_per_epoch"],
                "peak_gb": m.get("memory", {}).get("peak_rss_bytes", np.nan) / 1e9
                if m.get("memory", {}).get("of") == "this run"
                else np.nan,
            }
            for m in _manifests(Path(results).parent if Path(results).is_file() else Path(results))
        ]
    )
    memory = bool(costs["peak_gb"].notna().any())
    fig, axes = plt.subplots(1, 3 if memory else 2, figsize=(14 if memory else 10, 3.8))
    colours = series_colours(method_order(df["method"]), keep_order=True)
    points = []
    for m in method_order(df["method"]):
        g = df[df["method"] == m].groupby("parties")["value"]
        k = np.array(sorted(g.groups))
        mean, std = g.mean().loc[k], g.std(ddof=0).loc[k]
        c = costs[costs["method"] == m].groupby("parties")[["s_per_epoch", "peak_gb"]].median()
        kw = {"marker": "o", "label": display(m), "color": colours[m]}
        axes[0].errorbar(k, mean, yerr=std, capsize=3, **kw)
        axes[1].plot(c.index, c["s_per_epoch"], **kw)
        if memory and c["peak_gb"].notna().any():
            axes[2].plot(c.index, c["peak_gb"], **kw)
        for kk in k:
            points.append(
                {
                    "method": m,
                    "parties": int(kk),
                    metric: float(mean.loc[kk]),
                    f"{metric}_std": float(std.loc[kk]),
                    "seconds_per_epoch": float(c["s_per_epoch"].get(kk, np.nan)),
                    "peak_rss_gb": float(c["peak_gb"].get(kk, np.nan)),
                }
            )
    axes[0].set(ylabel=metric, title=f"{metric}" + (f" (test {test_missing})" if test_missing else ""))
    axes[1].set(ylabel="seconds per training epoch", title="time per epoch", yscale="log")
    if memory:
        axes[2].set(ylabel="peak resident memory (GB)", title="peak memory of a run")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("number of parties K")
        ax.grid(alpha=0.3)
    return _finish(fig, axes, out, points=pd.DataFrame(points), fontsize=8)


def protocol_label(settings: str) -> str:
    """A run's communication protocol from its ``settings`` column: the compressor and the local steps."""
    parts = dict(x.split("=", 1) for x in str(settings or "").split(";") if "=" in x)
    comp = parts.get("compress", "none").replace(",scale=message", "").replace(",down=0", "")
    q = int(parts.get("local_steps", 1))
    mech = parts.get("mechanism")
    return comp + (f" + Q={q}" if q > 1 else "") + (f" [{mech.split(':')[0]}]" if mech and mech != "none" else "")


def communication_points(results: Path, metric: str | None = None, test_missing: str = "none") -> pd.DataFrame:
    """One point per (dataset, training setting, method, protocol): the utility at ``test_missing`` (mean and std
    over seeds) against the training bytes, up plus down (mean over seeds). ``results``: a sweep folder, or a folder
    of sweep folders (results/communication: one sweep with one update per exchange, one with local steps)."""
    from .outputs import is_sweep_folder

    root = Path(results)
    sweeps = (
        sorted(d for d in root.iterdir() if is_sweep_folder(d)) if root.is_dir() and not is_sweep_folder(root) else []
    )
    df = load_many(sweeps) if len(sweeps) > 1 else load_results(sweeps[0] if sweeps else root)
    if "comm_bytes_up" not in df.columns:
        raise VFLBenchError("These results record no traffic (comm_bytes_up); they are not runs of vflbench.")
    utility = [m for m in dict.fromkeys(df["metric"]) if not str(m).startswith("attack:") and "@" not in str(m)]
    if metric is not None and metric not in utility:
        raise VFLBenchError(f"--metric {metric!r} is not in these results; they have {', '.join(utility)}.")
    settings = df["settings"] if "settings" in df.columns else pd.Series("", index=df.index)
    df = df.assign(protocol=[protocol_label(s) for s in settings.fillna("")])
    rows = []
    for ds, g in df.groupby("dataset", sort=False):
        m = metric or ("f1" if ds in ("credit", "mimic4") and "f1" in utility else "accuracy")
        g = g[(g["metric"] == m) & (g["test_missing"] == test_missing)]
        if g.empty:
            raise VFLBenchError(f"No {m} at --test-missing {test_missing} for {ds}.")
        g = g.assign(total=(g["comm_bytes_up"] + g["comm_bytes_down"]) / 1e6)
        for (tr, meth, proto), h in g.groupby(["train_missing", "method", "protocol"], sort=False):
            rows.append({"dataset": ds, "train_missing": tr, "method": meth, "protocol": proto, "metric": m,
                         "value": h["value"].mean(), "std": h["value"].std(ddof=0), "mb": h["total"].mean(),
                         "seeds": h["seed"].nunique()})  # fmt: skip
    return pd.DataFrame(rows)


def plot_communication(results: Path, out: Path, metric: str | None = None, test_missing: str = "none") -> list[Path]:
    """Utility against the training bytes (up plus down, log scale), one panel per dataset and training setting: a
    point per method and protocol (marker: the compressor; hollow: with local steps), and each method's frontier
    (the points no other point of the method beats on both bytes and utility)."""
    plt = _plt()
    pts = communication_points(results, metric, test_missing)
    panels = list(dict.fromkeys(zip(pts["dataset"], pts["train_missing"], strict=True)))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    colours = series_colours(method_order(pts["method"]), keep_order=True)
    markers = {"none": "o", "quant": "s", "topk": "^", "vq": "D"}
    for ax, (ds, tr) in zip(axes[0], panels, strict=True):
        p = pts[(pts["dataset"] == ds) & (pts["train_missing"] == tr)]
        for meth in method_order(p["method"]):
            q = p[p["method"] == meth].sort_values("mb")
            best = q["value"].cummax()
            front = q[q["value"] >= best]
            ax.plot(front["mb"], front["value"], "-", color=colours[meth], alpha=0.6, label=display(meth))
            for r in q.itertuples(index=False):
                local = "Q=" in r.protocol
                ax.errorbar(r.mb, r.value, yerr=r.std, fmt=markers.get(r.protocol.split(":")[0].split(" ")[0], "o"),
                            color=colours[meth], markerfacecolor="white" if local else colours[meth], capsize=2,
                            markersize=5)  # fmt: skip
        ax.set(xscale="log", xlabel="training MB, up + down", ylabel=f"{p['metric'].iloc[0]} (test {test_missing})",
               title=f"{ds}, trained {'with every block' if tr == 'none' else tr}")  # fmt: skip
        ax.grid(alpha=0.3)
    for name, mk in markers.items():  # the markers' key, once
        axes[0][0].plot([], [], mk, color="grey", label=name if name != "none" else "no compression")
    axes[0][0].plot([], [], "o", color="grey", markerfacecolor="white", label="with local steps (Q > 1)")
    return _finish(fig, axes, out, pts.rename(columns={"value": p["metric"].iloc[0] if len(pts) else "value"}))


def plot_curves(results: Path, out: Path) -> list[Path]:
    """Training loss per epoch, mean over seeds, one panel per (dataset, train setting)."""
    plt = _plt()
    mans = _manifests(Path(results))
    groups = sorted({(m["config"]["dataset"], m["config"]["train_missing"]) for m in mans})
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.5), squeeze=False)
    order = method_order(m["config"]["method"] for m in mans)
    colours = series_colours(order, keep_order=True)
    for ax, (ds, tr) in zip(axes[0], groups, strict=True):
        for meth in order:
            curves = [
                m["history"]["loss"]
                for m in mans
                if m["config"]["dataset"] == ds and m["config"]["train_missing"] == tr and m["config"]["method"] == meth
            ]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            arr = np.array([c[:n] for c in curves])
            ax.plot(
                np.arange(1, n + 1), arr.mean(0), marker="o", markersize=2.5, label=display(meth), color=colours[meth]
            )
        ax.set(title=f"{ds}, train {tr}", xlabel="epoch", ylabel="training loss (method's own objective)", yscale="log")
        ax.grid(alpha=0.3)
    return _finish(fig, axes, out, fontsize=8)


def plot_bars(agg: pd.DataFrame, out: Path, title: str = "") -> list[Path]:
    """Grouped bars of a table (one group per test condition), for the demo."""
    plt = _plt()
    conds = list(dict.fromkeys(zip(agg["train_missing"], agg["test_missing"], strict=True)))
    methods = method_order(agg["method"])
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(conds)), 3.8))
    w = 0.8 / max(len(methods), 1)
    for j, m in enumerate(methods):
        vals = [
            agg[(agg["method"] == m) & (agg["train_missing"] == tr) & (agg["test_missing"] == te)] for tr, te in conds
        ]
        means = [v["mean"].iloc[0] if len(v) else np.nan for v in vals]
        stds = [v["std"].iloc[0] if len(v) else 0 for v in vals]
        ax.bar(np.arange(len(conds)) + j * w, means, w, yerr=stds, capsize=2, label=display(m))
    ax.set_xticks(np.arange(len(conds)) + 0.4 - w / 2, [f"train {a}\ntest {b}" for a, b in conds], fontsize=8)
    names = {"f1": "F1 x 100", "accuracy": "accuracy (%)", "auprc": "AUPRC x 100"}
    ax.set(ylabel=names.get(agg["metric"].iloc[0], agg["metric"].iloc[0]), title=title)
    lo = np.nanmin(agg["mean"]) - 10
    ax.set_ylim(max(0, lo), None)
    return _finish(fig, [ax], out)


def _variant(r: pd.Series, drop: str | None) -> str:
    """A line's label: the method's display name and the options its runs set (minus the panel key)."""
    opts = r.get("options")
    parts = [] if not isinstance(opts, str) or not opts else [kv for kv in opts.split(";") if kv.split("=")[0] != drop]
    return display(r["method"] + (f"[{';'.join(parts)}]" if parts else ""))  # the tables' variant names


def plot_budget(
    results: Path, out: Path, metric: str | None = None, panel: str | None = None, test_missing: str | None = None
) -> list[Path]:
    """Metric against training epochs, one line per method (and option variant) with a band of
    +-1 std over seeds; one panel per (train setting, test setting), or per value of ``panel`` (a
    column such as ``beta``)."""
    plt = _plt()
    df = load_results(results)
    if "epoch" not in df.columns:
        raise VFLBenchError(
            "These results have no epoch column; record budgets with --eval-epochs (run) or eval_epochs: (experiment "
            "file)."
        )
    metrics = sorted(set(df["metric"]))
    metric = metric or ("auprc" if "auprc" in metrics else "accuracy")
    if metric not in metrics:
        raise VFLBenchError(f"--metric {metric!r} is not in these results; they have {', '.join(metrics)}.")
    df = df[df["metric"] == metric].copy()
    if test_missing:
        df = df[df["test_missing"] == test_missing]
        if df.empty:
            raise VFLBenchError(f"--test-missing {test_missing!r} matches no result.")
    if panel and panel not in df.columns:
        raise VFLBenchError(
            f"--panel {panel!r} is not a results column; try train_missing, test_missing, parties or a method extra "
            "such as beta."
        )
    if panel:
        key = df[panel].astype(str).where(df[panel].notna(), "all")
        panels = [p for p in dict.fromkeys(sorted(key)) if p != "all"] or ["all"]
        df["_panel"] = key
    else:
        df["_panel"] = "train " + df["train_missing"] + ", test " + df["test_missing"]
        panels = list(dict.fromkeys(df["_panel"]))
    df["_line"] = df.apply(lambda r: _variant(r, panel), axis=1)
    if panel:  # one row of panels sharing the y axis
        fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False, sharey=True)
        cells = list(zip(axes[0], panels, strict=True))
    else:  # a grid: training settings down, test settings across; each panel scaled to its own lines
        trains, tests = list(dict.fromkeys(df["train_missing"])), list(dict.fromkeys(df["test_missing"]))
        fig, axes = plt.subplots(
            len(trains), len(tests), figsize=(4.6 * len(tests), 3.4 * len(trains)), squeeze=False, sharex=True
        )
        cells = []
        for i, tr in enumerate(trains):
            for j, te in enumerate(tests):
                name = f"train {tr}, test {te}"
                if name in panels:
                    cells.append((axes[i][j], name))
                else:
                    axes[i][j].set_axis_off()
    colours = series_colours(df["_line"])
    for ax, p in cells:
        g = df[
            (df["_panel"] == p) | (df["_panel"] == "all")
        ]  # lines without the panel key (e.g. NPQ) appear in every panel
        for line in dict.fromkeys(sorted(g["_line"])):
            h = g[g["_line"] == line].groupby("epoch")["value"]
            ep = np.array(sorted(h.groups))
            mean, std = h.mean().loc[ep].to_numpy(), h.std(ddof=0).loc[ep].to_numpy()
            ax.plot(ep, mean, label=line, linewidth=1.3, color=colours[line])
            ax.fill_between(ep, mean - std, mean + std, alpha=0.2, color=colours[line])
        ax.set(title=f"{panel} = {p}" if panel else p, xlabel="epoch", ylabel=f"test {metric}")
        ax.grid(alpha=0.3)
    return _finish(fig, [ax for ax, _ in cells], out)


FRONTIER_EPSILON = "epsilon_feature_record_no_local_training"


def frontier_points(
    results: Path, metric: str | None = None, epsilon_column: str = FRONTIER_EPSILON
) -> tuple[pd.DataFrame, str]:
    """One point per (parties, mechanism, b, beta, LDP calibration): the final-epoch test metric and
    the run's certified epsilon, means over seeds (with the std of the metric)."""
    df = load_results(results)
    if epsilon_column not in df.columns or "mechanism" not in df.columns:
        raise VFLBenchError(
            f"These results have no {epsilon_column} column; the frontier needs PBM-VFL runs (--method pbm, any "
            "mechanism)."
        )
    metrics = sorted(set(df["metric"]))
    metric = metric or ("auprc" if "auprc" in metrics else "accuracy")
    if metric not in metrics:
        raise VFLBenchError(f"--metric {metric!r} is not in these results; they have {', '.join(metrics)}.")
    df = df[(df["metric"] == metric) & (df["test_missing"] == "none")].copy()
    if "epoch" in df.columns:  # the run's final evaluation only
        last = df.groupby("run_id")["epoch"].transform(lambda e: e.max() if e.notna().any() else np.nan)
        df = df[df["epoch"].isna() | (df["epoch"] == last)]
        df = df.sort_values("epoch", na_position="first").drop_duplicates("run_id", keep="last")
    if "ldp_match" not in df.columns:
        df["ldp_match"] = np.nan
    df["series"] = np.where(
        df["mechanism"] == "ldp",
        "LDP (" + df["ldp_match"].fillna("paper").astype(str) + " sigma)",
        df["mechanism"].str.upper(),
    )
    keys = ["parties", "series", "b", "beta"]
    pts = (
        df.groupby(keys, dropna=False)
        .agg(
            metric_mean=("value", "mean"),
            metric_std=("value", lambda v: float(np.std(v))),
            epsilon=(epsilon_column, "mean"),
            seeds=("seed", "nunique"),
            accountant=("accountant", "first"),
        )
        .reset_index()
    )
    return pts, metric


def plot_frontier(results: Path, out: Path, metric: str | None = None) -> list[Path]:
    """The privacy-utility frontier: test metric against certified epsilon (record-level feature
    privacy, at the run's horizon), one marker series per mechanism and LDP calibration, one panel
    per number of parties; NPQ (no privacy, epsilon infinite) as a dashed line. Also writes the
    points as ``<out>.csv``."""
    plt = _plt()
    pts, metric = frontier_points(results, metric)
    parties = sorted(set(pts["parties"]))
    fig, axes = plt.subplots(1, len(parties), figsize=(5.2 * len(parties), 4.0), squeeze=False, sharey=True)
    markers = {"PBM": "o", "LDP (paper sigma)": "s", "LDP (epsilon sigma)": "^"}
    colours = series_colours(pts["series"])
    for ax, k in zip(axes[0], parties, strict=True):
        g = pts[pts["parties"] == k]
        for series, h in g.groupby("series"):
            if series == "NPQ":
                ax.axhline(
                    float(h["metric_mean"].mean()), color="k", linestyle="--", linewidth=1, label="NPQ (no privacy)"
                )
                continue
            h = h.sort_values("epsilon")
            ax.errorbar(
                h["epsilon"],
                h["metric_mean"],
                yerr=h["metric_std"],
                fmt=markers.get(series, "x"),
                markersize=4,
                capsize=2,
                label=series,
                alpha=0.85,
                color=colours[series],
            )
        ax.set_xscale("log")
        from matplotlib.ticker import NullFormatter

        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide on a short log range
        mode = ", ".join(sorted(set(g["accountant"].dropna().astype(str)) - {"none"}))
        ax.set(
            title=f"M = {k}",
            xlabel=f"certified ε (feature, per record; δ = 1e-5; {mode})",
            ylabel=f"test {metric.upper()} x 100",
        )
        ax.grid(alpha=0.3, which="both")
    return _finish(fig, axes, out, pts)


EPSILON_COLUMNS = (FRONTIER_EPSILON, "epsilon_label")  # certified: feature (per record), label (randomized response)


def privacy_points(
    results: Path, attack: str | None = None, metric: str | None = None, test_missing: str = "none"
) -> tuple[pd.DataFrame, str, str]:
    """One point per (dataset, method variant, training setting): the attack's success (mean over its adversaries
    in a run, then over seeds) against the utility at ``test_missing``, with the certified epsilons the runs
    recorded (feature per record; label under randomized response). Last epoch of each run."""
    df = load_results(results)
    attacks = sorted({m for m in df["metric"] if str(m).startswith("attack:")})
    if not attacks:
        raise VFLBenchError(
            "These results have no attack rows; run with --attack NAME (or attacks: in the experiment)."
        )
    attack = attack or next((a for a in attacks if a.endswith((":auc", ":r2", ":accuracy"))), attacks[0])
    if attack not in attacks:
        raise VFLBenchError(f"--attack-metric {attack!r} is not in these results; they have {', '.join(attacks)}.")
    if "epoch" in df.columns:
        last = df.groupby("run_id")["epoch"].transform("max")
        df = df[df["epoch"].isna() | (df["epoch"] == last)]
    utility = [m for m in df["metric"].unique() if not str(m).startswith("attack:") and "@" not in str(m)]
    metric = metric or ("f1" if "f1" in utility and "auprc" in utility else "accuracy")
    if metric not in utility:
        raise VFLBenchError(f"--metric {metric!r} is not in these results; they have {', '.join(sorted(utility))}.")
    df = df.copy()
    settings = df["settings"].fillna("") if "settings" in df.columns else pd.Series("", index=df.index)
    df["variant"] = [
        _variant(r, None) + (f" {{{s}}}" if s else "") for (_, r), s in zip(df.iterrows(), settings, strict=True)
    ]
    keys = ["run_id", "dataset", "variant", "train_missing", "seed"]
    hit = df[df["metric"] == attack].groupby(keys)["value"].mean().rename("attack")
    use = df[(df["metric"] == metric) & (df["test_missing"] == test_missing)].groupby(keys)["value"].first()
    per_run = pd.concat([hit, use.rename("utility")], axis=1).dropna().reset_index()
    eps = [c for c in EPSILON_COLUMNS if c in df.columns]
    if eps:
        per_run = per_run.merge(df.groupby("run_id")[eps].first().reset_index(), on="run_id", how="left")
    agg = {"attack": ("attack", "mean"), "attack_std": ("attack", "std"), "utility": ("utility", "mean")}
    agg.update({"utility_std": ("utility", "std"), "seeds": ("seed", "nunique")})
    agg.update({c: (c, "mean") for c in eps})
    pts = per_run.groupby(["dataset", "variant", "train_missing"], sort=False).agg(**agg).reset_index()
    return pts.fillna({"attack_std": 0.0, "utility_std": 0.0}), attack, metric


def plot_privacy(
    results: Path, out: Path, attack: str | None = None, metric: str | None = None, test_missing: str = "none"
) -> list[Path]:
    """Utility against attack success, one panel per dataset, one marker per method variant (filled: trained with
    every block, hollow: with missing blocks), each point labelled with its certified epsilon where it has one.
    Also writes the points as ``<out>.csv``."""
    plt = _plt()
    pts, attack, metric = privacy_points(results, attack, metric, test_missing)
    datasets = list(dict.fromkeys(pts["dataset"]))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.6 * len(datasets), 4.2), squeeze=False)
    colours = series_colours(pts["variant"])
    trains = sorted(dict.fromkeys(pts["train_missing"]), key=lambda s: (s != "none", s))  # every block first
    for ax, ds in zip(axes[0], datasets, strict=True):
        for _, p in pts[pts["dataset"] == ds].iterrows():
            filled = trains.index(p["train_missing"]) == 0
            ax.errorbar(
                p["attack"],
                p["utility"],
                xerr=p["attack_std"],
                yerr=p["utility_std"],
                fmt="o",
                color=colours[p["variant"]],
                markerfacecolor=colours[p["variant"]] if filled else "white",
                capsize=2,
                label=f"{p['variant']}",
            )
            tags = [
                ("ε label=" if c == "epsilon_label" else "ε=") + f"{p[c]:.3g}"
                for c in EPSILON_COLUMNS
                if pd.notna(p.get(c))
            ]
            if tags:
                ax.annotate(
                    ", ".join(tags), (p["attack"], p["utility"]), fontsize=6, xytext=(3, 3), textcoords="offset points"
                )
        ax.set(
            title=f"{ds} (filled: trained {trains[0]}"
            + (f"; hollow: {', '.join(trains[1:])})" if len(trains) > 1 else ")"),
            xlabel=f"{attack} (mean over adversaries)",
            ylabel=f"test {metric} ({test_missing})",
        )
        ax.grid(alpha=0.3)
    return _finish(fig, axes, out, pts)
