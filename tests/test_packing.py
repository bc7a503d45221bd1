"""Seed packing (vflbench.training.packing): a run trained in a pack ends as it would alone, for every
packable method, and runs that cannot be packed are trained alone."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.grids.sweep import packs, task_cost
from vflbench.methods import METHODS
from vflbench.runs.config import RunConfig, resolve
from vflbench.training.pipeline import NotPackable, execute, execute_pack

PACKABLE = [m for m in METHODS.names() if METHODS.get(m).packable]
DATA = {"n": 400, "n_classes": 2}  # synthetic, binary: accuracy, F1 and AUPRC are all computed


def _runs(method, protocol, seeds=(0, 1, 2), train_missing="mcar:0.3", **kw):
    opts = {"p_drop": 0.3} if method == "plug" else {}  # exercise the per-batch draw
    # Combinatorial trains a head per subset of parties: 7 with 3 parties, against 15 with the default 4 (the same
    # code paths, in half the time)
    parties = {"parties": 3} if method == "combinatorial" else {}
    return [
        resolve(
            RunConfig(
                dataset="synthetic",
                method=method,
                train_missing=train_missing,
                test_missing=["none", "mcar:0.5"],
                seed=s,
                protocol=protocol,
                data_options=DATA,
                method_options=opts,
                hp={"epochs": 3, "batch_size": 32},
                settings={"eval_epochs": [1, 3], **parties},
                **kw,
            )
        )
        for s in seeds
    ]


def test_every_method_with_a_plain_mlp_loss_is_packable():
    assert set(PACKABLE) >= {"local", "svfl", "ensemble", "combinatorial", "plug", "laser"}


@pytest.mark.parametrize("protocol", ["compat", "clean"])  # per-batch masks and stale updates / per-sample masks
@pytest.mark.parametrize("method", PACKABLE)
def test_a_packed_run_ends_as_it_would_alone(method, protocol):
    runs = _runs(method, protocol)
    alone = [execute(r, device="cpu") for r in runs]
    packed = execute_pack(runs, device="cpu")
    for (rows_a, man_a), (rows_p, man_p) in zip(alone, packed, strict=True):
        assert man_p["pack"]["size"] == 3 and man_p["run_id"] == man_a["run_id"]
        assert len(rows_a) == len(rows_p)
        for a, p in zip(rows_a, rows_p, strict=True):
            assert (a["metric"], a["test_missing"], a["epoch"]) == (p["metric"], p["test_missing"], p["epoch"])
            assert a["comm_bytes_up"] == p["comm_bytes_up"] and a["comm_bytes_down"] == p["comm_bytes_down"]
            if a["metric"] == "auprc":  # a continuous score: batched kernels may round differently (the 1e-6)
                assert p["value"] == pytest.approx(a["value"], abs=1e-6)
            else:
                assert p["value"] == a["value"], (a["metric"], a["test_missing"], a["epoch"])
        assert man_p["history"]["loss"] == pytest.approx(man_a["history"]["loss"], rel=1e-6, abs=1e-7)
        assert man_p["history"]["skipped_batches"] == man_a["history"]["skipped_batches"]
        assert man_p["communication"] == man_a["communication"]


@pytest.mark.parametrize("method", ["laser", "combinatorial"])
def test_a_members_numbers_do_not_depend_on_its_pack_mates_or_the_pack_size(method):
    """So a sweep's numbers do not depend on how its runs were grouped or resumed."""
    alone_in_pack = execute_pack(_runs(method, "compat", seeds=(0,)), device="cpu")[0]
    for seeds in ((0, 1), (0, 7, 9, 3)):
        rows, man = execute_pack(_runs(method, "compat", seeds=seeds), device="cpu")[0]
        assert [r["value"] for r in rows] == [r["value"] for r in alone_in_pack[0]]  # every metric, bit for bit
        assert man["history"]["loss"] == alone_in_pack[1]["history"]["loss"]


@pytest.mark.parametrize("method", PACKABLE)
def test_runs_that_differ_in_training_missingness_share_a_pack(method):
    """Each member draws its own masks: in a pack that mixes training settings, every run ends bit
    for bit as in a pack of its own (and so, up to rounding, as alone: the test above)."""
    settings = ("none", "mcar:0.5", "mcar:0.1")
    runs = [r for tm in settings for r in _runs(method, "compat", seeds=(0, 1), train_missing=tm)]
    mixed = execute_pack(runs, device="cpu")
    assert mixed[0][1]["pack"]["train_missing"] == ["none", "none", "mcar:0.5", "mcar:0.5", "mcar:0.1", "mcar:0.1"]
    for i in (0, 3, 4):
        rows, man = execute_pack([runs[i]], device="cpu")[0]
        assert [r["value"] for r in mixed[i][0]] == [r["value"] for r in rows]
        assert mixed[i][1]["history"]["loss"] == man["history"]["loss"]
        assert mixed[i][1]["communication"] == man["communication"]
        assert mixed[i][1]["run_id"] == runs[i].run_id


def test_runs_that_cannot_share_a_pack_are_refused_before_training():
    with pytest.raises(NotPackable, match="more than their seed"):
        execute_pack([*_runs("laser", "compat", seeds=(0,)), *_runs("svfl", "compat", seeds=(1,))], device="cpu")
    with pytest.raises(NotPackable, match="loss is not written for packing"):
        execute_pack(
            [
                resolve(RunConfig(dataset="synthetic", method="pbm", seed=s, data_options=DATA, hp={"epochs": 1}))
                for s in (0, 1)
            ],
            device="cpu",
        )


def test_packs_group_only_seeds_of_packable_tabular_runs():
    laser, svfl = _runs("laser", "compat", seeds=range(5)), _runs("svfl", "compat", seeds=range(2))
    pbm = [resolve(RunConfig(dataset="synthetic", method="pbm", seed=s, data_options=DATA)) for s in (0, 1)]
    pre = [
        resolve(
            RunConfig(
                dataset="synthetic", method="laser", seed=s, data_options=DATA, method_options={"pretrain": "simsiam"}
            )
        )
        for s in (0, 1)
    ]
    groups = packs([*laser, *svfl, *pbm, *pre], 3)
    assert [len(g) for g in groups] == [3, 2, 2, 1, 1, 1, 1]
    assert [r.seed for r in groups[0]] == [0, 1, 2] and {r.method for r in groups[2]} == {"svfl"}
    assert packs(laser, 1) == [[r] for r in laser]
    # training settings share a pack, unless the method picks its samples by their masks
    # (Standard VFL on fully aligned samples takes as many steps as its mask leaves aligned samples)
    mixed = [*_runs("laser", "compat", seeds=(0, 1), train_missing="none"), *_runs("laser", "compat", seeds=(0, 1))]
    assert [len(g) for g in packs(mixed, 16)] == [4]
    aligned = [*_runs("svfl", "false", seeds=(0, 1), train_missing="none"), *_runs("svfl", "false", seeds=(0, 1))]
    assert [[r.train_missing for r in g] for g in packs(aligned, 16)] == [["none", "none"], ["mcar:0.3", "mcar:0.3"]]
    with pytest.raises(NotPackable, match="more than their seed and training missingness"):
        execute_pack(aligned, device="cpu")


def test_long_tasks_are_scheduled_first():
    """Workers take the longest packs first (epochs x sqrt(members)), so none is left alone at the end."""
    short = [resolve(RunConfig(dataset="synthetic", method="laser", data_options=DATA, hp={"epochs": 2}))]
    long = _runs("laser", "compat", seeds=(0,))  # 3 epochs
    assert task_cost(long) > task_cost(short)
    assert task_cost(long * 4) == pytest.approx(2 * task_cost(long))


def _sweep(tmp_path, **experiment):
    """Write a synthetic-data sweep file with ``experiment``'s fields, sweep it with one worker into
    ``tmp_path/s``; returns (the file, the CLI result, the runs' manifests)."""
    exp = tmp_path / "e.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": "p",
                "protocol": "compat",
                "test_missing": ["none"],
                "datasets": {"synthetic": {"data_options": DATA}},
                **experiment,
            }
        )
    )
    r = CliRunner().invoke(app, ["sweep", str(exp), "--workers", "1", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    return exp, r, [json.loads(p.read_text()) for p in sorted((tmp_path / "s" / "runs").glob("*/manifest.json"))]


@pytest.mark.integration  # `make test-slow` (an end-to-end check: real processes, sweeps or image models; CI runs it)
def test_sweep_packs_by_default_and_writes_every_run_on_its_own(tmp_path):
    exp, r, manifests = _sweep(
        tmp_path,
        methods=["laser", "pbm"],
        seeds=[0, 1, 2],
        train_missing=["mcar:0.3"],
        hp={"epochs": 2, "batch_size": 32},
    )
    assert "3 of them in 1 pack(s)" in r.output
    assert len(manifests) == 6
    assert sorted(m.get("pack", {}).get("size", 0) for m in manifests) == [0, 0, 0, 3, 3, 3]  # PBM-VFL runs alone
    r = CliRunner().invoke(
        app, ["sweep", str(exp), "--workers", "1", "--out", str(tmp_path / "s")]
    )  # resumes: nothing left
    assert r.exit_code == 0 and "6 already finished, 0 to run" in r.output
    r = CliRunner().invoke(app, ["sweep", str(exp), "--pack", "0", "--out", str(tmp_path / "t")])
    assert r.exit_code == 2 and "--pack must be >= 1" in r.output
    # one more seed later: it runs in a pack of one, and the earlier seeds' numbers are what they were
    exp.write_text(exp.read_text().replace("- 2\n", "- 2\n- 5\n"))
    r = CliRunner().invoke(app, ["sweep", str(exp), "--workers", "1", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0 and "6 already finished, 2 to run" in r.output, r.output
    sizes = [
        json.loads(p.read_text()).get("pack", {}).get("size")
        for p in (tmp_path / "s" / "runs").glob("*laser*_s5_*/manifest.json")
    ]
    assert sizes == [1]
    r = CliRunner().invoke(app, ["sweep", str(exp), "--workers", "1", "--pack", "1", "--out", str(tmp_path / "u")])
    assert r.exit_code == 0 and not any(
        "pack" in json.loads(p.read_text()) for p in (tmp_path / "u" / "runs").glob("*/manifest.json")
    )


def test_sweep_packs_training_settings_together_and_manifests_say_so(tmp_path):
    _, r, manifests = _sweep(
        tmp_path,
        methods=["laser"],
        seeds=[0, 1],
        train_missing=["none", "mcar:0.3"],
        hp={"epochs": 1, "batch_size": 32},
    )
    assert "4 of them in 1 pack(s)" in r.output
    assert len(manifests) == 4
    for m in manifests:
        assert m["pack"]["size"] == 4 and sorted(m["pack"]["train_missing"]) == ["mcar:0.3", "mcar:0.3", "none", "none"]
        full = m["masks"]["train"]["fully_observed_fraction"]  # each member trained under its own masks
        assert full == 1.0 if m["config"]["train_missing"] == "none" else full < 0.5
