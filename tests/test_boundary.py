"""Privacy at the party-to-server boundary (``--mechanism``, ``--secagg``): the typed spec, the run
setting's path from the CLI and experiment files to the manifest and the CSV, PBM-VFL as the summing
method plus its mechanism (bit-identical), and the refusals."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.core.errors import VFLBenchError
from vflbench.grids.experiment import build_experiment
from vflbench.privacy.mechanism_spec import MechanismSpec, parse_mechanism
from vflbench.runs.config import RunConfig, config_from_manifest, resolve
from vflbench.training.pipeline import execute

from .conftest import needs_mirror

runner = CliRunner()


# ---------------------------------------------------------------- the spec, parsed once
def test_mechanism_spec_parses_to_a_canonical_typed_value():
    s = parse_mechanism("pbm:beta=0.05,b=16,bound=tanh")
    assert s.name == "pbm" and s["b"] == 16 and s["beta"] == 0.05 and s["C"] == 1.0 and s["accountant"] == "pld"
    assert str(s) == "pbm:b=16,beta=0.05,bound=tanh"  # declared order, defaults left out
    assert parse_mechanism(str(s)) == s and parse_mechanism(s) is s
    assert parse_mechanism("gaussian:sigma=2").name == "ldp"
    assert parse_mechanism(None) == parse_mechanism("none") == MechanismSpec()
    assert str(parse_mechanism("pbm")) == "pbm"


@pytest.mark.parametrize(
    "text,match",
    [
        ("pmb:b=3", "Unknown mechanism 'pmb'.*pbm"),
        ("pbm:bb=3", "no parameter 'bb'"),
        ("pbm:beta=0.3", r"beta must be in \(0, 1/4\]"),
        ("pbm:b=2.5", "b expects int"),
        ("pbm:b", "key=value"),
        ("ldp:bound=soft", "choices are clip, tanh"),
    ],
)
def test_a_bad_mechanism_is_one_clear_error(text, match):
    with pytest.raises(VFLBenchError, match=match):
        parse_mechanism(text)


def test_a_run_without_a_mechanism_keeps_its_key_and_manifest():
    plain = resolve(RunConfig(dataset="synthetic", method="laser"))
    assert "settings" not in plain.to_dict()
    same = resolve(RunConfig(dataset="synthetic", method="laser", settings={"mechanism": "none", "secagg": "plain"}))
    assert same.key == plain.key
    private = resolve(RunConfig(dataset="synthetic", method="laser", settings={"mechanism": "pbm:beta=0.1"}))
    assert private.key != plain.key and private.to_dict()["settings"] == {"mechanism": "pbm"}


def test_the_setting_round_trips_through_the_manifest():
    run = resolve(
        RunConfig(dataset="synthetic", method="sum", settings={"mechanism": "pbm:b=8,beta=0.2", "secagg": "masked"})
    )
    again = resolve(config_from_manifest(json.loads(json.dumps({"config": run.to_dict()}))))
    assert again.key == run.key and again.settings == run.settings


def test_experiment_files_take_the_setting_and_name_a_bad_one():
    spec = {
        "name": "x",
        "methods": ["laser"],
        "train_missing": ["none"],
        "test_missing": ["none"],
        "datasets": {"synthetic": {}},
        "mechanism": "ldp:sigma=0.5",
    }
    exp = build_experiment(spec)
    assert exp.runs[0].settings["mechanism"] == "ldp:sigma=0.5"
    assert resolve(exp.runs[0]).settings["mechanism"]["sigma"] == 0.5
    with pytest.raises(VFLBenchError, match="mechanism: .*no parameter 'sigmaa'"):
        build_experiment({**spec, "mechanism": "ldp:sigmaa=1"})


@pytest.mark.parametrize(
    "method,settings,match",
    [
        ("local", {"mechanism": "pbm"}, "nothing crosses"),
        ("pbm", {"mechanism": "pbm"}, "use --method sum"),
        ("laser", {"mechanism": "pbm", "secagg": "masked"}, "reads each party's representation"),
        ("sum", {"mechanism": "ldp", "secagg": "masked"}, "needs --mechanism pbm"),
        ("laser", {"secagg": "maybe"}, "plain or masked"),
    ],
)
def test_combinations_that_cannot_work_are_refused_at_resolve(method, settings, match):
    with pytest.raises(VFLBenchError, match=match):
        resolve(RunConfig(dataset="synthetic", method=method, settings=settings))


# ---------------------------------------------------------------- PBM-VFL = the summing method + its mechanism
def _rows(method: str, method_options: dict, settings: dict) -> pd.DataFrame:
    cfg = RunConfig(
        dataset="synthetic",
        method=method,
        train_missing="mcar:0.3",
        test_missing=["none", "mcar:0.5"],
        data_options={"n": 600},
        hp={"epochs": 2},
        method_options=method_options,
        settings=settings,
    )
    rows, manifest = execute(resolve(cfg), device="cpu")
    return pd.DataFrame(rows), manifest


@pytest.mark.parametrize("secagg", ["plain", "masked"])
def test_pbm_vfl_is_the_summing_method_with_pbm_at_its_boundary(secagg):
    a, ma = _rows("pbm", {"secagg": secagg}, {})
    b, mb = _rows("sum", {}, {"mechanism": "pbm:b=32,beta=0.1", "secagg": secagg})
    cols = [
        "test_missing",
        "metric",
        "value",
        "comm_bytes_up",
        "comm_bytes_down",
        "epsilon_feature_record_no_local_training",
        "epsilon_sample_record_no_local_training",
        "epsilon_column_block",
        "privacy_releases",
    ]
    assert a[cols].equals(b[cols])
    assert mb["privacy"]["release"] == "sum" and mb["privacy"]["mechanism"] == "pbm"
    assert ma["history"]["loss"] == mb["history"]["loss"]
    assert set(b["settings"]) == {f"mechanism=pbm;secagg={secagg}" if secagg != "plain" else "mechanism=pbm"}


# ---------------------------------------------------------------- the CLI, end to end on real data
@pytest.mark.slow
@needs_mirror
def test_laser_with_pbm_at_its_boundary_reports_a_certified_epsilon(tmp_path):
    r = runner.invoke(
        app,
        [
            "run",
            "--dataset",
            "credit",
            "--method",
            "laser",
            "--mechanism",
            "pbm:b=32,beta=0.2",
            "--epochs",
            "1",  # what is checked (a certified epsilon, the settings, the traffic per value) holds after one epoch
            "--test-missing",
            "none,mcar:0.5",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "certified upper bounds" in r.output and "epsilon_feature_record_no_local_training" in r.output
    (d,) = list(tmp_path.iterdir())
    df = pd.read_csv(d / "results.csv")
    eps = df["epsilon_feature_record_no_local_training"].iloc[0]
    assert (
        0 < eps < math.inf
        and (df["mechanism"] == "pbm:beta=0.2").all()
        and (df["settings"] == "mechanism=pbm:beta=0.2").all()
    )
    man = json.loads((d / "manifest.json").read_text())
    assert man["privacy"]["release"] == "each" and man["privacy"]["upper_bound"] is True
    assert man["config"]["settings"] == {"mechanism": "pbm:beta=0.2"}
    assert man["communication"]["model"] == "PBMChannel"
    # every release is b=32 counts: 6 bits per value up, float32 gradients down
    assert (
        man["extras"]["comm_bytes_up"] * 16 == man["extras"]["comm_bytes_down"] * 3
    )  # 0.75 bytes up, 4 down per value


def test_the_cli_refuses_a_bad_mechanism_in_one_line(tmp_path):
    r = runner.invoke(
        app, ["run", "--dataset", "synthetic", "--method", "local", "--mechanism", "pbm", "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 2 and "does not take a mechanism" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


def test_a_method_grid_entry_can_set_run_settings():
    spec = {
        "name": "x",
        "methods": ["laser"],
        "train_missing": ["none"],
        "test_missing": ["none"],
        "datasets": {"synthetic": {}},
        "method_grid": {
            "laser": [
                {},
                {"settings": {"mechanism": "pbm:beta=0.1"}},
                {"heads": "one", "settings": {"mechanism": "ldp:sigma=1"}},
            ]
        },
    }
    runs = build_experiment({**spec, "seeds": [0, 1]}).runs  # every seed of an entry gets its settings
    assert [r.settings.get("mechanism") for r in runs] == [
        None,
        None,
        "pbm:beta=0.1",
        "pbm:beta=0.1",
        "ldp:sigma=1",
        "ldp:sigma=1",
    ]
    runs = runs[::2]
    assert runs[2].method_options == {"heads": "one"}
    assert len({resolve(r).key for r in runs}) == 3
    with pytest.raises(VFLBenchError, match="unknown run setting 'mechansim'"):
        build_experiment({**spec, "method_grid": {"laser": [{"settings": {"mechansim": "pbm"}}]}})
    with pytest.raises(VFLBenchError, match="method_grid.laser: mechanism: "):
        build_experiment({**spec, "method_grid": {"laser": [{"settings": {"mechanism": "pbm:beta=1"}}]}})
