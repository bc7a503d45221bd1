"""A run per method, as a user starts it: ``vflbench run`` on Credit (4 parties, MCAR 0.5 in training, tested with
every block and under MCAR 0.5), two epochs, one thread; the trees at their defaults (300 trees), SecureBoost in clear
and under Paillier and OU (3 trees at the default depth 6 and the default 112-bit keys, on every training row: the
cost is per tree, docs/SPEED.md, "Encrypted SecureBoost"). Start-up is its own benchmark."""

from __future__ import annotations

import pytest
from conftest import python, vflbench

COMMON = ["--dataset", "credit", "--parties", "4", "--train-missing", "mcar:0.5", "--test-missing", "none,mcar:0.5",
          "--seed", "0", "--quiet", "--out", "out"]  # fmt: skip
NEURAL = ["local", "svfl", "ensemble", "combinatorial", "plug", "laser", "pbm", "false1", "fedhssl"]
SEMI_SUPERVISED = {"false1": ["--labeled", "500", "--aligned", "100"]}  # as in the FALSE-VFL paper


def test_startup_import(measure):
    """What every command pays before it does anything: importing the command line."""
    measure(python("import vflbench.cli"))


def test_startup_one_epoch_run(measure):
    """The smallest whole run: Standard VFL on Credit, one epoch."""
    measure(vflbench("run", "--method", "svfl", "--epochs", "1", *COMMON))


@pytest.mark.parametrize("method", NEURAL)
def test_run_neural(measure, method):
    measure(vflbench("run", "--method", method, "--epochs", "2", *SEMI_SUPERVISED.get(method, []), *COMMON))


@pytest.mark.parametrize("method", ["gbdt", "xgboost", "secureboost"])
def test_run_trees_in_clear(measure, method):
    measure(vflbench("run", "--method", method, *COMMON))


@pytest.mark.parametrize("scheme", ["paillier", "ou"])
def test_run_secureboost_encrypted(measure, scheme):
    opts = ["--method-opt", f"encryption={scheme}", "--method-opt", "trees=3"]
    measure(vflbench("run", "--method", "secureboost", *opts, *COMMON))


def test_run_secureboost_multiclass(measure):
    """SecureBoost's multi-output trees on a wide table: Isolet (617 columns, 26 classes, 4 parties), 3 trees at the
    default 256 bins in clear. Each tree asks for histograms of [nodes, 617, 256, 26] sums and scores every cut of
    every column for all 26 outputs: the cost behind a suite run of SecureBoost on Isolet (docs/SPEED.md)."""
    isolet = ["--dataset", "isolet", "--parties", "4", "--seed", "0", "--quiet", "--out", "out"]
    measure(vflbench("run", "--method", "secureboost", "--method-opt", "trees=3", *isolet))
