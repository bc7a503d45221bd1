"""The registry of study reports: a study (a folder of results/) declares its report here, and `vflbench report
results/STUDY` rebuilds that folder's summary files from its runs. The registry is the only list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import VFLBenchError
from ..core.files import atomic_write_text


@dataclass(frozen=True)
class Report:
    """A study's report: ``build(folder)`` returns the files it writes (name under the folder -> text); a figure is
    drawn by ``figures(folder)`` if the study has one; ``run(folder, workers)`` runs what the study measures, for a
    study whose runs are not one experiment file's sweep (`vflbench report FOLDER --run`)."""

    name: str  # the study's folder under results/, e.g. "faults" or "trees"
    build: Callable[[Path], dict[str, str]]
    what: str  # one line: the files it writes and what they hold
    figures: Callable[[Path], list[Path]] | None = None
    run: Callable[[Path, int], None] | None = None


REPORTS: dict[str, Report] = {}


def register(
    name: str,
    what: str,
    figures: Callable[[Path], list[Path]] | None = None,
    run: Callable[[Path, int], None] | None = None,
):
    """Register ``build(folder) -> {file name: text}`` as the report of the study ``results/<name>``."""

    def deco(build: Callable[[Path], dict[str, str]]):
        if name in REPORTS:
            raise ValueError(f"a report for the study {name!r} is registered twice")
        REPORTS[name] = Report(name, build, what, figures, run)
        return build

    return deco


def study_of(folder: Path) -> Report:
    """The report of a study folder, found by its path under ``results/`` (or its last name)."""
    folder = Path(folder)
    parts = folder.resolve().parts
    name = "/".join(parts[len(parts) - 1 - parts[::-1].index("results") + 1 :]) if "results" in parts else folder.name
    for key in (name, folder.name):
        if key in REPORTS:
            return REPORTS[key]
    raise VFLBenchError(
        f"{folder}: no study report is registered for {name!r}; the studies with one: {', '.join(sorted(REPORTS))} "
        "(vflbench report --list). A sweep folder's own table is `vflbench table FOLDER`."
    )


def write_report(folder: Path, run: bool = False, workers: int = 2) -> list[Path]:
    """Build a study's report and write its files atomically (all of them built first: nothing half-written); with
    ``run``, run the study's own measurements first (for a study that has them)."""
    folder = Path(folder)
    rep = study_of(folder)
    if run:
        if rep.run is None:
            raise VFLBenchError(
                f"the study {rep.name!r} has no runs of its own: its runs are sweeps (vflbench sweep experiments/...)."
            )
        folder.mkdir(parents=True, exist_ok=True)
        rep.run(folder, workers)
    if not folder.is_dir():
        raise VFLBenchError(f"{folder} is not a folder; give a study folder such as results/faults.")
    files = rep.build(folder)
    out = []
    for name, text in files.items():
        atomic_write_text(folder / name, text)
        out.append(folder / name)
    if rep.figures is not None:
        out += rep.figures(folder)
    return out
