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
docs/SETTINGS.md walks through one. The older run settings (dataset, method, hyper-parameters, ...)
are still fields of :class:`~vflbench.config.RunConfig`; they move here one at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import VFLBenchError, did_you_mean

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
    return {**out, **(config.get("settings") or {})}


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


def _int_at_least(flag: str, low: int, what: str = "an integer", hint: str = ""):
    """The parse of an integer setting that must be at least ``low``."""

    def parse(value: Any) -> int:
        try:
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            n = int(float(value))
        except (TypeError, ValueError):
            raise VFLBenchError(f"{flag} takes {what}, got {value!r}.") from None
        if n < low:
            raise VFLBenchError(f"{flag} must be >= {low}{hint}, got {n}.")
        return n

    return parse


declare(Setting("seed", 0, "run seed (all named streams derive from it)", _int_at_least("--seed", 0), metavar="INTEGER", column=False,
                since=2, placement="top", always=True, example=3, bad=-1, axis="seeds"))
declare(Setting("parties", 4, "number of parties K", _int_at_least("--parties", 1), metavar="INTEGER", column=False,
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
                _int_at_least("--eval-batch-size", 1, "a number of samples"), metavar="N", column=False, since=2, placement="top", always=True, finish=_finish_eval_batch_size,
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
