"""Warnings that libraries raise during a run (scikit-learn's ``LinAlgWarning`` from an ill-conditioned ridge, torch's
deprecations, ...) go to the run's record, not between its progress bars: :class:`LibraryWarnings` counts every one,
keeps each distinct message with its place and count, and hands vflbench's own warnings (:class:`VFLBenchWarning`,
which tell the user something about their run) on to the console as before.

The manifest's ``warnings`` holds the count, the first message, the counts by category and the distinct messages
(at most :data:`KEEP`); the run's folder gets them as ``warnings.log``; ``vflbench run`` and ``vflbench sweep`` print
one line that says how many there were and where to read them.
"""

from __future__ import annotations

import warnings
from typing import Any

from .errors import VFLBenchWarning

KEEP = 100  # distinct messages kept in the manifest and the log (the count covers them all)
LOG_NAME = "warnings.log"


class LibraryWarnings:
    """Record the warnings raised inside the ``with`` block that are not vflbench's own. Every occurrence is counted
    (the filter is ``always`` inside the block, so a repeated warning is not swallowed by Python's once-per-place
    rule); filters that code inside the block sets (``catch_warnings`` + ``simplefilter("ignore", ...)``) still
    apply."""

    def __init__(self) -> None:
        self.count = 0
        self.by_category: dict[str, int] = {}
        self.messages: dict[tuple[str, str, str], int] = {}  # (category, message, place) -> count
        self._cm: warnings.catch_warnings | None = None

    def __enter__(self) -> LibraryWarnings:
        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        passing = warnings.showwarning  # the console's hook (vflbench.cli.app) or Python's
        warnings.simplefilter("always")
        warnings.filterwarnings("default", category=VFLBenchWarning)  # vflbench's own: once per place, as before

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, VFLBenchWarning):
                passing(message, category, filename, lineno, file, line)
                return
            self.count += 1
            name = category.__name__
            self.by_category[name] = self.by_category.get(name, 0) + 1
            key = (name, " ".join(str(message).split()), f"{filename}:{lineno}")
            if key in self.messages or len(self.messages) < KEEP:
                self.messages[key] = self.messages.get(key, 0) + 1

        warnings.showwarning = show
        return self

    def __exit__(self, *exc) -> None:
        assert self._cm is not None
        self._cm.__exit__(*exc)

    def manifest(self) -> dict[str, Any]:
        """The manifest's ``warnings``: ``{}`` when none was raised."""
        if not self.count:
            return {}
        (cat, msg, place), _ = next(iter(self.messages.items()))
        return {
            "count": self.count,
            "first": f"{cat}: {msg} ({place})",
            "by_category": dict(self.by_category),
            "messages": [
                {"category": c, "message": m, "place": p, "count": n} for (c, m, p), n in self.messages.items()
            ],
            "log": LOG_NAME,
        }


def log_text(record: dict[str, Any]) -> str:
    """``warnings.log``: one block per distinct message, with its count and place."""
    lines = [f"{record['count']} warning(s) from libraries during the run; by category: {record['by_category']}", ""]
    for w in record.get("messages", []):
        lines.append(f"[{w['count']}x] {w['category']} at {w['place']}")
        lines.append(f"    {w['message']}")
    kept = sum(w["count"] for w in record.get("messages", []))
    if kept < record["count"]:
        lines.append(f"({record['count'] - kept} more, of messages beyond the first {KEEP} distinct ones)")
    return "\n".join(lines) + "\n"


def console_line(count: int, first: str, where: str) -> str:
    """The one line a console gets."""
    short = first if len(first) <= 90 else first[:87] + "..."
    return f"{count} warning(s) from libraries (first: {short}); all in {where}"
