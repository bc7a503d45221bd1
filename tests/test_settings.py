"""The run-settings schema (vflbench.runs.settings): one conformance suite over every declared setting,
so a setting added later is checked with no edit here (as the method contract does for methods).
Each setting must: appear as its flag in `vflbench run --help`, be accepted at the top level and per
dataset of an experiment file, refuse its bad example with one clear error, leave every run key
alone at its default, move the key at its example value and round-trip through the manifest."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.core.errors import VFLBenchError
from vflbench.grids.experiment import build_experiment
from vflbench.methods import Option
from vflbench.runs.config import RunConfig, config_from_manifest, resolve
from vflbench.runs.settings import SETTINGS, Setting, declare, resolve_settings
from vflbench.training.pipeline import row

NAMES = list(SETTINGS)
runner = CliRunner()
# the method each setting's example is valid with (the summing method takes every declared setting so far)
METHOD = "sum"


def _run(**settings):
    return resolve(RunConfig(dataset="synthetic", method=METHOD, settings=settings))


def _with(name: str) -> dict:
    """The setting's example and the other settings it needs."""
    return {**dict(SETTINGS[name].example_with), name: SETTINGS[name].example}


def test_every_setting_declares_a_flag_help_and_examples():
    help_text = runner.invoke(app, ["run", "--help"], terminal_width=200).output
    for name, s in SETTINGS.items():
        assert s.flag in help_text, name
        assert s.help and s.example is not None and s.bad is not None, name
        assert s.parse(s.example) != s.default, name


@pytest.mark.parametrize("name", NAMES)
def test_default_leaves_the_key_alone_and_the_example_moves_it(name):
    s = SETTINGS[name]
    needs = dict(s.example_with)
    plain = _run(**needs)
    # the default a run gets when nobody sets it: the declared one, or (default_for) the one the other settings imply
    at_default = _run(**needs, **{name: s.text(plain.settings[name] if s.default_for else s.default)})

    def recorded(run):
        return (run.to_dict() if s.placement == "top" else run.to_dict().get("settings", {})).get(name)

    assert at_default.key == plain.key
    # a setting recorded always carries its resolved value (e.g. the protocol's preset); the others are absent at their
    # default
    assert recorded(at_default) == (
        s.text(plain.settings[name]) if s.always or plain.settings[name] != s.default else None
    )
    if s.default_for is not None:  # where the run implies the declared default, giving it changes no key
        bare = _run()
        assert _run(**{name: s.text(s.default)}).key == bare.key and bare.settings[name] == s.default
    other = _run(**_with(name))
    canonical = _run(**needs, **{name: s.text(s.default)}) if s.default_for else plain
    assert (other.key != canonical.key) == s.keyed
    assert recorded(other) == s.text(other.settings[name]) and other.settings[name] != s.default


@pytest.mark.parametrize("name", NAMES)
def test_the_example_round_trips_through_the_manifest_and_reaches_the_row(name):
    run = _run(**_with(name))
    again = resolve(config_from_manifest(json.loads(json.dumps({"config": run.to_dict()}))))
    assert again.key == run.key and again.settings == run.settings
    r = row(run, "none", "accuracy", 50.0, {"n_counted": 1, "n_test": 1}, {})
    assert (f"{name}=" in r.get("settings", "")) == SETTINGS[name].column


@pytest.mark.parametrize("name", NAMES)
def test_a_bad_value_is_one_clear_error(name):
    with pytest.raises(VFLBenchError):
        resolve_settings({name: SETTINGS[name].bad})


@pytest.mark.parametrize("name", NAMES)
def test_experiment_files_take_it_at_the_top_and_per_dataset(name):
    s = SETTINGS[name]
    spec = {
        "name": "x",
        "methods": [METHOD],
        "train_missing": ["none"],
        "test_missing": ["none"],
        "datasets": {"synthetic": {}},
    }
    if s.axis is not None:  # a grid axis: the file lists values under its own key, one run each
        runs = build_experiment({**spec, s.axis: [s.example]}).runs
        assert [r.settings[name] for r in runs] == [s.example]
        with pytest.raises(VFLBenchError, match=name):
            build_experiment({**spec, s.axis: [s.bad]})
        return
    top = build_experiment({**spec, **_with(name)}).runs[0]
    per = build_experiment({**spec, "datasets": {"synthetic": _with(name)}}).runs[0]
    assert top.settings[name] == per.settings[name] == s.example
    with pytest.raises(VFLBenchError, match=name):
        build_experiment({**spec, name: s.bad})


def test_unknown_setting_names_the_known_ones():
    with pytest.raises(VFLBenchError, match="Known: "):
        resolve_settings({"mechansim": "pbm"})


def test_a_setting_cannot_be_declared_twice():
    with pytest.raises(ValueError, match="twice"):
        declare(Setting("secagg", "plain", "again", str))


# ---------------------------------------------------------------- behaviour of the settings themselves
def test_train_samples_trains_on_a_seeded_subset_with_the_masks_of_the_full_run():
    from vflbench.training.pipeline import prepare

    def inputs(**settings):
        run = resolve(
            RunConfig(
                dataset="synthetic",
                method="laser",
                train_missing="mcar:0.3",
                data_options={"n": 800},
                settings=settings,
            )
        )
        return prepare(run, "cpu")

    full, a, b = inputs(), inputs(train_samples=100), inputs(train_samples=100)
    assert a.train.blocks.n == 100 and a.train.blocks.x.equal(b.train.blocks.x)  # the same subset for the same seed
    rows = [int((full.train.blocks.x[0] == a.train.blocks.x[0, i]).all(1).nonzero()[0]) for i in range(100)]
    assert full.train.obs[rows].equal(a.train.obs)  # the subset keeps the masks the full run drew for those samples
    assert a.test.x.equal(full.test.x)  # the test set is untouched
    with pytest.raises(VFLBenchError, match="more than the"):
        inputs(train_samples=10_000)


# ---------------------------------------------------------------- the key layout (vflbench.runs.keys)
def test_fields_declared_after_the_frozen_layout_are_keyed_only_apart_from_their_defaults():
    from vflbench.runs import keys

    # a v2 option is keyed at its default; an option declared later only when set apart from it
    assert keys.method_options("laser", {"fusion": "mean", "heads": "per_party", "samples": "labeled"}) == {
        "fusion": "mean"
    }
    assert keys.method_options("laser", {"fusion": "mean", "heads": "one"}) == {"fusion": "mean", "heads": "one"}
    assert (
        keys.method_options("sum", {"C": 1.0, "embed_dim": 16, "eval": "mechanism", "hidden": "128,64"}) == {}
    )  # a v3 method
    assert keys.method_options("sum", {"C": 2.0}) == {"C": 2.0}
    proto = keys.protocol({"name": "clean", "shuffle": True, "val_split": 0.0, "laser_epochs": 100})
    assert proto == {"name": "clean", "shuffle": True, "laser_epochs": 100}
    assert keys.data_options("fashion-mnist", {"normalize": "dataset", "train_subset": 0, "test_subset": 0}) == {
        "normalize": "dataset",
        "train_subset": 0,
    }


def test_declaring_a_new_method_option_moves_no_key(monkeypatch):
    from vflbench.methods import METHODS

    cls = METHODS.get("laser")
    before = resolve(RunConfig(dataset="synthetic", method="laser")).key
    monkeypatch.setattr(
        cls, "option_specs", (*cls.option_specs, Option("new_knob", int, 3, "an option declared later"))
    )
    assert resolve(RunConfig(dataset="synthetic", method="laser")).key == before
    assert resolve(RunConfig(dataset="synthetic", method="laser", method_options={"new_knob": "4"})).key != before


# ----------------------------------------------------------------------------- run fields
from vflbench.grids.experiment_schema import DATASET_KEYS, TOP_KEYS  # noqa: E402
from vflbench.runs.settings import FIELDS, request  # noqa: E402


def test_every_run_field_is_declared_once_with_its_flag_and_experiment_key():
    help_text = runner.invoke(app, ["run", "--help"], terminal_width=200).output
    from dataclasses import fields as dc_fields

    structural = {f.name for f in dc_fields(RunConfig)} - {"settings", "path_bases", "hp_sources"}
    assert structural == {
        n for n, f in FIELDS.items() if f.into is None
    }  # every RunConfig field a user sets is declared
    for name, f in FIELDS.items():
        if f.flag is not None:
            assert f.cli_flag in help_text, name
        for level, keys in (("top", TOP_KEYS), ("dataset", DATASET_KEYS)):
            assert (f.yaml_key in keys) == (f.yaml_key is not None and level in f.levels) or f.yaml_key in {
                "methods"
            }, (name, level)
    assert not set(FIELDS) & set(SETTINGS)


def test_a_command_line_becomes_the_request_the_fields_declare():
    cfg = request(
        {
            "dataset": "credit",
            "method": "laser",
            "epochs": 3,
            "hp": ["lr=0.01", "pretrain.epochs=2"],
            "hidden": "8,8",
            "partition_options": ["alpha=0.5"],
            "method_options": ["p_drop=0.2"],
            "seed": "4",
        }
    )
    assert cfg["hp"] == {"lr": "0.01", "epochs": 3} and cfg["stage_hp"] == {"pretrain": {"epochs": "2"}}
    assert cfg["hp_sources"] == {"lr": "--hp", "epochs": "flag"}
    assert cfg["model"] == {"hidden": [8, 8]} and cfg["partition_options"] == {"alpha": 0.5}
    assert cfg["method_options"] == {"p_drop": "0.2"} and cfg["settings"] == {"seed": "4"}
    with pytest.raises(VFLBenchError, match="disagree"):
        request({"dataset": "credit", "method": "laser", "epochs": 3, "hp": ["epochs=4"]})
    with pytest.raises(VFLBenchError, match="key=value"):
        request({"dataset": "credit", "method": "laser", "data_options": ["oops"]})


def test_every_run_field_round_trips_through_the_manifest():
    cfg = RunConfig(
        dataset="synthetic",
        method="laser",
        partitioner="random",
        protocol="clean",
        protocol_options={"shuffle": "false"},
        hp={"epochs": 2, "lr": 0.01},
        model={"hidden": [8]},
        seed=2,
    )
    run = resolve(cfg)
    again = resolve(config_from_manifest({"config": json.loads(json.dumps(run.to_dict(), default=str))}))
    provenance = ("option_sources", "hp_sources")  # a reproduced run gives every value explicitly

    def strip(r):
        return {k: v for k, v in json.loads(json.dumps(r.to_dict(), default=str)).items() if k not in provenance}

    assert (
        again.key == run.key
        and strip(again) == strip(run)
        and run.partitioner == "random"
        and run.protocol.shuffle is False
    )
