"""Hyper-parameter and model presets stored as YAML data."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..errors import VFLBenchError


@lru_cache
def load_preset(name: str) -> dict[str, Any]:
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.exists():
        text = p.read_text()
    else:
        try:
            text = resources.files(__package__).joinpath(f"{name}.yaml").read_text()
        except FileNotFoundError:
            built_in = sorted(f.name[:-5] for f in resources.files(__package__).iterdir() if f.name.endswith(".yaml"))
            raise VFLBenchError(f"Unknown preset '{name}'. Built in: {', '.join(built_in)}; or pass a path to a YAML file.") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise VFLBenchError(f"Preset '{name}' is not valid YAML: {e}") from None


def _p_key(block: dict, p: float | str | None) -> dict:
    for key in block:
        if key != "default" and p is not None and not isinstance(p, str):
            try:
                if abs(float(key) - float(p)) < 1e-9:
                    return block[key]
            except (TypeError, ValueError):
                pass
    return block["default"]


def hyperparameters(preset: str, dataset: str, hp_key: str, p_train: float | str | None) -> dict[str, Any]:
    hp = load_preset(preset)["hyperparameters"]
    ds = hp.get(dataset, hp["default"])
    # the dataset's block for this method, else the method's own default block (a method with its own
    # recipe, e.g. PBM-VFL's plain SGD), else the dataset's block for all methods, else everyone's
    block = ds.get(hp_key) or hp["default"].get(hp_key) or ds.get("all") or hp["default"]["all"]
    return dict(_p_key(block, p_train))


def model_spec(preset: str, dataset: str, kind: str) -> dict[str, Any]:
    models = load_preset(preset)["models"]
    return dict(models.get(dataset, models[f"default_{kind}"]))


def stage_hyperparameters(preset: str, dataset: str, hp_key: str, p_train: float | str | None, stage_key: str) -> dict[str, Any]:
    """A stage's own block, ``<hp_key>.<stage_key>`` under the dataset (or ``default``), keyed by
    training p like the method blocks; empty when the preset has none (the run's values apply)."""
    hp = load_preset(preset)["hyperparameters"]
    ds = hp.get(dataset, hp["default"])
    block = ds.get(f"{hp_key}.{stage_key}") or hp["default"].get(f"{hp_key}.{stage_key}")
    return dict(_p_key(block, p_train)) if block else {}
