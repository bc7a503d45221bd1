"""Early stopping on validation for a user's table (issue "suite", item 5): which runs get it, and that a run that
stops early equals the same run trained for the epoch count validation picked (an independent oracle: a second run
with that fixed count and the same held-out rows, bit for bit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.core.errors import VFLBenchError
from vflbench.runs.config import RunConfig, resolve

runner = CliRunner()


def _table(tmp_path, n=900, seed=0):
    """A binary table of eight numeric columns, learnable from four of them, with label noise (so validation peaks)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8))
    logit = x[:, 0] - x[:, 2] + 0.5 * x[:, 4] * x[:, 6]
    y = (logit + rng.normal(scale=1.5, size=n) > 0).astype(int)
    df = pd.DataFrame(x, columns=[f"f{i}" for i in range(8)])
    df["label"] = y
    path = tmp_path / "table.csv"
    df.to_csv(path, index=False)
    return f"csv:{path}"


def test_a_users_table_stops_early_and_a_papers_table_keeps_its_preset(tmp_path):
    """The preset's user_table block: 100 epochs at most, patience 10, validation on 0.1 of the training rows; the
    papers' tables (Credit) keep their fixed epochs and hold nothing out; trees, --epochs N and an earlier stage
    take no patience; a stage-specific patience before the last stage and early stopping across processes are
    refused in one line."""
    ds = _table(tmp_path)

    def req(method="laser", **kw):
        return resolve(RunConfig(dataset=ds, data_options={"target": "label"}, method=method, test_missing=["none"],
                                 **kw))  # fmt: skip

    r = req()
    assert (r.hp.epochs, r.hp.patience, r.protocol.val_split) == (100, 10, 0.1)
    pbm = req("pbm")
    assert (pbm.hp.optimizer, pbm.hp.epochs, pbm.hp.patience) == ("sgd", 100, 10)
    paper = resolve(RunConfig(dataset="credit", method="laser", test_missing=["none"]))
    assert (paper.hp.epochs, paper.hp.patience, paper.protocol.val_split) == (100, 0, 0.0)
    assert "patience" not in paper.hp.as_dict()  # a run without early stopping keys as before it existed
    fixed = req(hp={"epochs": 7})
    assert (fixed.hp.epochs, fixed.hp.patience, fixed.protocol.val_split) == (7, 0, 0.0)
    trees = req("gbdt")
    assert trees.hp.patience == 0 and trees.protocol.val_split == 0.0
    two = req("fedhssl")
    first = list(two.stage_hp)[0]
    assert [h.patience for h in two.stage_hp.values()] == [0] * (len(two.stage_hp) - 1) + [10]
    for kw, words in [
        (dict(method="fedhssl", stage_hp={first: {"patience": 3}}), "applies to the last stage"),
        (dict(method="svfl", settings={"runtime": "processes"}), "runs in one process"),
        (dict(method="svfl", hp={"epochs": 5, "patience": 6}), "patience must be in"),
    ]:
        with pytest.raises(VFLBenchError, match=words):
            req(**kw)


def _rows(out):
    (run,) = [p for p in (out / "runs").iterdir()] if (out / "runs").exists() else [p for p in out.iterdir()]
    return pd.read_csv(run / "results.csv")


@pytest.mark.parametrize("method,train", [("svfl", "none"), ("laser", "mcar:0.5")])
def test_a_run_that_stops_early_is_the_run_trained_for_the_epoch_validation_picked(tmp_path, method, train):
    """Trained with patience 3 (at most 40 epochs), the run stops 3 epochs after its best validation epoch and keeps
    that epoch's model: its test numbers equal, bit for bit, those of a second run trained for exactly that many
    epochs with the same validation rows held out and no early stopping."""
    ds = _table(tmp_path)
    common = ["--dataset", ds, "--data-opt", "target=label", "--method", method, "--parties", "4",
              "--train-missing", train, "--test-missing", "none,mcar:0.5", "--lr", "0.01"]  # fmt: skip
    r = runner.invoke(app, ["run", *common, "--epochs", "40", "--hp", "patience=3", "--out", str(tmp_path / "es")])
    assert r.exit_code == 0, r.output
    es = _rows(tmp_path / "es")
    best, trained = int(es.best_epoch.iloc[0]), int(es.epochs_trained.iloc[0])
    assert es.early_stop_metric.iloc[0] == "val_auprc" and es.protocol_options.iloc[0] == "val_split=0.1"
    assert 1 <= best < 40 and trained == min(best + 3, 40) and trained < 40, (best, trained)
    r = runner.invoke(app, ["run", *common, "--epochs", str(best), "--protocol-opt", "val_split=0.1",
                            "--out", str(tmp_path / "fixed")])  # fmt: skip
    assert r.exit_code == 0, r.output
    fixed = _rows(tmp_path / "fixed")
    key = ["test_missing", "metric"]
    a, b = es.set_index(key)["value"].sort_index(), fixed.set_index(key)["value"].sort_index()
    assert len(a) == 12 and (a == b).all(), pd.concat([a, b], axis=1).to_string()  # test and val_ metrics, 2 settings
