"""What a paper artefact is: the experiment file that reproduces it, its table layout, its reference
CSV (the published numbers) and the verdict it prints (who is best, the gap to the paper). Artefacts
are registered like methods (:data:`ARTEFACTS`); :mod:`vflbench.results.report` renders any of them and
names none."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pandas as pd

from ...core.registry import Registry


@dataclass(frozen=True)
class Layout:
    """Rows and columns of a method-column table: the training settings (rows) and test settings
    (columns; None = whatever the results hold), and the metric of each dataset."""

    name: str
    train: list[str] | None
    test: list[str] | None
    metric_by_dataset: dict[str, str] = field(default_factory=dict)
    default_metric: str = "accuracy"
    all_metrics: bool = False  # one table per recorded metric (the generic layout), not the dataset's one


class Artefact:
    """A table a paper prints (or the generic one). Subclasses set the class attributes and may
    override :meth:`verdict` (lines under each dataset's table) or :meth:`table` (a layout of their
    own instead of the method-column table)."""

    name: ClassVar[str]
    paper: ClassVar[str] = ""
    experiment: ClassVar[str | None] = None  # the experiment file that reproduces it (experiments/...)
    reference: ClassVar[str | None] = None  # the published numbers, a CSV in vflbench/results/reference/
    layout: ClassVar[Layout]
    by_budget: ClassVar[bool] = True  # `vflbench table --by-budget` can rank its methods per budget
    formats: ClassVar[tuple[str, ...]] = ("md", "latex", "csv")

    def verdict(self, g: pd.DataFrame, fmt: str) -> list[str]:
        """Lines printed under one dataset's method-column table (``g``: its aggregated cells)."""
        return []

    def table(
        self, df: pd.DataFrame, ref: pd.DataFrame | None, fmt: str, title: str | None
    ) -> tuple[str, pd.DataFrame] | None:
        """The whole table from tidy rows, for an artefact with a layout of its own; None: the
        method-column table (:func:`vflbench.results.report.render`)."""
        return None


ARTEFACTS: Registry[type[Artefact]] = Registry("layout")
