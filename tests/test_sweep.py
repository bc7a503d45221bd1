import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.grids.experiment import load_experiment

runner = CliRunner()

TINY = {
    "name": "tiny",
    "layout": "generic",
    "protocol": "clean",
    "seeds": [0, 1],
    "parties": [4],
    "methods": ["local", "laser"],
    "train_missing": ["mcar:0.1"],
    "test_missing": ["none", "mcar:0.5"],
    "hp": {"epochs": 2},
    "datasets": {"synthetic": {"data_options": {"n": 1200}}},
}


def write(tmp_path, spec, name="exp.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(spec) if not isinstance(spec, str) else spec)
    return p


def test_grid_expansion_and_quick(tmp_path):
    exp = load_experiment(write(tmp_path, TINY))
    assert len(exp.runs) == 4 and {r.seed for r in exp.runs} == {0, 1}
    q = load_experiment(write(tmp_path, {**TINY, "quick": {"epochs": 1}}), quick=True)
    assert len(q.runs) == 2 and all(r.hp["epochs"] == 1 for r in q.runs)


@pytest.mark.parametrize(
    "text,needle",
    [
        ("name: x\nmethods: [laser\n", "malformed YAML (line"),
        (yaml.safe_dump({**TINY, "bogus": 1}), "unknown key(s) bogus"),
        (yaml.safe_dump({**TINY, "methods": ["laserr"]}), "unknown method 'laserr'"),
        (yaml.safe_dump({**TINY, "datasets": {"nope": {}}}), "unknown dataset 'nope'"),
        (yaml.safe_dump({**TINY, "train_missing": ["mcar:3"]}), "outside [0, 1]"),
        (yaml.safe_dump({**TINY, "seeds": ["a"]}), "'seeds' entries must be int"),
        (yaml.safe_dump({**TINY, "datasets": {"synthetic": {"epochs": 3}}}), "datasets.synthetic: unknown key"),
        ("- just\n- a list\n", "must be a YAML mapping"),
    ],
)
def test_yaml_validation_errors_are_clear(tmp_path, text, needle):
    r = runner.invoke(app, ["sweep", str(write(tmp_path, text)), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_missing_experiment_file(tmp_path):
    r = runner.invoke(app, ["sweep", str(tmp_path / "none.yaml")])
    assert r.exit_code == 2 and "does not exist" in r.output


def _rows_per_run(df):
    return df.groupby("run_id").size()


@pytest.mark.integration  # `make test-slow` (an end-to-end check: real processes, sweeps or image models; CI runs it)
def test_sweep_resumes_after_sigkill_without_loss_or_duplicates(tmp_path):
    spec = {**TINY, "seeds": [0, 1, 2], "methods": ["local", "svfl", "laser"], "hp": {"epochs": 4}}
    exp = write(tmp_path, spec)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "vflbench", "sweep", str(exp), "--out", str(out), "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        done = list((out / "runs").glob("*/manifest.json")) if (out / "runs").exists() else []
        if len(done) >= 2:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-sweep, possibly mid-run or mid-write
    proc.wait()
    n_before = len(list((out / "runs").glob("*/manifest.json")))
    assert 2 <= n_before < 9, n_before
    # the resume and a third invocation: the same command, in this process (the killed one was a real process)
    r = runner.invoke(app, cmd[3:])
    assert r.exit_code == 0, r.output
    assert f"{n_before} already finished" in r.output.replace("\n", " ")
    df = pd.read_csv(out / "results.csv")
    assert df["run_id"].nunique() == 9
    per_run = _rows_per_run(df)
    assert (per_run == per_run.iloc[0]).all()  # exactly one row set per run
    assert not df.duplicated(subset=["run_id", "test_missing", "metric"]).any()
    # a third invocation runs nothing and leaves the same table
    r = runner.invoke(app, cmd[3:])
    assert "0 to run" in r.output.replace("\n", " ")
    assert pd.read_csv(out / "results.csv").equals(df)


@pytest.mark.integration  # `make test-slow` (an end-to-end check: real processes, sweeps or image models; CI runs it)
def test_parallel_workers_match_serial(tmp_path):
    exp = write(tmp_path, TINY)
    for w in ("1", "2"):
        r = runner.invoke(app, ["sweep", str(exp), "--out", str(tmp_path / f"w{w}"), "--workers", w])
        assert r.exit_code == 0, r.output
    a = (
        pd.read_csv(tmp_path / "w1" / "results.csv")
        .sort_values(["run_id", "test_missing", "metric"])
        .reset_index(drop=True)
    )
    b = (
        pd.read_csv(tmp_path / "w2" / "results.csv")
        .sort_values(["run_id", "test_missing", "metric"])
        .reset_index(drop=True)
    )
    pd.testing.assert_frame_equal(a, b)  # same seeds, same numbers, whatever the parallelism


@pytest.mark.integration  # `make test-slow` (Ray's start-up alone is most of a minute on two cores)
def test_ray_executor_tiny_sweep(tmp_path):
    ray = pytest.importorskip("ray")
    exp = write(tmp_path, {**TINY, "seeds": [0]})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        r = runner.invoke(app, ["sweep", str(exp), "--out", str(tmp_path / "ray"), "--executor", "ray"])
    finally:
        ray.shutdown()
    assert r.exit_code == 0, r.output
    df = pd.read_csv(tmp_path / "ray" / "results.csv")
    assert df["run_id"].nunique() == 2
    serial = tmp_path / "serial"
    runner.invoke(app, ["sweep", str(exp), "--out", str(serial)])
    s = pd.read_csv(serial / "results.csv")
    assert sorted(df["value"].round(10)) == sorted(s["value"].round(10))


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_unavailable_dataset_is_skipped_with_a_note(tmp_path, monkeypatch):
    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path / "empty"))
    spec = {
        **TINY,
        "seeds": [0],
        "methods": ["local"],
        "datasets": {"synthetic": {"data_options": {"n": 600}}, "hapt": {}},
    }
    r = runner.invoke(app, ["sweep", str(write(tmp_path, spec)), "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "skipping hapt" in r.output and "vflbench data fetch hapt" in r.output
    assert Path(tmp_path / "o" / "results.csv").exists()


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_sweep_json_keeps_earlier_invocations(tmp_path):
    import json

    exp = write(tmp_path, {**TINY, "seeds": [0], "methods": ["local"]})
    out = tmp_path / "o"
    for _ in range(2):
        assert runner.invoke(app, ["sweep", str(exp), "--out", str(out)]).exit_code == 0
    inv = json.loads((out / "sweep.json").read_text())["invocations"]
    assert [i["runs_executed"] for i in inv] == [1, 0]  # the run that did the work stays on record


def test_threads_default_to_one_for_tabular_runs_and_follow_threads_and_the_worker_share(monkeypatch):
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.pipeline import intra_op_threads

    tab = resolve(RunConfig(dataset="synthetic", method="svfl"))
    img = resolve(RunConfig(dataset="digits", method="svfl"))
    monkeypatch.delenv("VFLBENCH_THREADS", raising=False)
    monkeypatch.setenv("VFLBENCH_WORKER_THREADS", "3")
    assert intra_op_threads(tab) == 1  # tabular steps are too small to split
    assert intra_op_threads(img) == 3  # image runs take their worker's share of the cores
    monkeypatch.setenv("VFLBENCH_THREADS", "2")  # --threads wins for both
    assert intra_op_threads(tab) == 2 and intra_op_threads(img) == 2


def test_a_tabular_run_with_a_large_step_takes_the_worker_share(monkeypatch):
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.pipeline import LARGE_STEP, intra_op_threads

    tab = resolve(RunConfig(dataset="synthetic", method="svfl"))
    monkeypatch.delenv("VFLBENCH_THREADS", raising=False)
    monkeypatch.setenv("VFLBENCH_WORKER_THREADS", "2")
    assert intra_op_threads(tab, LARGE_STEP - 1) == 1
    assert intra_op_threads(tab, LARGE_STEP) == 2  # e.g. Combinatorial at K = 8, FALSE-VFL's importance samples
    monkeypatch.setenv("VFLBENCH_WORKER_THREADS", "1")
    assert intra_op_threads(tab, LARGE_STEP) == 1  # never more than the worker's share


def test_run_records_the_threads_it_used(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("VFLBENCH_THREADS", "")  # restored after the test: --threads sets it for the process

    from typer.testing import CliRunner

    from vflbench.cli import app

    r = CliRunner().invoke(
        app,
        [
            "run",
            "--dataset",
            "synthetic",
            "--method",
            "local",
            "--epochs",
            "1",
            "--quiet",
            "--data-opt",
            "n=200",
            "--test-missing",
            "none",
            "--threads",
            "2",
            "--out",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.output
    manifest = json.loads(next(tmp_path.rglob("manifest.json")).read_text())
    assert manifest["threads"] == 2
    bad = CliRunner().invoke(app, ["run", "--dataset", "synthetic", "--method", "local", "--threads", "0"])
    assert bad.exit_code == 2 and "--threads must be >= 1" in bad.output


def test_sweep_runs_a_subset_of_the_training_settings(tmp_path):
    exp = write(tmp_path, yaml.safe_dump({**TINY, "train_missing": ["none", "mcar:0.1", "mcar:0.5"]}))
    r = runner.invoke(
        app, ["sweep", str(exp), "--train-missing", "mcar:0.5,none", "--dry-run", "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 0, r.output
    assert "train=mcar:0.5" in r.output and "train=none" in r.output and "train=mcar:0.1" not in r.output
    bad = runner.invoke(app, ["sweep", str(exp), "--train-missing", "mar1", "--dry-run"])
    assert bad.exit_code == 2 and "--train-missing mar1 not in this experiment" in bad.output


def test_merged_results_keep_text_columns_as_text(tmp_path):
    """A protocol named "false" stays the string "false" when run CSVs are merged (pandas reads a
    column of true/false words as booleans)."""
    import pandas as pd

    from vflbench.results.outputs import read_results_csv

    p = tmp_path / "results.csv"
    pd.DataFrame(
        {
            "run_id": ["a", "b"],
            "protocol": ["false", "false"],
            "test_missing": ["none", "mcar:0.5"],
            "value": [1.0, 2.0],
        }
    ).to_csv(p, index=False)
    df = read_results_csv(p)
    assert df["protocol"].tolist() == ["false", "false"] and df["test_missing"].tolist() == ["none", "mcar:0.5"]
    assert pd.read_csv(p)["protocol"].dtype == bool  # what plain read_csv did


def test_epochs_column_counts_every_stage():
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.pipeline import row

    run = resolve(
        RunConfig(
            dataset="synthetic",
            method="false1",
            parties=3,
            data_options={"n": 300},
            settings={"labeled": 100, "aligned": 20},
            stage_hp={"pretrain": {"epochs": 4}, "train": {"epochs": 7}},
        )
    )
    r = row(run, "none", "accuracy", 50.0, {"n_counted": 1, "n_test": 1}, {})
    assert r["epochs"] == 11 and r["stage_epochs"] == "pretrain:4;train:7"
    single = resolve(
        RunConfig(dataset="synthetic", method="svfl", parties=3, data_options={"n": 300}, hp={"epochs": 5})
    )
    assert row(single, "none", "accuracy", 50.0, {"n_counted": 1, "n_test": 1}, {})["epochs"] == 5


def test_partitioners_and_their_options_sweep_like_any_axis():
    from vflbench.grids.experiment import build_experiment

    exp = build_experiment(
        {
            "name": "p",
            "methods": ["local"],
            "partitioner": ["contiguous", "correlation"],
            "partition_options": {"correlation": {"beta": [0.2, 0.8]}},
            "train_missing": ["none"],
            "test_missing": ["none"],
            "datasets": {"synthetic": {"data_options": {"n": 200}}},
        }
    )
    assert [(r.partitioner, r.partition_options) for r in exp.runs] == [
        ("contiguous", {}),
        ("correlation", {"beta": 0.2}),
        ("correlation", {"beta": 0.8}),
    ]


def test_a_lost_ray_node_is_one_line_naming_the_retried_runs(tmp_path):
    from vflbench.grids.sweep import lost_node_lines

    before = {"a" * 40: "10.0.0.1", "b" * 40: "10.0.0.2"}
    marks = [f"run1@{'a' * 40}@11", f"run2@{'b' * 40}@12", f"run2@{'a' * 40}@13", f"run3@{'a' * 40}@14"]
    lines = lost_node_lines(before, {"a" * 40}, marks, tmp_path / "driver.log")
    assert len(lines) == 1
    assert "bbbbbbbbbbbb (10.0.0.2) was lost" in lines[0] and "retried on other nodes: run2" in lines[0]
    assert "run1" not in lines[0] and "run3" not in lines[0]
    marks.append(f"run4@{'b' * 40}@12")  # a run that finished on the node before it was lost
    assert (
        "retried on other nodes: run2; finished there before: run4"
        in lost_node_lines(before, {"a" * 40}, marks, tmp_path / "driver.log")[0]
    )
    assert lost_node_lines(before, set(before), marks, tmp_path / "driver.log") == []


def test_ray_output_goes_to_the_sweep_folder(tmp_path):
    """Ray's error thread prints through ray._private.worker.print_to_stdstream: the sweep sends it to a file."""
    ray = pytest.importorskip("ray")
    from vflbench.grids.sweep import quiet_ray

    saved = ray._private.worker.print_to_stdstream
    try:
        quiet_ray(ray, tmp_path / "driver.log")
        ray._private.worker.print_to_stdstream({"lines": ["node died", "state dump"], "pid": "raylet"}, False)
    finally:
        ray._private.worker.print_to_stdstream = saved
    assert (tmp_path / "driver.log").read_text() == "(raylet) node died\n(raylet) state dump\n"
