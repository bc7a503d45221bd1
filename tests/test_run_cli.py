import json

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.data.missingness import split_specs

from .conftest import needs_mirror

runner = CliRunner()


def test_split_specs_keeps_per_block_lists_together():
    assert split_specs("none,mcar:0.1,mcar:0.5") == ["none", "mcar:0.1", "mcar:0.5"]
    assert split_specs("none,mcar:0.1,0.2,0.5,0,mar1") == ["none", "mcar:0.1,0.2,0.5,0", "mar1"]


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
@needs_mirror
def test_run_credit_end_to_end_is_repeatable(tmp_path):
    args = [
        "run",
        "--dataset",
        "credit",
        "--method",
        "laser",
        "--train-missing",
        "mcar:0.1",
        "--test-missing",
        "none,mcar:0.5",
        "--seed",
        "0",
        "--epochs",
        "2",
        "--quiet",
    ]
    r1 = runner.invoke(app, args + ["--out", str(tmp_path / "a")])
    assert r1.exit_code == 0, r1.output
    r2 = runner.invoke(app, args + ["--out", str(tmp_path / "b")])
    (d1,), (d2,) = list((tmp_path / "a").iterdir()), list((tmp_path / "b").iterdir())
    assert d1.name == d2.name  # same resolved config -> same run id
    a, b = pd.read_csv(d1 / "results.csv"), pd.read_csv(d2 / "results.csv")
    assert a.equals(b)
    assert set(a["test_missing"]) == {"none", "mcar:0.5"} and {"accuracy", "f1"} <= set(a["metric"])
    assert (a["dataset"] == "credit").all() and (a["method"] == "laser").all()
    man = json.loads((d1 / "manifest.json").read_text())
    assert man["config"]["hp"]["optimizer"] == "adam" and man["config"]["hp"]["epochs"] == 2
    assert man["data"]["checksums"]["default of credit card clients.csv.gz"].startswith("0dd31d64")
    assert {"train_masks", "init", "method", "batching"} <= set(man["seeds"]["streams"])
    assert man["parameters"]["total"] == 4 * 280 + 4 * 22  # Credit MLPs 5-10-10-10 and Linear(10, 2) heads
    assert man["versions"]["torch"] and man["timings"]["train_s"] > 0
    # bit-identical repeats hold on one kind of CPU, so the manifest names it and the ISA of torch's kernels
    assert man["versions"]["cpu"] and man["versions"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert "Traceback" not in r2.output


def test_run_bad_input_exits_cleanly(tmp_path):
    for args, needle in (
        (["--method", "nosuch"], "Unknown method"),
        (["--train-missing", "mcar:2"], "outside [0, 1]"),
        (["--protocol", "weird"], "Unknown protocol"),
        (["--epochs", "0"], "epochs"),
        (["--arch", "resnet18"], "needs image data"),
    ):
        base = ["run", "--dataset", "synthetic", "--method", "laser", "--quiet", "--out", str(tmp_path)]
        r = runner.invoke(app, base + args)
        assert r.exit_code == 2, (args, r.output)
        assert needle in r.output, (args, r.output)
    assert not any(tmp_path.iterdir())  # nothing half-written


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_split_seed_can_follow_the_run_seed():
    from vflbench.runs.config import RunConfig, resolve

    r = resolve(RunConfig(dataset="credit", method="laser", seed=3, data_options={"split_seed": "run"}))
    assert r.data_options["split_seed"] == 3
    assert resolve(RunConfig(dataset="credit", method="laser", seed=3)).data_options["split_seed"] == 0
