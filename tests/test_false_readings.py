"""What the FALSE-VFL comparison's evidence rests on: the validation split, the LASER-VFL readings as
protocol options and table rows, the variant choice on validation, and sweeps run in subsets."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.core.errors import VFLBenchError
from vflbench.results.artefacts.false_vfl import false_tables
from vflbench.runs.config import RunConfig, resolve
from vflbench.training.pipeline import prepare, protocol_overrides

runner = CliRunner()


def semi(**kw):
    return RunConfig(
        dataset="synthetic",
        method="laser",
        protocol="false",
        settings={"labeled": 120, "aligned": 20},
        train_missing="mcar:0.3",
        test_missing=["none", "mcar:0.5"],
        data_options={"n": 600},
        **kw,
    )


def test_val_split_holds_labeled_samples_out_of_training_entirely():
    base = prepare(resolve(semi()), "cpu")
    run = resolve(semi(protocol_options={"val_split": 0.25}))
    inp = prepare(run, "cpu")
    n_val = round(0.25 * (120 - 20))
    assert len(inp.y_val) == n_val and inp.val.n == n_val
    assert inp.train.blocks.n == base.train.blocks.n - n_val
    assert (
        int(inp.train.labeled.sum()) == 120 - n_val
    )  # the reserve stays; held-out samples are not unlabeled data either
    assert int((inp.train.labeled & inp.train.obs.all(1)).sum()) >= 20
    assert set(inp.val_masks) == {"none", "mcar:0.5"} and inp.val_masks["none"].observed.all()
    assert 0.3 < 1 - inp.val_masks["mcar:0.5"].observed.mean() < 0.7
    assert protocol_overrides(run) == "val_split=0.25" and protocol_overrides(resolve(semi())) == ""
    with pytest.raises(VFLBenchError, match="val_split"):
        resolve(RunConfig(dataset="synthetic", method="laser", protocol_options={"val_split": 1.5}))


def test_val_split_adds_validation_rows_in_semi_supervised_and_supervised_runs(tmp_path):
    args = [
        "run",
        "--dataset",
        "synthetic",
        "--data-opt",
        "n=600",
        "--method",
        "laser",
        "--protocol",
        "false",
        "--labeled",
        "120",
        "--aligned",
        "20",
        "--train-missing",
        "mcar:0.3",
        "--test-missing",
        "none,mcar:0.5",
        "--epochs",
        "2",
        "--quiet",
        "--out",
        str(tmp_path),
    ]
    r = runner.invoke(app, [*args, "--protocol-opt", "val_split=0.25"])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(next(tmp_path.rglob("results.csv")))
    val = df[df["metric"] == "val_accuracy"]
    assert len(val) == 2 and (val["n_test"] == 25).all() and (df.loc[df["metric"] == "accuracy", "n_test"] > 25).all()
    assert (df["protocol_options"] == "val_split=0.25").all()
    # a supervised run (no --labeled) holds out val_split of every training sample (what `vflbench tune` scores)
    sup = runner.invoke(
        app,
        [
            "run",
            "--dataset",
            "synthetic",
            "--data-opt",
            "n=600",
            "--method",
            "laser",
            "--protocol-opt",
            "val_split=0.2",
            "--test-missing",
            "none",
            "--epochs",
            "1",
            "--quiet",
            "--out",
            str(tmp_path / "b"),
        ],
    )
    assert sup.exit_code == 0, sup.output
    rows = pd.read_csv(next((tmp_path / "b").rglob("results.csv")))
    n_val = int(rows.loc[rows["metric"] == "val_accuracy", "n_test"].iloc[0])
    n_test = int(rows.loc[rows["metric"] == "accuracy", "n_test"].iloc[0])
    assert n_val == round(0.2 * (600 - n_test))  # a fifth of the training split; the test split is untouched


def test_laser_epochs_is_a_protocol_option_below_the_user():
    r = resolve(semi(protocol_options={"laser_epochs": "100"}, method_options={"pretrain": "simsiam"}))
    plain = resolve(semi(method_options={"pretrain": "simsiam"}))
    assert r.stage_hp["train"].epochs == 100 != plain.stage_hp["train"].epochs
    assert r.stage_hp["pretrain"].epochs == plain.stage_hp["pretrain"].epochs  # only the supervised stage
    assert r.key != resolve(semi(method_options={"pretrain": "simsiam"})).key
    assert resolve(semi(protocol_options={"laser_epochs": "100"}, hp={"epochs": 7})).stage_hp["train"].epochs == 7
    assert (
        resolve(
            RunConfig(dataset="synthetic", method="plug", protocol="false", protocol_options={"laser_epochs": "100"})
        ).hp.epochs
        != 100
    )
    with pytest.raises(VFLBenchError, match="whole number"):
        resolve(semi(protocol_options={"laser_epochs": "ten"}))


def _row(method, test, value, seed, options="", protocol_options="", metric="accuracy"):
    return {
        "dataset": "isolet",
        "method": method,
        "train_missing": "mcar:0.2",
        "test_missing": test,
        "metric": metric,
        "value": value,
        "seed": seed,
        "options": options,
        "protocol_options": protocol_options,
        "run_id": f"{method}{options}{protocol_options}{seed}",
    }


def test_a_reading_is_printed_under_its_baseline_and_swapped_into_table_2():
    rows = []
    for s in (0, 1):
        for t in ("none", "mcar:0.5"):
            rows += [
                _row("laser", t, 80 + s, s, "pretrain=none"),
                _row("false1", t, 70 + s, s),
                _row("laser", t, 60 + s, s, "pretrain=none", "laser_epochs=100"),
                _row("plug", t, 50, s, "pretrain=none"),
            ]
    ref = pd.read_csv("vflbench/results/reference/false_tables12_17.csv")
    text, best = false_tables(pd.DataFrame(rows), ref)
    lines = [ln for ln in text.splitlines() if ln.startswith("| Isolet")]
    names = [ln.split(" | ")[1] for ln in lines[:4]]
    assert names == ["LASER-VFL", "LASER-VFL (laser_epochs=100)", "PlugVFL", "FALSE-VFL-I"]
    assert "[69.3]" in lines[1]  # the reading sits beside the paper's LASER-VFL number
    assert "**" not in lines[1]  # readings never take the bold mark
    assert "LASER-VFL (laser_epochs=100)" not in set(best["Method"])  # nor the best-of-baselines gap
    gap_rows = [ln for ln in text.splitlines() if ln.startswith("| LASER-VFL (laser_epochs=100) |")]
    assert gap_rows and "| -10.0 | +10.0 |" in gap_rows[0]  # gap ours (70.5 - 80.5) and with the reading (70.5 - 60.5)
    # the per-cell gap to the paper's LASER-VFL row (69.3 at MCAR 0 (std 0.9), 51.0 at MCAR 5), reading and base row
    i = text.index("Gap to the paper per cell (ours - paper, points), Isolet, trained under MCAR 2")
    cells = [ln for ln in text[i:].splitlines() if ln.startswith("| LASER-VFL")]
    assert cells[0] == "| LASER-VFL | +11.2 | +29.5 | 0/2 |"  # 80.5 - 69.3, 80.5 - 51.0
    assert cells[1] == "| LASER-VFL (laser_epochs=100) | -8.8 | +9.5 | 0/2 |"


def test_variant_chosen_on_validation_against_the_test_set():
    rows = []
    for s in (0, 1):
        # the test set prefers SimSiam (81 > 80); validation prefers labeled-only (90 > 70)
        rows += [
            _row("laser", "none", 80, s, "pretrain=none"),
            _row("laser", "none", 81, s, "pretrain=simsiam"),
            _row("laser", "none", 90, s, "pretrain=none", metric="val_accuracy"),
            _row("laser", "none", 70, s, "pretrain=simsiam", metric="val_accuracy"),
            _row("false1", "none", 75, s),
        ]
    text, _ = false_tables(pd.DataFrame(rows), None)
    sec = text.split("## Variant chosen on validation samples")[1]
    assert "Same choice in 0 of 1 cells" in sec
    assert "| Isolet | LASER-VFL | MCAR 2 | MCAR 0 | simsiam | 81.0 | none | 80.0 | -1.0 | 2 |" in sec


def test_subset_invocations_of_one_experiment_accumulate_in_its_folder(tmp_path):
    spec = {
        "name": "tiny",
        "layout": "generic",
        "protocol": "clean",
        "seeds": [0, 1],
        "parties": [4],
        "methods": ["local", "svfl"],
        "train_missing": ["mcar:0.1"],
        "test_missing": ["none"],
        "hp": {"epochs": 1},
        "datasets": {"synthetic": {"data_options": {"n": 300}}},
    }
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(spec))
    out = tmp_path / "o"
    assert runner.invoke(app, ["sweep", str(exp), "--methods", "local", "--out", str(out)]).exit_code == 0
    assert (
        runner.invoke(app, ["sweep", str(exp), "--methods", "svfl", "--seeds", "0", "--out", str(out)]).exit_code == 0
    )
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["runs_total"] == 3 and meta["runs_finished"] == 3
    df = pd.read_csv(out / "results.csv")
    assert sorted(df.groupby("method")["seed"].nunique().items()) == [("local", 2), ("svfl", 1)]


def test_table_reads_several_folders_and_warns_about_repeated_seeds(tmp_path):
    spec = {
        "name": "tiny",
        "layout": "generic",
        "protocol": "clean",
        "seeds": [0],
        "parties": [4],
        "methods": ["local"],
        "train_missing": ["mcar:0.1"],
        "test_missing": ["none"],
        "hp": {"epochs": 1},
        "datasets": {"synthetic": {"data_options": {"n": 300}}},
    }
    for name, extra in (("a", {}), ("b", {"eval_epochs": [1]})):
        exp = tmp_path / f"{name}.yaml"
        exp.write_text(yaml.safe_dump({**spec, **extra, "hp": {"epochs": 2}}))
        assert runner.invoke(app, ["sweep", str(exp), "--out", str(tmp_path / name)]).exit_code == 0
    with pytest.warns(Warning, match="repeat a"):
        r = runner.invoke(app, ["table", str(tmp_path / "a"), str(tmp_path / "b"), "--layout", "generic"])
    assert r.exit_code == 0, r.output
    assert "2 seeds" in r.output or "(n=2" in r.output or "± " in r.output
