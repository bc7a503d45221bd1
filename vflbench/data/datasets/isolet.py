"""UCI ISOLET (spoken letters): official ``isolet1+2+3+4.data`` / ``isolet5.data`` or the .mat mirror.

The official files are comma-separated, 617 features then the class (1..26, written ``1.``); UCI
serves them compressed (``.Z``), and plain or gzip copies are accepted too. The mirror holds Deng
Cai's MATLAB re-packaging (``Isolet1..4.mat`` = train, ``isolet5.mat`` = test) with the same rows.
Features are z-scored with training statistics by default (FALSE-VFL normalises every dataset).
"""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
from pathlib import Path

import numpy as np

from ...core.errors import VFLBenchError
from .base import Dataset, DatasetInfo
from .fetch import RawFile, Variant
from .registry import DatasetSpec, register, split_scale

UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/isolet/"
MAT_FILES = (
    RawFile("Isolet1.mat", "f643c3cbd2669e1e9a6110943fcf538cfc209db384f3387d33acbbe550376765"),
    RawFile("Isolet2.mat", "f69ca6b76d196a5778d1883ec7f18a2b97c620507675cd229c4e65fbb28c9037"),
    RawFile("Isolet3.mat", "1d1f991f0a1b9e9decd73779ff595d7f66e4da47cac655f71fd350d2028106b7"),
    RawFile("Isolet4.mat", "c676e6d11ef3b6ca17cd38c3cd9a44299fb5681a5ed8460adf821074d0af4fcd"),
    RawFile("isolet5.mat", "a3849f6c0a9d0e0ed55dde15eb8ae8f4ba94df79b9fc260d00c28b8695d48600"),
)
TRAIN, TEST = "isolet1+2+3+4.data", "isolet5.data"

VARIANTS = (
    Variant("official", (RawFile(TRAIN), RawFile(TEST)), mirror_dir="isolet"),
    Variant("official-gz", (RawFile(TRAIN + ".gz"), RawFile(TEST + ".gz")), mirror_dir="isolet"),
    Variant(
        "official-Z",
        (RawFile(TRAIN + ".Z"), RawFile(TEST + ".Z")),
        mirror_dir="isolet",
        urls=(UCI + TRAIN + ".Z", UCI + TEST + ".Z"),
    ),
    Variant("mat", MAT_FILES, mirror_dir="isolet"),
)


def _read_bytes(path: Path) -> bytes:
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            return f.read()
    if path.suffix == ".Z":  # unix `compress`; gzip decodes it
        if shutil.which("gzip") is None:
            raise VFLBenchError(
                f"Reading {path.name} needs the `gzip` program (it decodes .Z files); install gzip or decompress it "
                "by hand."
            )
        return subprocess.run(["gzip", "-dc", str(path)], check=True, capture_output=True).stdout
    return path.read_bytes()


def read_data_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        arr = np.loadtxt(io.BytesIO(_read_bytes(path)), delimiter=",", dtype=np.float64, ndmin=2)
    except (ValueError, subprocess.CalledProcessError, OSError) as e:
        raise VFLBenchError(f"{path} is not a readable ISOLET data file ({e}); delete it and fetch again.") from None
    if arr.shape[1] != 618:
        raise VFLBenchError(f"{path} has {arr.shape[1]} columns, expected 618 (617 features + class).")
    return arr[:, :617], arr[:, 617].astype(np.int64) - 1


def read_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    from scipy.io import loadmat

    try:
        m = loadmat(path)
        return np.asarray(m["fea"], np.float64), np.asarray(m["gnd"]).ravel().astype(np.int64) - 1
    except Exception as e:  # scipy raises several types on corrupt files
        raise VFLBenchError(f"{path} is not a readable ISOLET .mat file ({e}); delete it and fetch again.") from None


def load(ds_dir: Path, opts: dict) -> Dataset:
    for suffix in ("", ".gz", ".Z"):
        if (ds_dir / (TRAIN + suffix)).exists() and (ds_dir / (TEST + suffix)).exists():
            Xtr, ytr = read_data_file(ds_dir / (TRAIN + suffix))
            Xte, yte = read_data_file(ds_dir / (TEST + suffix))
            break
    else:
        parts = [read_mat(ds_dir / f.path) for f in MAT_FILES]
        Xtr = np.concatenate([p[0] for p in parts[:4]])
        ytr = np.concatenate([p[1] for p in parts[:4]])
        Xte, yte = parts[4]
    if ytr.min() < 0 or ytr.max() > 25:
        raise VFLBenchError("ISOLET labels outside 1..26; the files are corrupt.")
    Xtr, ytr, Xte, yte = split_scale(
        Xtr, ytr, X_test=Xte, y_test=yte, test_size=0, split_seed=0, stratify=False, scaler=opts["scaler"]
    )
    return Dataset(INFO, Xtr, ytr, Xte, yte, feature_names=[f"f{i}" for i in range(617)])


INFO = DatasetInfo(
    name="isolet",
    title="ISOLET spoken letter recognition (UCI 54)",
    kind="tabular",
    n_classes=26,
    shape=(617,),
    source="https://archive.ics.uci.edu/dataset/54/isolet",
    license="CC BY 4.0",
    citation="Fanty & Cole (1991), NIPS 3",
)
register(
    DatasetSpec(
        INFO,
        load,
        VARIANTS,
        defaults={"scaler": "standard"},
        option_help={"scaler": "standard | minmax | quantile | none"},
    )
)
