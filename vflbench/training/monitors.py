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
