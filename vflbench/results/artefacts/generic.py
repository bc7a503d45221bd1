"""The generic table: every recorded metric, whatever the training and test settings; under each
table, how often each method is best or within one std of the best."""

from __future__ import annotations

from .base import ARTEFACTS, Artefact, Layout


@ARTEFACTS.register("generic")
class Generic(Artefact):
    name = "generic"
    layout = Layout("generic", None, None, {"credit": "f1", "mimic4": "f1"}, "accuracy", all_metrics=True)

    def verdict(self, g, fmt):
        from ..verdicts import best_counts

        return best_counts(g, fmt)
