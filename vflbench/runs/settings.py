"""Run settings and run fields, declared once (the machinery that turns the declarations into the CLI,
the experiment-file keys, the run key and the manifest is :mod:`vflbench.runs.schema`).

Adding a setting is a :func:`~vflbench.runs.schema.declare` call here and the code that uses it
(``run.settings[name]``); docs/SETTINGS.md walks through one. The structure of a run (dataset, method,
partitioner, protocol, their option dicts, hyper-parameters, model) is held by
:class:`~vflbench.runs.config.RunConfig` fields, each declared here too as a :class:`~vflbench.runs.schema.Field`.
"""

from __future__ import annotations

import math
from typing import Any

from ..core.errors import VFLBenchError, did_you_mean
from ..core.limits import check as check_limit
from ..core.textlists import split_items
from .hparams import _int
from .schema import (  # noqa: F401  (the machinery, re-exported: callers name the declarations' module)
    FIELDS,
    SCHEMA_VERSION,
    SETTINGS,
    Context,
    Field,
    Setting,
    cli_parameters,
    columns,
    declare,
    declare_field,
    experiment_field_keys,
    experiment_keys,
    experiment_values,
    field_option,
    field_parameters,
    finish_settings,
    from_manifest,
    key_dict,
    merge_hp_flags,
    number,
    parse_hp,
    parse_int_list,
    parse_kv,
    request,
    resolve_settings,
    to_json,
    top_json,
)


# ----------------------------------------------------------------------------- the declarations
def parse_eval_epochs(value: Any, total: int) -> tuple[int, ...] | None:
    """``[5, 10]``, ``"5,10"`` or ``"1:100"`` / ``"1:100:5"`` (inclusive) -> sorted epochs <= total,
    without the last epoch (always evaluated). An item ending in ``%`` is that share of the run's
    total (rounded, at least 1): ``"25%,50%"`` gives every method of a sweep the same relative budgets
    whatever its own epoch count."""
    if value is None or value == "" or value == []:
        return None
    try:
        if isinstance(value, str) and ":" in value:
            parts = [int(x) for x in value.split(":")]
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] < 1):
                raise ValueError
            check_limit("eval_epochs", parts[1], "--eval-epochs (a range's end)")  # before the range is expanded
            epochs = list(range(parts[0], parts[1] + 1, parts[2] if len(parts) == 3 else 1))
        else:
            items = (
                split_items(value, "--eval-epochs", "5,10,20")
                if isinstance(value, str)
                else (value if isinstance(value, (list, tuple)) else [value])
            )
            epochs = [_share(x, total) if str(x).strip().endswith("%") else _int(x, "eval epoch") for x in items]
    except (TypeError, ValueError):
        raise VFLBenchError(
            "--eval-epochs takes epochs like 5,10,20, shares of the run like 25%,50%, or a range like 1:100 (or "
            f"1:100:5); got {value!r}."
        ) from None
    if not epochs or min(epochs) < 1:
        raise VFLBenchError(f"--eval-epochs must list epochs >= 1; got {value!r}.")
    if max(epochs) > total:
        raise VFLBenchError(
            f"--eval-epochs lists epoch {max(epochs)}, but the run trains {total} epochs; raise --epochs or drop it."
        )
    out = tuple(sorted(set(epochs) - {total}))
    return out or None


def share_epoch(pct: float, total: int) -> int:
    """The epoch at ``pct`` % of ``total`` epochs: rounded half up, at least 1 (the one rounding
    rule, for --eval-epochs 25% and for tables at a share)."""
    return max(1, int(math.floor(total * pct / 100 + 0.5)))


def _share(item: Any, total: int) -> int:
    """``"25%"`` of ``total`` epochs."""
    pct = float(str(item).strip()[:-1])
    if not 0 < pct <= 100:
        raise ValueError
    return share_epoch(pct, total)


TARGET_METRICS = ("train_accuracy", "train_f1", "train_auprc")


def parse_target(text: str | None, n_classes: int, dataset: str) -> str | None:
    """``train_auprc=0.9`` -> canonical text; errors name the fix."""
    if text is None or str(text).strip() == "":
        return None
    name, sep, value = str(text).partition("=")
    name = name.strip()
    if not sep or name not in TARGET_METRICS:
        raise VFLBenchError(
            f"--target must look like METRIC=VALUE with METRIC one of {', '.join(TARGET_METRICS)}; got {text!r}."
        )
    try:
        v = float(value)
    except ValueError:
        raise VFLBenchError(f"--target value must be a number in (0, 1]; got {value!r}.") from None
    if not 0 < v <= 1:
        raise VFLBenchError(f"--target value must be in (0, 1]; got {v}.")
    if name in ("train_auprc", "train_f1") and n_classes != 2:
        raise VFLBenchError(
            f"Dataset '{dataset}' has {n_classes} classes; {name} is defined for binary tasks only. Use train_accuracy."
        )
    return f"{name}={v:g}"


def _target(value: Any) -> str:
    return parse_target(value, 2, "")  # the form; the class count is checked in finish


def _finish_target(value: Any, ctx: Context):
    return None if value is None else parse_target(value, ctx.n_classes, ctx.dataset)


def _eval_epochs(value: Any):
    if value is None or value == "" or value == []:
        return None
    parse_eval_epochs(value, 10**9)  # the form; the epochs are checked in finish
    return value


def _finish_eval_epochs(value: Any, ctx: Context):
    return parse_eval_epochs(value, ctx.total_epochs)


SEED_MAX = 2**63 - 1
SEED_HINT = " (2^63 - 1: a seed is an exact 64-bit integer, as results tables and torch generators store it)"


def _int_at_least(
    flag: str, low: int, what: str = "an integer", hint: str = "", limit: str | None = None, high: int | None = None
):
    """The parse of an integer setting that must be at least ``low`` (at most ``high``, and within ``limit``,
    vflbench.core.limits). The value is read exactly: never through a float, which rounds integers above 2^53."""

    def parse(value: Any) -> int:
        try:
            n = _int(value, flag)
        except ValueError:
            raise VFLBenchError(f"{flag} takes {what}, got {value!r}.") from None
        if n < low or (high is not None and n > high):
            bound = f">= {low}" if high is None else f"between {low} and {high}"
            raise VFLBenchError(f"{flag} must be {bound}{hint}, got {n}.")
        if limit is not None:
            check_limit(limit, n, flag)
        return n

    return parse


declare(
    Setting(
        "seed",
        0,
        "run seed (all named streams derive from it)",
        _int_at_least("--seed", 0, high=SEED_MAX, hint=SEED_HINT),
        metavar="INTEGER",
        column=False,
        since=2,
        placement="top",
        always=True,
        example=3,
        bad=-1,
        axis="seeds",
    )
)
declare(
    Setting(
        "parties",
        4,
        "number of parties K",
        _int_at_least("--parties", 1, limit="parties"),
        metavar="INTEGER",
        column=False,
        since=2,
        placement="top",
        always=True,
        example=3,
        bad=0,
        axis="parties",
    )
)


def _train_missing(value: Any):
    from ..data.missingness import MissingSpec

    return MissingSpec(value)


def _test_missing(value: Any):
    from ..data.missingness import test_settings

    return test_settings(value)


def _missing_default(text: str):
    from ..data.missingness import MissingSpec, test_settings

    return MissingSpec(text) if "," not in text else test_settings(text)


declare(
    Setting(
        "train_missing",
        _missing_default("none"),
        "training missingness spec, e.g. mcar:0.1, mcar:0.1,0.2,0.5,0, mcar-beta:2,2, mar1, mnar:0.7",
        _train_missing,
        metavar="SPEC",
        column=False,
        since=2,
        placement="top",
        always=True,
        example="mcar:0.2",
        bad="mcar:2",
        axis="train_missing",
    )
)
declare(
    Setting(
        "test_missing",
        _missing_default("none,mcar:0.1,mcar:0.5"),
        "comma-separated test settings (each as --train-missing)",
        _test_missing,
        metavar="SPECS",
        column=False,
        since=2,
        placement="top",
        always=True,
        example=["none", "mar1"],
        bad=["none", "none"],
    )
)


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
    load_preset(
        name
    )  # an unknown name or a bad file is refused here, before any work (relative paths are registered by now)
    return name


def _finish_eval_batch_size(value: Any, ctx: Context) -> int:
    # per-batch test masks are drawn with the training batch size, so evaluate in those batches
    if ctx.protocol.test_granularity == "batch":
        return ctx.batch_size
    return int(value or max(ctx.batch_size, 1024))


declare(
    Setting(
        "preset",
        None,
        "hyper-parameter preset name or YAML path [default: the protocol's: laser_table1; false_tables under "
        "--protocol false]",
        _preset,
        column=False,
        since=2,
        placement="top",
        always=True,
        stage="protocol",
        finish=_finish_preset,
        example="false_tables",
        bad=["not", "a", "name"],
    )
)
declare(
    Setting(
        "eval_batch_size",
        None,
        "evaluation batch size [default: max(training batch size, 1024); the training batch size under per-batch test "
        "masks]",
        _int_at_least("--eval-batch-size", 1, "a number of samples", limit="eval_batch_size"),
        metavar="N",
        column=False,
        since=2,
        placement="top",
        always=True,
        finish=_finish_eval_batch_size,
        example=256,
        bad=0,
    )
)


def _check_labeled(values: dict[str, Any], mcls) -> None:
    lab, al = values["labeled"], values["aligned"]
    if mcls is not None and mcls.needs_labeled and lab is None:
        raise VFLBenchError(
            f"{mcls.display} is semi-supervised: give --labeled N (and --aligned M), e.g. --labeled 500 --aligned 100 "
            "as in the FALSE-VFL paper."
        )
    if lab is not None and al > lab:
        raise VFLBenchError(f"Need 1 <= --labeled and 0 <= --aligned <= --labeled; got labeled={lab}, aligned={al}.")
    if lab is None and al:
        raise VFLBenchError("--aligned needs --labeled (the aligned reserve lies inside the labeled set).")


declare(
    Setting(
        "labeled",
        None,
        "semi-supervised run: number of labeled training samples",
        _int_at_least("--labeled", 1, "a number of labeled training samples"),
        metavar="N",
        column=False,
        since=2,
        placement="top",
        always=True,
        check=_check_labeled,
        example=50,
        bad=0,
    )
)
declare(
    Setting(
        "aligned",
        0,
        "fully observed reserve inside the labeled set (with --labeled)",
        _int_at_least("--aligned", 0, "a number of samples"),
        metavar="N",
        column=False,
        since=2,
        placement="top",
        always=True,
        example=5,
        bad=-1,
        example_with=(("labeled", 50),),
    )
)
declare(
    Setting(
        "target",
        None,
        "record the first epoch reaching a training metric, e.g. train_auprc=0.9 (a pass over the training set per "
        "epoch)",
        _target,
        keyed=True,
        column=False,
        since=2,
        placement="top",
        finish=_finish_target,
        example="train_accuracy=0.9",
        bad="auprc",
    )
)
declare(
    Setting(
        "eval_epochs",
        None,
        "also evaluate after these epochs: 5,10,20, 1:100[:step], or shares of the run such as 25%,50%; CSV rows get "
        "an epoch column",
        _eval_epochs,
        keyed=True,
        column=False,
        since=2,
        placement="top",
        finish=_finish_eval_epochs,
        example="1",
        bad="0",
    )
)


def _mechanism(value: Any):
    from ..privacy.mechanism_spec import parse_mechanism

    return parse_mechanism(value)


def _secagg(value: Any) -> str:
    from ..privacy.mechanism_spec import parse_secagg

    return parse_secagg(value)


def _check_boundary(values: dict[str, Any], mcls) -> None:
    from ..privacy.mechanism_spec import check_support

    if mcls is not None:
        check_support(mcls, values["mechanism"], values["secagg"])


def _default_mechanism():
    from ..privacy.mechanism_spec import MechanismSpec

    return MechanismSpec()


declare(
    Setting(
        "mechanism",
        _default_mechanism(),
        "privacy mechanism at the party-to-server boundary, for any method that supports it: "
        "none | npq | pbm:b=32,beta=0.1[,C=1,bound=clip|tanh,accountant=pld,delta=1e-5] | ldp:sigma=1[,C=1,bound=...] "
        "(`vflbench methods` lists the parameters)",
        _mechanism,
        metavar="SPEC",
        check=_check_boundary,
        example="ldp:sigma=0.5",
        bad="pbm:beta=0.5",
    )
)
declare(
    Setting(
        "secagg",
        "plain",
        "secure aggregation of PBM counts: plain | masked (methods that sum at the server: sum)",
        _secagg,
        metavar="MODE",
        example="masked",
        bad="maybe",
        example_with=(("mechanism", "pbm"),),
    )
)


def _compress(value: Any):
    from ..compression import parse_compression

    return parse_compression(value)


def _default_compress():
    from ..compression import CompressionSpec

    return CompressionSpec()


def _check_compress(values: dict[str, Any], mcls) -> None:
    spec = values["compress"]
    if spec.name == "none":
        return
    if mcls is not None and mcls.boundary_refusal:
        raise VFLBenchError(
            f"--compress {spec}: {mcls.display} sends nothing that a compressor could act on: {mcls.boundary_refusal}."
        )
    mech = values.get("mechanism")
    if mech is not None and mech.name == "pbm":
        raise VFLBenchError(
            f"--compress with --mechanism {mech}: PBM's release is already quantised (integer counts in 0..b, summed "
            "and masked under SecAgg), so a second compressor has nothing to act on that the counts' b does not set; "
            "lower b instead, or use --mechanism ldp (noise first, then compression)."
        )


declare(
    Setting(
        "compress",
        _default_compress(),
        "compress what the parties send up (and with down=1 the gradients that come down), for any method that sends "
        "representations: none | quant:bits=B[,scale=message|row] (C-VFL's scalar quantisation, stochastic rounding) "
        "| topk:ratio=R | vq:codes=C[,dim=2] (a learned codebook per party); docs/COMMUNICATION.md",
        _compress,
        metavar="SPEC",
        check=_check_compress,
        example="quant:bits=4",
        bad="quant:bits=0",
    )
)


def _local_steps(value: Any) -> int:
    try:
        v = int(str(value).strip())
    except ValueError:
        raise VFLBenchError(f"--local-steps takes a whole number of updates per exchange, got {value!r}.") from None
    if v < 1:
        raise VFLBenchError(f"--local-steps must be at least 1 (1: one update per exchange, as usual), got {v}.")
    check_limit("local_steps", v)
    return v


def _check_local_steps(values: dict[str, Any], mcls) -> None:
    q = values["local_steps"]
    if q == 1:
        return
    if mcls is not None and mcls.boundary_refusal:
        raise VFLBenchError(
            f"--local-steps {q} replays the exchange at the party-to-server boundary, which {mcls.display} does not "
            f"open to it: {mcls.boundary_refusal}."
        )
    mech = values.get("mechanism")
    if mech is not None and mech.name != "none":
        raise VFLBenchError(f"--local-steps with --mechanism {mech} is not built yet; run one of the two.")


declare(
    Setting(
        "local_steps",
        1,
        "Q: parameter updates per exchange (FedBCD, C-VFL). After each exchange, Q - 1 more updates on its minibatch: "
        "the server on the representations it received, each party with the gradient it received. An epoch stays "
        "one pass of exchanges, so Q local steps make Q times the updates (equal updates: epochs / Q)",
        _local_steps,
        metavar="Q",
        check=_check_local_steps,
        example=5,
        bad=0,
    )
)

declare(
    Setting(
        "train_samples",
        0,
        "train on this many samples of the training split, drawn uniformly without replacement from the "
        "run's own stream (train_samples), after any validation hold-out; 0 = all. For learning curves by data size",
        _int_at_least(
            "--train-samples", 0, "a number of training samples (0 = all)", " (0 = the whole training split)"
        ),
        metavar="N",
        example=500,
        bad=-1,
    )
)


def _runtime(value: Any) -> str:
    from ..core.role import RUNTIMES

    v = str(value).strip().lower()
    if v not in RUNTIMES:
        raise VFLBenchError(f"--runtime takes {' | '.join(RUNTIMES)}, got {value!r}.{did_you_mean(v, RUNTIMES)}")
    return v


def _check_runtime(values: dict[str, Any], mcls) -> None:
    if values["runtime"] == "inprocess":
        if values["net_latency"] or values["net_bandwidth"]:
            raise VFLBenchError(
                "--net-latency and --net-bandwidth emulate the link between party processes; add --runtime processes."
            )
        return
    from ..core.role import refusal

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


declare(
    Setting(
        "runtime",
        "inprocess",
        "where the parties run: inprocess (one process) | processes (one OS process per party and one for the "
        "server, over torch.distributed; the same numbers)",
        _runtime,
        metavar="NAME",
        keyed=False,
        column=False,
        check=_check_runtime,
        example="processes",
        bad="threads",
    )
)


def _yes_no(flag: str):
    def parse(value: Any) -> bool:
        v = str(value).strip().lower()
        if v in ("yes", "true", "on", "1"):
            return True
        if v in ("no", "false", "off", "0", "none", ""):
            return False
        raise VFLBenchError(f"{flag} takes yes | no, got {value!r}.")

    return parse


def _check_restart(values: dict[str, Any], mcls) -> None:
    if not values["restart_lost"]:
        return
    if values["runtime"] != "processes":
        raise VFLBenchError("--restart-lost restarts party processes; add --runtime processes.")
    mech = values.get("mechanism")
    if (mech is not None and mech.name != "none") or getattr(mcls, "draws_noise", False):
        raise VFLBenchError(
            "--restart-lost: a restarted party cannot rejoin a run whose boundary is a mechanism (its noise streams, "
            "release count and masks are not restored); drop --restart-lost, or the mechanism."
        )


declare(
    Setting(
        "restart_lost",
        False,
        "with --runtime processes: yes restarts a party process that dies; it reloads the checkpoint it wrote at its "
        "last epoch boundary and rejoins at the server's next one (docs/RUNTIME.md, 'Rejoin')",
        _yes_no("--restart-lost"),
        metavar="yes|no",
        keyed=False,
        column=False,
        check=_check_restart,
        example=True,
        bad="maybe",
        example_with=(("runtime", "processes"),),
    )
)
declare(
    Setting(
        "net_latency",
        0.0,
        "with --runtime processes: one-way delay per message, in milliseconds (an emulated WAN link per party)",
        _non_negative("--net-latency", "milliseconds", "net_latency"),
        metavar="MS",
        keyed=False,
        column=False,
        example=20,
        bad=-1,
        example_with=(("runtime", "processes"),),
    )
)
declare(
    Setting(
        "net_bandwidth",
        0.0,
        "with --runtime processes: link bandwidth per party in Mbit/s (0 = unlimited)",
        _non_negative("--net-bandwidth", "Mbit/s", "net_bandwidth"),
        metavar="MBPS",
        keyed=False,
        column=False,
        example=10,
        bad="fast",
        example_with=(("runtime", "processes"),),
    )
)


NOISE_SOURCES = ("seeded", "secret")


def _noise_source(value: Any) -> str:
    v = str(value).strip().lower()
    if v not in NOISE_SOURCES:
        raise VFLBenchError(
            f"--noise-source takes {' | '.join(NOISE_SOURCES)}, got {value!r}.{did_you_mean(v, NOISE_SOURCES)}"
        )
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
        raise VFLBenchError(
            "--noise-source secret draws each party's noise inside its own process, which one process cannot do (it "
            "also "
            "plays the server); add --runtime processes, or use --noise-source seeded."
        )
    if mcls is not None and not draws_privacy_noise(values, mcls):
        raise VFLBenchError(
            "--noise-source applies to runs that draw privacy noise (a --mechanism, or --method pbm); this run draws "
            "none."
        )


declare(
    Setting(
        "noise_source",
        "seeded",
        "who can derive the parties' privacy noise: secret (each party process draws it from the OS's "
        "randomness; never sent or recorded; not reproducible) | seeded (from the run seed: reproducible, but the "
        "server and every "
        "party can regenerate it) [default: secret under --runtime processes, seeded in one process]",
        _noise_source,
        metavar="SOURCE",
        check=_check_noise_source,
        default_for=_noise_default,
        example="secret",
        bad="urandom",
        example_with=(("runtime", "processes"), ("mechanism", "pbm:b=32,beta=0.1,noise=party")),
    )
)


def _fail_party(value: Any) -> str:
    from .faults import parse_failures

    return str(parse_failures(value))


def _on_party_loss(value: Any) -> str | None:
    if value is None or str(value).strip() == "":
        return None
    v = str(value).strip().lower()
    if v not in ("continue", "stop"):
        raise VFLBenchError(
            f"--on-party-loss takes continue | stop, got {value!r}.{did_you_mean(v, ('continue', 'stop'))}"
        )
    return v


declare(
    Setting(
        "fail_party",
        "none",
        "party failures: P@E fails party P at the start of epoch E (1-based, over all stages), P@E:R rejoins it at "
        "the start of epoch R; repeat the flag (or separate with ;) for more. A lost party's block is missing from "
        "then on (docs/RUNTIME.md, 'Lost parties')",
        _fail_party,
        metavar="P@E[:R]",
        many=True,
        example="1@2",
        bad="1@0",
        axis="fail_party",
    )
)
declare(
    Setting(
        "on_party_loss",
        None,
        "what a lost party does to the run: continue (its block is missing from then on; methods that handle a "
        "missing block) | stop (exit 3) [default: continue where the method can, else stop]",
        _on_party_loss,
        metavar="ACTION",
        keyed=False,
        column=False,
        example="stop",
        bad="retry",
    )
)


def _attacks(value: Any) -> str:
    """``--attack NAME[:k=v,...]`` (repeated, or ;-separated) -> the canonical list, one spelling per attack."""
    from ..privacy.attacks import canonical, parse_attack

    items = value if isinstance(value, (list, tuple)) else [value]
    parts = [p.strip() for item in items for p in str(item).split(";") if p.strip() and p.strip() != "none"]
    out = [canonical(*parse_attack(p)) for p in parts]
    if len(set(out)) != len(out):
        raise VFLBenchError(f"--attack: {', '.join(sorted({o for o in out if out.count(o) > 1}))} given twice.")
    return ";".join(out) or "none"


def method_traits(mcls, values: dict[str, Any], n_classes: int = 0) -> dict[str, Any]:
    """What an attack's refusal reads of a run: whether gradients come down to the parties (not when they train
    alone) and representations go up in training, the parties, the classes."""
    from ..methods.base import Method

    alone = mcls.party_losses is not Method.party_losses
    return {
        "display": mcls.display,
        "gradients_cross": not alone,
        "representations_cross": not alone,
        "n_classes": n_classes,
        "parties": int(values["parties"]),
        "surface": getattr(mcls, "attack_surface", "boundary"),
    }


def _check_attacks(values: dict[str, Any], mcls, n_classes: int = 0) -> None:
    from ..privacy.attacks import ATTACKS, parse_attack

    for text in [] if values["attack"] == "none" else values["attack"].split(";"):
        name, opts = parse_attack(text)
        if mcls is None:
            continue
        why = ATTACKS.get(name).refusal(opts, method_traits(mcls, values, n_classes))
        if why:
            raise VFLBenchError(f"--attack {name}: {why}.")
    defense = values["label_defense"]
    if mcls is not None and defense.name in ("gaussian", "max_norm"):
        if not method_traits(mcls, values)["gradients_cross"]:
            raise VFLBenchError(
                f"--label-defense {defense}: {mcls.display} returns no gradient to the parties (they train alone); "
                "use rr:epsilon=E to protect its labels."
            )


def _finish_attacks(value: Any, ctx: Context):
    from ..privacy.attacks import ATTACKS, parse_attack

    for text in [] if value == "none" else value.split(";"):
        name, opts = parse_attack(text)
        if ATTACKS.get(name).binary_only and ctx.n_classes not in (0, 2):
            raise VFLBenchError(
                f"--attack {name}: it scores binary tasks only; {ctx.dataset} has {ctx.n_classes} classes (use "
                "completion for any number)."
            )
    return value


def _label_defense(value: Any):
    from ..privacy.defenses import parse_defense

    return parse_defense(value)


def _default_defense():
    from ..privacy.defenses import DefenseSpec

    return DefenseSpec()


declare(
    Setting(
        "attack",
        "none",
        "an attack measured on this run, NAME[:key=value,...]: norm, direction (label inference from returned "
        "gradients), completion (passive model completion), inversion (feature reconstruction by the server); "
        "repeat the flag for more (`vflbench attacks` lists them, their options and threat models). Each adds rows "
        "attack:NAME:METRIC at every evaluated epoch",
        _attacks,
        metavar="SPEC",
        many=True,
        column=False,
        check=_check_attacks,
        finish=_finish_attacks,
        example="norm",
        bad="sniff",
    )
)
declare(
    Setting(
        "label_defense",
        _default_defense(),
        "label protection on the downward path: none | gaussian:scale=S (noise, S x the step's median gradient "
        "norm) | max_norm (Li et al.) | rr:epsilon=E (randomized response on the training labels: certified "
        "epsilon_label)",
        _label_defense,
        metavar="SPEC",
        example="rr:epsilon=1",
        bad="rr:epsilon=-1",
    )
)


# ============================================================================= run fields
def _pairs(items, flag):
    return parse_kv(items, flag)


def _number_pairs(items, flag):
    return {k: number(v) for k, v in parse_kv(items, flag).items()}


def _protocol_name(value: Any, flag: str = "--protocol") -> str:
    return "false" if value is False else str(value)  # YAML 1.1 reads an unquoted `protocol: false` as a boolean


def _parties_of_files(text: str, settings: dict[str, Any]) -> None:
    """``--party-data`` settles the party count (one file per party); an explicit ``--parties`` must agree."""
    from ..data.alignment import parse_party_data

    k = len(parse_party_data(text))
    given = settings.get("parties")
    if given is not None and str(given).strip() != str(k):
        raise VFLBenchError(
            f"--parties {given} conflicts with --party-data, which names {k} party files; drop --parties (the files "
            "give the count)."
        )
    settings["parties"] = k


declare_field(
    Field(
        "dataset",
        "dataset name (see `vflbench datasets`), csv:PATH or openml:ID (or --party-data) [required]",
        yaml="datasets",
        levels=("top",),
    )
)
declare_field(
    Field(
        "party_data",
        "parties' own files keyed by an ID column, name=path,... (e.g. party0=a.csv,party1=b.csv); the file with "
        "--data-opt target=COLUMN gives the labels; a block whose party lacks the sample's ID is missing "
        "(docs/RUNTIME.md)",
        into="dataset",
        yaml=None,
        levels=(),
        metavar="NAME=PATH,...",
        settle=_parties_of_files,
    )
)
declare_field(
    Field("id_column", "the ID column of the --party-data files", into="data_options", key="id", yaml=None, levels=())
)


def _align(value: Any, flag: str) -> str:
    v = str(value).strip().lower()
    if v not in ("psi", "plain"):
        raise VFLBenchError(f"{flag} takes psi or plain, got {value!r}.")
    return v


declare_field(
    Field(
        "align",
        "how --party-data rows are aligned: psi (private set intersection) | plain (IDs in clear; not private)",
        into="data_options",
        key="align",
        yaml=None,
        levels=(),
        to_value=_align,
    )
)
declare_field(Field("method", "method name (see `vflbench methods`)", required=True, yaml="methods"))
declare_field(
    Field(
        "partitioner", "contiguous | random | importance | correlation | columns | tiles | grid (default by data kind)"
    )
)
declare_field(
    Field(
        "protocol",
        "clean (default) | compat (the LASER-VFL authors' code) | false (the FALSE-VFL paper's baselines)",
        default="clean",
        levels=("top",),
        to_value=_protocol_name,
        record=lambda c: c["protocol"]["name"],
    )
)
for _hp_name, _kind, _help in (
    ("epochs", int, "override the preset's epochs (every stage)"),
    ("lr", float, "override the preset's learning rate"),
    ("batch_size", int, "override the preset's batch size"),
    ("optimizer", str, "adam | sgd"),
    ("weight_decay", float, "coupled L2 weight decay"),
    ("momentum", float, "SGD momentum"),
    ("schedule", str, "none | cosine"),
):
    declare_field(Field(_hp_name, _help, kind=_kind, into="hp", yaml=None, levels=()))
declare_field(
    Field(
        "hp",
        "hyper-parameter key=value; stage.key=value for one stage (repeatable)",
        kind=list,
        flag="--hp",
        metavar="KEY=VALUE",
    )
)
declare_field(
    Field(
        "stage_hp",
        "per-stage hyper-parameters (on the command line: --hp stage.key=value)",
        flag=None,
        record=lambda c: {k: dict(v) for k, v in c["stage_hp"].items()},
    )
)
declare_field(
    Field(
        "method_options",
        "method option key=value (repeatable; `vflbench methods` lists them)",
        kind=list,
        flag="--method-opt",
        metavar="KEY=VALUE",
        to_value=_pairs,
    )
)
declare_field(
    Field("arch", "extractor: mlp | cnn-small | resnet18 | resnet18-half", into="model", yaml=None, levels=())
)
declare_field(
    Field(
        "hidden",
        "MLP hidden sizes, e.g. 10,10",
        into="model",
        yaml=None,
        levels=(),
        to_value=lambda text, flag: parse_int_list(text, flag),
    )
)
declare_field(Field("cut", "representation size", kind=int, into="model", yaml=None, levels=()))
declare_field(
    Field(
        "model",
        "model overrides (arch, hidden, cut, head_hidden; on the command line: --arch, --hidden, --cut)",
        flag=None,
    )
)
# a test keeps it equal to the loader's
TABLE_OPTIONS = (
    "target, drop, test, test_size, split_seed, scaler, categorical, positive, sep, coerce, keep, embed_above, "
    "embed_dim, hash_buckets, min_count"
)
declare_field(
    Field(
        "data_options",
        "dataset option key=value (repeatable). Your own tables (csv:PATH, openml:ID) take: "
        + TABLE_OPTIONS
        + "; a registered dataset's options: `vflbench datasets --format json`",
        kind=list,
        flag="--data-opt",
        metavar="KEY=VALUE",
        to_value=_pairs,
        levels=("dataset",),
    )
)
declare_field(
    Field(
        "partition_options",
        "partitioner option key=value, e.g. alpha=0.5 (repeatable)",
        kind=list,
        flag="--part-opt",
        metavar="KEY=VALUE",
        to_value=_number_pairs,
    )
)
declare_field(
    Field(
        "protocol_options",
        "protocol option key=value, e.g. shuffle=false (repeatable)",
        kind=list,
        flag="--protocol-opt",
        metavar="KEY=VALUE",
        to_value=_pairs,
        record=lambda c: {k: v for k, v in c["protocol"].items() if k != "name"},
    )
)
