"""UCI Phishing Websites (ARFF, 30 nominal attributes in {-1,0,1}, Result in {-1,1})."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...core.errors import VFLBenchError
from .base import Dataset, DatasetInfo
from .fetch import RawFile, Variant
from .registry import DatasetSpec, register, split_scale

ARFF = "Training Dataset.arff"
VARIANTS = (
    Variant(
        "official",
        (RawFile(ARFF, "3bcf93b1612306537ee2737751f1bac185b2a77886ab376644c3bf0c7f7cb3e6"),),
        mirror_dir="phishing",
        urls=("https://archive.ics.uci.edu/ml/machine-learning-databases/00327/Training%20Dataset.arff",),
    ),
)


def read_arff(path: Path) -> tuple[list[str], np.ndarray]:
    """The ARFF file through ``scipy.io.arff`` (via the table reader): attribute names and a float
    array of the nominal values {-1, 0, 1}."""
    from .reading import read_arff_frame  # lazy: pandas only when the file is read

    try:
        df = read_arff_frame(path)
        arr = df.astype(float).to_numpy(np.float64)
    except (VFLBenchError, ValueError, TypeError) as e:
        raise VFLBenchError(f"{path} is not the UCI phishing ARFF file ({e}); the file is corrupt.") from None
    return [str(c) for c in df.columns], arr


def load(ds_dir: Path, opts: dict) -> Dataset:
    names, arr = read_arff(ds_dir / ARFF)
    if names[-1] != "Result" or arr.shape[1] != 31:
        raise VFLBenchError(f"{ds_dir / ARFF} is not the UCI phishing file (expected 30 attributes + Result).")
    X, y = arr[:, :-1], (arr[:, -1] > 0).astype(np.int64)
    Xtr, ytr, Xte, yte = split_scale(
        X, y, test_size=opts["test_size"], split_seed=opts["split_seed"], stratify=True, scaler=opts["scaler"]
    )
    return Dataset(INFO, Xtr, ytr, Xte, yte, feature_names=names[:-1])


INFO = DatasetInfo(
    name="phishing",
    title="Phishing websites (UCI 327)",
    kind="tabular",
    n_classes=2,
    shape=(30,),
    source="https://archive.ics.uci.edu/dataset/327/phishing+websites",
    license="CC BY 4.0",
    citation="Mohammad, Thabtah & McCluskey (2012), ICITST",
    positive_class=1,
)
register(
    DatasetSpec(
        INFO,
        load,
        VARIANTS,
        defaults={"test_size": 0.2, "split_seed": 0, "scaler": "none"},
        option_help={
            "test_size": "held-out fraction (stratified)",
            "split_seed": "split random_state",
            "scaler": "none | standard | minmax",
        },
    )
)
