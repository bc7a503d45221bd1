"""A run's inputs, identical for every method given the seed: the prepared data (split, partition,
named streams), the training and test masks, the tensors on the run's device, and the held-out
validation samples of a protocol that asks for them (:func:`prepare`)."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.errors import VFLBenchError
from ..data.missingness import Masks
from ..data.preparation import Prepared, draw_masks, wrong_blocks
from ..data.preparation import prepare as prepare_data
from ..data.wrong_blocks import Wrong
from ..runs.config import ResolvedRun
from ..runs.devices import choose_device
from .trainer import BlockData, TrainSet


@dataclass
class RunInputs:
    """Everything prepared for one run, identical for every method given the seed."""

    prep: Prepared
    device: torch.device
    train: TrainSet
    test: BlockData
    y_test: np.ndarray
    train_masks: Masks
    test_masks: dict[str, Masks]
    timings: dict[str, float] = field(default_factory=dict)
    val: BlockData | None = None  # protocol option val_split: labeled training samples held out of training
    y_val: np.ndarray | None = None
    val_masks: dict[str, Masks] = field(default_factory=dict)
    device_reason: str = ""  # why the run computes where it does (vflbench.runs.devices)
    # set to a dict to keep each test setting's per-sample predictions (preds, valid, scores, counted): --save-model
    predictions: dict | None = None
    # the validation rows' training masks (the training mechanism on them, as drawn for every training row): what
    # early stopping scores, so the model it keeps is chosen for the missingness it is trained under
    val_train_obs: torch.Tensor | None = None
    # blocks present but wrong (vflbench.data.wrong_blocks): the training rows' record (None: clean), and per test
    # (corruption, misalignment) pair other than (none, none) its test blocks and their record
    train_wrong: Wrong | None = None
    test_wrong: dict[tuple[str, str], tuple[BlockData, Wrong]] = field(default_factory=dict)
    screen: object | None = None  # the fitted --screen (vflbench.training.screening.Screen), once evaluated

    clean_tested: bool = True  # (none, none) is among the test (corruption, misalignment) pairs

    def wrong_settings(self) -> list[tuple[str, str]]:
        """Every test (corruption, misalignment) pair of the run, the clean one first where it is one."""
        return [("none", "none")] * self.clean_tested + list(self.test_wrong)


def prepare(run: ResolvedRun, device: str | torch.device = "auto") -> RunInputs:
    from ..core.paths import register

    register(run.path_bases)  # a worker process reads the files the experiment file named
    t = time.perf_counter()
    dev, why = choose_device(device, run.model.get("arch", "mlp"))
    proto = run.protocol
    prep = prepare_data(run.dataset, run.data_options, run.parties, run.partitioner, run.partition_options, run.seed)
    timings = {"load_and_partition_s": time.perf_counter() - t}
    t = time.perf_counter()
    if proto.permute_once:  # the authors' HAPT loader permutes rows once with the seed
        prep.permute_rows(prep.streams.numpy("permute"))
    data = prep.data
    if isinstance(run.labeled, int) and run.labeled > len(data.y_train):
        raise VFLBenchError(f"--labeled {run.labeled} is larger than the training set ({len(data.y_train)} samples).")
    bs = run.hp.batch_size
    train_masks = draw_masks(
        prep,
        run.train_missing,
        split="train",
        granularity=proto.train_granularity,
        batch_size=bs,
        all_missing=proto.all_missing,
        labeled=run.labeled,
        aligned=run.aligned,
    )
    test_masks = {
        s: draw_masks(
            prep, s, split="test", granularity=proto.test_granularity, batch_size=bs, all_missing=proto.all_missing
        )
        for s in run.test_missing
    }
    structural = getattr(data, "structural", None)  # parties' own files: a block a party does not hold is missing
    if structural is not None:
        train_masks.observed = train_masks.observed & structural["train"]
        for m in test_masks.values():
            m.observed = m.observed & structural["test"]
        train_masks.info["alignment"] = (
            "blocks whose party does not hold the sample (its ID absent from its file, or all of its cells empty in a "
            "joined table) are missing, under the drawn mask"
        )
    for s, m in test_masks.items():
        if not m.observed.any():
            raise VFLBenchError(
                f"The test setting '{s}' observes no block of any test sample, so nothing can be evaluated; lower its "
                "missing probability or drop it from --test-missing."
            )
    if not train_masks.observed.any():
        raise VFLBenchError(
            f"The training mask '{run.train_missing}' observes no block of any sample, so nothing can be trained; "
            "lower the missing probability."
        )
    train_wrong = wrong_training_rows(run, prep)
    data = prep.data
    keep = np.arange(len(data.y_train))
    val = y_val = val_train_obs = None
    val_masks: dict[str, Masks] = {}
    if proto.val_split > 0:
        keep, val, y_val, val_train_obs, val_masks = hold_out_validation(run, prep, train_masks, dev)
    if n := run.settings.get("train_samples", 0):  # --train-samples: a uniform subset of what training would see
        if n > len(keep):
            raise VFLBenchError(
                f"--train-samples {n} is more than the {len(keep)} training samples this run has; lower it (0 = all)."
            )
        keep = np.sort(prep.streams.numpy("train_samples").choice(keep, size=n, replace=False))
        train_masks.info["train_samples"] = int(n)
    labeled = None
    if train_masks.labeled is not None:
        lab = np.zeros(len(data.y_train), dtype=bool)
        lab[train_masks.labeled] = True
        labeled = torch.as_tensor(lab[keep], device=dev)
    x_train = data.x_train if len(keep) == len(data.y_train) else data.x_train[keep]
    check_blocks_fit(prep, len(keep) + len(data.y_test))
    train = TrainSet(
        BlockData(x_train, prep.partition, dev),
        torch.as_tensor(data.y_train[keep], device=dev),
        torch.as_tensor(train_masks.observed[keep], device=dev),
        labeled,
    )
    test = BlockData(data.x_test, prep.partition, dev)
    test_wrong = wrong_test_blocks(run, prep, dev)
    timings["masks_and_tensors_s"] = time.perf_counter() - t
    inputs = RunInputs(
        prep, dev, train, test, data.y_test, train_masks, test_masks, timings, val, y_val, val_masks, why
    )
    inputs.val_train_obs, inputs.train_wrong, inputs.test_wrong = val_train_obs, train_wrong, test_wrong
    inputs.clean_tested = all("none" in run.settings.get(n, ("none",)) for n in ("test_corrupt", "test_misalign"))
    return inputs


def wrong_training_rows(run: ResolvedRun, prep: Prepared) -> Wrong | None:
    """``--train-corrupt`` / ``--train-misalign``: the training rows' blocks arrive wrong, so every later use (the
    training set, its validation rows, the trees' bins) reads them so; the loaded dataset stays clean (a cached table
    is shared) and its rows are kept on ``prep.clean_train``. None when both are ``none``."""
    tc, tm = run.settings.get("train_corrupt", "none"), run.settings.get("train_misalign", "none")
    if tc == "none" and tm == "none":
        return None
    x_wrong, wrong = wrong_blocks(prep, tc, tm, "train")
    prep.clean_train = prep.data.x_train
    prep.data = copy.copy(prep.data)
    prep.data.x_train = x_wrong
    return wrong


def wrong_test_blocks(run: ResolvedRun, prep: Prepared, dev) -> dict[tuple[str, str], tuple[BlockData, Wrong]]:
    """Every test (corruption, misalignment) pair other than (none, none): its test blocks and their record."""
    out = {}
    for c in run.settings.get("test_corrupt", ("none",)):
        for a in run.settings.get("test_misalign", ("none",)):
            if c != "none" or a != "none":
                x_wrong, w = wrong_blocks(prep, c, a, "test")
                out[(str(c), str(a))] = (BlockData(x_wrong, prep.partition, dev), w)
    return out


def hold_out_validation(run: ResolvedRun, prep: Prepared, train_masks: Masks, dev):
    """The protocol's ``val_split``: (training rows kept, validation blocks, labels, their training masks, the test
    settings' masks on them, each from its own stream)."""
    data, proto = prep.data, run.protocol
    keep, val_idx = validation_split(
        run, train_masks, prep.streams.numpy("validation"), data.y_train, getattr(data, "groups_train", None)
    )
    val, y_val = BlockData(data.x_train[val_idx], prep.partition, dev), data.y_train[val_idx]
    val_train_obs = torch.as_tensor(train_masks.observed[val_idx], device=dev)
    val_masks: dict[str, Masks] = {}
    for s in run.test_missing:
        full = draw_masks(
            prep,
            s,
            split="train",
            stream=f"val_masks/{s}",
            granularity=proto.test_granularity,
            batch_size=run.hp.batch_size,
            all_missing=proto.all_missing,
        )
        full.observed = full.observed[val_idx]
        val_masks[s] = full
    import hashlib

    train_masks.info.update(
        {
            "validation_samples": int(len(val_idx)),
            "val_split": proto.val_split,
            "val_by": "groups" if getattr(data, "groups_train", None) is not None else proto.val_by,
            # which rows: every method of a seed trains and validates on the same ones (compare across manifests)
            "validation_rows_sha256": hashlib.sha256(np.asarray(val_idx, np.int64).tobytes()).hexdigest(),
        }
    )
    return keep, val, y_val, val_train_obs, val_masks


def check_blocks_fit(prep: Prepared, n_rows: int) -> None:
    """Refuse, before stacking them, parties' blocks that cannot fit in memory: tabular blocks are stacked as
    ``[K, n, w]``, every block zero-padded to the widest, so one wide party (a one-hot column of thousands of levels)
    costs K times its own width."""
    part = prep.partition
    if part.kind != "features":
        return
    from ..data.datasets.encoding import available_memory

    widths = part.widths()
    need = 4 * part.n_parties * n_rows * max(widths)
    have = available_memory()
    if have and need > have:
        gb = 1 << 30
        wide = int(np.argmax(widths))
        raise VFLBenchError(
            f"The parties' blocks need about {need / gb:.1f} GB ({part.n_parties} parties x {n_rows:,} rows x "
            f"{max(widths):,} columns as float32: each block is zero-padded to the widest, {part.party_names[wide]}'s) "
            f"and {have / gb:.1f} GB are available. Embed wide categorical columns (lower --data-opt embed_above), "
            "drop some, or run fewer runs at once (vflbench sweep --workers 1 --pack 1)."
        )


def report_alignment(inputs: RunInputs) -> None:
    """Warn, before training, about a party that holds none (or few) of the samples of an aligned run."""
    align = inputs.prep.data.preprocessing.get("alignment")
    if align is None:
        return
    import warnings

    from ..core.errors import VFLBenchWarning
    from ..data.alignment import holding_report

    for w in holding_report(align)[1]:
        warnings.warn(w, VFLBenchWarning, stacklevel=2)


def validation_split(
    run: ResolvedRun, masks: Masks, rng: np.random.Generator, y=None, groups=None
) -> tuple[np.ndarray, np.ndarray]:
    """(training rows kept, validation rows): ``val_split`` of the labeled samples (of every training
    sample, in a supervised run) outside the aligned reserve, drawn from the ``validation`` stream, leave the
    training set entirely (neither labeled nor unlabeled data for any stage). Drawn uniformly (protocol ``val_by``
    uniform, as always), or each class in its share (``stratified``); a table with an entity column (``groups``)
    holds out whole entities, about ``val_split`` of them, so no entity is on both sides."""
    n = len(masks.observed)
    labeled = np.arange(n) if masks.labeled is None else np.asarray(masks.labeled)  # supervised: every sample
    rest = np.setdiff1d(labeled, masks.reserve if masks.reserve is not None else [])
    share = run.protocol.val_split
    n_val = int(round(share * len(rest)))
    if n_val < 1:
        raise VFLBenchError(
            f"val_split={run.protocol.val_split} of {len(rest)} labeled samples outside the reserve holds out none; "
            "raise it."
        )
    stratified = getattr(run.protocol, "val_by", "uniform") == "stratified" and y is not None
    if groups is not None:
        val = _held_out_groups(rest, np.asarray(groups), np.asarray(y) if stratified else None, share, rng)
    elif stratified:
        yr = np.asarray(y)[rest]
        val = np.concatenate(
            [rng.choice(rest[yr == c], size=int(round(share * (yr == c).sum())), replace=False) for c in np.unique(yr)]
        )
    else:
        val = rng.choice(rest, size=n_val, replace=False)
    val = np.sort(val)
    return np.setdiff1d(np.arange(n), val), val


def _held_out_groups(rest: np.ndarray, groups: np.ndarray, y, share: float, rng: np.random.Generator) -> np.ndarray:
    """Rows of whole groups, about ``share`` of the groups among ``rest``: drawn uniformly from the stream, or with
    ``y``, scikit-learn's StratifiedGroupKFold (round(1 / share) folds, seeded from the stream), its first fold."""
    g = groups[rest]
    if y is not None:
        from sklearn.model_selection import StratifiedGroupKFold

        folds = max(2, int(round(1 / share)))
        if len(np.unique(g)) >= folds:
            cv = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=int(rng.integers(2**31 - 1)))
            return rest[next(cv.split(rest, y[rest], g))[1]]
    ids = np.unique(g)
    k = max(1, int(round(share * len(ids))))
    chosen = rng.choice(ids, size=min(k, len(ids) - 1) if len(ids) > 1 else 1, replace=False)
    return rest[np.isin(g, chosen)]
