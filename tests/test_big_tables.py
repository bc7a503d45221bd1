"""Large and categorical tables: the encoder (numbers bit for bit as scikit-learn's ColumnTransformer, embedding
codes and their reserved values, hashing, the memory check), Parquet and the large-file reader, the embedding
front of the bottom models, and every method on a table with embedded columns."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from vflbench.core.errors import VFLBenchError, VFLBenchWarning
from vflbench.data.datasets import encoding, reading
from vflbench.data.datasets.encoding import MISSING, RARE, RESERVED, UNSEEN, EncodingOptions, embedding_dim, encode
from vflbench.data.datasets.table import DEFAULTS, build_dataset, read_source
from vflbench.nn.models import EmbeddingFront, MLPBank, ParamStore

ROOT = Path(__file__).resolve().parents[1]
LOANS = ROOT / "tests" / "data" / "loans.csv"


def _ctr_module():
    spec = importlib.util.spec_from_file_location("make_ctr_table", ROOT / "scripts" / "make_ctr_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_ctr(tmp_path: Path, rows: int = 3000, user_levels: int = 900, ad_levels: int = 60) -> Path:
    df, meta = _ctr_module().make(rows, user_levels, ad_levels, seed=1)
    path = tmp_path / "ctr.csv"
    df.to_csv(path, index=False)
    (tmp_path / "ctr_parties.yaml").write_text(
        "user_side: [f0, f1, user]\nad_side: [f2, f3, ad]\nsite_side: [f4, f5, site]\n"
    )
    return path


# ----------------------------------------------------------------------------- the encoder


def column_encoder(frame: pd.DataFrame, num: list[str], cat: list[str], scaler: str):
    """The loader's encoder before embeddings (revision e04ca54), kept here as the reference: one scikit-learn
    ColumnTransformer, float64, numeric columns median-imputed and scaled, categorical ones imputed with the most
    frequent level and one-hot encoded."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, StandardScaler

    frame = frame.copy()
    for c in cat:
        frame[c] = encoding.as_text(frame[c])
    for c in num:
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(float)
    num_steps = [("impute", SimpleImputer(strategy="median", keep_empty_features=True))]
    if scaler != "none":
        num_steps.append(("scale", {"standard": StandardScaler, "minmax": MinMaxScaler}[scaler]()))
    onehot = Pipeline(
        [
            ("impute", SimpleImputer(strategy="most_frequent", keep_empty_features=True)),
            ("onehot", OneHotEncoder(handle_unknown="ignore", sparse_output=False)),
        ]
    )
    encoder = ColumnTransformer(
        [("num", Pipeline(num_steps), num), ("cat", onehot, cat)], remainder="drop", sparse_threshold=0.0
    )
    return frame, encoder


def _old_encode(frame, feats, kinds, scaler, tr, te):
    """The loader's encoding before embeddings: one ColumnTransformer, float64, columns back in source order."""
    num = [c for c in feats if kinds[c] == "numeric"]
    cat = [c for c in feats if kinds[c] == "categorical"]
    frame, ct = column_encoder(frame, num, cat, scaler)
    xtr, xte = ct.fit_transform(frame.iloc[tr]), ct.transform(frame.iloc[te])
    sources = list(num)
    if cat:
        for c, cats in zip(cat, ct.named_transformers_["cat"].named_steps["onehot"].categories_, strict=True):
            sources += [c] * len(cats)
    order = np.argsort([feats.index(s) for s in sources], kind="stable")
    return xtr[:, order].astype(np.float32), xte[:, order].astype(np.float32)


@pytest.mark.parametrize("scaler", ["standard", "minmax", "none"])
def test_numeric_and_one_hot_columns_are_bit_for_bit_the_column_transformers(scaler):
    frame = pd.read_csv(LOANS)
    feats = [c for c in frame.columns if c not in ("default", "customer_id")]
    kinds = {c: ("categorical" if frame[c].dtype == object else "numeric") for c in feats}
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(frame))
    tr, te = np.sort(idx[:450]), np.sort(idx[450:])
    new = encode("t", frame, feats, kinds, EncodingOptions(scaler=scaler), tr, te)
    old_tr, old_te = _old_encode(frame, feats, kinds, scaler, tr, te)
    assert not new.embedded
    np.testing.assert_array_equal(new.x_train, old_tr)
    np.testing.assert_array_equal(new.x_test, old_te)
    # wide numeric tables with missing cells: still the same bits, column by column
    x = rng.standard_normal((2000, 37)) * rng.uniform(0.1, 1e4, 37)
    x[rng.random(x.shape) < 0.05] = np.nan
    wide = pd.DataFrame(x, columns=[f"c{i}" for i in range(37)])
    cols = list(wide.columns)
    new = encode("w", wide, cols, dict.fromkeys(cols, "numeric"), EncodingOptions(scaler=scaler), tr, te)
    old_tr, old_te = _old_encode(wide, cols, dict.fromkeys(cols, "numeric"), scaler, tr, te)
    np.testing.assert_array_equal(new.x_train, old_tr)
    np.testing.assert_array_equal(new.x_test, old_te)


def test_embedding_codes_reserve_missing_unseen_and_rare():
    train = ["b", "a", "a", "c", "b", "a", "z", None, "b"]  # z seen once: rare at min_count=2
    test = ["a", "z", "new", None, "c"]  # c seen once too
    s = pd.Series(train + test, dtype=object, name="col")
    tr = np.arange(len(train))
    codes, rows, info = encoding.embedding_codes(s, tr, EncodingOptions(min_count=2))
    # kept levels a, b (sorted) -> 3, 4; c and z pooled as rare; 'new' unseen; None missing
    assert rows == RESERVED + 2
    assert codes[: len(train)].tolist() == [4, 3, 3, RARE, 4, 3, RARE, MISSING, 4]
    assert codes[len(train) :].tolist() == [3, RARE, UNSEEN, MISSING, RARE]
    assert info["rare_levels"] == 2 and info["kept_levels"] == 2
    # min_count=1 keeps every training level; nothing is rare
    codes, rows, _ = encoding.embedding_codes(s, tr, EncodingOptions(min_count=1))
    assert rows == RESERVED + 4 and RARE not in codes.tolist()


@pytest.mark.parametrize(
    "opts", [EncodingOptions(min_count=2), EncodingOptions(min_count=1), EncodingOptions(hash_buckets=11)]
)
def test_a_pandas_categorical_column_gets_the_codes_of_its_text(opts):
    rng = np.random.default_rng(4)
    values = rng.choice([f"v{i}" for i in range(40)] + [None], size=3000, p=None).astype(object)
    text = pd.Series(values, dtype=object, name="c")
    cat = text.astype("category")
    tr = np.sort(rng.choice(3000, 2000, replace=False))
    a, ra, ia = encoding.embedding_codes(text, tr, opts)
    b, rb, ib = encoding.embedding_codes(encoding.as_text(cat), tr, opts)
    np.testing.assert_array_equal(a, b)
    assert ra == rb and ia == ib


def test_hashed_codes_are_stable_in_range_and_ignore_the_vocabulary():
    s = pd.Series([f"u{i}" for i in range(5000)] + [None], dtype=object)
    o = EncodingOptions(hash_buckets=97)
    a, rows, info = encoding.embedding_codes(s, np.arange(10), o)
    b, _, _ = encoding.embedding_codes(s.sample(frac=1.0, random_state=3).sort_index(), np.arange(3), o)
    assert rows == RESERVED + 97 and info["hashed"]
    np.testing.assert_array_equal(a, b)  # the code of a level depends on its text only
    assert a[-1] == MISSING and a[:-1].min() >= RESERVED and a[:-1].max() < RESERVED + 97
    counts = np.bincount(a[:-1] - RESERVED, minlength=97)
    assert counts.min() > 20  # 5,000 levels spread over every bucket (about 52 each)


def test_embedding_size_rule_and_threshold_choose_the_encoding(tmp_path):
    assert embedding_dim(5) == 4 and embedding_dim(53) == 15 and embedding_dim(30_000) == 16
    assert embedding_dim(30_000, fixed=8) == 8
    path = write_ctr(tmp_path)
    o = {**DEFAULTS, "target": "click"}
    ds = build_dataset(read_source(f"csv:{path}", o), o)
    cols = ds.preprocessing["columns"]
    assert [cols[c]["encoding"] for c in ("user", "ad", "site")] == ["embedding"] * 3  # 60 levels > 50
    assert len(ds.embedded) == 3 and ds.x_train.shape[1] == 9  # six numeric, three code columns
    for j, (rows, dim) in ds.embedded.items():
        codes = ds.x_train[:, j]
        assert codes.dtype == np.float32 and np.all(codes == np.round(codes)) and codes.max() < rows
        assert dim == embedding_dim(rows)
    o = {**DEFAULTS, "target": "click", "embed_above": 100}  # ad (60 levels) one-hot now
    ds = build_dataset(read_source(f"csv:{path}", o), o)
    assert ds.preprocessing["columns"]["ad"]["encoding"] == "onehot"
    assert ds.preprocessing["columns"]["ad"]["encoded_width"] == 60 and len(ds.embedded) == 2


def test_a_table_that_cannot_fit_is_refused_before_allocating(tmp_path, monkeypatch):
    path = write_ctr(tmp_path)
    monkeypatch.setattr(encoding, "available_memory", lambda: 20 << 20)  # 20 MB left
    allocated = []
    real_empty = np.empty
    monkeypatch.setattr(encoding.np, "empty", lambda *a, **k: allocated.append(a) or real_empty(*a, **k))
    o = {**DEFAULTS, "target": "click", "embed_above": 10**6}  # everything one-hot
    with pytest.raises(VFLBenchError) as e:
        build_dataset(read_source(f"csv:{path}", o), o)
    msg = str(e.value)
    assert "column 'user' has" in msg and "embed_above=" in msg and "drop=user" in msg and "GB" in msg
    train_or_test = (2400, 600)  # the encoded arrays' rows
    assert [a for a in allocated if isinstance(a[0], tuple) and len(a[0]) == 2 and a[0][0] in train_or_test] == []
    o = {**DEFAULTS, "target": "click"}  # embedded: three code columns fit easily
    assert build_dataset(read_source(f"csv:{path}", o), o).x_train.shape[1] == 9


@pytest.mark.parametrize(
    "opt, needle",
    [
        ({"embed_above": 0}, "embed_above must be >= 1"),
        ({"hash_buckets": -1}, "hash_buckets must be between"),
        ({"min_count": 0}, "min_count must be >= 1"),
        ({"embed_dim": -2}, "embed_dim must be >= 0"),
    ],
)
def test_bad_embedding_options_say_what_is_allowed(tmp_path, opt, needle):
    path = write_ctr(tmp_path, rows=400)
    o = {**DEFAULTS, "target": "click", **opt}
    with pytest.raises(VFLBenchError, match=needle):
        build_dataset(read_source(f"csv:{path}", o), o)


# ----------------------------------------------------------------------------- reading


def test_parquet_reads_the_same_table_as_csv(tmp_path):
    path = write_ctr(tmp_path, rows=800)
    pq_path = tmp_path / "ctr.parquet"
    pd.read_csv(path).to_parquet(pq_path, index=False)
    o = {**DEFAULTS, "target": "click"}
    a = build_dataset(read_source(f"csv:{path}", o), o)
    b = build_dataset(read_source(f"csv:{pq_path}", o), o)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(VFLBenchError, match="not a readable Parquet file"):
        reading.read_table(bad)


def test_a_large_file_is_read_exactly_and_a_late_text_value_makes_a_text_column(tmp_path, monkeypatch):
    n = 5000
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.standard_normal(n), "b": rng.integers(0, 9, n), "label": rng.integers(0, 2, n)})
    df["late"] = rng.standard_normal(n).round(3).astype(str)
    df.loc[n - 3, "late"] = "oops"  # beyond the rows the kinds are guessed from
    df["late_decimal"] = rng.integers(0, 5, n).astype(float)
    df.loc[n - 2, "late_decimal"] = 2.5  # an integer column up to here: read as float64, not cut to an integer
    path = tmp_path / "big.csv"
    df.to_csv(path, index=False)
    monkeypatch.setattr(reading, "LARGE_FILE", 1024)
    got = reading.read_table(path)
    assert got["b"].dtype == np.float32  # small integers: float32 holds them all
    assert got["a"].dtype == np.float64 and got.attrs["kept_wide"] == ["a"]  # decimals float32 would round
    # the oracle is the values written (to_csv writes each float's shortest round-trip text), not pd.read_csv: on the
    # H200 host's pandas 3.0.6 (make test-gpu, 2026-11-30) read_csv's default parser was one ulp off on 32% of these
    # values, and vflbench's reader gave the written ones
    np.testing.assert_array_equal(got["a"].to_numpy(), df["a"].to_numpy())
    assert got["late_decimal"].iloc[n - 2] == 2.5
    assert not pd.api.types.is_numeric_dtype(got["late"]) and got["late"].iloc[n - 3] == "oops"
    reading.read_table(path)
    assert not any(k[0] == str(path.resolve()) for k in reading._CACHE)  # a large table is not cached
    o = {**DEFAULTS, "target": "label"}
    with pytest.raises(VFLBenchError, match="column 'late' is numeric but for 1 value"):
        build_dataset(read_source(f"csv:{path}", o), o)


def _id_table(n: int = 6000, users: int = 1500) -> pd.DataFrame:
    """The bar's table in small: integer IDs from 2^25 up (float32 merges every four), a label that depends on them."""
    rng = np.random.default_rng(1)
    user = (1 << 25) + np.concatenate([np.arange(users), rng.integers(0, users, n - users)])
    f = rng.standard_normal((n, 2))
    f[rng.random(n) < 0.05, 0] = np.nan
    return pd.DataFrame(
        {
            "user": user,
            "f0": f[:, 0],
            "f1": f[:, 1].round(3),
            "city": rng.choice(["a", "b", "c"], n),
            "count": rng.integers(0, 1000, n),
            "y": ((user % 7) < 3).astype(int) ^ (rng.random(n) < 0.1),
        }
    )


@pytest.mark.parametrize("large", [False, True], ids=["pandas", "pyarrow"])
def test_csv_gzip_and_parquet_give_identical_encoded_data_and_every_id_level(tmp_path, monkeypatch, large):
    """The same table as CSV, gzip CSV and Parquet encodes to the same arrays, on either reader (the file size on
    disk picks the reader), and integer IDs above 2^24 keep one level each."""
    df = _id_table()
    csv = tmp_path / "t.csv"
    df.to_csv(csv, index=False, float_format="%.10g")
    df.to_csv(tmp_path / "t.csv.gz", index=False, float_format="%.10g")
    pd.read_csv(csv).to_parquet(tmp_path / "t.parquet", index=False)
    monkeypatch.setattr(reading, "LARGE_FILE", 1024 if large else 1 << 40)
    o = {**DEFAULTS, "target": "y", "categorical": "user", "embed_above": 10}
    built = [
        build_dataset(read_source(f"csv:{tmp_path / f}", dict(o)), dict(o)) for f in ("t.csv", "t.csv.gz", "t.parquet")
    ]
    first = built[0]
    levels = first.preprocessing["columns"]["user"]["levels"]
    train_users = df["user"].iloc[: len(df)].nunique()
    assert levels > 0.95 * train_users, (levels, train_users)  # not a quarter of them, as float32 gave
    for other in built[1:]:
        np.testing.assert_array_equal(other.x_train, first.x_train)
        np.testing.assert_array_equal(other.x_test, first.x_test)
        np.testing.assert_array_equal(other.y_train, first.y_train)
        assert other.preprocessing["columns"] == first.preprocessing["columns"]


def test_narrowing_keeps_every_value_and_names_what_it_cannot_narrow(monkeypatch):
    ids = np.array([(1 << 25) + i for i in range(8)], dtype=np.int64)
    df = pd.DataFrame(
        {
            "small_int": np.arange(8, dtype=np.int64),
            "id": ids,
            "halves": np.arange(8) / 2.0,  # float32 holds them
            "tenths": np.arange(8) / 10.0,  # it does not
            "cat_id": ids,
            "flag": np.arange(8) % 2 == 0,
        }
    )
    monkeypatch.setattr(reading, "WIDE_NOTE", 1)
    with pytest.warns(VFLBenchWarning, match=r"2 numeric column\(s\) kept at 64 bits .*id, tenths"):
        out = reading.narrow_exact(df.copy(), exact=("cat_id",))
    assert out["small_int"].dtype == np.float32 and out["halves"].dtype == np.float32
    assert out["id"].dtype == np.int64 and out["tenths"].dtype == np.float64
    assert out["cat_id"].dtype == np.int64 and out["flag"].dtype == bool
    for c in df.columns:  # the values themselves never change
        np.testing.assert_array_equal(out[c].to_numpy().astype(df[c].dtype), df[c].to_numpy())
    assert reading.float32_holds(np.array([1 << 24, -(1 << 24)], dtype=np.int64))
    assert not reading.float32_holds(np.array([(1 << 24) + 1], dtype=np.int64))
    assert reading.float32_holds(np.array([(1 << 26) + 8], dtype=np.int64))  # float32 steps by 8 above 2^26
    assert reading.float32_holds(np.array([np.nan, 0.5]))
    assert not reading.float32_holds(np.array([1e300]))


# ----------------------------------------------------------------------------- the bottom models


def test_embedding_front_looks_codes_up_per_member_and_unseen_reads_zeros():
    torch.manual_seed(0)
    widths = [3, 2]
    embedded = [[(1, 6, 4)], []]  # party 0's column 1 holds codes into a 6-row table of size 4
    store = ParamStore()
    bank = MLPBank(store, "ext", [0, 1, 0], [0, 1, 2], widths, [5], 2, embedded)
    store.finalize(torch.Generator().manual_seed(0))
    x = torch.zeros(2, 4, 3)
    x[0, :, 0] = torch.tensor([0.5, -1.0, 2.0, 0.0])
    x[0, :, 1] = torch.tensor([3.0, 1.0, 5.0, 0.0])  # codes: a level, unseen, a level, missing
    x[1, :, :2] = torch.randn(4, 2)
    store.begin()
    h = bank.front(x, x[bank.party_of])
    assert h.shape == (3, 4, 3 + 4)
    table0, table2 = store["ext.emb0.0"][0], store["ext.emb0.0"][1]  # members 0 and 2 read party 0, own tables
    assert not torch.equal(table0, table2)
    torch.testing.assert_close(h[0, :, 3:], torch.stack([table0[3], torch.zeros(4), table0[5], table0[0]]))
    torch.testing.assert_close(h[2, :, 3:], torch.stack([table2[3], torch.zeros(4), table2[5], table2[0]]))
    assert torch.all(h[0, :, 1] == 0)  # the code column itself is not read as a number
    torch.testing.assert_close(h[0, :, 0], x[0, :, 0])
    assert torch.all(h[1, :, 3:] == 0)  # party 1 has no categorical column
    # gradients reach exactly the rows that were looked up (a level, missing) and never the unseen row
    store.begin()
    bank(x).sum().backward()
    g = store.views(store.flat.grad)["ext.emb0.0"]
    used = g.abs().sum((0, 2)) > 0
    assert used.tolist() == [True, False, False, True, False, True]


def test_a_bank_without_embedded_columns_is_unchanged():
    a, b = ParamStore(), ParamStore()
    MLPBank(a, "ext", [0, 1], [0, 1], [3, 2], [4], 2)
    MLPBank(b, "ext", [0, 1], [0, 1], [3, 2], [4], 2, [[], []])
    a.finalize(torch.Generator().manual_seed(1))
    b.finalize(torch.Generator().manual_seed(1))
    assert torch.equal(a.flat, b.flat) and isinstance(EmbeddingFront, type)


# ----------------------------------------------------------------------------- runs


def _run(path: Path, method: str, extra: dict | None = None, **settings):
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.pipeline import execute

    cfg = RunConfig(
        dataset=f"csv:{path}",
        method=method,
        partitioner="columns",
        data_options={"target": "click", **(extra or {})},
        partition_options={"file": str(path.with_name("ctr_parties.yaml"))},
        hp={"epochs": 2, **settings.pop("hp", {})},
        settings={"parties": 3, "train_missing": "mcar:0.3", "test_missing": ["none", "mcar:0.5"], **settings},
    )
    return execute(resolve(cfg), device="cpu")


BOTTOM_MODEL_METHODS = ["local", "svfl", "ensemble", "combinatorial", "plug", "laser", "sum", "pbm", "fedhssl"]


@pytest.mark.slow
@pytest.mark.parametrize("method", BOTTOM_MODEL_METHODS)
def test_every_method_with_a_bottom_model_trains_on_embedded_columns_and_repeats(tmp_path, method):
    path = write_ctr(tmp_path, rows=1500)
    rows, manifest = _run(path, method)[:2]
    again = _run(path, method)[0]
    assert [r["value"] for r in rows] == [r["value"] for r in again]
    assert manifest["memory"]["peak_rss_bytes"] > 0
    names = [n for n in manifest["parameters"]] and manifest["parameters"]["total"]
    assert names > 0


@pytest.mark.parametrize("method", ["false1", "false2"])
def test_false_vfl_refuses_embedded_columns_in_one_line(tmp_path, method):
    path = write_ctr(tmp_path, rows=600)
    with pytest.raises(VFLBenchError, match="Gaussian likelihood"):
        _run(path, method, labeled=400, aligned=100)


def test_the_inversion_attack_refuses_embedded_columns_with_the_reason(tmp_path):
    path = write_ctr(tmp_path, rows=600)
    with pytest.raises(VFLBenchError, match="embedded categorical"):
        _run(path, "svfl", attack="inversion:known=0.1")


@pytest.mark.slow
def test_embeddings_learn_the_signal_that_dropping_the_categoricals_loses(tmp_path):
    path = write_ctr(tmp_path, rows=6000, user_levels=2000, ad_levels=80)
    (tmp_path / "numeric.yaml").write_text("user_side: [f0, f1]\nad_side: [f2, f3]\nsite_side: [f4, f5]\n")

    def acc(rows):
        return next(r["value"] for r in rows if r["metric"] == "accuracy" and r["test_missing"] == "none")

    emb = acc(_run(path, "svfl", hp={"epochs": 6})[0])
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.pipeline import execute

    cfg = RunConfig(
        dataset=f"csv:{path}",
        method="svfl",
        partitioner="columns",
        data_options={"target": "click", "drop": "user,ad,site"},
        partition_options={"file": str(tmp_path / "numeric.yaml")},
        hp={"epochs": 6},
        settings={"parties": 3, "train_missing": "mcar:0.3", "test_missing": ["none", "mcar:0.5"]},
    )
    dropped = acc(execute(resolve(cfg), device="cpu")[0])
    assert emb > dropped + 3.0, (emb, dropped)


@pytest.mark.slow
def test_a_pack_of_runs_with_embedded_columns_gives_each_runs_numbers(tmp_path):
    from dataclasses import replace

    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.pipeline import execute, execute_pack

    path = write_ctr(tmp_path, rows=1200)
    runs = []
    for seed in (0, 1):
        cfg = RunConfig(
            dataset=f"csv:{path}",
            method="laser",
            partitioner="columns",
            data_options={"target": "click"},
            partition_options={"file": str(tmp_path / "ctr_parties.yaml")},
            hp={"epochs": 2},
            settings={"parties": 3, "train_missing": "mcar:0.3", "test_missing": ["none"], "seed": seed},
        )
        runs.append(resolve(cfg))
    packed = execute_pack(runs, device="cpu")
    for run, (rows, _m) in zip(runs, packed, strict=True):
        alone = execute(replace(run), device="cpu")[0]
        np.testing.assert_allclose([r["value"] for r in rows], [r["value"] for r in alone], rtol=0, atol=1e-9)


def test_the_ctr_generator_records_its_known_signal(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "t.csv"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_ctr_table.py"), "--rows", "2000", "--out", str(out)],
        check=True,
        capture_output=True,
    )
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["synthetic"] is True and meta["rows"] == 2000
    assert meta["bayes_accuracy"] > meta["bayes_accuracy_numeric_only"] > meta["majority_accuracy"] - 0.05
    assert (tmp_path / "t_parties.yaml").exists() and (tmp_path / "t_parties_numeric.yaml").exists()


# ----------------------------------------------------------------------------- Criteo and Avazu


def write_criteo(path: Path, rows: int = 3000, seed: int = 0) -> None:
    """A small train.txt in the official Kaggle layout: tab-separated, no header, label, I1..I13, C1..C26."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(rows):
        ints = [("" if rng.random() < 0.1 else str(int(rng.integers(-2, 500)))) for _ in range(13)]
        cats = []
        for j in range(26):
            levels = 4 if j % 5 == 0 else 400  # some columns with few levels, most with many
            cats.append("" if rng.random() < 0.05 else f"{int(rng.integers(0, levels)) * 2654435761 % 2**32:08x}")
        label = int(rng.random() < 0.25 + 0.5 * (cats[1] < "80000000"))
        lines.append("\t".join([str(label), *ints, *cats]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def write_avazu(path: Path, rows: int = 2000, seed: int = 0) -> None:
    """A small train.gz in the official Kaggle layout: CSV with a header, id, click, hour (YYMMDDHH), categoricals."""
    import gzip

    from vflbench.data.datasets.clicks import AVAZU_COLUMNS

    rng = np.random.default_rng(seed)
    out = [",".join(AVAZU_COLUMNS)]
    for i in range(rows):
        hour = f"1410{21 + i % 10:02d}{i % 24:02d}"
        vals = [str(10**19 - i), str(int(rng.random() < 0.17)), hour]
        vals += [f"{int(rng.integers(0, 70 if j % 3 else 5)):x}" for j in range(len(AVAZU_COLUMNS) - 3)]
        out.append(",".join(vals))
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("\n".join(out) + "\n")


def test_criteo_reads_the_official_layout_sampled_and_capped(tmp_data):
    from vflbench.data.datasets import load_dataset

    write_criteo(tmp_data / "criteo" / "train.txt")
    ds = load_dataset("criteo", {"rows": 2000})
    pre = ds.preprocessing
    assert len(ds.y_train) + len(ds.y_test) == 2000 and ds.n_classes == 2 and ds.info.positive_class == 1
    assert pre["sample"]["rows_kept"] == 2000
    cols = pre["columns"]
    assert [cols[f"I{i}"]["kind"] for i in range(1, 14)] == ["numeric"] * 13
    assert cols["C1"]["encoding"] == "onehot" and cols["C2"]["encoding"] == "embedding"  # 4 levels / ~400
    assert len(ds.embedded) == sum(1 for j in range(26) if j % 5) and ds.info.shape == (ds.x_train.shape[1],)
    # a 50% sample: about half the rows, the same ones for the same seed, other ones for another
    a = load_dataset("criteo", {"rows": 0, "fraction": 0.5, "sample_seed": 1})
    b = load_dataset("criteo", {"rows": 0, "fraction": 0.5, "sample_seed": 1})
    c = load_dataset("criteo", {"rows": 0, "fraction": 0.5, "sample_seed": 2})
    n = a.preprocessing["sample"]["rows_kept"]
    assert 1350 < n < 1650 and np.array_equal(a.x_train, b.x_train)
    assert not np.array_equal(a.y_train[:100], c.y_train[:100]) or n != c.preprocessing["sample"]["rows_kept"]
    with pytest.raises(VFLBenchError, match="fraction must be in"):
        load_dataset("criteo", {"fraction": 1.5})


def test_criteo_counts_are_log_transformed_before_scaling(tmp_data):
    from vflbench.data.datasets.clicks import CRITEO_COLUMNS, load_criteo
    from vflbench.data.datasets.registry import DATASETS, resolve_options

    write_criteo(tmp_data / "criteo" / "train.txt", rows=500)
    opts = resolve_options(DATASETS.get("criteo"), {"scaler": "none", "rows": 0})
    ds = load_criteo(tmp_data / "criteo", opts)
    raw = pd.read_csv(tmp_data / "criteo" / "train.txt", sep="\t", header=None, names=CRITEO_COLUMNS)
    x = np.concatenate([ds.x_train, ds.x_test])
    j = ds.feature_names.index("I3")
    want = np.log1p(np.maximum(raw["I3"].to_numpy(float), 0))
    med = np.nanmedian(np.log1p(np.maximum(raw["I3"].to_numpy(float), 0)))  # about: imputed cells differ
    assert np.isclose(np.sort(x[:, j])[-1], np.nanmax(want), rtol=1e-6) and med >= 0
    assert np.all(x[:, j] >= 0)


def test_avazu_reads_the_kaggle_file_and_splits_the_hour(tmp_data):
    from vflbench.data.datasets import load_dataset

    write_avazu(tmp_data / "avazu" / "train.gz")
    ds = load_dataset("avazu", {"rows": 1500})
    cols = ds.preprocessing["columns"]
    assert "id" not in cols and "hour" not in cols and "click" not in cols
    assert cols["hour_of_day"]["encoding"] == "onehot" and cols["hour_of_day"]["encoded_width"] == 24
    assert cols["weekday"]["encoded_width"] == 7
    assert cols["site_id"]["encoding"] == "embedding" and cols["C1"]["encoding"] == "onehot"
    assert len(ds.y_train) + len(ds.y_test) == 1500


def test_click_logs_missing_say_where_to_get_them(tmp_data):
    from vflbench.core.errors import DataUnavailableError
    from vflbench.data.datasets import load_dataset

    with pytest.raises(DataUnavailableError, match="criteo"):
        load_dataset("criteo", download=False)
    with pytest.raises(DataUnavailableError, match="avazu"):
        load_dataset("avazu", download=False)


def test_an_official_tar_archive_is_extracted_member_by_member(tmp_path, monkeypatch):
    import io
    import tarfile

    from vflbench.data.datasets import fetch

    src = tmp_path / "dac.tar.gz"
    with tarfile.open(src, "w:gz") as tar:
        for name, body in (("readme.txt", b"hello"), ("train.txt", b"1\t2\n0\t3\n")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))

    def download(url, dst, timeout=30.0):
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())

    monkeypatch.setattr(fetch, "_download", download)
    v = fetch.Variant(
        "official", (fetch.RawFile("train.txt"),), urls=("https://example.org/dac.tar.gz",), extract_zip=True
    )
    fetch._fetch_url_variant(tmp_path / "ds", v)
    assert (tmp_path / "ds" / "train.txt").read_bytes() == b"1\t2\n0\t3\n"


@pytest.mark.parametrize("name, writer, file", [("criteo", "criteo", "train.txt"), ("avazu", "avazu", "train.gz")])
def test_a_click_log_runs_from_the_command_line_with_its_parties_file(tmp_data, tmp_path, name, writer, file):
    from typer.testing import CliRunner

    from vflbench.cli import app

    (write_criteo if writer == "criteo" else write_avazu)(tmp_data / name / file, rows=1200)
    parties = ROOT / "experiments" / "clicks" / f"{name}_parties.yaml"
    r = CliRunner().invoke(
        app,
        [
            "run", "--dataset", name, "--data-opt", "rows=1000", "--partitioner", "columns",
            "--part-opt", f"file={parties}", "--parties", "3", "--method", "laser", "--epochs", "1",
            "--train-missing", "mcar:0.3", "--test-missing", "none,mcar:0.5", "--out", str(tmp_path / "out"), "--quiet",
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    manifest = json.loads(next((tmp_path / "out").rglob("manifest.json")).read_text())
    assert manifest["partition"]["widths"] and len(manifest["partition"]["widths"]) == 3
    assert manifest["memory"]["peak_rss_bytes"] > 0
    assert manifest["data"]["preprocessing"]["sample"]["rows_kept"] == 1000


@pytest.mark.parametrize("mechanism", ["pbm:b=32,beta=0.2", "ldp:sigma=0.5"])
def test_a_mechanism_at_the_boundary_wraps_a_bottom_model_with_embeddings(tmp_path, mechanism):
    path = write_ctr(tmp_path, rows=900)
    method = "sum" if mechanism.startswith("pbm") else "laser"
    rows, manifest = _run(path, method, mechanism=mechanism)[:2]
    assert manifest["privacy"] and any(r["metric"] == "accuracy" for r in rows)
    assert manifest["parameters"]["total"] > 3 * 16  # the tables are parameters of the parties' models


def test_blocks_that_cannot_fit_are_refused_before_they_are_stacked(monkeypatch):
    from types import SimpleNamespace

    from vflbench.data.datasets import encoding as enc
    from vflbench.data.partitioners import Partition
    from vflbench.training.inputs import check_blocks_fit

    # three parties, one of them with a 2,002-column one-hot block: stacked, each is padded to 2,002 columns
    part = Partition("features", [np.arange(2), np.arange(2, 2004), np.arange(2004, 2006)], "columns")
    prep = SimpleNamespace(partition=part)
    need = 4 * 3 * 100_000 * 2002
    monkeypatch.setattr(enc, "available_memory", lambda: need + 1)
    check_blocks_fit(prep, 100_000)  # fits
    monkeypatch.setattr(enc, "available_memory", lambda: need - 1)
    with pytest.raises(VFLBenchError, match=r"blocks need about 2\.2 GB .* zero-padded to the widest, block 1's"):
        check_blocks_fit(prep, 100_000)


class _Store:
    """A rendezvous store's check/get/set in a dict (what Wire's long phases use)."""

    def __init__(self):
        self.d = {}

    def set(self, k, v):
        self.d[k] = v.encode() if isinstance(v, str) else v

    def get(self, k):
        return self.d[k]

    def check(self, keys):
        return all(k in self.d for k in keys)


def test_a_long_phase_waits_while_the_other_side_beats_and_gives_up_when_it_stops():
    import threading
    import time

    from vflbench.federation.wire import Wire
    from vflbench.runs.faults import PartyFailed

    store = _Store()
    server, party = Wire(0, 2, timeout_s=0.6), Wire(1, 2, timeout_s=0.6)
    for w in (server, party):
        w.store, w.run_key = store, "k"
    party.BEAT_S = 0.05

    def slow_answer():  # a party that computes for 2 s (longer than the timeout) and then announces
        with party.beating():
            time.sleep(2.0)
            party.announce("align/answer/0")

    t = threading.Thread(target=slow_answer)
    t0 = time.monotonic()
    t.start()
    assert server.await_any({"align/answer/0": 1}, "answering") == "align/answer/0"
    assert time.monotonic() - t0 > 1.9  # it waited past its timeout because the party kept beating
    t.join()
    # a party that stops beating (and never announces) is lost after the timeout
    t0 = time.monotonic()
    with pytest.raises(PartyFailed, match=r"Lost party 0 \(rank 1\) while answering: no sign of life"):
        server.await_any({"align/never": 1}, "answering")
    assert 0.5 < time.monotonic() - t0 < 3.0


def test_a_peer_that_beats_without_progress_is_reported_stuck_with_its_phase_within_the_bound():
    """The beat proves progress, not only life: a party whose heartbeat thread goes on while its main thread makes no
    progress (a deadlock, a thrashing process) is reported by name and phase within STALL_FACTOR x --timeout; one
    that advances its step counter is waited for, however long it computes; two processes waiting for each other
    are a deadlock, reported at once."""
    import threading
    import time

    from vflbench.federation.wire import Wire
    from vflbench.runs.faults import PartyFailed

    store = _Store()
    server, party = Wire(0, 2, timeout_s=0.2), Wire(1, 2, timeout_s=0.2)
    for w in (server, party):
        w.store, w.run_key = store, "k"
        w.BEAT_S = 0.05
    assert server.stall_s == pytest.approx(1.0)
    stop = threading.Event()

    def stuck():  # alive (the beat goes on) but its main thread never advances
        party.advance("answering the PSI request")
        with party.beating():
            stop.wait(10)

    t = threading.Thread(target=stuck)
    t.start()
    t0 = time.monotonic()
    with pytest.raises(PartyFailed, match=r"party 0 \(rank 1\) is alive but stuck while answering: .*"
                       r"step 1 \(answering the PSI request\) for 1s \(the bound: 5 x --timeout = 1s\)"):  # fmt: skip
        server.await_any({"align/answer/0": 1}, "answering")
    took = time.monotonic() - t0
    assert 0.9 < took < 2.0, took
    stop.set()
    t.join()

    # the same length of work with progress: waited for, not reported
    def working():
        with party.beating():
            for i in range(30):
                time.sleep(0.05)
                party.advance(f"chunk {i}")
            party.announce("align/answer/0")

    t = threading.Thread(target=working)
    t.start()
    assert server.await_any({"align/answer/0": 1}, "answering") == "align/answer/0"
    t.join()

    # each waits for the other: a deadlock, named at once (not after the stall bound)
    stop.clear()

    def waits_for_the_server():
        with party.beating():
            try:
                party.await_any({"align/request": 0}, "blinding the label side's IDs")
            except PartyFailed:
                pass

    t = threading.Thread(target=waits_for_the_server)
    t0 = time.monotonic()
    t.start()
    with server.beating(), pytest.raises(PartyFailed, match=r"party 0 \(rank 1\) and this process \(the server\) wait"):
        server.await_any({"align/never": 1}, "answering")
    assert time.monotonic() - t0 < 0.9
    t.join()


def test_the_memory_check_counts_embedding_tables_and_their_optimizer_state(tmp_path, monkeypatch):
    """A click-log vocabulary: the embedding tables (and their dense gradient, Adam's moments and the update's
    temporaries) are what fill memory, not the MLPs; the refusal before allocation counts them and names the fix."""
    from vflbench.core import limits
    from vflbench.runs.config import RunConfig, resolve

    rng = np.random.default_rng(0)
    n = 3000
    df = pd.DataFrame({"a": rng.standard_normal(n), "b": rng.standard_normal(n), "y": rng.integers(0, 2, n)})
    df["user"] = [f"u{i}" for i in rng.integers(0, 2500, n)]
    df.to_csv(tmp_path / "t.csv", index=False)
    cfg = dict(dataset=f"csv:{tmp_path / 't.csv'}", method="svfl", settings={"parties": 3})
    opts = {"target": "y", "min_count": 1, "embed_dim": 16}
    from vflbench.data.datasets.table import load_table_dataset

    run = resolve(RunConfig(**cfg, data_options=opts))  # fits on this machine
    tables = list(load_table_dataset(f"csv:{tmp_path / 't.csv'}", run.data_options).embedded.values())
    assert tables and tables[0][1] == 16
    need = 4 * 6 * 2 * tables[0][0] * 16  # bytes the tables alone need
    monkeypatch.setattr(limits, "machine_memory", lambda: int(need * 1.5))  # the MLPs fit; the tables do not
    with pytest.raises(VFLBenchError, match=r"embedding tables .* the largest .* x 16.*hash_buckets=N"):
        resolve(RunConfig(**cfg, data_options=opts))
