"""The leakage audit (issue 79, item 3): each column alone, entities, duplicates; and the committed audit's flagged
columns each with a verdict in its table's YAML."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vflbench.data.audit import audit_dataset, duplicate_share, entity_accuracy
from vflbench.data.datasets.base import Dataset, DatasetInfo

ROOT = Path(__file__).resolve().parents[1]


def _planted(n: int = 3000, seed: int = 0) -> Dataset:
    """A binary target; 'size_a', 'size_b' and 'size_c' three strong ordinary predictors of one kind; 'after' a near
    copy of the label (recorded after the outcome); 'firm' an entity whose rows share their target; 'noise'."""
    rng = np.random.default_rng(seed)
    firm = rng.integers(0, 300, n)
    firm_rate = rng.random(300) < 0.3
    y = np.where(rng.random(n) < 0.9, firm_rate[firm], rng.random(n) < 0.3).astype(np.int64)
    size = y + rng.normal(0, 0.9, n)
    cols = {
        "size_a": size + rng.normal(0, 0.3, n),
        "size_b": size + rng.normal(0, 0.3, n),
        "size_c": size + rng.normal(0, 0.3, n),
        "after": y + rng.normal(0, 0.05, n),
        "firm": firm.astype(float),
        "noise": rng.normal(size=n),
    }
    x = np.column_stack(list(cols.values())).astype(np.float32)
    info = DatasetInfo("planted", "planted", "tabular", 2, (x.shape[1],), "test", "test")
    cut = int(0.8 * n)
    return Dataset(info, x[:cut], y[:cut], x[cut:], y[cut:], feature_names=list(cols))


def test_the_audit_flags_the_planted_leak_and_entity_and_not_the_strong_ordinary_columns():
    rows, facts = audit_dataset(_planted(), sample=20_000)
    r = rows.set_index("column")
    assert r.loc["after", "alone"] > 0.97 and r.loc["after", "flag_alone"]
    assert not r.loc[["size_a", "size_b", "size_c", "noise"], "flag_alone"].any()  # strong, but none stands apart
    assert r.loc["firm", "flag_entity"] and r.loc["firm", "entity_accuracy"] > 85
    assert not r.loc[["size_a", "noise"], "flag_entity"].any()  # unique values: no level repeats
    assert facts["majority"] == pytest.approx(1 - _planted().y_train.mean()) and facts["duplicate_test_rows"] == 0.0


def test_entity_accuracy_leaves_the_row_out_and_duplicates_are_exact_rows():
    levels = np.array([0, 0, 0, 1, 1, 2])
    y = np.array([1, 1, 0, 0, 0, 1])
    # row 0: others of level 0 are {1, 0} -> tie -> class 0 (wrong); row 1 likewise (wrong); row 2: {1, 1} -> 1 (wrong)
    # rows 3, 4: the other is 0 (right); row 5: alone -> the overall majority, 0 (wrong; 3 zeros vs 3 ones -> 0)
    assert entity_accuracy(levels, y) == pytest.approx(2 / 6)
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    assert duplicate_share(a, np.array([[3.0, 4.0], [3.0, 5.0]], np.float32)) == 0.5


def test_every_flagged_column_of_the_committed_audit_has_a_verdict_and_the_named_cases_are_covered():
    """results/audit/audit.csv (vflbench audit): no flagged column without a sentence in its table's YAML; covid's
    rec_ver_tat, MplsStops' race and gender, InstInnovation's institutions and gss_wages' own income have one."""
    from vflbench.data.datasets.suite import read_suite_table, suite_names
    from vflbench.results.leakage import verdict

    audit = pd.read_csv(ROOT / "results" / "audit" / "audit.csv")
    assert set(audit["table"]) == set(suite_names())
    flagged = audit[audit["flag_alone"] | audit["flag_entity"]]
    missing = [
        f"{r.table}:{r.column}" for r in flagged.itertuples() if not verdict(read_suite_table(r.table), r.column)
    ]
    assert not missing, f"flagged columns without a verdict in their table's YAML (audit:): {missing}"
    named = {"covid": "rec_ver_tat", "mpls_stops": "race", "innovation": "institutions", "gss_wages": "realrinc"}
    for table, column in named.items():
        assert verdict(read_suite_table(table), column), (table, column)
    assert verdict(read_suite_table("mpls_stops"), "gender")


def test_audit_refuses_an_unknown_table_and_verdicts_without_an_audit_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from vflbench.cli import app

    r = CliRunner().invoke(app, ["audit", "nope", "--out", str(tmp_path / "a")])
    assert r.exit_code == 2 and "No suite table nope" in r.output and not (tmp_path / "a").exists()
    r = CliRunner().invoke(app, ["audit", "--verdicts-only", "--out", str(tmp_path / "b")])
    assert r.exit_code == 2 and "run vflbench audit --out" in r.output


def test_audit_of_some_tables_refreshes_them_and_keeps_the_others(tmp_path, monkeypatch):
    """vflbench audit T1 T2 --out DIR over an existing audit replaces T1's and T2's rows and keeps every other table's
    as it was screened (a table added to the suite is screened alone)."""
    from vflbench.results import leakage

    out = tmp_path / "a"
    out.mkdir()
    pd.DataFrame({"table": ["covid", "loans", "gone"], "column": ["x", "y", "z"], "flag_alone": [False] * 3,
                  "flag_entity": [False] * 3, "verdict": ["", "", ""], "alone": [0.5] * 3, "next_alone": [0.5] * 3,
                  "entity_accuracy": [float("nan")] * 3, "entity_lift": [float("nan")] * 3}).to_csv(
        out / "audit.csv", index=False)  # fmt: skip
    pd.DataFrame({"table": ["covid", "loans", "gone"], "rows": [1, 2, 3]}).to_csv(out / "tables.csv", index=False)
    audit, tables = leakage.audit_suite(["monica"], out, sample=2000, say=lambda *_: None)
    assert set(audit["table"]) == {"covid", "loans", "monica"}  # "gone" is no suite table: dropped
    assert audit[audit["table"] == "covid"]["column"].tolist() == ["x"]
    assert "hosp" in set(audit[audit["table"] == "monica"]["column"])
    assert set(pd.read_csv(out / "tables.csv")["table"]) == {"covid", "loans", "monica"}
