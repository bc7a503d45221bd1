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
        self.msg: torch.Tensor | None = None  # [K, n, W]: each party's latest message of the epoch, as received
        self.seen = torch.zeros(ctx.k, ctx.n, dtype=torch.bool)
        self.rows: dict[int, list[tuple[str, str, float]]] = {}

    def adversary_of(self, k: int) -> str:
        return f"server (party {k})"

    def on_up(self, values, sent, party_of, idx, summed) -> None:
        if not self.parties():
            return
        ids, sent = idx.cpu(), sent.cpu()
        if summed:  # the server holds only the sum: what it knows about every party that took part
            v = values.float().cpu()[None].expand(self.ctx.k, -1, -1)
        elif party_of is None:
            v = values.float().cpu()
        else:
            per = [party_rows(values, sent, party_of, k, False) for k in range(self.ctx.k)]
            width = max(x.shape[1] for _, x in per)
            v = torch.zeros(self.ctx.k, len(ids), width)
            sent = torch.zeros(self.ctx.k, len(ids), dtype=torch.bool)
            for k, (rows, x) in enumerate(per):
                v[k, rows.cpu(), : x.shape[1]] = x.float().cpu()
                sent[k] = rows.cpu()
        if self.msg is None:
            self.msg = torch.zeros(self.ctx.k, self.ctx.n, v.shape[-1])
        self.msg[:, ids] = torch.where(sent[..., None], v, self.msg[:, ids])
        self.seen[:, ids] |= sent

    def end_epoch(self, epoch: int, evaluated: bool) -> None:
        if evaluated:
            out = []
            for k in self.parties():
                seen, known = self.seen[k].numpy(), self.known.numpy()
                fit, score = seen & known, seen & ~known
                if self.msg is None or fit.sum() < self.min_known or not score.any():
                    r2, mse = float("nan"), float("nan")
                else:
                    x = self.ctx.block(k)
                    r2, mse = decode(self.msg[k].numpy(), x, fit, score, self.opts["decoder"], self.ctx.seed + k)
                out += [(self.adversary_of(k), "r2", r2), (self.adversary_of(k), "mse", mse)]
            self.rows[epoch] = out
        self.seen.zero_()

    def results(self, epoch: int) -> list[tuple[str, str, float]]:
        return self.rows.get(epoch, [])
