"""Experiment files: a YAML grid of datasets x methods x parties x train settings x seeds, validated
on load, expanded into :class:`~vflbench.runs.config.RunConfig` objects (one per trained model; every run
evaluates all test settings).

Schema (unknown keys are errors)::

    name: laser-table1                 # default: the file's name without .yaml
    description: free text
    layout: laser-table1               # default table layout for `vflbench table`
    reference: laser-table1            # default reference table
    protocol: compat                   # clean | compat | false
    protocol_options: {key: value}
    preset: laser_table1               # hyper-parameter preset (name or YAML path; default: the protocol's)
    seeds: [0, 1, 2, 3, 4]
    parties: [4]
    methods: [local, svfl, ensemble, combinatorial, plug, laser]
    train_missing: [none, mcar:0.1, mcar:0.5]   # default: [none], as `vflbench run`
    test_missing: [none, mcar:0.1, mcar:0.5]    # default: `vflbench run`'s, [none, mcar:0.1, mcar:0.5]
    partitioner: contiguous            # optional; default by data kind
    hp: {epochs: 10}                   # optional overrides for every run
    model: {arch: cnn-small}           # optional overrides for every run
    method_options: {plug: {p_drop: 0.2}}   # per method, typed and validated (`vflbench methods`)
    method_grid:                       # per method: a list of option grids; lists expand (cartesian product)
      pbm: [{mechanism: pbm, b: [8, 16], beta: [0.1, 0.2]}, {mechanism: npq}]
    target: train_auprc=0.9            # record the first epoch reaching a training metric
    eval_epochs: "1:100"               # also evaluate after these epochs (list, "5,10" or "A:B[:step]")
    stage_hp: {stage1: {epochs: 5}}    # per-stage hyper-parameter overrides (multi-stage methods)
    labeled: 500                       # semi-supervised runs: labeled training samples ...
    aligned: 100                       # ... of which this many are fully observed
    plugins: [my_method.py]            # method files to load (paths relative to this file)
    lr_by_parties: {laser: {2: 0.1, 5: 0.05}}   # per-method learning rate by K (Figure 2)
    datasets:                          # required: name -> per-dataset overrides (or null)
      credit: {data_options: {scaler: minmax}, hp: {...}, model: {...}, partitioner: ..., partition_options: {...}}
    quick: {epochs: 2, seeds: [0]}     # what --quick uses
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core import yamlio
from ..core.errors import VFLBenchError
from ..runs.config import RunConfig
from ..runs.settings import SETTINGS, experiment_values
from .experiment_schema import (  # noqa: F401  (the keys re-exported: the schema's face)
    DATASET_KEYS,
    FILE_KEYS,
    QUICK_KEYS,
    TOP_KEYS,
    _attacks_key,
    _check_artefact,
    _check_axes,
    _check_datasets,
    _check_methods,
    _check_quick,
    _check_top,
    _dict,
    _fail,
    _list,
    _load_plugins,
    _missing_settings,
    _unique,
    check_name,
)


@dataclass
class Experiment:
    name: str
    path: Path | None
    spec: dict[str, Any]
    quick: bool = False
    runs: list[RunConfig] = field(default_factory=list)

    @property
    def layout(self) -> str | None:
        return self.spec.get("layout")

    @property
    def reference(self) -> str | None:
        return self.spec.get("reference")


def relative_paths(ds: str, spec: dict, over: dict, path) -> dict[str, str]:
    """Relative paths in the file (a ``csv:`` table, its ``test=`` file, a parties file, a preset
    file) name files beside the experiment file, wherever the sweep starts (:mod:`vflbench.core.paths`).
    A table or parties file that is not there is an error now, not a dataset skipped later."""
    from ..core.paths import anchor

    if path is None:
        return {}
    folder = Path(path).resolve().parent
    texts = []
    if ds.startswith("csv:"):
        texts.append(("table", ds.split(":", 1)[1]))
    test = _dict(over, "data_options", path).get("test")
    if test:
        texts.append(("test file", str(test)))
    popts = {**_dict(spec, "partition_options", path), **_dict(over, "partition_options", path)}
    for v in [popts.get("file"), *[o.get("file") for o in popts.values() if isinstance(o, dict)]]:
        if isinstance(v, str) and v:
            texts.append(("parties file", v))
    preset = spec.get("preset")
    if isinstance(preset, str) and preset.endswith((".yaml", ".yml")):
        texts.append(("preset", preset))
    out = {}
    for what, text in texts:
        target = anchor(text, folder)
        if target is None:
            continue
        if not Path(target).exists():
            legacy = Path(text).expanduser()
            if legacy.exists():  # written before paths were read from the file's folder: still read, with a warning
                import warnings

                from ..core.errors import VFLBenchWarning

                warnings.warn(
                    f"{path}: the {what} '{text}' is read relative to the working directory; relative paths in an "
                    "experiment "
                    f"file are read from its folder ({folder}), so write it as "
                    f"'{os.path.relpath(legacy.resolve(), folder)}' "
                    "(the runs' keys then change).",
                    VFLBenchWarning,
                    stacklevel=3,
                )
                out[text] = str(legacy.resolve())
                continue
            _fail(
                path,
                f"the {what} '{text}' does not exist: relative paths in an experiment file are read from its folder "
                f"({folder}), "
                f"so it names {target}.",
            )
        out[text] = target
    return out


def partition_variants(spec: dict, over: dict, path) -> list[tuple[str | None, dict[str, Any]]]:
    """The partitioner axis: ``partitioner`` is a name or a list of names; ``partition_options`` maps
    options to a value or a list of values (a list expands), and, with several partitioners, may hold
    one such mapping per partitioner name (``{correlation: {beta: [0.2, 0.8]}}``)."""
    import itertools

    names = over.get("partitioner", spec.get("partitioner"))
    if names is None or isinstance(names, str):
        names = [names]
    elif isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        _unique(names, "'partitioner'", path)
    else:
        _fail(path, f"'partitioner' must be a name or a list of names, got {names!r}.")
    opts = {**_dict(spec, "partition_options", path), **_dict(over, "partition_options", path)}
    per_name = {n: v for n, v in opts.items() if n in names and isinstance(v, dict)}
    shared = {k: v for k, v in opts.items() if k not in per_name}
    out = []
    for name in names:
        grid = {**shared, **per_name.get(name, {})}
        keys = list(grid)
        values = [v if isinstance(v, list) else [v] for v in grid.values()]
        if any(len(v) == 0 for v in values):
            _fail(path, "partition_options: an option has an empty list of values.")
        out += [(name, dict(zip(keys, combo, strict=True))) for combo in itertools.product(*values)]
    return out


def expand_grid(grids: Any, method: str, path) -> list[dict[str, Any]]:
    """A method's option grid(s) -> the list of option sets (one run each). A mapping is one grid;
    a list holds several; in a grid, a list value expands (cartesian product) and a scalar is fixed."""
    import itertools

    if grids is None:
        return [{}]
    if isinstance(grids, dict):
        grids = [grids]
    if not isinstance(grids, list) or not all(isinstance(g, dict) for g in grids):
        _fail(
            path, f"method_grid.{method} must be a mapping or a list of mappings of option -> value or list of values."
        )
    out = []
    for g in grids:
        sets = g.get("settings")
        if sets is not None:  # run settings of this entry (vflbench.runs.settings), checked now
            if not isinstance(sets, dict):
                _fail(
                    path,
                    f"method_grid.{method}: 'settings' must be a mapping of run setting -> value, e.g. {{mechanism: "
                    f"'pbm:beta=0.1'}}.",
                )
            for name, value in sets.items():
                if name not in SETTINGS:
                    _fail(path, f"method_grid.{method}: unknown run setting {name!r}. Known: {', '.join(SETTINGS)}.")
                try:
                    SETTINGS[name].parse(value)
                except VFLBenchError as e:
                    _fail(path, f"method_grid.{method}: {name}: {e}")
            g = {k: v for k, v in g.items() if k != "settings"}
        keys = list(g)
        values = [v if isinstance(v, list) else [v] for v in g.values()]
        if any(len(v) == 0 for v in values):
            _fail(path, f"method_grid.{method}: an option has an empty list of values.")
        out += [
            {**dict(zip(keys, combo, strict=True)), **({"settings": sets} if sets is not None else {})}
            for combo in itertools.product(*values)
        ]
    _unique(out, f"method_grid.{method}", path)
    return out


def load_experiment(
    path: str | Path,
    *,
    datasets: list[str] | None = None,
    seeds: list[int] | None = None,
    quick: bool = False,
    train_missing: list[str] | None = None,
    methods_subset: list[str] | None = None,
) -> Experiment:
    p = Path(path)
    if not p.exists():
        candidates = sorted(x.name for x in Path("experiments").glob("*.yaml")) if Path("experiments").is_dir() else []
        hint = f" Available in experiments/: {', '.join(candidates)}." if candidates else ""
        raise VFLBenchError(f"Experiment file {p} does not exist.{hint}")
    try:
        spec = yamlio.load(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise VFLBenchError(f"{p}: malformed YAML{where}: {getattr(e, 'problem', e)}. Fix the file's syntax.") from None
    return build_experiment(
        spec, p, datasets=datasets, seeds=seeds, quick=quick, train_missing=train_missing, methods_subset=methods_subset
    )


def build_experiment(
    spec: Any,
    path: Path | None = None,
    *,
    datasets=None,
    seeds=None,
    quick=False,
    train_missing=None,
    methods_subset=None,
) -> Experiment:
    """An experiment file's mapping, checked whole before any run, expanded into its runs: the file-level keys,
    then the datasets' overrides, then one :class:`RunConfig` per cell of the grid."""
    spec = _check_top(spec, path)
    _load_plugins(spec, path)
    methods = _check_methods(spec, path)
    train, test = _missing_settings(spec, path, train_missing)
    file_seeds = _list(spec, "seeds", int, path, [0])
    parties = _list(spec, "parties", int, path, [4])
    _check_axes(spec, path)
    ds_spec = _check_datasets(spec, path)
    quick_spec = _check_quick(spec, path)
    for key in ("layout", "reference"):
        if spec.get(key) is not None:
            _check_artefact(key, spec[key], path)
    grid_spec = _dict(spec, "method_grid", path)
    for m in grid_spec:
        if m not in methods and not any(m in (o or {}).get("methods", []) for o in ds_spec.values()):
            _fail(path, f"method_grid names '{m}', which is not among the methods ({', '.join(methods)}).")
    chosen = _chosen_datasets(ds_spec, methods, datasets, methods_subset, path)
    grid = _Grid(
        spec=spec,
        path=path,
        quick=quick,
        methods=methods,
        methods_subset=methods_subset,
        train=train,
        test=test,
        parties=parties,
        seeds=list(seeds) if seeds else file_seeds,
        hp=_dict(spec, "hp", path),
        quick_spec=quick_spec,
        grids={m: expand_grid(g, m, path) for m, g in grid_spec.items()},
    )
    if quick:
        grid.seeds = list(seeds) if seeds else list(quick_spec.get("seeds", file_seeds[:1]))
        grid.hp = {**grid.hp, "epochs": int(quick_spec.get("epochs", 2))}
    runs, stages_used = [], set()
    for ds in chosen:
        ds_runs, ds_stages = _dataset_runs(grid, ds, ds_spec[ds] or {})
        runs += ds_runs
        stages_used |= ds_stages
    named = set(_dict(spec, "stage_hp", path)) | {k for o in ds_spec.values() for k in _dict(o or {}, "stage_hp", path)}
    unused = sorted(named - stages_used)
    if runs and unused:
        _fail(
            path,
            f"stage_hp names stage(s) {', '.join(unused)}, which no run of this experiment has (its stages: "
            f"{', '.join(sorted(stages_used))}).",
        )
    return Experiment(spec["name"], path, spec, quick, runs)


@dataclass
class _Grid:
    """The file-level values of an experiment that every dataset's runs expand from."""

    spec: dict
    path: Path | None
    quick: bool
    methods: list[str]
    methods_subset: Any
    train: list[str]
    test: list[str]
    parties: list[int]
    seeds: list[int]
    hp: dict
    quick_spec: dict
    grids: dict


def _chosen_datasets(ds_spec: dict, methods: list[str], datasets, methods_subset, path: Path | None) -> list[str]:
    """The datasets ``--datasets`` keeps (all by default); ``--methods`` must name methods of the file."""
    chosen = list(ds_spec)
    if datasets:
        missing = [d for d in datasets if d not in ds_spec]
        if missing:
            _fail(path, f"--datasets {', '.join(missing)} not in this experiment (it has {', '.join(ds_spec)}).")
        chosen = [d for d in chosen if d in datasets]
    if methods_subset:
        named = set(methods) | {m for o in ds_spec.values() for m in (o or {}).get("methods", [])}
        missing = [m for m in methods_subset if m not in named]
        if missing:
            _fail(path, f"--methods {', '.join(missing)} not in this experiment (it has {', '.join(sorted(named))}).")
    return chosen


def _stage_names(m: str, opts: dict) -> set[str]:
    from ..methods import METHODS

    cls = METHODS.get(m)
    return {st.name for st in cls.stages_for({**{o.name: o.default for o in cls.option_specs}, **opts})}


def _dataset_settings(grid: _Grid, over: dict) -> tuple[dict, list[tuple[str, list]]]:
    """One dataset's run settings (parsed now: a bad value is named with the file) and the other grid axes of
    declared settings (e.g. fail_party): one run per value, in the file's order."""
    spec, path, quick_spec = grid.spec, grid.path, grid.quick_spec
    ds_settings = experiment_values(spec, over)
    if grid.quick:  # a smoke run evaluates at its end only
        ds_settings.pop("eval_epochs", None)
    for name, value in ds_settings.items():
        try:
            SETTINGS[name].parse(value)
        except VFLBenchError as e:
            _fail(path, f"{name}: {e}")
    axes = [
        (name, quick_spec[st.axis] if grid.quick and st.axis in quick_spec else over.get(st.axis, spec.get(st.axis)))
        for name, st in SETTINGS.items()
        if st.axis not in (None, "seeds", "parties", "train_missing") and over.get(st.axis, spec.get(st.axis))
    ]
    for name, values in axes:
        if not isinstance(values, list):
            _fail(path, f"{SETTINGS[name].axis} lists values, one run each (e.g. [none, 2@5]); got {values!r}.")
    return ds_settings, axes


def _dataset_runs(grid: _Grid, ds: str, over: dict) -> tuple[list[RunConfig], set[str]]:
    """Every run of one dataset: parties x methods (x method_grid entries) x partitions x training settings x
    other axes x seeds, in that order; and the stages those runs have."""
    spec, path = grid.spec, grid.path
    part_variants = partition_variants(spec, over, path)
    bases = relative_paths(ds, spec, over, path)
    ds_methods = [m for m in over.get("methods", grid.methods) if not grid.methods_subset or m in grid.methods_subset]
    data_opts = {**_dict(over, "data_options", path), **(grid.quick_spec.get("data_options", {}) if grid.quick else {})}
    ds_settings, axes = _dataset_settings(grid, over)
    lr_by_k = _dict(spec, "lr_by_parties", path)
    method_opts = _dict(spec, "method_options", path)
    runs, stages_used = [], set()
    ks = over.get("parties", grid.parties)
    if str(ds).startswith("suite:") and "parties" not in over and "parties" not in spec:
        from ..data.datasets.suite import read_suite_table  # a suite table: the parties of its own split

        ks = [len(read_suite_table(str(ds).split(":", 1)[1]).parties)]
    cells = itertools.product(
        ks,
        [(name, g) for name in ds_methods for g in grid.grids.get(name, [{}])],
        part_variants,
        grid.train,
        itertools.product(*[v for _, v in axes]),
        grid.seeds,
    )
    for k, (m, grid_opts), (part, part_opts), tr, picked, seed in cells:
        hp = {**grid.hp, **_dict(over, "hp", path)}
        if grid.quick:
            hp["epochs"] = grid.hp["epochs"]
        entry = dict(grid_opts)
        run_settings = {
            **ds_settings,
            **{n: v for (n, _), v in zip(axes, picked, strict=True)},
            **(entry.pop("settings", None) or {}),
        }  # a grid entry's run settings (e.g. a mechanism)
        mopts = {**(method_opts.get(m) or {}), **(_dict(over, "method_options", path).get(m) or {}), **entry}
        names = _stage_names(m, mopts)
        stages_used |= names
        # stage settings apply to the runs that have the stage (e.g. `pretrain` is FALSE-VFL's stage 1 and a
        # baseline's SimSiam stage, and absent from a baseline without pretraining)
        stage_hp = {
            s: v for s, v in {**_dict(spec, "stage_hp", path), **_dict(over, "stage_hp", path)}.items() if s in names
        }
        lr_table = lr_by_k.get(m) or {}
        if k in lr_table:
            hp["lr"] = float(lr_table[k])
        runs.append(
            RunConfig(
                dataset=ds,
                method=m,
                parties=int(k),
                partitioner=part,
                train_missing=tr,
                test_missing=list(over.get("test_missing", grid.test)),
                seed=int(seed),
                protocol=spec.get("protocol", "clean"),
                protocol_options={**_dict(spec, "protocol_options", path), **_dict(over, "protocol_options", path)},
                data_options=data_opts,
                partition_options=part_opts,
                method_options=mopts,
                hp=hp,
                stage_hp=stage_hp,
                hp_sources=dict.fromkeys(hp, "experiment"),
                model={**_dict(spec, "model", path), **_dict(over, "model", path)},
                path_bases=bases,
                settings=run_settings,
            )
        )
    return runs, stages_used
