"""``completion``: passive model completion (Fu et al., "Label Inference Attacks Against Vertical Federated
Learning", USENIX Security 2022). A passive party puts a head on its own trained bottom model and fits it on the
labels it knows; it then predicts the other training samples' labels from its own block alone. The paper fine-tunes
the head semi-supervised (MixMatch); here the head is supervised, a small MLP on the frozen bottom model.

A party's own features already predict the label on real data, so the same attack on the bottom model before any
gradient reached it is the baseline: ``accuracy_init`` / ``f1_init``, and ``gain`` the difference, is the leakage
due to training."""

from __future__ import annotations

import warnings

import numpy as np

from .base import ATTACKS, KNOWN, Attack, AttackOption


def fit_predict(x: np.ndarray, y: np.ndarray, fit: np.ndarray, score: np.ndarray, seed: int) -> np.ndarray:
    """A small MLP head (64 hidden units) on standardised features, fitted on ``fit`` rows, predicting ``score``."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(x[fit])
    head = MLPClassifier(hidden_layer_sizes=(64,), max_iter=300, random_state=seed % (2**32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        head.fit(scaler.transform(x[fit]), y[fit])
    return head.predict(scaler.transform(x[score]))


def scores(y: np.ndarray, pred: np.ndarray, n_classes: int, positive: int) -> tuple[float, float]:
    """Accuracy (%) and F1 x 100 (binary: the positive class; else macro), as the run's own metrics."""
    from sklearn.metrics import f1_score

    acc = 100.0 * float((pred == y).mean())
    if n_classes == 2:
        f1 = f1_score(y, pred, pos_label=positive, average="binary", zero_division=0)
    else:
        f1 = f1_score(y, pred, average="macro", labels=list(range(n_classes)), zero_division=0)
    return acc, 100.0 * float(f1)


@ATTACKS.register("completion")
class ModelCompletion(Attack):
    name = "completion"
    paper = "Fu et al., Label Inference Attacks Against Vertical Federated Learning (USENIX Security 2022)"
    adversary = "party"
    observes = "its own bottom model, trained by the gradients returned to it"
    side_knowledge = "known: the share of training labels it knows (the head is fitted on them)"
    metrics = ("accuracy", "f1", "accuracy_init", "f1_init", "gain")
    options = (KNOWN, AttackOption("target", str, "all", "the attacking party (an index), or all: one row each"))
    min_known = 2  # per class

    def __init__(self, opts, ctx):
        super().__init__(opts, ctx)
        self.rows: dict[int, list[tuple[str, str, float]]] = {}
        self.init: dict[int, tuple[float, float]] = {}

    def _attack(self, x: np.ndarray, k: int) -> tuple[float, float]:
        y = self.ctx.y.numpy()
        holds = self.ctx.observed[:, k].numpy()
        known = self.known.numpy()
        fit, score = holds & known, holds & ~known
        pred = fit_predict(x, y, fit, score, self.ctx.seed + k)
        return scores(y[score], pred, self.ctx.n_classes, self.ctx.positive)

    def end_epoch(self, epoch: int, evaluated: bool) -> None:
        if not evaluated:
            return
        out = []
        for k in self.parties():
            if k not in self.init:
                self.init[k] = self._attack(self.ctx.initial_reps(k), k)
            acc, f1 = self._attack(self.ctx.party_reps(k), k)
            acc0, f10 = self.init[k]
            who = self.adversary_of(k)
            out += [(who, "accuracy", acc), (who, "f1", f1), (who, "accuracy_init", acc0), (who, "f1_init", f10)]
            out.append((who, "gain", acc - acc0))
        self.rows[epoch] = out

    def results(self, epoch: int) -> list[tuple[str, str, float]]:
        return self.rows.get(epoch, [])
