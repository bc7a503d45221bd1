"""Scoring a trained method: predictions over a split with the metric rules (:func:`score`), every
test setting of a run (:func:`evaluate`), the masks' realised statistics, and the run's cost columns
(traffic, the method's extras, a run-attached mechanism's privacy columns: :func:`cost_extras`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core.metrics import METRICS, compute_metrics
from ..methods import Method
from ..runs.config import ResolvedRun
from .inputs import RunInputs
from .screening import Screen, detection
from .trainer import BlockData, predict


def cost_extras(method: Method) -> dict[str, Any]:
    """The run's cost columns: traffic, the method's own extras and, for a mechanism the run attached
    (``--mechanism``), its privacy columns."""
    out = {**method.channel.extras(), **method.extras()}
    b = method.boundary
    if b is not None and getattr(b, "owner", None) == "run":
        out.update({"mechanism": str(b.spec), "secagg": b.secagg, **b.extras()})
    return out


@dataclass
class Evaluation:
    setting: str  # the test missingness
    metrics: dict[str, Any]
    masks: dict[str, Any]
    wrong: tuple[str, str] = ("none", "none")  # the test (corruption, misalignment) of blocks present but wrong

    @property
    def key(self) -> str:
        """The setting's one name: its missingness, and its wrong blocks where there are any."""
        return self.setting if self.wrong == CLEAN else f"{self.setting} | {self.wrong[0]} | {self.wrong[1]}"


CLEAN = ("none", "none")


def score(
    method: Method,
    inputs: RunInputs,
    data: BlockData,
    obs: torch.Tensor,
    y: np.ndarray,
    batch_size: int,
    tta: torch.Generator | None = None,
    phase: str = "eval",
    keep: np.ndarray | None = None,
    into: dict | None = None,
    setting: str | None = None,
) -> dict[str, Any]:
    """Predict over a split and apply the metric rules (``keep``: the samples that are scored; ``into``: where the
    per-sample predictions of ``setting`` are kept)."""
    preds, valid, scores, counted = predict(method, data, obs, batch_size, tta, phase)
    if into is not None:
        into[setting] = (preds, valid, scores, counted)
    if keep is not None:
        preds, valid, counted, y = preds[:, keep], valid[:, keep], counted[keep], y[keep]
        scores = None if scores is None else scores[:, keep]
    info = inputs.prep.data
    return compute_metrics(
        preds,
        valid,
        scores,
        counted,
        y,
        rule=method.f1_rule,
        n_classes=info.n_classes,
        positive_class=info.info.positive_class,
    )


def fit_screen(run: ResolvedRun, inputs: RunInputs, method: Method) -> Screen | None:
    """The run's ``--screen`` fitted on the trained method (None without one)."""
    spec = run.settings.get("screen")
    if spec is None:
        return None
    screen = Screen(spec, method.k, run.eval_batch_size)
    val_obs = None if inputs.val is None else inputs.val_train_obs.cpu().numpy()
    rng = inputs.prep.streams.numpy("screen")
    screen.fit(method, inputs.train.blocks, inputs.train.obs.cpu().numpy(), inputs.val, val_obs, rng)
    inputs.screen = screen
    return screen


def evaluate(run: ResolvedRun, inputs: RunInputs, method: Method, timed: bool = True) -> list[Evaluation]:
    """Every test setting: each missingness crossed with each (corruption, misalignment) of blocks present but wrong;
    under ``--screen`` each is scored again with the flagged blocks missing (``METRIC@screen``), with the score's
    detection of the wrong blocks."""
    t = time.perf_counter()
    out = []
    screen = fit_screen(run, inputs, method)
    for wrong in inputs.wrong_settings():
        data, record = (inputs.test, None) if wrong == CLEAN else inputs.test_wrong[wrong]
        z = screen.features(method, data) if screen is not None else None
        for s, m in inputs.test_masks.items():
            ev = Evaluation(s, {}, {}, wrong)
            tta = None
            if run.protocol.test_time_augmentation:
                tta = torch.Generator(device=inputs.device)
                tta.manual_seed(inputs.prep.streams.seed_for(f"tta/{s}"))
            obs = torch.as_tensor(m.observed, device=inputs.device)
            met = score(method, inputs, data, obs, inputs.y_test, run.eval_batch_size, tta, into=inputs.predictions,
                        setting=ev.key)  # fmt: skip
            default = run.method_options.get("eval")
            for variant in (v for v in method.eval_variants if v != default):  # e.g. PBM-VFL with exact sums
                method.use_variant(variant)
                other = score(method, inputs, data, obs, inputs.y_test, run.eval_batch_size, tta)
                met.update({f"{k}@{variant}": other[k] for k in METRICS if k in other})
                method.use_variant(default)
            if inputs.val is not None and wrong == CLEAN:  # the same setting's mechanism on the validation samples
                vobs = torch.as_tensor(inputs.val_masks[s].observed, device=inputs.device)
                vmet = score(method, inputs, inputs.val, vobs, inputs.y_val, run.eval_batch_size, tta)
                met.update({f"val_{k}": vmet[k] for k in (*METRICS, "n_counted", "n_test") if k in vmet})
            info = {**m.info, **mask_summary(m.observed)}
            truth = np.zeros_like(m.observed) if record is None else record.affected
            if record is not None:
                info.update(
                    {**record.info, "wrong_observed_rate_per_block": (truth & m.observed).mean(0).round(4).tolist()}
                )
            if screen is not None:
                sc = screen.scores_of(z, m.observed)
                flagged, sc = screen.flag(sc, m.observed, z)
                sobs = torch.as_tensor(m.observed & ~flagged, device=inputs.device)
                smet = score(method, inputs, data, sobs, inputs.y_test, run.eval_batch_size, tta)
                met.update({f"{k}@screen": smet[k] for k in METRICS if k in smet})
                met.update(detection(sc, flagged, truth, m.observed, screen.parties))
                info["screen_flagged_per_block"] = flagged.mean(0).round(4).tolist()
            ev.metrics, ev.masks = met, info
            out.append(ev)
    if timed:
        inputs.timings["eval_s"] = time.perf_counter() - t
    return out


def mask_summary(obs: np.ndarray) -> dict[str, Any]:
    return {
        "observed_rate_per_block": obs.mean(0).round(4).tolist(),
        "fully_observed_fraction": float(obs.all(1).mean()),
        "all_missing_count": int((~obs.any(1)).sum()),
    }
