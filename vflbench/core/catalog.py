"""The built-in method modules, and their registered names read without importing them.

Importing a method imports torch (seconds). A mistyped ``--method`` should be answered at once, so
:func:`check_method_name` reads the names from the ``@METHODS.register("...")`` decorators in the
modules' source (the decorators stay the only place a name is written) and rejects an unknown one
before torch is imported. With plugins around (``--plugin``, ``$VFLBENCH_PLUGINS`` or an installed
``vflbench.methods`` entry point) the check is left to the full registry.
"""

from __future__ import annotations

import ast
import os
import sys
from functools import cache
from pathlib import Path

from .errors import VFLBenchError, did_you_mean

METHOD_MODULES = (
    "local",
    "svfl",
    "ensemble",
    "combinatorial",
    "plug",
    "laser",
    "sumvfl",
    "pbm",
    "fedhssl",
    "false_vfl",
    "gbdt",
    "secureboost",
    "xgboost_codes",
)
"""Import (and listing) order: the LASER-VFL paper's column order, then PBM-VFL, FedHSSL, FALSE-VFL, then the
gradient-boosted trees (the central reference and SecureBoost), then the practitioner's yardstick (XGBoost on codes)."""


@cache
def builtin_method_names() -> tuple[str, ...]:
    names = []
    root = Path(__file__).parents[1] / "methods"
    for module in METHOD_MODULES:
        tree = ast.parse((root / f"{module}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for d in node.decorator_list:
                    if (
                        isinstance(d, ast.Call)
                        and isinstance(d.func, ast.Attribute)
                        and d.func.attr == "register"
                        and isinstance(d.func.value, ast.Name)
                        and d.func.value.id == "METHODS"
                        and d.args
                        and isinstance(d.args[0], ast.Constant)
                    ):
                        names.append(d.args[0].value)
    return tuple(names)


def _plugins_possible() -> bool:
    if "vflbench.methods" in sys.modules or os.environ.get("VFLBENCH_PLUGINS", "").strip():
        return True
    from importlib.metadata import entry_points

    return bool(entry_points(group="vflbench.methods"))


def check_method_name(name: str) -> None:
    """Raise the registry's own error for an unknown built-in name, when no plugin could define it."""
    known = builtin_method_names()
    if name in known or _plugins_possible():
        return
    raise VFLBenchError(f"Unknown method '{name}'." + did_you_mean(name, known))
