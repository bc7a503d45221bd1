"""ModelNet10 as multi-view images (FALSE-VFL and PBM-VFL): each CAD model rendered from 12
viewpoints, one every 30 degrees around it (the MVCNN project's shaded renders of ModelNet40, of which
ModelNet10 is 10 classes: 3,991 train / 908 test models).

Raw files (the official render archive's layout, either naming scheme)::

    <class>/<train|test>/<class>_<id>.obj.shaded_v001.png ... _v012.png   (shaded_images.tar.gz)
    <class>/<train|test>/<class>_<id>_001.jpg ... _012.jpg                 (modelnet40v1.tar)

under ``data/modelnet10/`` (any folder level), or the same under ``$VFLBENCH_DATA_MIRROR/modelnet10/``;
online, the MVCNN archive is downloaded and only the ten ModelNet10 classes are extracted.

A sample puts the parties' views side by side in one grayscale image, so the ``tiles`` partitioner
gives each party exactly its own view(s) (``layout``):

* ``pairs`` (FALSE-VFL; 6 parties): the 12 views form 6 adjacent pairs (views 1-2, 3-4, ...); each
  sample takes one view of every pair at random, and the draw is repeated ``train_draws`` (6) times
  for training and ``test_draws`` (2) times for testing: 23,946 / 1,816 samples. Grid 2 x 3.
* ``pair-both`` (PBM-VFL, 6 parties of 2 views): both views of each pair, side by side. Grid 2 x 3.
* ``single`` (PBM-VFL, 12 parties of 1 view). Grid 3 x 4.

Views are converted to grayscale and resized to ``size`` x ``size`` (32, as FALSE-VFL); decoded
views are cached in ``data/modelnet10/views<size>.npz``. ``normalize=dataset`` z-scores with the
training split's mean and std.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tarfile
from pathlib import Path

import numpy as np

from ...core.errors import DataUnavailableError, VFLBenchError
from .base import Dataset, DatasetInfo
from .fetch import _download, fetch_lock, mirror_root
from .registry import DatasetSpec, register

NAME = "modelnet10"
CLASSES = ("bathtub", "bed", "chair", "desk", "dresser", "monitor", "night_stand", "sofa", "table", "toilet")
N_VIEWS = 12
URL = "http://supermoe.cs.umass.edu/shape_recog/shaded_images.tar.gz"
ARCHIVE = "shaded_images.tar.gz"
VIEW_RE = re.compile(r"^(?P<obj>.+?)(?:\.obj\.shaded_v|_)(?P<view>\d{3})\.(?:png|jpg|jpeg)$", re.IGNORECASE)
LAYOUTS = {
    "pairs": (6, (2, 3), 1),
    "pair-both": (6, (2, 3), 2),
    "single": (12, (3, 4), 1),
}  # parties, grid, views per tile


def find_root(base: Path) -> Path | None:
    """The folder that holds the class folders (``base`` itself or up to two levels below)."""
    if not base.is_dir():
        return None
    for cand in [
        base,
        *sorted(p for p in base.iterdir() if p.is_dir()),
        *sorted(q for p in base.iterdir() if p.is_dir() for q in p.iterdir() if q.is_dir()),
    ]:
        if (cand / CLASSES[0] / "train").is_dir():
            return cand
    return None


def available(ds_dir: Path) -> bool:
    m = mirror_root()
    return (
        find_root(ds_dir) is not None
        or (ds_dir / ARCHIVE).exists()
        or (m is not None and (find_root(m / NAME) is not None or (m / NAME / ARCHIVE).exists()))
    )


def _extract(archive: Path, dest: Path) -> None:
    """Only the ModelNet10 class folders of the (ModelNet40) render archive."""
    want = set(CLASSES)
    try:
        with tarfile.open(archive) as tar:
            members = [
                m for m in tar.getmembers() if m.isfile() and any(part in want for part in Path(m.name).parts[:3])
            ]
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise VFLBenchError(
            f"{archive} cannot be read ({e}); delete it and run `vflbench data fetch {NAME}` again."
        ) from None


def fetch(ds_dir: Path, download: bool) -> dict[str, str]:
    with fetch_lock(ds_dir):
        if find_root(ds_dir) is None:
            m = mirror_root()
            if m is not None and find_root(m / NAME) is not None:
                shutil.copytree(find_root(m / NAME), ds_dir / "views", dirs_exist_ok=True)
            elif m is not None and (m / NAME / ARCHIVE).exists():
                _extract(m / NAME / ARCHIVE, ds_dir)
            else:
                if not (ds_dir / ARCHIVE).exists():
                    if not download:
                        raise DataUnavailableError(_unavailable())
                    try:
                        _download(URL, ds_dir / ARCHIVE, timeout=60)
                    except OSError as e:
                        raise DataUnavailableError(_unavailable(f" The download failed ({e}).")) from None
                _extract(ds_dir / ARCHIVE, ds_dir)
        root = find_root(ds_dir)
        if root is None:
            raise VFLBenchError(
                f"{NAME}: no class folders ({CLASSES[0]}/train/...) under {ds_dir}; the render archive is incomplete."
            )
        return {"views_index": _index_digest(_scan(root))}


def _unavailable(extra: str = "") -> str:
    return (
        f"{NAME}'s 12-view renders are not in data/{NAME}/ nor in the mirror ($VFLBENCH_DATA_MIRROR/{NAME}/).{extra} "
        "Online, run "
        f"`vflbench data fetch {NAME}` (downloads {URL}, 1.6 GB, and keeps the ModelNet10 classes); or unpack the "
        "archive's "
        f"ModelNet10 class folders into data/{NAME}/."
    )


def _scan(root: Path) -> dict[str, list[tuple[int, str, list[Path]]]]:
    """split -> [(label, object, [12 view files in view order])]; every object needs all 12 views."""
    out: dict[str, list] = {"train": [], "test": []}
    for label, cls in enumerate(CLASSES):
        for split in ("train", "test"):
            d = root / cls / split
            if not d.is_dir():
                raise VFLBenchError(
                    f"{NAME}: missing folder {d}; the renders must hold all ten ModelNet10 classes with train/ and "
                    "test/."
                )
            views: dict[str, dict[int, Path]] = {}
            for f in d.iterdir():
                m = VIEW_RE.match(f.name)
                if m:
                    views.setdefault(m.group("obj"), {})[int(m.group("view"))] = f
            for obj in sorted(views):
                got = views[obj]
                if sorted(got) != list(range(1, N_VIEWS + 1)):
                    raise VFLBenchError(
                        f"{NAME}: {cls}/{split}/{obj} has views {sorted(got)}, not 1..12; the renders are incomplete "
                        "(re-extract the archive)."
                    )
                out[split].append((label, obj, [got[v] for v in range(1, N_VIEWS + 1)]))
    if not out["train"] or not out["test"]:
        raise VFLBenchError(f"{NAME}: no rendered views found under {root}.")
    return out


def _index_digest(index: dict) -> str:
    h = hashlib.sha256()
    for split in ("train", "test"):
        for label, obj, files in index[split]:
            h.update(f"{split}/{label}/{obj}/{[f.stat().st_size for f in files]}\n".encode())
    return h.hexdigest()


def _decode(index: dict, size: int, cache: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """split -> (views uint8 [n, 12, size, size], labels [n]); cached per file index and size."""
    from .fetch import load_verified_cache, write_verified_cache

    digest = _index_digest(index)  # the source: every render's path and size
    z, _info = load_verified_cache(cache, digest, NAME)
    if z is not None and all(f"{s}_{a}" in z for s in ("train", "test") for a in ("x", "y")):
        return {s: (z[f"{s}_x"], z[f"{s}_y"]) for s in ("train", "test")}
    from PIL import Image, UnidentifiedImageError

    out = {}
    for split in ("train", "test"):
        items = index[split]
        x = np.empty((len(items), N_VIEWS, size, size), np.uint8)
        for i, (_, _obj, files) in enumerate(items):
            for v, f in enumerate(files):
                try:
                    with Image.open(f) as im:
                        x[i, v] = np.asarray(im.convert("L").resize((size, size), Image.BILINEAR))
                except (OSError, UnidentifiedImageError) as e:
                    raise VFLBenchError(f"{NAME}: {f} is not a readable image ({e}); re-extract the renders.") from None
        out[split] = (x, np.asarray([lab for lab, _, _ in items], np.int64))
    write_verified_cache(cache, {**{f"{s}_x": out[s][0] for s in out}, **{f"{s}_y": out[s][1] for s in out}}, digest)
    return out


def compose(views: np.ndarray, layout: str, draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``views`` [n, 12, s, s] -> images [n * draws, 1, rows * s, cols * s * per_tile] and the object
    index of each sample. ``pairs``: one random view of each adjacent pair, redrawn ``draws`` times."""
    n, _, s, _ = views.shape
    parties, (rows, cols), per = LAYOUTS[layout]
    samples, objs = [], []
    for _ in range(draws if layout == "pairs" else 1):
        if layout == "pairs":
            pick = 2 * np.arange(parties)[None, :] + rng.integers(0, 2, size=(n, parties))  # [n, 6] view per party
            tiles = views[np.arange(n)[:, None], pick]  # [n, 6, s, s]
        elif layout == "pair-both":
            tiles = views.reshape(n, parties, 2, s, s).transpose(0, 1, 3, 2, 4).reshape(n, parties, s, 2 * s)
        else:
            tiles = views
        w = tiles.shape[-1]
        img = tiles.reshape(n, rows, cols, s, w).transpose(0, 1, 3, 2, 4).reshape(n, 1, rows * s, cols * w)
        samples.append(img)
        objs.append(np.arange(n))
    return np.concatenate(samples), np.concatenate(objs)


def load(ds_dir: Path, opts: dict) -> Dataset:
    layout = str(opts["layout"])
    if layout not in LAYOUTS:
        raise VFLBenchError(f"{NAME}: layout={layout!r}; choices: {', '.join(LAYOUTS)}.")
    size, tr_draws, te_draws = int(opts["size"]), int(opts["train_draws"]), int(opts["test_draws"])
    if size < 4 or tr_draws < 1 or te_draws < 1:
        raise VFLBenchError(
            f"{NAME}: need size >= 4 and train_draws, test_draws >= 1 (got {size}, {tr_draws}, {te_draws})."
        )
    root = find_root(ds_dir)
    if root is None:
        raise DataUnavailableError(_unavailable())
    views = _decode(_scan(root), size, ds_dir / f"views{size}.npz")
    rng = np.random.default_rng(int(opts["draw_seed"]))
    (vtr, ytr), (vte, yte) = views["train"], views["test"]
    xtr, otr = compose(vtr, layout, tr_draws, rng)
    xte, ote = compose(vte, layout, te_draws, rng)
    xtr, xte = xtr.astype(np.float32) / 255.0, xte.astype(np.float32) / 255.0
    if opts["normalize"] == "dataset":
        mean, std = float(xtr.mean()), float(xtr.std()) or 1.0
        xtr, xte = (xtr - mean) / std, (xte - mean) / std
    elif opts["normalize"] != "none":
        raise VFLBenchError(f"{NAME}: normalize={opts['normalize']!r}; choices: dataset, none.")
    info = DatasetInfo(**{**INFO.__dict__, "shape": tuple(xtr.shape[1:])})
    ds = Dataset(info, xtr, ytr[otr], xte, yte[ote])
    ds.preprocessing = {
        "layout": layout,
        "parties": LAYOUTS[layout][0],
        "grid": list(LAYOUTS[layout][1]),
        "view_size": size,
        "objects": {"train": int(len(ytr)), "test": int(len(yte))},
        "samples": {"train": int(len(xtr)), "test": int(len(xte))},
    }
    return ds


INFO = DatasetInfo(
    name=NAME,
    title="ModelNet10, 12 rendered views per CAD model (MVCNN renders)",
    kind="image",
    n_classes=10,
    shape=(1, 64, 96),
    source="https://modelnet.cs.princeton.edu (renders: https://github.com/jongchyisu/mvcnn_pytorch)",
    license="ModelNet: academic use (Princeton); renders: MVCNN project",
    citation="Wu et al. (2015), CVPR; Su et al. (2015), ICCV",
)
register(
    DatasetSpec(
        INFO,
        load,
        (),
        defaults={
            "layout": "pairs",
            "size": 32,
            "train_draws": 6,
            "test_draws": 2,
            "draw_seed": 0,
            "normalize": "dataset",
        },
        option_help={
            "layout": "pairs (6 parties, one view of each adjacent pair) | pair-both (6 parties, 2 views) | single "
            "(12 parties)",
            "size": "view side in pixels after resizing",
            "train_draws": "random view draws per training model (pairs)",
            "test_draws": "random view draws per test model (pairs)",
            "draw_seed": "seed of the view draws",
            "normalize": "dataset (z-score with training statistics) | none",
        },
        fetcher=fetch,
        available_fn=available,
    )
)
