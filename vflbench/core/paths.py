"""Paths written inside an experiment file are read from that file's folder, wherever the sweep is
started. The experiment builder records, for each relative path it finds (a ``csv:`` table, its
``test=`` file, a ``columns`` partitioner's parties file, a preset file), the absolute path it
means; every reader asks :func:`user_path`. The text stays as written, so run keys do not depend
on where the sweep was started; the table of bases travels with each run (``ResolvedRun``), so a
worker process reads the same files."""

from __future__ import annotations

from pathlib import Path

BASES: dict[str, str] = {}  # the text as written -> the absolute path it names


def register(bases: dict[str, str] | None) -> None:
    BASES.update(bases or {})


def user_path(text: str | Path) -> Path:
    """The file a user's path names: the experiment file's reading of it when there is one, else the
    path as given (relative to the working directory)."""
    t = str(text).strip()
    if t in BASES:
        return Path(BASES[t])
    return Path(t).expanduser()


def anchor(text: str, folder: Path) -> str | None:
    """The absolute path a relative ``text`` in a file under ``folder`` names (None: absolute already)."""
    p = Path(str(text).strip()).expanduser()
    if p.is_absolute():
        return None
    return str((folder / p).resolve())
