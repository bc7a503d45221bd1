"""What a run measures while it trains, as trainer callbacks: the first epoch that reaches a training
target (:class:`TargetMonitor`, ``--target``), evaluations at earlier budgets (:class:`BudgetEvaluator`,
``--eval-epochs``), and what self-supervised pretraining learned (:class:`SSLProbe`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..core.errors import VFLBenchError
from ..methods import Method
from ..runs.config import ResolvedRun
from .evaluation import Evaluation, cost_extras, evaluate, score
from .inputs import RunInputs
from .trainer import BlockData, Callback


class TargetMonitor(Callback):
    """``--target train_auprc=0.9``: after every epoch, one pass over the training set the way the
    method predicts (PBM-VFL: through its mechanism), in the ``monitor`` phase; records the first
    epoch at or above the target and the run's cost columns (``comm_*``, ``epsilon_*``) at that
    point. Epochs count across stages."""

    COST_PREFIXES = ("comm_", "epsilon_")

    def __init__(self, target: str, inputs: RunInputs, method: Method, batch_size: int):
        name, _, value = target.partition("=")
        self.metric, self.value = name.removeprefix("train_"), float(value)
        self.inputs, self.batch_size, self.method = inputs, batch_size, method
        n_classes = inputs.prep.data.n_classes
        if self.metric in ("auprc", "f1") and n_classes != 2:  # (dataset options can change the class count)
            raise VFLBenchError(
                f"This data has {n_classes} classes; {name} is defined for binary tasks only. Use train_accuracy."
            )
        self.curve: list[float] = []
        self.reached: int | None = None
        self.at_target: dict[str, Any] = {}

    def on_epoch_end(self, loop) -> None:
        tr = self.inputs.train
        keep = None if tr.labeled is None else tr.labeled.cpu().numpy()  # only labeled samples can be scored
        met = score(
            loop.method, self.inputs, tr.blocks, tr.obs, tr.y.cpu().numpy(), self.batch_size, phase="monitor", keep=keep
        )
        v = float(met[self.metric]) / 100.0  # metrics are percentages; targets are fractions
        self.curve.append(v)
        if self.reached is None and v >= self.value:
            self.reached = len(self.curve)
            cost = cost_extras(loop.method)
            self.at_target = {f"{k}_at_target": x for k, x in cost.items() if k.startswith(self.COST_PREFIXES)}

    def extras(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "target": f"train_{self.metric}>={self.value:g}",
            "epochs_to_target": float(self.reached) if self.reached is not None else float("inf"),
        }
        if self.reached is None:  # never reached: the cost to reach it is unbounded
            cost = cost_extras(self.method)
            out.update({f"{k}_at_target": float("inf") for k in cost if k.startswith(self.COST_PREFIXES)})
        out.update(self.at_target)
        return out


class BudgetEvaluator(Callback):
    """``--eval-epochs``: evaluate under every test setting after the listed epochs (counted across
    stages), as if training had stopped there. Random draws that evaluation makes are restored
    afterwards, so training, and the final evaluation, are the same as in a run without it."""

    def __init__(self, run: ResolvedRun, inputs: RunInputs, method: Method):
        self.run, self.inputs, self.method = run, inputs, method
        self.epochs = set(run.eval_epochs or ())
        self.seen = 0
        self.results: dict[int, list[Evaluation]] = {}

    def on_epoch_end(self, loop) -> None:
        self.seen += 1
        if self.seen not in self.epochs:
            return
        m = self.method
        gens = [m.gen, *getattr(m.channel, "gens", {}).values()]
        states = [g.get_state() for g in gens]
        self.results[self.seen] = evaluate(self.run, self.inputs, m, timed=False)
        for g, st in zip(gens, states, strict=True):
            g.set_state(st)


class SSLProbe(Callback):
    """What self-supervised pretraining learned, for runs with a stage that hides labels and a
    method that exposes its representations (:meth:`Method.probe_representations`): a linear probe
    (standardised features, multinomial logistic regression) fitted on the labeled training samples'
    frozen representations and scored on the test set, every block observed, before the first
    unlabeled stage and after the last one; and SimSiam's collapse diagnostic, the std of the
    L2-normalised projector output (about 1/sqrt(d) when spread, 0 when collapsed), on up to 2,048
    training samples under the training mask. Columns ``ssl_probe_acc_init``,
    ``ssl_probe_acc_pretrained`` (%), ``ssl_collapse_std_init``, ``ssl_collapse_std_pretrained``,
    ``ssl_collapse_ref``."""

    MAX_FIT = 5000

    def __init__(self, run: ResolvedRun, inputs: RunInputs, method: Method):
        self.run, self.inputs, self.method = run, inputs, method
        self.out: dict[str, Any] = {}
        self.state = "before"

    @staticmethod
    def wanted(method: Method) -> bool:
        """Any run with a stage that hides labels; a method without representations to probe or a
        collapse diagnostic answers None to both and adds no column."""
        return any(not st.labels for st in method.stages)

    def _reps(self, data: BlockData, idx: torch.Tensor) -> np.ndarray | None:
        m = self.method
        parts = []
        for start in range(0, len(idx), self.run.eval_batch_size):
            j = idx[start : start + self.run.eval_batch_size]
            obs = torch.ones(len(j), m.k, dtype=torch.bool, device=j.device)
            r = m.probe_representations(data.batch(j), obs)
            if r is None:
                return None
            parts.append(r.permute(1, 0, 2).reshape(len(j), -1).float().cpu().numpy())
        return np.concatenate(parts)

    @torch.no_grad()
    def _measure(self, suffix: str) -> None:
        from sklearn.linear_model import LogisticRegression
        from sklearn.preprocessing import StandardScaler

        m, inp = self.method, self.inputs
        was = m.store.training
        m.train(False)
        m.store.begin()
        tr = inp.train
        dev = tr.obs.device
        pool = (tr.labeled.nonzero().view(-1) if tr.labeled is not None else torch.arange(tr.blocks.n, device=dev))[
            : self.MAX_FIT
        ]
        x_tr = self._reps(tr.blocks, pool)
        if x_tr is not None:
            x_te = self._reps(inp.test, torch.arange(inp.test.n, device=dev))
            scaler = StandardScaler().fit(x_tr)
            clf = LogisticRegression(max_iter=2000).fit(scaler.transform(x_tr), tr.y[pool].cpu().numpy())
            self.out[f"ssl_probe_acc{suffix}"] = float(
                100.0 * (clf.predict(scaler.transform(x_te)) == np.asarray(inp.y_test)).mean()
            )
        sub = torch.arange(min(2048, tr.blocks.n), device=dev)
        std = m.collapse_std(tr.blocks.batch(sub), tr.obs[sub])
        if std is not None:
            self.out[f"ssl_collapse_std{suffix}"] = std
            self.out["ssl_collapse_ref"] = 1.0 / math.sqrt(512)
        m.train(was)

    def on_stage_start(self, loop) -> None:
        if self.state == "before" and not loop.stage.labels:
            self._measure("_init")
            self.state = "pretraining"
        elif self.state == "pretraining" and loop.stage.labels:
            self._measure("_pretrained")
            self.state = "done"

    def extras(self) -> dict[str, Any]:
        if self.state == "pretraining":  # no labeled stage followed
            self._measure("_pretrained")
            self.state = "done"
        return dict(self.out)


class EarlyStopping(Callback):
    """``patience`` (a hyper-parameter of the method's last stage; the preset's ``user_table`` blocks set it): after
    every epoch of that stage, the validation rows (``val_split`` of the training rows, held out of training) are
    scored under their training masks, as the method predicts, in the ``monitor`` phase: AUPRC for a binary target,
    else accuracy. The stage ends after ``patience`` epochs without a strictly better score, and the model of the best
    epoch is put back (the epoch validation picks: a run that stops early equals the same run trained for that many
    epochs). The run's rows record the metric, the best epoch, the epochs trained and the best validation score."""

    def __init__(self, inputs: RunInputs, method: Method, stage: str, patience: int, batch_size: int):
        if inputs.val is None or inputs.val_train_obs is None:
            raise VFLBenchError("Early stopping needs validation rows: set the protocol option val_split > 0.")
        self.inputs, self.stage, self.patience, self.batch_size = inputs, stage, int(patience), batch_size
        self.metric = "auprc" if inputs.prep.data.n_classes == 2 else "accuracy"
        self.curve: list[float] = []
        self.best = -math.inf
        self.best_epoch = 0
        self.state: list[torch.Tensor] | None = None
        self.stopped = False

    def on_epoch_end(self, loop) -> None:
        if loop.stage.name != self.stage or self.stopped:
            return
        i = self.inputs
        gens = _generators(loop.method)
        states = [g.get_state() for g in gens]  # scoring draws (random guesses, sampled heads) leave training's
        met = score(loop.method, i, i.val, i.val_train_obs, i.y_val, self.batch_size, phase="monitor")
        for g, st in zip(gens, states, strict=True):
            g.set_state(st)
        v = float(met[self.metric])
        v = -math.inf if math.isnan(v) else v
        self.curve.append(v)
        if v > self.best:
            self.best, self.best_epoch, self.state = v, len(self.curve), snapshot(loop.method)
        elif len(self.curve) - self.best_epoch >= self.patience:
            self.stopped = loop.stop = True

    def on_stage_end(self, loop) -> None:
        if loop.stage.name == self.stage and self.state is not None and self.best_epoch < len(self.curve):
            restore(loop.method, self.state)

    def extras(self) -> dict[str, Any]:
        return stopping_extras(self.metric, self.best, self.best_epoch, len(self.curve))


class TreeRounds(Callback):
    """``early_stop`` of a tree method (gbdt, xgboost, secureboost): the neural methods' patience rule on rounds. When
    the trees are grown, the validation rows (the run's ``val_split`` of the training rows, which the trees did not
    train on) are scored under their training masks with the first r rounds, r = 1, 2, ...: AUPRC for a binary target,
    else accuracy. The count stops after ``patience`` rounds without a strictly better score, and the model predicts
    with the best count from then on. The rows record the same columns as the neural early stopping (best_epoch: the
    rounds kept)."""

    def __init__(self, inputs: RunInputs, method: Method, patience: int, batch_size: int):
        if inputs.val is None or inputs.val_train_obs is None:
            raise VFLBenchError("early_stop needs validation rows: set the protocol option val_split > 0.")
        self.inputs, self.method, self.patience, self.batch_size = inputs, method, int(patience), batch_size
        self.metric = "auprc" if inputs.prep.data.n_classes == 2 else "accuracy"
        self.curve: list[float] = []
        self.best, self.best_round = -math.inf, 0
        self.live = self.stopped = False  # scored while growing; the count stopped

    def _round(self, r: int) -> bool:
        """Score the first ``r`` rounds on the validation rows; True when the count stops there."""
        i, m = self.inputs, self.method
        m.round_limit = r
        v = float(score(m, i, i.val, i.val_train_obs, i.y_val, self.batch_size, phase="monitor")[self.metric])
        m.round_limit = None
        v = -math.inf if math.isnan(v) else v
        self.curve.append(v)
        if v > self.best:
            self.best, self.best_round = v, r
            return False
        return r - self.best_round >= self.patience

    def on_epoch_end(self, loop) -> None:
        """A method that predicts while growing (:meth:`Method.predicts_while_growing`) is scored round by round as
        it grows, and told to stop (``loop.stop``) when the count stops: the rounds and scores of scoring them after,
        without growing the rest."""
        if self.stopped or not self.method.predicts_while_growing():
            return
        self.live = True
        if self._round(len(self.curve) + 1):
            self.stopped = loop.stop = True

    def on_stage_end(self, loop) -> None:
        total = int(self.method.options["trees"])
        if not self.live:  # grown in full: the rounds scored now, in order, until the count stops
            for r in range(1, total + 1):
                if self._round(r):
                    break
        self.method.round_limit = self.best_round if 0 < self.best_round < total else None

    def extras(self) -> dict[str, Any]:
        return stopping_extras(self.metric, self.best, self.best_round, len(self.curve))


def stopping_extras(metric: str, best: float, best_at: int, scored: int) -> dict[str, Any]:
    """The columns an early-stopped run records, neural (epochs) or trees (rounds) alike."""
    return {
        "early_stop_metric": f"val_{metric}",
        "best_epoch": float(best_at),
        "epochs_trained": float(scored),
        "val_best": best if math.isfinite(best) else float("nan"),
    }


def _generators(method: Method) -> list[torch.Generator]:
    """The random generators a prediction may draw from: the method's, its channel's and its boundary's (each an
    attribute holding a torch.Generator), so that scoring between epochs changes no draw of the training."""
    out: list[torch.Generator] = []
    for obj in (method, getattr(method, "channel", None), getattr(method, "boundary", None)):
        for v in vars(obj).values() if obj is not None else ():
            if isinstance(v, torch.Generator) and not any(v is g for g in out):
                out.append(v)
    return out


def _tensors(method: Method) -> list[torch.Tensor]:
    """Every value a trained method's predictions depend on: its parameter store, then its modules' parameters and
    buffers (image extractors, decoders)."""
    out = [method.store.flat]
    mods = [m for m, _ in method.module_members]
    for ex in method.extractor_sets:
        if ex.modules is not None:
            mods.append(ex.modules)
    for mod in mods:
        out += [t for t in mod.state_dict(keep_vars=True).values() if isinstance(t, torch.Tensor)]
    return out


def snapshot(method: Method) -> list[torch.Tensor]:
    return [t.detach().clone() for t in _tensors(method)]


def restore(method: Method, state: list[torch.Tensor]) -> None:
    with torch.no_grad():
        for t, saved in zip(_tensors(method), state, strict=True):
            t.copy_(saved)
