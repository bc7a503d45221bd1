"""UCI Phishing Websites (ARFF, 30 nominal attributes in {-1,0,1}, Result in {-1,1})."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import VFLBenchError
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
    """Minimal ARFF reader for numeric/nominal-numeric data (tolerates ``{ -1,1 }`` and CRLF)."""
    names: list[str] = []
    rows: list[list[float]] = []
    in_data = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            s = line.strip()
            if not s or s.startswith("%"):
                continue
            low = s.lower()
            if not in_data:
                if low.startswith("@attribute"):
                    names.append(s.split()[1])
                elif low.startswith("@data"):
                    in_data = True
                continue
            try:
                rows.append([float(v) for v in s.split(",")])
            except ValueError:
                raise VFLBenchError(f"{path}: non-numeric data row {s[:40]!r}; the file is corrupt.") from None
    arr = np.asarray(rows, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != len(names) or not names:
        raise VFLBenchError(f"{path}: data rows do not match the {len(names)} declared attributes; the file is corrupt.")
    return names, arr


def load(ds_dir: Path, opts: dict) -> Dataset:
    names, arr = read_arff(ds_dir / ARFF)
    if names[-1] != "Result" or arr.shape[1] != 31:
        raise VFLBenchError(f"{ds_dir / ARFF} is not the UCI phishing file (expected 30 attributes + Result).")
    X, y = arr[:, :-1], (arr[:, -1] > 0).astype(np.int64)
    Xtr, ytr, Xte, yte = split_scale(X, y, test_size=opts["test_size"], split_seed=opts["split_seed"], stratify=True, scaler=opts["scaler"])
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
        option_help={"test_size": "held-out fraction (stratified)", "split_seed": "split random_state", "scaler": "none | standard | minmax"},
    )
)
