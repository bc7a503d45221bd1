"""The common return type of every dataset loader."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DatasetInfo:
    """Static facts about a dataset, known without loading it."""

    name: str
    title: str
    kind: str  # "tabular" or "image"
    n_classes: int
    shape: tuple[int, ...]  # per-sample feature shape: (D,) or (C, H, W)
    source: str
    license: str
    citation: str = ""
    offline: bool = False  # embedded in a dependency: never needs a download
    positive_class: int | None = None  # for binary F1
    # what a run's key and memory check need from a table before training (set where a table is probed)
    embedded: tuple[tuple[int, int], ...] = ()  # per embedded categorical column: (table rows, size)
    embeds: bool = False  # categorical columns are embedded (a click log's loader says so before loading)
    large_file: bool = False  # read from a table file over reading.LARGE_FILE bytes on disk


@dataclass
class Dataset:
    """Train and test arrays plus metadata.

    ``x_*`` are float32: ``[n, D]`` for tabular data, ``[n, C, H, W]`` for images.
    ``y_*`` are int64 class indices in ``0..n_classes-1``.
    """

    info: DatasetInfo
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    feature_names: list[str] | None = None
    options: dict[str, Any] = field(default_factory=dict)  # resolved preprocessing options
    checksums: dict[str, str] = field(default_factory=dict)  # raw file -> sha256
    checksum_checks: dict[str, str] = field(default_factory=dict)  # raw file -> published | recorded | first-use
    feature_sources: list[str] | None = None  # per feature: the source column it was encoded from (users' tables)
    preprocessing: dict[str, Any] = field(default_factory=dict)  # what a table loader inferred and did (manifest)
    # feature index -> (embedding table rows, embedding size): a categorical column stored as integer codes that
    # the owning party's bottom model embeds (vflbench.data.datasets.encoding); empty for every other dataset
    embedded: dict[int, tuple[int, int]] = field(default_factory=dict)
    # per row, the entity it belongs to (a table's data option group: a firm, a person, a case), as integer codes;
    # the split keeps each entity on one side, and so do the validation rows (None: rows are independent)
    groups_train: np.ndarray | None = None
    groups_test: np.ndarray | None = None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def n_classes(self) -> int:
        return self.info.n_classes

    def __post_init__(self) -> None:
        self.x_train = np.ascontiguousarray(self.x_train, dtype=np.float32)
        self.x_test = np.ascontiguousarray(self.x_test, dtype=np.float32)
        self.y_train = np.asarray(self.y_train, dtype=np.int64)
        self.y_test = np.asarray(self.y_test, dtype=np.int64)
        if len(self.x_train) != len(self.y_train) or len(self.x_test) != len(self.y_test):
            raise ValueError(f"{self.info.name}: features and labels differ in length")
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ValueError(f"{self.info.name}: train and test feature shapes differ")

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "n_train": int(len(self.y_train)),
            "n_test": int(len(self.y_test)),
            "shape": list(self.x_train.shape[1:]),
            "n_classes": self.n_classes,
            "train_class_counts": np.bincount(self.y_train, minlength=self.n_classes).tolist(),
            "options": self.options,
            "checksums": self.checksums,
            "checksum_checks": self.checksum_checks,
            **({"preprocessing": self.preprocessing} if self.preprocessing else {}),
        }
