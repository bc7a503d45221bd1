"""The run key's layout, versioned.

A run's key hashes everything its numbers depend on. Every option, protocol field and data option
declared from interface v3 on enters the key only when it differs from its default, so declaring one
moves no existing key and needs no mark of its own. The fields that existed before (layout v2) were
keyed even at their defaults; they are frozen below, once, so that every run recorded then keeps its
key (`python scripts/regression_gate.py results --keys-only`). Never edit these sets: a new field
is simply not in them.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import Any

KEY_LAYOUT = 3

# ---- layout v2: keyed at any value (frozen 2026-11-24 from the registry at revision 259368a)
V2_METHOD_OPTIONS: dict[str, frozenset[str]] = {
    "local": frozenset([]),
    "svfl": frozenset(["fusion"]),
    "ensemble": frozenset([]),
    "combinatorial": frozenset(["fusion"]),
    "plug": frozenset(["granularity", "p_drop", "plug_denominator"]),
    "laser": frozenset(["fusion", "laser_subsets"]),
    "pbm": frozenset(
        [
            "C",
            "accountant",
            "b",
            "beta",
            "c0",
            "conversion",
            "delta",
            "embed_dim",
            "eval",
            "hidden",
            "ldp_match",
            "mechanism",
            "secagg",
        ]
    ),
    "fedhssl": frozenset(["constraint_ratio", "local_ratio", "pma", "pretrain"]),
    "false1": frozenset(["d_h", "d_z", "hidden", "kappa", "n_pred_samples"]),
    "false2": frozenset(["d_h", "d_z", "hidden", "kappa", "n_pred_samples"]),
}
V2_PROTOCOL_FIELDS = frozenset(
    [
        "all_missing",
        "augment",
        "balanced_sampler",
        "laser_subsets",
        "name",
        "permute_once",
        "plug_denominator",
        "shuffle",
        "stale_updates",
        "test_granularity",
        "test_time_augmentation",
        "train_granularity",
    ]
)
V2_DATA_OPTIONS = frozenset(
    [
        "block_width",
        "blocks",
        "categorical",
        "columns",
        "data_seed",
        "draw_seed",
        "drop",
        "file_sha256",
        "informative",
        "layout",
        "n",
        "n_classes",
        "normalize",
        "positive",
        "scaler",
        "separation",
        "size",
        "split_seed",
        "stratify",
        "target",
        "test",
        "test_draws",
        "test_size",
        "train_draws",
        "train_subset",
    ]
)


def keyed(values: dict[str, Any], defaults: dict[str, Any], v2: frozenset[str]) -> dict[str, Any]:
    """The items of ``values`` that enter the key: a v2 field always, any other apart from its default
    (a value without a declared default always)."""
    return {k: v for k, v in values.items() if k in v2 or k not in defaults or v != defaults[k]}


# Options that act on embedded categorical columns alone: a run without such a column is not keyed by them (their
# default moved on 2026-11-28, partition -> codes, and a run they cannot change keeps its key)
EMBEDDED_ONLY = {"gbdt": frozenset(["categorical"]), "secureboost": frozenset(["categorical"])}


def method_options(method: str, values: dict[str, Any], embeds: bool = True) -> dict[str, Any]:
    from ..methods import METHODS

    defaults = {o.name: o.default for o in METHODS.get(method).option_specs} if method in METHODS else {}
    out = keyed(values, defaults, V2_METHOD_OPTIONS.get(method, frozenset()))
    if not embeds:
        for name in EMBEDDED_ONLY.get(method, ()):
            out.pop(name, None)
    return out


def protocol(values: dict[str, Any]) -> dict[str, Any]:
    from .protocols import ResolvedProtocol

    defaults = {f.name: f.default for f in fields(ResolvedProtocol)}
    return keyed(values, defaults, V2_PROTOCOL_FIELDS)


@cache
def _data_defaults(dataset: str) -> dict[str, Any]:
    from ..data.datasets import DATASETS

    return dict(DATASETS.get(dataset).defaults)


def data_options(dataset: str, values: dict[str, Any]) -> dict[str, Any]:
    return keyed(values, _data_defaults(dataset), V2_DATA_OPTIONS)


# ---- a suite table's parties file (``suite:NAME`` expands to ``--part-opt file=<the suite folder>/NAME.yaml``)
# The key names it by the text its first keys were made with: the suite folder's path on the machine that made them
# (2026-11-27). Keyed by the absolute path of each checkout, a clone elsewhere planned other keys for the same runs:
# a sweep re-ran them all, and `gather --experiment` superseded every committed one. Its contents are keyed apart
# (``file_sha256``).
SUITE_KEY_FOLDER = "/work/main/experiments/suite"


def partition_options(values: dict[str, Any]) -> dict[str, Any]:
    """The partitioner's options as keyed: a parties file in this checkout's suite folder under the fixed text of
    SUITE_KEY_FOLDER, wherever the checkout is; any other file by its text as given."""
    from pathlib import Path

    from ..data.datasets import suite

    text = values.get("file")
    if isinstance(text, str) and Path(text).is_absolute() and Path(text).parent == suite.SUITE_DIR:
        return {**values, "file": f"{SUITE_KEY_FOLDER}/{Path(text).name}"}
    return values
