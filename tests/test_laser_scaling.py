"""LASER-VFL without subset tables: the draws of the former 3^K tables reproduced bit for bit up to K = 12 by
unranking (the combinatorial number system), nested subsets from K = 13 on,
and K up to 64."""

from __future__ import annotations

import math

import pytest
import torch

from vflbench.core.errors import VFLBenchError
from vflbench.methods.laser import (
    MAX_K,
    TABLE_ORDER_K,
    binomials,
    candidates,
    draw_tasks,
    unrank,
)

from .laser_tables import bitmask_members, sample_subsets, slot_tables, subset_table, subset_table_any


def _patterns(k: int) -> torch.Tensor:
    return ((torch.arange(2**k)[:, None] >> torch.arange(k)) & 1).bool()


@pytest.mark.parametrize("k", range(1, 8))
@pytest.mark.parametrize("heads", ["per_party", "one"])
def test_unranking_gives_every_slot_of_the_former_tables(k, heads):
    table, count = subset_table(k) if heads == "per_party" else subset_table_any(k)
    obs = _patterns(k)
    others, take, cnt = candidates(obs, heads)
    cnt = cnt.masked_fill(~obs.any(1)[:, None, None], 0)
    assert torch.equal(cnt, count)
    b, h = count.shape[:2]
    for r in range(table.shape[-1]):
        ok = r < count
        got = unrank(others.expand(b, h, k), take, torch.where(ok, r, 0))
        if heads == "per_party":
            got = got | torch.eye(k, dtype=torch.bool)[None, :, None, :]
        bits = (got.long() << torch.arange(k)).sum(-1)
        assert torch.equal(torch.where(ok, bits, 0), torch.where(ok, table[..., r], 0)), r


@pytest.mark.parametrize("heads", ["per_party", "one", "active"])
@pytest.mark.parametrize("shared", [False, True])
def test_the_draws_are_the_former_samplers_bit_for_bit(heads, shared):
    k = 6
    obs = torch.rand(500, k, generator=torch.Generator().manual_seed(1)) > 0.3
    if shared:
        obs = obs[:1].expand(64, k)
    tables = subset_table_any(k) if heads == "one" else subset_table(k)
    if heads == "active":
        tables = (tables[0][:, :1].contiguous(), tables[1][:, :1].contiguous())
    old = sample_subsets(obs, torch.Generator().manual_seed(7), shared=shared, tables=slot_tables(tables))
    new = draw_tasks(obs, torch.Generator().manual_seed(7), heads, shared=shared)
    assert torch.equal(bitmask_members(old, k), new)


@pytest.mark.parametrize("heads", ["per_party", "one", "active"])
def test_the_slot_cache_of_small_k_draws_what_the_unranking_draws(heads):
    from vflbench.methods.laser import SlotCache

    k = 5
    obs = torch.rand(300, k, generator=torch.Generator().manual_seed(2)) > 0.4
    order = torch.randperm(300, generator=torch.Generator().manual_seed(3))
    member = draw_tasks(obs, torch.Generator().manual_seed(9), heads, order=order)
    size = torch.arange(1, k + 1, dtype=torch.float32)
    cache = SlotCache(k, heads, lambda m: m.float() / size[:, None], torch.device("cpu"))
    agg = cache.draw(obs, torch.Generator().manual_seed(9), order)
    assert torch.equal(agg, member.float() / size[:, None])


def test_independent_draws_stop_at_the_table_order_and_the_largest_count_fits_int64():
    obs = torch.ones(4, TABLE_ORDER_K + 1, dtype=torch.bool)
    with pytest.raises(ValueError, match="nested subsets"):
        draw_tasks(obs, torch.Generator().manual_seed(3), "per_party")
    assert binomials(MAX_K)[MAX_K, MAX_K // 2] == math.comb(64, 32)  # the largest count fits int64


def _laser(k: int, width: int = 2):
    from vflbench.core.rng import Streams
    from vflbench.methods import METHODS, MethodContext
    from vflbench.nn.models import ModelSpec

    ctx = MethodContext(
        k=k, n_classes=2, widths=[width] * k, in_ch=1, model=ModelSpec("mlp", 8, (16,)), device=torch.device("cpu"),
        streams=Streams(0), options={}, positive_class=1,
    )  # fmt: skip
    return METHODS.get("laser")(ctx)


def test_nested_subsets_give_every_size_its_running_mean_and_an_unbiased_weight():
    from vflbench.methods.laser import laser_weights

    k = 16
    m = _laser(k)
    obs = torch.rand(32, k, generator=torch.Generator().manual_seed(0)) > 0.4
    perm = m._nested_orders(obs)  # [B, head, K]
    for b in range(4):
        o = set(torch.nonzero(obs[b]).view(-1).tolist())
        for i in range(k):
            order = perm[b, i].tolist()
            assert order[0] == i  # the head first
            if i in o:
                assert set(order[1 : len(o)]) == o - {i}  # then its other observed blocks
    w = m._weights(obs)
    n = obs.sum(1)
    assert torch.equal(w[0, 0], laser_weights(k)[n[0], 1:] * obs[0, 0])


def test_laser_above_sixty_four_parties_is_refused_and_above_twelve_is_not_packed():
    with pytest.raises(VFLBenchError, match="K <= 64"):
        _laser(65, width=1)
    from vflbench.methods.laser import LaserVFL

    class Run:
        parties = 13

    assert "nested" in LaserVFL.pack_refusal(Run())
    Run.parties = 12
    assert LaserVFL.pack_refusal(Run()) is None


@pytest.mark.slow
def test_laser_trains_at_sixty_four_parties(tmp_path):
    import numpy as np
    import pandas as pd

    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training.pipeline import execute

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1500, 128))
    y = (x[:, :32].sum(1) > 0).astype(int)
    df = pd.DataFrame(x.round(3), columns=[f"x{i}" for i in range(128)])
    df["y"] = y
    df.to_csv(tmp_path / "t.csv", index=False)
    cfg = RunConfig(
        dataset=f"csv:{tmp_path / 't.csv'}", method="laser", data_options={"target": "y"}, hp={"epochs": 1},
        settings={"parties": 64, "train_missing": "mcar:0.3", "test_missing": ["none", "mcar:0.5"]},
    )  # fmt: skip
    rows, manifest = execute(resolve(cfg), device="cpu")[:2]
    assert manifest["parameters"]["total"] > 0 and all(np.isfinite(r["value"]) for r in rows)


@pytest.mark.parametrize("k", [4, 13, 64])
def test_per_sample_loss_weights_make_every_sample_weigh_one_and_the_bar_shows_a_cross_entropy(k):
    """The paper's weights C(|O|-1, s-1)/s sum to 2^|O| - 1 per sample (every subset of O once), 1e19 at K = 64;
    loss_weights=per_sample divides them by that sum. The progress bar's loss is their weighted mean of the task
    cross-entropies, whatever the weights' scale."""
    from vflbench.methods.base import Batch

    torch.manual_seed(0)
    obs = torch.rand(64, k) < 0.7
    obs[0] = True  # one sample with every block
    obs[1] = False  # one with none
    paper = _laser(k)
    w = paper._weights(obs)
    n_obs = obs.sum(1).double()
    expected = torch.where(n_obs > 0, 2.0**n_obs - 1, torch.zeros_like(n_obs))
    assert torch.allclose(w.double().sum((1, 2)), expected, rtol=1e-5)
    norm = _laser(k)
    norm.options["loss_weights"] = "per_sample"
    norm.per_sample = True
    wn = norm._weights(obs)
    assert torch.allclose(wn.sum((1, 2)), (n_obs > 0).float(), atol=1e-5)
    assert torch.allclose(wn[n_obs > 0], (w / w.sum((1, 2), keepdim=True))[n_obs > 0], rtol=1e-5)
    # the bar: the paper's loss sum(ce * w) / count, shown as sum(ce * w) / sum(w): a constant task loss reads as itself
    batch = Batch(blocks=None, obs=obs, y=torch.zeros(64, dtype=torch.long), idx=torch.arange(64), number=0)
    count = int(obs.any(1).sum())
    value = float((0.7 * w.double()).sum() / count)
    assert paper.display_loss(batch, value) == pytest.approx(0.7, rel=1e-5)
    assert norm.display_loss(batch, 0.7) == 0.7
