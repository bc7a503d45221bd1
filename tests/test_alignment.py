"""Entity alignment (vflbench.data.alignment): three parties bring their own files with overlapping IDs.
The samples are the labelled IDs; a block whose party lacks the ID is missing. PSI and plain
intersection agree, the manifest records the intersection sizes, and a run across processes (each
party reading only its own file, the server only the labels) equals the in-process run on the joined
table with the same mask."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.core.errors import VFLBenchError
from vflbench.data.alignment import intersect, load_aligned, parse_party_data

runner = CliRunner()


@pytest.fixture
def party_files(tmp_path):
    rng = np.random.default_rng(0)
    n = 600
    ids = np.array([f"u{i:04d}" for i in range(n)])
    x = rng.normal(size=(n, 8))
    y = x[:, 0] + x[:, 3] - x[:, 6] + 0.5 * rng.normal(size=n) > 0
    a = pd.DataFrame({"ID": ids, "a1": x[:, 0], "a2": x[:, 1], "label": np.where(y, "yes", "no")})
    a = a[rng.random(n) < 0.95]  # 5% of the IDs have no label: not samples
    keep_b, keep_c = rng.random(n) < 0.8, rng.random(n) < 0.7
    b = pd.concat(
        [
            pd.DataFrame({"ID": ids, "b1": x[:, 3], "b2": x[:, 4]})[keep_b],
            pd.DataFrame({"ID": [f"only-b{i}" for i in range(25)], "b1": 0.0, "b2": 1.0}),
        ]
    )  # IDs no label file has
    c = pd.DataFrame({"ID": ids, "c1": x[:, 6], "color": np.array(["red", "green", "blue"])[rng.integers(0, 3, n)]})[
        keep_c
    ]
    paths = {}
    for name, df, seed in (("a", a, 1), ("b", b, 2), ("c", c, 3)):
        paths[name] = tmp_path / f"{name}.csv"
        df.sample(frac=1, random_state=seed).to_csv(paths[name], index=False)  # rows in any order
    truth = {"samples": set(a["ID"]), "b": set(b["ID"]), "c": set(c["ID"])}
    spec = f"party0={paths['a']},party1={paths['b']},party2={paths['c']}"
    return spec, truth


def _one(out):
    (d,) = [p for p in out.iterdir() if p.is_dir()]
    return pd.read_csv(d / "results.csv"), json.loads((d / "manifest.json").read_text())


def test_psi_and_plain_find_the_same_intersection():
    label = [f"id{i}" for i in range(50)]
    party = [f"id{i}" for i in range(0, 80, 3)] + ["stranger"]
    psi, plain = intersect(label, party, "psi"), intersect(label, party, "plain")
    assert np.array_equal(psi, plain) and psi.sum() == len(range(0, 50, 3))


def test_the_aligned_dataset_holds_each_partys_rows_and_the_alignment_mask(party_files):
    spec, truth = party_files
    opts = {"id": "ID", "target": "label", "align": "psi", "test_size": 0.2, "split_seed": 0, "scaler": "standard"}
    ds = load_aligned(f"aligned:{spec}", opts)
    al = ds.preprocessing["alignment"]
    samples = truth["samples"]
    assert al["samples"] == len(samples) and al["private"]
    assert al["held_per_party"] == {
        "party0": len(samples),
        "party1": len(samples & truth["b"]),
        "party2": len(samples & truth["c"]),
    }
    assert al["held_by_all"] == len(samples & truth["b"] & truth["c"])
    held = np.concatenate([ds.structural["train"], ds.structural["test"]])
    assert held[:, 1].sum() == len(samples & truth["b"]) and held[:, 0].all()
    assert ds.party_widths == [2, 2, 4]  # a1 a2 | b1 b2 | c1 + color one-hot (3)
    plain = load_aligned(f"aligned:{spec}", {**opts, "align": "plain"})
    assert np.array_equal(plain.x_train, ds.x_train) and np.array_equal(plain.y_train, ds.y_train)


def test_the_aligned_dataset_is_the_joined_table_as_the_table_loader_encodes_it(party_files, tmp_path):
    from vflbench.data.datasets.table import DEFAULTS, load_table_dataset

    spec, _ = party_files
    files = dict(parse_party_data(spec))
    frames = [pd.read_csv(files[p]) for p in ("party0", "party1", "party2")]
    joined = frames[0]
    for f in frames[1:]:
        joined = joined.merge(f, on="ID", how="left")  # the labelled IDs, each party's columns where it holds the ID
    joined = joined.sort_values("ID")
    joined = joined[["ID", "a1", "a2", "b1", "b2", "c1", "color", "label"]]
    joined.to_csv(tmp_path / "joined.csv", index=False)
    table = load_table_dataset(f"csv:{tmp_path / 'joined.csv'}", {**DEFAULTS, "target": "label", "drop": "ID"})
    ds = load_aligned(
        f"aligned:{spec}",
        {"id": "ID", "target": "label", "align": "plain", "test_size": 0.2, "split_seed": 0, "scaler": "standard"},
    )
    assert np.array_equal(table.y_train, ds.y_train) and np.array_equal(table.y_test, ds.y_test)
    assert np.array_equal(table.x_train.astype(np.float32), ds.x_train) and np.array_equal(
        table.x_test.astype(np.float32), ds.x_test
    )


def test_bad_party_data_is_refused_in_one_line(party_files, tmp_path):
    spec, _ = party_files
    with pytest.raises(VFLBenchError, match="name=path"):
        parse_party_data("a.csv,b.csv")
    r = runner.invoke(
        app,
        [
            "run",
            "--party-data",
            spec,
            "--id-column",
            "NOPE",
            "--data-opt",
            "target=label",
            "--parties",
            "3",
            "--method",
            "laser",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 2 and "ID column 'NOPE'" in r.output
    r = runner.invoke(
        app,
        [
            "run",
            "--party-data",
            spec,
            "--id-column",
            "ID",
            "--data-opt",
            "target=label",
            "--parties",
            "4",
            "--method",
            "laser",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 2 and "--parties 4 conflicts with --party-data, which names 3 party files" in r.output


def test_zero_padded_ids_are_not_joined_to_unpadded_ones_and_the_difference_is_warned(tmp_path):
    """'001000' and '1000' are different entities as text: no join, and one warning with an example."""
    a = pd.DataFrame({"ID": [str(1000 + i) for i in range(40)], "x": np.arange(40.0), "label": ["p", "q"] * 20})
    b = pd.DataFrame({"ID": [f"{1000 + i:06d}" for i in range(40)], "z": np.arange(40.0)})  # 001000, 001001, ...
    c = pd.DataFrame({"ID": [str(1000 + i) for i in range(40)], "w": np.arange(40.0)})
    for n, df in (("a", a), ("b", b), ("c", c)):
        df.to_csv(tmp_path / f"{n}.csv", index=False)
    assert (tmp_path / "b.csv").read_text().splitlines()[1].startswith("001000")
    opts = {"id": "ID", "target": "label", "align": "plain", "test_size": 0.25, "split_seed": 0, "scaler": "standard"}
    spec = f"aligned:party0={tmp_path / 'a.csv'},party1={tmp_path / 'b.csv'},party2={tmp_path / 'c.csv'}"
    with pytest.warns(UserWarning, match="'001000' in .*b.csv would be '1000'"):
        ds = load_aligned(spec, opts)
    al = ds.preprocessing["alignment"]
    assert al["held_per_party"] == {"party0": 40, "party1": 0, "party2": 40} and al["held_by_all"] == 0
    assert (
        load_aligned(spec, {**opts, "align": "psi"}).preprocessing["alignment"]["held_per_party"]["party1"] == 0
    )  # PSI joins text too


def test_a_party_that_holds_nothing_is_warned_about_and_the_rows_say_it_is_absent(tmp_path):
    a = pd.DataFrame(
        {"ID": [f"u{i}" for i in range(200)], "x": np.random.default_rng(0).normal(size=200), "label": ["p", "q"] * 100}
    )
    b = pd.DataFrame({"ID": [f"v{i}" for i in range(200)], "z": np.arange(200.0)})  # no ID in common
    c = pd.DataFrame({"ID": [f"u{i}" for i in range(200)], "w": np.arange(200.0)})
    for n, df in (("a", a), ("b", b), ("c", c)):
        df.to_csv(tmp_path / f"{n}.csv", index=False)
    spec = f"party0={tmp_path / 'a.csv'},party1={tmp_path / 'b.csv'},party2={tmp_path / 'c.csv'}"
    with pytest.warns(
        UserWarning, match="party1 holds none of the 200 samples"
    ):  # (pytest takes the warning the CLI prints as one line)
        r = runner.invoke(
            app,
            [
                "run",
                "--party-data",
                spec,
                "--id-column",
                "ID",
                "--data-opt",
                "target=label",
                "--method",
                "laser",
                "--epochs",
                "1",
                "--align",
                "plain",
                "--test-missing",
                "none",
                "--out",
                str(tmp_path / "o"),
            ],
        )  # no --parties: three files, three parties
    assert r.exit_code == 0, r.output
    assert "party1 holds 0 of 200 samples" in r.output and "party0 holds 200 of 200" in r.output
    rows, man = _one(tmp_path / "o")
    assert set(rows["parties_absent"]) == {"party1"} and man["config"]["parties"] == 3
    assert man["masks"]["test/none"]["observed_rate_per_block"][1] == 0.0


def test_the_party_count_comes_from_the_files():
    from vflbench.runs.settings import request

    spec = "party0=a.csv,party1=b.csv,party2=c.csv"
    assert request({"party_data": spec, "method": "laser"})["settings"]["parties"] == 3
    assert request({"party_data": spec, "method": "laser", "parties": "3"})["settings"]["parties"] == 3
    with pytest.raises(VFLBenchError, match="conflicts"):
        request({"party_data": spec, "method": "laser", "parties": "4"})


def _plain_in_one_process_and_psi_across_processes(flags: list[str], tmp_path):
    """(rows, manifest) of the run in one process with plain alignment, then across processes (PSI, the default)."""
    a = runner.invoke(app, ["run", *flags, "--align", "plain", "--out", str(tmp_path / "in")])
    assert a.exit_code == 0, a.output
    b = runner.invoke(app, ["run", *flags, "--runtime", "processes", "--out", str(tmp_path / "pr")])
    assert b.exit_code == 0, b.output
    return _one(tmp_path / "in"), _one(tmp_path / "pr")


@pytest.mark.integration  # `make test-slow`: PSI between party processes
def test_psi_alignment_across_processes_equals_the_joined_table_in_one_process(party_files, tmp_path):
    spec, truth = party_files
    flags = [
        "--party-data",
        spec,
        "--id-column",
        "ID",
        "--data-opt",
        "target=label",
        "--parties",
        "3",
        "--method",
        "laser",
        "--epochs",
        "3",
        "--seed",
        "0",
        "--train-missing",
        "mcar:0.2",
        "--quiet",
    ]
    (ra, ma), (rb, mb) = _plain_in_one_process_and_psi_across_processes(flags, tmp_path)
    assert ra["value"].tolist() == rb["value"].tolist() and ma["history"]["loss"] == mb["history"]["loss"]
    assert ma["masks"]["train"]["observed_rate_per_block"] == mb["masks"]["train"]["observed_rate_per_block"]
    assert mb["alignment"]["method"] == "psi" and ma["alignment"]["method"] == "plain"
    assert {k: v for k, v in ma["alignment"].items() if k not in ("method", "private")} == {
        k: v for k, v in mb["alignment"].items() if k not in ("method", "private")
    }
    assert mb["alignment"]["held_per_party"]["party2"] == len(truth["samples"] & truth["c"])
    assert mb["runtime"]["measured_equals_accounted"]


@pytest.mark.integration  # `make test-slow`: PSI between party processes, blocks present but wrong
def test_wrong_blocks_after_psi_across_processes_are_those_of_one_process(party_files, tmp_path):
    """Blocks are made wrong where the parties are aligned: after the intersection (PSI across processes, plain in
    one process) every process draws the same corrupted and misaligned rows, so the rows and the masks' records
    agree."""
    spec, _ = party_files
    flags = ["--party-data", spec, "--id-column", "ID", "--data-opt", "target=label", "--parties", "3", "--method",
             "laser", "--epochs", "2", "--seed", "0", "--train-corrupt", "gauss:0.2:3", "--train-misalign",
             "near:0.1", "--test-corrupt", "none,stuck:0.3", "--test-misalign", "permute:0.3", "--quiet"]  # fmt: skip
    (ra, ma), (rb, mb) = _plain_in_one_process_and_psi_across_processes(flags, tmp_path)
    assert ra["value"].tolist() == rb["value"].tolist() and ma["history"]["loss"] == mb["history"]["loss"]
    assert set(ra["test_misalign"]) == {"permute:0.3"} and set(ra["test_corrupt"]) == {"none", "stuck:0.3"}
    for key, rec in ma["masks"].items():
        for rate in ("corrupted_rate_per_block", "misaligned_rate_per_block"):
            assert rec.get(rate) == mb["masks"][key].get(rate), (key, rate)
    assert ma["masks"]["train"]["misaligned_rate_per_block"][1:] == [0.1, 0.1]


def test_inspect_reports_each_party_file_and_the_intersection_before_training(party_files):
    spec, truth = party_files
    r = runner.invoke(
        app, ["inspect", "--party-data", spec, "--id-column", "ID", "--data-opt", "target=label", "--format", "json"]
    )
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["computed"].startswith("in the clear, locally")
    rows = {p["party"]: p for p in rep["parties"]}
    assert rows["party1"]["rows"] == len(truth["b"]) and rows["party1"]["holds_samples"] == len(
        truth["samples"] & truth["b"]
    )
    assert [p["encoded_width"] for p in rep["parties"]] == [2, 2, 4] and rep["intersection"]["samples"] == len(
        truth["samples"]
    )
    r = runner.invoke(app, ["inspect", "--party-data", spec, "--id-column", "ID"])
    assert r.exit_code == 2 and "target=COLUMN" in r.output
    r = runner.invoke(app, ["inspect", "credit", "--party-data", spec])
    assert r.exit_code == 2 and "not both" in r.output


@pytest.mark.integration  # `make test-slow`: PSI between party processes
def test_psi_alignment_and_a_lost_party_across_processes_equal_one_process(party_files, tmp_path):
    spec, _ = party_files
    flags = ["--party-data", spec, "--id-column", "ID", "--data-opt", "target=label", "--method", "laser"]
    flags += ["--epochs", "3", "--seed", "0", "--train-missing", "mcar:0.2", "--quiet", "--fail-party", "2@2"]
    (ra, ma), (rb, mb) = _plain_in_one_process_and_psi_across_processes(flags, tmp_path)
    assert ra["value"].tolist() == rb["value"].tolist() and ma["history"]["loss"] == mb["history"]["loss"]
    assert mb["alignment"]["method"] == "psi" and set(rb["parties_lost"]) == {"2@2"}
    assert ma["party_losses"] == mb["party_losses"]


@pytest.fixture
def categorical_party_files(tmp_path):
    """Three party files; party 2 holds a 300-level merchant ID (embedded: over embed_above) that carries signal."""
    rng = np.random.default_rng(5)
    n = 900
    ids = np.array([f"u{i:04d}" for i in range(n)])
    merchant = rng.integers(0, 300, n)
    effect = rng.normal(size=300)
    x = rng.normal(size=(n, 3))
    y = x[:, 0] + effect[merchant] + 0.3 * rng.normal(size=n) > 0
    a = pd.DataFrame({"ID": ids, "a1": x[:, 0], "label": np.where(y, "yes", "no")})
    b = pd.DataFrame({"ID": ids, "b1": x[:, 1]})[rng.random(n) < 0.85]
    c = pd.DataFrame({"ID": ids, "c1": x[:, 2], "merchant": np.char.add("m", merchant.astype(str))})
    c = c[rng.random(n) < 0.9]
    paths = {}
    for name, df in (("a", a), ("b", b), ("c", c)):
        paths[name] = tmp_path / f"{name}.csv"
        df.to_csv(paths[name], index=False)
    return f"party0={paths['a']},party1={paths['b']},party2={paths['c']}"


def test_a_partys_high_cardinality_column_is_embedded_by_its_own_encoder(categorical_party_files):
    from vflbench.data.alignment import load_aligned
    from vflbench.data.datasets.registry import DATASETS, resolve_options

    name = f"aligned:{categorical_party_files}"
    ds = load_aligned(name, resolve_options(DATASETS.get(name), {"id": "ID", "target": "label", "align": "plain"}))
    assert ds.party_widths == [1, 1, 2]
    assert list(ds.embedded) == [3] and ds.feature_names[3] == "party2:merchant#code"
    rows, dim = ds.embedded[3]
    assert 3 + 100 < rows <= 3 + 300  # the levels seen at least twice in the training split, and the reserved rows
    assert dim == 16 and np.all(ds.x_train[:, 3] == np.round(ds.x_train[:, 3]))


@pytest.mark.integration  # `make test-slow`: PSI between party processes
def test_embedded_columns_across_processes_equal_one_process(categorical_party_files, tmp_path):
    flags = ["--party-data", categorical_party_files, "--id-column", "ID", "--data-opt", "target=label"]
    flags += ["--parties", "3", "--method", "svfl", "--epochs", "3", "--seed", "0", "--quiet"]
    flags += ["--train-missing", "mcar:0.2"]
    (ra, ma), (rb, mb) = _plain_in_one_process_and_psi_across_processes(flags, tmp_path)
    assert ra["value"].tolist() == rb["value"].tolist() and ma["history"]["loss"] == mb["history"]["loss"]
    assert ma["parameters"] == mb["parameters"] and ma["parameters"]["total"] > 300 * 16
