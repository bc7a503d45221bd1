"""VFL methods, one module each, registered in :data:`METHODS` by their CLI names.

Importing this package registers the built-in methods (listing order = ``catalog.METHOD_MODULES``), then any
plugin files named in ``$VFLBENCH_PLUGINS`` and any installed ``vflbench.methods`` entry points
(see :mod:`vflbench.core.plugins` and docs/ADDING_A_METHOD.md)."""

from importlib import import_module

from ..core.catalog import METHOD_MODULES
from .base import (
    METHODS,
    Batch,
    BatchPrediction,
    Epoch,
    Method,
    MethodContext,
    Option,
    Stage,
    display_name,
    method_order,
)

for _module in METHOD_MODULES:
    import_module(f"{__name__}.{_module}")

from ..core.plugins import load_plugins  # noqa: E402

load_plugins()

__all__ = [
    "METHODS",
    "Batch",
    "BatchPrediction",
    "Epoch",
    "Method",
    "MethodContext",
    "Option",
    "Stage",
    "display_name",
    "method_order",
]
