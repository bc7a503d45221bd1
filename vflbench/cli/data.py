"""Commands about data: `datasets`, `data fetch`, `masks` (what a partition and a mechanism draw), `inspect`
(what a loader inferred from a table) and `audit` (the suite's leakage audit)."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from ..core.errors import VFLBenchError
from ..runs.settings import field_option, number, parse_kv
from .app import (
    DATA_OPT,
    PART_OPT,
    PARTIES_OPT,
    PARTITIONER_OPT,
    app,
    console,
    data_app,
    friendly,
)


@app.command()
@friendly
def datasets(fmt: str = typer.Option("table", "--format", help="table | json")):
    """List the registered datasets and whether each is available locally (or in the mirror)."""
    from ..data.datasets import DATASETS

    rows = []
    for name in DATASETS:
        spec = DATASETS.get(name)
        i = spec.info
        rows.append(
            {
                "name": name,
                "task": f"{i.n_classes}-class classification",
                "kind": i.kind,
                "shape": list(i.shape),
                "classes": i.n_classes,
                "source": i.source,
                "license": i.license,
                "available": spec.available(),
                "options": spec.defaults,
            }
        )
    if fmt == "json":
        print(json.dumps(rows, indent=2))
        return
    if fmt != "table":
        raise VFLBenchError(f"Unknown format '{fmt}'. Choices: table, json.")
    t = Table(title="vflbench datasets")
    for col in ("name", "kind", "shape", "classes", "available", "source", "license"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["name"],
            r["kind"],
            "x".join(map(str, r["shape"])),
            str(r["classes"]),
            "[green]yes[/]" if r["available"] else "[red]no[/]",
            r["source"],
            r["license"],
        )
    console.print(t)


@data_app.command("fetch")
@friendly
def data_fetch(name: str = typer.Argument(..., help="dataset name (see `vflbench datasets`)")):
    """Download a dataset from its official source (or copy it from $VFLBENCH_DATA_MIRROR) and verify it."""
    from ..data.datasets import DATASETS

    spec = DATASETS.get(name)
    sums = spec.fetch(download=True)
    console.print(f"[green]{name}[/] ready under {spec.ds_dir()}")
    for f, s in sums.items():
        console.print(f"  {f}  sha256 {s}")


@app.command()
@friendly
def audit(
    tables: list[str] | None = typer.Argument(None, help="suite tables (default: every one of experiments/suite/)"),
    out: str = typer.Option("results/audit", help="folder for audit.csv, tables.csv and audit.md"),
    sample: int = typer.Option(20_000, help="at most this many training rows a table are screened"),
    verdicts_only: bool = typer.Option(
        False, "--verdicts-only", help="screen nothing: re-read the tables' verdicts into OUT's audit and its audit.md"
    ),
):
    """The leakage audit of the suite's tables: each column alone (cross-validated AUROC, or accuracy lift for 3+
    classes: a post-outcome column or a proxy of the label stands out), each repeated-level column as an entity
    (leave-one-out accuracy from the other rows of its level: a panel ID under a row-wise split), and the test rows
    equal to a training row; each flagged column with its verdict from the table's YAML (audit:, group:)."""
    from ..data.datasets.suite import suite_names
    from ..results.leakage import audit_suite, refresh_verdicts
    from .app import out_path

    if sample < 100:
        raise VFLBenchError(f"--sample {sample}: screen at least 100 rows a table.")
    folder = out_path(out)
    if verdicts_only:
        audit_rows = refresh_verdicts(folder)
    else:
        audit_rows, _ = audit_suite(list(tables or suite_names()), folder, sample, say=console.print)
    flagged = audit_rows[audit_rows["flag_alone"] | audit_rows["flag_entity"]]
    left = int((flagged["verdict"] == "").sum())
    console.print(f"{len(flagged)} flagged column(s), {left} without a verdict -> {folder / 'audit.md'}")


@app.command()
@friendly
def masks(
    dataset: str = typer.Option(..., help="dataset name"),
    parties: int = PARTIES_OPT,
    partitioner: str | None = PARTITIONER_OPT,
    missing: str = typer.Option(
        "mcar:0.1", help="missingness spec, e.g. mcar:0.5, mcar-beta:2,2, mar1, mar2, mnar:0.7"
    ),
    granularity: str = typer.Option("sample", help="sample | batch"),
    batch_size: int = typer.Option(128, help="batch size for per-batch masks"),
    all_missing: str = typer.Option("keep", help="keep | resample"),
    split: str = typer.Option("train", help="train | test"),
    seed: int = typer.Option(0, help="run seed"),
    labeled: str | None = typer.Option(
        None, metavar="N|all", help="labeled training samples (FALSE-VFL); 'all' labels every one, with no draw"
    ),
    aligned: int = typer.Option(0, help="fully aligned reserve inside the labeled set"),
    data_opt: list[str] | None = DATA_OPT,
    part_opt: list[str] | None = PART_OPT,
    corrupt: str = typer.Option(
        "none", help="blocks present but corrupted, as --train-corrupt: gauss:RATE:SEVERITY, stuck:RATE, scale:RATE:F"
    ),
    misalign: str = typer.Option(
        "none", help="blocks present but misaligned, as --train-misalign: permute:RATE, near:RATE"
    ),
    fmt: str = typer.Option("table", "--format", help="table | json"),
):
    """Draw masks exactly as a run would and print their realised statistics; with --corrupt or --misalign, also which
    rows and parties have a block present but wrong (drawn as a run draws them for that split)."""
    if fmt not in ("table", "json"):
        raise VFLBenchError(f"Unknown format '{fmt}'. Choices: table, json.")
    if split not in ("train", "test"):
        raise VFLBenchError(f"Unknown split '{split}'. Choices: train, test.")
    from ..results.inspection import mask_report
    from ..runs.settings import SETTINGS

    if labeled is not None:
        labeled = SETTINGS["labeled"].parse(labeled)
    SETTINGS["labeled"].check({"labeled": labeled, "aligned": aligned}, None)  # a run's refusals (e.g. all + aligned)
    stats, m, prep = mask_report(
        dataset,
        parse_kv(data_opt, "--data-opt"),
        parties,
        partitioner,
        parse_kv(part_opt, "--part-opt"),
        seed,
        missing,
        split,
        granularity,
        batch_size,
        all_missing,
        labeled,
        aligned,
        corrupt,
        misalign,
    )
    if fmt == "json":
        print(json.dumps(stats, indent=2))
        return
    console.print(
        f"[bold]{dataset}[/] {split} split: n={stats['n']}, K={parties}, partitioner={prep.partition.name}, "
        f"missing={missing} ({granularity})"
    )
    t = Table(title="observed rate per party")
    for name in prep.partition.party_names:
        t.add_column(name, justify="right")
    t.add_row(*[f"{r:.4f}" for r in stats["observed_rate_per_block"]])
    console.print(t)
    console.print(
        f"fully observed: {stats['fully_observed_fraction']:.4f}   all-missing samples: {stats['all_missing_count']}  "
        f" mean observed blocks: {stats['mean_observed_blocks']:.3f}   resampled: {m.info['resampled']}"
    )
    if "p_miss_per_block" in m.info:
        console.print("drawn p_miss per block: " + ", ".join(f"{p:.3f}" for p in m.info["p_miss_per_block"]))
    pt = Table(title="most frequent patterns (1 = observed)")
    pt.add_column("pattern")
    pt.add_column("count", justify="right")
    pt.add_column("fraction", justify="right")
    for p in stats["top_patterns"]:
        pt.add_row(p["pattern"], str(p["count"]), f"{p['fraction']:.4f}")
    console.print(pt)
    if "wrong" in stats:
        _print_wrong(stats["wrong"], prep.partition.party_names)


def _print_wrong(w: dict, names: list[str]) -> None:
    t = Table(title=f"blocks present but wrong: corrupt {w['corrupt']}, misalign {w['misalign']} (rate per party)")
    t.add_column("")
    for name in names:
        t.add_column(name, justify="right")
    t.add_row("corrupted", *[f"{r:.4f}" for r in w["corrupted_rate_per_block"]])
    t.add_row("misaligned", *[f"{r:.4f}" for r in w["misaligned_rate_per_block"]])
    t.add_row("wrong and observed", *[f"{r:.4f}" for r in w["wrong_and_observed_rate_per_block"]])
    console.print(t)
    console.print(f"rows with a wrong block: {w['rows_with_a_wrong_block']}")
    if "near_key" in w:
        console.print(
            f"near-miss key: the label party's feature {w['near_key']['column']} ({w['near_key']['levels']} values)"
        )
    ft = Table(title="first affected rows")
    for c in ("row", "corrupted parties", "misaligned parties <- source row"):
        ft.add_column(c)
    for r in w["first_rows"]:
        mis = ", ".join(f"{p} <- {src}" for p, src in r["misaligned"].items())
        ft.add_row(str(r["row"]), ", ".join(map(str, r["corrupted"])) or "-", mis or "-")
    console.print(ft)


@app.command()
@friendly
def inspect(
    dataset: str | None = typer.Argument(None, help="a dataset name, csv:PATH or openml:ID (or --party-data)"),
    data_opt: list[str] | None = DATA_OPT,
    partitioner: str | None = PARTITIONER_OPT,
    part_opt: list[str] | None = PART_OPT,
    parties: int | None = typer.Option(None, help="number of parties K (default: the parties file's, else 4)"),
    party_data: str | None = field_option("party_data", default=None),
    id_column: str = typer.Option("id", "--id-column", help="the ID column of the --party-data files"),
    fmt: str = typer.Option("table", "--format", help="table | json"),
):
    """What the loader inferred from a table: column types, classes and their counts, missing cells,
    and the encoded width per party. Fix options here before a long sweep. With --party-data: each
    party file's rows, columns and encoded width, and the intersection sizes (computed in the clear,
    locally), before any training."""
    from ..results.inspection import dataset_report

    if fmt not in ("table", "json"):
        raise VFLBenchError(f"Unknown format '{fmt}'. Choices: table, json.")
    if (dataset is None) == (party_data is None):
        raise VFLBenchError("Give a dataset (a name, csv:PATH or openml:ID) or --party-data name=path,..., not both.")
    if party_data is not None:
        _inspect_party_data(party_data, id_column, parse_kv(data_opt, "--data-opt"), fmt)
        return
    report, ds, part = dataset_report(
        dataset,
        parse_kv(data_opt, "--data-opt"),
        partitioner,
        {k: number(v) for k, v in parse_kv(part_opt, "--part-opt").items()},
        parties,
    )
    parties, pre = len(part.party_names), ds.preprocessing
    if fmt == "json":
        print(json.dumps(report, indent=2, default=str))
        return
    rows = report["rows"]
    console.print(
        f"[bold]{dataset}[/]: {rows.get('read', rows['train'] + rows['test'])} rows"
        + (
            f" ({rows['dropped_missing_target']} without a target, dropped)"
            if rows.get("dropped_missing_target")
            else ""
        )
        + f" -> {rows['train']} train / {rows['test']} test; {ds.x_train.shape[1]} encoded features; "
        + ", ".join(f"{k} sha256 {v[:12]}" for k, v in ds.checksums.items())
    )
    if report["columns"]:
        t = Table(
            title=f"columns (target: {pre.get('target')}; dropped: "
            f"{', '.join(pre.get('dropped_columns', [])) or 'none'})"
        )
        for c in ("column", "kind", "missing cells", "encoded width", "party"):
            t.add_column(c, justify="right" if c in ("missing cells", "encoded width") else "left")
        for r in report["columns"]:
            kind = r["kind"]
            if r.get("encoding") == "embedding":  # codes a bottom model embeds: say how (one-hot is the default)
                kind += f" ({r['levels']:,} levels: embedded, {r['table_rows']:,} x {r['dim']})"
            t.add_row(
                r["column"],
                kind,
                str(r["missing"]),
                str(r["encoded_width"]),
                r["party"] or "[yellow]none (dropped)[/]",
            )
        console.print(t)
    t = Table(title="classes")
    for c in ("class", "index", "train", "test", "positive"):
        t.add_column(c, justify="left" if c == "class" else "right")
    for r in report["classes"]:
        t.add_row(r["class"], str(r["index"]), str(r["train"]), str(r["test"]), "yes" if r["positive"] else "")
    console.print(t)
    if report["missing_cells"] is not None:
        console.print(
            f"missing cells: {report['missing_cells']} (imputed on the training split: numeric median, categorical "
            "most frequent)"
        )
    t = Table(title=f"parties ({part.name}, K={parties})")
    for c in ("party", "encoded width", "columns"):
        t.add_column(c, justify="right" if c == "encoded width" else "left")
    for r in report["parties"]:
        t.add_row(r["party"], str(r["encoded_width"]), ", ".join(r["columns"]) if r["columns"] else "")
    console.print(t)


def _inspect_party_data(party_data: str, id_column: str, data_options: dict, fmt: str) -> None:
    from ..results.inspection import party_data_report

    rep = party_data_report(party_data, id_column, data_options)
    if fmt == "json":
        print(json.dumps(rep, indent=2, default=str))
        return
    t = Table(title=f"party files (ID column {id_column!r}, target {rep['target']!r})")
    for c in ("party", "file", "rows", "columns", "encoded width", "holds samples"):
        t.add_column(c, justify="right" if c in ("rows", "encoded width", "holds samples") else "left")
    for p in rep["parties"]:
        cols = ", ".join(p["columns"][:6]) + (f" (+{len(p['columns']) - 6})" if len(p["columns"]) > 6 else "")
        t.add_row(
            p["party"], str(p["file"]), f"{p['rows']:,}", cols, str(p["encoded_width"]), f"{p['holds_samples']:,}"
        )
    console.print(t)
    i = rep["intersection"]
    console.print(
        f"intersection, computed in the clear, locally: {i['samples']:,} labelled samples ({rep['rows_train']:,} "
        "train / "
        f"{rep['rows_test']:,} test); held by every party {i['held_by_all']:,}; by no party "
        f"{i['held_by_none']:,}",
        markup=False,
        highlight=False,
    )
