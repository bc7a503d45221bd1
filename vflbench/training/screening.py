"""Screening a suspect block as missing (``--screen``): a label-free score per party says how implausible its block is,
and above a threshold chosen on clean-as-given rows the block is treated as missing at prediction, which the methods
that handle missing blocks were built for.

Scores (``--screen SCORE[:FPR][@PARTIES]``):

* ``cross``: how badly the *other* parties' representations predict this party's. Per party k a ridge regression,
  fitted on the training rows where k is observed, maps the other parties' representations (zero where missing) and
  their observed flags to k's representation; the score is the mean squared residual a dimension. A corrupted block
  moves its representation away from what the others imply; a misaligned one belongs to another row. A row whose
  other blocks are all missing has no score (never flagged).
* ``density``: the party's own representation against its training distribution (a Gaussian: the Mahalanobis
  distance a dimension, with a ridge). Needs no other party; a misaligned block is a real block, so this score
  cannot see misalignment by construction.
* ``auto``: ``cross`` where the method has one representation a party (``Method.party_representations``), two or
  more parties and no privacy mechanism at its boundary (PBM-VFL's own, or ``--mechanism``), else ``density``.

The representation is what the party sends across the boundary (its bottom model's output) where the method has one;
else (trees, Local) the party's own block, which it scores itself (``density`` only). A party's threshold is the
``1 - FPR`` quantile of its scores on the validation rows (the protocol's ``val_split``), or the training rows of a run
without them; FPR 0 flags nothing and 1 every block that has a score. No label is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.errors import VFLBenchError
from ..methods import Method
from ..runs.settings.wrong import ScreenSpec
from .train_set import BlockData


def _features(method: Method, data: BlockData, batch_size: int) -> tuple[np.ndarray, str]:
    """[K, n, D] float64: each party's representation on its own block (or its raw block, flattened), and which."""
    was = method.store.training
    method.train(False)
    method.store.begin()
    parts, source = [], "representations"
    with torch.no_grad():
        for start in range(0, data.n, batch_size):
            idx = torch.arange(start, min(start + batch_size, data.n), device=data.x.device)
            blocks = data.batch(idx, None)
            obs = torch.ones(len(idx), method.k, dtype=torch.bool, device=data.x.device)
            z = None if method.local_only else method.party_representations(blocks, obs)
            if z is None:
                source = "blocks"
                z = blocks if torch.is_tensor(blocks) else torch.stack([b.reshape(len(idx), -1) for b in blocks])
            parts.append(z.reshape(z.shape[0], z.shape[1], -1).double().cpu())
    if was:
        method.train(True)
    return torch.cat(parts, 1).numpy(), source


def _keep_others(obs: np.ndarray, c: int, rng: np.random.Generator) -> np.ndarray:
    """``obs`` with each row's observed blocks thinned at random to ``c + 1`` (a party and ``c`` others), where the
    row has that many; rows with fewer keep theirs."""
    n, k = obs.shape
    rank = np.argsort(np.where(obs, rng.random((n, k)), 2.0), axis=1).argsort(axis=1)  # observed first, random order
    return obs & (rank <= c)


def _ridge(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    g = x.T @ x
    lam = 1e-3 * float(np.trace(g)) / max(len(g), 1) + 1e-8
    return np.linalg.solve(g + lam * np.eye(len(g)), x.T @ y)


def _design(z: np.ndarray, obs: np.ndarray, k: int) -> np.ndarray:
    others = [j for j in range(z.shape[0]) if j != k]
    o = obs[:, others].astype(np.float64)
    reps = np.concatenate([z[j] * o[:, [i]] for i, j in enumerate(others)], axis=1)
    return np.concatenate([reps, o, np.ones((len(o), 1))], axis=1)


@dataclass
class Screen:
    spec: ScreenSpec
    k: int
    batch_size: int
    score: str = ""
    source: str = ""
    parties: list[int] = field(default_factory=list)
    thresholds: np.ndarray | None = None
    calibrated_on: str = ""
    _fit: dict = field(default_factory=dict)

    def fit(
        self,
        method: Method,
        train: BlockData,
        train_obs: np.ndarray,
        val: BlockData | None,
        val_obs,
        rng: np.random.Generator,
    ) -> None:
        """The score's model from the training rows, the thresholds from the validation rows (else the training
        rows). ``cross`` learns each party's predictor on the rows as observed and again with each other block
        dropped at random (the predictor must answer with fewer blocks at test), and its thresholds are chosen per
        count of other observed blocks (a prediction from fewer blocks errs more): ``thresholds`` [K, K], by party
        and count."""
        guarded = getattr(method, "boundary", None) is not None  # a privacy mechanism releases the representations
        if guarded and self.spec.score == "cross":
            raise VFLBenchError(
                f"--screen cross reads the parties' representations as computed; {method.display}'s boundary releases "
                "them through a privacy mechanism. Use --screen density (each party scores its own block)."
            )
        z, self.source = _features(method, train, self.batch_size)
        score = self.spec.score
        if score == "auto":
            score = "cross" if self.source == "representations" and self.k >= 2 and not guarded else "density"
        if score == "cross" and (self.source != "representations" or self.k < 2):
            why = "the run has one party" if self.k < 2 else f"{method.display} has no representation a party"
            raise VFLBenchError(f"--screen cross: {why}; use --screen density.")
        self.score, self.parties = score, self.spec.screened(self.k)
        dropped = train_obs & (rng.random(train_obs.shape) < 0.5)
        for k in self.parties:
            rows = train_obs[:, k]
            if score == "cross":
                x, y = [], []
                for obs in (train_obs, dropped | np.eye(self.k, dtype=bool)[k][None, :] & train_obs):
                    use = rows & np.delete(obs, k, axis=1).any(1)
                    x.append(_design(z[:, use], obs[use], k))
                    y.append(z[k, use])
                if sum(len(v) for v in y) < 2:
                    raise VFLBenchError(f"--screen cross: party {k} is observed with another party in no training row.")
                self._fit[k] = _ridge(np.concatenate(x), np.concatenate(y))
            else:
                if rows.sum() < 2:
                    raise VFLBenchError(f"--screen density: party {k} is observed in fewer than 2 training rows.")
                zk = z[k, rows]
                mu = zk.mean(0)
                cov = np.cov(zk, rowvar=False).reshape(zk.shape[1], zk.shape[1])
                cov += (1e-3 * float(np.trace(cov)) / max(len(cov), 1) + 1e-8) * np.eye(len(cov))
                self._fit[k] = (mu, np.linalg.inv(cov))
        cal, cal_obs = (val, val_obs) if val is not None else (train, train_obs)
        self.calibrated_on = "validation rows" if val is not None else "training rows (the run holds out none)"
        zc = self.features(method, cal)
        thr = np.full((self.k, self.k), np.inf)
        counts = range(1, self.k) if score == "cross" else [None]
        for c in counts:
            obs = cal_obs if c is None else _keep_others(cal_obs, c, rng)
            sc = self.scores_of(zc, obs)
            for k in self.parties:
                ok = obs[:, k] & np.isfinite(sc[:, k])
                if c is not None:
                    ok &= np.delete(obs, k, axis=1).sum(1) == c
                v = sc[ok, k]
                at = slice(None) if c is None else c
                if self.spec.fpr >= 1.0:
                    thr[k, at] = -np.inf
                elif self.spec.fpr > 0.0 and len(v):
                    thr[k, at] = float(np.quantile(v, 1.0 - self.spec.fpr))
        if score == "cross":  # a count never seen in calibration takes the nearest seen count's threshold
            for k in self.parties:
                seen = [c for c in range(1, self.k) if np.isfinite(thr[k, c]) or self.spec.fpr in (0.0, 1.0)]
                for c in range(1, self.k):
                    if c not in seen and seen:
                        thr[k, c] = thr[k, min(seen, key=lambda s: abs(s - c))]
        self.thresholds = thr

    def features(self, method: Method, data: BlockData) -> np.ndarray:
        return _features(method, data, self.batch_size)[0]

    def scores_of(self, z: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """[n, K]: each screened party's score (NaN where it has none: unscreened, or cross with no other block)."""
        n = z.shape[1]
        out = np.full((n, self.k), np.nan)
        for k in self.parties:
            if self.score == "cross":
                pred = _design(z, obs, k) @ self._fit[k]
                s = ((z[k] - pred) ** 2).mean(1)
                s[~np.delete(obs, k, axis=1).any(1)] = np.nan
            else:
                mu, prec = self._fit[k]
                d = z[k] - mu
                s = np.einsum("nd,de,ne->n", d, prec, d) / d.shape[1]
            out[:, k] = s
        return out

    def _over(self, scores: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """[n, K]: each observed block's score over its threshold (at the count of other blocks observed in its
        row); > 1 is flagged, NaN where it has no score."""
        others = obs.sum(1, keepdims=True) - obs
        thr = self.thresholds[np.arange(self.k)[None, :], others]
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(thr == np.inf, 0.0, np.where(thr == -np.inf, np.inf, scores / np.maximum(thr, 1e-300)))
        return np.where(obs & np.isfinite(scores), out, np.nan)

    def flag(self, scores: np.ndarray, obs: np.ndarray, z: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """([n, K] bool: the observed blocks screened as missing, [n, K]: each block's score over its threshold, NaN
        where it has none). With ``z`` (the representations), ``cross`` peels: the row's most implausible block over
        its threshold is flagged first, and the rest are judged again without it (a wrong block makes the others'
        prediction of a right one wrong too), until none is over; a flagged block keeps the ratio it was flagged at,
        the others their last."""
        over = self._over(scores, obs)
        if self.score != "cross" or z is None:
            return obs & (np.nan_to_num(over, nan=-1.0) > 1.0), over
        obs, final = obs.copy(), over.copy()
        flagged = np.zeros_like(obs)
        for _ in range(self.k):
            filled = np.nan_to_num(over, nan=-1.0)
            worst = filled.argmax(1)
            hit = filled[np.arange(len(obs)), worst] > 1.0
            if not hit.any():
                break
            flagged[hit, worst[hit]] = True
            obs[hit, worst[hit]] = False
            over = self._over(self.scores_of(z, obs), obs)
            final = np.where(flagged, final, np.where(obs, over, final))
        return flagged, final

    def record(self) -> dict:
        return {
            "spec": str(self.spec),
            "score": self.score,
            "reads": self.source,
            "parties": self.parties,
            "fpr": self.spec.fpr,
            "thresholds": [[None if not np.isfinite(t) else round(float(t), 6) for t in row] for row in self.thresholds]
            if self.thresholds is not None
            else None,  # [party][count of other observed blocks]: +inf (flags nothing) shown as null
            "calibrated_on": self.calibrated_on,
        }


def detection(scores: np.ndarray, flagged: np.ndarray, truth: np.ndarray, obs: np.ndarray, parties: list[int]) -> dict:
    """How well a score finds the wrong blocks among the observed blocks of the screened parties that have a score:
    AUROC of the score against the truly wrong ones (NaN when they are all wrong or all right), and the share
    flagged."""
    from sklearn.metrics import roc_auc_score

    sel = np.zeros_like(obs)
    sel[:, parties] = True
    sel &= obs & ~np.isnan(scores)
    t, s = truth[sel], np.nan_to_num(scores[sel], posinf=np.finfo(np.float64).max)  # FPR 1: every ratio is +inf
    auroc = float(roc_auc_score(t, s)) if 0 < t.sum() < len(t) else float("nan")
    return {
        "screen_auroc": 100.0 * auroc if auroc == auroc else auroc,
        "screen_flagged": 100.0 * float(flagged[sel].mean()) if sel.any() else float("nan"),
    }
