"""Command-line interface (Typer). Every command maps user errors to one line and exit status 2."""

from __future__ import annotations

import errno
import functools
import json
import os
import sys
import typing
import warnings
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from .errors import VFLBenchError
from .limits import check as check_limit
from .settings import field_option, number, parse_int_list, parse_kv
from .textlists import split_items

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Reproducible VFL benchmarks with missing feature blocks."
)
data_app = typer.Typer(no_args_is_help=True, help="Manage raw dataset files.")
app.add_typer(data_app, name="data")


@app.callback()
def _main(
    plugin: list[Path] | None = typer.Option(
        None, "--plugin", help="a Python file that registers a method (repeatable; also $VFLBENCH_PLUGINS)"
    ),
):
    """Reproducible VFL benchmarks with missing feature blocks."""
    if plugin:
        from . import plugins

        try:
            for p in plugin:
                plugins.add(p)
        except VFLBenchError as e:
            _error(str(e))
            raise typer.Exit(2) from None


console = Console(soft_wrap=True, emoji=False)  # no emoji codes: '1:100:5' must print as typed
err_console = Console(stderr=True, soft_wrap=True, emoji=False)
_show_warning = warnings.showwarning


def _warning_line(message, category, filename, lineno, file=None, line=None):
    """vflbench's own warnings as one yellow line on stderr; others as Python prints them."""
    from rich.markup import escape

    from .errors import VFLBenchWarning

    if issubclass(category, VFLBenchWarning):
        err_console.print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
    else:
        _show_warning(message, category, filename, lineno, file, line)


warnings.showwarning = _warning_line


def _error(msg: str) -> None:
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)


def friendly(fn):
    """Turn VFLBenchError (and a few predictable OS errors) into one clear line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except VFLBenchError as e:
            _error(str(e))
            raise typer.Exit(getattr(e, "exit_code", 2)) from None
        except (PermissionError, IsADirectoryError, NotADirectoryError, FileNotFoundError) as e:
            what = {
                PermissionError: "permission denied",
                IsADirectoryError: "is a directory",
                NotADirectoryError: "a part of the path is not a directory",
                FileNotFoundError: "no such file or directory",
            }[type(e)]
            _error(f"{e.filename or ''}: {what}; check the path and its permissions.")
            raise typer.Exit(2) from None
        except UnicodeDecodeError as e:
            _error(f"a file is not text (UTF-8): {e.reason} at byte {e.start}; give a YAML/CSV text file.")
            raise typer.Exit(2) from None
        except OSError as e:
            if e.errno == errno.ENOSPC:
                _error(f"the disk is full while writing {e.filename or 'output'}; free space or use another --out.")
                raise typer.Exit(2) from None
            raise
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None

    return wrapper


def with_settings(fn, required: bool = True):
    """Add one option per declared run field and run setting (:mod:`vflbench.settings`) to a command
    that takes them as ``**given``: the schema is the only place their flags are written."""
    import inspect as _inspect

    from .settings import cli_parameters, field_parameters

    sig = _inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not _inspect.Parameter.VAR_KEYWORD]
    hints = typing.get_type_hints(fn)  # real types, not the strings of `from __future__ import annotations`
    params = [
        p.replace(kind=_inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation)) for p in params
    ]
    fn.__signature__ = sig.replace(parameters=[*field_parameters(required), *cli_parameters(), *params])
    return fn


# options shared by `masks` and `run` (the same flags mean the same thing in both)
PARTIES_OPT = typer.Option(4, help="number of parties K")
PARTITIONER_OPT = field_option("partitioner")
DATA_OPT = field_option("data_options")
PART_OPT = field_option("partition_options")


@app.command()
@friendly
def datasets(fmt: str = typer.Option("table", "--format", help="table | json")):
    """List the registered datasets and whether each is available locally (or in the mirror)."""
    from .datasets import DATASETS

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
    from .datasets import DATASETS

    spec = DATASETS.get(name)
    sums = spec.fetch(download=True)
    console.print(f"[green]{name}[/] ready under {spec.ds_dir()}")
    for f, s in sums.items():
        console.print(f"  {f}  sha256 {s}")


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
    labeled: int | None = typer.Option(None, help="number of labeled training samples (FALSE-VFL)"),
    aligned: int = typer.Option(0, help="fully aligned reserve inside the labeled set"),
    data_opt: list[str] | None = DATA_OPT,
    part_opt: list[str] | None = PART_OPT,
    fmt: str = typer.Option("table", "--format", help="table | json"),
):
    """Draw masks exactly as a run would and print their realised statistics."""
    if fmt not in ("table", "json"):
        raise VFLBenchError(f"Unknown format '{fmt}'. Choices: table, json.")
    if split not in ("train", "test"):
        raise VFLBenchError(f"Unknown split '{split}'. Choices: train, test.")
    from .inspection import mask_report

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
    from .inspection import dataset_report

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
            t.add_row(
                r["column"],
                r["kind"],
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
    from .inspection import party_data_report

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


def _stage_progress(bar, label: str):
    """A progress bar per training stage: a trainer callback (imported lazily, so that the CLI
    answers bad input without loading torch)."""
    from .training import Callback

    class StageProgress(Callback):
        task = None

        def on_prepared(self, inputs):
            align = inputs.prep.data.preprocessing.get("alignment")
            if (
                align is not None
            ):  # one line per party: how many samples it holds (the warnings say when one holds none)
                from .alignment import holding_report

                for line in holding_report(align)[0]:
                    bar.console.print(line, markup=False, highlight=False)

        def on_stage_start(self, loop):
            name = f" [{loop.stage.name}]" if len(loop.method.stages) > 1 else ""
            self.task = bar.add_task(f"{label}{name}", total=loop.epochs, loss="-")

        def on_epoch_end(self, loop):
            bar.update(self.task, completed=loop.epoch + 1, loss=f"{loop.epoch_loss:.4f}")

    return StageProgress()


def out_path(text: str | None, flag: str = "--out") -> Path | None:
    """An output path given on the command line; an empty one is refused (it would mean the
    working directory without saying so)."""
    if text is None:
        return None
    if not str(text).strip():
        raise VFLBenchError(f"{flag} is empty; give a directory or file path (use '.' for the working directory).")
    return Path(text)


@app.command()
@friendly
@with_settings
def run(
    device: str = typer.Option(
        "auto",
        help="auto (per run: image extractors on CUDA when present, tabular MLPs on the CPU; "
        "the manifest says why) | cpu | cuda",
    ),
    out: str = typer.Option("results/runs", help="output directory"),
    quiet: bool = typer.Option(False, "--quiet", metavar="", help="no progress bar"),
    threads: int | None = typer.Option(
        None, help="torch intra-op threads [default: 1 for tabular models, all cores for images]"
    ),
    **given,
):
    """Train one method on one dataset for one seed and evaluate it under every test setting."""
    out = out_path(out)
    if threads is not None:
        if threads < 1:
            raise VFLBenchError(f"--threads must be >= 1, got {threads}.")
        check_limit("threads", threads)
        os.environ["VFLBENCH_THREADS"] = str(threads)
    from .config import RunConfig, resolve
    from .federation import set_federated
    from .settings import request

    set_federated(
        str(given.get("runtime") or "").strip().lower() == "processes"
    )  # then the parties' own files are read by their own processes
    cfg = RunConfig(**request(given))  # the run fields and settings, as declared in vflbench.settings
    dataset, method = cfg.dataset, cfg.method
    resolved = resolve(cfg)  # every check before the heavy imports below
    from .outputs import check_output_dir, write_outputs
    from .pipeline import execute
    from .timing import process_start

    check_output_dir(out)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    if resolved.runtime == "processes":
        from .runtime import check

        check(resolved)  # before the progress bar: a refused run prints one line
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=quiet,
        transient=False,
    ) as bar:
        rows, manifest = execute(
            resolved, device=device, callbacks=[_stage_progress(bar, f"{method} on {dataset} (seed {resolved.seed})")]
        )
    run_dir = write_outputs(out, rows, manifest, process_start(), "process start")
    t = Table(
        title=f"{resolved.method_display} | {dataset} | K={resolved.parties} | train {resolved.train_missing} | "
        f"{resolved.protocol.name} | seed {resolved.seed}"
    )
    t.add_column("test setting")
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    for m in metrics:
        t.add_column(m, justify="right")
    t.add_column("counted", justify="right")
    for s in resolved.test_missing:
        vals = {r["metric"]: r for r in rows if r["test_missing"] == s}
        t.add_row(
            s,
            *[f"{vals[m]['value']:.2f}" for m in metrics],
            f"{vals[metrics[0]]['n_counted']}/{vals[metrics[0]]['n_test']}",
        )
    console.print(t)
    tm = manifest["timings"]
    ex = manifest["extras"]
    console.print(
        f"train {tm['train_s']:.1f}s ({tm['seconds_per_epoch']:.3f}s/epoch), eval {tm['eval_s']:.2f}s, "
        f"{manifest['parameters']['total']} parameters, "
        f"sent up {ex['comm_bytes_up'] / 1e6:.2f} MB / down {ex['comm_bytes_down'] / 1e6:.2f} MB in training -> "
        f"{run_dir}"
    )
    if "runtime" in manifest:
        rt = manifest["runtime"]
        m = rt["measured"]
        console.print(
            f"runtime processes ({rt['world_size'] - 1} parties + server, gloo): measured on the wire up "
            f"{m['bytes_train_up'] / 1e6:.2f} MB / down "
            f"{m['bytes_train_down'] / 1e6:.2f} MB in training, "
            f"{'equal to' if rt['measured_equals_accounted'] else 'DIFFERENT from'} the accounted; "
            f"{m['messages']} messages, {m['control_bytes']} control bytes; communication {tm['comm_s']:.1f}s of "
            f"{tm['train_s'] + tm['eval_s']:.1f}s"
        )
    if ex.get("accountant", "none") != "none":  # a private run (the accountant's module is heavy: scipy)
        from .accountant import describe

        for line in describe(ex):
            console.print(line, markup=False, highlight=False)


def _run_from(given: dict, run_file: Path | None):
    """The resolved run of a party or server command: the flags, or the run file the launcher wrote."""
    from .config import RunConfig, config_from_manifest, resolve
    from .federation import set_federated
    from .settings import request

    set_federated()  # this process may hold its own party file only (vflbench.alignment)
    if run_file is not None:
        try:
            cfg = config_from_manifest(json.loads(Path(run_file).read_text()))
        except (OSError, ValueError, KeyError) as e:
            raise VFLBenchError(f"--run-file {run_file}: not a run file written by vflbench ({e}).") from None
        return resolve(cfg)
    given = {
        **given,
        "runtime": given.get("runtime") or "processes",
    }  # a party or server process is the processes runtime
    return resolve(
        RunConfig(**request(given))
    )  # the same run flags as the server's (at least --dataset or --party-data, and --method)


RENDEZVOUS_OPT = typer.Option(..., help="tcp://HOST:PORT of the server (rank 0), the same for every process")
TIMEOUT_OPT = typer.Option(
    60.0, help="seconds to wait for the other processes (to join, or for a message) before stopping"
)
DEVICE_OPT = typer.Option(
    "auto",
    help="auto | cpu | cuda: auto takes the device the in-process run would (vflbench.devices); every process of a "
    "run must compute on the same one",
)


@app.command()
@friendly
@functools.partial(with_settings, required=False)
def party(
    rank: int = typer.Option(..., help="this party's index, 0 .. K-1 (its block of columns)"),
    rendezvous: str = RENDEZVOUS_OPT,
    timeout: float = TIMEOUT_OPT,
    run_file: Path | None = typer.Option(
        None, help="the resolved run as JSON (written by `vflbench run --runtime processes`), instead of flags"
    ),
    device: str = DEVICE_OPT,
    checkpoint_dir: Path = typer.Option(
        Path(".vflbench/checkpoints"),
        help="where this party checkpoints its state at every epoch boundary of a run that goes on without a lost "
        "party (PARTY.pt, overwritten)",
    ),
    rejoin: bool = typer.Option(
        False,
        "--rejoin",
        help="this party's process died: reload its checkpoint and ask the server to take it back at its next epoch "
        "boundary (docs/RUNTIME.md, 'Rejoin')",
    ),
    **given,
):
    """Run one party of a federation whose parties are processes: it keeps only its own block of
    columns and no label, and trains from the server's gradients. Give the same run flags as the server."""
    from .runtime import join

    check_limit("timeout", timeout)
    run = _run_from(given, run_file)
    from .pipeline import execute

    def joined():
        how = "rejoined" if rejoin else "joined"
        err_console.print(f"party {rank}: {how} run {run.key} ({run.parties} parties); training")

    measured = join(run, rank, rendezvous, execute, timeout, device, joined, rejoin, str(checkpoint_dir))
    err_console.print(
        f"party {rank}: sent {measured['bytes_train_up'] + measured['bytes_eval_up']} bytes up, received "
        f"{measured['bytes_train_down']} bytes of gradients in {measured['messages']} messages"
    )
    if (
        "secagg_key_fingerprint" in measured
    ):  # compare it with every other party's, out of band: a difference means substituted keys
        err_console.print(
            f"party {rank}: SecAgg public-key fingerprint {measured['secagg_key_fingerprint']} (every party must "
            "print the same)"
        )


@app.command()
@friendly
@functools.partial(with_settings, required=False)
def server(
    rendezvous: str = RENDEZVOUS_OPT,
    timeout: float = TIMEOUT_OPT,
    out: str = typer.Option("results/runs", help="output directory"),
    device: str = DEVICE_OPT,
    **given,
):
    """Run the server of a federation whose parties are processes (start `vflbench party` on each
    party's machine with the same flags): it holds the labels and the heads, and writes the results."""
    from .outputs import check_output_dir, write_outputs
    from .runtime import serve
    from .timing import process_start

    check_limit("timeout", timeout)
    outp = out_path(out)
    run = _run_from(given, None)
    check_output_dir(outp)
    from .pipeline import execute

    rows, manifest = serve(run, rendezvous, execute, timeout, device)
    run_dir = write_outputs(outp, rows, manifest, process_start(), "process start")
    console.print(f"{run.method_display} on {run.dataset}: {len(rows)} rows -> {run_dir}")


@app.command()
@friendly
def methods(fmt: str = typer.Option("table", "--format", help="table | json")):
    """List the registered methods: name, display name, paper, stages and options."""
    from .inspection import method_rows
    from .mechanism_spec import describe_mechanisms

    rows = method_rows()
    if fmt == "json":
        print(
            json.dumps(rows, indent=2)
        )  # the mechanisms' parameters: the table format, or vflbench.mechanism_spec.describe_mechanisms()
        return
    if fmt != "table":
        raise VFLBenchError(f"Unknown format '{fmt}'. Choices: table, json.")
    t = Table(
        title="vflbench methods (set options with --method-opt key=value; processes: runs with --runtime processes; "
        "lost party: whether a run goes on when a party is lost, docs/RUNTIME.md)"
    )
    for col in ("name", "display", "paper", "stages", "options", "--mechanism", "processes", "lost party"):
        t.add_column(col, no_wrap=col in ("name", "display", "processes"))
    for r in rows:
        opts = (
            "\n".join(
                f"{o['name']}={o['default']}"
                + (f" ({'|'.join(map(str, o['choices']))})" if "choices" in o else f" ({o['type']})")
                + (f" (default from protocol field {o['protocol_default']})" if "protocol_default" in o else "")
                + f": {o['help']}"
                for o in r["options"]
            )
            or "-"
        )
        stages = ", ".join(
            f"{s['name']} ({s['samples']}{'' if s['labels'] else ', labels hidden'})" for s in r["stages"]
        )
        from rich.markup import escape

        t.add_row(
            r["name"],
            r["display"],
            escape(r["paper"]),
            escape(stages),
            escape(opts),
            escape(
                "yes" + (" (+ --secagg masked)" if r["sums_at_server"] else "")
                if r["mechanisms"]
                else f"no: {r['boundary_refusal']}"
            ),
            "yes" if r["processes"] else "no",
            escape(r["party_loss"]),
        )  # why not: --format json (runtime_refusal), or the refusal of --runtime processes
    console.print(t)
    m = Table(title="privacy mechanisms at the party-to-server boundary (--mechanism NAME:key=value,...)")
    for col in ("name", "what", "parameters"):
        m.add_column(col)
    for r in describe_mechanisms():
        m.add_row(
            r["name"],
            r["help"],
            escape("\n".join(f"{k}={v['default']}: {v['help']}" for k, v in r["params"].items()) or "-"),
        )
    console.print(m)


@app.command()
@friendly
def tune(
    experiment: str = typer.Argument(..., help="experiment YAML (its datasets, methods, settings and hp)"),
    trials: int = typer.Option(..., "--trials", help="finished trials per method in all (a larger N adds the rest)"),
    out: str = typer.Option(..., "--out", help="folder for the study database, tuned.yaml and the summary"),
    storage: str | None = typer.Option(
        None, help="Optuna storage URL shared by several tuners [default: sqlite:///OUT/tuning.db]"
    ),
    seeds: str | None = typer.Option(
        None, help="tuning seeds, comma-separated (never a reporting seed) [default: 1000]"
    ),
    metric: str = typer.Option("accuracy", help="validation metric to maximise: accuracy | f1 | auprc"),
    val_split: float = typer.Option(0.2, help="share of the training samples held out for validation"),
    device: str = typer.Option("cpu", help="cpu | cuda | auto"),
):
    """Tune every method of an experiment with the same number of trials on a validation split (Optuna; test data
    never scored); writes OUT/tuned.yaml (a preset for --preset) and OUT/summary.md (docs/STATISTICS.md)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .textlists import split_items
    from .tuning import tune as run_tune

    if metric not in ("accuracy", "f1", "auprc"):
        raise VFLBenchError(f"--metric takes accuracy, f1 or auprc, got {metric!r}.")
    try:
        seed_list = [int(x) for x in split_items(seeds, "--seeds", "1000,1001")] if seeds else None
    except ValueError:
        raise VFLBenchError(f"--seeds takes integers, e.g. 1000,1001; got {seeds!r}.") from None

    class Bar:
        def start(self, total):
            self.p = Progress(
                TextColumn("tune"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=err_console,
            )
            self.p.start()
            self.t = self.p.add_task("", total=total)

        def advance(self, text):
            self.p.update(self.t, advance=1, description=text)

        def stop(self):
            self.p.stop()

    summary = run_tune(experiment, out_path(out), trials, storage, seed_list, metric, val_split, device, Bar())
    for st in summary["studies"]:
        console.print(f"{st['study']}: {st['trials']} trials, best {metric} {st['best_value']:.2f}", highlight=False)
    console.print(f"-> {out_path(out) / 'tuned.yaml'}, {out_path(out) / 'summary.md'}")


@app.command()
@friendly
def sweep(
    file: Path = typer.Argument(..., help="experiment YAML (see experiments/)"),
    datasets: str | None = typer.Option(None, help="comma-separated subset of the file's datasets"),
    methods: str | None = typer.Option(None, help="comma-separated subset of the file's methods"),
    seeds: str | None = typer.Option(None, help="comma-separated seeds overriding the file's"),
    workers: int | None = typer.Option(
        None, envvar="VFLBENCH_WORKERS", help="parallel worker processes [default: the number of cores]"
    ),
    threads: int | None = typer.Option(
        None, help="intra-op threads per run [default: 1 for tabular models, cores/workers for images]"
    ),
    pack: int = typer.Option(
        16,
        help="train up to N runs that differ only in their seed (and training missingness) together, as one "
        "vectorised model bank "
        "(tabular models of packable methods; others run alone); 1 turns packing off",
    ),
    train_missing: str | None = typer.Option(
        None, help="subset of the file's training settings, comma-separated (e.g. mcar:0.2,mar1)"
    ),
    quick: bool = typer.Option(
        False, "--quick", metavar="", help="smoke test: few epochs, first seed; output marked QUICK"
    ),
    out: str | None = typer.Option(
        None, help="output directory (default results/sweeps/<name>, results/quick/<name> with --quick)"
    ),
    executor: str = typer.Option("local", help="local | ray"),
    address: str | None = typer.Option(None, help="Ray cluster address (with --executor ray)"),
    device: str = typer.Option("auto", help="auto | cpu | cuda"),
    dry_run: bool = typer.Option(False, "--dry-run", metavar="", help="list what would run and exit"),
    force: bool = typer.Option(
        False, "--force", metavar="", help="share an output folder that holds another experiment's sweep"
    ),
    preset: str | None = typer.Option(
        None,
        help="hyper-parameter preset for every run in place of the file's (a name, or a YAML such as the "
        "tuned.yaml `vflbench tune` writes)",
    ),
):
    """Run an experiment grid in parallel; finished runs are skipped, so an interrupted sweep resumes.
    One sweep at a time per output folder (a second one stops at once)."""
    from .experiment import load_experiment
    from .sweep import FolderLock, check_same_experiment

    if workers is None:
        workers = os.cpu_count() or 1
    if workers < 1:
        raise VFLBenchError(f"--workers must be >= 1, got {workers}.")
    if threads is not None and threads < 1:
        raise VFLBenchError(f"--threads must be >= 1, got {threads}.")
    if pack < 1:
        raise VFLBenchError(f"--pack must be >= 1 (1 turns packing off), got {pack}.")
    check_limit("workers", workers)
    check_limit("pack", pack)
    if threads is not None:
        check_limit("threads", threads)
    if executor not in ("local", "ray"):
        raise VFLBenchError(f"Unknown executor '{executor}'. Choices: local, ray.")
    out = out_path(out)
    if device not in ("auto", "cpu", "cuda") or (device == "cuda" and executor == "local"):
        from .devices import choose_device

        choose_device(device)  # an unknown name, or no CUDA here: refused now, not once per run inside the workers
    if address is not None and executor != "ray":
        raise VFLBenchError("--address is the Ray cluster's address; it needs --executor ray.")
    ds = split_items(datasets, "--datasets", "credit,isolet") if datasets else None
    sd = parse_int_list(seeds, "--seeds", "0,1,2") if seeds is not None else None
    if sd is not None and len(set(sd)) != len(sd):
        raise VFLBenchError(f"--seeds lists a seed more than once ('{seeds}'); each seed must be unique.")
    tr = (
        [t.strip() for t in train_missing.split(";" if ";" in train_missing else ",") if t.strip()]
        if train_missing
        else None
    )
    ms = split_items(methods, "--methods", "laser,svfl") if methods else None
    exp = load_experiment(file, datasets=ds, seeds=sd, quick=quick, train_missing=tr, methods_subset=ms)
    if preset:  # recorded in the sweep's spec, so a resumed sweep must name the same preset
        from .presets import load_preset

        load_preset(preset)  # an unknown name or a bad file: refused now
        exp.spec = {**exp.spec, "preset": preset}
        for r in exp.runs:
            r.settings["preset"] = preset
    out = out or Path("results") / ("quick" if quick else "sweeps") / exp.name
    from .outputs import check_output_dir

    check_output_dir(out)
    check_same_experiment(exp, out, force)
    if dry_run:
        _sweep_body(exp, out, quick, workers, device, executor, address, dry_run=True, threads=threads, pack=pack)
        return
    with FolderLock(out):
        _sweep_body(exp, out, quick, workers, device, executor, address, dry_run=False, threads=threads, pack=pack)


def _sweep_body(exp, out, quick, workers, device, executor, address, dry_run, threads=None, pack=1):
    import time

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from .sweep import check_same_pack, execute_plan, finalize, plan, write_table

    p = plan(exp, out)
    p.pack = pack
    check_same_pack(p)
    if quick:
        console.print("[bold yellow]QUICK smoke run[/]: reduced epochs and seeds; numbers are not a reproduction.")
    for d, why in p.skipped.items():
        console.print(f"[yellow]skipping {d}[/]: {why}")
    for rid, why in p.damaged:
        console.print(f"[yellow]re-running {rid}[/]: {why}")
    if p.skipped and not p.run_ids:
        raise VFLBenchError(
            f"{exp.name}: every dataset was skipped ({', '.join(p.skipped)}), so nothing can run; fetch the data "
            "(`vflbench data fetch NAME`) or point VFLBENCH_DATA_MIRROR at an offline copy."
        )
    console.print(f"{exp.name}: {len(p.run_ids)} runs, {len(p.done)} already finished, {len(p.todo)} to run -> {out}")
    if pack > 1 and p.todo and executor == "local":
        from .sweep import packs

        grouped = [g for g in packs(p.todo, pack) if len(g) > 1]
        if grouped:
            console.print(
                f"  {sum(map(len, grouped))} of them in {len(grouped)} pack(s) of runs that differ only in their seed "
                "or training missingness (--pack 1: one at a time)"
            )
    if dry_run:
        for r in p.todo:
            user = ";".join(
                f"{k}={v}" for k, v in sorted(r.method_options.items()) if r.option_sources.get(k) == "user"
            )
            epochs = (
                "+".join(f"{name} {hp.epochs}" for name, hp in r.stage_hp.items())
                if len(r.stage_hp) > 1
                else str(r.hp.epochs)
            )
            from rich.markup import escape

            popts = ",".join(f"{k}={v}" for k, v in sorted(r.partition_options.items()) if k != "file_sha256")
            from .settings import columns as setting_columns

            user = ";".join(
                x for x in (user, setting_columns(r.settings).get("settings", "")) if x
            )  # options and run settings a user set
            console.print(
                escape(
                    f"  {r.dataset} {r.method}{f'[{user}]' if user else ''} K={r.parties} "
                    f"{r.partitioner}{f'[{popts}]' if popts else ''} "
                    f"train={r.train_missing} seed={r.seed} epochs={epochs}"
                )
            )
        return
    t0 = time.perf_counter()
    failures, diverged = [], []
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
    ) as bar:
        task = bar.add_task(exp.name, total=len(p.run_ids), completed=len(p.done))

        def done(rec):
            bar.advance(task)
            if rec.get("diverged"):
                diverged.append(rec)
                bar.console.print(
                    f"[yellow]run {rec['run_id']} diverged[/]: {rec['diverged']} (recorded; excluded from tables)"
                )
            if not rec["ok"]:
                failures.append(rec)
                bar.console.print(f"[red]run {rec['run_id']} failed[/]: {rec['error'].strip().splitlines()[-1]}")

        records = execute_plan(
            p,
            workers=workers,
            device=device,
            executor=executor,
            address=address,
            on_done=done,
            threads_per_run=threads,
            pack=pack,
        )
    df = finalize(p, records, time.perf_counter() - t0)
    console.print(
        f"{len(df)} result rows from {df['run_id'].nunique() if len(df) else 0} runs -> {out / 'results.csv'} "
        f"({time.perf_counter() - t0:.0f}s)"
    )
    if len(df):  # every sweep gets a table: the experiment's layout, else the generic one
        console.print(f"table -> {write_table(exp, df, out)}")
    if diverged:
        console.print(
            f"[yellow]{len(diverged)} run(s) diverged[/]: recorded with status=diverged in results.csv and excluded "
            "from tables; lower the learning rate to retry them in a new --out."
        )
    if failures:
        raise VFLBenchError(
            f"{len(failures)} run(s) failed; see messages above. Re-run the same command to retry them."
        )


@app.command()
@friendly
def table(
    results: list[Path] = typer.Argument(
        ..., help="a sweep directory, a results.csv, or a directory of runs (several: their rows together)"
    ),
    layout: str | None = typer.Option(
        None,
        help="laser-table1 | laser-table3 | pbm-table3 | false-tables | generic [default: a sweep folder's "
        "own (its experiment's layout:), else laser-table1]",
    ),
    reference: str | None = typer.Option(
        None,
        help="the published numbers beside ours: laser-table1 | laser-table3 | pbm-table3 | false-tables | a "
        "reference CSV path | none [default: a sweep folder's own]",
    ),
    fmt: str = typer.Option("md", "--format", help="md | csv | latex"),
    out: str | None = typer.Option(None, help="write to this file instead of stdout"),
    epoch: str | None = typer.Option(
        None,
        help="table a budget recorded with --eval-epochs: an epoch, or a share of each run such as 50% (default: each "
        "run's final epoch)",
    ),
    by_budget: bool = typer.Option(
        False,
        "--by-budget",
        help="instead: the best method of every condition at every budget recorded with --eval-epochs",
    ),
    stats: bool = typer.Option(
        False,
        "--stats",
        help="each method against its condition's best: a paired test over seeds (t below 6 seeds, Wilcoxon from "
        "6), Holm-corrected over the table, with 95%% intervals; md marks ties and significant losses, csv gives "
        "p-values (docs/STATISTICS.md)",
    ),
):
    """Mean +- std tables in the paper's layout, optionally beside the published numbers. Given one
    sweep folder, its experiment's layout, reference and title are the defaults (the bare command
    rebuilds the folder's table.md); the flags override them."""
    out = out_path(out)
    from .outputs import atomic_write_text
    from .report import budget_ranking, folder_table_args, load_many, make_table

    own = folder_table_args(results[0]) if len(results) == 1 else None
    title = own["title"] if own else None
    if layout is None:
        layout = own["layout"] if own else "laser-table1"
    if reference is None:
        reference = own["reference"] if own else None
    elif reference.strip().lower() == "none":
        reference = None
    if out:
        from .outputs import check_output_file

        check_output_file(out)
    if by_budget:
        if stats:
            raise VFLBenchError("--by-budget and --stats are two views; give one.")
        if epoch is not None or reference:
            raise VFLBenchError("--by-budget lists every recorded budget; drop --epoch and --reference.")
        if fmt not in ("md", "csv"):
            raise VFLBenchError("--by-budget writes md or csv (--format).")
        text = budget_ranking(load_many(results), layout, fmt)
    else:
        if stats and reference and len(results) > 1:
            raise VFLBenchError("--stats compares the methods of the results; drop --reference (or table it apart).")
        text, _ = make_table(
            load_many(results), layout, None if stats else reference, fmt, epoch=epoch, title=title, stats=stats
        )
    if out:
        atomic_write_text(out, text)
        console.print(f"-> {out}")
    else:
        print(text, end="" if text.endswith("\n") else "\n")  # the table as the file holds it, byte for byte


@app.command()
@friendly
def plot(
    kind: str = typer.Argument(
        ...,
        help="scalability | curves | bars | budget | frontier (PBM-VFL: metric against certified epsilon) | cd "
        "(critical-difference diagram over every dataset and condition of the results)",
    ),
    results: list[Path] = typer.Argument(
        ...,
        help="sweep directory (with runs/); cd takes several (each its own conditions; A+B: two folders' rows "
        "together, e.g. a method run apart)",
    ),
    out: str = typer.Option("results/figure", help="output path without extension (.png and .pdf are written)"),
    metric: str | None = typer.Option(
        None, help="metric (scalability: default accuracy; budget: auprc when recorded, else accuracy)"
    ),
    test_missing: str | None = typer.Option(None, help="test setting to plot (scalability, budget)"),
    panel: str | None = typer.Option(
        None, help="budget plot: one panel per value of this column (e.g. beta); default per train/test setting"
    ),
):
    """Figures to PNG and PDF: the scalability figure (metric and time per epoch against K) or training curves."""
    trailing = str(out).endswith("/")
    out = out_path(out)
    if trailing or out.is_dir():
        raise VFLBenchError(f"--out {out} is a directory; give a file path without extension, e.g. {out / 'figure'}.")
    from .plot import plot_curves, plot_scalability

    if kind not in ("scalability", "curves", "bars", "budget", "frontier", "cd"):
        raise VFLBenchError(f"Unknown plot '{kind}'. Choices: scalability, curves, bars, budget, frontier, cd.")
    if kind != "cd" and len(results) != 1:
        raise VFLBenchError(f"The {kind} plot takes one results folder; the cd plot takes several.")
    takes = {
        "scalability": {"metric", "test_missing"},
        "budget": {"metric", "test_missing", "panel"},
        "frontier": {"metric"},
        "curves": set(),
        "bars": set(),
        "cd": set(),
    }[kind]
    takers = {"scalability": "metric test_missing", "budget": "metric test_missing panel", "frontier": "metric"}
    for flag, value in (("metric", metric), ("test_missing", test_missing), ("panel", panel)):
        if value is not None and flag not in takes:
            plots = ", ".join(k for k, t in takers.items() if flag in t.split())
            raise VFLBenchError(
                f"The {kind} plot does not take --{flag.replace('_', '-')}; it applies to the {plots} plot(s)."
            )
    from .outputs import check_output_file

    check_output_file(out.with_suffix(".png"))
    if kind == "cd":
        import pandas as pd

        from .report import load_many, make_table
        from .stats import critical_difference
        from .verdicts import display

        parts = []
        for folder in results:  # a condition: a folder's dataset x train x test, on the dataset's own metric
            joined = [Path(p) for p in str(folder).split("+")]  # A+B: two folders' rows as one (methods side by side)
            _, agg = make_table(load_many(joined), "generic")
            headline = agg.groupby("dataset", sort=False)["metric"].first()  # the generic layout lists it first
            parts.append(agg[agg["metric"] == agg["dataset"].map(headline)].assign(source=str(folder)))
        table = pd.concat(parts).pivot_table(
            index=["source", "dataset", "train_missing", "test_missing"], columns="method", values="mean"
        )
        table.columns = [display(m) for m in table.columns]
        paths, text = critical_difference(table, out)
        console.print(text, highlight=False)
        for p in paths:
            console.print(f"-> {p}")
        return
    results = results[0]
    if kind == "scalability":
        paths = plot_scalability(results, out, metric or "accuracy", test_missing)
    elif kind == "curves":
        paths = plot_curves(results, out)
    elif kind == "budget":
        from .plot import plot_budget

        paths = plot_budget(results, out, metric, panel, test_missing)
    elif kind == "frontier":
        from .plot import plot_frontier

        paths = plot_frontier(results, out, metric)
    elif kind == "bars":
        from .plot import plot_bars
        from .report import make_table

        _, agg = make_table(results, "generic")
        seeds = "/".join(map(str, sorted(set(agg["n_seeds"]))))
        paths = plot_bars(agg, out, title=f"{', '.join(dict.fromkeys(agg['dataset']))}: mean ± std over {seeds} seeds")
    else:
        raise VFLBenchError(f"Unknown plot '{kind}'. Choices: scalability, curves, bars.")
    for p in paths:
        console.print(f"-> {p}")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
