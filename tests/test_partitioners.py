import numpy as np
import pytest

from vflbench.core.errors import VFLBenchError
from vflbench.data.partitioners import laser_tiles, make_partition


def rng():
    return np.random.default_rng(0)


def test_contiguous_drops_trailing_features_like_laser_code():
    p = make_partition("contiguous", (23,), 4, rng())
    assert [b.tolist() for b in p.blocks] == [list(range(i * 5, i * 5 + 5)) for i in range(4)]
    assert p.params["dropped"] == [20, 21, 22]


@pytest.mark.parametrize("name", ["random", "importance"])
def test_feature_blocks_are_disjoint_and_deterministic(name):
    a = make_partition(name, (30,), 4, np.random.default_rng(5))
    b = make_partition(name, (30,), 4, np.random.default_rng(5))
    assert [x.tolist() for x in a.blocks] == [x.tolist() for x in b.blocks]
    allf = np.concatenate(a.blocks)
    assert len(allf) == len(set(allf.tolist()))
    if name == "importance":  # covers every feature, every party non-empty
        assert sorted(allf.tolist()) == list(range(30)) and min(a.widths()) >= 1
    else:
        assert len(allf) == 28


def test_importance_alpha_controls_inequality():
    def spread(alpha):
        return np.mean(
            [
                np.std(make_partition("importance", (200,), 4, np.random.default_rng(s), alpha=alpha).widths())
                for s in range(30)
            ]
        )

    assert spread(0.3) > 2 * spread(50.0)


def _cover(tiles, h, w):
    c = np.zeros((h, w), int)
    for r0, r1, c0, c1 in tiles:
        c[r0:r1, c0:c1] += 1
    return c


def test_quadrants_order_tl_tr_bl_br():
    p = make_partition("tiles", (3, 32, 32), 4, rng())
    assert p.blocks == [(0, 16, 0, 16), (0, 16, 16, 32), (16, 32, 0, 16), (16, 32, 16, 32)]


def test_laser_tilings_examples():
    assert laser_tiles(32, 32, 3) == [(0, 16, 0, 16), (0, 16, 16, 32), (16, 32, 0, 32)]
    t9 = laser_tiles(32, 32, 9)
    assert sorted({r1 - r0 for r0, r1, _, _ in t9}) == [10, 11] and len(t9) == 9


@pytest.mark.parametrize("k", range(1, 11))
def test_laser_tiles_cover_every_pixel_once(k):
    tiles = laser_tiles(32, 32, k)
    assert len(tiles) == k and (_cover(tiles, 32, 32) == 1).all()


def test_false_vfl_grid_2x4_of_14x7():
    p = make_partition("grid", (1, 28, 28), 8, rng(), rows=2, cols=4)
    assert all((r1 - r0, c1 - c0) == (14, 7) for r0, r1, c0, c1 in p.blocks)
    assert (_cover(p.blocks, 28, 28) == 1).all()
    x = np.arange(2 * 28 * 28).reshape(2, 1, 28, 28)
    parts = p.split(x)
    assert parts[1].shape == (2, 1, 14, 7) and parts[1][0, 0, 0, 0] == 7


def test_partition_errors():
    with pytest.raises(VFLBenchError, match="tiles"):
        make_partition("contiguous", (1, 28, 28), 4, rng())
    with pytest.raises(VFLBenchError, match="at most"):
        make_partition("contiguous", (3,), 4, rng())
    with pytest.raises(VFLBenchError, match="Unknown partitioner"):
        make_partition("nope", (3,), 1, rng())
    with pytest.raises(VFLBenchError, match="must equal"):
        make_partition("grid", (1, 28, 28), 8, rng(), rows=3, cols=3)
