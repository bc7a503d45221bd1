"""Commands over grids of runs: `tune` (Optuna studies, presets) and `sweep` (an experiment file's runs, resumable,
in parallel)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from ..core.errors import VFLBenchError
from ..core.limits import check as check_limit
from ..core.textlists import split_items
from ..runs.settings import parse_int_list
from .app import (
    app,
    console,
    err_console,
    friendly,
    out_path,
    progress_bar,
)


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
    workers: int = typer.Option(
        1, help="tuner processes sharing the study (each runs whole trials; threads: cores / workers)"
    ),
):
    """Tune every method of an experiment with the same number of trials on a validation split (Optuna; test data
    never scored); writes OUT/tuned.yaml (a preset for --preset) and OUT/summary.md (docs/STATISTICS.md)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..core.textlists import split_items
    from ..grids.tuning import tune as run_tune

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

    if workers < 1:
        raise VFLBenchError(f"--workers must be >= 1, got {workers}.")
    check_limit("workers", workers)
    summary = run_tune(
        experiment, out_path(out), trials, storage, seed_list, metric, val_split, device, Bar(), workers=workers
    )
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
    gather: bool = typer.Option(False, "--gather", metavar="", help="when every run finished: vflbench gather"),
):
    """Run an experiment grid in parallel; finished runs are skipped, so an interrupted sweep resumes.
    One sweep at a time per output folder (a second one stops at once)."""
    from ..grids.experiment import load_experiment
    from ..grids.sweep import FolderLock, check_same_experiment

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
        from ..runs.devices import choose_device

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
        from ..runs.presets import load_preset

        load_preset(preset)  # an unknown name or a bad file: refused now
        exp.spec = {**exp.spec, "preset": preset}
        for r in exp.runs:
            r.settings["preset"] = preset
    out = out or Path("results") / ("quick" if quick else "sweeps") / exp.name
    from ..results.outputs import check_output_dir

    check_output_dir(out)
    check_same_experiment(exp, out, force)
    if dry_run:
        _sweep_body(exp, out, quick, workers, device, executor, address, dry_run=True, threads=threads, pack=pack)
        return
    with FolderLock(out):
        _sweep_body(exp, out, quick, workers, device, executor, address, dry_run=False, threads=threads, pack=pack)
        if gather:  # reached only when no run failed (a failure raises above)
            _gather_at_end(Path(out))


def _gather_at_end(out: Path) -> None:
    """``sweep --gather``: the finished sweep's run folders folded into results.csv and manifests.jsonl."""
    from ..results.outputs import GATHERED
    from ..results.outputs import gather as gather_runs

    n, left = gather_runs(out)
    console.print(f"gathered {n} run(s) -> {out / GATHERED}" + (f"; left as folders: {len(left)}" if left else ""))


def _sweep_body(exp, out, quick, workers, device, executor, address, dry_run, threads=None, pack=1):
    import time

    from ..grids.sweep import check_same_pack, finalize, plan, write_table

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
        from ..grids.sweep import packs

        grouped = [g for g in packs(p.todo, pack) if len(g) > 1]
        if grouped:
            console.print(
                f"  {sum(map(len, grouped))} of them in {len(grouped)} pack(s) of runs that differ only in their seed "
                "or training missingness (--pack 1: one at a time)"
            )
    if dry_run:
        _print_dry_run(p)
        return
    t0 = time.perf_counter()
    records, failures, diverged = _execute_with_bar(p, exp.name, workers, device, executor, address, threads, pack)
    df = finalize(p, records, time.perf_counter() - t0)
    console.print(
        f"{len(df)} result rows from {df['run_id'].nunique() if len(df) else 0} runs -> {out / 'results.csv'} "
        f"({time.perf_counter() - t0:.0f}s)"
    )
    if len(df):  # every sweep gets a table: the experiment's layout, else the generic one
        console.print(f"table -> {write_table(exp, df, out)}")
    warned = [r for r in records if r.get("warnings")]
    if warned:  # libraries' warnings: one line here, every one in its run's folder
        from rich.markup import escape

        from ..core.warnlog import LOG_NAME, console_line

        line = console_line(sum(r["warnings"] for r in warned), warned[0]["first_warning"],
                            f"{LOG_NAME} of {len(warned)} run(s) under {out / 'runs'}")  # fmt: skip
        err_console.print("[yellow]note:[/] " + escape(line), highlight=False)
    if diverged:
        console.print(
            f"[yellow]{len(diverged)} run(s) diverged[/]: recorded with status=diverged in results.csv and excluded "
            "from tables; lower the learning rate to retry them in a new --out."
        )
    if failures:
        raise VFLBenchError(
            f"{len(failures)} run(s) failed; see messages above. Re-run the same command to retry them."
        )


def _print_dry_run(p) -> None:
    """One line per run a sweep would start: dataset, method and the options and settings a user set."""
    from rich.markup import escape

    from ..runs.settings import columns as setting_columns

    for r in p.todo:
        user = ";".join(f"{k}={v}" for k, v in sorted(r.method_options.items()) if r.option_sources.get(k) == "user")
        epochs = (
            "+".join(f"{name} {hp.epochs}" for name, hp in r.stage_hp.items())
            if len(r.stage_hp) > 1
            else str(r.hp.epochs)
        )
        popts = ",".join(f"{k}={v}" for k, v in sorted(r.partition_options.items()) if k != "file_sha256")
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


def _execute_with_bar(p, name: str, workers, device, executor, address, threads, pack):
    """The pending runs with a progress bar; a failed or diverged run is one line as it ends."""
    from ..grids.sweep import execute_plan

    failures, diverged = [], []
    with progress_bar() as bar:
        task = bar.add_task(name, total=len(p.run_ids), completed=len(p.done))

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
    return records, failures, diverged


@app.command()
@friendly
def gather(
    results: str = typer.Argument(..., metavar="FOLDER", help="a sweep folder (with runs/)"),
    experiment: str = typer.Option(
        None,
        "--experiment",
        help="the folder's experiment file: runs it no longer asks for (made under an earlier default) move to "
        "FOLDER/superseded/",
    ),
):
    """Fold a sweep folder's finished runs into one tidy results.csv and one manifests.jsonl (a line a run: its
    manifest and its own rows, checked by their sha256), and remove their run folders. Every reader (vflbench table,
    rank, a resumed sweep) reads the gathered folder as it read the run folders; a run folder holding more than its
    two files (a saved model) is left."""
    from pathlib import Path

    from ..results.outputs import GATHERED
    from ..results.outputs import gather as gather_runs

    folder = Path(results)
    if not folder.is_dir():
        raise VFLBenchError(f"{folder} is not a folder; give a sweep folder (with runs/).")
    keep = None
    if experiment:
        from ..grids.experiment import load_experiment
        from ..grids.sweep import plan

        keep = set(plan(load_experiment(experiment), folder).run_ids)
    n, left = gather_runs(folder, keep)
    console.print(f"gathered {n} run(s) -> {folder / GATHERED}, {folder / 'results.csv'}", highlight=False)
    if left:
        console.print(f"left as folders: {len(left)}: " + "; ".join(left[:5]) + (" ..." if len(left) > 5 else ""))
