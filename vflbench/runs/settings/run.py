"""The run's own settings: its seed and parties, the missingness it trains and is tested under, its preset, the
labelled and aligned samples of a semi-supervised method, the training target and the epochs it is evaluated at."""

from __future__ import annotations

import math
from typing import Any

from ...core.errors import VFLBenchError
from ...core.limits import check as check_limit
from ...core.textlists import split_items
from ..hparams import _int
from ..schema import (
    Context,
    Setting,
    declare,
)


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
    from ...data.missingness import MissingSpec

    return MissingSpec(value)


def _test_missing(value: Any):
    from ...data.missingness import test_settings

    return test_settings(value)


def _missing_default(text: str):
    from ...data.missingness import MissingSpec, test_settings

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
    from ..presets import load_preset
    from ..protocols import default_preset

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


ALL_LABELED = "all"  # --labeled all: every training sample is labeled (a semi-supervised method run supervised)


def _labeled(value: Any) -> int | str:
    if isinstance(value, str) and value.strip().lower() == ALL_LABELED:
        return ALL_LABELED
    return _int_at_least("--labeled", 1, "a number of labeled training samples or 'all'")(value)


def _check_labeled(values: dict[str, Any], mcls) -> None:
    lab, al = values["labeled"], values["aligned"]
    if mcls is not None and mcls.needs_labeled and lab is None:
        raise VFLBenchError(
            f"{mcls.display} is semi-supervised: give --labeled N (and --aligned M), e.g. --labeled 500 --aligned 100 "
            "as in the FALSE-VFL paper, or --labeled all to label every training sample (the supervised protocol's "
            "rows)."
        )
    if lab == ALL_LABELED and al:
        raise VFLBenchError(
            "--aligned needs a number of labeled samples; with --labeled all every training sample is labeled and "
            "there is no reserve to draw (drop --aligned or give --labeled N)."
        )
    if isinstance(lab, int) and al > lab:
        raise VFLBenchError(f"Need 1 <= --labeled and 0 <= --aligned <= --labeled; got labeled={lab}, aligned={al}.")
    if lab is None and al:
        raise VFLBenchError("--aligned needs --labeled (the aligned reserve lies inside the labeled set).")


declare(
    Setting(
        "labeled",
        None,
        "semi-supervised run: number of labeled training samples; 'all' labels every training sample (the rows and "
        "validation rows of a supervised run)",
        _labeled,
        metavar="N|all",
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
