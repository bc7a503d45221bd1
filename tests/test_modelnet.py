"""ModelNet10 multi-view loader, on small render trees in the official layout that the tests write
(each view a flat image whose grey level encodes class, object and view, so every party's tile can
be checked after resizing)."""

from __future__ import annotations

import tarfile

import numpy as np
import pytest
from PIL import Image

from vflbench.core.errors import VFLBenchError
from vflbench.data.datasets import load_dataset
from vflbench.data.datasets.modelnet import CLASSES
from vflbench.data.partitioners import make_partition

N_TRAIN, N_TEST = 2, 1


def level(label: int, obj: int, view: int) -> int:
    return 20 * (view - 1) + 2 * label + obj  # distinct per (class, object, view); < 256


def write_renders(root, scheme="shaded", skip_view=None):
    for label, cls in enumerate(CLASSES):
        for split, n in (("train", N_TRAIN), ("test", N_TEST)):
            d = root / cls / split
            d.mkdir(parents=True, exist_ok=True)
            for obj in range(n):
                for view in range(1, 13):
                    if (label, split, obj, view) == skip_view:
                        continue
                    name = (
                        f"{cls}_{obj + 1:04d}.obj.shaded_v{view:03d}.png"
                        if scheme == "shaded"
                        else f"{cls}_{obj + 1:04d}_{view:03d}.jpg"
                    )
                    Image.fromarray(np.full((40, 40), level(label, obj, view), np.uint8)).save(d / name, quality=100)


@pytest.mark.parametrize("scheme", ["shaded", "v1"])
def test_pairs_layout_gives_each_party_one_view_of_its_pair(tmp_data, scheme):
    write_renders(tmp_data / "modelnet10" / "modelnet40_images_new_12x", scheme)
    ds = load_dataset("modelnet10", {"size": 8, "normalize": "none"})
    assert ds.x_train.shape == (10 * N_TRAIN * 6, 1, 16, 24) and ds.x_test.shape == (
        10 * N_TEST * 2,
        1,
        16,
        24,
    )  # 6 / 2 draws
    assert np.bincount(ds.y_train).tolist() == [N_TRAIN * 6] * 10
    part = make_partition("tiles", ds.x_train.shape[1:], 6, np.random.default_rng(0))
    tiles = part.split(ds.x_train)
    seen = set()
    for p, t in enumerate(tiles):
        assert t.shape[1:] == (1, 8, 8)
        lv = np.round(t.reshape(len(t), -1) * 255)
        assert (lv == lv[:, :1]).all()  # each tile is exactly one view
        views = (lv[:, 0].astype(int) // 20) + 1
        assert set(views) <= {2 * p + 1, 2 * p + 2}  # the party's adjacent pair
        seen |= set(views)
        assert np.all((lv[:, 0].astype(int) % 20) // 2 == ds.y_train)  # the tile belongs to the sample's own object
    assert seen == set(range(1, 13))  # both views of each pair are drawn
    again = load_dataset("modelnet10", {"size": 8, "normalize": "none"})  # from the cache, same draws
    assert np.array_equal(again.x_train, ds.x_train) and (tmp_data / "modelnet10" / "views8.npz").exists()


def test_pair_both_and_single_layouts(tmp_data):
    write_renders(tmp_data / "modelnet10")
    both = load_dataset("modelnet10", {"size": 8, "normalize": "none", "layout": "pair-both"})
    assert both.x_train.shape == (10 * N_TRAIN, 1, 16, 48)
    part = make_partition("tiles", both.x_train.shape[1:], 6, np.random.default_rng(0))
    t = np.round(part.split(both.x_test)[2][0, 0] * 255).astype(int)  # party 2 holds views 5 and 6 side by side
    assert (t[:, :8] // 20 + 1 == 5).all() and (t[:, 8:] // 20 + 1 == 6).all()
    single = load_dataset("modelnet10", {"size": 8, "normalize": "dataset", "layout": "single"})
    assert single.x_train.shape == (10 * N_TRAIN, 1, 24, 32) and abs(float(single.x_train.mean())) < 1e-4
    part = make_partition("tiles", single.x_train.shape[1:], 12, np.random.default_rng(0))
    assert part.widths() == [64] * 12


def test_incomplete_renders_and_absence_are_clear(tmp_data, monkeypatch):
    with pytest.raises(VFLBenchError, match="vflbench data fetch modelnet10"):
        load_dataset("modelnet10", download=False)
    write_renders(tmp_data / "modelnet10", skip_view=(3, "train", 1, 7))
    with pytest.raises(VFLBenchError, match=r"desk/train/desk_0002 has views .* not 1..12"):
        load_dataset("modelnet10", {"size": 8})


def test_mirror_archive_is_extracted_keeping_modelnet10_classes(tmp_path, tmp_data, monkeypatch):
    src = tmp_path / "src" / "modelnet40_images_new_12x"
    write_renders(src)
    (src / "airplane" / "train").mkdir(parents=True)  # a ModelNet40-only class: not extracted
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(src / "airplane" / "train" / "airplane_0001.obj.shaded_v001.png")
    mirror = tmp_path / "mirror" / "modelnet10"
    mirror.mkdir(parents=True)
    with tarfile.open(mirror / "shaded_images.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="modelnet40_images_new_12x")
    monkeypatch.setenv("VFLBENCH_DATA_MIRROR", str(tmp_path / "mirror"))
    ds = load_dataset("modelnet10", {"size": 8})
    assert len(ds.y_test) == 10 * N_TEST * 2 and "views_index" in ds.checksums
    assert not (tmp_data / "modelnet10" / "modelnet40_images_new_12x" / "airplane").exists()
