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
from ..trees.target_statistics import level_statistics, ordered_target_statistics
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
            "codes",
            "embedded categorical columns (over embed_above levels): codes (the integer codes split as numbers, as the "
            "xgboost yardstick does; the default since the suite: results/suite_categorical) | partition (XGBoost's "
            "categorical splits, sets of levels) | target (CatBoost's ordered target "
            "statistics: each training row's level read as the smoothed mean label of the rows before it in one random "
            "order, a test row's from every training row; one column per class above two)",
            choices=("partition", "codes", "target"),
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
        if o.get("categorical") == "target":
            x = self.target_statistics(x, y)
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

        method = self

        class Report(xgb.callback.TrainingCallback):
            def after_iteration(self, model, epoch, evals_log):
                loss = list(evals_log["train"].values())[0][-1]
                losses.append(float(loss))
                method.booster = model  # the rounds so far predict (early stopping scores them as they are grown)
                return bool(progress(epoch + 1, rounds, float(loss)))  # True: XGBoost grows no more rounds

        self.booster = xgb.train(
            params, dtrain, num_boost_round=rounds, evals=[(dtrain, "train")], verbose_eval=False, callbacks=[Report()]
        )
        self.nodes = int(sum(t.strip().count("\n") + 1 for t in self.booster.get_dump()))  # splits and leaves
        return losses

    def predicts_while_growing(self) -> bool:
        return True

    @classmethod
    def behaviour_components(cls, options, info=None):
        return ["method.trees.early_stop"] if int(options.get("early_stop") or 0) > 0 else []

    def probabilities(self, batch: Batch) -> np.ndarray:
        import xgboost as xgb

        obs = batch.obs.cpu().numpy().astype(bool)
        x = self.binned(self.categorical_codes(self.with_missing(self.party_columns(batch.blocks), obs)))
        if self.options.get("categorical") == "target":
            x = self.target_statistics(x)
        rounds = (0, self.round_limit) if self.round_limit else (0, 0)  # (0, 0): every round
        p = self.booster.predict(self.matrix(xgb, x), iteration_range=rounds)
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

    TS_PRIOR_WEIGHT = 1.0  # CatBoost's default prior weight: a level seen n times is (sum + prior) / (n + 1)

    def target_statistics(self, x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        """``categorical=target``: every embedded column replaced by its ordered target statistics (Prokhorenkova et
        al. 2018), one column for a binary label (the positive class's) and one per class otherwise. Training (``y``
        given): in one random order (the ``gbdt_ts`` stream), a row's value is (the labels of the earlier rows of its
        level + a * prior) / (their count + a), so no row sees its own label; the level sums over every training
        row are kept for prediction. A missing cell (NaN) stays missing."""
        cols = self.embedded_columns()
        if not cols:
            return x
        classes = [1] if self.c == 2 else list(range(self.c))
        a = self.TS_PRIOR_WEIGHT
        if y is not None:
            y = np.asarray(y).astype(np.int64)
            order = np.random.default_rng(self.ctx.streams.seed_for("gbdt_ts")).permutation(len(y))
            self.ts = {"prior": [float(np.mean(y == k)) for k in classes], "tables": {}}

            def order_of(seen: np.ndarray) -> np.ndarray:
                """The random order restricted to the rows where the column is seen, as positions among them."""
                rank = np.cumsum(seen) - 1
                return rank[order[seen[order]]]

        out = []
        for j in cols:
            col = x[:, j]
            seen = ~np.isnan(col)
            lev = np.where(seen, col, 0).astype(np.int64)
            enc = np.full((len(col), len(classes)), np.nan)
            if y is not None:
                enc[seen], sums, counts = ordered_target_statistics(
                    lev[seen], y[seen], order_of(seen), classes, self.ts["prior"], a
                )
                self.ts["tables"][j] = (sums, counts)
            else:
                sums, counts = self.ts["tables"][j]
                enc[seen] = level_statistics(lev[seen], sums, counts, self.ts["prior"], a)
            out.append(enc)
        drop = set(cols)
        keep = [j for j in range(x.shape[1]) if j not in drop]
        return np.concatenate([x[:, keep], *out], axis=1)

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
        cats = set(self.embedded_columns()) if self.options.get("categorical", "codes") == "partition" else set()
        if not cats:
            return xgb.DMatrix(x, missing=np.nan, **kw)
        types = ["c" if j in cats else "q" for j in range(x.shape[1])]
        return xgb.DMatrix(x, missing=np.nan, feature_types=types, enable_categorical=True, **kw)

    def model_parts(self):
        """The central reference has no parties: the whole booster (XGBoost's JSON) is the server's."""
        server = {"xgboost_json": bytes(self.booster.save_raw("json")), "nodes": self.nodes}
        if getattr(self, "cuts", None) is not None:  # binning=quantile|sketch: the cuts that code its inputs
            server["cuts"] = self.cuts.__dict__
        if getattr(self, "ts", None) is not None:  # categorical=target: the level sums prediction reads
            server["target_statistics"] = {
                "prior": list(self.ts["prior"]),
                "tables": {str(j): [s.tolist(), c.tolist()] for j, (s, c) in self.ts["tables"].items()},
            }
        return {"server": server}

    def load_part(self, name, part):
        import xgboost as xgb

        if name == "server":
            self.booster = xgb.Booster()
            self.booster.load_model(bytearray(part["xgboost_json"]))
            self.nodes = int(part["nodes"])
            if "cuts" in part:
                self.cuts = Cuts(**part["cuts"])
            if "target_statistics" in part:
                t = part["target_statistics"]
                self.ts = {
                    "prior": [float(v) for v in t["prior"]],
                    "tables": {int(j): (np.asarray(s), np.asarray(c)) for j, (s, c) in t["tables"].items()},
                }

    def extras(self):
        return {"trees_grown": int(self.booster.num_boosted_rounds())} if hasattr(self, "booster") else {}
