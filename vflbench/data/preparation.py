"""Shared run set-up: load data, partition it and draw masks from the named random streams.

Everything here depends only on (dataset, options, K, partitioner, seed), never on the method, so
every method sees the same split, partition and masks for a given seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.rng import Streams
from .datasets import Dataset, load_dataset
from .missingness import (
    Masks,
    apply_aligned_reserve,
    generate_masks,
    labeled_split,
    parse_mechanism,
)
from .partitioners import Partition, default_partitioner, make_partition
from .wrong_blocks import Wrong, WrongSpec, apply_wrong


@dataclass
class Prepared:
    data: Dataset
    partition: Partition
    streams: Streams
    _stats: dict[str, tuple[np.ndarray, np.ndarray]]
    clean_train: np.ndarray | None = None  # the training rows as loaded, once a run's training blocks are made wrong

    def permute_rows(self, rng: np.random.Generator) -> None:
        """Permute train and test rows once (the authors' HAPT loader); block statistics follow."""
        d = self.data
        ptr, pte = rng.permutation(len(d.y_train)), rng.permutation(len(d.y_test))
        d.x_train, d.y_train, d.x_test, d.y_test = d.x_train[ptr], d.y_train[ptr], d.x_test[pte], d.y_test[pte]
        if getattr(d, "structural", None) is not None:  # which blocks each row has follows its row
            d.structural = {"train": d.structural["train"][ptr], "test": d.structural["test"][pte]}
        self._stats.clear()

    def spread(self) -> np.ndarray:
        """Each feature's standard deviation over the (clean) training rows, flattened: what Gaussian corruption
        scales by."""
        if "spread" not in self._stats:
            clean = self.data.x_train if self.clean_train is None else self.clean_train
            x = np.asarray(clean, dtype=np.float64).reshape(len(clean), -1)
            self._stats["spread"] = (x.std(0), x.std(0))
        return self._stats["spread"][0]

    def block_stats(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        if split not in self._stats:
            x = self.data.x_train if split == "train" else self.data.x_test
            self._stats[split] = self.partition.block_stats(x, set(self.data.embedded))
        return self._stats[split]


def prepare(
    dataset: str,
    data_options: dict[str, Any] | None,
    parties: int,
    partitioner: str | None,
    part_options: dict[str, Any] | None,
    seed: int,
) -> Prepared:
    data = load_dataset(dataset, data_options)
    streams = Streams(seed)
    pname = partitioner or default_partitioner(data.info.kind)
    opts = {}
    for k, v in (part_options or {}).items():
        try:
            opts[k] = float(v) if "." in str(v) else int(v)
        except ValueError:
            opts[k] = v
    part = make_partition(pname, data.x_train.shape[1:], parties, streams.numpy("partition"), data=data, **opts)
    if pname == "columns":
        natural_missing_blocks(data, part)
    return Prepared(data, part, streams, {})


def natural_missing_blocks(data: Dataset, part: Partition) -> None:
    """A joined table split by named columns (a parties file): a row whose cells in all of one party's columns are
    empty is that party's missing block, at training and at test, as the party's own file would give it (a party
    that does not hold the row). ``data.structural`` ([n, K] per split: the party holds the row) takes it, on top of
    an alignment's; cells empty inside a present block are imputed as before."""
    empty = getattr(data, "empty_cells", None)
    sources = getattr(data, "feature_sources", None)
    if empty is None or not sources:
        return
    at = {c: i for i, c in enumerate(empty["columns"])}
    cols = [sorted({at[sources[j]] for j in np.asarray(b).tolist() if sources[j] in at}) for b in part.blocks]
    held = {
        split: np.column_stack([~empty[split][:, c].all(1) if c else np.ones(len(empty[split]), bool) for c in cols])
        for split in ("train", "test")
    }
    before = getattr(data, "structural", None)
    if before is not None:
        held = {split: held[split] & before[split] for split in held}
    data.structural = held
    data.preprocessing = {
        **(data.preprocessing or {}),
        "natural_missing_blocks": {split: (~held[split]).sum(0).astype(int).tolist() for split in ("train", "test")},
    }


def draw_masks(
    prep: Prepared,
    spec: str,
    *,
    split: str = "train",
    stream: str | None = None,
    granularity: str = "sample",
    batch_size: int | None = None,
    all_missing: str = "keep",
    labeled: int | str | None = None,
    aligned: int = 0,
) -> Masks:
    """The split's mask under ``spec``, each from its own named stream; on the training split, ``labeled`` samples
    (an int: a uniform draw from the stream ``labeled``, with an ``aligned`` reserve inside; ``"all"``: every sample,
    as a supervised run, with no draw) mark what a semi-supervised method may read labels from."""
    mech = parse_mechanism(spec)
    n = len(prep.data.y_train if split == "train" else prep.data.y_test)
    mean = var = None
    if mech.needs_data:
        mean, var = prep.block_stats(split)
    name = stream or ("train_masks" if split == "train" else f"test_masks/{spec}")
    m = generate_masks(
        spec,
        n,
        prep.partition.n_parties,
        prep.streams.numpy(name),
        block_mean=mean,
        block_var=var,
        granularity=granularity,
        batch_size=batch_size,
        all_missing=all_missing,
    )
    if labeled == "all" and split == "train":
        m.info["labeled"] = "all"
    elif labeled is not None and split == "train":
        lab, res = labeled_split(n, labeled, aligned, prep.streams.numpy("labeled"))
        m.observed = apply_aligned_reserve(m.observed, res)
        m.info.update({"labeled": int(labeled), "aligned_reserve": int(aligned)})
        m.labeled = lab
        m.reserve = res
    return m


def wrong_blocks(prep: Prepared, corrupt: WrongSpec, misalign: WrongSpec, split: str) -> tuple[np.ndarray, Wrong]:
    """The split's features with the blocks ``corrupt`` and ``misalign`` make wrong (a copy; the dataset is
    untouched), and the record of which rows and parties they affect; each family from its own named stream
    (``wrong/<split>/corrupt/<spec>``), so every method of a seed sees the same wrong blocks."""
    x = prep.data.x_train if split == "train" else prep.data.x_test
    return apply_wrong(
        x,
        prep.partition,
        corrupt,
        misalign,
        prep.streams.numpy(f"wrong/{split}/corrupt/{corrupt}"),
        prep.streams.numpy(f"wrong/{split}/misalign/{misalign}"),
        prep.spread(),
        prep.data.x_train if prep.clean_train is None else prep.clean_train,
        frozenset(prep.data.embedded),
    )
