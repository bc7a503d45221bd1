"""A method's options (:class:`Option`): a declared name, type, default and help, optionally defaulted by a field of
the run's protocol, checked when a run is resolved; and the fusion option several methods share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import VFLBenchError

OPTION_TYPES = (bool, int, float, str)


@dataclass(frozen=True)
class Option:
    """One method option. ``protocol`` names a protocol field whose resolved value is the default
    when the user sets none (an explicit user value always wins); ``runtime`` gives the default under a
    runtime (``(("processes", "party"),)``), above the protocol's. ``check`` returns an error message for
    a bad value, or None."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    protocol: str | None = None
    check: Callable[[Any], str | None] | None = field(default=None, compare=False)
    runtime: tuple[tuple[str, Any], ...] = ()  # (runtime, value): the default under that --runtime (below the user's)

    def parse(self, value: Any, owner: str) -> Any:
        """Convert a CLI/YAML value to the declared type and validate it."""
        t = self.type
        try:
            if t is bool:
                if isinstance(value, bool):
                    v = value
                elif str(value).strip().lower() in ("true", "1", "on", "yes"):
                    v = True
                elif str(value).strip().lower() in ("false", "0", "off", "no"):
                    v = False
                else:
                    raise ValueError
            elif t is int:
                if isinstance(value, bool) or float(value) != int(float(value)):
                    raise ValueError
                v = int(float(value))
            elif t is float:
                if isinstance(value, bool):
                    raise ValueError
                v = float(value)
            else:
                v = str(value).strip()
        except (TypeError, ValueError):
            raise VFLBenchError(
                f"Option {self.name} of method '{owner}' expects {t.__name__}, got {value!r}."
            ) from None
        if self.choices is not None and v not in self.choices:
            raise VFLBenchError(
                f"Option {self.name}={v!r} of method '{owner}': choices are {', '.join(map(str, self.choices))}."
            )
        if self.check is not None:
            msg = self.check(v)
            if msg:
                raise VFLBenchError(f"Option {self.name}={v!r} of method '{owner}': {msg}.")
        return v

    def describe(self) -> dict[str, Any]:
        d = {"name": self.name, "type": self.type.__name__, "default": self.default, "help": self.help}
        if self.choices is not None:
            d["choices"] = list(self.choices)
        if self.protocol:
            d["protocol_default"] = self.protocol
        if self.runtime:
            d["runtime_default"] = dict(self.runtime)
        return d


def fusion_option(help_extra: str = "") -> Option:
    return Option(
        "fusion", str, "mean", "fusion of representations before the Linear head" + help_extra, choices=("mean", "sum")
    )


"""The only list of methods: CLI help, `vflbench methods`, experiment validation, reports and plots
all read it. Listing order is registration order."""
