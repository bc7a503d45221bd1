"""Partitioners and missingness mechanisms at K = 64, and the refusal of more parties than features (docs/SCALING.md,
"Partitioners and missingness at many parties")."""

from types import SimpleNamespace

import numpy as np
import pytest

from vflbench.core.errors import VFLBenchError
from vflbench.data.missingness import generate_masks
from vflbench.data.partitioners import make_partition

from .conftest import needs_mirror

K = 64


@pytest.mark.parametrize("d", [617, 128, 64])
@pytest.mark.parametrize("name", ["contiguous", "random", "importance", "correlation"])
def test_every_feature_partitioner_gives_64_disjoint_nonempty_blocks(name, d):
    x = np.random.default_rng(0).standard_normal((500, d)).astype(np.float32)
    kwargs = {"data": SimpleNamespace(x_train=x)} if name == "correlation" else {}
    p = make_partition(name, (d,), K, np.random.default_rng(1), **kwargs)
    assert len(p.blocks) == K and min(p.widths()) >= 1
    allf = np.concatenate(p.blocks)
    assert len(allf) == len(set(allf.tolist()))
    assert len(allf) >= d - (K - 1)  # contiguous and random drop at most D mod K features


@pytest.mark.parametrize("name", ["contiguous", "random", "importance"])
def test_more_parties_than_features_is_refused_with_the_limit(name):
    with pytest.raises(VFLBenchError, match="use at most 23 parties"):
        make_partition(name, (23,), 30, np.random.default_rng(0))


def _block_stats(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, K)) * 0.3, rng.gamma(2.0, 0.5, size=(n, K))


def test_mcar_and_mnar_rates_do_not_depend_on_k():
    n = 20_000
    mean, var = _block_stats(n)
    m = generate_masks("mcar:0.3", n, K, np.random.default_rng(1)).observed
    assert m.shape == (n, K) and abs(m.mean() - 0.7) < 0.005
    assert m.all(1).sum() == 0  # 0.7^64: no sample observes every block (Standard VFL trains on none)
    m = generate_masks("mnar:0.7", n, K, np.random.default_rng(2), block_mean=mean, block_var=var).observed
    assert abs((~m[mean < 0]).mean() - 0.7) < 0.005 and abs((~m[mean >= 0]).mean() - 0.3) < 0.005


@pytest.mark.parametrize("kind, t0, delta", [("mar1", 1.1, 0.15), ("mar2", 0.5, 0.15)])
def test_mar_with_the_papers_constants_observes_a_bounded_number_of_blocks(kind, t0, delta):
    """The threshold falls by delta a visited block, so from visit ceil(t0 / delta) + 1 on it is negative and the
    first block with any variance stops the visit (MAR1), or the budget is spent by then (MAR2): at most 9 (MAR1) or 7
    (MAR2) blocks, whatever K."""
    n = 5000
    mean, var = _block_stats(n)
    m = generate_masks(kind, n, K, np.random.default_rng(3), block_mean=mean, block_var=var).observed
    thresholds = t0 - delta * np.arange(K)
    if kind == "mar1":  # the first visit with a negative threshold stops
        cap = int(np.argmax(thresholds < 0)) + 1
    else:  # even zero variances spend max(0, -threshold) of the budget 0.7
        cap = int(np.argmax(np.cumsum(np.maximum(0.0, -thresholds)) >= 0.7)) + 1
    assert cap == (9 if kind == "mar1" else 7)
    assert m.any(1).all() and m.sum(1).max() <= cap
    assert m.mean() < cap / K
    # with delta scaled by 4 / K (the paper's tables have 4 parties) more blocks are observed
    scaled = f"{kind}:{t0},{delta * 4 / K}" if kind == "mar1" else f"{kind}:{t0},0.7,{delta * 4 / K}"
    wide = generate_masks(scaled, n, K, np.random.default_rng(3), block_mean=mean, block_var=var).observed
    assert wide.sum(1).mean() > m.sum(1).mean()


@needs_mirror
def test_cli_refuses_more_parties_than_features_and_writes_nothing(tmp_path):
    from typer.testing import CliRunner

    from vflbench.cli.app import app

    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", "--dataset", "credit", "--method", "svfl", "--parties", "30", "--epochs",
                                   "1", "--out", str(out)])  # fmt: skip
    assert res.exit_code == 2
    assert "Cannot split 23 features into 30 parties; use at most 23 parties." in res.output
    assert not out.exists()
