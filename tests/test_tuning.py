"""`vflbench tune` (vflbench.grids.tuning): every method gets the same number of trials, in an Optuna SQLite study
that a second call extends; the result is a preset that runs take; tuning scores a validation split carved from the
training data (never the test data) on seeds apart from the reporting ones; what cannot be tuned is refused."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.runs.config import RunConfig, resolve

from .conftest import needs_mirror

runner = CliRunner()
EXP = """name: tune-test
seeds: [0, 1]
parties: [4]
methods: [svfl, laser]
train_missing: [mcar:0.1]
test_missing: [none]
hp: {epochs: 1}
train_samples: 1500
datasets:
  credit: {}
"""


def _trials(db) -> dict[int, int]:
    with sqlite3.connect(db) as c:
        return dict(c.execute("select study_id, count(*) from trials where state = 'COMPLETE' group by study_id"))


@needs_mirror
def test_tune_runs_the_same_trials_per_method_resumes_and_writes_a_preset_runs_take(tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXP)
    out = tmp_path / "tuned"
    r = runner.invoke(app, ["tune", str(exp), "--trials", "4", "--out", str(out), "--metric", "f1"])
    assert r.exit_code == 0, r.output
    assert sorted(_trials(out / "tuning.db").values()) == [4, 4]  # Optuna's own `trials` table
    r = runner.invoke(app, ["tune", str(exp), "--trials", "6", "--out", str(out), "--metric", "f1"])
    assert r.exit_code == 0, r.output
    assert sorted(_trials(out / "tuning.db").values()) == [6, 6]  # --trials is the total: 2 more each
    with sqlite3.connect(out / "tuning.db") as c:  # the 2 added trials draw new values, not trials 0 and 1's again
        drawn = c.execute(
            "select t.study_id, group_concat(p.param_name || '=' || p.param_value) from trials t "
            "join trial_params p using (trial_id) group by t.trial_id"
        ).fetchall()
    assert len(drawn) == 12 and len(set(drawn)) == 12, drawn
    summary = json.loads((out / "summary.json").read_text())
    assert {s["study"]: s["trials"] for s in summary["studies"]} == {"credit/svfl": 6, "credit/laser": 6}
    assert summary["tuning_seeds"] == [1000] and summary["reporting_seeds"] == [0, 1]
    laser = next(s for s in summary["studies"] if s["method"] == "laser")
    assert set(laser["best_params"]) == {"lr", "weight_decay", "batch_size", "option:fusion"}  # epochs fixed in hp
    assert "importance" in laser and (out / "summary.md").read_text().count("| credit/") == 2
    r = runner.invoke(
        app,
        ["run", "--dataset", "credit", "--method", "laser", "--preset", str(out / "tuned.yaml"), "--epochs", "1"]
        + ["--train-samples", "1500", "--test-missing", "none", "--quiet", "--out", str(tmp_path / "run")],
    )
    assert r.exit_code == 0, r.output
    (d,) = (tmp_path / "run").iterdir()
    m = json.loads((d / "manifest.json").read_text())
    assert m["config"]["hp"]["lr"] == pytest.approx(laser["best_params"]["lr"])
    assert m["method"]["options"]["fusion"] == laser["best_params"]["option:fusion"]
    assert m["method"]["option_sources"]["fusion"] == "preset"


@needs_mirror
def test_validation_is_carved_from_the_training_data_and_never_overlaps_the_test_data():
    from vflbench.training.pipeline import prepare

    cfg = RunConfig(dataset="credit", method="laser", protocol_options={"val_split": 0.2}, seed=1000)
    inputs = prepare(resolve(cfg), "cpu")
    plain = prepare(resolve(RunConfig(dataset="credit", method="laser", seed=1000)), "cpu")
    n_train, n_val = inputs.train.blocks.n, inputs.val.n
    assert n_train + n_val == plain.train.blocks.n and n_val == round(0.2 * plain.train.blocks.n)
    # every validation row is a training row of the plain run, and none is a test row
    train_rows = {r.tobytes() for r in plain.train.blocks.x.permute(1, 0, 2).reshape(plain.train.blocks.n, -1).numpy()}
    test_rows = {r.tobytes() for r in plain.test.x.permute(1, 0, 2).reshape(plain.test.n, -1).numpy()}
    val_rows = [r.tobytes() for r in inputs.val.x.permute(1, 0, 2).reshape(n_val, -1).numpy()]
    assert all(r in train_rows for r in val_rows)
    assert not (set(val_rows) - train_rows) and not any(r in test_rows and r not in train_rows for r in val_rows)
    assert np.array_equal(inputs.test.x.numpy(), plain.test.x.numpy())  # the test data is the same, untouched


@pytest.mark.parametrize(
    "change,args,says",
    [
        ("methods: [svfl, laser]", ["--seeds", "1"], "reporting seeds"),
        ("methods: [svfl, laser]", ["--trials", "0"], "--trials must be >= 1"),
        ("methods: [pbm]", [], "cannot be tuned"),
        ("methods: [local]", [], "empty search space"),
        ("methods: [svfl, laser]", ["--metric", "loss"], "accuracy, f1 or auprc"),
    ],
)
def test_what_cannot_be_tuned_is_refused_in_one_line(tmp_path, change, args, says):
    exp = tmp_path / "exp.yaml"
    text = EXP.replace("methods: [svfl, laser]", change)
    if "local" in change:
        text = text.replace("hp: {epochs: 1}", "hp: {epochs: 1, lr: 0.001, weight_decay: 0.0001, batch_size: 128}")
    text = text.replace("credit: {}", "synthetic: {}").replace("train_samples: 1500\n", "")
    exp.write_text(text)
    trials = [] if "--trials" in args else ["--trials", "2"]
    r = runner.invoke(app, ["tune", str(exp), *trials, *args, "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and says in r.output, r.output


STAGED = """name: tune-stages
seeds: [0]
parties: [3]
methods: [false1]
train_missing: [mcar:0.1]
test_missing: [none]
hp: {epochs: 1}
labeled: 200
aligned: 60
datasets:
  synthetic: {data_options: {n: 400}}
"""


def test_a_method_with_several_stages_is_tuned_stage_by_stage_and_its_preset_gives_the_best_trial(tmp_path):
    """FALSE-VFL trains two stages with their own recipes (batch 256 and 128 in the default preset): each stage is
    searched around its own values, one stage's never overwrite the other's, and the preset written reproduces the
    best trial's values in each stage (the experiment's fixed epochs applied again by the run)."""
    from dataclasses import replace

    from vflbench.grids.tuning import trial_config, tune

    exp = tmp_path / "exp.yaml"
    exp.write_text(STAGED)
    summary = tune(str(exp), tmp_path / "t", trials=2)
    (study,) = summary["studies"]
    best = study["best_params"]
    assert set(best) == {f"stage:{s}.{k}" for s in ("pretrain", "train") for k in ("lr", "weight_decay", "batch_size")}
    base = RunConfig(
        dataset="synthetic",
        method="false1",
        data_options={"n": 400},
        parties=3,
        train_missing="mcar:0.1",
        hp={"epochs": 1},
        settings={"labeled": 200, "aligned": 60},
    )
    plain = resolve(replace(base, hp={}))
    for st in ("pretrain", "train"):
        b = plain.stage_hp[st].batch_size
        assert study["space"][f"stage:{st}.batch_size"] == [b // 2, b, 2 * b]  # around the stage's own batch
        lo, hi = study["space"][f"stage:{st}.lr"][1:]
        assert lo == pytest.approx(plain.stage_hp[st].lr / 10) and hi == pytest.approx(plain.stage_hp[st].lr * 10)
    trial = resolve(trial_config(base, best, 1000, 0.2))
    tuned = resolve(replace(base, settings={**base.settings, "preset": str(tmp_path / "t" / "tuned.yaml")}))
    for st in ("pretrain", "train"):
        for k in ("lr", "weight_decay", "batch_size", "epochs"):
            assert getattr(tuned.stage_hp[st], k) == pytest.approx(getattr(trial.stage_hp[st], k)), (st, k)
        assert tuned.stage_hp[st].lr == pytest.approx(best[f"stage:{st}.lr"])
    assert tuned.stage_hp["pretrain"].lr != tuned.stage_hp["train"].lr  # each stage kept its own value


def _draws(study, n):
    out = []
    for _ in range(n):
        t = study.ask()
        out.append((t.number, t.suggest_float("lr", 1e-5, 1e-1, log=True), t.suggest_categorical("b", [64, 128, 256])))
        study.tell(t, -abs(np.log10(out[-1][1]) + 3))
    return out


def test_restarted_or_shared_tuners_never_draw_a_trial_again_and_one_tuner_draws_what_tpe_draws(tmp_path):
    """A plain seeded TPE sampler restarts its stream in every process: a resumed study repeated its first trials
    (a committed Credit study did), and two tuners sharing a study drew the same values."""
    optuna = pytest.importorskip("optuna")
    from vflbench.grids.tuning import trial_seeded_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 's.db'}"

    def study(name, sampler):
        return optuna.create_study(study_name=name, storage=url, sampler=sampler, load_if_exists=True)

    plain = _draws(study("plain", optuna.samplers.TPESampler(seed=0)), 12)
    one = _draws(study("one", trial_seeded_sampler(0)), 12)
    assert one == plain  # an uninterrupted tuner: the very draws of TPESampler(seed=0), startup and TPE phases

    resumed = _draws(study("resumed", trial_seeded_sampler(0)), 4) + _draws(
        study("resumed", trial_seeded_sampler(0)), 4
    )
    assert resumed[:4] == plain[:4]
    assert len({d[1:] for d in resumed}) == 8  # the restarted tuner draws new values, not trials 0-3 again
    again = _draws(study("again", trial_seeded_sampler(0)), 4) + _draws(study("again", trial_seeded_sampler(0)), 4)
    assert again == resumed  # and the same ones whoever resumes: they follow from (seed, trial number)

    a, b = study("shared", trial_seeded_sampler(0)), study("shared", trial_seeded_sampler(0))
    shared = [d for _ in range(4) for d in _draws(a, 1) + _draws(b, 1)]  # two tuners taking turns
    assert [d[0] for d in shared] == list(range(8)) and len({d[1:] for d in shared}) == 8

    stale = _draws(study("stale", optuna.samplers.TPESampler(seed=0)), 4)  # what the plain sampler did
    stale += _draws(study("stale", optuna.samplers.TPESampler(seed=0)), 4)
    assert [d[1:] for d in stale[4:]] == [d[1:] for d in stale[:4]]


@needs_mirror
def test_workers_share_one_study_draw_no_trial_twice_and_only_the_first_n_trials_decide(tmp_path):
    optuna = pytest.importorskip("optuna")
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXP.replace("methods: [svfl, laser]", "methods: [svfl]"))
    out = tmp_path / "tuned"
    args = ["tune", str(exp), "--trials", "3", "--out", str(out), "--metric", "f1"]
    r = runner.invoke(app, [*args, "--workers", "2"])
    assert r.exit_code == 0, r.output
    study = optuna.load_study(study_name="credit/svfl", storage=f"sqlite:///{out / 'tuning.db'}")
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(done) == 3  # a worker starts no trial that the others' finished and running ones make up
    assert len({tuple(sorted(t.params.items())) for t in done}) == len(done)  # two processes, no repeated draw
    # a trial finished past the budget (here: added by hand, the best value by far) never decides the preset
    best = max(done, key=lambda t: t.value)
    study.add_trial(optuna.trial.create_trial(params=best.params, distributions=best.distributions, value=1e9))
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    (st,) = json.loads((out / "summary.json").read_text())["studies"]
    first = sorted(done, key=lambda t: t.number)[:3]
    assert st["trials"] == 3 and st["beyond_budget"] == 1 and st["failed"] == 0
    assert st["best_value"] == pytest.approx(max(t.value for t in first))
    assert "not used for the preset" in (out / "summary.md").read_text()


@needs_mirror
def test_tuners_started_separately_on_one_storage_run_n_trials_and_write_the_same_preset(tmp_path, monkeypatch):
    """Two tuners on one --storage (not --workers): neither starts a trial that the other's running one makes up;
    the one that finds the rest running waits for them, so the study ends with N trials, not N + 1, and both
    tuners write the preset of the same N trials. (Tuners that counted finished trials only ran 5 here.)"""
    import threading

    optuna = pytest.importorskip("optuna")
    from vflbench.grids import tuning

    monkeypatch.setattr(tuning, "WAIT_SECONDS", 0.2)
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXP.replace("methods: [svfl, laser]", "methods: [svfl]"))
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    tuning.tune(str(exp), tmp_path / "first", 1, storage=url, metric="f1")  # the data fetched, the study made
    errors = []

    def tuner(out):
        try:
            tuning.tune(str(exp), tmp_path / out, 4, storage=url, metric="f1")
        except Exception as e:  # noqa: BLE001  (reported by the assertion below)
            errors.append(e)

    threads = [threading.Thread(target=tuner, args=(out,)) for out in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    study = optuna.load_study(study_name="credit/svfl", storage=url)
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    failed = study.get_trials(states=(optuna.trial.TrialState.FAIL,))
    assert len(done) == 4 and all(t.user_attrs.get("surplus") for t in failed), (len(done), len(failed))
    a, b = (json.loads((tmp_path / out / "summary.json").read_text())["studies"][0] for out in ("a", "b"))
    assert a["trials"] == b["trials"] == 4 and a["beyond_budget"] == b["beyond_budget"] == 0
    assert a["best_params"] == b["best_params"]
    assert (tmp_path / "a" / "tuned.yaml").read_text().split("\n", 2)[2] == (
        tmp_path / "b" / "tuned.yaml"
    ).read_text().split("\n", 2)[2]  # the same preset, below the header that names each tuner's --out


@needs_mirror
def test_a_killed_tuners_running_trial_is_failed_and_run_again_by_the_next_tuner(tmp_path):
    """A RUNNING trial whose heartbeat stopped (its tuner killed) makes no tuner wait for ever: it is failed, and
    a tuner runs one in its place, so the study still ends with N finished trials."""
    optuna = pytest.importorskip("optuna")
    from vflbench.grids import tuning

    exp = tmp_path / "exp.yaml"
    exp.write_text(EXP.replace("methods: [svfl, laser]", "methods: [svfl]"))
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    tuning.tune(str(exp), tmp_path / "first", 2, storage=url, metric="f1")
    store = tuning.open_storage(url)
    study = optuna.load_study(study_name="credit/svfl", storage=store)
    lost = study.ask()  # the trial of a tuner killed an hour ago
    store.record_heartbeat(lost._trial_id)
    with sqlite3.connect(tmp_path / "shared.db") as c:
        c.execute("update trial_heartbeats set heartbeat = datetime(heartbeat, '-1 hour')")
    tuning.tune(str(exp), tmp_path / "next", 3, storage=url, metric="f1")
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states == {0: "COMPLETE", 1: "COMPLETE", 2: "FAIL", 3: "COMPLETE"}, states


@needs_mirror
def test_the_issues_minimal_file_tunes_and_missing_data_is_one_message_with_nothing_written(
    tmp_path, monkeypatch, no_network
):
    """The experiment file of the done-when bar: methods, hp and datasets only. Its name defaults to the file's,
    its settings to `vflbench run`'s (train on complete data, test with none, 0.1 and 0.5 of the blocks missing).
    Data that is missing stops the tuner before any folder or study exists."""
    exp = tmp_path / "minimal.yaml"
    exp.write_text("methods: [svfl, laser]\nhp: {epochs: 1}\ntrain_samples: 1000\ndatasets: {credit: {}}\n")
    r = runner.invoke(app, ["tune", str(exp), "--trials", "1", "--out", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    assert sorted(_trials(tmp_path / "t" / "tuning.db").values()) == [1, 1]
    assert "minimal" in (tmp_path / "t" / "summary.md").read_text()
    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path / "empty"))
    monkeypatch.delenv("VFLBENCH_DATA_MIRROR", raising=False)
    r = runner.invoke(app, ["tune", str(exp), "--trials", "1", "--out", str(tmp_path / "u")])
    assert r.exit_code != 0 and "Dataset 'credit' is missing" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "u").exists()
