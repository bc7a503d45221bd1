"""What the two gradient-boosted tree methods share (``gbdt``, the central reference, and ``secureboost``, boosting
across parties): their hyper-parameters as method options (in `vflbench tune`'s search space), training on the
whole set at once (:attr:`Method.trains_whole`) with missing blocks as missing values, and the run settings that do
not apply to trees, each refused in one line."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from .base import Batch, BatchPrediction, Method, Option


def _positive(v) -> str | None:
    return None if v > 0 else "must be > 0"


def _at_least(low):
    return lambda v: None if v >= low else f"must be >= {low}"


TREE_OPTIONS = (
    Option(
        "trees", int, 300, "boosting rounds (trees; with C > 2 classes gbdt grows C trees a round)", check=_at_least(1)
    ),
    Option("max_depth", int, 6, "the deepest level a tree may split at", check=_at_least(1)),
    Option("learning_rate", float, 0.1, "shrinkage eta of every leaf", check=_positive),
    Option(
        "max_bin",
        int,
        0,
        "histogram bins per feature (0: 256; secureboost under Paillier: 32)",
        check=lambda v: (
            None if v == 0 or 2 <= v <= 65_535 else "0 (the default) or 2 .. 65535: a feature needs two bins to split"
        ),
    ),
    Option("reg_lambda", float, 1.0, "L2 penalty lambda on the leaf values", check=_at_least(0.0)),
    Option("gamma", float, 0.0, "the least gain a split needs (XGBoost's min_split_loss)", check=_at_least(0.0)),
    Option("min_child_weight", float, 1.0, "the least hessian on each side of a split", check=_at_least(0.0)),
    Option(
        "early_stop",
        int,
        0,
        "rounds without a better validation score (AUPRC for a binary target, else accuracy) after which no more "
        "rounds are grown: the model keeps the best round count, scored on the run's validation rows (protocol "
        "val_split; 0.1 of the training rows when the run holds none out), the neural methods' patience rule; 0: every "
        "round",
        check=_at_least(0),
    ),
)

TREE_SEARCH_SPACE = {
    "trees": ("int", 50, 600),
    "max_depth": ("int", 2, 10),
    "learning_rate": ("log", 0.01, 0.3),
    "reg_lambda": ("log", 0.1, 10.0),
    "min_child_weight": ("log", 0.1, 20.0),
}


class TreeMethod(Method):
    """Gradient-boosted trees over every party's columns. A block missing for a sample is a missing value in each
    of its columns: the trees learn a default direction for it (sparsity-aware split finding), at training and at
    test time alike. Subclasses implement :meth:`fit_whole` and :meth:`probabilities`."""

    trains_whole = True
    attack_surface = "none"
    f1_rule = "single"
    hp_key = "all"
    boundary_refusal = (
        "gradient-boosted trees send no representations to the server (gbdt: nothing crosses; secureboost: g/h, "
        "histograms and split routes, counted by its own protocol); a certified label epsilon for secureboost: "
        "--label-defense rr:epsilon=E (docs/TREES.md)"
    )
    search_space: ClassVar[dict[str, tuple]] = dict(TREE_SEARCH_SPACE)

    @classmethod
    def settings_refusal(cls, settings: dict[str, Any]) -> str | None:
        if settings.get("attack", "none") != "none" and settings.get("runtime") == "processes":
            return "--attack on a tree method runs in one process (drop --runtime processes)"
        defense = settings.get("label_defense")
        if defense is not None and defense.name in ("gaussian", "max_norm"):
            return f"--label-defense {defense} changes gradients that go down to the parties; use rr:epsilon=E"
        if settings.get("eval_epochs"):
            return "--eval-epochs evaluates after epochs; a tree model has rounds: give --method-opt trees=N instead"
        if settings.get("target"):
            return "--target records the epoch a training metric is reached; trees have no epochs"
        if settings.get("restart_lost"):
            return (
                "--restart-lost rejoins a restarted party from its checkpoint, and a tree party checkpoints nothing "
                "(its lookup table lives in its process); drop --restart-lost: the run goes on without a lost party"
            )
        return None

    @classmethod
    def rounds(cls, options, epochs):
        return int(options["trees"]), "trees (each tree is an epoch to --fail-party)"

    def build(self) -> None:
        self.model = None
        self.max_bin = int(self.options["max_bin"]) or self.default_bin()
        self.round_limit: int | None = None  # predict with the first rounds only (early_stop's choice)

    def default_bin(self) -> int:
        return 256

    def n_params(self) -> int:
        """The nodes of every tree (a split or a leaf value)."""
        return int(getattr(self, "nodes", 0))

    def party_columns(self, blocks) -> list[np.ndarray]:
        """A batch's stacked blocks [K, B, w] as each party's own columns [B, w_k] (numpy)."""
        return [blocks[k, :, : self.ctx.widths[k]].float().cpu().numpy() for k in range(self.k)]

    def with_missing(self, cols: list[np.ndarray], obs: np.ndarray) -> np.ndarray:
        """The joined columns [B, sum w_k] with NaN in every column of a block missing for the sample."""
        parts = []
        for k, c in enumerate(cols):
            c = c.astype(np.float64, copy=True)
            c[~obs[:, k]] = np.nan
            parts.append(c)
        return np.concatenate(parts, 1)

    def probabilities(self, batch: Batch) -> np.ndarray:
        """Class probabilities [B, C] of a batch under its mask."""
        raise NotImplementedError

    @torch.no_grad()
    def predict(self, batch: Batch):
        obs = batch.obs
        counted = obs.any(1)
        proba = torch.as_tensor(self.probabilities(batch), dtype=torch.float32, device=obs.device)
        pos = self.ctx.positive_class if self.ctx.positive_class is not None else 1
        scores = proba[:, pos][None] if self.c == 2 else None
        return BatchPrediction(proba.argmax(-1)[None], counted[None].clone(), scores, counted)
