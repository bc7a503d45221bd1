"""Evaluation/training protocols: ``compat`` reproduces the LASER-VFL authors' code, ``clean`` is the
default for new results. Every difference is one named option, overridable and recorded."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from .errors import VFLBenchError


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
    stale_updates: bool = False  # step members a batch did not use if they ever had a gradient (PyTorch < 2.0's zero_grad)

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
    "compat": Protocol("compat", "batch", "batch", False, "auto", "auto", "auto", True, "exclude", "batch", "keep", stale_updates=True),
    "clean": Protocol("clean", "sample", "sample", True, "auto", "off", "auto", False, "random", "sample", "keep"),
}


def get_protocol(name: str, overrides: dict[str, Any] | None = None) -> Protocol:
    if name not in PROTOCOLS:
        raise VFLBenchError(f"Unknown protocol '{name}'. Choices: {', '.join(PROTOCOLS)}.")
    base = asdict(PROTOCOLS[name])
    valid = {f.name: f.type for f in fields(Protocol)}
    for k, v in (overrides or {}).items():
        if k not in valid or k == "name":
            raise VFLBenchError(f"Unknown protocol option '{k}'. Options: {', '.join(n for n in valid if n != 'name')}.")
        if isinstance(base[k], bool) and isinstance(v, str):
            if v.lower() not in ("true", "false", "1", "0", "on", "off"):
                raise VFLBenchError(f"Protocol option {k} expects true/false, got {v!r}.")
            v = v.lower() in ("true", "1", "on")
        base[k] = v
    choices = {
        "train_granularity": ("batch", "sample"), "test_granularity": ("batch", "sample"),
        "plug_denominator": ("exclude", "random"), "laser_subsets": ("batch", "sample"), "all_missing": ("keep", "resample"),
    }
    for k, allowed in choices.items():
        if base[k] not in allowed:
            raise VFLBenchError(f"Protocol option {k}={base[k]!r}; choices: {', '.join(allowed)}.")
    return Protocol(**base)
