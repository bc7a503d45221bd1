"""Label attacks on SecureBoost (surface "secureboost"): what a passive party reads off the protocol's messages,
tree by tree (:meth:`~.base.Attack.on_tree`), scored as the gradient attacks are (the ROC AUC, on the held rows whose
label the party does not know, of a score oriented by the ones it does; per tree, with the mean and the best over
trees).

- ``leaves``: the instance spaces. Every party learns where each of its rows went at every split, whoever owns it
  (SecureBoost's route messages), hence the leaf each of its rows reaches in every tree; under Paillier too. It gives
  each leaf the share of positives among the rows of that leaf whose label it knows (smoothed towards their overall
  share) and scores a row by the mean of its leaves' shares over the trees so far: a supervised reading of the
  instance-space leak that ID2Graph (Takahashi et al., 2023) exploits without labels.
- ``gradients``: the g a party is sent in clear (``encryption=none``). With a constant first margin every first-tree
  g is ``w (p0 - y)``, so its sign is the label; later trees' g still order the rows by label. Refused under Paillier.
"""

from __future__ import annotations

import numpy as np

from .base import ATTACKS, Attack, oriented_auc

SMOOTHING = 1.0  # known rows' weight of the prior in a leaf's share (a leaf with no known row scores the prior)


class TreeScoring(Attack):
    labels = True
    binary_only = True
    surface = "secureboost"
    metrics = ("auc", "auc_mean", "auc_max")

    def __init__(self, opts, ctx):
        super().__init__(opts, ctx)
        self.pos = (ctx.y == ctx.positive).numpy()
        self.known_np = self.known.numpy()
        self.now: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # party -> (rows, score) after the latest tree

    def tree_scores(self, k: int, rows: np.ndarray, leaf: np.ndarray, g: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError

    def on_tree(self, k, rows, leaf, g) -> None:
        if k in self.parties():
            self.now[k] = (rows, self.tree_scores(k, rows, leaf, g))

    def end_epoch(self, epoch: int, evaluated: bool) -> None:
        for k, (rows, score) in self.now.items():
            self.history.setdefault(k, {})[epoch] = oriented_auc(score, self.known_np[rows], self.pos[rows])
        self.now = {}

    def results(self, epoch: int) -> list[tuple[str, str, float]]:
        return self.history_rows(epoch)


@ATTACKS.register("leaves")
class LeafLabels(TreeScoring):
    name = "leaves"
    paper = (
        "SecureBoost's instance-space leak (Cheng et al. 2021, security analysis; cf. ID2Graph, Takahashi et al. 2023)"
    )
    adversary = "party"
    observes = "the leaf each of its rows reaches in every tree (route messages and its own splits; clear or Paillier)"
    side_knowledge = "known: the share of training labels it knows (they label the leaves)"

    def __init__(self, opts, ctx):
        super().__init__(opts, ctx)
        self.total: dict[int, np.ndarray] = {}  # party -> sum over trees of its rows' leaf shares
        self.trees: dict[int, int] = {}

    def tree_scores(self, k, rows, leaf, g):
        known, pos = self.known_np[rows], self.pos[rows]
        prior = pos[known].mean() if known.any() else 0.5
        ids, at = np.unique(leaf, return_inverse=True)
        n_known = np.bincount(at, weights=known.astype(float), minlength=len(ids))
        n_pos = np.bincount(at, weights=(known & pos).astype(float), minlength=len(ids))
        share = (n_pos + SMOOTHING * prior) / (n_known + SMOOTHING)
        if k not in self.total or len(self.total[k]) != len(rows):
            self.total[k], self.trees[k] = np.zeros(len(rows)), 0
        self.total[k] += share[at]
        self.trees[k] += 1
        return self.total[k] / self.trees[k]


@ATTACKS.register("gradients")
class ClearGradients(TreeScoring):
    name = "gradients"
    paper = "SecureBoost without encryption: g = w (p - y) is the label (docs/ATTACKS.md, 'Gradient-boosted trees')"
    adversary = "party"
    observes = "the g it is sent for its rows in clear (encryption=none)"
    side_knowledge = "known: the share of training labels it knows (they orient the score)"
    needs_clear_gh = True

    def tree_scores(self, k, rows, leaf, g):
        return -np.asarray(g, dtype=np.float64)[:, 0]  # g = w (p - y): the positives are the low end
