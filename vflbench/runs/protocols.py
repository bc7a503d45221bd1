"""Evaluation/training protocols: ``compat`` reproduces the LASER-VFL authors' code, ``clean`` is the
default for new results, ``false`` runs the baselines as the FALSE-VFL paper does (App. D.1). Every
difference is one named option, overridable and recorded."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ..core.errors import VFLBenchError


@dataclass
class Protocol:
    name: str
    train_granularity: str  # "batch": one mask pattern per batch of dataset indices (authors) | "sample"
    test_granularity: str  # same for test masks (batches of the *training* batch size)
    shuffle: bool  # reshuffle training samples every epoch
    balanced_sampler: str  # "auto" (Credit only) | "on" | "off": class-balanced sampling with replacement
    permute_once: str  # "auto" (HAPT in compat) | "on" | "off": permute train/test rows once with the seed
    augment: str  # "auto" (CIFAR) | "on" | "off": RandomCrop(pad 4) + horizontal flip on training images
    test_time_augmentation: bool  # apply the training augmentation to test images too (authors' CIFAR quirk)
    plug_denominator: str  # "exclude" samples whose active party is missing | score them as "random" guesses
    laser_subsets: str  # "batch": one subset per (head, size) per batch (authors) | "sample": per sample
    all_missing: str  # "keep" (skipped by training and evaluation) | "resample"
    stale_updates: bool = (
        False  # step members a batch did not use if they ever had a gradient (PyTorch < 2.0's zero_grad)
    )
    # The FALSE-VFL paper's baselines (App. D.1); the defaults are what compat and clean always did.
    svfl_samples: str = (
        "labeled"  # Standard VFL trains on the complete samples of "labeled" batches | only "aligned" batches
    )
    svfl_fusion: str = "mean"  # Standard VFL fuses by "mean" | "sum" | "concat" (zeros for a missing party)
    svfl_incomplete: str = "random"  # an incomplete test sample gets a "random" class | "zero"-imputed embeddings
    # LASER-VFL with one head per party | "one" fusion model (single active party) | "active" (trained on subsets with
    # block 0)
    laser_heads: str = "per_party"
    plug_p_drop: float = 0.0  # PlugVFL's training dropout of observed passive parties
    plug_active_missing: str = (
        "skip"  # PlugVFL with the active party's block missing: "skip" (LASER code) | "impute" zeros
    )
    # semi-supervised runs: share of the labeled samples outside the aligned reserve held out as a validation set
    val_split: float = 0.0
    # how the validation rows are drawn from the training rows: "uniform" (as always) | "stratified" (each class in
    # its share); a table with an entity column (data option group) always holds out whole entities
    val_by: str = "uniform"
    # LASER-VFL's supervised epochs (0: the preset's); results/false/README.md's reading of the FALSE-VFL paper's LASER-
    # VFL
    laser_epochs: int = 0

    def resolve(self, dataset: str) -> ResolvedProtocol:
        """The protocol for one dataset: every "auto" decided, every field typed."""
        d = asdict(self)
        d["balanced_sampler"] = _auto(self.balanced_sampler, dataset in ("credit",))
        d["permute_once"] = _auto(self.permute_once, dataset in ("hapt",) and self.name == "compat")
        d["augment"] = _auto(self.augment, dataset in ("cifar10", "cifar100"))
        d["test_time_augmentation"] = bool(self.test_time_augmentation and d["augment"])
        return ResolvedProtocol(**d)


@dataclass(frozen=True)
class ResolvedProtocol:
    """A protocol as one run uses it (see :class:`Protocol` for the meaning of each field)."""

    name: str
    train_granularity: str
    test_granularity: str
    shuffle: bool
    balanced_sampler: bool
    permute_once: bool
    augment: bool
    test_time_augmentation: bool
    plug_denominator: str
    laser_subsets: str
    all_missing: str
    stale_updates: bool
    svfl_samples: str = "labeled"
    svfl_fusion: str = "mean"
    svfl_incomplete: str = "random"
    laser_heads: str = "per_party"
    plug_p_drop: float = 0.0
    plug_active_missing: str = "skip"
    val_split: float = 0.0
    val_by: str = "uniform"
    laser_epochs: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _auto(v: str, default: bool) -> bool:
    if v == "auto":
        return default
    if v in ("on", True, "true"):
        return True
    if v in ("off", False, "false"):
        return False
    raise VFLBenchError(f"Protocol option must be auto, on or off; got {v!r}.")


PROTOCOLS = {
    "compat": Protocol(
        "compat", "batch", "batch", False, "auto", "auto", "auto", True, "exclude", "batch", "keep", stale_updates=True
    ),
    "clean": Protocol("clean", "sample", "sample", True, "auto", "off", "auto", False, "random", "sample", "keep"),
    # FALSE-VFL App. D.1 and spec choices: per-sample masks, all-missing masks redrawn; Vanilla VFL on
    # fully aligned labeled samples only, concatenated embeddings, zeros for missing parties at test;
    # LASER-VFL with one fusion model; PlugVFL with p = 0.5 and zero-imputation in training and test.
    "false": Protocol(
        "false",
        "sample",
        "sample",
        True,
        "auto",
        "off",
        "auto",
        False,
        "random",
        "sample",
        "resample",
        svfl_samples="aligned",
        svfl_fusion="concat",
        svfl_incomplete="zero",
        laser_heads="one",
        plug_p_drop=0.5,
        plug_active_missing="impute",
    ),
}


DEFAULT_PRESET = {"false": "false_tables"}  # the hyper-parameter preset a run uses when it names none


def default_preset(protocol: str) -> str:
    return DEFAULT_PRESET.get(protocol, "laser_table1")


def get_protocol(name: str, overrides: dict[str, Any] | None = None) -> Protocol:
    if name not in PROTOCOLS:
        raise VFLBenchError(f"Unknown protocol '{name}'. Choices: {', '.join(PROTOCOLS)}.")
    base = asdict(PROTOCOLS[name])
    valid = {f.name: f.type for f in fields(Protocol)}
    for k, v in (overrides or {}).items():
        if k not in valid or k == "name":
            raise VFLBenchError(
                f"Unknown protocol option '{k}'. Options: {', '.join(n for n in valid if n != 'name')}."
            )
        if isinstance(base[k], bool) and isinstance(v, str):
            if v.lower() not in ("true", "false", "1", "0", "on", "off"):
                raise VFLBenchError(f"Protocol option {k} expects true/false, got {v!r}.")
            v = v.lower() in ("true", "1", "on")
        elif isinstance(base[k], int) and not isinstance(base[k], bool):
            try:
                v = int(str(v))
            except (TypeError, ValueError):
                raise VFLBenchError(f"Protocol option {k} expects a whole number, got {v!r}.") from None
        elif isinstance(base[k], float):
            try:
                v = float(v)
            except (TypeError, ValueError):
                raise VFLBenchError(f"Protocol option {k} expects a number, got {v!r}.") from None
        base[k] = v
    choices = {
        "train_granularity": ("batch", "sample"),
        "test_granularity": ("batch", "sample"),
        "plug_denominator": ("exclude", "random"),
        "laser_subsets": ("batch", "sample"),
        "all_missing": ("keep", "resample"),
        "svfl_samples": ("labeled", "aligned"),
        "svfl_fusion": ("mean", "sum", "concat"),
        "svfl_incomplete": ("random", "zero"),
        "laser_heads": ("per_party", "one", "active"),
        "plug_active_missing": ("skip", "impute"),
        "val_by": ("uniform", "stratified"),
    }
    for k, allowed in choices.items():
        if base[k] not in allowed:
            raise VFLBenchError(f"Protocol option {k}={base[k]!r}; choices: {', '.join(allowed)}.")
    if base["laser_epochs"] < 0:
        raise VFLBenchError(
            f"Protocol option laser_epochs={base['laser_epochs']} must be >= 0 (0: the preset's epochs)."
        )
    if not 0.0 <= base["val_split"] < 1.0:
        raise VFLBenchError(
            f"Protocol option val_split={base['val_split']} must be in [0, 1): the share of the labeled samples "
            "outside the aligned reserve held out for validation."
        )
    if not 0.0 <= base["plug_p_drop"] < 1.0:
        raise VFLBenchError(f"Protocol option plug_p_drop={base['plug_p_drop']} must be in [0, 1).")
    return Protocol(**base)
