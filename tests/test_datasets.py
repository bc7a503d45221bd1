"""Loaders on real mirror data and on small files written here in each official format."""

import gzip
import pickle
import struct

import numpy as np
import pytest

from vflbench.core.errors import DataUnavailableError, VFLBenchError
from vflbench.data.datasets import DATASETS, load_dataset

from .conftest import needs_mirror


@needs_mirror
def test_credit_from_mirror_recipe(tmp_path, monkeypatch):
    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path))
    d = load_dataset("credit", download=False)
    assert d.x_train.shape == (24000, 23) and d.x_test.shape == (6000, 23)
    # stratified: both splits keep the 22.12% default rate
    assert abs(d.y_train.mean() - 0.2212) < 0.001 and abs(d.y_test.mean() - 0.2212) < 0.001
    # standard scaling fitted on train
    assert np.allclose(d.x_train.mean(0), 0, atol=1e-4) and np.allclose(d.x_train.std(0), 1, atol=1e-3)
    assert d.feature_names[:2] == ["LIMIT_BAL", "SEX"] and d.feature_names[-1] == "PAY_AMT6"
    assert d.checksums["default of credit card clients.csv.gz"].startswith("0dd31d64")
    mm = load_dataset("credit", {"scaler": "minmax", "split_seed": "3"}, download=False)
    assert mm.x_train.min() >= 0 and mm.x_train.max() <= 1 and mm.options["split_seed"] == 3


@needs_mirror
def test_a_tampered_parsed_cache_is_detected_and_rebuilt(tmp_path, monkeypatch):
    """The parsed-table cache is verified against the source's sha256 and its own: flipped labels in
    it are never trained on; the load warns, rebuilds it and says so in the data summary."""
    from vflbench.data.datasets import registry

    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path))
    registry_cache = getattr(registry, "_CACHE", None)
    if isinstance(registry_cache, dict):
        registry_cache.clear()
    first = load_dataset("credit", download=False)
    cache = next(tmp_path.rglob(".parsed-v3-*.npy"))
    assert first.preprocessing["parsed_cache"]["status"] == "built"
    again = load_dataset("credit", download=False)
    assert again.preprocessing["parsed_cache"]["status"] == "verified"
    arr = np.load(cache)
    arr[:, -1] = 1 - arr[:, -1]  # flip every label
    np.save(cache, arr)
    with pytest.warns(UserWarning, match="do not match the checksum"):
        fixed = load_dataset("credit", download=False)
    assert fixed.preprocessing["parsed_cache"]["status"].startswith("rebuilt")
    assert np.array_equal(fixed.y_train, first.y_train) and np.array_equal(fixed.x_test, first.x_test)
    cache.with_name(cache.name + ".sha256").unlink()  # no checksum file: not trusted either
    with pytest.warns(UserWarning, match="no checksum file"):
        load_dataset("credit", download=False)


@needs_mirror
def test_credits_split_cache_is_verified_and_spares_pandas_and_scikit_learn(tmp_path, monkeypatch):
    """A run's split and scaled Credit arrays are cached per options (verified like the parsed table): the cached
    load equals the computed one, a tampered cache is rebuilt with a warning, and a cached load imports neither
    pandas nor scikit-learn (they cost a short run's start more than a second)."""
    import subprocess
    import sys

    monkeypatch.setenv("VFLBENCH_DATA", str(tmp_path))
    first = load_dataset("credit", download=False)
    assert first.preprocessing["split_cache"]["status"] == "built"
    again = load_dataset("credit", download=False)
    assert again.preprocessing["split_cache"]["status"] == "verified"
    assert all(np.array_equal(getattr(first, a), getattr(again, a)) for a in ("x_train", "y_train", "x_test", "y_test"))
    other = load_dataset("credit", {"split_seed": "3"}, download=False)
    assert other.preprocessing["split_cache"]["status"] == "built"  # other options: another cache
    cache = next(tmp_path.rglob(first.preprocessing["split_cache"]["cache"]))
    cache.write_bytes(cache.read_bytes()[:-8] + b"damaged!")
    with pytest.warns(UserWarning, match="do not match the checksum"):
        fixed = load_dataset("credit", download=False)
    assert np.array_equal(fixed.x_train, first.x_train) and np.array_equal(fixed.y_test, first.y_test)
    code = (
        "import sys; from vflbench.data.datasets import load_dataset; load_dataset('credit', download=False); "
        "print(sorted(m for m in ('pandas', 'sklearn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@needs_mirror
def test_isolet_phishing_fashion_from_mirror():
    iso = load_dataset("isolet", download=False)
    assert iso.x_train.shape == (6238, 617) and iso.x_test.shape == (1559, 617) and iso.y_train.max() == 25
    ph = load_dataset("phishing", download=False)
    assert len(ph.y_train) + len(ph.y_test) == 11055 and (np.concatenate([ph.y_train, ph.y_test]) == 1).sum() == 6157
    fm = load_dataset("fashion-mnist", download=False)
    assert fm.x_train.shape == (60000, 1, 28, 28) and fm.x_test.shape == (10000, 1, 28, 28)
    assert np.bincount(fm.y_test).tolist() == [1000] * 10
    sub = load_dataset("fashion-mnist", {"train_subset": 2000, "test_subset": 500}, download=False)
    assert (
        np.bincount(sub.y_train).tolist() == [200] * 10 and np.bincount(sub.y_test).tolist() == [50] * 10
    )  # stratified
    keep = [np.flatnonzero((fm.x_test.reshape(10000, -1) == row).all(1))[0] for row in sub.x_test.reshape(500, -1)[:5]]
    assert keep == sorted(keep) and (fm.y_test[keep] == sub.y_test[:5]).all()  # a subset of the test images, in order
    again = load_dataset("fashion-mnist", {"test_subset": 500}, download=False)
    assert np.array_equal(again.x_test, sub.x_test) and again.x_train.shape[0] == 60000  # fixed subset; train untouched


def test_a_dataset_option_added_at_its_default_leaves_run_keys_alone():
    from vflbench.runs.config import RunConfig, resolve

    base = dict(dataset="fashion-mnist", method="laser", parties=4, hp={"epochs": 1})
    plain, at_default = resolve(RunConfig(**base)), resolve(RunConfig(**base, data_options={"test_subset": 0}))
    assert plain.run_id == at_default.run_id and plain.data_options["test_subset"] == 0
    assert resolve(RunConfig(**base, data_options={"test_subset": 500})).run_id != plain.run_id


def test_missing_data_offline_names_fetch_and_mirror(tmp_data):
    for name in ("credit", "isolet", "hapt", "phishing"):
        with pytest.raises(DataUnavailableError) as e:
            load_dataset(name)
        assert f"vflbench data fetch {name}" in str(e.value) and "VFLBENCH_DATA_MIRROR" in str(e.value)
    with pytest.raises(DataUnavailableError, match="vflbench data fetch fashion-mnist"):
        load_dataset("fashion-mnist", download=False)


def test_corrupt_file_fails_checksum(tmp_data):
    d = tmp_data / "phishing"
    d.mkdir(parents=True)
    (d / "Training Dataset.arff").write_text("@relation x\n@attribute a {0,1}\n@data\n1\n")
    with pytest.raises(VFLBenchError, match="is damaged .*published"):
        load_dataset("phishing")


def test_an_unchanged_verified_file_is_not_read_again_and_an_edited_one_is(tmp_path, monkeypatch):
    """The digest memo (VerifiedDigests): a second verification of an unchanged file reuses the first
    one's sha256; an edit in place of the same size (even with its modification time put back) and a
    replacement are read again and caught."""
    import hashlib
    import os

    from vflbench.data.datasets import fetch
    from vflbench.data.datasets.fetch import RawFile

    f = tmp_path / "blob.bin"
    f.write_bytes(b"a" * 4096)
    good = hashlib.sha256(b"a" * 4096).hexdigest()
    raw = RawFile("blob.bin", good)
    assert raw.verify(f, tmp_path) == (good, "published")
    reads = []
    monkeypatch.setattr(fetch, "sha256_file", lambda *a, **k: reads.append(1) or good)
    assert raw.verify(f, tmp_path) == (good, "published (unchanged since verified)") and not reads
    monkeypatch.setenv("VFLBENCH_VERIFY", "full")
    assert raw.verify(f, tmp_path) == (good, "published") and reads  # forced full check reads it
    monkeypatch.delenv("VFLBENCH_VERIFY")
    monkeypatch.undo()
    st = f.stat()
    with open(f, "r+b") as h:  # same size, same mtime: only the status-change time betrays the edit
        h.write(b"b")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(VFLBenchError, match="is damaged"):
        raw.verify(f, tmp_path)


def _write_txt(path, arr, fmt="%.8e"):
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(path, arr, fmt=fmt, delimiter=" ")


@pytest.mark.parametrize("name,tr,te,classes", [("hapt", "Train", "Test", 12), ("uci-har", "train", "test", 6)])
def test_har_family_official_layout(tmp_data, name, tr, te, classes):
    rng = np.random.default_rng(0)
    root = tmp_data / name
    Xtr, Xte = rng.uniform(-1, 1, (40, 561)), rng.uniform(-1, 1, (15, 561))
    _write_txt(root / tr / "X_train.txt", Xtr)
    _write_txt(root / te / "X_test.txt", Xte)
    _write_txt(root / tr / "y_train.txt", rng.integers(1, classes + 1, 40)[:, None], "%d")
    _write_txt(root / te / "y_test.txt", np.arange(15)[:, None] % classes + 1, "%d")
    d = load_dataset(name)
    assert d.x_train.shape == (40, 561) and np.allclose(d.x_train, Xtr, atol=1e-6)
    assert d.y_test.tolist() == (np.arange(15) % classes).tolist()  # labels shifted to 0-based
    _write_txt(root / te / "X_test.txt", Xte[:, :500])  # the file changed since its first use
    with pytest.raises(VFLBenchError, match="is damaged .*recorded when it was first used"):
        load_dataset(name)
    _write_txt(root / te / "X_test.txt", Xte[:, :500])  # a new copy: first use, then the shape check
    with pytest.raises(VFLBenchError, match="561"):
        load_dataset(name)


@pytest.mark.parametrize("compress", [False, True])
def test_isolet_official_data_files(tmp_data, compress):
    rng = np.random.default_rng(1)
    root = tmp_data / "isolet"
    root.mkdir(parents=True)
    for fname, n in (("isolet1+2+3+4.data", 52), ("isolet5.data", 26)):
        X = np.round(rng.uniform(-1, 1, (n, 617)), 4)
        y = np.arange(n) % 26 + 1
        text = "\n".join(", ".join(f"{v:.4f}" for v in row) + f", {c}." for row, c in zip(X, y, strict=True)) + "\n"
        if compress:
            with gzip.open(root / (fname + ".gz"), "wt") as f:
                f.write(text)
        else:
            (root / fname).write_text(text)
    d = load_dataset("isolet", {"scaler": "none"})
    assert d.x_train.shape == (52, 617) and d.x_test.shape == (26, 617)
    assert d.y_train[:3].tolist() == [0, 1, 2] and d.y_train.max() == 25


def _idx(path, arr):
    path.parent.mkdir(parents=True, exist_ok=True)
    dims = arr.shape
    magic = 0x0800 | len(dims)
    with open(path, "wb") as f:
        f.write(
            struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + arr.astype(np.uint8).tobytes()
        )


@pytest.mark.parametrize("name,cls", [("mnist", "MNIST"), ("fashion-mnist", "FashionMNIST")])
def test_idx_family_through_torchvision(tmp_data, name, cls):
    rng = np.random.default_rng(2)
    raw = tmp_data / name / cls / "raw"
    imgs = rng.integers(0, 256, (20, 28, 28))
    _idx(raw / "train-images-idx3-ubyte", imgs)
    _idx(raw / "train-labels-idx1-ubyte", np.arange(20) % 10)
    _idx(raw / "t10k-images-idx3-ubyte", imgs[:10])
    _idx(raw / "t10k-labels-idx1-ubyte", np.arange(10))
    if name == "fashion-mnist":  # real checksums are verified: fixtures must fail them
        with pytest.raises(VFLBenchError, match="is damaged"):
            load_dataset(name)
        return
    d = load_dataset(name, {"normalize": "none"})
    assert d.x_train.shape == (20, 1, 28, 28) and np.allclose(d.x_train[0, 0] * 255, imgs[0])
    assert d.y_test.tolist() == list(range(10))


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_python_pickles_through_torchvision(tmp_data, monkeypatch, name):
    import torchvision.datasets as tvd

    rng = np.random.default_rng(3)
    folder = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}[name]
    root = tmp_data / name / folder
    root.mkdir(parents=True)
    key = "labels" if name == "cifar10" else "fine_labels"
    cls = tvd.CIFAR10 if name == "cifar10" else tvd.CIFAR100
    files = [f for f, _ in cls.train_list] + [f for f, _ in cls.test_list]
    for f in files:
        data = rng.integers(0, 256, (4, 3072), dtype=np.uint8)
        with open(root / f, "wb") as fh:
            pickle.dump({"data": data, key: [0, 1, 2, 3]}, fh)
    with open(root / cls.meta["filename"], "wb") as fh:
        pickle.dump({cls.meta["key"]: [f"c{i}" for i in range(100)]}, fh)
    # torchvision checks the official md5 of every batch; our fixtures are only format-true
    import torchvision.datasets.cifar as tvc

    monkeypatch.setattr(cls, "_check_integrity", lambda self: True)
    monkeypatch.setattr(tvc, "check_integrity", lambda *a, **k: True)
    d = load_dataset(name, {"normalize": "none"})
    n_train = 4 * len(cls.train_list)
    assert d.x_train.shape == (n_train, 3, 32, 32) and d.x_test.shape == (4, 3, 32, 32)
    assert d.y_train[:4].tolist() == [0, 1, 2, 3]


def test_mimic4_user_supplied_npz_and_csv(tmp_data):
    import pandas as pd

    with pytest.raises(DataUnavailableError, match="credentialed"):
        load_dataset("mimic4")
    root = tmp_data / "mimic4"
    root.mkdir(parents=True)
    rng = np.random.default_rng(4)
    df = pd.DataFrame(rng.standard_normal((30, 8)), columns=[f"v{i}" for i in range(8)])
    df["label"] = np.arange(30) % 2
    df["split"] = ["train"] * 20 + ["test"] * 10
    df.to_csv(root / "mimic4.csv", index=False)
    d = load_dataset("mimic4")
    assert d.x_train.shape == (20, 8) and d.feature_names[0] == "v0" and d.info.shape == (8,)


def test_embedded_sets_and_synthetic_options():
    dg = load_dataset("digits")
    assert dg.x_train.shape[1:] == (1, 8, 8)
    s = load_dataset("synthetic", {"n": "1000", "blocks": "3", "block_width": "5", "informative": "2"})
    assert s.x_train.shape == (750, 15)
    with pytest.raises(VFLBenchError, match="no option"):
        load_dataset("synthetic", {"bogus": 1})
    with pytest.raises(VFLBenchError, match="expected int"):
        load_dataset("synthetic", {"n": "many"})


def test_every_dataset_has_metadata():
    for name in DATASETS:
        info = DATASETS.get(name).info
        assert info.source and info.license and info.n_classes >= 2 and info.kind in ("tabular", "image")


def test_corrupt_unverifiable_credit_xls_is_a_clear_error(tmp_data):
    d = tmp_data / "credit"
    d.mkdir(parents=True)
    (d / "default of credit card clients.xls").write_bytes(b"not an excel file")
    with pytest.raises(VFLBenchError, match="is damaged .*could not be read"):
        load_dataset("credit")
    assert (d / "default of credit card clients.xls.corrupt").exists()  # set aside for the next fetch
