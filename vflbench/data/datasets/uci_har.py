"""UCI HAPT (smartphone activities with postural transitions) and UCI HAR (PBM-VFL's "Activity").

Both ship whitespace-separated text matrices in the official zips: HAPT as ``Train/X_train.txt``,
``Train/y_train.txt``, ``Test/X_test.txt``, ``Test/y_test.txt`` (561 features, labels 1..12); HAR as
``train/X_train.txt`` ... (561 features, labels 1..6). No scaling by default: the UCI features are
already in [-1, 1] (LASER-VFL uses them raw).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...core.errors import VFLBenchError
from .base import Dataset, DatasetInfo
from .fetch import RawFile, Variant
from .registry import DatasetSpec, register, split_scale


def _read_matrix(path: Path, n_cols: int | None = None) -> np.ndarray:
    try:
        arr = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except ValueError as e:
        raise VFLBenchError(
            f"{path} is not a whitespace-separated numeric matrix ({e}); the file is corrupt."
        ) from None
    if n_cols is not None and arr.shape[1] != n_cols:
        raise VFLBenchError(
            f"{path} has {arr.shape[1]} columns, expected {n_cols}; the file is corrupt or not the official one."
        )
    return arr


def _make_loader(info: DatasetInfo, train_dir: str, test_dir: str, n_features: int):
    def load(ds_dir: Path, opts: dict) -> Dataset:
        Xtr = _read_matrix(ds_dir / train_dir / "X_train.txt", n_features)
        Xte = _read_matrix(ds_dir / test_dir / "X_test.txt", n_features)
        ytr = _read_matrix(ds_dir / train_dir / "y_train.txt", 1)[:, 0].astype(np.int64) - 1
        yte = _read_matrix(ds_dir / test_dir / "y_test.txt", 1)[:, 0].astype(np.int64) - 1
        for y, which in ((ytr, "train"), (yte, "test")):
            if len(y) and (y.min() < 0 or y.max() >= info.n_classes):
                raise VFLBenchError(f"{info.name} {which} labels outside 1..{info.n_classes}; the file is corrupt.")
        if len(Xtr) != len(ytr) or len(Xte) != len(yte):
            raise VFLBenchError(f"{info.name}: X and y files differ in length; the files are corrupt.")
        Xtr, ytr, Xte, yte = split_scale(
            Xtr, ytr, X_test=Xte, y_test=yte, test_size=0, split_seed=0, stratify=False, scaler=opts["scaler"]
        )
        return Dataset(info, Xtr, ytr, Xte, yte, feature_names=[f"f{i}" for i in range(n_features)])

    return load


HAPT = DatasetInfo(
    name="hapt",
    title="Smartphone-based recognition of human activities and postural transitions (UCI 341)",
    kind="tabular",
    n_classes=12,
    shape=(561,),
    source="https://archive.ics.uci.edu/dataset/341",
    license="CC BY 4.0",
    citation="Reyes-Ortiz et al. (2016), Neurocomputing 171",
)
HAPT_FILES = tuple(RawFile(p) for p in ("Train/X_train.txt", "Train/y_train.txt", "Test/X_test.txt", "Test/y_test.txt"))
register(
    DatasetSpec(
        HAPT,
        _make_loader(HAPT, "Train", "Test", 561),
        (
            Variant(
                "official",
                HAPT_FILES,
                mirror_dir="hapt",
                urls=("https://archive.ics.uci.edu/ml/machine-learning-databases/00341/HAPT%20Data%20Set.zip",),
                extract_zip=True,
            ),
        ),
        defaults={"scaler": "none"},
        option_help={"scaler": "none (UCI features already in [-1,1]) | standard | minmax"},
    )
)

HAR = DatasetInfo(
    name="uci-har",
    title="Human activity recognition using smartphones (UCI 240), PBM-VFL's Activity",
    kind="tabular",
    n_classes=6,
    shape=(561,),
    source="https://archive.ics.uci.edu/dataset/240",
    license="CC BY 4.0",
    citation="Anguita et al. (2013), ESANN",
)
HAR_FILES = tuple(RawFile(p) for p in ("train/X_train.txt", "train/y_train.txt", "test/X_test.txt", "test/y_test.txt"))
register(
    DatasetSpec(
        HAR,
        _make_loader(HAR, "train", "test", 561),
        (
            Variant(
                "official",
                HAR_FILES,
                mirror_dir="uci-har",
                urls=("https://archive.ics.uci.edu/ml/machine-learning-databases/00240/UCI%20HAR%20Dataset.zip",),
                extract_zip=True,
            ),
        ),
        defaults={"scaler": "none"},
        option_help={"scaler": "none | standard | minmax"},
    )
)
