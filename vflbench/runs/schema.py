"""The machinery of run settings declared once (:mod:`vflbench.runs.settings` holds the declarations).

A :class:`Setting` states everything about one run setting: its type (the ``parse`` function that
validates a CLI or YAML value and returns its canonical, typed value), its default, its help text, its
CLI flag and experiment-file key, whether it enters the run key and the CSV rows, and the schema
version that added it. A :class:`Field` does the same for a field of :class:`~vflbench.runs.config.RunConfig`
(the run's structure: data, method, their options, hyper-parameters, model). From the declarations come:

* the ``vflbench run`` options (:func:`cli_parameters`, :func:`field_parameters`),
* the keys an experiment file accepts (:func:`experiment_values`, :func:`experiment_keys`,
:func:`experiment_field_keys`),
* ``RunConfig.settings`` -> ``ResolvedRun.settings`` (:func:`resolve_settings`, :func:`finish_settings`),
* the manifest round trip, the run key (a setting at its default is absent, so adding a setting changes
  no earlier key) and the CSV column ``settings`` (:func:`columns`),
* the request a command line makes (:func:`request`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import VFLBenchError, did_you_mean

SCHEMA_VERSION = 3  # interface v3: the first settings declared here


@dataclass(frozen=True)
class Setting:
    name: str  # the key in RunConfig.settings / ResolvedRun.settings, the manifest and the experiment file
    default: Any  # the canonical value a run has when nobody sets it
    help: str
    parse: Callable[[Any], Any]  # a CLI/YAML value -> the canonical typed value; raises VFLBenchError
    metavar: str = "TEXT"
    keyed: bool = True  # enters the run key (when apart from its default)
    column: bool = (
        True  # listed in the CSV column ``settings`` ("name=value;...") of the runs that set it apart from its default
    )
    since: int = SCHEMA_VERSION  # the schema version that added it
    check: Callable[[dict[str, Any], Any], None] | None = None  # checks against the other settings and the method class
    example: Any = None  # a valid value apart from the default, and
    bad: Any = None  # an invalid one: the conformance suite (tests/test_settings.py) tries both on every setting
    example_with: tuple[tuple[str, Any], ...] = ()  # other settings the example needs (name, value)
    # "settings": under config.settings; "top": at the config's top level, where runs recorded it before schema v3
    # (their keys stay)
    placement: str = "settings"
    finish: Callable[[Any, Context], Any] | None = (
        None  # canonicalise/check with what resolving learned (classes, epochs)
    )
    always: bool = False  # recorded and keyed even at its default (how runs recorded labeled/aligned before schema v3)
    stage: str = "end"  # when ``finish`` runs: "protocol" (the protocol is known, before the hyper-parameters) or "end"
    axis: str | None = (
        None  # an experiment file lists its values under this key, one run each (a grid axis), instead of one value
    )
    default_for: Callable[[dict[str, Any], Any], Any] | None = (
        None  # the default when nobody sets it, from the other settings and the method class
    )
    many: bool = False  # the CLI flag may be repeated (its values come as a list)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def text(self, value: Any) -> Any:
        """The JSON/CSV form of a canonical value."""
        if isinstance(value, (tuple, list)):
            return list(value)
        return value if isinstance(value, (int, float, bool)) or value is None else str(value)


@dataclass(frozen=True)
class Context:
    """What :func:`finish_settings` knows: the protocol at stage "protocol"; the data and the
    hyper-parameters too at stage "end"."""

    dataset: str
    protocol: Any  # vflbench.runs.protocols.ResolvedProtocol
    n_classes: int = 0
    total_epochs: int = 0
    batch_size: int = 0  # the first stage's


SETTINGS: dict[str, Setting] = {}


def declare(setting: Setting) -> Setting:
    if setting.name in SETTINGS:
        raise ValueError(f"run setting {setting.name!r} declared twice")
    SETTINGS[setting.name] = setting
    return setting


def resolve_settings(given: dict[str, Any], mcls=None) -> dict[str, Any]:
    """Every declared setting's canonical value (the user's, parsed once, else the default), checked
    against each other and the method class. Unknown names are errors that list the known ones."""
    unknown = set(given) - set(SETTINGS)
    if unknown:
        name = sorted(unknown)[0]
        raise VFLBenchError(
            f"Unknown run setting {name!r}.{did_you_mean(name, SETTINGS)} Known: {', '.join(SETTINGS)}."
        )
    values = {n: (s.parse(given[n]) if given.get(n) is not None else s.default) for n, s in SETTINGS.items()}
    for n, s in SETTINGS.items():  # defaults that depend on the run (e.g. the noise source on the runtime)
        if s.default_for is not None and given.get(n) is None:
            values[n] = s.default_for(values, mcls)
    for s in SETTINGS.values():
        if s.check is not None:
            s.check(values, mcls)
    return values


def finish_settings(values: dict[str, Any], ctx: Context, stage: str = "end") -> dict[str, Any]:
    """Apply the ``finish`` of every setting of ``stage`` (checks and forms that need the protocol,
    the data or the epochs)."""
    return {
        n: (SETTINGS[n].finish(v, ctx) if SETTINGS[n].finish is not None and SETTINGS[n].stage == stage else v)
        for n, v in values.items()
    }


def _apart(values: dict[str, Any], placement: str) -> dict[str, Any]:
    return {
        n: SETTINGS[n].text(v)
        for n, v in values.items()
        if n in SETTINGS and SETTINGS[n].placement == placement and (v != SETTINGS[n].default or SETTINGS[n].always)
    }


def to_json(values: dict[str, Any]) -> dict[str, Any]:
    """The manifest's ``settings``: the values apart from their defaults, as text."""
    return _apart(values, "settings")


def top_json(values: dict[str, Any]) -> dict[str, Any]:
    """The settings recorded at the config's top level (declared before schema v3), apart from their defaults."""
    return _apart(values, "top")


def from_manifest(config: dict[str, Any]) -> dict[str, Any]:
    """The user values a recorded config holds: ``config.settings`` and the top-level ones."""
    out = {n: config[n] for n, s in SETTINGS.items() if s.placement == "top" and config.get(n) is not None}
    out.update(config.get("settings") or {})
    for (
        n,
        s,
    ) in (
        SETTINGS.items()
    ):  # a manifest records values apart from the canonical default: absent means the default, not the run's
        if s.default_for is not None and n not in out:
            out[n] = s.text(s.default)
    return out


def key_dict(values: dict[str, Any]) -> dict[str, Any]:
    """What the run key hashes: the keyed values apart from their defaults."""
    return {n: v for n, v in to_json(values).items() if SETTINGS[n].keyed}


def columns(values: dict[str, Any]) -> dict[str, Any]:
    """The CSV column ``settings``: ``name=value;...`` of the column settings apart from their defaults
    (absent when none is: runs at the defaults keep the rows they always had). Tables show such runs
    as variants of their method, as they do for method options."""
    apart = {n: v for n, v in {**top_json(values), **to_json(values)}.items() if values[n] != SETTINGS[n].default}
    text = ";".join(f"{n}={v}" for n, v in apart.items() if SETTINGS[n].column)
    return {"settings": text} if text else {}


def experiment_values(spec: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """The settings an experiment file gives: top level, overridden per dataset (grid axes such as
    ``seeds`` and ``parties`` are expanded by the experiment builder, one run per value)."""
    return {
        n: over.get(n, spec.get(n))
        for n, s in SETTINGS.items()
        if s.axis is None and over.get(n, spec.get(n)) is not None
    }


def experiment_keys() -> set[str]:
    """The keys declared settings take in an experiment file (a grid axis under its own name)."""
    return {s.axis or n for n, s in SETTINGS.items()}


def cli_parameters():
    """``inspect.Parameter`` objects for ``vflbench run``: one typer option per declared setting."""
    import inspect

    import typer

    return [
        inspect.Parameter(
            n,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=list[str] | None if s.many else str | None,
            default=typer.Option(None, s.flag, metavar=s.metavar, help=f"{s.help} [default: {s.text(s.default)}]"),
        )
        for n, s in SETTINGS.items()
    ]


# ============================================================================= run fields
# The structure of a run (which data, which method, their options, hyper-parameters and model) is
# held by the fields of vflbench.runs.config.RunConfig, resolved by vflbench.runs.config.resolve (the data's
# and method's registries, the presets, the protocol). Each is declared here once, like a setting:
# its CLI flag and how the flag's text becomes the field's value, its experiment-file key and the
# levels that take it, and how a recorded manifest gives it back. From these come the `vflbench run`
# options (with the settings above), the keys an experiment file accepts, the RunConfig a command
# line builds, and the request that reproduces a recorded run.


def parse_kv(items: list[str] | None, what: str) -> dict[str, str]:
    """Repeatable ``key=value`` options -> a dict; a key given twice with two values is an error."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise VFLBenchError(f"{what} must look like key=value, got '{item}'.")
        key = key.strip()
        if key in out:
            same = (
                " (the same value twice)"
                if out[key] == value.strip()
                else f" ({key}={out[key]} and {key}={value.strip()})"
            )
            raise VFLBenchError(f"{what} {key} is given twice{same}; give it once.")
        out[key] = value.strip()
    return out


def number(v: str):
    """``"3"`` -> 3, ``"0.5"`` -> 0.5, anything else as it is."""
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def parse_int_list(text: str, what: str, example: str = "128,64") -> list[int]:
    """``10,10`` -> [10, 10]; an empty entry (``10,,10``) or a non-integer is an error."""
    parts = [p.strip() for p in text.split(",")]
    try:
        if not text.strip() or any(p == "" for p in parts):
            raise ValueError
        return [int(p) for p in parts]
    except ValueError:
        raise VFLBenchError(f"{what} must be comma-separated integers such as {example}, got '{text}'.") from None


def parse_hp(items: list[str] | None) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """``--hp lr=0.01`` (every stage) and ``--hp stage1.epochs=5`` (one stage)."""
    every: dict[str, str] = {}
    stages: dict[str, dict[str, str]] = {}
    for key, value in parse_kv(items, "--hp").items():
        stage, dot, name = key.rpartition(".")
        if dot:
            stages.setdefault(stage, {})[name] = value
        else:
            every[key] = value
    return every, stages


def merge_hp_flags(every: dict[str, str], flags: dict[str, object]) -> dict[str, object]:
    """``--hp key=value`` (every stage) and the hyper-parameter flags given explicitly: a flag never
    erases an ``--hp`` value, and the two disagreeing on one key is an error, not a silent choice."""
    for key, value in flags.items():
        if key in every:
            try:
                same = float(every[key]) == float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                same = str(every[key]) == str(value)
            if not same:
                raise VFLBenchError(
                    f"--{key.replace('_', '-')} {value} and --hp {key}={every[key]} disagree; give one of them."
                )
    return {**every, **flags}


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


@dataclass(frozen=True)
class Field:
    """One field of a run request (a :class:`~vflbench.runs.config.RunConfig` field, or one key of its
    ``hp``/``model`` dicts that has a flag of its own)."""

    name: str  # the RunConfig field (into=None) or the key inside ``into``; also the CLI parameter
    help: str
    kind: type = str  # the CLI value's type: str, int, float, or list (a repeatable option)
    flag: str | None = ""  # "" = --name; None = no flag of its own (filled by another flag, e.g. stage_hp by --hp)
    into: str | None = (
        # "hp" | "model" | "data_options": the flag sets one key of that RunConfig dict; "dataset": it names the dataset
        None
    )
    key: str | None = None  # the key it sets under ``into`` (default: its name)
    required: bool = False
    default: Any = None
    metavar: str | None = None
    to_value: Callable[[Any, str], Any] | None = (
        None  # the flag's value -> the field's (e.g. key=value items -> a dict)
    )
    yaml: str | None = ""  # its experiment-file key ("" = its name; None = none of its own)
    levels: tuple[str, ...] = ("top", "dataset")  # the levels of an experiment file that take it
    record: Callable[[dict[str, Any]], Any] | None = (
        None  # a recorded config -> the value that reproduces it (default: the same key)
    )
    settle: Callable[[Any, dict[str, Any]], None] | None = (
        None  # after the flag is read: what it implies for the other settings (e.g. --parties)
    )

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def yaml_key(self) -> str | None:
        return None if self.yaml is None else (self.yaml or self.name)

    def value(self, given: Any) -> Any:
        if given is None:
            return None
        return self.to_value(given, self.cli_flag) if self.to_value else given

    def from_record(self, config: dict[str, Any]) -> Any:
        return self.record(config) if self.record else _copy(config.get(self.name))


FIELDS: dict[str, Field] = {}


def declare_field(f: Field) -> Field:
    if f.name in FIELDS or f.name in SETTINGS:
        raise ValueError(f"run field {f.name!r} declared twice")
    FIELDS[f.name] = f
    return f


def field_option(name: str, **overrides):
    """The typer option of a declared field, for a command that takes it (``vflbench masks``,
    ``inspect``): the same flag means the same thing everywhere."""
    import typer

    f = FIELDS[name]
    default = ... if f.required else f.default
    return typer.Option(overrides.pop("default", default), f.cli_flag, help=f.help, metavar=f.metavar, **overrides)


def field_parameters(required: bool = True):
    """``inspect.Parameter`` objects for ``vflbench run``: one typer option per field that has a flag
    (``required=False``: none is required, for a command that may read the run from a file instead)."""
    import inspect

    out = []
    for name, f in FIELDS.items():
        if f.flag is None:
            continue
        need = f.required and required
        annotation = {str: str, int: int, float: float, list: list[str]}[f.kind]
        annotation = annotation if need or f.default is not None else annotation | None
        out.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=annotation,
                default=field_option(name) if need or not f.required else field_option(name, default=None),
            )
        )
    return out


def request(given: dict[str, Any]) -> dict[str, Any]:
    """The :class:`~vflbench.runs.config.RunConfig` keyword arguments of one command line (``given``: the
    parsed value of every field flag and setting flag). ``--hp`` and the hyper-parameter flags merge,
    refusing a disagreement, and each value's source is kept (precedence flag > --hp > experiment >
    preset, recorded in the manifest)."""
    out: dict[str, Any] = {"settings": {n: v for n, v in given.items() if n in SETTINGS and v is not None and v != []}}
    flags: dict[str, dict[str, Any]] = {"hp": {}, "model": {}, "data_options": {}}
    for name, f in FIELDS.items():
        if f.flag is None or given.get(name) is None:
            continue
        value = f.value(given[name])
        if f.into == "dataset":
            if given.get("dataset"):
                raise VFLBenchError(f"Give --dataset or {f.cli_flag}, not both.")
            out["dataset"] = f"aligned:{value}"
        elif f.into is not None:
            flags[f.into][f.key or name] = value
        elif name == "hp":
            every, out["stage_hp"] = parse_hp(given[name])
            out["hp_sources"] = dict.fromkeys(every, "--hp")
            out["hp"] = every
        else:
            out[name] = value
        if f.settle is not None:
            f.settle(value, out["settings"])
    if not out.get("dataset"):
        raise VFLBenchError("Give --dataset NAME (see `vflbench datasets`), csv:PATH, or --party-data name=path,... .")
    if not out.get("method"):
        raise VFLBenchError("Give --method NAME (see `vflbench methods`).")
    if flags["data_options"]:
        clash = set(flags["data_options"]) & set(out.get("data_options", {}))
        if clash:
            raise VFLBenchError(f"--data-opt {sorted(clash)[0]}=... and its own flag are both given; give one.")
        out["data_options"] = {**out.get("data_options", {}), **flags["data_options"]}
    every = out.get("hp", {})
    out["hp"] = merge_hp_flags(every, flags["hp"])
    out["hp_sources"] = {**out.get("hp_sources", {}), **dict.fromkeys(flags["hp"], "flag")}
    out["model"] = flags["model"]
    return out


def experiment_field_keys(level: str) -> set[str]:
    """The keys run fields take at one level of an experiment file ("top" or "dataset")."""
    return {f.yaml_key for f in FIELDS.values() if f.yaml_key is not None and level in f.levels}
