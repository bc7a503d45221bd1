"""Evaluation at several training budgets (--eval-epochs), option grids in experiment files, and
the tables and plots that read them."""

from __future__ import annotations

import pandas as pd
import pytest
from _testenv import TEST_DEVICE
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.grids.experiment import build_experiment
from vflbench.results.report import at_budget, make_table
from vflbench.runs.config import RunConfig, resolve
from vflbench.training.pipeline import execute

runner = CliRunner()
BASE = dict(
    dataset="synthetic",
    train_missing="mcar:0.3",
    test_missing=["none", "mcar:0.5"],
    data_options={"n": 500},
    hp={"epochs": 4},
)


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
@pytest.mark.parametrize("method", ["laser", "plug"])
def test_intermediate_evaluations_do_not_change_the_run(method):
    plain, _ = execute(resolve(RunConfig(method=method, **BASE)), device=TEST_DEVICE)
    run = resolve(RunConfig(method=method, settings={"eval_epochs": "1:3"}, **BASE))
    budgets, manifest = execute(run, device=TEST_DEVICE)
    assert run.eval_epochs == (1, 2, 3)
    assert sorted({r["epoch"] for r in budgets}) == [1, 2, 3, 4]
    assert [r["value"] for r in budgets if r["epoch"] == 4] == [r["value"] for r in plain]  # bit-identical final rows
    assert manifest["config"]["eval_epochs"] == [1, 2, 3]
    assert resolve(RunConfig(method=method, **BASE)).key != run.key  # part of the run (resume treats it so)


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_credit_budget_rows_equal_a_plain_run(tmp_path):
    """The issue's check on real data: `--epochs 4 --eval-epochs 2,4` on Credit writes rows for
    epochs 2 and 4, and the epoch-4 rows equal a plain 4-epoch run's, value for value."""
    common = [
        "run",
        "--dataset",
        "credit",
        "--method",
        "laser",
        "--train-missing",
        "mcar:0.5",
        "--test-missing",
        "none,mcar:0.5",
        "--protocol",
        "compat",
        "--epochs",
        "4",
        "--quiet",
    ]
    for name, extra in (("plain", []), ("budgets", ["--eval-epochs", "2,4"])):
        r = runner.invoke(app, [*common, *extra, "--out", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
    plain, budgets = (pd.read_csv(next((tmp_path / n).rglob("results.csv"))) for n in ("plain", "budgets"))
    assert sorted(budgets["epoch"].unique()) == [2, 4]
    last = budgets[budgets["epoch"] == 4].reset_index(drop=True)
    assert len(last) == len(plain) == 6  # 2 test settings x accuracy, F1, AUPRC
    assert last["value"].tolist() == plain["value"].tolist()
    assert not budgets[budgets["epoch"] == 2]["value"].equals(last["value"])  # the epoch-2 model is a different model


def test_eval_epochs_parse_and_reject():
    mk = lambda v: resolve(RunConfig(method="svfl", settings={"eval_epochs": v}, **BASE)).eval_epochs  # noqa: E731
    assert mk([2, 1, 4]) == (1, 2) and mk("1,3") == (1, 3) and mk("1:4:2") == (1, 3) and mk(None) is None
    assert mk("25%,50%") == (1, 2) and mk(["50%", 3]) == (2, 3) and mk("100%") is None  # shares of the run's 4 epochs
    for bad, needle in (
        ("0", ">= 1"),
        ("9", "trains 4 epochs"),
        ("a:b", "takes epochs like"),
        ("0%", "shares of the run"),
        ("150%", "shares"),
    ):
        r = runner.invoke(
            app, ["run", "--dataset", "synthetic", "--method", "svfl", "--epochs", "4", "--quiet", "--eval-epochs", bad]
        )
        assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output, r.output


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_tables_use_the_final_epoch_unless_asked(tmp_path):
    rows, _ = execute(resolve(RunConfig(method="svfl", settings={"eval_epochs": "2"}, **BASE)), device=TEST_DEVICE)
    df = pd.DataFrame(rows)
    assert set(at_budget(df)["epoch"]) == {4} and set(at_budget(df, 2)["epoch"]) == {2}
    _, agg4 = make_table(df, "generic")
    _, agg2 = make_table(df, "generic", epoch=2)
    assert len(agg4) == len(agg2) > 0
    with pytest.raises(Exception, match="recorded budgets: 2, 4"):
        at_budget(df, 3)
    text, _ = make_table(df, "generic")
    assert "Convergence: the best method is the same at epochs 2 and 4" in text
    flipped = df.copy()  # a second method that is best at epoch 2 and worst at epoch 4
    other = df.assign(
        method="laser", run_id="x", value=lambda d: d["value"] + (d["epoch"] == 2) * 50 - (d["epoch"] == 4) * 50
    )
    text, _ = make_table(pd.concat([flipped, other]), "generic")
    assert "Ranking not yet stable" in text and "best LASER-VFL at epoch 2, Standard VFL at epoch 4" in text
    csv = tmp_path / "r.csv"
    df.to_csv(csv, index=False)
    r = runner.invoke(app, ["plot", "budget", str(csv), "--out", str(tmp_path / "fig")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "fig.png").exists() and (tmp_path / "fig.pdf").exists()


def test_method_grid_expands_to_variants_with_their_own_columns():
    spec = {
        "name": "g",
        "methods": ["plug", "svfl"],
        "train_missing": ["none"],
        "test_missing": ["none"],
        "seeds": [0, 1],
        "method_grid": {"plug": [{"p_drop": [0.1, 0.3], "fusion": "sum"}, {"p_drop": 0.5}]},
        "datasets": {"synthetic": None},
    }
    exp = build_experiment(spec)
    plug = [r.method_options for r in exp.runs if r.method == "plug"]
    assert len(plug) == 3 * 2 and {o["p_drop"] for o in plug} == {0.1, 0.3, 0.5}
    assert all(o.get("fusion") == "sum" for o in plug if o["p_drop"] != 0.5)
    df = pd.DataFrame(
        [
            {
                "run_id": f"r{i}",
                "dataset": "synthetic",
                "method": "plug",
                "options": f"p_drop={p}",
                "train_missing": "none",
                "test_missing": "none",
                "seed": s,
                "metric": "accuracy",
                "value": 50.0 + p,
            }
            for i, (p, s) in enumerate([(0.1, 0), (0.1, 1), (0.3, 0)])
        ]
    )
    text, agg = make_table(df, "generic")
    assert len(agg) == 2 and "PlugVFL (p_drop=0.1)" in text and "PlugVFL (p_drop=0.3)" in text
    with pytest.raises(Exception, match="not among the methods"):
        build_experiment({**spec, "method_grid": {"laser": {"laser_subsets": "batch"}}})


def test_runs_of_different_lengths_line_up_by_share():
    """Each method at its own paper budget (e.g. 100 vs 50 epochs), evaluated at 50% and 100%:
    tables select by share, and the convergence note compares shares, not epochs."""
    rows = []
    for method, total, vals in (("laser", 100, {50: 60.0, 100: 80.0}), ("svfl", 50, {25: 70.0, 50: 75.0})):
        for seed in (0, 1):
            for ep, v in vals.items():
                rows.append(
                    dict(
                        run_id=f"{method}{seed}",
                        dataset="credit",
                        method=method,
                        parties=4,
                        train_missing="mcar:0.5",
                        test_missing="none",
                        seed=seed,
                        metric="f1",
                        value=v + seed,
                        epochs=total,
                        epoch=ep,
                        protocol="compat",
                    )
                )
    df = pd.DataFrame(rows)
    half = at_budget(df, "50%")
    assert sorted(zip(half["method"], half["epoch"], strict=True))[::2] == [("laser", 50), ("svfl", 25)]
    _, agg = make_table(df, "generic", epoch="50%")
    assert dict(zip(agg["method"], agg["mean"], strict=True)) == {"laser": 60.5, "svfl": 70.5}
    text, _ = make_table(df, "generic")
    assert (
        "**Ranking not yet stable** on credit, train 0.5, test 0.0: best Standard VFL at 50%, LASER-VFL at 100%" in text
    )
    with pytest.raises(Exception, match="recorded shares: 50%, 100%"):
        at_budget(df, "30%")


def test_budget_ranking_names_the_best_method_per_budget_and_its_lead(tmp_path):
    """Hand-built: LASER-VFL leads Standard VFL by 5 points at epoch 2 (seeds disagree by less), and
    Standard VFL leads by 0.5 at epoch 4 with a std of 1: that lead is marked as within one std."""
    rows = []
    vals = {
        ("laser", 2): (60.0, 60.0),
        ("svfl", 2): (55.0, 55.0),
        ("laser", 4): (70.0, 70.0),
        ("svfl", 4): (69.5, 71.5),
    }
    for (method, ep), pair in vals.items():
        for seed, v in enumerate(pair):
            rows.append(
                dict(
                    run_id=f"{method}{seed}",
                    dataset="credit",
                    method=method,
                    parties=4,
                    train_missing="none",
                    test_missing="mcar:0.5",
                    seed=seed,
                    metric="f1",
                    value=v,
                    epochs=4,
                    epoch=ep,
                    protocol="compat",
                )
            )
    df = pd.DataFrame(rows)
    from vflbench.results.report import budget_ranking

    text = budget_ranking(df, "generic")
    assert "| credit | 0.0 | 0.5 | LASER-VFL +5.0 | Standard VFL +0.5 ≈ |" in text, text
    assert "epoch 2 | epoch 4" in text
    csv = tmp_path / "r.csv"
    df.to_csv(csv, index=False)
    r = runner.invoke(app, ["table", str(csv), "--layout", "generic", "--by-budget", "--format", "csv"])
    assert r.exit_code == 0 and "credit,0.0,0.5,LASER-VFL +5.0,Standard VFL +0.5 ≈" in r.output, r.output
    r = runner.invoke(app, ["table", str(csv), "--by-budget", "--epoch", "2"])
    assert r.exit_code == 2 and "drop --epoch" in r.output
    final_only = df[df["epoch"] == 4].drop(columns=["epoch"])
    final_only.to_csv(csv, index=False)
    r = runner.invoke(app, ["table", str(csv), "--layout", "generic", "--by-budget"])
    assert r.exit_code == 2 and "--eval-epochs" in r.output, r.output
