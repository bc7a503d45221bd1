"""GBDT: gradient-boosted trees on every party's columns in one place, from a maintained library (XGBoost's
``hist``), the tabular practitioner's first choice and the central reference of every comparison. Not VFL: its
rows are labelled as the central reference in tables.

A block missing for a sample is NaN in each of its columns, so XGBoost learns each split's default direction for
it (its sparsity-aware split finding), in training and at test time. Classes are weighted as the neural methods'
sampler weighs them on the dataset (Credit: class-balanced), the first margin is the weighted prior (``base_score``),
and with more than two classes XGBoost grows one tree per class a round (``multi:softprob``). Embedded categorical
columns (more levels than ``embed_above``) use XGBoost's categorical support (splits that partition the levels);
one-hot columns are numeric 0/1 columns. One thread per run unless ``--threads`` says otherwise (the result does not
depend on it). ``binning=quantile|sketch`` gives XGBoost the bin codes of secureboost's binning instead of its own
cuts (vflbench.trees.binning), so that the two differ by their algorithms only.
"""

from __future__ import annotations

import numpy as np
import torch

from ..trees.binning import BINNINGS, Cuts, fit_cuts
from .base import METHODS, Batch, Option
from .boosting import TREE_OPTIONS, TreeMethod


@METHODS.register("gbdt")
class GBDT(TreeMethod):
    name, display = "gbdt", "GBDT (central)"
    paper = "XGBoost (Chen & Guestrin, KDD 2016): the central reference, not VFL"
    runtime_refusal = "gbdt is the central reference: every block in one place, no parties"

    @classmethod
    def libraries(cls, options):
        return ["xgboost"]  # its booster

    option_specs = (
        *TREE_OPTIONS,
        Option(
            "binning",
            str,
            "library",
            "library: XGBoost's own cuts (its quantile sketch, weighted by the sample weights) | quantile or sketch: "
            "XGBoost trains on the bin codes of secureboost's binning of that name (the same cut sets: a "
            "controlled comparison of the two algorithms)",
            choices=("library", *BINNINGS),
        ),
        Option(
            "categorical",
            str,
            "partition",
            "embedded categorical columns: partition (XGBoost's categorical splits, sets of levels) | codes (the "
            "integer codes split as numbers, as the xgboost yardstick does)",
            choices=("partition", "codes"),
        ),
    )
    assumptions = (
        "XGBoost tree_method=hist, missing blocks as NaN (learned default directions), base_score = the weighted "
        "training prior (binary), one thread; multi-class: one tree per class a round",
    )

    @classmethod
    def loss_refusal(cls, options):
        return "it is the central reference, every block in one place: it has no party to lose"

    def fit_whole(self, blocks, y, observed, weights, progress):
        try:
            import xgboost as xgb
        except ImportError:  # pragma: no cover - a dependency of the install
            from ..core.errors import VFLBenchError

            raise VFLBenchError("--method gbdt needs XGBoost: pip install xgboost-cpu (or xgboost).") from None
        o = self.options
        x = self.binned(self.categorical_codes(self.with_missing(blocks, observed)), fit=True)
        params = {
            "tree_method": "hist",
            "max_depth": int(o["max_depth"]),
            "eta": float(o["learning_rate"]),
            "max_bin": self.max_bin,
            "lambda": float(o["reg_lambda"]),
            "gamma": float(o["gamma"]),
            "min_child_weight": float(o["min_child_weight"]),
            "nthread": max(1, torch.get_num_threads()),
            "seed": int(self.ctx.streams.seed_for("gbdt") % (2**31)),
        }
        if self.c == 2:
            prior = float(np.average(y, weights=weights))
            params.update(objective="binary:logistic", eval_metric="logloss", base_score=prior)
        else:
            params.update(objective="multi:softprob", num_class=self.c, eval_metric="mlogloss")
        dtrain = self.matrix(xgb, x, label=y, weight=weights)
        rounds = int(o["trees"])
        losses: list[float] = []

        class Report(xgb.callback.TrainingCallback):
            def after_iteration(self, model, epoch, evals_log):
                loss = list(evals_log["train"].values())[0][-1]
                losses.append(float(loss))
                progress(epoch + 1, rounds, float(loss))
                return False

        self.booster = xgb.train(
            params, dtrain, num_boost_round=rounds, evals=[(dtrain, "train")], verbose_eval=False, callbacks=[Report()]
        )
        self.nodes = int(sum(t.strip().count("\n") + 1 for t in self.booster.get_dump()))  # splits and leaves
        return losses

    def probabilities(self, batch: Batch) -> np.ndarray:
        import xgboost as xgb

        obs = batch.obs.cpu().numpy().astype(bool)
        x = self.binned(self.categorical_codes(self.with_missing(self.party_columns(batch.blocks), obs)))
        p = self.booster.predict(self.matrix(xgb, x))
        return np.stack([1 - p, p], 1) if self.c == 2 else p

    def embedded_columns(self) -> list[int]:
        """The joined table's columns that hold an embedded categorical's codes (vflbench.data.datasets.encoding)."""
        offsets = np.cumsum([0, *self.ctx.widths])
        return sorted(int(offsets[k] + pos) for k, cols in enumerate(self.ctx.embedded or []) for pos, _, _ in cols)

    def categorical_codes(self, x: np.ndarray) -> np.ndarray:
        """Code 0 (a missing cell) of an embedded column as NaN; its other codes are XGBoost's categories."""
        for j in self.embedded_columns():
            col = x[:, j]
            col[col == 0] = np.nan
        return x

    def binned(self, x: np.ndarray, fit: bool = False) -> np.ndarray:
        """With ``binning`` other than ``library``, the numeric columns as their bin codes (NaN stays missing) under
        the cuts fitted on the training table: XGBoost then splits between the same values as secureboost."""
        binning = self.options["binning"]
        if binning == "library":
            return x
        embedded = set(self.embedded_columns())
        numeric = [j for j in range(x.shape[1]) if j not in embedded]
        if fit:
            self.cuts = fit_cuts(x[:, numeric], self.max_bin, binning)
        codes = self.cuts.codes(x[:, numeric]).astype(np.float64)
        codes[np.isnan(x[:, numeric])] = np.nan
        x = x.copy()
        x[:, numeric] = codes
        return x

    def matrix(self, xgb, x: np.ndarray, **kw):
        """XGBoost's DMatrix, with its categorical support for the embedded columns (partition splits over levels;
        ``categorical=codes``: their codes as numbers)."""
        cats = set(self.embedded_columns()) if self.options.get("categorical", "partition") == "partition" else set()
        if not cats:
            return xgb.DMatrix(x, missing=np.nan, **kw)
        types = ["c" if j in cats else "q" for j in range(x.shape[1])]
        return xgb.DMatrix(x, missing=np.nan, feature_types=types, enable_categorical=True, **kw)

    def model_parts(self):
        """The central reference has no parties: the whole booster (XGBoost's JSON) is the server's."""
        server = {"xgboost_json": bytes(self.booster.save_raw("json")), "nodes": self.nodes}
        if getattr(self, "cuts", None) is not None:  # binning=quantile|sketch: the cuts that code its inputs
            server["cuts"] = self.cuts.__dict__
        return {"server": server}

    def load_part(self, name, part):
        import xgboost as xgb

        if name == "server":
            self.booster = xgb.Booster()
            self.booster.load_model(bytearray(part["xgboost_json"]))
            self.nodes = int(part["nodes"])
            if "cuts" in part:
                self.cuts = Cuts(**part["cuts"])

    def extras(self):
        return {"trees_grown": int(self.booster.num_boosted_rounds())} if hasattr(self, "booster") else {}
