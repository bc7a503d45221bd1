"""Statistics in tables (vflbench.results.stats, `vflbench table --stats`, `vflbench plot cd`): the paired tests, Holm's
correction and the intervals against their definitions on hand-built cases; the verdicts on a hand-built table;
the seeds pair the methods (the same seed gives every method the same masks)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.core.errors import VFLBenchError
from vflbench.results.report import make_table
from vflbench.results.stats import critical_difference, holm, paired_p, t_interval

runner = CliRunner()


def test_the_paired_test_is_nadeau_and_bengios_corrected_resampled_t_test():
    """t = mean(d) / sqrt((1/R + n_test/n_train) var(d)), R - 1 degrees of freedom, by hand; the plain paired t (the
    old test) is anti-conservative over repeated splits and gives a smaller p on the same differences."""
    a = np.array([80.0, 81.5, 79.0, 82.0, 80.5, 83.0])
    b = np.array([78.0, 80.0, 78.5, 79.0, 80.0, 80.0])
    d = a - b
    t = d.mean() / math.sqrt((1 / len(d) + 0.25) * d.var(ddof=1))
    p, test = paired_p(a, b, 0.25)
    assert test == "corrected t" and p == pytest.approx(2 * sps.t.sf(abs(t), len(d) - 1), rel=1e-12)
    assert p > sps.ttest_rel(a, b).pvalue and p > sps.wilcoxon(a, b).pvalue
    t2 = d.mean() / math.sqrt((1 / len(d) + 0.5) * d.var(ddof=1))  # a larger test share widens it further
    assert paired_p(a, b, 0.5)[0] == pytest.approx(2 * sps.t.sf(abs(t2), len(d) - 1), rel=1e-12)
    assert paired_p(a, a) == (1.0, "identical") and math.isnan(paired_p(a[:1], b[:1])[0])


def test_a_constant_gap_below_the_margin_is_a_tie_and_one_seed_is_not_tested():
    """The old rule called any constant nonzero gap significant (p = 0): a constant 0.00001-point gap was a win. Now a
    gap inside the practical margin is a tie however consistent, a constant gap outside it is decided by the margin,
    and one seed is "not tested", never a tie."""
    from vflbench.results.stats import MARGIN, decide

    a = np.array([70.0, 71.0, 72.0, 73.0, 74.0])
    p, test = paired_p(a + 0.00001, a)
    assert test == "constant gap" and decide(0.00001, p, 5) == "tie"
    assert decide(0.6, paired_p(a + 0.6, a)[0], 5) == "win" and decide(-0.6, 0.0, 5) == "loss"
    assert MARGIN == 0.5 and decide(0.49, 0.0001, 5) == "tie" and decide(3.0, 0.2, 5) == "tie"
    assert decide(3.0, float("nan"), 1) == "not tested"


def test_holm_is_the_step_down_rule():
    p = [0.01, 0.04, 0.03, 0.005, float("nan")]
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1, running max, capped at 1
    by_hand = {3: 0.02, 0: 0.03, 2: 0.06, 1: 0.06}
    got = holm(p)
    assert all(got[i] == pytest.approx(v) for i, v in by_hand.items()) and math.isnan(got[4])


def test_the_t_interval_is_mean_plus_minus_t_times_the_standard_error():
    v = np.array([1.0, 2.0, 4.0, 7.0])
    half = sps.t.ppf(0.975, 3) * v.std(ddof=1) / 2
    assert t_interval(v) == pytest.approx((v.mean() - half, v.mean() + half))


def _frame() -> pd.DataFrame:
    rows = []
    rng = np.random.default_rng(0)
    for seed in range(5):
        noise = rng.normal(0, 0.05)
        for method, value in (("laser", 80.0 + seed * 0.3), ("plug", 80.0 + seed * 0.3 - 0.01 * (-1) ** seed)):
            rows.append((method, value))
        rows.append(("local", 70.0 + seed * 0.3 + noise))
    out = []
    for i, (m, v) in enumerate(rows):
        out.append(
            {
                "run_id": f"r{i}",
                "dataset": "credit",
                "method": m,
                "parties": 4,
                "train_missing": "none",
                "test_missing": "none",
                "seed": i // 3,
                "metric": "accuracy",
                "value": v,
                "protocol": "clean",
                "status": "ok",
            }
        )
    return pd.DataFrame(out)


def test_a_table_with_stats_marks_the_best_the_ties_and_the_significant_losses():
    text, agg = make_table(_frame(), "generic", stats=True)
    v = agg.set_index("method")["verdict"]
    assert v["laser"] == "best" and v["plug"] == "tied" and v["local"] == "worse"
    assert "**80.6 [" in text and " =" in text and " ↓" in text
    assert "LASER-VFL 0/1 (1 more best or tied, not significantly)" in text and "Local 0/1 (0 more" in text
    csv, _ = make_table(_frame(), "generic", fmt="csv", stats=True)
    head = csv.splitlines()[0]
    assert all(c in head for c in ("ci_low", "ci_high", "p", "p_holm", "verdict", "n_pairs"))
    plain, _ = make_table(_frame(), "generic")
    assert "Best or within one std of the best" in plain  # the heuristic stays, named for what it is


def test_the_same_seed_gives_every_method_the_same_masks():
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.pipeline import prepare

    a, b = (
        prepare(resolve(RunConfig(dataset="synthetic", method=m, train_missing="mcar:0.3", seed=3)), "cpu")
        for m in ("laser", "svfl")
    )
    assert bool((a.train.obs == b.train.obs).all())
    for s in a.test_masks:
        assert (a.test_masks[s].observed == b.test_masks[s].observed).all()


def test_the_critical_difference_diagram_is_autoranks_and_refuses_too_little(tmp_path):
    table = pd.DataFrame(
        {"A": [80.0, 82, 79, 85, 81, 83], "B": [78.0, 80, 77, 84, 80, 82], "C": [70.0, 71, 69, 72, 70, 73]}
    )
    paths, report = critical_difference(table, tmp_path / "cd")
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 0 for p in paths)
    assert "Friedman" in report and "Nemenyi" in report
    with pytest.raises(VFLBenchError, match="two methods"):
        critical_difference(table[["A"]], tmp_path / "x")
    with pytest.raises(VFLBenchError, match="at least 5 conditions"):
        critical_difference(table.iloc[:4], tmp_path / "x")


def test_table_stats_and_plot_cd_from_the_cli(tmp_path):
    df = _frame()
    df.to_csv(tmp_path / "results.csv", index=False)
    r = runner.invoke(app, ["table", str(tmp_path / "results.csv"), "--layout", "generic", "--stats"])
    assert r.exit_code == 0 and "95% t interval" in r.output, r.output
    r = runner.invoke(app, ["table", str(tmp_path / "results.csv"), "--stats", "--by-budget"])
    assert r.exit_code == 2 and "two views" in r.output


def test_plot_cd_joins_two_folders_rows_with_a_plus(tmp_path):
    """A method run apart (e.g. FALSE-VFL's GPU rows beside baselines tuned on a CPU): ``A+B`` puts their rows
    side by side as one set of conditions; given apart, each has only its own methods and no diagram is drawn."""
    base = _frame()
    frames = [base.assign(test_missing=f"mcar:0.{i}", run_id=base["run_id"] + f"-{i}") for i in range(6)]
    df = pd.concat(frames, ignore_index=True)
    df[df["method"] != "local"].to_csv(tmp_path / "a.csv", index=False)
    df[df["method"] == "local"].to_csv(tmp_path / "b.csv", index=False)
    out = tmp_path / "cd"
    r = runner.invoke(app, ["plot", "cd", f"{tmp_path / 'a.csv'}+{tmp_path / 'b.csv'}", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "Friedman" in r.output and out.with_suffix(".png").stat().st_size > 0
    r = runner.invoke(app, ["plot", "cd", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--out", str(out)])
    assert r.exit_code == 2 and "two methods over the same conditions" in r.output, r.output


def _paired_gap_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "paired_gap.py"
    spec = importlib.util.spec_from_file_location("paired_gap", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_paired_gap_pairs_results_from_two_sources_by_seed(tmp_path, capsys):
    """scripts/paired_gap.py (the per-seed tables of results/tuned/README.md): the gap is taken seed by seed
    over the seeds both sources ran, its p-value is the corrected resampled t-test's, and each column's mean is over
    its own seeds."""
    base = dict(dataset="isolet", parties=8, train_missing="mcar:0.2", metric="accuracy")
    a = [80.0, 81.5, 79.0, 82.0, 80.5]
    b = [78.0, 80.0, 78.5, 79.0]  # seed 4 missing
    rows = lambda vals, method: [  # noqa: E731
        {**base, "method": method, "test_missing": "none", "seed": s, "value": v} for s, v in enumerate(vals)
    ]
    pd.DataFrame(rows(a, "laser")).to_csv(tmp_path / "a.csv", index=False)
    pd.DataFrame(rows(b, "false2") + rows([1.0] * 5, "laser")).to_csv(tmp_path / "b.csv", index=False)
    mod = _paired_gap_script()
    assert mod.main([f"{tmp_path / 'b.csv'}:false2=F", f"{tmp_path / 'a.csv'}:laser=L"]) == 0
    out = capsys.readouterr().out.splitlines()
    d = np.array(a[:4]) - np.array(b)
    t = d.mean() / math.sqrt((1 / 4 + 0.25) * d.var(ddof=1))  # the corrected resampled t-test, n_test/n_train 0.25
    p = 2 * sps.t.sf(abs(t), 3)
    assert out[0].startswith("| test | F | L | L - F (per-seed range) | p | Holm p |")
    assert out[2] == (
        f"| 0.0 | {np.mean(b):.1f} | {np.mean(a):.1f} | {d.mean():+.1f} ({d.min():+.1f} to {d.max():+.1f}; 4 seeds) "
        f"| {p:.2g} | {p:.2g} |"  # one condition: Holm leaves its p-value as it is
    )
    with pytest.raises(SystemExit, match="no accuracy rows for method 'plug'"):
        mod.main([f"{tmp_path / 'a.csv'}:plug", f"{tmp_path / 'b.csv'}:laser"])
    with pytest.raises(SystemExit, match="not SRC:METHOD"):
        mod.main(["a.csv", f"{tmp_path / 'b.csv'}:laser"])
