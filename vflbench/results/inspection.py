"""What the inspecting commands report, as data (the CLI only prints it): a dataset as the loader
and partitioner see it (`vflbench inspect`), masks drawn exactly as a run draws them
(`vflbench masks`), and the registered methods (`vflbench methods`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def parties_in(file) -> dict:
    """The parties of a parties file, whatever their number (for a default --parties)."""
    import yaml

    from ..data.partitioners import read_parties_file

    try:
        n = len(yaml.safe_load(Path(str(file)).read_text()) or {})
    except (OSError, yaml.YAMLError, TypeError):
        n = 0
    return read_parties_file(file, n)


def dataset_report(
    dataset: str,
    data_options: dict[str, Any],
    partitioner: str | None,
    part_options: dict[str, Any],
    parties: int | None,
):
    """(report, dataset, partition): column types, classes and their counts, missing cells, and the
    encoded width per party, as the loader inferred them."""
    import numpy as np

    from ..core.rng import Streams
    from ..data.datasets import DATASETS, load_dataset, resolve_options
    from ..data.partitioners import default_partitioner, make_partition

    opts = resolve_options(DATASETS.get(dataset), data_options)
    if parties is None:
        parties = len(parties_in(part_options["file"])) if partitioner == "columns" and part_options.get("file") else 4
    ds = load_dataset(dataset, opts)
    part = make_partition(
        partitioner or default_partitioner(ds.info.kind),
        ds.x_train.shape[1:],
        parties,
        Streams(0).numpy("partition"),
        data=ds,
        **part_options,
    )
    sources = ds.feature_sources or (ds.feature_names or [f"x{i}" for i in range(ds.x_train.shape[1])])
    owner = {}
    for name, block in zip(part.party_names, part.blocks, strict=True) if part.kind == "features" else []:
        for i in np.asarray(block).tolist():
            owner.setdefault(sources[i], name)
    pre = ds.preprocessing
    n_tr, n_te = np.bincount(ds.y_train, minlength=ds.n_classes), np.bincount(ds.y_test, minlength=ds.n_classes)
    classes = list(pre.get("classes", {str(c): c for c in range(ds.n_classes)}))
    report = {
        "dataset": dataset,
        "rows": pre.get("rows", {"train": len(ds.y_train), "test": len(ds.y_test)}),
        "checksums": ds.checksums,
        "columns": [
            {
                "column": c,
                **v,
                "missing": pre.get("missing_cells", {}).get("per_column", {}).get(c, 0),
                "party": owner.get(c),
            }
            for c, v in pre.get("columns", {}).items()
        ],
        "classes": [
            {
                "class": c,
                "index": i,
                "train": int(n_tr[i]),
                "test": int(n_te[i]),
                "positive": i == ds.info.positive_class,
            }
            for i, c in enumerate(classes)
        ],
        "missing_cells": pre.get("missing_cells", {}).get("total"),
        "parties": [
            {"party": n, "encoded_width": w, "columns": part.params.get("columns", {}).get(n)}
            for n, w in zip(part.party_names, part.widths(), strict=True)
        ],
        "partition": {k: v for k, v in part.describe().items() if k != "blocks"},
        "options": {k: v for k, v in opts.items() if k != "file_sha256"},
    }
    return report, ds, part


def party_data_report(party_data: str, id_column: str, data_options: dict[str, Any]) -> dict[str, Any]:
    """``vflbench inspect --party-data``: each party file's rows, columns and encoded width, and the
    intersection sizes, computed in the clear on this machine (plain alignment: the IDs are compared
    here, not by PSI). A file without the target is encoded on the labelled samples it holds."""
    from ..data.alignment import DEFAULTS, load_aligned, parse_party_data, read_party

    files = parse_party_data(party_data)
    opts = {**DEFAULTS, **data_options, "id": id_column, "align": "plain"}
    if not str(opts.get("target", "")).strip():
        from ..core.errors import VFLBenchError

        raise VFLBenchError("Give the label column: --data-opt target=COLUMN (the file that has it gives the samples).")
    frames = {n: read_party(p, id_column) for n, p in files}
    ds = load_aligned("aligned:" + party_data, opts)
    al = ds.preprocessing["alignment"]
    parties = []
    for (n, p), w in zip(files, ds.party_widths, strict=True):
        df = frames[n]
        parties.append(
            {
                "party": n,
                "file": p,
                "rows": int(len(df)),
                "columns": [c for c in df.columns if c != id_column],
                "encoded_width": int(w),
                "holds_samples": int(al["held_per_party"][n]),
            }
        )
    return {
        "computed": "in the clear, locally (plain alignment on this machine; a run with --align psi finds the same "
        "sets privately)",
        "id_column": id_column,
        "target": opts["target"],
        "parties": parties,
        "intersection": {k: al[k] for k in ("samples", "held_by_all", "held_by_none")},
        "held_per_party": al["held_per_party"],
        "rows_train": al["rows_train"],
        "rows_test": al["rows_test"],
    }


def mask_report(
    dataset: str,
    data_options: dict[str, Any],
    parties: int,
    partitioner: str | None,
    part_options: dict[str, Any],
    seed: int,
    missing: str,
    split: str,
    granularity: str,
    batch_size: int,
    all_missing: str,
    labeled: int | str | None,
    aligned: int,
    corrupt: str = "none",
    misalign: str = "none",
):
    """(statistics, masks, prepared data) of the masks a run with these settings draws; with ``corrupt`` or
    ``misalign``, also which rows and parties have a block present but wrong (``stats["wrong"]``), drawn as the run
    draws them."""
    from ..data.wrong_blocks import corrupt_spec, misalign_spec

    corrupt, misalign = corrupt_spec(corrupt), misalign_spec(misalign)  # validate before loading data
    from ..data.missingness import mask_stats, parse_mechanism
    from ..data.preparation import draw_masks, prepare

    parse_mechanism(missing)  # validate before loading data
    prep = prepare(dataset, data_options, parties, partitioner, part_options, seed)
    m = draw_masks(
        prep,
        missing,
        split=split,
        granularity=granularity,
        batch_size=batch_size,
        all_missing=all_missing,
        labeled=labeled,
        aligned=aligned,
    )
    stats = mask_stats(m.observed)
    stats["info"] = m.info
    stats["partition"] = {k: v for k, v in prep.partition.describe().items() if k != "blocks"}
    stats["parties"] = prep.partition.party_names
    if not (corrupt.none and misalign.none):
        stats["wrong"] = wrong_report(prep, corrupt, misalign, split, m.observed)
    return stats, m, prep


def wrong_report(prep, corrupt, misalign, split: str, observed, first: int = 10) -> dict[str, Any]:
    """Which rows and parties ``corrupt`` and ``misalign`` make wrong in ``split`` (as a run draws them): the rate a
    party, the rows with a wrong block, those a model reads (wrong and observed), and the first rows affected with
    their wrong parties and, for a misaligned block, the row it came from."""
    import numpy as np

    from ..data.preparation import wrong_blocks

    k = prep.partition.n_parties
    for spec in (corrupt, misalign):
        if not spec.none:
            spec.eligible(k)
    _, w = wrong_blocks(prep, corrupt, misalign, split)
    rows = np.flatnonzero(w.affected.any(1))[:first]
    return {
        "corrupt": str(corrupt),
        "misalign": str(misalign),
        "corrupted_rate_per_block": w.corrupted.mean(0).round(4).tolist(),
        "misaligned_rate_per_block": w.misaligned.mean(0).round(4).tolist(),
        "rows_with_a_wrong_block": int(w.affected.any(1).sum()),
        "wrong_and_observed_rate_per_block": (w.affected & observed).mean(0).round(4).tolist(),
        "first_rows": [
            {
                "row": int(r),
                "corrupted": np.flatnonzero(w.corrupted[r]).tolist(),
                "misaligned": {int(p): int(w.source[r, p]) for p in np.flatnonzero(w.misaligned[r])},
            }
            for r in rows
        ],
        **({"near_key": w.info["near_key"]} if "near_key" in w.info else {}),
    }


def party_loss(c) -> str:
    """What a lost party does to a run of method ``c`` (vflbench.runs.faults): "survives", "survives with OPT=VALUE"
    (an option choice that lets it), or "stops: why"."""
    from ..runs.faults import loss_refusal

    defaults = {o.name: o.default for o in c.option_specs}
    why = loss_refusal(c, defaults, {})
    if why is None:
        return "survives"
    for o in c.option_specs:
        for choice in o.choices or ():
            if choice != o.default and loss_refusal(c, {**defaults, o.name: choice}, {}) is None:
                return f"survives with {o.name}={choice}"
    return f"stops: {why}"


def method_rows() -> list[dict[str, Any]]:
    """Every registered method: names, paper, stages, options, and whether a --mechanism can wrap it."""
    from ..core.role import refusal
    from ..methods import METHODS

    rows = []
    for name in METHODS:
        c = METHODS.get(name)
        rows.append(
            {
                "name": name,
                "display": c.display,
                "paper": c.paper,
                "hp_key": c.hp_key,
                "f1_rule": c.f1_rule,
                "stages": [{"name": s.name, "samples": s.samples, "labels": s.labels} for s in c.stages],
                "options": [o.describe() for o in c.option_specs],
                "mechanisms": c.boundary_refusal is None,
                "boundary_refusal": c.boundary_refusal,
                "sums_at_server": c.sums_at_server,
                "processes": refusal(c) is None,
                "runtime_refusal": refusal(c),
                "party_loss": party_loss(c),
            }
        )
    return rows
