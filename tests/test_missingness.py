import numpy as np
import pytest

from vflbench.core.errors import VFLBenchError
from vflbench.data.missingness import (
    _visit_order,
    apply_aligned_reserve,
    generate_masks,
    labeled_split,
    mask_stats,
    parse_mechanism,
)

N = 200_000


def tol(p, n=N):  # 5 standard errors of a Bernoulli mean
    return 5 * np.sqrt(p * (1 - p) / n) + 1e-12


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9])
def test_mcar_uniform_rates_and_full_observation(p):
    m = generate_masks(f"mcar:{p}", N, 4, np.random.default_rng(1)).observed
    assert m.shape == (N, 4) and m.dtype == bool
    assert np.all(np.abs(m.mean(0) - (1 - p)) < tol(1 - p))
    full = (1 - p) ** 4
    assert abs(m.all(1).mean() - full) < tol(full)
    # independence between blocks: P(0 and 1 observed) = q^2
    assert abs((m[:, 0] & m[:, 1]).mean() - (1 - p) ** 2) < tol((1 - p) ** 2)


def test_mcar_per_block():
    ps = [0.1, 0.2, 0.5, 0.0]
    m = generate_masks("mcar:0.1,0.2,0.5,0.0", N, 4, np.random.default_rng(2)).observed
    for k, p in enumerate(ps):
        assert abs(m[:, k].mean() - (1 - p)) < tol(1 - p)
    with pytest.raises(VFLBenchError, match="4 parties"):
        generate_masks("mcar:0.1,0.2", 10, 4, np.random.default_rng(0))


@pytest.mark.parametrize("a,b", [(2.0, 2.0), (2.0, 5.0)])
def test_mcar_beta_draws_once_per_block_with_beta_mean(a, b):
    draws = []
    for s in range(400):
        res = generate_masks(f"mcar-beta:{a},{b}", 2000, 4, np.random.default_rng(s))
        p = np.asarray(res.info["p_miss_per_block"])
        draws.append(p)
        if s < 5:  # realised per-block rates follow the drawn p
            assert np.all(np.abs(res.observed.mean(0) - (1 - p)) < 5 * np.sqrt(0.25 / 2000))
    draws = np.concatenate(draws)
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    assert abs(draws.mean() - mean) < 5 * np.sqrt(var / len(draws))
    assert abs(draws.var() - var) < 0.2 * var


def test_mnar_depends_on_sign_of_block_mean():
    rng = np.random.default_rng(3)
    mean = rng.standard_normal((N, 8))
    m = generate_masks(
        "mnar:0.7", N, 8, np.random.default_rng(4), block_mean=mean, block_var=np.ones_like(mean)
    ).observed
    neg, pos = mean < 0, mean >= 0
    assert abs((~m[neg]).mean() - 0.7) < tol(0.7, neg.sum())
    assert abs((~m[pos]).mean() - 0.3) < tol(0.3, pos.sum())


def _mar_reference(var_row, order, kind):
    """A literal per-sample transcription of FALSE-VFL Algorithms 1 and 2."""
    observed = set()
    T, B = (1.1, None) if kind == "mar1" else (0.5, 0.7)
    for k in order:
        observed.add(k)
        v = var_row[k]
        if kind == "mar1":
            if v > T:
                break
        else:
            if v > T:
                B = B - (v - T)
            if B <= 0:
                break
        T = T - 0.15
    return [k in observed for k in range(len(var_row))]


@pytest.mark.parametrize("kind", ["mar1", "mar2"])
def test_mar_matches_the_algorithm_and_always_observes_a_block(kind):
    n, k = 3000, 8
    var = np.random.default_rng(5).gamma(1.0, 0.6, size=(n, k))
    mean = np.zeros_like(var)
    m = generate_masks(kind, n, k, np.random.default_rng(6), block_mean=mean, block_var=var).observed
    order = _visit_order(n, k, np.random.default_rng(6))  # the mechanism's first draw
    ref = np.array([_mar_reference(var[i], order[i], kind) for i in range(n)])
    assert np.array_equal(m, ref)
    assert m.any(1).all()
    assert 0.05 < m.mean() < 0.95  # neither trivial regime


def test_mar_high_variance_first_piece_stops_immediately():
    var = np.full((50, 4), 5.0)
    m = generate_masks("mar1", 50, 4, np.random.default_rng(0), block_mean=var * 0, block_var=var).observed
    assert np.all(m.sum(1) == 1)


def test_per_batch_patterns_constant_within_batch():
    res = generate_masks("mcar:0.5", 1000, 4, np.random.default_rng(7), granularity="batch", batch_size=128)
    obs = res.observed
    assert obs.shape == (1000, 4)
    for start in range(0, 1000, 128):
        block = obs[start : start + 128]
        assert (block == block[0]).all()
    patterns = {tuple(obs[s]) for s in range(0, 1000, 128)}
    assert len(patterns) > 1


def test_per_batch_rejects_data_dependent_mechanisms():
    with pytest.raises(VFLBenchError, match="per batch"):
        generate_masks(
            "mar1",
            100,
            4,
            np.random.default_rng(0),
            block_mean=np.zeros((100, 4)),
            block_var=np.ones((100, 4)),
            granularity="batch",
            batch_size=10,
        )


def test_all_missing_keep_vs_resample():
    keep = generate_masks("mcar:0.5", 50_000, 4, np.random.default_rng(8))
    assert (~keep.observed.any(1)).sum() > 0 and keep.info["resampled"] == 0
    res = generate_masks("mcar:0.5", 50_000, 4, np.random.default_rng(8), all_missing="resample")
    assert res.observed.any(1).all()
    assert res.info["resampled"] >= (~keep.observed.any(1)).sum()


@pytest.mark.parametrize(
    "spec", ["mcar:1.5", "mcar:-0.1", "mcar", "bogus:1", "mnar", "mcar-beta:0,2", "mcar:x", "none:3"]
)
def test_bad_specs_are_clear_errors(spec):
    with pytest.raises(VFLBenchError):
        parse_mechanism(spec)


def test_labeled_split_and_aligned_reserve():
    lab, res = labeled_split(1000, 500, 100, np.random.default_rng(0))
    assert len(lab) == 500 and len(set(lab)) == 500 and set(res) <= set(lab) and len(res) == 100
    obs = generate_masks("mcar:0.9", 1000, 8, np.random.default_rng(1)).observed
    out = apply_aligned_reserve(obs, res)
    assert out[res].all() and np.array_equal(np.delete(out, res, 0), np.delete(obs, res, 0))
    with pytest.raises(VFLBenchError):
        labeled_split(10, 20, 1, np.random.default_rng(0))


def test_mask_stats_counts_patterns():
    obs = np.array([[1, 1], [1, 0], [1, 1], [0, 0]], dtype=bool)
    s = mask_stats(obs)
    assert s["fully_observed_fraction"] == 0.5 and s["all_missing_count"] == 1
    assert s["top_patterns"][0] == {"pattern": "11", "count": 2, "fraction": 0.5}
