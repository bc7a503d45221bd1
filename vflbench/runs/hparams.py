"""Hyper-parameters: one type (:class:`HParams`) for every stage of every run, validated once."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ..core.errors import VFLBenchError
from ..core.limits import check

HP_FIELDS = (
    "optimizer",
    "lr",
    "weight_decay",
    "momentum",
    "batch_size",
    "epochs",
    "schedule",
    "eta_min_ratio",
    "patience",
)


@dataclass(frozen=True)
class HParams:
    """One stage's hyper-parameters: what a preset, an experiment file, ``--hp`` and the flags resolve
    to (:func:`vflbench.runs.config.resolve`, precedence flag/``--hp`` > experiment > protocol > preset,
    each value's source in the manifest's ``hp_sources``), and what the trainer reads."""

    optimizer: str
    lr: float
    weight_decay: float = 0.0
    momentum: float = 0.0
    batch_size: int = 128
    epochs: int = 1
    schedule: str = "none"
    eta_min_ratio: float = 0.0
    # early stopping (0: off, train every epoch): the method's last stage stops after this many epochs without a
    # better validation score and keeps its best epoch's model (vflbench.training.monitors.EarlyStopping); the
    # validation rows are the protocol's val_split (0.1 of the training rows when the run names none)
    patience: int = 0

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> HParams:
        unknown = set(d) - set(HP_FIELDS)
        if unknown:
            raise VFLBenchError(
                f"Unknown hyper-parameter(s) {', '.join(sorted(unknown))}{where}. Known: {', '.join(HP_FIELDS)}."
            )
        missing = {"optimizer", "lr", "batch_size", "epochs"} - set(d)
        if missing:
            raise VFLBenchError(
                f"Hyper-parameter(s) {', '.join(sorted(missing))} missing{where}; set them in the preset or on the "
                "command line."
            )
        try:
            hp = cls(
                optimizer=str(d["optimizer"]),
                lr=_float(d["lr"], "lr"),
                batch_size=_int(d["batch_size"], "batch_size"),
                epochs=_int(d["epochs"], "epochs"),
                weight_decay=_float(d.get("weight_decay") or 0.0, "weight_decay"),
                momentum=_float(d.get("momentum") or 0.0, "momentum"),
                schedule=str(d.get("schedule") or "none"),
                eta_min_ratio=_float(d.get("eta_min_ratio") or 0.0, "eta_min_ratio"),
                patience=_int(d.get("patience") or 0, "patience"),
            )
        except (TypeError, ValueError) as e:
            raise VFLBenchError(f"Bad hyper-parameter value{where}: {e}.") from None
        hp.validate(where)
        return hp

    def validate(self, where: str = "") -> None:
        if self.optimizer not in ("adam", "sgd"):
            raise VFLBenchError(f"Unknown optimizer '{self.optimizer}'{where}. Choices: adam, sgd.")
        if self.epochs < 1 or self.batch_size < 1:
            raise VFLBenchError(f"epochs and batch_size must be >= 1{where}.")
        if self.epochs > MAX_EPOCHS:
            raise VFLBenchError(f"epochs must be at most {MAX_EPOCHS:,}{where}, got {self.epochs:,}.")
        check("batch_size", self.batch_size, f"batch_size{where}")
        if not math.isfinite(self.lr) or self.lr <= 0:
            raise VFLBenchError(f"lr must be a finite number > 0{where}, got {self.lr}.")
        if not math.isfinite(self.weight_decay) or self.weight_decay < 0:
            raise VFLBenchError(f"weight_decay must be a finite number >= 0{where}, got {self.weight_decay}.")
        if not math.isfinite(self.momentum) or not 0 <= self.momentum < 1:
            raise VFLBenchError(f"momentum must be in [0, 1){where}, got {self.momentum}.")
        if not math.isfinite(self.eta_min_ratio) or not 0 <= self.eta_min_ratio <= 1:
            raise VFLBenchError(f"eta_min_ratio must be in [0, 1]{where}, got {self.eta_min_ratio}.")
        if self.patience < 0 or self.patience > self.epochs:
            raise VFLBenchError(
                f"patience must be in [0, epochs = {self.epochs}]{where} (0: no early stopping), got {self.patience}."
            )
        if self.schedule not in ("none", "cosine"):
            raise VFLBenchError(f"Unknown schedule '{self.schedule}'{where}. Choices: none, cosine.")

    def as_dict(self) -> dict[str, Any]:
        """The values; ``patience`` only when early stopping is on (so the keys of every run recorded before it
        existed stay as they were)."""
        d = asdict(self)
        if not d["patience"]:
            d.pop("patience")
        return d


MAX_EPOCHS = 100_000  # beyond this a typo, not an experiment (a run would not finish)


def _float(v: Any, name: str) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {v!r}") from None


def _int(v: Any, name: str) -> int:
    if isinstance(v, bool):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    if isinstance(v, int):
        return v
    try:
        return int(str(v).strip())
    except ValueError:
        pass
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {v!r}") from None
    if not math.isfinite(f) or f != int(f):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    if abs(f) >= 2**53:  # a float holds integers exactly only up to 2^53: write such a number with digits only
        raise ValueError(
            f"{name} must be an integer written with digits only (above 2^53 a float rounds it), got {v!r}"
        )
    return int(f)
