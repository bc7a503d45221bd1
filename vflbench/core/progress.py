"""Progress of long work below the command line: a phase (reading a large table, aligning IDs by PSI) reports
``(what, done, total)``, and the command that runs it shows a progress bar for it. The command passes its bar in
with :func:`set_reporter`; where none is set (tests, a sweep worker) reports go nowhere."""

from __future__ import annotations

from collections.abc import Callable

_REPORTER: list[Callable[[str, int, int], None] | None] = [None]


def set_reporter(fn: Callable[[str, int, int], None] | None) -> None:
    _REPORTER[0] = fn


def report(what: str, done: int, total: int) -> None:
    """``what`` has done ``done`` of ``total`` units (the same ``what`` updates one bar)."""
    fn = _REPORTER[0]
    if fn is not None:
        fn(what, int(done), int(total))
