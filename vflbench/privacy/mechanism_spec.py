"""What ``--mechanism`` and ``--secagg`` say, parsed once into typed values (no torch needed, so a
bad spec is refused before anything heavy is imported). The channels that carry a mechanism are in
:mod:`vflbench.privacy.mechanisms`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core.errors import VFLBenchError, did_you_mean
from ..core.textlists import key_values, split_items

SECAGG = ("plain", "masked")


# value checks (an error message, or None), shared by the mechanisms' parameters and the options of
# the methods that carry the same quantities (sum, pbm)
def beta_in_range(v: float) -> str | None:
    return None if 0 < v <= 0.25 else "beta must be in (0, 1/4]"


def positive_finite(v: float) -> str | None:
    return None if v > 0 and math.isfinite(v) else "must be a finite number > 0"


def at_least_one(v: int) -> str | None:
    return None if v >= 1 else "must be >= 1"


def pbm_trials(v: int) -> str | None:
    """PBM's b: at least 1 and within its limit (vflbench.core.limits: the accountant's memory and time)."""
    from ..core.limits import LIMITS

    lim = LIMITS["pbm_b"]
    return (
        None
        if 1 <= v <= lim.high
        else ("must be >= 1" if v < 1 else f"above its limit of {int(lim.high):,} ({lim.why}); lower it")
    )


def delta_in_range(v: float) -> str | None:
    return None if 0 < v < 1 else "delta must be in (0, 1)"


@dataclass(frozen=True)
class Param:
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    check: Any = None


_ACCOUNTING = {
    "accountant": Param(
        str,
        "pld",
        "pld (certified PLD), exact (certified numeric RDP) or paper (closed forms, NOT an upper bound)",
        ("pld", "exact", "paper"),
    ),
    "conversion": Param(str, "mironov", "RDP to (epsilon, delta): mironov or cks", ("mironov", "cks")),
    "delta": Param(float, 1e-5, "delta of the reported (epsilon, delta)", check=delta_in_range),
    "c0": Param(float, 8.0, "the constant of PBM-VFL's closed-form bounds (accountant=paper)", check=positive_finite),
}
_BOUND = {
    "C": Param(float, 1.0, "values are bounded to [-C, C] before release", check=positive_finite),
    "bound": Param(
        str,
        "clip",
        "how values are bounded: clip (clamp to [-C, C]; the gradient passes straight through) or tanh (C*tanh)",
        ("clip", "tanh"),
    ),
}
_NOISE = {
    "noise": Param(
        str,
        "shared",
        "whose stream draws the noise: shared (one seeded stream draws every party's, the in-process simulation "
        "of the committed results) or party (each party its own seeded stream, as separate processes draw it: "
        "--runtime processes)",
        ("shared", "party"),
    ),
}
MECHANISM_PARAMS: dict[str, dict[str, Param]] = {
    "none": {},
    "npq": {},
    "pbm": {
        "b": Param(int, 32, "Binomial trials per value (the bit budget; at most 1,024)", check=pbm_trials),
        "beta": Param(float, 0.1, "privacy parameter in (0, 1/4]; smaller is more private", check=beta_in_range),
        **_BOUND,
        **_ACCOUNTING,
        **_NOISE,
    },
    "ldp": {
        "sigma": Param(float, 1.0, "Gaussian noise std added by each party", check=positive_finite),
        **_BOUND,
        **_ACCOUNTING,
        **_NOISE,
    },
}
MECHANISM_HELP = {
    "none": "nothing at the boundary (exact float32 values)",
    "npq": "no privacy, no quantisation (PBM-VFL's NPQ baseline): exact float32 values",
    "pbm": "Poisson Binomial Mechanism (PBM-VFL): Binomial counts per value, unbiased by the server",
    "ldp": "local DP: Gaussian noise on each party's bounded values (alias gaussian)",
}
ALIASES = {"gaussian": "ldp"}


@dataclass(frozen=True)
class MechanismSpec:
    """A parsed ``--mechanism``: its name and every parameter's value (defaults filled in)."""

    name: str = "none"
    params: tuple[tuple[str, Any], ...] = ()

    def __getitem__(self, key: str) -> Any:
        return dict(self.params)[key]

    @property
    def private(self) -> bool:
        return self.name in ("pbm", "ldp")

    def __str__(self) -> str:
        """Canonical text: the name, then the parameters set apart from their defaults, in declared order."""
        declared = MECHANISM_PARAMS[self.name]
        given = [
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.params if v != declared[k].default
        ]
        return self.name + (":" + ",".join(given) if given else "")


def parse_mechanism(text: Any) -> MechanismSpec:
    """``"pbm:b=32,beta=0.1"`` -> :class:`MechanismSpec`; errors name the fix."""
    if isinstance(text, MechanismSpec):
        return text
    raw = "none" if text is None else str(text).strip()
    name, _, rest = raw.partition(":")
    name = ALIASES.get(name.strip().lower(), name.strip().lower())
    if name not in MECHANISM_PARAMS:
        raise VFLBenchError(
            f"Unknown mechanism {name!r} in --mechanism {raw!r}.{did_you_mean(name, MECHANISM_PARAMS)} "
            f"Choices: {', '.join(MECHANISM_PARAMS)} (gaussian = ldp)."
        )
    declared = MECHANISM_PARAMS[name]
    values: dict[str, Any] = {}
    if ":" in raw and not rest.strip():
        raise VFLBenchError(
            f"--mechanism {raw!r} has a ':' but no parameters; drop the ':' or give key=value parameters, e.g. "
            "pbm:b=32,beta=0.1."
        )
    for key, value in key_values(
        split_items(rest, f"--mechanism {name}:", "pbm:b=32,beta=0.1"), f"--mechanism {raw!r}", "pbm:b=32,beta=0.1"
    ):
        if key not in declared:
            known = ", ".join(declared) or "none"
            raise VFLBenchError(
                f"Mechanism {name} has no parameter {key!r}{did_you_mean(key, declared)}; its parameters: {known}."
            )
        p = declared[key]
        try:
            v = p.type(value.strip()) if p.type is not int else int(float(value))
            if p.type is int and float(value) != int(float(value)):
                raise ValueError
        except ValueError:
            raise VFLBenchError(f"Mechanism {name}: {key} expects {p.type.__name__}, got {value.strip()!r}.") from None
        values[key] = v
    return make_mechanism(name, **values)


def make_mechanism(name: str, **values: Any) -> MechanismSpec:
    """The :class:`MechanismSpec` of typed parameter values (the others at their defaults), checked
    as :func:`parse_mechanism` checks them (a method builds its own mechanism this way)."""
    declared = MECHANISM_PARAMS[name]
    for key, v in values.items():
        p = declared[key]
        if p.choices is not None and v not in p.choices:
            raise VFLBenchError(f"Mechanism {name}: {key}={v!r}; choices are {', '.join(p.choices)}.")
        msg = p.check(v) if p.check is not None else None
        if msg:
            raise VFLBenchError(f"Mechanism {name}: {key}={v}: {msg}.")
    return MechanismSpec(name, tuple((k, values.get(k, p.default)) for k, p in declared.items()))


def parse_secagg(value: Any) -> str:
    v = "plain" if value is None else str(value).strip().lower()
    if v not in SECAGG:
        raise VFLBenchError(f"--secagg must be plain or masked, got {value!r}.")
    return v


def describe_mechanisms() -> list[dict[str, Any]]:
    """What ``vflbench methods`` prints about the mechanisms."""
    return [
        {
            "name": n,
            "help": MECHANISM_HELP[n],
            "params": {k: {"default": p.default, "help": p.help} for k, p in ps.items()},
        }
        for n, ps in MECHANISM_PARAMS.items()
    ]


def check_support(mcls, spec: MechanismSpec, secagg: str) -> None:
    """Refuse, in one line and before any work, a ``--mechanism``/``--secagg`` that ``mcls`` cannot carry."""
    if spec.name != "none" and mcls.boundary_refusal:
        raise VFLBenchError(
            f"--mechanism {spec}: {mcls.display} does not take a mechanism at its boundary: {mcls.boundary_refusal}."
        )
    if secagg == "masked" and spec.name != "pbm":
        raise VFLBenchError("--secagg masked is the secure sum of PBM's integer counts; it needs --mechanism pbm:... .")
    if secagg == "masked" and not mcls.sums_at_server:
        raise VFLBenchError(
            f"--secagg masked hides every single party's upload, but {mcls.display} reads each party's representation; "
            "use --secagg plain, or a method that fuses by summing (--method sum)."
        )
