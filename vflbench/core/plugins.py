"""Methods from outside the package: a Python file (``--plugin FILE`` or ``$VFLBENCH_PLUGINS``,
several joined by the path separator) or an installed distribution's ``vflbench.methods`` entry
point. Loading a file runs it once; its ``@METHODS.register(...)`` decorators do the rest.

The ``--plugin`` option exports ``$VFLBENCH_PLUGINS``, so sweep worker processes load the same files.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from .errors import VFLBenchError

ENV = "VFLBENCH_PLUGINS"
_loaded: set[str] = set()


def plugin_paths() -> list[Path]:
    return [Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p.strip()]


def load_file(path: str | Path) -> None:
    p = Path(path).expanduser().resolve()
    if str(p) in _loaded:
        return
    if not p.is_file():
        raise VFLBenchError(f"Plugin file {path} does not exist (from --plugin or ${ENV}).")
    name = f"vflbench_plugin_{p.stem}_{abs(hash(str(p))) % 10**8}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise VFLBenchError(f"Plugin {path} is not a Python file.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _loaded.add(str(p))
    try:
        spec.loader.exec_module(module)
    except VFLBenchError:
        raise
    except Exception as e:
        _loaded.discard(str(p))
        raise VFLBenchError(f"Plugin {path} failed to load: {type(e).__name__}: {e}") from None


def add(path: str | Path) -> None:
    """Load a plugin file now and export it to child processes."""
    load_file(path)
    p = str(Path(path).expanduser().resolve())
    current = [str(x) for x in plugin_paths()]
    if p not in current:
        os.environ[ENV] = os.pathsep.join([*current, p])


def load_plugins() -> None:
    for p in plugin_paths():
        load_file(p)
    try:
        from importlib.metadata import entry_points

        for ep in entry_points(group="vflbench.methods"):
            if ep.value not in _loaded:
                _loaded.add(ep.value)
                ep.load()
    except Exception as e:  # pragma: no cover - a broken third-party distribution
        raise VFLBenchError(f"A 'vflbench.methods' entry point failed to load: {e}") from None
