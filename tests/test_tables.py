"""Users' own tables (csv:PATH, ARFF), party column groups, the correlation partitioner, `vflbench
inspect`, and the generic table every sweep writes. The example table tests/data/loans.csv is made
by tests/data/make_loans.py (checked below)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.data.datasets import load_dataset
from vflbench.data.partitioners import _swap_towards, make_partition
from vflbench.methods import METHODS
from vflbench.runs.config import RunConfig, resolve

runner = CliRunner()
DATA = Path(__file__).parent / "data"
LOANS = DATA / "loans.csv"
PARTIES = DATA / "loans_parties.yaml"
NAME = f"csv:{LOANS}"
OPTS = ["--data-opt", "target=default", "--data-opt", "drop=customer_id"]
COLS = ["--partitioner", "columns", "--part-opt", f"file={PARTIES}", "--parties", "3"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_example_table_is_made_by_its_generator(tmp_path):
    sys.path.insert(0, str(DATA))
    try:
        import make_loans
    finally:
        sys.path.remove(str(DATA))
    out = tmp_path / "loans.csv"
    make_loans.make().to_csv(out, index=False)
    assert out.read_text() == LOANS.read_text()


def test_preprocessing_is_fitted_on_the_training_split_and_recorded():
    ds = load_dataset(NAME, {"target": "default", "drop": "customer_id"})
    pre = ds.preprocessing
    assert pre["classes"] == {"no": 0, "yes": 1} and pre["positive_class"] == "yes"  # minority class by default
    assert ds.info.positive_class == 1 and ds.n_classes == 2
    raw = pd.read_csv(LOANS)
    assert pre["missing_cells"]["total"] == int(raw.drop(columns=["customer_id", "default"]).isna().sum().sum()) > 0
    assert pre["missing_cells"]["per_column"]["employment"] == int(raw["employment"].isna().sum())
    assert pre["rows"] == {"read": 600, "dropped_missing_target": 0, "train": 480, "test": 120}
    # one-hot columns follow their source column; widths per source column add up to the encoded width
    assert (
        pre["columns"]["region"] == {"kind": "categorical", "encoding": "onehot", "encoded_width": 4, "levels": 4}
        and pre["columns"]["age"]["kind"] == "numeric"
    )
    assert ds.x_train.shape[1] == sum(c["encoded_width"] for c in pre["columns"].values()) == len(ds.feature_sources)
    assert ds.feature_sources[:2] == ["age", "income"] and "customer_id" not in ds.feature_sources
    num = [i for i, s in enumerate(ds.feature_sources) if pre["columns"][s]["kind"] == "numeric"]
    assert np.allclose(ds.x_train[:, num].mean(0), 0, atol=1e-5)  # standardised with training statistics
    assert not np.allclose(ds.x_test[:, num].mean(0), 0, atol=1e-3)
    assert np.isfinite(ds.x_train).all() and np.isfinite(ds.x_test).all()  # imputed
    stratified = np.bincount(ds.y_test) / len(ds.y_test)
    assert abs(stratified[1] - np.mean(raw["default"] == "yes")) < 0.01
    ds2 = load_dataset(NAME, {"target": "default", "drop": "customer_id", "positive": "no", "scaler": "none"})
    assert ds2.info.positive_class == 0 and ds2.x_train[:, 0].max() > 20  # raw ages


def test_given_test_file_and_categories_unseen_in_training(tmp_path):
    df = pd.DataFrame({"a": [1.0, 2, 3, 4, 5, 6, 7, 8], "color": list("rgbrgbrg"), "y": ["u", "v"] * 4})
    df.to_csv(tmp_path / "train.csv", index=False)
    pd.DataFrame({"a": [1.0, 9], "color": ["r", "purple"], "y": ["u", "v"]}).to_csv(tmp_path / "test.csv", index=False)
    ds = load_dataset(f"csv:{tmp_path / 'train.csv'}", {"target": "y", "test": str(tmp_path / "test.csv")})
    assert len(ds.y_train) == 8 and len(ds.y_test) == 2
    onehot = [i for i, s in enumerate(ds.feature_sources) if s == "color"]
    assert len(onehot) == 3 and ds.x_test[1, onehot].sum() == 0  # 'purple' was never seen in training
    assert "test:test.csv" in ds.checksums


def test_tsv_gzip_and_arff_read_the_same_table(tmp_path):
    df = pd.DataFrame({"x1": np.arange(20.0), "x2": np.arange(20.0) ** 2, "label": ["a", "b"] * 10})
    df.to_csv(tmp_path / "t.tsv", sep="\t", index=False)
    df.to_csv(tmp_path / "t.csv.gz", index=False)
    arff = ["@relation t", "@attribute x1 numeric", "@attribute x2 numeric", "@attribute label {a,b}", "@data"]
    arff += [f"{r.x1},{r.x2},{r.label}" for r in df.itertuples()]
    (tmp_path / "t.arff").write_text("\n".join(arff) + "\n")
    with pytest.warns(UserWarning, match="'x1' \\(an identifier \\(a row number"):  # x1 = 0..19 is a row number
        loaded = [
            load_dataset(f"csv:{tmp_path / f}", {"target": "label", "scaler": "none"})
            for f in ("t.tsv", "t.csv.gz", "t.arff")
        ]
    for ds in loaded[1:]:
        assert np.array_equal(ds.x_train, loaded[0].x_train) and np.array_equal(ds.y_test, loaded[0].y_test)


BAD_TABLES = {  # case: (file content (None: no file), --data-opt target, the message's needle)
    "missing": (None, "y", "No such file"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "y", "binary data"),
    "ragged": ("a,b,y\n1,2,u\n3,4,v\n5,6,7,u\n", "y", "line 4 has 4 fields but the header has 3"),
    "empty": ("", "y", "is empty"),
    "header_only": ("a,b,y\n", "y", "no data rows"),
    "duplicate": ("a,a,y\n1,2,u\n3,4,v\n", "y", "duplicate column name(s) 'a'"),
    "target_unknown": (
        "a,b,label\n1,2,u\n3,4,v\n",
        "lable",
        "no column 'lable' (closest: 'label'). Columns: a, b, label",
    ),
    "target_absent": ("a,b,label\n1,2,u\n3,4,v\n", None, "--data-opt target=COLUMN. Columns: a, b, label"),
    "one_class": ("a,y\n" + "".join(f"{i},u\n" for i in range(10)), "y", "has 1 class (u)"),
    "regression": ("a,y\n" + "".join(f"{i},{i * 1.5}\n" for i in range(40)), "y", "looks like a regression target"),
}


@pytest.mark.parametrize("case", list(BAD_TABLES))
def test_bad_tables_fail_with_one_clear_line(tmp_path, case):
    content, target, needle = BAD_TABLES[case]
    p = tmp_path / "t.csv"
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif content is not None:
        p.write_text(content)
    opts = [] if target is None else ["--data-opt", f"target={target}"]
    out = tmp_path / "out"
    r = invoke("run", "--dataset", f"csv:{p}", *opts, "--method", "svfl", "--epochs", "1", "--quiet", "--out", out)
    assert r.exit_code == 2, r.output
    assert needle in " ".join(r.output.split()), r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) <= 3
    assert not out.exists()  # nothing written
    r = invoke("inspect", f"csv:{p}", *opts)  # inspect reports the same problem
    assert r.exit_code == 2 and "Traceback" not in r.output


@pytest.mark.parametrize(
    "case",
    ["malformed", "not_mapping", "wrong_k", "unknown_column", "two_parties", "empty_party", "glob_nothing", "target"],
)
def test_bad_parties_files(tmp_path, case):
    f = tmp_path / "parties.yaml"
    k = 3
    text, needle = {
        "malformed": ("bank: [age, income\ninsurer: [claims]\n", "not valid YAML at line"),
        "not_mapping": ("- age\n- income\n", "must be a mapping"),
        "wrong_k": (
            "bank: [age]\ninsurer: [claims]\n",
            "defines 2 parties (bank, insurer) but the run has --parties 3; set --parties 2",
        ),
        "unknown_column": (
            "bank: [age, incme]\ninsurer: [claims]\ntelecom: [region]\n",
            "unknown column 'incme' (closest: 'income')",
        ),
        "two_parties": (
            "bank: [age, claims]\ninsurer: [claims]\ntelecom: [region]\n",
            "column 'claims' is given to two parties ('bank' and 'insurer')",
        ),
        "empty_party": ("bank: [age]\ninsurer: []\ntelecom: [region]\n", "party 'insurer' has no columns"),
        "glob_nothing": ("bank: [age]\ninsurer: ['zz_*']\ntelecom: [region]\n", "pattern 'zz_*' matches no column"),
        "target": ("bank: [age]\ninsurer: [default]\ntelecom: [region]\n", "'default', which is the target"),
    }[case]
    f.write_text(text)
    out = tmp_path / "out"
    r = invoke(
        "run",
        "--dataset",
        NAME,
        *OPTS,
        "--partitioner",
        "columns",
        "--part-opt",
        f"file={f}",
        "--parties",
        k,
        "--method",
        "svfl",
        "--epochs",
        "1",
        "--quiet",
        "--out",
        out,
    )
    assert r.exit_code == 2 and needle in " ".join(r.output.split()), r.output
    assert "Traceback" not in r.output and not out.exists()


def test_column_groups_follow_encoding_and_name_the_parties(tmp_path):
    ds = load_dataset(NAME, {"target": "default", "drop": "customer_id"})
    part = make_partition("columns", ds.x_train.shape[1:], 3, np.random.default_rng(0), data=ds, file=str(PARTIES))
    assert part.party_names == ["bank", "insurer", "telecom"]
    owners = {ds.feature_sources[i]: name for name, b in zip(part.party_names, part.blocks, strict=True) for i in b}
    assert owners["credit_score"] == owners["credit_accounts"] == "bank"  # the glob credit_*
    assert [ds.feature_sources[i] for i in part.blocks[1]].count("policy_type") == 3  # all three one-hot columns
    assert part.widths() == [5, 4, 9]
    f = tmp_path / "p.yaml"
    f.write_text("bank: [age, income]\ninsurer: [claims]\n")
    with pytest.warns(UserWarning, match=r"7 column\(s\) belong to no party .* dropped: debt_ratio, credit_score"):
        part = make_partition("columns", ds.x_train.shape[1:], 2, np.random.default_rng(0), data=ds, file=str(f))
    assert part.params["dropped"][:2] == ["debt_ratio", "credit_score"]
    r = invoke("masks", "--dataset", NAME, *OPTS, *COLS, "--missing", "mcar:0.5", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["parties"] == ["bank", "insurer", "telecom"]
    r = invoke("masks", "--dataset", NAME, *OPTS, *COLS, "--missing", "mcar:0.5")
    assert all(n in r.output for n in ("bank", "insurer", "telecom")) and "block 0" not in r.output


def test_correlation_partitioner_score_moves_with_beta():
    rng = np.random.default_rng(0)
    n, groups = 2000, 4  # four groups of four strongly correlated features
    base = rng.normal(size=(n, groups))
    x = np.repeat(base, 4, axis=1) + 0.3 * rng.normal(size=(n, 16))
    df = pd.DataFrame(x, columns=[f"f{i}" for i in range(16)]).assign(y=(base.sum(1) > 0).astype(int))
    ds = type(
        "D", (), {"x_train": x.astype(np.float32), "feature_sources": None, "feature_names": list(df.columns[:16])}
    )()
    scores = []
    for beta in (0.0, 0.25, 0.5, 0.75, 1.0):
        part = make_partition("correlation", (16,), 4, np.random.default_rng(1), data=ds, beta=beta)
        assert part.widths() == [4, 4, 4, 4]
        scores.append(part.params["score"])
    assert all(a < b for a, b in zip(scores, scores[1:], strict=False)), scores
    lo, hi = part.params["score_range"]
    assert scores[0] == pytest.approx(lo, abs=2e-3) and scores[-1] == pytest.approx(hi, abs=2e-3) and hi - lo > 0.2
    # at beta 0 each party holds one correlated group
    part = make_partition("correlation", (16,), 4, np.random.default_rng(1), data=ds, beta=0.0)
    assert sorted(sorted(set(np.asarray(b) // 4)) for b in part.blocks) == [[0], [1], [2], [3]]


def _swap_one_pair_at_a_time(c, owner, target, rng, max_iter=20000):
    """The correlation partitioner's swap search as first written: one random pair drawn and tested per step."""
    a = np.abs(c).copy()
    np.fill_diagonal(a, 0.0)
    cross = owner[:, None] != owner[None, :]
    n_cross, total = cross.sum() / 2, a[cross].sum() / 2
    for _ in range(max_iter):
        score = total / n_cross if n_cross else 0.0
        if abs(score - target) < 1e-4:
            break
        i, j = rng.integers(0, len(owner), size=2)
        p, q = owner[i], owner[j]
        if p == q:
            continue
        sign = (owner == p).astype(np.float64) - (owner == q)
        sign[[i, j]] = 0.0
        new = total + float(((a[i] - a[j]) * sign).sum())
        if abs(new / n_cross - target) < abs(score - target):
            owner[i], owner[j] = q, p
            total = new
    return owner


@pytest.mark.parametrize("seed", range(12))
def test_batched_swap_search_makes_the_swaps_and_draws_of_the_one_pair_loop(seed):
    g = np.random.default_rng(seed)
    d, k = [(16, 4), (33, 3), (60, 5), (7, 7)][seed % 4]
    x = g.normal(size=(80, d))
    x[:, 1:] += g.normal() * x[:, :1]
    c = np.corrcoef(x.T)
    owner = np.repeat(np.arange(k), d // k)
    g.shuffle(owner)
    target = float(g.uniform(0.0, 0.6)) if seed % 3 else 2.0  # 2.0: unreachable, every step is drawn
    r1, r2 = np.random.default_rng(seed + 100), np.random.default_rng(seed + 100)
    want = _swap_one_pair_at_a_time(c, owner.copy(), target, r1, max_iter=3000)
    got = _swap_towards(c, owner.copy(), target, r2, max_iter=3000)
    assert np.array_equal(got, want)
    assert r1.bit_generator.state == r2.bit_generator.state  # later draws of the partitioner stay the same


def test_inspect_prints_what_the_loader_inferred():
    r = invoke("inspect", NAME, *OPTS, "--partitioner", "columns", "--part-opt", f"file={PARTIES}")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    for needle in (
        "600 rows -> 480 train / 120 test",
        "employment │ categorical │ 42 │ 4 │ telecom",
        "│ yes │ 1 │ 162 │ 40 │ yes",
        "missing cells: 117",
        "bank │ 5",
        "parties (columns, K=3)",
    ):
        assert needle in text, needle
    r = invoke("inspect", NAME, *OPTS, "--format", "json")
    rep = json.loads(r.output)
    assert (
        rep["missing_cells"] == 117
        and [c["class"] for c in rep["classes"]] == ["no", "yes"]
        and len(rep["parties"]) == 4
    )


def test_the_file_content_is_part_of_the_run(tmp_path):
    p = tmp_path / "t.csv"
    pd.read_csv(LOANS).to_csv(p, index=False)
    cfg = RunConfig(dataset=f"csv:{p}", method="svfl", data_options={"target": "default", "drop": "customer_id"})
    a = resolve(cfg)
    assert a.run_id.startswith("csv-t_svfl_K4_") and len(a.data_options["file_sha256"]) == 64
    pd.read_csv(LOANS).iloc[:-1].to_csv(p, index=False)  # edited file: a new run
    assert resolve(cfg).key != a.key


@pytest.mark.integration  # `make test-slow` (an end-to-end check: real processes, sweeps or image models; CI runs it)
def test_every_method_runs_on_the_example_table_and_repeats_exactly(tmp_path):
    for name in METHODS.names():
        out = tmp_path / name
        semi = (
            ["--labeled", "200", "--aligned", "50"] if METHODS.get(name).needs_labeled else []
        )  # FALSE-VFL is semi-supervised
        r = invoke(
            "run",
            "--dataset",
            NAME,
            *OPTS,
            *COLS,
            "--method",
            name,
            "--train-missing",
            "mcar:0.3",
            "--test-missing",
            "none,mcar:0.3",
            *(["--method-opt", "trees=20"] if METHODS.get(name).trains_whole and name != "xgboost" else []),
            *([] if METHODS.get(name).trains_whole else ["--epochs", "2"]),  # (trees grow trees, not epochs)
            "--quiet",
            "--out",
            out,
            *semi,
        )
        assert r.exit_code == 0, (name, r.output)
        res = pd.read_csv(next(out.rglob("results.csv")))
        assert set(res["test_missing"]) == {"none", "mcar:0.3"} and res["value"].notna().all()
        man = json.loads(next(out.rglob("manifest.json")).read_text())
        assert man["partition"]["params"]["parties"] == ["bank", "insurer", "telecom"]
        assert (
            man["data"]["preprocessing"]["classes"] == {"no": 0, "yes": 1}
            and man["data"]["checksums"]["loans.csv"] == man["data"]["options"]["file_sha256"]
        )
    again = tmp_path / "again"
    r = invoke(
        "run",
        "--dataset",
        NAME,
        *OPTS,
        *COLS,
        "--method",
        "laser",
        "--train-missing",
        "mcar:0.3",
        "--test-missing",
        "none,mcar:0.3",
        "--epochs",
        "2",
        "--quiet",
        "--out",
        again,
    )
    first = pd.read_csv(next((tmp_path / "laser").rglob("results.csv")))
    assert pd.read_csv(next(again.rglob("results.csv")))["value"].tolist() == first["value"].tolist()


@pytest.mark.slow  # end-to-end training: `pytest -m 'not slow'` skips it; `make test` runs it
def test_a_sweep_of_a_table_without_layout_writes_the_generic_table(tmp_path):
    exp = tmp_path / "loans.yaml"
    exp.write_text(f"""name: loans-study
seeds: [0, 1]
methods: [svfl, laser]
train_missing: [mcar:0.3]
test_missing: [none, mcar:0.3]
hp: {{epochs: 2}}
datasets:
  "{NAME}":
    data_options: {{target: default, drop: customer_id}}
    partitioner: columns
    partition_options: {{file: {PARTIES}}}
    parties: [3]
""")
    r = invoke("sweep", exp, "--out", tmp_path / "out", "--workers", "1")
    assert r.exit_code == 0, r.output
    table = (tmp_path / "out" / "table.md").read_text()
    heads = re.findall(r"^## .*$", table, flags=re.M)
    assert [h.split(": ")[1].split(",")[0] for h in heads] == ["accuracy (%)", "F1 x 100", "AUPRC x 100"]
    assert "| Standard VFL | LASER-VFL |" in table and "**" in table and "over 2 seeds" in table
    assert "Best or within one std of the best: Standard VFL" in table
    first = pd.read_csv(tmp_path / "out" / "results.csv")
    r = invoke("sweep", exp, "--out", tmp_path / "out", "--workers", "1")
    assert r.exit_code == 0 and "0 to run" in r.output
    assert pd.read_csv(tmp_path / "out" / "results.csv")["value"].tolist() == first["value"].tolist()


@pytest.mark.integration  # `make test-slow` (an end-to-end check: real processes, sweeps or image models; CI runs it)
def test_the_docs_study_example_writes_a_table(tmp_path):
    readme = (Path(__file__).parents[1] / "docs" / "RUNNING.md").read_text()
    block = re.search(r"```yaml\n(name: my-study\n.*?)```", readme, flags=re.S).group(1)
    (tmp_path / "my.yaml").write_text(block)
    r = invoke("sweep", tmp_path / "my.yaml", "--quick", "--out", tmp_path / "out", "--workers", "1")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "table.md").exists() and "| Standard VFL |" in (
        tmp_path / "out" / "table.md"
    ).read_text()


def test_openml_tables_go_through_fetch_openml_and_say_when_offline(monkeypatch, tmp_path):
    import inspect

    import sklearn.datasets
    from sklearn.utils import Bunch

    calls = {}
    real = inspect.signature(sklearn.datasets.fetch_openml)

    def fake(*args, **kwargs):
        real.bind(*args, **kwargs)  # the call fits the installed scikit-learn (1.9 dropped download_if_missing)
        data_id, data_home = kwargs["data_id"], kwargs["data_home"]
        calls.update(data_id=data_id, data_home=data_home)
        if data_id == 404:
            raise OSError("network is unreachable")
        frame = pd.DataFrame({"a": np.arange(30.0) % 7, "b": list("xyz") * 10, "class": ["p", "n", "n"] * 10})
        return Bunch(frame=frame, target_names=["class"], details={"version": 3})

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fake)
    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path / "data"))
    ds = load_dataset("openml:61")  # the target defaults to OpenML's declared target (61: iris)
    assert calls == {"data_id": 61, "data_home": str(tmp_path / "data" / "openml")}
    assert (
        ds.preprocessing["target"] == "class" and ds.preprocessing["positive_class"] == "p" and ds.x_train.shape[1] == 4
    )
    r = invoke("inspect", "openml:404")
    assert r.exit_code == 2 and "needs an internet connection the first time" in " ".join(r.output.split())
    r = invoke("inspect", "openml:abc")
    assert r.exit_code == 2 and "numeric OpenML dataset id" in r.output


# ---------------------------------------------------------------- hardening II: a user's table, honestly read
def _messy(tmp_path, sep=","):
    rng = np.random.default_rng(0)
    n = 120
    df = pd.DataFrame(
        {
            "id": np.arange(n),
            "a": rng.normal(size=n),
            "b": rng.normal(size=n).round(2).astype(object),
            "c": rng.normal(size=n),
            "d": rng.normal(size=n),
            "const": 1,
            "empty": np.nan,
            "cls": rng.integers(0, 2, n).astype(float),
        }
    )
    df.loc[7, "b"] = "?"
    df.loc[:2, "cls"] = np.nan
    path = tmp_path / "messy.csv"
    df.to_csv(path, sep=sep, index=False)
    return path


@pytest.mark.parametrize("sep", [",", ";", "\t", "|"])
def test_the_separator_is_detected_and_recorded(tmp_path, sep):
    path = _messy(tmp_path, sep)
    with pytest.warns(UserWarning):
        ds = load_dataset(f"csv:{path}", {"target": "cls", "coerce": "true"})
    assert ds.preprocessing["sep"] == sep and ds.preprocessing["rows"]["dropped_missing_target"] == 3


@pytest.mark.parametrize(
    "opts, needle",
    [
        ({"target": "cls"}, "column 'b' is numeric but for 1 value(s) such as '?'"),
        (
            {"target": "cls", "sep": ";"},
            "no column 'cls'",
        ),  # a wrong separator given explicitly is used, and the header does not split
        ({"target": "cls", "keep": "nope", "coerce": "true"}, "keep='nope' is not a feature column"),
    ],
)
def test_a_messy_table_is_refused_with_the_column_named(tmp_path, opts, needle):
    import warnings

    path = _messy(tmp_path)
    with pytest.raises(Exception) as e, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dropped rows are announced before the refusal
        load_dataset(f"csv:{path}", opts)
    assert needle in str(e.value)


def test_useless_columns_are_dropped_with_a_warning_unless_kept(tmp_path):
    path = _messy(tmp_path)
    with pytest.warns(UserWarning) as rec:
        ds = load_dataset(f"csv:{path}", {"target": "cls", "coerce": "true"})
    text = " ".join(str(w.message) for w in rec)
    assert "3 row(s) have no value in the target" in text and "'?'" in text
    assert (
        "'id' (an identifier (a row number" in text and "'const' (constant" in text and "'empty' (all missing)" in text
    )
    assert sorted(ds.preprocessing["auto_dropped_columns"]) == ["const", "empty", "id"] and ds.preprocessing[
        "coerced_columns"
    ] == {"b": ["?"]}
    assert ds.feature_names == ["a", "b", "c", "d"]
    with pytest.warns(UserWarning):
        kept = load_dataset(f"csv:{path}", {"target": "cls", "coerce": "true", "keep": "id"})
    assert "id" in kept.feature_names


def test_small_binary_tables_are_not_called_regression_and_test_files_need_the_target(tmp_path):
    pd.DataFrame({"a": [1, 2, 3, 4, 5, 6.0], "b": [0.5, 0.1, 0.3, 0.9, 0.2, 0.7], "y": [0, 1, 0, 1, 0, 1]}).to_csv(
        tmp_path / "six.csv", index=False
    )
    ds = load_dataset(f"csv:{tmp_path / 'six.csv'}", {"target": "y", "test_size": "0.5"})
    assert ds.info.n_classes == 2
    pd.DataFrame({"a": [1.0], "b": [2.0]}).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(Exception, match="the test file has no column 'y'"):
        load_dataset(f"csv:{tmp_path / 'six.csv'}", {"target": "y", "test": str(tmp_path / "t.csv")})


def test_internal_options_are_never_listed(tmp_path):
    path = _messy(tmp_path)
    r = invoke("run", "--dataset", f"csv:{path}", "--method", "local", "--data-opt", "bogus=1", "--out", tmp_path / "o")
    assert r.exit_code == 2 and "sep" in r.output and "file_sha256" not in r.output


def test_help_lists_the_table_options_the_loader_takes():
    from vflbench.data.datasets.table import HELP, INTERNAL
    from vflbench.runs.settings import TABLE_OPTIONS

    assert TABLE_OPTIONS.split(", ") == [k for k in HELP if k not in INTERNAL]
    r = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "300"})
    assert "sep, coerce, keep" in " ".join(r.output.split()) and "file_sha256" not in r.output
