"""Offline datasets for demos and tests: scikit-learn's digits and breast cancer, and a synthetic generator."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ...core.errors import VFLBenchError
from ...core.limits import check as check_limit
from ...core.limits import check_memory
from .base import Dataset, DatasetInfo
from .registry import DatasetSpec, register, split_scale


def load_digits_images(ds_dir: Path, opts: dict) -> Dataset:
    from sklearn.datasets import load_digits

    d = load_digits()
    X = d.images.astype(np.float64) / 16.0  # [n, 8, 8] in [0, 1]
    Xtr, ytr, Xte, yte = split_scale(
        X.reshape(len(X), -1),
        d.target,
        test_size=opts["test_size"],
        split_seed=opts["split_seed"],
        stratify=True,
        scaler="none",
    )
    Xtr, Xte = Xtr.reshape(-1, 1, 8, 8), Xte.reshape(-1, 1, 8, 8)
    mean, std = Xtr.mean(), Xtr.std()
    return Dataset(DIGITS, (Xtr - mean) / std, ytr, (Xte - mean) / std, yte)


def load_breast_cancer(ds_dir: Path, opts: dict) -> Dataset:
    from sklearn.datasets import load_breast_cancer as lbc

    d = lbc()
    Xtr, ytr, Xte, yte = split_scale(
        d.data,
        d.target,
        test_size=opts["test_size"],
        split_seed=opts["split_seed"],
        stratify=True,
        scaler=opts["scaler"],
    )
    return Dataset(BREAST, Xtr, ytr, Xte, yte, feature_names=list(d.feature_names))


def make_synthetic(
    n: int, blocks: int, block_width: int, informative: int, n_classes: int, separation: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian class clusters whose means differ only in the first ``informative`` features of each block.

    Each block alone carries some signal; together the blocks carry more (the per-block class means
    are drawn independently), so methods that combine parties should beat local models.
    """
    if informative > block_width or informative < 0:
        raise VFLBenchError(f"synthetic: informative ({informative}) must be in 0..block_width ({block_width}).")
    if n_classes < 2 or blocks < 1 or n < n_classes:
        raise VFLBenchError("synthetic: need n_classes >= 2, blocks >= 1 and n >= n_classes.")
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    X = rng.standard_normal((n, blocks * block_width))
    means = rng.standard_normal((n_classes, blocks, informative)) * separation
    for b in range(blocks):
        X[:, b * block_width : b * block_width + informative] += means[y, b]
    return X, y


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"3x32x32"`` -> (3, 32, 32): channels x height x width of synthetic images."""
    try:
        dims = tuple(int(p) for p in str(text).lower().split("x"))
        if len(dims) != 3 or min(dims) < 1:
            raise ValueError
    except ValueError:
        raise VFLBenchError(f"synthetic: shape takes CxHxW such as 3x32x32 (CIFAR-10's shape), got {text!r}.") from None
    if dims[0] * dims[1] * dims[2] > 3 * 512 * 512:
        raise VFLBenchError(f"synthetic: shape {text} is larger than 3x512x512 per image; choose a smaller one.")
    return dims  # type: ignore[return-value]


def synthetic_images(opts: dict) -> Dataset:
    """``shape=CxHxW``: float32 images, a random class template (scaled by ``separation``) plus
    unit Gaussian pixels, standardised per channel on the training split. For timing image models at
    a paper's shape without its download (``shape=3x32x32`` is CIFAR-10's), and for tests."""
    c, h, w = parse_shape(opts["shape"])
    n, k = int(opts["n"]), int(opts["n_classes"])
    if k < 2 or n < k:
        raise VFLBenchError("synthetic: need n_classes >= 2 and n >= n_classes.")
    rng = np.random.default_rng(opts["data_seed"])
    y = rng.integers(0, k, size=n)
    templates = rng.standard_normal((k, c, h, w), dtype=np.float32) * np.float32(opts["separation"])
    X = rng.standard_normal((n, c, h, w), dtype=np.float32) + templates[y]
    Xtr, ytr, Xte, yte = split_scale(
        X.reshape(n, -1), y, test_size=opts["test_size"], split_seed=opts["data_seed"], stratify=True, scaler="none"
    )
    Xtr, Xte = Xtr.reshape(-1, c, h, w), Xte.reshape(-1, c, h, w)
    mean, std = Xtr.mean(axis=(0, 2, 3), keepdims=True), Xtr.std(axis=(0, 2, 3), keepdims=True)
    return Dataset(synthetic_info(opts), (Xtr - mean) / std, ytr, (Xte - mean) / std, yte)


def synthetic_info(opts: dict) -> DatasetInfo:
    """The facts of a synthetic dataset under its options (tabular blocks, or images with ``shape``),
    after checking that they fit this machine (vflbench.core.limits), before anything is generated."""
    n, k = int(opts["n"]), int(opts["n_classes"])
    check_limit("synthetic_n", n, "synthetic n")
    check_limit("n_classes", k, "synthetic n_classes")
    width = (
        math.prod(parse_shape(opts["shape"])) if opts.get("shape") else int(opts["blocks"]) * int(opts["block_width"])
    )
    check_limit("synthetic_width", width, "synthetic features per sample")
    check_memory(
        f"synthetic data of {n:,} x {width:,}", 8.0 * n * width * 2, 0.5, "lower n or the width"
    )  # float64 draws, then the split copies
    if opts.get("shape"):
        return DatasetInfo(
            **{
                **SYNTH.__dict__,
                "kind": "image",
                "n_classes": int(opts["n_classes"]),
                "shape": parse_shape(opts["shape"]),
                "title": f"Synthetic images {opts['shape']}",
            }
        )
    return DatasetInfo(
        **{
            **SYNTH.__dict__,
            "n_classes": int(opts["n_classes"]),
            "shape": (int(opts["blocks"]) * int(opts["block_width"]),),
        }
    )


def load_synthetic(ds_dir: Path, opts: dict) -> Dataset:
    if opts.get("shape"):
        return synthetic_images(opts)
    X, y = make_synthetic(
        opts["n"],
        opts["blocks"],
        opts["block_width"],
        opts["informative"],
        opts["n_classes"],
        opts["separation"],
        opts["data_seed"],
    )
    Xtr, ytr, Xte, yte = split_scale(
        X, y, test_size=opts["test_size"], split_seed=opts["data_seed"], stratify=True, scaler="standard"
    )
    return Dataset(
        synthetic_info(opts),
        Xtr,
        ytr,
        Xte,
        yte,
        feature_names=[f"b{j // opts['block_width']}_{j % opts['block_width']}" for j in range(X.shape[1])],
    )


SKL = "scikit-learn (bundled)"
DIGITS = DatasetInfo(
    "digits",
    "UCI optical digits, 8x8 images (scikit-learn)",
    "image",
    10,
    (1, 8, 8),
    SKL,
    "CC BY 4.0",
    "Alpaydin & Kaynak (1998)",
    offline=True,
)
BREAST = DatasetInfo(
    "breast_cancer",
    "Breast cancer Wisconsin diagnostic (scikit-learn)",
    "tabular",
    2,
    (30,),
    SKL,
    "CC BY 4.0",
    "Street et al. (1993)",
    offline=True,
    positive_class=1,
)
SYNTH = DatasetInfo("synthetic", "Synthetic Gaussian blocks", "tabular", 2, (32,), "generated", "n/a", offline=True)

register(DatasetSpec(DIGITS, load_digits_images, defaults={"test_size": 0.25, "split_seed": 0}))
register(DatasetSpec(BREAST, load_breast_cancer, defaults={"test_size": 0.25, "split_seed": 0, "scaler": "standard"}))
register(
    DatasetSpec(
        SYNTH,
        load_synthetic,
        defaults={
            "n": 4000,
            "blocks": 4,
            "block_width": 8,
            "informative": 2,
            "n_classes": 2,
            "separation": 1.0,
            "test_size": 0.25,
            "data_seed": 0,
            "shape": "",
        },
        prober=synthetic_info,
        option_help={
            "shape": "CxHxW (e.g. 3x32x32, CIFAR-10's shape): images instead of tabular blocks (use an image --arch; "
            "blocks, "
            "block_width and informative then do not apply)",
            "n": "number of samples",
            "blocks": "number of feature blocks (match --parties with the contiguous partitioner)",
            "block_width": "features per block",
            "informative": "informative features per block",
            "separation": "scale of the class-mean differences",
            "data_seed": "generator and split seed (independent of the run seed)",
        },
    )
)
