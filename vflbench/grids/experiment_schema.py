"""An experiment file's schema and its checks: the keys it may hold (the file's own, and every run field and setting
declared in vflbench.runs.settings), and the validation of each part (top level, methods, axes, datasets, quick)
with one message naming the file and the fix. What the checked file becomes is :mod:`vflbench.grids.experiment`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import VFLBenchError
from ..runs.settings import FIELDS, SETTINGS, experiment_field_keys, experiment_keys

# the keys of the file itself (what it is, how its grid is laid out); every other key is a run field or
# a run setting, declared in vflbench.runs.settings
FILE_KEYS = {"name", "description", "layout", "reference", "lr_by_parties", "quick", "plugins", "method_grid"}
TOP_KEYS = FILE_KEYS | experiment_field_keys("top") | experiment_keys() | {"attacks"}
DATASET_KEYS = (experiment_field_keys("dataset") | experiment_keys() | {"attacks"}) - {
    "seeds",
    "train_missing",
}  # grid axes read once, at the top level
QUICK_KEYS = {"epochs", "seeds", "data_options", "fail_party"}  # a smoke run's epochs, seeds, data and failures


def check_name(name: str, path=None) -> None:
    """An experiment's name becomes a folder under results/: a plain name, nothing that leaves it."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or ".." in name:
        _fail(
            path,
            f"'name' must be a plain name (letters, digits, '.', '_', '-'; no path separators or '..'), got {name!r}.",
        )


def _check_artefact(key: str, value: Any, path) -> None:
    """``layout:`` and ``reference:`` are checked when the file is read, not after the sweep ran."""
    from ..results import artefacts

    if not isinstance(value, str):
        _fail(path, f"'{key}' must be a name, got {value!r}.")
    if key == "layout" and value not in artefacts.names():
        _fail(path, f"unknown layout '{value}'. Choices: {', '.join(artefacts.names())}.")
    if key == "reference" and value not in artefacts.references():
        ref = Path(value) if Path(value).is_absolute() or path is None else Path(path).parent / value
        if not ref.exists() and not Path(value).exists():
            _fail(
                path,
                f"reference '{value}' is neither a built-in reference ({', '.join(artefacts.references())}) nor an "
                "existing CSV file.",
            )


def _fail(path, msg: str) -> None:
    where = f"{path}: " if path else ""
    raise VFLBenchError(f"{where}{msg}")


def _list(spec, key, typ, path, default=None):
    v = spec.get(key, default)
    if v is None:
        _fail(path, f"'{key}' is required.")
    if not isinstance(v, list):
        v = [v]
    if not v:
        _fail(path, f"'{key}' must not be empty.")
    for item in v:
        if not isinstance(item, typ) or isinstance(item, bool):
            _fail(path, f"'{key}' entries must be {getattr(typ, '__name__', typ)}; got {item!r}.")
    _unique(v, f"'{key}'", path)
    return v


def _unique(items, what: str, path) -> None:
    """A grid axis is a set: a repeated entry would train the same run twice into one folder."""
    seen = []
    for item in items:
        if item in seen:
            _fail(path, f"{what} lists {item!r} more than once; each entry must be unique.")
        seen.append(item)


def _dict(spec, key, path, default=None):
    v = spec.get(key, default if default is not None else {})
    if v is None:
        v = {}
    if not isinstance(v, dict):
        _fail(path, f"'{key}' must be a mapping, got {type(v).__name__}.")
    return v


def _check_top(spec: Any, path: Path | None) -> dict:
    """The mapping's keys; ``name`` defaults to the file's stem; ``protocol`` read as text."""
    if not isinstance(spec, dict):
        _fail(path, "the file must be a YAML mapping with keys such as name, datasets, methods.")
    unknown = set(spec) - TOP_KEYS
    if unknown:
        _fail(path, f"unknown key(s) {', '.join(sorted(unknown))}. Allowed: {', '.join(sorted(TOP_KEYS))}.")
    spec = _attacks_key(spec, path)
    if "name" not in spec and path is not None:
        spec = {**spec, "name": Path(path).stem}
    if not isinstance(spec.get("name"), str):
        _fail(path, "'name' (a string) is required.")
    check_name(spec["name"], path)
    if "protocol" in spec:
        spec = {**spec, "protocol": FIELDS["protocol"].value(spec["protocol"])}  # `protocol: false` is YAML 1.1's bool
    return spec


def _attacks_key(spec: dict, path: Path | None) -> dict:
    """``attacks: [direction, inversion:known=0.1]`` is the run setting ``attack`` (every run measures all of
    them), at the top level and per dataset."""

    def one(level: dict, where: str) -> dict:
        if "attacks" not in level:
            return level
        value = level["attacks"]
        if "attack" in level:
            _fail(path, f"{where}gives both attacks and attack; keep attacks.")
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            _fail(path, f"{where}attacks lists attacks, e.g. [direction, inversion:known=0.1]; got {value!r}.")
        return {**{k: v for k, v in level.items() if k != "attacks"}, "attack": ";".join(value) or "none"}

    out = one(spec, "")
    if isinstance(out.get("datasets"), dict):
        sets = {d: one(o, f"datasets.{d}: ") if isinstance(o, dict) else o for d, o in out["datasets"].items()}
        out = {**out, "datasets": sets}
    return out


def _load_plugins(spec: dict, path: Path | None) -> None:
    from ..core import plugins

    for plug in _list(spec, "plugins", str, path, []) if spec.get("plugins") else []:
        plugins.add(Path(path).parent / plug if path is not None and not Path(plug).is_absolute() else plug)


def _check_methods(spec: dict, path: Path | None) -> list[str]:
    from ..methods import METHODS

    methods = _list(spec, "methods", str, path)
    for m in methods:
        if m not in METHODS:
            _fail(path, f"unknown method '{m}'. Choices: {', '.join(METHODS.names())}.")
    return methods


def _missing_settings(spec: dict, path: Path | None, train_missing) -> tuple[list[str], list[str]]:
    """The training settings (narrowed by ``--train-missing``) and the test settings, each parsed now."""
    from ..data.missingness import canonical, parse_mechanism
    from ..runs.protocols import get_protocol

    train = _list(spec, "train_missing", str, path, [str(SETTINGS["train_missing"].default)])
    if train_missing:
        have = {canonical(t): t for t in train}
        missing = [t for t in train_missing if canonical(t) not in have]
        if missing:
            _fail(path, f"--train-missing {', '.join(missing)} not in this experiment (it has {', '.join(train)}).")
        train = [have[canonical(t)] for t in train_missing]
    test = _list(spec, "test_missing", str, path, [str(s) for s in SETTINGS["test_missing"].default])
    for key, specs in (("train_missing", train), ("test_missing", test)):
        for one in specs:
            try:
                parse_mechanism(one)
            except VFLBenchError as e:
                _fail(path, f"{key}: {e}")
    try:
        SETTINGS["test_missing"].parse(test)  # the run's test settings, as one value (none twice)
    except VFLBenchError as e:
        _fail(path, f"test_missing: {e}")
    try:
        get_protocol(spec.get("protocol", "clean"), _dict(spec, "protocol_options", path))
    except VFLBenchError as e:
        _fail(path, str(e))
    return train, test


def _check_axes(spec: dict, path: Path | None) -> None:
    """Grid axes of declared settings, at the file's level and each dataset's: every value is checked now."""
    for name, setting in SETTINGS.items():
        if setting.axis is None:
            continue
        for level in [spec, *((o or {}) for o in (spec.get("datasets") or {}).values() if isinstance(o, dict))]:
            for value in level.get(setting.axis) or [] if isinstance(level.get(setting.axis), list) else []:
                try:
                    setting.parse(value)
                except VFLBenchError as e:
                    _fail(path, f"{setting.axis} ({name}): {e}")


def _check_datasets(spec: dict, path: Path | None) -> dict:
    from ..data.datasets import DATASETS

    ds_spec = _dict(spec, "datasets", path)
    if not ds_spec:
        _fail(path, "'datasets' must list at least one dataset.")
    for name, over in ds_spec.items():
        if name not in DATASETS:
            _fail(path, f"unknown dataset '{name}'. Choices: {', '.join(DATASETS.names())}.")
        if over is not None and not isinstance(over, dict):
            _fail(path, f"datasets.{name} must be a mapping of overrides or empty.")
        bad = set(over or {}) - DATASET_KEYS
        if bad:
            _fail(
                path,
                f"datasets.{name}: unknown key(s) {', '.join(sorted(bad))}. Allowed: "
                f"{', '.join(sorted(DATASET_KEYS))}.",
            )
    return ds_spec


def _check_quick(spec: dict, path: Path | None) -> dict:
    quick_spec = _dict(spec, "quick", path)
    bad = set(quick_spec) - QUICK_KEYS
    if bad:
        _fail(path, f"quick: unknown key(s) {', '.join(sorted(bad))}. Allowed: {', '.join(sorted(QUICK_KEYS))}.")
    if "seeds" in quick_spec:
        _list(quick_spec, "seeds", int, f"{path}: quick" if path else "quick")
    if "epochs" in quick_spec and (
        not isinstance(quick_spec["epochs"], int) or isinstance(quick_spec["epochs"], bool) or quick_spec["epochs"] < 1
    ):
        _fail(path, f"quick: 'epochs' must be an integer >= 1, got {quick_spec['epochs']!r}.")
    _dict(quick_spec, "data_options", path)
    return quick_spec
