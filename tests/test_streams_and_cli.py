import json
import subprocess
import sys

import numpy as np
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.core.rng import Streams
from vflbench.data.preparation import draw_masks, prepare

from .conftest import needs_mirror

runner = CliRunner()


def test_streams_are_independent_and_reproducible():
    a, b = Streams(0), Streams(0)
    x = a.numpy("train_masks").random(5)
    b.numpy("method").random(1000)  # a method drawing a lot must not shift the masks
    assert np.array_equal(x, b.numpy("train_masks").random(5))
    assert not np.array_equal(x, Streams(1).numpy("train_masks").random(5))
    assert not np.array_equal(Streams(0).numpy("init").random(5), x)


def test_prepare_same_seed_same_partition_and_masks():
    kw = dict(dataset="synthetic", data_options={"n": 2000}, parties=4, partitioner="random", part_options={}, seed=3)
    p1, p2 = prepare(**kw), prepare(**kw)
    p2.streams.torch("method").seed()  # consume other streams
    p2.streams.numpy("method").random(77)
    assert p1.partition.describe() == p2.partition.describe()
    m1, m2 = draw_masks(p1, "mcar:0.5"), draw_masks(p2, "mcar:0.5")
    assert np.array_equal(m1.observed, m2.observed)
    t1 = draw_masks(p1, "mcar:0.5", split="test")
    assert not np.array_equal(t1.observed, m1.observed[: len(t1.observed)])
    p3 = prepare(**{**kw, "seed": 4})
    assert not np.array_equal(draw_masks(p3, "mcar:0.5").observed, m1.observed)


@needs_mirror
def test_cli_datasets_json_reports_offline_sets():
    r = runner.invoke(app, ["datasets", "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = {d["name"]: d for d in json.loads(r.stdout)}
    for name in ("credit", "isolet", "phishing", "fashion-mnist", "digits", "synthetic"):
        assert rows[name]["available"], name
    assert rows["credit"]["shape"] == [23] and rows["credit"]["classes"] == 2


@needs_mirror
def test_cli_masks_credit_mcar_half():
    r = runner.invoke(
        app, ["masks", "--dataset", "credit", "--parties", "4", "--missing", "mcar:0.5", "--format", "json"]
    )
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["n"] == 24000
    assert all(abs(x - 0.5) < 0.02 for x in s["observed_rate_per_block"])
    assert abs(s["fully_observed_fraction"] - 0.0625) < 0.008
    assert s["partition"]["widths"] == [5, 5, 5, 5]


def test_cli_masks_batch_and_reserve_on_synthetic():
    r = runner.invoke(
        app,
        [
            "masks",
            "--dataset",
            "synthetic",
            "--missing",
            "mcar:0.5",
            "--granularity",
            "batch",
            "--batch-size",
            "100",
            "--format",
            "json",
        ],
    )
    s = json.loads(r.stdout)
    assert s["info"]["granularity"] == "batch"
    r = runner.invoke(
        app,
        [
            "masks",
            "--dataset",
            "synthetic",
            "--missing",
            "mcar:0.9",
            "--labeled",
            "500",
            "--aligned",
            "100",
            "--format",
            "json",
        ],
    )
    s = json.loads(r.stdout)
    assert s["fully_observed_fraction"] >= 100 / 3000


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "vflbench", *args], capture_output=True, text=True)


def test_cli_bad_input_is_one_line_and_nonzero():
    p = _cli("masks", "--dataset", "nosuch")  # a real process: its exit status and stderr
    assert p.returncode == 2, p.stderr
    assert "Unknown dataset 'nosuch'" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) <= 3  # one message (rich may wrap it)
    from typer.testing import CliRunner

    from vflbench.cli import app

    for args, needle in (  # the same handler in this process
        (["masks", "--dataset", "synthetic", "--missing", "mcar:1.5"], "outside [0, 1]"),
        (["masks", "--dataset", "synthetic", "--partitioner", "tiles"], "needs image data"),
        (["masks", "--dataset", "synthetic", "--data-opt", "n"], "key=value"),
    ):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert needle in r.output and "Traceback" not in r.output
        assert len(r.output.strip().splitlines()) <= 3
