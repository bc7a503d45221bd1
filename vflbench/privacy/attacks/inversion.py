"""``inversion``: feature reconstruction by the server (He, Zhang and Lee, "Model Inversion Attacks Against
Collaborative Inference", ACSAC 2019, black-box setting). From what it received about party k in an evaluated
epoch (each training sample's last message: the representation, the mechanism's noised or quantised release, or
the sum under PBM-VFL's summed release) and the plain records of party k it knows, the server trains a decoder back
to the block, and reconstructs the others.

Scored on the other samples whose block party k sent, on features standardised with the known records' statistics:
R^2 (scikit-learn ``r2_score``, uniform average over the features that vary among the scored samples; 0 is the
known mean's prediction) and the mean squared error."""

from __future__ import annotations

import warnings

import numpy as np
import torch

from .base import ATTACKS, KNOWN, TARGET, Attack, AttackOption, party_rows


def decode(msg: np.ndarray, x: np.ndarray, fit: np.ndarray, score: np.ndarray, decoder: str, seed: int):
    """Standardised reconstruction of ``x[score]`` from ``msg`` by a decoder fitted on the ``fit`` rows; returns
    (R^2, MSE) on standardised features."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import Ridge
    from sklearn.metrics import mean_squared_error, r2_score
    from sklearn.neural_network import MLPRegressor
    from sklearn.preprocessing import StandardScaler

    xs = StandardScaler().fit(x[fit])
    xs.scale_[xs.scale_ == 0] = 1.0
    ms = StandardScaler().fit(msg[fit])
    target = xs.transform(x)
    model = (
        Ridge(alpha=1e-3)
        if decoder == "linear"
        else MLPRegressor(hidden_layer_sizes=(128,), max_iter=300, random_state=seed % (2**32))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(ms.transform(msg[fit]), target[fit])
    pred = model.predict(ms.transform(msg[score])).reshape(int(score.sum()), -1)
    truth = target[score]
    varies = truth.std(0) > 0
    r2 = float(r2_score(truth[:, varies], pred[:, varies], multioutput="uniform_average")) if varies.any() else 0.0
    return r2, float(mean_squared_error(truth, pred))


@ATTACKS.register("inversion")
class FeatureInversion(Attack):
    name = "inversion"
    paper = "He, Zhang & Lee, Model Inversion Attacks Against Collaborative Inference (ACSAC 2019)"
    adversary = "server"
    observes = "what it received for party k in an evaluated epoch (representation, release, or sum)"
    side_knowledge = "known: the share of party k's training records whose plain block it knows"
    metrics = ("r2", "mse")
    labels = False
    min_known = 10
    options = (
        KNOWN,
        TARGET,
        AttackOption(
            "decoder", str, "mlp", "the decoder: mlp (128 hidden units) or linear (ridge)", choices=("mlp", "linear")
        ),
    )

    def __init__(self, opts, ctx):
        super().__init__(opts, ctx)
        self.msg: dict[int, torch.Tensor | None] = dict.fromkeys(self.parties())
        self.seen = {k: torch.zeros(ctx.n, dtype=torch.bool) for k in self.parties()}
        self.rows: dict[int, list[tuple[str, str, float]]] = {}

    def adversary_of(self, k: int) -> str:
        return f"server (party {k})"

    def on_up(self, values, sent, party_of, idx, summed) -> None:
        for k in self.msg:
            rows, vec = party_rows(values, sent, party_of, k, summed)
            if not len(vec):
                continue
            if self.msg[k] is None:
                self.msg[k] = torch.zeros(self.ctx.n, vec.shape[1])
            ids = idx[rows.to(idx.device)].cpu()
            self.msg[k][ids] = vec.float().cpu()
            self.seen[k][ids] = True

    def end_epoch(self, epoch: int, evaluated: bool) -> None:
        if evaluated:
            out = []
            for k in self.parties():
                seen, known = self.seen[k].numpy(), self.known.numpy()
                fit, score = seen & known, seen & ~known
                if self.msg[k] is None or fit.sum() < self.min_known or not score.any():
                    r2, mse = float("nan"), float("nan")
                else:
                    x = self.ctx.block(k)
                    r2, mse = decode(self.msg[k].numpy(), x, fit, score, self.opts["decoder"], self.ctx.seed + k)
                out += [(self.adversary_of(k), "r2", r2), (self.adversary_of(k), "mse", mse)]
            self.rows[epoch] = out
        for k in self.seen:
            self.seen[k].zero_()

    def results(self, epoch: int) -> list[tuple[str, str, float]]:
        return self.rows.get(epoch, [])
