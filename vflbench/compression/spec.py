"""What ``--compress`` takes, without torch (a run is resolved and checked before torch is imported): the compressors'
names, parameters and help, and the parser. The compressors themselves are in :mod:`.compressors`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import VFLBenchError, did_you_mean


@dataclass(frozen=True)
class CompressionSpec:
    """A parsed ``--compress``: the compressor's name and its parameters (canonical text: :meth:`__str__`)."""

    name: str = "none"
    params: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        return self.name + (":" + ",".join(f"{k}={_fmt(v)}" for k, v in self.params) if self.params else "")

    def get(self, key: str) -> Any:
        return dict(self.params)[key]


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@dataclass(frozen=True)
class Param:
    default: Any
    type: type
    help: str
    low: float | None = None  # exclusive lower bound
    high: float | None = None  # inclusive upper bound
    choices: tuple[str, ...] | None = None


DOWN = Param(0, int, "also compress the gradients that come down (1)", low=-1, high=1)

# name -> (help, unbiased, parameters): the only list of compressors (.compressors implements one class per name)
COMPRESSORS: dict[str, tuple[str, bool, dict[str, Param]]] = {
    "none": ("float32 values as they are", True, {}),
    "quant": (
        "scalar quantisation of each message's range, stochastic rounding (C-VFL): bits=B[,scale=message|row]",
        True,
        {
            "bits": Param(4, int, "bits a value (2^bits levels)", low=0, high=16),
            "scale": Param(
                "message",
                str,
                "message: one range (min, max) a party's message; row: one a vector",
                choices=("message", "row"),
            ),  # fmt: skip
        },
    ),
    "topk": (
        "each vector keeps its largest-magnitude share of values, sent with their indices: ratio=R",
        False,
        {"ratio": Param(0.1, float, "share of a vector's values kept (at least one)", low=0, high=1)},
    ),
    "vq": (
        "product vector quantisation on a codebook per party, learned by k-means: codes=C[,dim=2]",
        False,
        {
            "codes": Param(16, int, "codewords in each party's codebook", low=1, high=65536),
            "dim": Param(2, int, "values a sub-vector", low=0, high=1024),
        },
    ),
}


def parse_compression(value: Any) -> CompressionSpec:
    """``none | quant[:bits=B,scale=S] | topk[:ratio=R] | vq[:codes=C,dim=D]`` (each may add ``down=1``) -> a
    canonical :class:`CompressionSpec`; one-line errors name the fix."""
    if isinstance(value, CompressionSpec):
        return value
    text = str(value if value is not None else "none").strip()
    name, _, rest = text.partition(":")
    name = name.strip().lower()
    if name not in COMPRESSORS:
        raise VFLBenchError(
            f"Unknown compressor {name!r}.{did_you_mean(name, list(COMPRESSORS))} Choices: "
            f"{', '.join(COMPRESSORS)} (docs/COMMUNICATION.md)."
        )
    declared = {**COMPRESSORS[name][2], "down": DOWN} if name != "none" else {}
    given: dict[str, Any] = {}
    for item in [x for x in rest.split(",") if x.strip()]:
        key, eq, v = item.partition("=")
        key, v = key.strip(), v.strip()
        if not eq or key not in declared:
            raise VFLBenchError(
                f"--compress {name}: unknown parameter {key!r}; its parameters: {', '.join(declared) or 'none'}."
            )
        p = declared[key]
        if p.choices is not None:
            if v not in p.choices:
                raise VFLBenchError(f"--compress {name}: {key} is one of {', '.join(p.choices)}, got {v!r}.")
            given[key] = v
            continue
        try:
            num = p.type(float(v)) if p.type is int and float(v).is_integer() else p.type(v)
        except ValueError:
            raise VFLBenchError(f"--compress {name}: {key} takes {p.type.__name__}, got {v!r}.") from None
        if (p.low is not None and not num > p.low) or (p.high is not None and not num <= p.high):
            raise VFLBenchError(f"--compress {name}: {key} must be in ({p.low:g}, {p.high:g}], got {v}.")
        given[key] = num
    return CompressionSpec(name, tuple((k, given.get(k, p.default)) for k, p in declared.items()))


def describe() -> list[dict[str, Any]]:
    """Every compressor and its parameters (``vflbench methods``)."""
    return [
        {
            "name": n,
            "help": h,
            "unbiased": u,
            "params": {k: {"default": p.default, "help": p.help} for k, p in ps.items()},
        }
        for n, (h, u, ps) in COMPRESSORS.items()
    ]
