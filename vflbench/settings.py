"""Run settings declared once.

A :class:`Setting` states everything about one run setting: its type (the ``parse`` function that
validates a CLI or YAML value and returns its canonical, typed value), its default, its help text, its
CLI flag and experiment-file key, whether it enters the run key and the CSV rows, and the schema
version that added it. From the declarations come:

* the ``vflbench run`` options (:func:`cli_parameters`),
* the keys an experiment file accepts, at the top level and per dataset (:func:`experiment_values`),
* ``RunConfig.settings`` -> ``ResolvedRun.settings`` (:func:`resolve_settings`),
* the manifest round trip (``config.settings``, only values apart from their defaults),
* the run key (a setting at its default is absent, so adding a setting changes no earlier key, with
  no per-field shim) and the CSV columns (:func:`columns`).

Adding a setting is a :func:`declare` call here and the code that uses it (``run.settings[name]``);
docs/SETTINGS.md walks through one. The structure of a run (dataset, method, partitioner, protocol,
their option dicts, hyper-parameters, model) is held by :class:`~vflbench.config.RunConfig` fields,
each declared here too as a :class:`Field` (flag, experiment-file key and levels, manifest read-back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import VFLBenchError, did_you_mean
from .limits import check as check_limit

SCHEMA_VERSION = 3  # interface v3: the first settings declared here


@dataclass(frozen=True)
class Setting:
    name: str  # the key in RunConfig.settings / ResolvedRun.settings, the manifest and the experiment file
    default: Any  # the canonical value a run has when nobody sets it
    help: str
    parse: Callable[[Any], Any]  # a CLI/YAML value -> the canonical typed value; raises VFLBenchError
    metavar: str = "TEXT"
    keyed: bool = True  # enters the run key (when apart from its default)
    column: bool = True  # listed in the CSV column ``settings`` ("name=value;...") of the runs that set it apart from its default
    since: int = SCHEMA_VERSION  # the schema version that added it
    check: Callable[[dict[str, Any], Any], None] | None = None  # checks against the other settings and the method class
    example: Any = None  # a valid value apart from the default, and
    bad: Any = None  # an invalid one: the conformance suite (tests/test_settings.py) tries both on every setting
    example_with: tuple[tuple[str, Any], ...] = ()  # other settings the example needs (name, value)
    placement: str = "settings"  # "settings": under config.settings; "top": at the config's top level, where runs recorded it before schema v3 (their keys stay)
    finish: Callable[[Any, Context], Any] | None = None  # canonicalise/check with what resolving learned (classes, epochs)
    always: bool = False  # recorded and keyed even at its default (how runs recorded labeled/aligned before schema v3)
    stage: str = "end"  # when ``finish`` runs: "protocol" (the protocol is known, before the hyper-parameters) or "end"
    axis: str | None = None  # an experiment file lists its values under this key, one run each (a grid axis), instead of one value
    default_for: Callable[[dict[str, Any], Any], Any] | None = None  # the default when nobody sets it, from the other settings and the method class

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
    protocol: Any  # vflbench.protocols.ResolvedProtocol
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
        raise VFLBenchError(f"Unknown run setting {name!r}.{did_you_mean(name, SETTINGS)} Known: {', '.join(SETTINGS)}.")
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
    return {n: (SETTINGS[n].finish(v, ctx) if SETTINGS[n].finish is not None and SETTINGS[n].stage == stage else v) for n, v in values.items()}


def _apart(values: dict[str, Any], placement: str) -> dict[str, Any]:
    return {n: SETTINGS[n].text(v) for n, v in values.items()
            if n in SETTINGS and SETTINGS[n].placement == placement and (v != SETTINGS[n].default or SETTINGS[n].always)}


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
    for n, s in SETTINGS.items():  # a manifest records values apart from the canonical default: absent means the default, not the run's
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
    return {n: over.get(n, spec.get(n)) for n, s in SETTINGS.items() if s.axis is None and over.get(n, spec.get(n)) is not None}


def experiment_keys() -> set[str]:
    """The keys declared settings take in an experiment file (a grid axis under its own name)."""
    return {s.axis or n for n, s in SETTINGS.items()}


def cli_parameters():
    """``inspect.Parameter`` objects for ``vflbench run``: one typer option per declared setting."""
    import inspect

    import typer

    return [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                              default=typer.Option(None, s.flag, metavar=s.metavar, help=f"{s.help} [default: {s.text(s.default)}]"))
            for n, s in SETTINGS.items()]


# ----------------------------------------------------------------------------- the declarations
def _target(value: Any) -> str:
    from .config import parse_target

    return parse_target(value, 2, "")  # the form; the class count is checked in finish


def _finish_target(value: Any, ctx: Context):
    from .config import parse_target

    return None if value is None else parse_target(value, ctx.n_classes, ctx.dataset)


def _eval_epochs(value: Any):
    from .config import parse_eval_epochs

    if value is None or value == "" or value == []:
        return None
    parse_eval_epochs(value, 10**9)  # the form; the epochs are checked in finish
    return value


def _finish_eval_epochs(value: Any, ctx: Context):
    from .config import parse_eval_epochs

    return parse_eval_epochs(value, ctx.total_epochs)


def _int_at_least(flag: str, low: int, what: str = "an integer", hint: str = "", limit: str | None = None):
    """The parse of an integer setting that must be at least ``low`` (and within ``limit``, vflbench.limits)."""

    def parse(value: Any) -> int:
        try:
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            n = int(float(value))
        except (TypeError, ValueError):
            raise VFLBenchError(f"{flag} takes {what}, got {value!r}.") from None
        if n < low:
            raise VFLBenchError(f"{flag} must be >= {low}{hint}, got {n}.")
        if limit is not None:
            check_limit(limit, n, flag)
        return n

    return parse


declare(Setting("seed", 0, "run seed (all named streams derive from it)", _int_at_least("--seed", 0), metavar="INTEGER", column=False,
                since=2, placement="top", always=True, example=3, bad=-1, axis="seeds"))
declare(Setting("parties", 4, "number of parties K", _int_at_least("--parties", 1, limit="parties"), metavar="INTEGER", column=False,
                since=2, placement="top", always=True, example=3, bad=0, axis="parties"))


def _train_missing(value: Any):
    from .missingness import MissingSpec

    return MissingSpec(value)


def _test_missing(value: Any):
    from .missingness import test_settings

    return test_settings(value)


def _missing_default(text: str):
    from .missingness import MissingSpec, test_settings

    return MissingSpec(text) if "," not in text else test_settings(text)


declare(Setting("train_missing", _missing_default("none"), "training missingness spec, e.g. mcar:0.1, mcar:0.1,0.2,0.5,0, mcar-beta:2,2, mar1, mnar:0.7",
                _train_missing, metavar="SPEC", column=False, since=2, placement="top", always=True, example="mcar:0.2", bad="mcar:2",
                axis="train_missing"))
declare(Setting("test_missing", _missing_default("none,mcar:0.1,mcar:0.5"), "comma-separated test settings (each as --train-missing)",
                _test_missing, metavar="SPECS", column=False, since=2, placement="top", always=True, example=["none", "mar1"], bad=["none", "none"]))


def _preset(value: Any) -> str | None:
    if value is None or str(value).strip() == "":
        return None
    if not isinstance(value, str):
        raise VFLBenchError(f"--preset takes a preset name or a YAML path, got {value!r}.")
    return value.strip()


def _finish_preset(value: Any, ctx: Context) -> str:
    from .presets import load_preset
    from .protocols import default_preset

    name = value or default_preset(ctx.protocol.name)
    load_preset(name)  # an unknown name or a bad file is refused here, before any work (relative paths are registered by now)
    return name


def _finish_eval_batch_size(value: Any, ctx: Context) -> int:
    # per-batch test masks are drawn with the training batch size, so evaluate in those batches
    if ctx.protocol.test_granularity == "batch":
        return ctx.batch_size
    return int(value or max(ctx.batch_size, 1024))


declare(Setting("preset", None, "hyper-parameter preset name or YAML path [default: the protocol's: laser_table1; false_tables under --protocol false]",
                _preset, column=False, since=2, placement="top", always=True, stage="protocol", finish=_finish_preset,
                example="false_tables", bad=["not", "a", "name"]))
declare(Setting("eval_batch_size", None, "evaluation batch size [default: max(training batch size, 1024); the training batch size under per-batch test masks]",
                _int_at_least("--eval-batch-size", 1, "a number of samples", limit="eval_batch_size"), metavar="N", column=False, since=2, placement="top", always=True, finish=_finish_eval_batch_size,
                example=256, bad=0))


def _check_labeled(values: dict[str, Any], mcls) -> None:
    lab, al = values["labeled"], values["aligned"]
    if mcls is not None and mcls.needs_labeled and lab is None:
        raise VFLBenchError(f"{mcls.display} is semi-supervised: give --labeled N (and --aligned M), e.g. --labeled 500 --aligned 100 as in the FALSE-VFL paper.")
    if lab is not None and al > lab:
        raise VFLBenchError(f"Need 1 <= --labeled and 0 <= --aligned <= --labeled; got labeled={lab}, aligned={al}.")
    if lab is None and al:
        raise VFLBenchError("--aligned needs --labeled (the aligned reserve lies inside the labeled set).")


declare(Setting("labeled", None, "semi-supervised run: number of labeled training samples",
                _int_at_least("--labeled", 1, "a number of labeled training samples"), metavar="N", column=False, since=2,
                placement="top", always=True, check=_check_labeled, example=50, bad=0))
declare(Setting("aligned", 0, "fully observed reserve inside the labeled set (with --labeled)",
                _int_at_least("--aligned", 0, "a number of samples"), metavar="N", column=False, since=2,
                placement="top", always=True, example=5, bad=-1, example_with=(("labeled", 50),)))
declare(Setting("target", None, "record the first epoch reaching a training metric, e.g. train_auprc=0.9 (a pass over the training set per epoch)",
                _target, keyed=True, column=False, since=2, placement="top", finish=_finish_target, example="train_accuracy=0.9", bad="auprc"))
declare(Setting("eval_epochs", None, "also evaluate after these epochs: 5,10,20, 1:100[:step], or shares of the run such as 25%,50%; CSV rows get an epoch column",
                _eval_epochs, keyed=True, column=False, since=2, placement="top", finish=_finish_eval_epochs, example="1", bad="0"))
def _mechanism(value: Any):
    from .mechanism_spec import parse_mechanism

    return parse_mechanism(value)


def _secagg(value: Any) -> str:
    from .mechanism_spec import parse_secagg

    return parse_secagg(value)


def _check_boundary(values: dict[str, Any], mcls) -> None:
    from .mechanism_spec import check_support

    if mcls is not None:
        check_support(mcls, values["mechanism"], values["secagg"])


def _default_mechanism():
    from .mechanism_spec import MechanismSpec

    return MechanismSpec()


declare(Setting("mechanism", _default_mechanism(), "privacy mechanism at the party-to-server boundary, for any method that supports it: "
                "none | npq | pbm:b=32,beta=0.1[,C=1,bound=clip|tanh,accountant=pld,delta=1e-5] | ldp:sigma=1[,C=1,bound=...] "
                "(`vflbench methods` lists the parameters)", _mechanism, metavar="SPEC", check=_check_boundary,
                example="ldp:sigma=0.5", bad="pbm:beta=0.5"))
declare(Setting("secagg", "plain", "secure aggregation of PBM counts: plain | masked (methods that sum at the server: sum)", _secagg,
                metavar="MODE", example="masked", bad="maybe", example_with=(("mechanism", "pbm"),)))


declare(Setting("train_samples", 0, "train on this many samples of the training split, drawn uniformly without replacement from the "
                "run's own stream (train_samples), after any validation hold-out; 0 = all. For learning curves by data size",
                _int_at_least("--train-samples", 0, "a number of training samples (0 = all)", " (0 = the whole training split)"),
                metavar="N", example=500, bad=-1))


def _runtime(value: Any) -> str:
    from .runtime import RUNTIMES

    v = str(value).strip().lower()
    if v not in RUNTIMES:
        raise VFLBenchError(f"--runtime takes {' | '.join(RUNTIMES)}, got {value!r}.{did_you_mean(v, RUNTIMES)}")
    return v


def _check_runtime(values: dict[str, Any], mcls) -> None:
    if values["runtime"] == "inprocess":
        if values["net_latency"] or values["net_bandwidth"]:
            raise VFLBenchError("--net-latency and --net-bandwidth emulate the link between party processes; add --runtime processes.")
        return
    from .runtime import refusal

    if mcls is not None and (why := refusal(mcls)):
        raise VFLBenchError(f"{mcls.display} cannot run with --runtime processes: {why}.")


def _non_negative(flag: str, unit: str, limit: str):
    def parse(value: Any) -> float:
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise VFLBenchError(f"{flag} takes a number of {unit}, got {value!r}.") from None
        if not v >= 0 or v == float("inf"):
            raise VFLBenchError(f"{flag} must be a finite number >= 0 ({unit}), got {value!r}.")
        check_limit(limit, v, flag)
        return v

    return parse


declare(Setting("runtime", "inprocess", "where the parties run: inprocess (one process) | processes (one OS process per party and one for the "
                "server, over torch.distributed; the same numbers)", _runtime, metavar="NAME", keyed=False, column=False,
                check=_check_runtime, example="processes", bad="threads"))
declare(Setting("net_latency", 0.0, "with --runtime processes: one-way delay per message, in milliseconds (an emulated WAN link per party)",
                _non_negative("--net-latency", "milliseconds", "net_latency"), metavar="MS", keyed=False, column=False,
                example=20, bad=-1, example_with=(("runtime", "processes"),)))
declare(Setting("net_bandwidth", 0.0, "with --runtime processes: link bandwidth per party in Mbit/s (0 = unlimited)",
                _non_negative("--net-bandwidth", "Mbit/s", "net_bandwidth"), metavar="MBPS", keyed=False, column=False,
                example=10, bad="fast", example_with=(("runtime", "processes"),)))


NOISE_SOURCES = ("seeded", "secret")


def _noise_source(value: Any) -> str:
    v = str(value).strip().lower()
    if v not in NOISE_SOURCES:
        raise VFLBenchError(f"--noise-source takes {' | '.join(NOISE_SOURCES)}, got {value!r}.{did_you_mean(v, NOISE_SOURCES)}")
    return v


def draws_privacy_noise(values: dict[str, Any], mcls) -> bool:
    """Whether a run draws privacy noise at its boundary: a private ``--mechanism``, or a method that
    attaches its own (``draws_noise``, e.g. PBM-VFL)."""
    mech = values.get("mechanism")
    return bool((mech is not None and mech.private) or getattr(mcls, "draws_noise", False))


def _noise_default(values: dict[str, Any], mcls) -> str:
    """Secret where each party draws its noise in its own process, reproducible (seeded) elsewhere."""
    return "secret" if values["runtime"] == "processes" and draws_privacy_noise(values, mcls) else "seeded"


def _check_noise_source(values: dict[str, Any], mcls) -> None:
    if values["noise_source"] != "secret":
        return
    if values["runtime"] != "processes":
        raise VFLBenchError("--noise-source secret draws each party's noise inside its own process, which one process cannot do (it also "
                            "plays the server); add --runtime processes, or use --noise-source seeded.")
    if mcls is not None and not draws_privacy_noise(values, mcls):
        raise VFLBenchError("--noise-source applies to runs that draw privacy noise (a --mechanism, or --method pbm); this run draws none.")


declare(Setting("noise_source", "seeded", "who can derive the parties' privacy noise: secret (each party process draws it from the OS's "
                "randomness; never sent or recorded; not reproducible) | seeded (from the run seed: reproducible, but the server and every "
                "party can regenerate it) [default: secret under --runtime processes, seeded in one process]", _noise_source, metavar="SOURCE",
                check=_check_noise_source, default_for=_noise_default, example="secret", bad="urandom",
                example_with=(("runtime", "processes"), ("mechanism", "pbm:b=32,beta=0.1,noise=party"))))


# ============================================================================= run fields
# The structure of a run (which data, which method, their options, hyper-parameters and model) is
# held by the fields of vflbench.config.RunConfig, resolved by vflbench.config.resolve (the data's
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
            same = " (the same value twice)" if out[key] == value.strip() else f" ({key}={out[key]} and {key}={value.strip()})"
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
                raise VFLBenchError(f"--{key.replace('_', '-')} {value} and --hp {key}={every[key]} disagree; give one of them.")
    return {**every, **flags}


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


@dataclass(frozen=True)
class Field:
    """One field of a run request (a :class:`~vflbench.config.RunConfig` field, or one key of its
    ``hp``/``model`` dicts that has a flag of its own)."""

    name: str  # the RunConfig field (into=None) or the key inside ``into``; also the CLI parameter
    help: str
    kind: type = str  # the CLI value's type: str, int, float, or list (a repeatable option)
    flag: str | None = ""  # "" = --name; None = no flag of its own (filled by another flag, e.g. stage_hp by --hp)
    into: str | None = None  # "hp" | "model" | "data_options": the flag sets one key of that RunConfig dict; "dataset": it names the dataset
    key: str | None = None  # the key it sets under ``into`` (default: its name)
    required: bool = False
    default: Any = None
    metavar: str | None = None
    to_value: Callable[[Any, str], Any] | None = None  # the flag's value -> the field's (e.g. key=value items -> a dict)
    yaml: str | None = ""  # its experiment-file key ("" = its name; None = none of its own)
    levels: tuple[str, ...] = ("top", "dataset")  # the levels of an experiment file that take it
    record: Callable[[dict[str, Any]], Any] | None = None  # a recorded config -> the value that reproduces it (default: the same key)

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


def _pairs(items, flag):
    return parse_kv(items, flag)


def _number_pairs(items, flag):
    return {k: number(v) for k, v in parse_kv(items, flag).items()}


def _protocol_name(value: Any, flag: str = "--protocol") -> str:
    return "false" if value is False else str(value)  # YAML 1.1 reads an unquoted `protocol: false` as a boolean


declare_field(Field("dataset", "dataset name (see `vflbench datasets`), csv:PATH or openml:ID (or --party-data) [required]", yaml="datasets", levels=("top",)))
declare_field(Field("party_data", "parties' own files keyed by an ID column, name=path,... (e.g. party0=a.csv,party1=b.csv); the file with "
                    "--data-opt target=COLUMN gives the labels; a block whose party lacks the sample's ID is missing (docs/RUNTIME.md)",
                    into="dataset", yaml=None, levels=(), metavar="NAME=PATH,..."))
declare_field(Field("id_column", "the ID column of the --party-data files", into="data_options", key="id", yaml=None, levels=()))
def _align(value: Any, flag: str) -> str:
    v = str(value).strip().lower()
    if v not in ("psi", "plain"):
        raise VFLBenchError(f"{flag} takes psi or plain, got {value!r}.")
    return v


declare_field(Field("align", "how --party-data rows are aligned: psi (private set intersection) | plain (IDs in clear; not private)",
                    into="data_options", key="align", yaml=None, levels=(), to_value=_align))
declare_field(Field("method", "method name (see `vflbench methods`)", required=True, yaml="methods"))
declare_field(Field("partitioner", "contiguous | random | importance | correlation | columns | tiles | grid (default by data kind)"))
declare_field(Field("protocol", "clean (default) | compat (the LASER-VFL authors' code) | false (the FALSE-VFL paper's baselines)",
                    default="clean", levels=("top",), to_value=_protocol_name, record=lambda c: c["protocol"]["name"]))
for _hp_name, _kind, _help in (("epochs", int, "override the preset's epochs (every stage)"), ("lr", float, "override the preset's learning rate"),
                               ("batch_size", int, "override the preset's batch size"), ("optimizer", str, "adam | sgd"),
                               ("weight_decay", float, "coupled L2 weight decay"), ("momentum", float, "SGD momentum"),
                               ("schedule", str, "none | cosine")):
    declare_field(Field(_hp_name, _help, kind=_kind, into="hp", yaml=None, levels=()))
declare_field(Field("hp", "hyper-parameter key=value; stage.key=value for one stage (repeatable)", kind=list, flag="--hp", metavar="KEY=VALUE"))
declare_field(Field("stage_hp", "per-stage hyper-parameters (on the command line: --hp stage.key=value)", flag=None,
                    record=lambda c: {k: dict(v) for k, v in c["stage_hp"].items()}))
declare_field(Field("method_options", "method option key=value (repeatable; `vflbench methods` lists them)", kind=list, flag="--method-opt",
                    metavar="KEY=VALUE", to_value=_pairs))
declare_field(Field("arch", "extractor: mlp | cnn-small | resnet18 | resnet18-half", into="model", yaml=None, levels=()))
declare_field(Field("hidden", "MLP hidden sizes, e.g. 10,10", into="model", yaml=None, levels=(),
                    to_value=lambda text, flag: parse_int_list(text, flag)))
declare_field(Field("cut", "representation size", kind=int, into="model", yaml=None, levels=()))
declare_field(Field("model", "model overrides (arch, hidden, cut, head_hidden; on the command line: --arch, --hidden, --cut)", flag=None))
TABLE_OPTIONS = "target, drop, test, test_size, split_seed, scaler, categorical, positive, sep, coerce, keep"  # a test keeps it equal to the loader's
declare_field(Field("data_options", "dataset option key=value (repeatable). Your own tables (csv:PATH, openml:ID) take: " + TABLE_OPTIONS
                    + "; a registered dataset's options: `vflbench datasets --format json`", kind=list, flag="--data-opt", metavar="KEY=VALUE",
                    to_value=_pairs, levels=("dataset",)))
declare_field(Field("partition_options", "partitioner option key=value, e.g. alpha=0.5 (repeatable)", kind=list, flag="--part-opt",
                    metavar="KEY=VALUE", to_value=_number_pairs))
declare_field(Field("protocol_options", "protocol option key=value, e.g. shuffle=false (repeatable)", kind=list, flag="--protocol-opt",
                    metavar="KEY=VALUE", to_value=_pairs, record=lambda c: {k: v for k, v in c["protocol"].items() if k != "name"}))


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
        out.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                     default=field_option(name) if need or not f.required else field_option(name, default=None)))
    return out


def request(given: dict[str, Any]) -> dict[str, Any]:
    """The :class:`~vflbench.config.RunConfig` keyword arguments of one command line (``given``: the
    parsed value of every field flag and setting flag). ``--hp`` and the hyper-parameter flags merge,
    refusing a disagreement, and each value's source is kept (precedence flag > --hp > experiment >
    preset, recorded in the manifest)."""
    out: dict[str, Any] = {"settings": {n: v for n, v in given.items() if n in SETTINGS and v is not None}}
    flags: dict[str, dict[str, Any]] = {"hp": {}, "model": {}, "data_options": {}}
    for name, f in FIELDS.items():
        if f.flag is None or given.get(name) is None:
            continue
        value = f.value(given[name])
        if f.into == "dataset":
            if given.get("dataset"):
                raise VFLBenchError(f"Give --dataset or {f.cli_flag}, not both.")
            out["dataset"] = f"aligned:{value}"
            out["settings"]["parties"] = _parties_of_files(value, out["settings"].get("parties"))
        elif f.into is not None:
            flags[f.into][f.key or name] = value
        elif name == "hp":
            every, out["stage_hp"] = parse_hp(given[name])
            out["hp_sources"] = dict.fromkeys(every, "--hp")
            out["hp"] = every
        else:
            out[name] = value
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


def _parties_of_files(text: str, given: Any) -> int:
    """The party count of ``--party-data`` (one file per party); an explicit ``--parties`` must agree."""
    from .alignment import parse_party_data

    k = len(parse_party_data(text))
    if given is not None and str(given).strip() != str(k):
        raise VFLBenchError(f"--parties {given} conflicts with --party-data, which names {k} party files; drop --parties (the files give the count).")
    return k


def experiment_field_keys(level: str) -> set[str]:
    """The keys run fields take at one level of an experiment file ("top" or "dataset")."""
    return {f.yaml_key for f in FIELDS.values() if f.yaml_key is not None and level in f.levels}
