"""Commands that run one experiment: `run` (in one process, or as the server of a process group), `party` and
`server` (one process each of a group), and `methods` (what can be run)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from ..core.errors import VFLBenchError
from ..core.limits import check as check_limit
from ..core.role import parse_rendezvous
from .app import (
    _stage_progress,
    app,
    console,
    err_console,
    friendly,
    out_path,
    phase_progress,
    progress_bar,
    with_settings,
)


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
    save_model: bool = typer.Option(
        False,
        "--save-model",
        metavar="",
        help="also write the trained model split by party (model/party_K.pt, model/server.pt) and the test "
        "predictions (predictions.csv) into the run's folder, for `vflbench serve RUN`",
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
    from ..core.role import set_federated
    from ..runs.config import RunConfig, resolve
    from ..runs.settings import request

    set_federated(
        str(given.get("runtime") or "").strip().lower() == "processes"
    )  # then the parties' own files are read by their own processes
    cfg = RunConfig(**request(given))  # the run fields and settings, as declared in vflbench.runs.settings
    dataset, method = cfg.dataset, cfg.method
    resolved = resolve(cfg)  # every check before the heavy imports below
    from ..core.timing import process_start
    from ..results.outputs import check_output_dir, write_outputs
    from ..training.pipeline import execute

    check_output_dir(out)
    if resolved.runtime == "processes":
        from ..federation.runtime import check

        check(resolved)  # before the progress bar: a refused run prints one line
    keep = []
    if save_model:
        if resolved.runtime == "processes":
            raise VFLBenchError(
                "--save-model saves the model from one process; train with --runtime inprocess (the default) and "
                "serve it with `vflbench serve RUN --runtime processes`: each party process loads only its part."
            )
        if resolved.model.get("arch") != "mlp":
            raise VFLBenchError("--save-model is built for tabular (MLP) models; this run's extractors are images.")
        from ..serving.model_files import ModelKeeper

        keep = [ModelKeeper(out)]
    with progress_bar("loss {task.fields[loss]}", quiet=quiet) as bar, phase_progress(bar):
        rows, manifest = execute(
            resolved,
            device=device,
            callbacks=[_stage_progress(bar, f"{method} on {dataset} (seed {resolved.seed})"), *keep],
        )
    if keep:
        manifest["saved_model"] = keep[0].saved
    run_dir = write_outputs(out, rows, manifest, process_start(), "process start")
    _print_run(resolved, rows, manifest, run_dir)
    warned = manifest.get("warnings")
    if warned:  # libraries' warnings: one line here, every one in the run's folder
        from rich.markup import escape

        from ..core.warnlog import LOG_NAME, console_line

        err_console.print(
            "[yellow]note:[/] " + escape(console_line(warned["count"], warned["first"], str(run_dir / LOG_NAME))),
            highlight=False,
        )


def _print_run(resolved, rows: list[dict], manifest: dict, run_dir) -> None:
    """A run's table of test settings x metrics, its time and traffic, and (private runs) its epsilon."""
    t = Table(
        title=f"{resolved.method_display} | {resolved.dataset} | K={resolved.parties} | "
        f"train {resolved.train_missing} | {resolved.protocol.name} | seed {resolved.seed}"
    )
    t.add_column("test setting", overflow="fold")
    attack_rows = [r for r in rows if str(r["metric"]).startswith("attack:")]
    rows = [r for r in rows if not str(r["metric"]).startswith("attack:")]
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    for m in metrics:
        t.add_column(m, justify="right", overflow="fold")  # a narrow console wraps a metric's name, never cuts it
    t.add_column("counted", justify="right")
    settings = dict.fromkeys(
        (r["test_missing"], r.get("test_corrupt", "none"), r.get("test_misalign", "none")) for r in rows
    )
    for s, c, a in settings:  # each missingness, crossed with the wrong blocks where the run has them
        vals = {
            r["metric"]: r
            for r in rows
            if (r["test_missing"], r.get("test_corrupt", "none"), r.get("test_misalign", "none")) == (s, c, a)
        }
        t.add_row(
            s + ("" if (c, a) == ("none", "none") else f" | corrupt {c} | misalign {a}"),
            *[f"{vals[m]['value']:.2f}" if m in vals else "-" for m in metrics],
            f"{vals[metrics[0]]['n_counted']}/{vals[metrics[0]]['n_test']}",
        )
    console.print(t)
    if attack_rows:
        _print_attacks(attack_rows)
    tm = manifest["timings"]
    ex = manifest["extras"]
    console.print(
        f"train {tm['train_s']:.1f}s ({tm['seconds_per_epoch']:.3f}s/epoch), eval {tm['eval_s']:.2f}s, "
        f"{manifest['parameters']['total']} parameters, "
        f"sent up {ex['comm_bytes_up'] / 1e6:.2f} MB / down {ex['comm_bytes_down'] / 1e6:.2f} MB in training, "
        f"peak RSS {manifest.get('memory', {}).get('peak_rss_gb', float('nan')):.2f} GB -> {run_dir}"
    )
    if "runtime" in manifest:
        rt = manifest["runtime"]
        m = rt["measured"]
        console.print(
            f"runtime processes ({rt['world_size'] - 1} parties + server, gloo): measured on the wire up "
            f"{m['bytes_train_up'] / 1e6:.2f} MB / down "
            f"{m['bytes_train_down'] / 1e6:.2f} MB in training, "
            f"{'equal to' if rt['measured_equals_accounted'] else 'DIFFERENT from'} the accounted; "
            f"{m['messages']} messages, {m['control_bytes']} control bytes"
            + "".join(f" ({v} {k})" for k, v in m.get("control_bytes_by_phase", {}).items() if k == "align")
            + f"; communication {tm['comm_s']:.1f}s of "
            f"{tm['train_s'] + tm['eval_s']:.1f}s"
        )
    if ex.get("accountant", "none") != "none":  # a private run (the accountant's module is heavy: scipy)
        from ..privacy.accountant import describe

        for line in describe(ex):
            console.print(line, markup=False, highlight=False)


def _print_attacks(rows: list[dict]) -> None:
    """The attacks' results at the last evaluated epoch: one line per metric, its value per adversary."""
    import pandas as pd

    from ..results.loading import with_attack_variants

    last = max((r.get("epoch") or 0) for r in rows)
    rows = [r for r in rows if (r.get("epoch") or 0) == last]
    rows = with_attack_variants(pd.DataFrame(rows)).to_dict("records")  # two variants of one attack stay apart
    t = Table(title="attacks on the training samples" + (f" (epoch {last})" if last else ""))
    who = list(dict.fromkeys(r["adversary"] for r in rows))
    names = list(dict.fromkeys(r["metric"] for r in rows))
    # a metric's name is never cut: it wraps (folds) where the console is narrow, the values keep their width
    t.add_column("attack metric", overflow="fold", min_width=min(max(map(len, names)), 40))
    for w in who:
        t.add_column(w, justify="right", overflow="fold", min_width=6)
    for metric in dict.fromkeys(r["metric"] for r in rows):
        vals = {r["adversary"]: r["value"] for r in rows if r["metric"] == metric}
        t.add_row(Text(metric), *[f"{vals[w]:.3f}" if w in vals else "" for w in who])  # Text: "[...]" is no markup
    console.print(t)


def _run_from(given: dict, run_file: Path | None):
    """The resolved run of a party or server command: the flags, or the run file the launcher wrote."""
    from ..core.role import set_federated
    from ..runs.config import RunConfig, config_from_manifest, resolve
    from ..runs.settings import request

    set_federated()  # this process may hold its own party file only (vflbench.data.alignment)
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
    help="auto | cpu | cuda: auto takes the device the in-process run would (runs.devices); every process of a "
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
    from ..federation.runtime import join

    parse_rendezvous(rendezvous)
    check_limit("timeout", timeout)
    run = _run_from(given, run_file)
    from ..training.pipeline import execute

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
    from ..core.timing import process_start
    from ..federation.runtime import serve
    from ..results.outputs import check_output_dir, write_outputs

    parse_rendezvous(rendezvous)
    check_limit("timeout", timeout)
    outp = out_path(out)
    run = _run_from(given, None)
    check_output_dir(outp)
    from ..training.pipeline import execute

    rows, manifest = serve(run, rendezvous, execute, timeout, device)
    run_dir = write_outputs(outp, rows, manifest, process_start(), "process start")
    console.print(f"{run.method_display} on {run.dataset}: {len(rows)} rows -> {run_dir}")


def _compact(title: str, columns: dict[str, int | None], rows: list[list[str]]) -> Table:
    """A listing of one line per row that fits the terminal (``console.width``): a column without a cap keeps its
    full width; the capped ones share what is left in proportion to their caps and are cut with an ellipsis."""
    t = Table(title=title, title_justify="left", box=None, pad_edge=False, header_style="bold")
    full = [max([len(col), *(len(r[i]) for r in rows)]) for i, col in enumerate(columns)]
    fixed = sum(w for w, cap in zip(full, columns.values(), strict=True) if cap is None)
    caps = sum(cap for cap in columns.values() if cap is not None)
    left = console.width - fixed - 2 * (len(columns) - 1)  # rich's default padding: one space each side
    for w, (col, cap) in zip(full, columns.items(), strict=True):
        share = None if cap is None else max(4, min(cap, w, left * cap // caps))
        t.add_column(col, no_wrap=True, overflow="ellipsis", width=w if cap is None else share)
    for r in rows:
        t.add_row(*r)
    return t


def _details(title: str, fields: list[tuple[str, str]]) -> Table:
    """One item's fields, a field a row, its text wrapped to the terminal."""
    t = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column("field", style="bold", no_wrap=True)
    t.add_column("value", overflow="fold")
    for k, v in fields:
        t.add_row(k, v)
    return t


def _pick(rows: list[dict], name: str, what: str, command: str) -> dict:
    for r in rows:
        if r["name"] == name:
            return r
    raise VFLBenchError(f"Unknown {what} '{name}'. Choices: {', '.join(r['name'] for r in rows)} (`{command}`).")


@app.command()
@friendly
def attacks(
    name: str | None = typer.Argument(None, help="an attack or label defense: its paper, adversary and options"),
    fmt: str = typer.Option("table", "--format", help="table | json"),
):
    """List the attacks (--attack) and the label defenses (--label-defense), one line each; `vflbench attacks NAME`
    for one's paper, adversary, what it observes, side knowledge, metrics and options (docs/ATTACKS.md)."""
    from rich.markup import escape

    from ..privacy.attacks import describe

    rows = describe()
    if name is not None:
        rows = [_pick(rows, name, "attack or label defense", "vflbench attacks")]
    if fmt == "json":
        print(json.dumps(rows[0] if name is not None else rows, indent=2))
        return
    if fmt != "table":
        raise VFLBenchError(f"Unknown format '{fmt}'. Choices: table, json.")
    if name is not None:
        r = rows[0]
        opts = "\n".join(f"{k}={v['default']}: {v['help']}" for k, v in r["options"].items()) or "-"
        metrics = ", ".join(f"{r['kind']}:{r['name']}:{m}" for m in r["metrics"]) if r["kind"] == "attack" else ""
        console.print(
            _details(
                f"{r['kind']} {r['name']}",
                [
                    ("paper", escape(r["paper"])),
                    ("adversary", escape(r["adversary"])),
                    ("observes", escape(r["observes"])),
                    ("side knowledge", escape(r["side_knowledge"] or "-")),
                    ("rows", escape(metrics or ", ".join(r["metrics"]) or "-")),
                    ("tasks", escape(r["tasks"])),
                    ("options", escape(opts)),
                ],
            )
        )
        return
    console.print(
        _compact(
            "attacks (--attack NAME:key=value,...), label defenses (--label-defense SPEC)",
            {"kind": None, "name": None, "adversary": 30, "metrics": 24, "paper": 60},
            [
                [
                    r["kind"],
                    r["name"],
                    escape(r["adversary"]),
                    escape(", ".join(r["metrics"]) or "-"),
                    escape(r["paper"]),
                ]
                for r in rows
            ],  # fmt: skip
        )
    )
    console.print("One in full: vflbench attacks NAME; all: --format json; docs/ATTACKS.md")


def _method_details(r: dict) -> list[tuple[str, str]]:
    from rich.markup import escape

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
    stages = ", ".join(f"{s['name']} ({s['samples']}{'' if s['labels'] else ', labels hidden'})" for s in r["stages"])
    mech = (
        "yes" + (" (+ --secagg masked)" if r["sums_at_server"] else "")
        if r["mechanisms"]
        else f"no: {r['boundary_refusal']}"
    )
    return [
        ("display", escape(r["display"])),
        ("paper", escape(r["paper"])),
        ("stages", escape(stages)),
        ("options (--method-opt)", escape(opts)),
        ("--mechanism", escape(mech)),
        ("--runtime processes", "yes" if r["processes"] else escape(f"no: {r['runtime_refusal']}")),
        ("a lost party", escape(r["party_loss"])),
        ("F1 rule", escape(str(r["f1_rule"]))),
        ("preset block", escape(str(r["hp_key"]))),
    ]


@app.command()
@friendly
def methods(
    name: str | None = typer.Argument(None, help="a method: its options, stages and traits"),
    fmt: str = typer.Option("table", "--format", help="table | json"),
):
    """List the registered methods, one line each (name, display name, paper, runs across processes, survives a lost
    party, takes --mechanism); `vflbench methods NAME` for one method's options, stages and traits."""
    from rich.markup import escape

    from ..privacy.mechanism_spec import describe_mechanisms
    from ..results.inspection import method_rows

    rows = method_rows()
    if name is not None:
        rows = [_pick(rows, name, "method", "vflbench methods")]
    if fmt == "json":
        print(json.dumps(rows[0] if name is not None else rows, indent=2))
        return
    if fmt != "table":
        raise VFLBenchError(f"Unknown format '{fmt}'. Choices: table, json.")
    if name is not None:
        console.print(_details(f"method {rows[0]['name']}", _method_details(rows[0])))
        return
    console.print(
        _compact(
            "methods (--method NAME, --method-opt key=value)",
            {"name": None, "display": None, "processes": None, "lost party": None, "mechanism": None, "paper": 80},
            [
                [
                    r["name"],
                    escape(r["display"]),
                    "yes" if r["processes"] else "no",
                    "survives"
                    if r["party_loss"] == "survives"
                    else "survives*"
                    if r["party_loss"].startswith("survives")
                    else "stops",
                    "yes" if r["mechanisms"] else "no",
                    escape(r["paper"]),
                ]
                for r in rows
            ],  # fmt: skip
        )
    )
    if any(r["party_loss"] not in ("survives",) and r["party_loss"].startswith("survives") for r in rows):
        console.print("* survives with an option (vflbench methods NAME says which)")
    console.print(
        _compact(
            "mechanisms at the party-to-server boundary (--mechanism NAME:key=value,...)",
            {"name": None, "what": 120},
            [[r["name"], escape(r["help"])] for r in describe_mechanisms()],
        )
    )
    from ..compression.spec import describe as describe_compressors

    console.print(
        _compact(
            "compressors at the same boundary (--compress NAME:key=value,...,down=0|1)",
            {"name": None, "what": 120},
            [[r["name"], escape(r["help"])] for r in describe_compressors()],
        )
    )
    console.print("One in full (options, stages, traits): vflbench methods NAME; all: --format json")
