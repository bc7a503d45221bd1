"""Commands that run one experiment: `run` (in one process, or as the server of a process group), `party` and
`server` (one process each of a group), and `methods` (what can be run)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import typer
from rich.table import Table

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
    with progress_bar("loss {task.fields[loss]}", quiet=quiet) as bar, phase_progress(bar):
        rows, manifest = execute(
            resolved, device=device, callbacks=[_stage_progress(bar, f"{method} on {dataset} (seed {resolved.seed})")]
        )
    run_dir = write_outputs(out, rows, manifest, process_start(), "process start")
    _print_run(resolved, rows, manifest, run_dir)


def _print_run(resolved, rows: list[dict], manifest: dict, run_dir) -> None:
    """A run's table of test settings x metrics, its time and traffic, and (private runs) its epsilon."""
    t = Table(
        title=f"{resolved.method_display} | {resolved.dataset} | K={resolved.parties} | "
        f"train {resolved.train_missing} | {resolved.protocol.name} | seed {resolved.seed}"
    )
    t.add_column("test setting")
    attack_rows = [r for r in rows if str(r["metric"]).startswith("attack:")]
    rows = [r for r in rows if not str(r["metric"]).startswith("attack:")]
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
    last = max((r.get("epoch") or 0) for r in rows)
    rows = [r for r in rows if (r.get("epoch") or 0) == last]
    t = Table(title="attacks on the training samples" + (f" (epoch {last})" if last else ""))
    who = list(dict.fromkeys(r["adversary"] for r in rows))
    t.add_column("attack metric")
    for w in who:
        t.add_column(w, justify="right")
    for metric in dict.fromkeys(r["metric"] for r in rows):
        vals = {r["adversary"]: r["value"] for r in rows if r["metric"] == metric}
        t.add_row(metric, *[f"{vals[w]:.3f}" if w in vals else "" for w in who])
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


@app.command()
@friendly
def attacks(fmt: str = typer.Option("table", "--format", help="table | json")):
    """List the attacks (--attack) and the label defenses (--label-defense): paper, adversary, what it observes,
    side knowledge, metrics and options."""
    from rich.markup import escape

    from ..privacy.attacks import describe

    rows = describe()
    if fmt == "json":
        print(json.dumps(rows, indent=2))
        return
    if fmt != "table":
        raise VFLBenchError(f"Unknown format '{fmt}'. Choices: table, json.")
    t = Table(
        title="vflbench attacks (--attack NAME[:key=value,...], rows attack:NAME:METRIC) and label defenses "
        "(--label-defense SPEC); docs/ATTACKS.md"
    )
    for col in ("kind", "name", "paper", "adversary", "observes", "side knowledge", "metrics", "options"):
        t.add_column(col, no_wrap=col in ("kind", "name"))
    for r in rows:
        opts = "\n".join(f"{k}={v['default']}: {v['help']}" for k, v in r["options"].items()) or "-"
        t.add_row(
            r["kind"],
            r["name"],
            escape(r["paper"]),
            escape(r["adversary"]),
            escape(r["observes"]),
            escape(r["side_knowledge"] or "-"),
            escape(", ".join(r["metrics"]) + (" (binary tasks)" if r["tasks"] == "binary" else "") or "-"),
            escape(opts),
        )
    console.print(t)


@app.command()
@friendly
def methods(fmt: str = typer.Option("table", "--format", help="table | json")):
    """List the registered methods: name, display name, paper, stages and options."""
    from ..privacy.mechanism_spec import describe_mechanisms
    from ..results.inspection import method_rows

    rows = method_rows()
    if fmt == "json":
        print(
            json.dumps(rows, indent=2)
        )  # the mechanisms' parameters: the table format, or vflbench.privacy.mechanism_spec.describe_mechanisms()
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
