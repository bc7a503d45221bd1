"""The fields of a run's structure (dataset, method, partitioner, protocol, their option dicts, hyper-parameters,
model), each declared as a Field."""

from __future__ import annotations

from typing import Any

from ...core.errors import VFLBenchError
from ..schema import (
    Field,
    declare_field,
    number,
    parse_int_list,
    parse_kv,
)


def _pairs(items, flag):
    return parse_kv(items, flag)


def _number_pairs(items, flag):
    return {k: number(v) for k, v in parse_kv(items, flag).items()}


def _protocol_name(value: Any, flag: str = "--protocol") -> str:
    return "false" if value is False else str(value)  # YAML 1.1 reads an unquoted `protocol: false` as a boolean


def _parties_of_files(text: str, settings: dict[str, Any]) -> None:
    """``--party-data`` settles the party count (one file per party); an explicit ``--parties`` must agree."""
    from ...data.alignment import parse_party_data

    k = len(parse_party_data(text))
    given = settings.get("parties")
    if given is not None and str(given).strip() != str(k):
        raise VFLBenchError(
            f"--parties {given} conflicts with --party-data, which names {k} party files; drop --parties (the files "
            "give the count)."
        )
    settings["parties"] = k


declare_field(
    Field(
        "dataset",
        "dataset name (see `vflbench datasets`), csv:PATH or openml:ID (or --party-data) [required]",
        yaml="datasets",
        levels=("top",),
    )
)
declare_field(
    Field(
        "party_data",
        "parties' own files keyed by an ID column, name=path,... (e.g. party0=a.csv,party1=b.csv); the file with "
        "--data-opt target=COLUMN gives the labels; a block whose party lacks the sample's ID is missing "
        "(docs/RUNTIME.md)",
        into="dataset",
        yaml=None,
        levels=(),
        metavar="NAME=PATH,...",
        settle=_parties_of_files,
    )
)
declare_field(
    Field("id_column", "the ID column of the --party-data files", into="data_options", key="id", yaml=None, levels=())
)


def _align(value: Any, flag: str) -> str:
    v = str(value).strip().lower()
    if v not in ("psi", "plain"):
        raise VFLBenchError(f"{flag} takes psi or plain, got {value!r}.")
    return v


declare_field(
    Field(
        "align",
        "how --party-data rows are aligned: psi (private set intersection) | plain (IDs in clear; not private)",
        into="data_options",
        key="align",
        yaml=None,
        levels=(),
        to_value=_align,
    )
)
declare_field(Field("method", "method name (see `vflbench methods`)", required=True, yaml="methods"))
declare_field(
    Field(
        "partitioner", "contiguous | random | importance | correlation | columns | tiles | grid (default by data kind)"
    )
)
declare_field(
    Field(
        "protocol",
        "clean (default) | compat (the LASER-VFL authors' code) | false (the FALSE-VFL paper's baselines)",
        default="clean",
        levels=("top",),
        to_value=_protocol_name,
        record=lambda c: c["protocol"]["name"],
    )
)
for _hp_name, _kind, _help in (
    ("epochs", int, "override the preset's epochs (every stage)"),
    ("lr", float, "override the preset's learning rate"),
    ("batch_size", int, "override the preset's batch size"),
    ("optimizer", str, "adam | sgd"),
    ("weight_decay", float, "coupled L2 weight decay"),
    ("momentum", float, "SGD momentum"),
    ("schedule", str, "none | cosine"),
):
    declare_field(Field(_hp_name, _help, kind=_kind, into="hp", yaml=None, levels=()))
declare_field(
    Field(
        "hp",
        "hyper-parameter key=value; stage.key=value for one stage (repeatable)",
        kind=list,
        flag="--hp",
        metavar="KEY=VALUE",
    )
)
declare_field(
    Field(
        "stage_hp",
        "per-stage hyper-parameters (on the command line: --hp stage.key=value)",
        flag=None,
        record=lambda c: {k: dict(v) for k, v in c["stage_hp"].items()},
    )
)
declare_field(
    Field(
        "method_options",
        "method option key=value (repeatable; `vflbench methods` lists them)",
        kind=list,
        flag="--method-opt",
        metavar="KEY=VALUE",
        to_value=_pairs,
    )
)
declare_field(
    Field("arch", "extractor: mlp | cnn-small | resnet18 | resnet18-half", into="model", yaml=None, levels=())
)
declare_field(
    Field(
        "hidden",
        "MLP hidden sizes, e.g. 10,10",
        into="model",
        yaml=None,
        levels=(),
        to_value=lambda text, flag: parse_int_list(text, flag),
    )
)
declare_field(Field("cut", "representation size", kind=int, into="model", yaml=None, levels=()))
declare_field(
    Field(
        "model",
        "model overrides (arch, hidden, cut, head_hidden; on the command line: --arch, --hidden, --cut)",
        flag=None,
    )
)
# a test keeps it equal to the loader's
TABLE_OPTIONS = (
    "target, drop, test, test_size, split_seed, scaler, categorical, positive, sep, coerce, keep, group, group_input, "
    "embed_above, "
    "embed_dim, hash_buckets, min_count"
)
declare_field(
    Field(
        "data_options",
        "dataset option key=value (repeatable). Your own tables (csv:PATH, openml:ID) take: "
        + TABLE_OPTIONS
        + "; a registered dataset's options: `vflbench datasets --format json`",
        kind=list,
        flag="--data-opt",
        metavar="KEY=VALUE",
        to_value=_pairs,
        levels=("dataset",),
    )
)
declare_field(
    Field(
        "partition_options",
        "partitioner option key=value, e.g. alpha=0.5 (repeatable)",
        kind=list,
        flag="--part-opt",
        metavar="KEY=VALUE",
        to_value=_number_pairs,
    )
)
declare_field(
    Field(
        "protocol_options",
        "protocol option key=value, e.g. shuffle=false (repeatable)",
        kind=list,
        flag="--protocol-opt",
        metavar="KEY=VALUE",
        to_value=_pairs,
        record=lambda c: {k: v for k, v in c["protocol"].items() if k != "name"},
    )
)
