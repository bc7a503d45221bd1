"""The threats a run measures: the attacks it mounts and the label defense it trains with."""

from __future__ import annotations

from typing import Any

from ...core.errors import VFLBenchError
from ..schema import (
    Context,
    Setting,
    declare,
)


def _attacks(value: Any) -> str:
    """``--attack NAME[:k=v,...]`` (repeated, or ;-separated) -> the canonical list, one spelling per attack."""
    from ...privacy.attacks import canonical, parse_attack

    items = value if isinstance(value, (list, tuple)) else [value]
    parts = [p.strip() for item in items for p in str(item).split(";") if p.strip() and p.strip() != "none"]
    out = [canonical(*parse_attack(p)) for p in parts]
    if len(set(out)) != len(out):
        raise VFLBenchError(f"--attack: {', '.join(sorted({o for o in out if out.count(o) > 1}))} given twice.")
    return ";".join(out) or "none"


def method_traits(mcls, values: dict[str, Any], n_classes: int = 0) -> dict[str, Any]:
    """What an attack's refusal reads of a run: whether gradients come down to the parties (not when they train
    alone) and representations go up in training, the parties, the classes."""
    from ...methods.base import Method

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
    from ...privacy.attacks import ATTACKS, parse_attack

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
    from ...privacy.attacks import ATTACKS, parse_attack

    for text in [] if value == "none" else value.split(";"):
        name, opts = parse_attack(text)
        if ATTACKS.get(name).binary_only and ctx.n_classes not in (0, 2):
            raise VFLBenchError(
                f"--attack {name}: it scores binary tasks only; {ctx.dataset} has {ctx.n_classes} classes (use "
                "completion for any number)."
            )
    return value


def _label_defense(value: Any):
    from ...privacy.defenses import parse_defense

    return parse_defense(value)


def _default_defense():
    from ...privacy.defenses import DefenseSpec

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
