"""XGBoost on integer codes, untuned: the tabular practitioner's yardstick (issue "suite"). Every block in one place
(not VFL), a missing block as NaN in each of its columns, an embedded categorical column as its integer codes read
as numbers (no categorical splits), no class weights, XGBoost's ``hist`` with 300 trees of depth 6 at learning rate
0.1 and every other setting at XGBoost's default. What a user would run first on the joined table; every method of a
suite table is measured against it (results/suite).

It differs from ``gbdt`` (the central reference, whose options mirror SecureBoost's) in three ways: the codes are
numbers (``gbdt`` splits embedded columns by sets of levels), the classes are not weighted (``gbdt`` weighs them as
the neural methods' sampler does), and it takes no option (a yardstick is not tuned).
"""

from __future__ import annotations

import numpy as np

from .base import METHODS
from .boosting import TREE_OPTIONS
from .gbdt import GBDT

YARDSTICK = {"trees": 300, "max_depth": 6, "learning_rate": 0.1}


@METHODS.register("xgboost")
class XGBoostCodes(GBDT):
    name, display = "xgboost", "XGBoost (codes)"
    paper = "XGBoost (Chen & Guestrin, KDD 2016), untuned on integer codes: the practitioner's yardstick, not VFL"
    runtime_refusal = "xgboost is the practitioner's yardstick: every block in one place, no parties"
    # its one option: the rounds it stops after on the validation rows, as every tree method (0: all 300 rounds)
    option_specs = tuple(o for o in TREE_OPTIONS if o.name == "early_stop")
    search_space = {}
    assumptions = (
        "XGBoost tree_method=hist, 300 trees, depth 6, eta 0.1, every other parameter XGBoost's default; missing "
        "blocks as NaN (learned default directions); embedded categorical columns as integer codes (code 0, a missing "
        "cell, as NaN); no class weights; one thread",
    )

    @classmethod
    def rounds(cls, options, epochs):
        return YARDSTICK["trees"], "trees (each tree is an epoch to --fail-party)"

    @classmethod
    def loss_refusal(cls, options):
        return "it is the practitioner's yardstick, every block in one place: it has no party to lose"

    def build(self) -> None:
        self.options = {**self.options, **YARDSTICK, "max_bin": 256, "reg_lambda": 1.0, "gamma": 0.0}
        self.options.update(min_child_weight=1.0, binning="library", categorical="codes")  # codes read as numbers
        super().build()

    @classmethod
    def class_weighting(cls, balanced: bool) -> str:
        return "none"  # XGBoost's default, whatever the protocol

    def fit_whole(self, blocks, y, observed, weights, progress):
        return super().fit_whole(blocks, y, observed, np.ones(len(y)), progress)  # unweighted: XGBoost's default
