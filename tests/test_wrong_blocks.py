"""Blocks that are present but wrong (vflbench.data.wrong_blocks) and screening them as missing
(vflbench.training.screening): the rows and parties follow the spec, the values move as the spec says, a misaligned
block is a real block of another row, every method and both runtimes see the same wrong blocks, and screening at its
two extreme thresholds equals the plain run and the run with those blocks missing."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.core.errors import VFLBenchError
from vflbench.data.partitioners import Partition
from vflbench.data.wrong_blocks import (
    SEVERITY_SCALE,
    apply_wrong,
    corrupt_spec,
    draw_affected,
    misalign_spec,
    wrong_settings,
)

from .conftest import needs_mirror

runner = CliRunner()


def _partition(k=4, w=5):
    return Partition("features", [np.arange(j * w, (j + 1) * w) for j in range(k)], "contiguous")


def _apply(x, corrupt="none", misalign="none", seed=0, part=None, codes=frozenset()):
    part = part or _partition()
    return apply_wrong(
        x, part, corrupt_spec(corrupt), misalign_spec(misalign), np.random.default_rng(seed),
        np.random.default_rng(seed + 1), x.std(0), x, codes,
    )  # fmt: skip


# ----------------------------------------------------------------------------- which rows and parties


@pytest.mark.parametrize("rate", [0.0, 0.05, 0.3, 1.0])
def test_each_eligible_party_has_exactly_the_rate_of_rows_and_the_label_party_none(rate):
    a = draw_affected(corrupt_spec(f"gauss:{rate}:3"), 10_000, 4, np.random.default_rng(1))
    assert a[:, 0].sum() == 0  # the label party: never unless named
    assert (a[:, 1:].sum(0) == round(rate * 10_000)).all()
    if 0 < rate < 1:  # drawn independently per party: the overlap of two parties is the product of their rates
        both = (a[:, 1] & a[:, 2]).mean()
        assert abs(both - rate**2) < 4 * np.sqrt(rate**2 * (1 - rate**2) / 10_000)


def test_at_any_affects_the_rate_of_rows_once_each_spread_evenly_over_the_parties_and_at_names_them():
    n = 30_000
    a = draw_affected(corrupt_spec("stuck:0.4@any"), n, 4, np.random.default_rng(2))
    assert a.sum() == a.any(1).sum() == round(0.4 * n)  # one party a row
    counts = a.sum(0)[1:]
    expected = round(0.4 * n) / 3
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert counts.sum() == round(0.4 * n) and a[:, 0].sum() == 0 and chi2 < 13.8  # chi2(2 dof) p = 0.001
    named = draw_affected(corrupt_spec("stuck:0.25@0+2"), 1000, 4, np.random.default_rng(3))
    assert named.sum(0).tolist() == [250, 0, 250, 0]


def test_the_same_seed_draws_the_same_rows_and_values_and_another_seed_others():
    x = np.random.default_rng(0).standard_normal((500, 20)).astype(np.float32)
    a1, w1 = _apply(x, "gauss:0.3:2", "permute:0.3", seed=5)
    a2, w2 = _apply(x, "gauss:0.3:2", "permute:0.3", seed=5)
    a3, w3 = _apply(x, "gauss:0.3:2", "permute:0.3", seed=6)
    assert np.array_equal(a1, a2) and np.array_equal(w1.affected, w2.affected)
    assert not np.array_equal(w1.affected, w3.affected)


# ----------------------------------------------------------------------------- what the values become


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_gaussian_corruption_moves_each_feature_by_its_severity_times_its_training_spread(severity):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((40_000, 20)) * np.linspace(0.5, 4, 20)).astype(np.float32)
    out, w = _apply(x, f"gauss:0.5:{severity}")
    diff = (out - x).astype(np.float64)
    for p in range(4):
        cols = np.arange(p * 5, (p + 1) * 5)
        rows = w.corrupted[:, p]
        assert not diff[~rows][:, cols].any()  # a block not drawn is untouched
        if p == 0:
            assert not rows.any()
            continue
        ratio = diff[rows][:, cols].std(0) / x[:, cols].std(0)
        np.testing.assert_allclose(ratio, SEVERITY_SCALE[severity - 1], rtol=0.03)
        assert abs(diff[rows][:, cols].mean()) < 0.02 * x[:, cols].std()  # noise, not a shift


def test_scale_multiplies_stuck_freezes_and_codes_keep_their_code():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2000, 20)).astype(np.float32)
    x[:, 7] = rng.integers(0, 9, 2000)  # a categorical code in party 1's block
    out, w = _apply(x, "scale:0.2:10", codes={7})
    r = w.corrupted[:, 1]
    np.testing.assert_array_equal(out[r][:, [5, 6, 8, 9]], x[r][:, [5, 6, 8, 9]] * 10)
    np.testing.assert_array_equal(out[:, 7], x[:, 7])  # a code is a name: not scaled
    out, w = _apply(x, "stuck:0.2")
    for p in (1, 2, 3):
        block = out[w.corrupted[:, p]][:, p * 5 : (p + 1) * 5]
        assert (block == block[0]).all()  # one value over every affected row
        assert (x[:, p * 5 : (p + 1) * 5] == block[0]).all(1).any()  # a value the feature once read: a training row


def test_a_misaligned_block_is_the_real_block_of_another_row_and_permute_is_a_derangement_of_the_affected_rows():
    x = np.random.default_rng(2).standard_normal((3000, 20)).astype(np.float32)
    out, w = _apply(x, misalign="permute:0.4")
    for p in range(4):
        rows = np.flatnonzero(w.misaligned[:, p])
        cols = np.arange(p * 5, (p + 1) * 5)
        src = w.source[rows, p]
        assert (src != rows).all()  # no row keeps its own
        assert sorted(src.tolist()) == rows.tolist()  # among the affected rows, each block once
        np.testing.assert_array_equal(out[np.ix_(rows, cols)], x[np.ix_(src, cols)])
        keep = np.setdiff1d(np.arange(3000), rows)
        np.testing.assert_array_equal(out[np.ix_(keep, cols)], x[np.ix_(keep, cols)])
    assert not w.misaligned[:, 0].any() and w.misaligned[:, 1:].sum(0).tolist() == [1200] * 3


def test_a_near_miss_takes_the_block_of_another_row_with_the_same_key():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4000, 20)).astype(np.float32)
    for p in range(4):  # each party's coarse attribute: a birth year (60 values) in its block's second column
        x[:, 5 * p + 1] = rng.integers(1940, 2000, 4000)
    out, w = _apply(x, misalign="near:0.25")
    assert {p: v["column"] for p, v in w.info["near_key"].items()} == {1: 6, 2: 11, 3: 16}
    for p in (1, 2, 3):
        rows = np.flatnonzero(w.misaligned[:, p])
        src, year, cols = w.source[rows, p], 5 * p + 1, np.arange(p * 5, p * 5 + 5)
        assert (src != rows).all() and (x[src, year] == x[rows, year]).all()  # another row, the same year
        np.testing.assert_array_equal(out[np.ix_(rows, cols)], x[np.ix_(src, cols)])


# ----------------------------------------------------------------------------- specs and bad input


def test_specs_are_canonical_and_bad_ones_name_the_fix():
    assert corrupt_spec("GAUSS:0.50:3") == "gauss:0.5:3" and corrupt_spec("stuck:.2@any") == "stuck:0.2@any"
    assert misalign_spec("permute:0.5@3+1") == "permute:0.5@1+3"
    assert wrong_settings("none,gauss:0.5:3", "corrupt") == ("none", "gauss:0.5:3")
    for bad, words in [
        ("blur:0.5", "Unknown corrupt kind"),
        ("gauss:1.5:3", "outside [0, 1]"),
        ("gauss:0.5:6", "severity 6 is not one of"),
        ("gauss:0.5", "write gauss:RATE:SEVERITY"),
        ("permute:0.5", "is a misalign kind"),
        ("scale:0.2:1", "other than 1"),
    ]:
        with pytest.raises(VFLBenchError, match=words.replace("[", r"\[").replace("]", r"\]")):
            corrupt_spec(bad)
    with pytest.raises(VFLBenchError, match="more than once"):
        wrong_settings("none,none", "misalign")


@needs_mirror
def test_bad_wrong_block_flags_get_one_line_and_exit_2_with_nothing_written(tmp_path):
    base = ["run", "--dataset", "credit", "--method", "local", "--epochs", "1", "--quiet", "--out", str(tmp_path / "o")]
    for extra, words in [
        (["--test-corrupt", "blur:0.5"], "Unknown corrupt kind 'blur'"),
        (["--test-corrupt", "gauss:1.2:3"], "outside [0, 1]"),
        (["--train-corrupt", "gauss:0.2:0"], "severity 0 is not one of 1, 2, 3, 4, 5"),
        (["--test-misalign", "permute:0.5", "--parties", "1"], "misalignment needs two or more parties"),
        (["--screen", "magic"], "Unknown --screen score"),
    ]:
        r = runner.invoke(app, [*base, *extra])
        assert r.exit_code == 2, (extra, r.output)
        assert words in r.output and len(r.output.strip().splitlines()) == 1, r.output
    r = runner.invoke(app, [*base, "--method", "pbm", "--screen", "cross"])  # its own mechanism releases the reps
    assert r.exit_code == 2 and "own privacy mechanism" in r.output and len(r.output.strip().splitlines()) == 1
    r = runner.invoke(app, [*base, "--mechanism", "ldp:sigma=1", "--method", "laser", "--screen", "auto"])
    assert r.exit_code == 2 and "with --mechanism use --screen density" in r.output
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- runs


def _run(tmp_path, name, *flags, method="laser", epochs="3"):
    r = runner.invoke(
        app,
        ["run", "--dataset", "credit", "--method", method, "--parties", "4", "--epochs", epochs, "--train-samples",
         "3000", "--seed", "0", "--quiet", "--out", str(tmp_path / name), *flags],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    (d,) = list((tmp_path / name).iterdir())
    return pd.read_csv(d / "results.csv", keep_default_na=False, na_values=[""]), json.loads(
        (d / "manifest.json").read_text()
    )


@needs_mirror
def test_every_method_sees_the_same_wrong_blocks_and_a_run_has_one_row_per_test_setting(tmp_path):
    flags = ["--test-corrupt", "none,gauss:0.5:3", "--test-misalign", "permute:0.5"]
    laser, ml = _run(tmp_path, "laser", *flags)
    local, mo = _run(tmp_path, "local", *flags, method="local")
    settings = laser[["test_missing", "test_corrupt", "test_misalign"]].drop_duplicates()
    assert len(settings) == 3 * 2 * 1  # every --test-missing x corrupt x misalign
    for key in ml["masks"]:
        if "|" in key:
            for rate in ("corrupted_rate_per_block", "misaligned_rate_per_block", "wrong_observed_rate_per_block"):
                assert ml["masks"][key][rate] == mo["masks"][key][rate], (key, rate)
    streams = {k: v for k, v in ml["seeds"]["streams"].items() if k.startswith("wrong/")}
    assert streams and all(mo["seeds"]["streams"][k] == v for k, v in streams.items())
    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.inputs import prepare

    def inputs(method):
        cfg = RunConfig(dataset="credit", method=method)
        cfg.settings.update(
            {
                "parties": 4,
                "seed": 0,
                "test_corrupt": "gauss:0.5:3",
                "test_misalign": "permute:0.5",
                "train_samples": 3000,
            }
        )
        return prepare(resolve(cfg), "cpu")

    a, b = inputs("laser"), inputs("combinatorial")
    ((key, (da, wa)),) = a.test_wrong.items()
    db, wb = b.test_wrong[key]
    assert np.array_equal(da.x.numpy(), db.x.numpy()) and np.array_equal(wa.source, wb.source)
    clean = a.test.x.numpy()
    moved = (da.x.numpy() != clean).any(2).T  # [n, K]: the blocks that differ from the clean ones
    assert not (moved & ~wa.affected).any()  # only the drawn blocks differ from the clean test blocks
    assert moved[wa.corrupted].all() and moved[wa.misaligned].mean() > 0.8  # (two rows may hold equal blocks)


@needs_mirror
def test_screening_that_flags_nothing_is_the_plain_run_and_flagging_everything_is_the_block_missing(tmp_path):
    """FPR 0 puts every threshold at +inf: the screened rows equal the plain ones bit for bit; FPR 1 flags every
    block of party 2 that has a score (density: every observed one), which is the run with party 2's block missing
    at test (mcar:0,0,1,0), bit for bit."""
    nothing, _ = _run(tmp_path, "nothing", "--screen", "auto:0", "--test-corrupt", "none,gauss:0.5:3")
    for metric in ("accuracy", "f1", "auprc"):
        plain = nothing[nothing["metric"] == metric]["value"].to_numpy()
        screened = nothing[nothing["metric"] == f"{metric}@screen"]["value"].to_numpy()
        np.testing.assert_array_equal(plain, screened)
    assert (nothing[nothing["metric"] == "screen_flagged"]["value"] == 0).all()
    every, man = _run(tmp_path, "every", "--screen", "density:1@2", "--test-missing", "none")
    missing, _ = _run(tmp_path, "missing", "--test-missing", "mcar:0,0,1,0")
    assert man["screen"]["parties"] == [2] and man["screen"]["score"] == "density"
    for metric in ("accuracy", "f1", "auprc"):
        assert (
            every[every["metric"] == f"{metric}@screen"]["value"].item()
            == missing[missing["metric"] == metric]["value"].item()
        )
    assert every[every["metric"] == "screen_flagged"]["value"].item() == 100.0
    plain_every = every[every["metric"] == "auprc"]["value"].item()
    plain, _ = _run(tmp_path, "plain", "--test-missing", "none")
    assert plain_every == plain[plain["metric"] == "auprc"]["value"].item()  # --screen leaves the plain rows alone


def test_the_scores_find_blatant_wrong_blocks_on_a_built_table():
    """An independent check of the detection figure: four parties that each hold a noisy copy of one latent vector;
    a block scaled by 10 (density) or, one a row, taken from another row (cross) is found with AUROC near 1, a clean
    run's AUROC is undefined (NaN) and 5% of clean blocks are flagged at FPR 0.05."""
    import torch

    from vflbench.runs.settings.wrong import ScreenSpec
    from vflbench.training.screening import Screen, detection
    from vflbench.training.train_set import BlockData

    class Blocks:  # the screen reads a method's representations: here each party's block itself
        k, display, local_only = 4, "built", False
        store = type("S", (), {"training": False, "begin": lambda self: None})()

        def train(self, mode):
            pass

        def party_representations(self, blocks, obs):
            return blocks

    rng = np.random.default_rng(0)
    latent = rng.standard_normal((6000, 3))
    x = np.concatenate(
        [latent @ rng.standard_normal((3, 5)) + 0.1 * rng.standard_normal((6000, 5)) for _ in range(4)], 1
    )
    part = _partition()
    train, test = x[:4000].astype(np.float32), x[4000:].astype(np.float32)
    obs = np.ones((2000, 4), bool)
    for spec, corrupt, misalign in [("density", "scale:0.3:10", "none"), ("cross", "none", "permute:0.3@any")]:
        wrong, w = _apply(test, corrupt, misalign, part=part)
        s = Screen(ScreenSpec(spec), 4, 512)
        tr = BlockData(train, part, torch.device("cpu"))
        s.fit(Blocks(), tr, np.ones((4000, 4), bool), None, None, np.random.default_rng(1))
        z = s.features(Blocks(), BlockData(wrong, part, torch.device("cpu")))
        sc = s.scores_of(z, obs)
        det = detection(*s.flag(sc, obs, z)[::-1], w.affected, obs, s.parties)
        assert det["screen_auroc"] > 99.0, (spec, det)
        zc = s.features(Blocks(), BlockData(test, part, torch.device("cpu")))
        sc = s.scores_of(zc, obs)
        clean = detection(*s.flag(sc, obs, zc)[::-1], np.zeros_like(obs), obs, s.parties)
        assert np.isnan(clean["screen_auroc"]) and 3.0 < clean["screen_flagged"] < 7.0, (spec, clean)


@needs_mirror
def test_masks_shows_the_wrong_blocks_a_run_draws(tmp_path):
    r = runner.invoke(app, ["masks", "--dataset", "credit", "--split", "test", "--missing", "none", "--corrupt",
                            "gauss:0.5:3", "--misalign", "permute:0.5", "--format", "json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    w = json.loads(r.output)["wrong"]
    assert w["corrupted_rate_per_block"] == [0.0, 0.5, 0.5, 0.5] and w["misaligned_rate_per_block"] == [
        0,
        0.5,
        0.5,
        0.5,
    ]
    _, man = _run(tmp_path, "run", "--test-missing", "none", "--test-corrupt", "gauss:0.5:3", "--test-misalign",
                  "permute:0.5", method="local", epochs="1")  # fmt: skip
    rec = man["masks"]["test/none | gauss:0.5:3 | permute:0.5"]
    assert rec["corrupted_rate_per_block"] == w["corrupted_rate_per_block"]
    assert rec["wrong_observed_rate_per_block"] == w["wrong_and_observed_rate_per_block"]


@needs_mirror
@pytest.mark.integration
def test_wrong_blocks_across_processes_give_the_rows_of_one_process(tmp_path):
    """Every process prepares the run the same way: the party processes hold the same wrong blocks (training and
    test) as one process, and the rows are equal."""
    flags = ["--train-corrupt", "gauss:0.2:3", "--train-misalign", "permute:0.1", "--test-corrupt", "none,stuck:0.5",
             "--test-misalign", "near:0.2", "--test-missing", "none,mcar:0.5", "--epochs", "2"]  # fmt: skip
    one, _ = _run(tmp_path, "one", *flags, method="svfl")
    many, man = _run(tmp_path, "many", *flags, "--runtime", "processes", method="svfl")
    assert man["runtime"]["measured_equals_accounted"]
    pd.testing.assert_frame_equal(one, many[one.columns])


def test_specs_survive_pickling_into_a_sweeps_worker_processes():
    import pickle

    from vflbench.runs.settings.wrong import ScreenSpec

    for spec in (corrupt_spec("gauss:0.5:3@any"), misalign_spec("near:0.1@1+2"), ScreenSpec("cross:0.1@2")):
        back = pickle.loads(pickle.dumps(spec))
        assert back == spec and back.__dict__ == spec.__dict__ and type(back) is type(spec)


def test_the_robustness_reports_degradation_is_the_median_drop_and_tests_each_method_against_the_most_graceful():
    """results/robustness question 3 on a hand-built case: per method the median over tables of the drop from every
    block to each wrong kind at 0.5, the mean of the three, and a Wilcoxon signed-rank test over tables of each
    method's per-table mean drop against the most graceful method: six tables on which b always loses 2 points more
    than a give the exact two-sided p of six positive differences, 2 / 2^6; beside the drops, each method's level with
    every block (median score over tables, mean rank)."""
    import pandas as pd

    from vflbench.studies.robustness import _degradation

    rows = []
    for t in range(6):
        for m, drop in (("a", 1.0), ("b", 3.0)):
            base = 70.0 + t + (m == "b")  # b starts a point higher on every table, and drops further
            for test, v in (("none", base), ("mcar:0.5", base - drop), ("gauss:0.5:3", base - drop),
                            ("permute:0.5", base - drop)):  # fmt: skip
                rows.append(dict(dataset=f"t{t}", method=m, train_missing="none", test_missing=test, value=v, seed=0))
    lines = _degradation(pd.DataFrame(rows), "none")
    assert "against a" in lines[0]
    a, b = (ln.split(" | ") for ln in lines[2:4])
    # the level with every block: a starts at 70 + t (median 72.5 over the six tables), second on each; b a point higher
    assert a[0] == "| a" and [float(x) for x in a[1:3]] == [72.5, 2.0] and [float(x) for x in a[3:7]] == [1.0] * 4
    assert a[7] == "- |"
    assert b[0] == "| b" and [float(x) for x in b[1:3]] == [73.5, 1.0] and [float(x) for x in b[3:7]] == [3.0] * 4
    assert float(b[7].rstrip(" |")) == pytest.approx(2 / 2**6, abs=5e-4)  # printed to 2 significant digits


def test_the_robustness_report_joins_a_companion_sweep_to_its_base_section():
    """`clean-false1` (a method whose options re-key its runs) is ranked in `clean`'s section, after `clean`, and a
    folder with no dash is a section of its own."""
    from pathlib import Path

    from vflbench.studies.robustness import companions

    subs = [Path("r/trained-false1"), Path("r/clean-false1"), Path("r/trained"), Path("r/clean"), Path("r/clean-a")]
    got = {k: [p.name for p in v] for k, v in companions(subs).items()}
    assert got == {"clean": ["clean", "clean-a", "clean-false1"], "trained": ["trained", "trained-false1"]}
