"""MIMIC-IV: credentialed data the user must process and supply (no public pipeline exists).

Format, ``data/mimic4/mimic4.npz`` with arrays ``x_train [n, D]``, ``y_train [n]``, ``x_test``,
``y_test`` (integer labels from 0) and optionally ``feature_names``; or ``data/mimic4/mimic4.csv``
with a ``split`` column (``train``/``test``), a ``label`` column, and one numeric column per feature.
The LASER-VFL paper uses binary in-hospital mortality with features split across 4 parties.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...core.errors import DataUnavailableError, VFLBenchError
from .base import Dataset, DatasetInfo
from .registry import DatasetSpec, register, split_scale

MSG = (
    "MIMIC-IV requires credentialed access (https://physionet.org/content/mimiciv/) and is never downloaded "
    "by vflbench. Process it yourself and place data/mimic4/mimic4.npz (x_train, y_train, x_test, y_test) or "
    "data/mimic4/mimic4.csv (split, label, feature columns); see `vflbench/data/datasets/mimic4.py`."
)


def available(ds_dir: Path) -> bool:
    return (ds_dir / "mimic4.npz").exists() or (ds_dir / "mimic4.csv").exists()


def fetch(ds_dir: Path, download: bool) -> dict[str, str]:
    from .fetch import sha256_file

    for f in ("mimic4.npz", "mimic4.csv"):
        if (ds_dir / f).exists():
            return {f: sha256_file(ds_dir / f)}
    raise DataUnavailableError(MSG)


def load(ds_dir: Path, opts: dict) -> Dataset:
    import pandas as pd  # lazy: listing and validating datasets must not pay for pandas

    names = None
    if (ds_dir / "mimic4.npz").exists():
        try:
            z = np.load(ds_dir / "mimic4.npz", allow_pickle=False)
            xtr, ytr, xte, yte = (z[k] for k in ("x_train", "y_train", "x_test", "y_test"))
            names = [str(n) for n in z["feature_names"]] if "feature_names" in z else None
        except (KeyError, ValueError, OSError) as e:
            raise VFLBenchError(f"data/mimic4/mimic4.npz is malformed ({e}). {MSG}") from None
    else:
        df = pd.read_csv(ds_dir / "mimic4.csv")
        if not {"split", "label"} <= set(df.columns):
            raise VFLBenchError(f"data/mimic4/mimic4.csv needs 'split' and 'label' columns. {MSG}")
        feats = [c for c in df.columns if c not in ("split", "label")]
        tr, te = df[df["split"] == "train"], df[df["split"] == "test"]
        xtr, ytr, xte, yte = (
            tr[feats].to_numpy(float),
            tr["label"].to_numpy(),
            te[feats].to_numpy(float),
            te["label"].to_numpy(),
        )
        names = feats
    ytr, yte = np.asarray(ytr, np.int64), np.asarray(yte, np.int64)
    n_classes = int(max(ytr.max(), yte.max()) + 1)
    if n_classes != 2:
        raise VFLBenchError(f"MIMIC-IV labels must be binary (0/1); found {n_classes} classes.")
    xtr, ytr, xte, yte = split_scale(
        xtr, ytr, X_test=xte, y_test=yte, test_size=0, split_seed=0, stratify=False, scaler=opts["scaler"]
    )
    info = DatasetInfo(**{**INFO.__dict__, "shape": (xtr.shape[1],)})
    return Dataset(info, xtr, ytr, xte, yte, feature_names=names)


INFO = DatasetInfo(
    name="mimic4",
    title="MIMIC-IV (user-processed, in-hospital mortality)",
    kind="tabular",
    n_classes=2,
    shape=(0,),
    source="https://physionet.org/content/mimiciv/",
    license="PhysioNet Credentialed Health Data License 1.5.0",
    citation="Johnson et al. (2023), Scientific Data 10",
    positive_class=1,
)
register(
    DatasetSpec(
        INFO,
        load,
        defaults={"scaler": "standard"},
        option_help={"scaler": "standard | minmax | quantile | none"},
        fetcher=fetch,
        available_fn=available,
    )
)
