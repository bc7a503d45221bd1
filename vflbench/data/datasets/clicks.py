"""Click logs, the tables vertical FL is used for in advertising: Criteo and Avazu, whole or sampled, their
categorical columns embedded by the parties' bottom models (:mod:`vflbench.data.datasets.encoding`).

* ``criteo``: the Kaggle Display Advertising Challenge (Criteo AI Lab, 2014), ``train.txt`` of the official
  archive: tab-separated, no header; the click label, 13 integer features ``I1``..``I13`` (counts, may be empty)
  and 26 categorical features ``C1``..``C26`` (32-bit hashes as 8 hex digits, may be empty); 45,840,617 rows over 7
  days. The integer features become ``log(1 + max(x, 0))`` (DLRM's preprocessing), then go through the table
  pipeline (median-imputed, scaled); the categoricals, with far more levels than ``embed_above``, are embedded.
* ``avazu``: the Kaggle Click-Through Rate Prediction competition (Avazu, 2014), ``train.gz``: a CSV with a header
  (``id``, ``click``, ``hour`` as YYMMDDHH, ``C1``, ``banner_pos``, site, app and device columns, ``C14``..``C21``);
  40,428,967 rows over 10 days. Kaggle serves it only after a login, so it is the user's to place
  (``data/avazu/train.gz`` or the mirror's ``avazu/``). ``id`` is dropped, ``hour`` becomes ``hour_of_day`` and
  ``weekday``, every other column is categorical (its values are codes, not quantities).

Both are read by pyarrow's streaming CSV reader, categorical columns dictionary-encoded (an integer per row, not a
Python string), and sampled while streaming: ``fraction`` keeps each row with that probability (VFLAIR's 2% sample
is ``fraction=0.02``; drawn from ``sample_seed``), ``rows`` caps the rows kept (default 1,000,000; 0: every row).

Default party split: the ``contiguous`` partitioner over the columns in file order; at ``--parties 3`` Criteo's
then gives the counts (``I1``..``I13``), ``C1``..``C13`` and ``C14``..``C26`` one party each. The parties files in
``experiments/clicks/`` split both tables by who would hold the columns (``--partitioner columns``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import VFLBenchError
from .base import Dataset, DatasetInfo
from .encoding import OPTION_DEFAULTS, OPTION_HELP
from .fetch import RawFile, Variant
from .registry import DatasetSpec, register

CRITEO_COLUMNS = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
AVAZU_COLUMNS = [
    "id",
    "click",
    "hour",
    "C1",
    "banner_pos",
    "site_id",
    "site_domain",
    "site_category",
    "app_id",
    "app_domain",
    "app_category",
    "device_id",
    "device_ip",
    "device_model",
    "device_type",
    "device_conn_type",
    *[f"C{i}" for i in range(14, 22)],
]
CHUNK = 1 << 24  # bytes a streamed block parses at once

SAMPLING_DEFAULTS: dict[str, Any] = {"rows": 1_000_000, "fraction": 1.0, "sample_seed": 0}
TABLE_DEFAULTS: dict[str, Any] = {
    "test_size": 0.2,
    "split_seed": 0,
    "scaler": "standard",
    **OPTION_DEFAULTS,
}
HELP = {
    "rows": "keep at most this many rows (after sampling; 0: every row)",
    "fraction": "keep each row with this probability while reading (VFLAIR's 2% sample: 0.02)",
    "sample_seed": "the seed of the row sample",
    "test_size": "held-out fraction of the stratified split",
    "split_seed": "random_state of the split",
    "scaler": "standard | minmax | quantile | none (numeric columns; fitted on the training split)",
    **OPTION_HELP,
}


def read_sample(
    path: Path,
    *,
    sep: str,
    names: list[str] | None,
    types: dict[str, Any],
    rows: int,
    fraction: float,
    seed: int,
    what: str,
):
    """Stream a delimited file through pyarrow, keeping each row with probability ``fraction`` (a generator from
    ``seed``), until ``rows`` rows are kept (0: no cap); a pandas frame, dictionary columns as pandas categoricals."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from ...core.progress import report

    if not 0.0 < fraction <= 1.0:
        raise VFLBenchError(f"{what}: fraction must be in (0, 1], got {fraction}.")
    if rows < 0:
        raise VFLBenchError(f"{what}: rows must be >= 0 (0: every row), got {rows}.")
    rng = np.random.default_rng(seed)
    read_opts = pacsv.ReadOptions(block_size=CHUNK, column_names=names, use_threads=True)
    try:
        reader = pacsv.open_csv(
            path,
            read_options=read_opts,
            parse_options=pacsv.ParseOptions(delimiter=sep),
            convert_options=pacsv.ConvertOptions(
                column_types=types, include_columns=list(types), strings_can_be_null=True
            ),
        )
        batches, kept = [], 0
        for batch in reader:
            if fraction < 1.0:
                batch = batch.filter(pa.array(rng.random(batch.num_rows) < fraction))
            if rows and kept + batch.num_rows > rows:
                batch = batch.slice(0, rows - kept)
            batches.append(batch)
            kept += batch.num_rows
            report(f"reading {what}", kept, rows or kept)
            if rows and kept >= rows:
                break
    except (pa.ArrowInvalid, OSError, EOFError) as e:
        raise VFLBenchError(
            f"{path} is not the official {what} file ({str(e).strip().splitlines()[0][:200]}); fetch it again with "
            f"`vflbench data fetch {what}`."
        ) from None
    if not kept:
        raise VFLBenchError(f"{path}: no rows kept (fraction={fraction}); raise fraction.")
    table = pa.Table.from_batches(batches).unify_dictionaries()
    del batches
    return table.to_pandas(split_blocks=True, self_destruct=True)


def _build(info: DatasetInfo, frame, target: str, opts: dict[str, Any]) -> Dataset:
    from dataclasses import replace

    from .table import Table, build_dataset

    o = {
        "target": target,
        "drop": "",
        "test": "",
        "categorical": "",
        "positive": "1",  # a click, whichever class is rarer
        "coerce": False,
        "keep": ",".join(c for c in frame.columns if c != target),  # never auto-drop a column of the official file
        **{k: opts[k] for k in TABLE_DEFAULTS},
    }
    ds = build_dataset(Table(info.name, frame, None, {}, info.source), o)
    ds.info = replace(info, shape=(int(ds.x_train.shape[1]),), positive_class=ds.info.positive_class)
    ds.preprocessing["sample"] = {k: opts[k] for k in SAMPLING_DEFAULTS} | {"rows_kept": int(len(frame))}
    return ds


# ----------------------------------------------------------------------------- Criteo

CRITEO = DatasetInfo(
    name="criteo",
    title="Criteo Display Advertising Challenge (Kaggle 2014): 7 days of ad clicks, 13 counts, 26 hashed categories",
    kind="tabular",
    n_classes=2,
    shape=(39,),
    source="https://ailab.criteo.com/ressources/ (Kaggle Display Advertising Challenge dataset)",
    license="Criteo's terms for the dataset (research use)",
    citation="Criteo AI Lab (2014), Display Advertising Challenge",
    positive_class=1,
    embeds=True,  # its categoricals have far more levels than embed_above
)


def load_criteo(ds_dir: Path, opts: dict[str, Any]) -> Dataset:
    import pyarrow as pa

    path = next((ds_dir / n for n in ("train.txt", "train.txt.gz") if (ds_dir / n).exists()), ds_dir / "train.txt")
    types = {"label": pa.int8()}
    types |= {f"I{i}": pa.float32() for i in range(1, 14)}
    types |= {f"C{i}": pa.dictionary(pa.int32(), pa.string()) for i in range(1, 27)}
    frame = read_sample(
        path,
        sep="\t",
        names=CRITEO_COLUMNS,
        types=types,
        rows=int(opts["rows"]),
        fraction=float(opts["fraction"]),
        seed=int(opts["sample_seed"]),
        what="criteo",
    )
    for i in range(1, 14):  # counts: log(1 + max(x, 0)), as DLRM's preprocessing (missing stays missing)
        c = f"I{i}"
        frame[c] = np.log1p(np.maximum(frame[c].to_numpy(np.float32, na_value=np.nan), 0.0))
    ds = _build(CRITEO, frame, "label", opts)
    ds.preprocessing["counts"] = "I1..I13: log(1 + max(x, 0)) (DLRM), then median-imputed and scaled"
    return ds


register(
    DatasetSpec(
        CRITEO,
        load_criteo,
        (
            Variant(
                "official",
                (RawFile("train.txt"),),
                mirror_dir="criteo",
                urls=("https://go.criteo.net/criteo-research-kaggle-display-advertising-challenge-dataset.tar.gz",),
                extract_zip=True,
            ),
            Variant("compressed", (RawFile("train.txt.gz"),), mirror_dir="criteo"),
        ),
        defaults={**SAMPLING_DEFAULTS, **TABLE_DEFAULTS},
        option_help=dict(HELP),
    )
)

# ----------------------------------------------------------------------------- Avazu

AVAZU = DatasetInfo(
    name="avazu",
    title="Avazu Click-Through Rate Prediction (Kaggle 2014): 10 days of mobile ad clicks, 22 categorical fields",
    kind="tabular",
    n_classes=2,
    shape=(23,),
    source="https://www.kaggle.com/c/avazu-ctr-prediction/data (train.gz; a Kaggle login is needed)",
    license="Kaggle competition rules (non-commercial research use)",
    citation="Avazu (2014), Click-Through Rate Prediction, Kaggle",
    positive_class=1,
    embeds=True,  # its categoricals have far more levels than embed_above
)


def load_avazu(ds_dir: Path, opts: dict[str, Any]) -> Dataset:
    import pandas as pd
    import pyarrow as pa

    path = next((ds_dir / n for n in ("train.gz", "train.csv", "train") if (ds_dir / n).exists()), ds_dir / "train.gz")
    text = pa.dictionary(pa.int32(), pa.string())
    types = {"click": pa.int8(), "hour": pa.int64()}
    types |= {c: text for c in AVAZU_COLUMNS if c not in ("id", "click", "hour")}
    frame = read_sample(
        path,
        sep=",",
        names=None,
        types=types,
        rows=int(opts["rows"]),
        fraction=float(opts["fraction"]),
        seed=int(opts["sample_seed"]),
        what="avazu",
    )
    hour = frame.pop("hour").to_numpy()
    day = pd.to_datetime((hour // 100).astype(str), format="%y%m%d", errors="coerce")
    if day.isna().any():
        raise VFLBenchError(f"{path}: column 'hour' is not YYMMDDHH in every row; the file is not the official one.")
    frame.insert(1, "hour_of_day", pd.Categorical((hour % 100).astype(np.int64)))
    frame.insert(2, "weekday", pd.Categorical(np.asarray(day.day_of_week, dtype=np.int64)))
    ds = _build(AVAZU, frame, "click", opts)
    ds.preprocessing["hour"] = "hour (YYMMDDHH) -> hour_of_day (0-23) and weekday (0 = Monday), both categorical"
    return ds


register(
    DatasetSpec(
        AVAZU,
        load_avazu,
        (
            Variant("official", (RawFile("train.gz"),), mirror_dir="avazu"),
            Variant("uncompressed", (RawFile("train.csv"),), mirror_dir="avazu"),
        ),
        defaults={**SAMPLING_DEFAULTS, **TABLE_DEFAULTS},
        option_help=dict(HELP),
    )
)
