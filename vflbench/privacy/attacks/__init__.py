"""Attacks on what crosses the party-to-server boundary, one file each, registered in :data:`ATTACKS`:
``norm`` and ``direction`` (label inference from returned gradients), ``completion`` (passive model completion),
``inversion`` (feature reconstruction by the server). docs/ATTACKS.md gives each one's threat model."""

from __future__ import annotations

from typing import Any

from ...core.errors import VFLBenchError, did_you_mean
from . import completion, direction, inversion, norm, trees  # noqa: F401  (registration)
from .base import ATTACKS, Attack, AttackContext, AttackOption, party_rows

__all__ = [
    "ATTACKS",
    "Attack",
    "AttackContext",
    "AttackOption",
    "canonical",
    "describe",
    "parse_attack",
    "party_rows",
]


def parse_attack(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME[:key=value,...]`` -> (name, typed options with defaults filled in); one-line errors name the fix."""

    text = str(text).strip()
    name, _, rest = text.partition(":")
    name = name.strip()
    if name not in ATTACKS:
        raise VFLBenchError(
            f"Unknown attack {name!r}.{did_you_mean(name, ATTACKS.names())} `vflbench attacks` lists them."
        )
    cls = ATTACKS.get(name)
    declared = {o.name: o for o in cls.options}
    given: dict[str, Any] = {}
    for item in [x for x in rest.split(",") if x.strip()]:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in declared:
            raise VFLBenchError(
                f"--attack {name}: unknown option {key!r}; its options: {', '.join(declared) or 'none'} "
                "(`vflbench attacks`)."
            )
        if key in given:
            raise VFLBenchError(f"--attack {name}: option {key} given twice.")
        given[key] = declared[key].parse(value, name)
    return name, {o.name: given.get(o.name, o.default) for o in cls.options}


def canonical(name: str, opts: dict[str, Any]) -> str:
    """The text of an attack with every option, in declaration order: one spelling per attack."""
    cls = ATTACKS.get(name)
    parts = [
        f"{o.name}={opts[o.name]:g}" if isinstance(opts[o.name], float) else f"{o.name}={opts[o.name]}"
        for o in cls.options
    ]
    return f"{name}:{','.join(parts)}" if parts else name


# the listing's order: the boundary's label attacks, the server's, then those on SecureBoost's messages
ORDER = ("norm", "direction", "completion", "inversion", "leaves", "gradients")


def listing_order(name: str) -> tuple[int, str]:
    return (ORDER.index(name) if name in ORDER else len(ORDER), name)


def describe() -> list[dict[str, Any]]:
    """What ``vflbench attacks`` lists: every attack and its threat model, then the label defenses."""
    from ..defenses import DEFENSES

    rows = [
        {
            "kind": "attack",
            "name": n,
            "paper": c.paper,
            "adversary": "the server" if c.adversary == "server" else "each passive party",
            "observes": c.observes,
            "side_knowledge": c.side_knowledge,
            "metrics": list(c.metrics),
            "options": {o.name: {"default": o.default, "help": o.help} for o in c.options},
            "tasks": "binary" if c.binary_only else "any",
            "methods": "SecureBoost" if c.surface == "secureboost" else "the neural methods",
        }
        for n, c in ((n, ATTACKS.get(n)) for n in sorted(ATTACKS.names(), key=listing_order))
    ]
    rows += [
        {
            "kind": "defense",
            "name": n,
            "paper": d.paper,
            "adversary": "against each passive party (the gradients or labels it learns from)",
            "observes": d.acts_on,
            "side_knowledge": "",
            "metrics": ["epsilon_label"] if d.certifies else [],
            "options": {o: {"default": v, "help": h} for o, (v, h) in d.params.items()},
            "tasks": "any",
            "methods": "any",
        }
        for n, d in ((n, DEFENSES.get(n)) for n in DEFENSES.names())
        if n != "none"
    ]
    return rows
