"""Paper artefacts as registered components (:class:`~.base.Artefact`): each module registers the
tables of one paper. :func:`get` and :func:`names` load them on first use."""

from __future__ import annotations

from importlib import import_module

from .base import ARTEFACTS, Artefact, Layout

MODULES = ("generic", "laser", "pbm", "false_vfl")  # import order = listing order


def _load() -> None:
    for m in MODULES:
        import_module(f"{__name__}.{m}")


def get(name: str) -> Artefact:
    _load()
    return ARTEFACTS.get(name)()


def names() -> list[str]:
    _load()
    return ARTEFACTS.names()


def references() -> dict[str, str]:
    """Built-in reference name -> CSV file (an artefact's name names its reference)."""
    _load()
    return {n: ARTEFACTS.get(n).reference for n in ARTEFACTS.names() if ARTEFACTS.get(n).reference}


__all__ = ["ARTEFACTS", "Artefact", "Layout", "get", "names", "references"]
