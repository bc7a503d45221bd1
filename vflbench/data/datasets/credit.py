"""UCI default of credit card clients (Yeh & Lien 2009): LASER-VFL's Credit.

The authors' preprocessing is not public. Defaults follow the recommended recipe (23 attributes in
UCI order, stratified 80/20 split with a fixed split seed, StandardScaler fitted on train); every
choice is an option recorded in the manifest, so alternatives can be swept.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...core.errors import VFLBenchError
from .base import Dataset, DatasetInfo
from .fetch import RawFile, Variant
from .registry import DatasetSpec, register, split_scale

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = (
    ["LIMIT_BAL", "SEX", "EDUCATION", "MARRIAGE", "AGE", "PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"]
    + [f"BILL_AMT{i}" for i in range(1, 7)]
    + [f"PAY_AMT{i}" for i in range(1, 7)]
)
LABEL = "default payment next month"

XLS = "default of credit card clients.xls"
CSV_GZ = "default of credit card clients.csv.gz"

VARIANTS = (
    # the official file (two header rows: X1..X23,Y then the names)
    Variant(
        "official-xls",
        (RawFile(XLS),),
        mirror_dir="credit_default",
        urls=(
            "https://archive.ics.uci.edu/ml/machine-learning-databases/00350/default%20of%20credit%20card%20clients.xls",
        ),
    ),
    # complete CSV export of the xls (one header row, CR line endings), gzipped
    Variant(
        "csv-export",
        (
            RawFile(
                CSV_GZ, "0dd31d641b1f0ca0c642a5d1d7c20fce3dd16a116a07a0aba081829e6a021461", sha256_of_uncompressed=True
            ),
        ),
        mirror_dir="credit_default",
    ),
)


def read_raw(ds_dir: Path) -> tuple[np.ndarray, list[str], dict[str, str] | None]:
    """Parse the raw file once; later loads read a small .npy cache, verified against the sha256 of
    the source file and of its own bytes (a cache that fails either check is rebuilt with a warning).
    Returns the table as float64 (ID, the 23 attributes, the label), its columns, and what the manifest records
    about the cache. A cached table needs no pandas."""
    from .fetch import load_verified_cache, sha256_file, write_verified_cache

    cols = ["ID"] + COLUMNS + [LABEL]
    src = ds_dir / XLS if (ds_dir / XLS).exists() else ds_dir / CSV_GZ
    if not src.exists():
        return _table(_parse(ds_dir), cols), cols, None
    source = sha256_file(src)
    cache = ds_dir / f".parsed-v3-{src.suffix.strip('.')}-{source[:16]}.npy"
    arr, info = load_verified_cache(cache, source, "credit")
    if arr is not None and arr.shape == (30000, len(cols)):
        return arr, cols, info
    arr = _table(_parse(ds_dir), cols)
    info = {**write_verified_cache(cache, arr, source), "status": info.get("status", "built")}
    return arr, cols, info


def _table(df, cols: list[str]) -> np.ndarray:
    if "ID" not in df.columns:
        df.insert(0, "ID", np.arange(1, len(df) + 1))
    return df[cols].to_numpy(np.float64)


def _parse(ds_dir: Path) -> pd.DataFrame:
    import pandas as pd  # lazy: listing and validating datasets must not pay for pandas

    src = ds_dir / XLS if (ds_dir / XLS).exists() else ds_dir / CSV_GZ
    if not src.exists():
        raise VFLBenchError(f"No Credit file under {ds_dir}; run `vflbench data fetch credit`.")
    try:
        df = pd.read_excel(src, header=1) if src.suffix == ".xls" else pd.read_csv(src)
    except Exception as e:  # xlrd, pandas and gzip raise many types on damaged files
        from .fetch import damaged

        damaged(src, f"could not be read: {type(e).__name__}: {e}"[:300], "credit", ds_dir)
    df = df.rename(columns={"default.payment.next.month": LABEL})
    missing = [c for c in COLUMNS + [LABEL] if c not in df.columns]
    if missing:
        raise VFLBenchError(
            f"Credit file under {ds_dir} lacks columns {missing}; the file is corrupt or not the UCI dataset."
        )
    if len(df) != 30000:
        raise VFLBenchError(
            f"Credit file under {ds_dir} has {len(df)} rows, expected 30000; delete it and fetch again."
        )
    return df


def load(ds_dir: Path, opts: dict) -> Dataset:
    arr, table_cols, cache = read_raw(ds_dir)
    if opts["columns"] == "all":
        cols = COLUMNS
    else:
        cols = [c.strip() for c in str(opts["columns"]).split(",")]
    bad = [c for c in cols if c not in COLUMNS]
    if bad:
        raise VFLBenchError(f"Unknown Credit columns {bad}. Known: {', '.join(COLUMNS)}.")
    split, split_info = _split_cache(ds_dir, cache, opts)
    if split is None:
        X = arr[:, [table_cols.index(c) for c in cols]]
        y = arr[:, table_cols.index(LABEL)].astype(np.int64)
        split = dict(
            zip(
                ("x_train", "y_train", "x_test", "y_test"),
                split_scale(
                    X,
                    y,
                    test_size=opts["test_size"],
                    split_seed=opts["split_seed"],
                    stratify=opts["stratify"],
                    scaler=opts["scaler"],
                ),
                strict=True,
            )
        )
        split_info = _write_split(ds_dir, cache, opts, split) or split_info
    ds = Dataset(INFO, split["x_train"], split["y_train"], split["x_test"], split["y_test"], feature_names=list(cols))
    if cache:
        ds.preprocessing["parsed_cache"] = cache
    if split_info:
        ds.preprocessing["split_cache"] = split_info
    return ds


SPLIT_OPTIONS = ("test_size", "split_seed", "stratify", "scaler", "columns")


def _split_key(cache: dict[str, str] | None, opts: dict) -> str | None:
    """The digest a split cache is known by: the source file's and the options that shape the split."""
    if not cache or "source_sha256" not in cache:
        return None
    spec = {"source": cache["source_sha256"], **{k: str(opts[k]) for k in SPLIT_OPTIONS}, "version": 1}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def _split_cache(ds_dir: Path, cache: dict[str, str] | None, opts: dict) -> tuple[dict | None, dict | None]:
    """The split and scaled arrays of these options, from a verified cache (a run then needs neither pandas nor
    scikit-learn: both cost a short run's start more than a second); None when there is none yet."""
    from .fetch import load_verified_cache

    key = _split_key(cache, opts)
    if key is None:
        return None, None
    arrays, info = load_verified_cache(ds_dir / f".split-v1-{key[:16]}.npz", key, "credit split")
    return arrays, info


def _write_split(ds_dir: Path, cache: dict[str, str] | None, opts: dict, split: dict) -> dict | None:
    from .fetch import write_verified_cache

    key = _split_key(cache, opts)
    if key is None:
        return None
    return {**write_verified_cache(ds_dir / f".split-v1-{key[:16]}.npz", split, key), "status": "built"}


INFO = DatasetInfo(
    name="credit",
    title="Default of credit card clients (UCI 350)",
    kind="tabular",
    n_classes=2,
    shape=(23,),
    source="https://archive.ics.uci.edu/dataset/350",
    license="CC BY 4.0",
    citation="Yeh & Lien (2009), Expert Systems with Applications 36(2)",
    positive_class=1,
)

register(
    DatasetSpec(
        INFO,
        load,
        VARIANTS,
        defaults={"test_size": 0.2, "split_seed": 0, "stratify": True, "scaler": "standard", "columns": "all"},
        option_help={
            "test_size": "fraction held out for test",
            "split_seed": "random_state of the stratified split (fixed across run seeds)",
            "stratify": "stratify the split by label",
            "scaler": "standard | minmax | quantile | none, fitted on train",
            "columns": "'all' (23 UCI attributes in order) or a comma list of names",
        },
    )
)
