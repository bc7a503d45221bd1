"""results/trees/encrypted/summary.md: SecureBoost under encryption (Paillier and Okamoto-Uchiyama) beside SecureBoost
in clear and XGBoost on the same table, seed, split and threads (issue "encrypted SecureBoost").

Each sub-folder is one table's runs (run folders under ``runs/``, or gathered): per run its training seconds and the
ratio to XGBoost's, peak RSS, the metric with every block at test (the same trees in clear and encrypted: the same
number), and under encryption every operation's count and seconds (wall seconds of the batches, on the run's
``--threads``), the ciphertexts and bytes each party sent and received, and, across processes, whether the bytes on
the wire equal the counted ones.

    make encrypted-credit                    # Credit's four runs, then this report
    vflbench report results/trees/encrypted  # writes results/trees/encrypted/summary.md
"""

from __future__ import annotations

from pathlib import Path

from ..results.outputs import is_sweep_folder, sweep_records
from .registry import register

METRIC = {"credit": "auprc"}  # else accuracy


def _label(m: dict) -> str:
    cfg = m["config"]
    if cfg["method"] != "secureboost":
        return cfg.get("method_display") or cfg["method"]
    enc = cfg["method_options"].get("encryption", "none")
    where = " across processes" if cfg.get("behaviour", {}).get("runtime.processes") else ""
    return ("SecureBoost in clear" if enc == "none" else f"SecureBoost, {enc}") + where


def _ops(m: dict) -> dict[str, tuple[int, float]]:
    """Per operation (encrypt, decrypt, add, pack, rerandomise): its count and wall seconds over every party."""
    sb = m.get("secureboost", {})
    enc = sb.get("encryption", "none")
    out: dict[str, list] = {}
    for who in (sb.get(enc) or {}).values():
        if not isinstance(who, dict):
            continue
        for op, n in who.get("ops", {}).items():
            out.setdefault(op, [0, 0.0])[0] += int(n)
        for op, s in who.get("seconds", {}).items():
            out.setdefault(op, [0, 0.0])[1] += float(s)
    return {k: (int(v[0]), float(v[1])) for k, v in out.items()}


def _mb(v) -> str:
    return f"{v / 1e6:,.1f}"


def table(folder: Path) -> list[str]:
    records = sweep_records(folder)
    if not records:
        return [f"## {folder.name}", "", "(no runs yet)", ""]
    first = records[0][0]
    name = first["config"]["dataset"]
    metric = METRIC.get(name, "accuracy")
    rows = []
    xgb = None
    ref = "xgboost" if any(m["config"]["method"] == "xgboost" for m, _ in records) else "gbdt"
    for m, df in records:
        train = float(m["timings"]["train_s"])
        if m["config"]["method"] == ref:
            xgb = train if xgb is None else min(xgb, train)
        at = df[(df["metric"] == metric) & (df["test_missing"] == "none")]["value"]
        rows.append((m, train, float(at.iloc[0]) if len(at) else float("nan")))
    data = first["data"]
    lines = [
        f"## {name} ({data.get('n_train', '?'):,} training rows, {first['config']['parties']} parties, seed "
        f"{first['config']['seed']}, `--threads {first.get('threads', 1)}`)",
        "",
        f"| run | train (s) | x {'XGBoost' if ref == 'xgboost' else 'GBDT'} | peak RSS (GB): run, its workers | "
        f"{metric}, every block | trees | bytes down "
        "(MB) | bytes up (MB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m, train, value in sorted(rows, key=lambda r: r[1]):
        c = m.get("communication", {})
        ratio = f"{train / xgb:,.0f}" if xgb else "-"
        sb = m.get("secureboost", {})
        workers = sb.get("workers_peak_rss_bytes", {}).get("total") if sb.get("encryption", "none") != "none" else None
        rss = f"{m['memory']['peak_rss_gb']:.2f}" + (f", {workers / 1e9:.2f}" if workers else "")
        lines.append(
            f"| {_label(m)} | {train:,.1f} | {ratio} | {rss} | {value:.2f} | "
            f"{m.get('extras', {}).get('trees_grown', '-')} | {_mb(c.get('bytes_train_down', 0))} | "
            f"{_mb(c.get('bytes_train_up', 0))} |"
        )
    lines.append("")
    for m, _, _ in rows:
        sb = m.get("secureboost", {})
        enc = sb.get("encryption", "none")
        if m["config"]["method"] != "secureboost" or enc == "none":
            continue
        ops = _ops(m)
        key = sb[enc]
        lines += [
            f"**{_label(m)}** ({key.get('key_bits')}-bit key, {key.get('exp_bits')}-bit exponents): every operation, "
            "its count and the wall seconds of its batches on the run's threads. The label party's are its own; the "
            "parties' are summed over the four, who work side by side, so theirs overlap and a wall microsecond an "
            "operation is not theirs to give (one thread's: docs/SPEED.md, `python scripts/he_speed.py primitives`).",
            "",
            "| operation | who | count | wall seconds | wall us each |",
            "|---|---|---:|---:|---:|",
        ]
        for op, who in (("encrypt", "label party"), ("add", "parties"), ("pack", "parties"),
                        ("rerandomise", "parties"), ("decrypt", "label party")):  # fmt: skip
            if op in ops:
                n, s = ops[op]
                each = f"{s / n * 1e6:,.1f}" if n and s and who == "label party" else "-"
                wall = f"{s:,.1f}" if s else "(in pack)"
                lines.append(f"| {op} | {who} | {n:,} | {wall} | {each} |")
        lines += ["", "| party | ciphertexts received | ciphertexts sent | bytes received (MB) | bytes sent (MB) |"]
        lines.append("|---|---:|---:|---:|---:|")
        train_by = sb.get("bytes_by_kind", {}).get("train", {})
        for k in range(len(train_by.get("gh_down", []))):
            who = key.get(f"party {k}", {})
            down = sum(v[k] for kind, v in train_by.items() if kind.endswith("_down"))
            up = sum(v[k] for kind, v in train_by.items() if kind.endswith("_up"))
            est = sb.get(f"{enc}_estimate", {})
            lanes = max(1, int(est.get("lanes", 1)))
            received = int(m["data"].get("n_train", 0)) * lanes * int(m.get("extras", {}).get("trees_grown", 0))
            sent = int(who.get("ops", {}).get("rerandomise", 0))
            lines.append(f"| {k} | {received:,} | {sent:,} | {_mb(down)} | {_mb(up)} |")
        rt = m.get("runtime", {})
        if rt.get("name") == "processes":
            meas = rt.get("measured", {})
            lines += [
                "",
                f"On the wire (across processes): {_mb(meas.get('bytes_train_down', 0))} MB down and "
                f"{_mb(meas.get('bytes_train_up', 0))} MB up in training; equal to the counted bytes: "
                f"{rt.get('measured_equals_accounted')}.",
            ]
        lines.append("")
    return lines


@register("trees/encrypted", "summary.md: SecureBoost under Paillier and OU beside clear SecureBoost and XGBoost")
def build(folder: Path) -> dict[str, str]:
    subs = sorted(p for p in Path(folder).iterdir() if p.is_dir() and is_sweep_folder(p))
    lines = [
        "# SecureBoost under encryption",
        "",
        "Written by `vflbench report results/trees/encrypted` from the runs below (docs/TREES.md, 'Encryption').",
        "",
    ]
    for sub in subs:
        lines += table(sub)
    lines += [
        "Peak RSS: the run's own process (VmHWM), then its worker processes' peaks summed (an upper bound on what they",
        "held at once). x XGBoost: training seconds over XGBoost's on the same table, seed and threads (x GBDT: over",
        "gbdt's, XGBoost hist with the class weights, where the runs have fewer trees than xgboost's fixed 300).",
        "",
    ]
    return {"summary.md": "\n".join(lines).rstrip() + "\n"}
