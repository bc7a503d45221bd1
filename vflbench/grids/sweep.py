"""Sweeps: run an experiment's grid in parallel, resumably.

Each run is keyed by a hash of its resolved configuration and lives in ``<out>/runs/<run_id>/``. A
run is *done* when its ``manifest.json`` exists; it is written (atomically) after ``results.csv``.
A sweep killed at any moment and started again therefore skips finished runs, recomputes
unfinished ones from scratch, and the combined ``results.csv`` is rebuilt from the run directories:
nothing lost, nothing duplicated.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.errors import TrainingDiverged, VFLBenchError
from ..results.outputs import (
    atomic_write_text,
    finished_results,
    gathered_runs,
    read_results_texts,
    run_finished,
    versions,
    write_outputs,
)
from ..runs.config import ResolvedRun, resolve
from .experiment import Experiment


@dataclass
class SweepPlan:
    experiment: Experiment
    out: Path
    todo: list[ResolvedRun] = field(default_factory=list)  # resolved runs to execute
    done: list[str] = field(default_factory=list)  # run ids already finished
    skipped: dict[str, str] = field(default_factory=dict)  # dataset -> reason
    run_ids: list[str] = field(default_factory=list)  # every run of the grid that can run
    damaged: list[tuple[str, str]] = field(default_factory=list)  # (run id, why): re-run, never read
    pack: int = 1  # --pack of this invocation (recorded: a resume must not mix packed and unpacked runs)


def plan(exp: Experiment, out: Path) -> SweepPlan:
    from ..core.paths import register
    from ..data.datasets import DATASETS

    p = SweepPlan(exp, Path(out))
    for cfg in exp.runs:
        if cfg.dataset in p.skipped:
            continue
        register(cfg.path_bases)
        spec = DATASETS.get(cfg.dataset)
        if (
            cfg.dataset.startswith("csv:") and not spec.available()
        ):  # a user's file is there or the file is wrong: not a skip
            raise VFLBenchError(
                f"{exp.path or exp.name}: the table {cfg.dataset} does not exist (paths in an experiment file are "
                "read from its folder)."
            )
        if not spec.available():
            p.skipped[cfg.dataset] = (
                f"not available locally or in the mirror (run `vflbench data fetch {cfg.dataset}` online"
                + (", or supply data/mimic4/ as documented" if cfg.dataset == "mimic4" else "")
                + ")"
            )
            continue
        r = resolve(cfg)
        rid = r.run_id
        if rid in p.run_ids:  # e.g. mcar:0.1 and mcar:0.10, or an option set twice at its default
            raise VFLBenchError(
                f"{exp.path or exp.name}: two entries of the grid are the same run ({rid}: {cfg.method} on "
                f"{cfg.dataset}, "
                f"seed {cfg.seed}, train {r.train_missing}); each run must appear once."
            )
        p.run_ids.append(rid)
        finished, why = run_finished(p.out / "runs" / rid)
        if finished:
            p.done.append(rid)
        else:
            p.todo.append(r)
            if why:
                p.damaged.append((rid, why))
    return p


class FolderLock:
    """Exclusive use of a sweep's output folder (``fcntl.flock`` on ``<out>/.sweep.lock``): a second
    sweep there stops at once instead of racing the first over ``results.csv`` and ``sweep.json``.
    The lock dies with its process, so a killed sweep never leaves the folder locked."""

    def __init__(self, out: Path):
        self.path = Path(out) / ".sweep.lock"
        self.fd: int | None = None
        self.created: list[Path] = []  # folders this lock made (removed again when the sweep is refused)

    def __enter__(self) -> FolderLock:
        import fcntl

        probe = self.path.parent
        while not probe.exists():
            self.created.append(probe)
            probe = probe.parent
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another sweep"
            os.close(fd)
            raise VFLBenchError(
                f"{self.path.parent} is in use by {holder}; wait for it or use another --out."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"sweep PID {os.getpid()} (started {time.strftime('%Y-%m-%d %H:%M:%S')})".encode())
        self.fd = fd
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None
        if exc_type is not None and issubclass(exc_type, VFLBenchError) and self.created:
            # a sweep refused before any run leaves nothing behind in the folder it would have made
            folder = self.path.parent
            if {x.name for x in folder.iterdir()} <= {".sweep.lock"}:
                self.path.unlink(missing_ok=True)
                for d in self.created:  # innermost first
                    try:
                        d.rmdir()
                    except OSError:
                        break


def check_same_pack(p: SweepPlan) -> None:
    """Runs trained in packs and alone round differently in the last digits; a resume with another
    --pack would mix the two under one sweep. Refused, naming the --pack that did the finished runs."""
    meta = Path(p.out) / "sweep.json"
    if not p.done or not meta.exists():
        return
    try:
        inv = json.loads(meta.read_text()).get("invocations") or []
    except (OSError, ValueError):
        return
    used = {int(i["pack"]) for i in inv if i.get("runs_executed") and "pack" in i}
    # members of packs of any size are bit-identical (a tested guarantee); alone differs in the last digits
    if used and any((u > 1) != (p.pack > 1) for u in used):
        raise VFLBenchError(
            f"{p.out}: its {len(p.done)} finished run(s) were trained with --pack {', '.join(map(str, sorted(used)))}; "
            f"resume with the same --pack (packed and unpacked runs round differently), or use another --out."
        )


def check_same_experiment(exp: Experiment, out: Path, force: bool) -> None:
    """Refuse a folder that holds another experiment's sweep (unless ``force``)."""
    meta = Path(out) / "sweep.json"
    if force or not meta.exists():
        return
    try:
        other = json.loads(meta.read_text()).get("experiment")
    except (OSError, ValueError):
        return
    if other and other != exp.name:
        raise VFLBenchError(
            f"{out} holds the sweep of experiment '{other}', not '{exp.name}'; use another --out, or --force to share "
            "the folder."
        )


def prefetch(p: SweepPlan) -> None:
    """Fetch (copy, download, verify) every dataset the pending runs need, once, in this process,
    before any worker starts: workers then only read files that are complete."""
    from ..data.datasets import fetch_all

    fetch_all(r.dataset for r in p.todo)


def worker_init(threads: int, explicit: int | None = None) -> None:
    try:  # die with the parent (SIGKILL of the sweep must not leave orphans computing)
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # pragma: no cover - non-Linux
        pass
    os.environ["VFLBENCH_WORKER_THREADS"] = str(threads)  # the worker's share of the cores (image models)
    if explicit:
        os.environ["VFLBENCH_THREADS"] = str(explicit)  # --threads: every run of this worker
    import torch

    torch.set_num_threads(explicit or threads)


def run_one(resolved: ResolvedRun, out: str, device: str) -> dict[str, Any]:
    """Execute one run and write its outputs; returns a status record (never raises)."""
    from ..training.pipeline import execute

    t, origin = time.perf_counter(), time.time()
    rid = resolved.run_id
    try:
        rows, manifest = execute(resolved, device=device)
        write_outputs(Path(out) / "runs", rows, manifest, origin)
        return {"run_id": rid, "ok": True, "seconds": time.perf_counter() - t, **warned(manifest)}
    except TrainingDiverged as e:  # a result, not a crash: recorded, excluded from tables, not retried
        write_outputs(
            Path(out) / "runs",
            diverged_rows(resolved, str(e)),
            {
                "run_id": rid,
                "run_key": resolved.key,
                "status": "diverged",
                "error": str(e),
                "config": resolved.to_dict(),
                "versions": versions(),
            },
        )
        return {"run_id": rid, "ok": True, "diverged": str(e), "seconds": time.perf_counter() - t}
    except VFLBenchError as e:
        return {"run_id": rid, "ok": False, "error": str(e), "seconds": time.perf_counter() - t}
    except Exception:  # a bug: keep the sweep going, report it
        return {"run_id": rid, "ok": False, "error": traceback.format_exc(limit=5), "seconds": time.perf_counter() - t}


def run_pack(runs: list[ResolvedRun], out: str, device: str, packed: bool = True) -> list[dict[str, Any]]:
    """Execute runs that differ only in their seed (and training missingness, where allowed) as one pack
    (:mod:`vflbench.training.packing`) and write
    each run's outputs; one status record per run. With packing on, a lone packable run takes the
    packed path too (a pack of one), so a sweep's numbers never depend on how its runs happened to
    be grouped or resumed (a member's numbers are bit-identical in packs of any size). A pack that
    cannot be trained together, or in which a run fails or diverges, is run again one run at a time."""
    if not packed or not can_pack(runs[0]):
        return [run_one(r, out, device) for r in runs]
    from ..training.pipeline import NotPackable, execute_pack

    t = time.perf_counter()
    try:
        results = execute_pack(runs, device=device)
    except (NotPackable, TrainingDiverged, VFLBenchError):
        return [run_one(r, out, device) for r in runs]
    except Exception:  # a bug in packing must not cost the runs: run them alone
        return [{**run_one(r, out, device), "pack_error": traceback.format_exc(limit=3)} for r in runs]
    for rows, manifest in results:
        write_outputs(Path(out) / "runs", rows, manifest)
    each = (time.perf_counter() - t) / len(runs)
    return [
        {"run_id": r.run_id, "ok": True, "seconds": each, "pack": len(runs), **warned(m)}
        for r, (_, m) in zip(runs, results, strict=True)
    ]


def warned(manifest: dict[str, Any]) -> dict[str, Any]:
    """A status record's ``warnings`` (count) and ``first_warning``: libraries' warnings during the run."""
    w = manifest.get("warnings") or {}
    return {"warnings": w["count"], "first_warning": w["first"]} if w else {}


def can_pack(r: ResolvedRun) -> bool:
    """Whether a run can be trained in a pack (:func:`vflbench.training.packing.why_not_packable`)."""
    from ..training.packing import why_not_packable

    return why_not_packable(r) is None


def packs(todo: list[ResolvedRun], size: int) -> list[list[ResolvedRun]]:
    """Group pending runs into packs of at most ``size`` runs that differ only in their seed and, where
    the method allows (:func:`vflbench.training.pipeline.pack_key`), their training missingness; runs
    whose method or model cannot be packed stay alone. Order follows the first run of each pack."""
    if size <= 1:
        return [[r] for r in todo]
    from ..training.pipeline import pack_key

    groups: dict[str, list[ResolvedRun]] = {}
    out: list[list[ResolvedRun]] = []
    for r in todo:
        if can_pack(r):
            key = pack_key(r)
            if key not in groups:
                groups[key] = []
                out.append(groups[key])
            groups[key].append(r)
        else:
            out.append([r])
    return [g[i : i + size] for g in out for i in range(0, len(g), size)]


def task_cost(task: list[ResolvedRun]) -> float:
    """A rough relative cost of training ``task`` (a pack or one run), to schedule long tasks first:
    epochs of every stage, times the square root of the pack size (a pack's step costs far less than
    one step per member, benchmarks/README.md)."""
    r = task[0]
    return sum(hp.epochs for hp in r.stage_hp.values()) * len(task) ** 0.5


def diverged_rows(r: ResolvedRun, error: str) -> list[dict[str, Any]]:
    from ..training.pipeline import row

    return [
        {**row(r, s, "accuracy", float("nan"), {"n_counted": 0, "n_test": 0}, {}), "status": "diverged", "error": error}
        for s in r.test_missing
    ]


def execute_plan(
    p: SweepPlan,
    *,
    workers: int = 1,
    device: str = "auto",
    executor: str = "local",
    address: str | None = None,
    on_done=None,
    threads_per_run: int | None = None,
    pack: int = 1,
) -> list[dict[str, Any]]:
    """Run the pending runs; ``on_done(record)`` after each. Returns the status records.
    ``threads_per_run`` (``--threads``) fixes every run's intra-op threads; by default tabular runs
    use one and image runs their worker's share of the cores (see pipeline.intra_op_threads).
    ``pack``: train up to this many runs that differ only in their seed (and training missingness) together (local
    executor)."""
    if not p.todo:
        return []
    prefetch(p)
    cores = os.cpu_count() or 1
    tasks = packs(p.todo, pack) if executor == "local" else [[r] for r in p.todo]
    workers = max(1, min(workers, len(tasks)))
    if workers > 1:  # longest first, so that no worker is left with a long pack while the others idle
        tasks.sort(key=task_cost, reverse=True)
    threads = max(1, cores // workers)
    records = []
    if executor == "ray":
        return _execute_ray(p, threads, device, address, on_done, threads_per_run)
    if executor != "local":
        raise VFLBenchError(f"Unknown executor '{executor}'. Choices: local, ray.")
    if workers == 1:
        _worker_init_local(threads, threads_per_run)
        for task in tasks:
            for rec in run_pack(task, str(p.out), device, pack > 1):
                records.append(rec)
                if on_done:
                    on_done(rec)
        return records
    import multiprocessing as mp

    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=mp.get_context("spawn"),
        initializer=worker_init,
        initargs=(threads, threads_per_run),
    ) as pool:
        pending = {pool.submit(run_pack, task, str(p.out), device, pack > 1) for task in tasks}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                for rec in f.result():
                    records.append(rec)
                    if on_done:
                        on_done(rec)
    return records


def _worker_init_local(threads: int, explicit: int | None = None) -> None:
    import torch

    os.environ["VFLBENCH_WORKER_THREADS"] = str(threads)
    if explicit:
        os.environ["VFLBENCH_THREADS"] = str(explicit)
    torch.set_num_threads(int(os.environ.get("VFLBENCH_THREADS", threads)))


def _execute_ray(
    p: SweepPlan, threads: int, device: str, address: str | None, on_done, threads_per_run: int | None = None
) -> list[dict[str, Any]]:
    """The pending runs as Ray tasks. Ray's own output (worker logs, its messages about lost nodes) goes to
    ``OUT/ray/driver.log``, not the sweep's output; a node lost during the sweep is reported in one line naming
    the runs Ray retried elsewhere (each attempt leaves a marker under ``OUT/ray/attempts``: the sweep folder is
    shared by the cluster's nodes, as the runs write there)."""
    try:
        import ray
    except ImportError:
        raise VFLBenchError("--executor ray needs Ray: pip install 'vflbench[ray]'.") from None
    log_dir = p.out.resolve() / "ray"
    attempts = log_dir / "attempts"
    attempts.mkdir(parents=True, exist_ok=True)
    quiet_ray(ray, log_dir / "driver.log")
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    alive = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes() if n.get("Alive")}
    gpus = 1 if device == "cuda" else 0

    @ray.remote(num_cpus=threads, num_gpus=gpus)
    def remote_run(resolved, out, device, threads, explicit, marks):
        node = ray.get_runtime_context().get_node_id()
        Path(marks, f"{resolved.run_id}@{node}@{os.getpid()}").touch()
        _worker_init_local(threads, explicit)
        return run_one(resolved, out, device)

    refs = [remote_run.remote(r, str(p.out.resolve()), device, threads, threads_per_run, str(attempts)) for r in p.todo]
    records = []
    try:
        while refs:
            ready, refs = ray.wait(refs, num_returns=1)
            rec = ray.get(ready[0])
            records.append(rec)
            if on_done:
                on_done(rec)
    except ray.exceptions.RayError as e:  # the cluster itself failed (its head, or every retry of a run)
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise VFLBenchError(
            f"The Ray cluster failed during the sweep ({type(e).__name__}: {why[:160]}); {len(records)} of "
            f"{len(p.todo)} runs finished and are kept. Re-run the same command to resume (Ray's log: "
            f"{log_dir / 'driver.log'})."
        ) from None
    now_alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    for line in lost_node_lines(alive, now_alive, [f.name for f in attempts.iterdir()], log_dir / "driver.log"):
        print(line, file=sys.stderr)
    return records


def quiet_ray(ray, log_file: Path) -> None:
    """Ray's driver-side output into ``log_file``: its Python logger, and the messages its error thread prints
    (``ray._private.worker.print_to_stdstream``: a node's death comes with a state dump of some 36 lines)."""
    import logging

    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    rlog = logging.getLogger("ray")
    for h in list(rlog.handlers):
        rlog.removeHandler(h)
    rlog.addHandler(handler)
    rlog.propagate = False
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if worker is not None and hasattr(worker, "print_to_stdstream"):

        def to_file(data, ignore_prefix=False):
            with open(log_file, "a") as f:
                for line in data.get("lines", []):
                    f.write(f"({data.get('pid', '?')}) {line}\n")

        worker.print_to_stdstream = to_file


def lost_node_lines(alive_before: dict[str, str], alive_after: set[str], marks: list[str], log: Path) -> list[str]:
    """One line per node that was alive when the sweep started and is not now, naming the runs Ray retried
    elsewhere (an attempt on it and one on another node) and those that had finished there before it was lost.
    ``marks``: ``RUN@NODE@PID``, one per attempt."""
    nodes_of: dict[str, set[str]] = {}
    for m in marks:
        run, node = m.split("@")[:2]
        nodes_of.setdefault(run, set()).add(node)
    lines = []
    for node, addr in alive_before.items():
        if node in alive_after:
            continue
        on_it = sorted(r for r, ns in nodes_of.items() if node in ns)
        retried = [r for r in on_it if len(nodes_of[r]) > 1]
        kept = [r for r in on_it if len(nodes_of[r]) == 1]
        parts = [f"runs retried on other nodes: {', '.join(retried) or 'none'}"]
        if kept:
            parts.append(f"finished there before: {', '.join(kept)}")
        lines.append(f"ray: node {node[:12]} ({addr}) was lost during the sweep; {'; '.join(parts)} (Ray's log: {log})")
    return lines


def collect(out: Path, run_ids: list[str]) -> pd.DataFrame:
    """The tidy results of the given runs: exactly one row set per finished run."""
    texts = [finished_results(Path(out) / "runs" / rid)[0] for rid in dict.fromkeys(run_ids)]
    return read_results_texts([t for t in texts if t is not None])


def write_table(exp, df: pd.DataFrame, out: Path) -> Path:
    """The sweep's ``table.md``: the experiment's artefact layout (else the generic one) and reference."""
    from ..results.report import make_table

    text, _ = make_table(df, exp.layout or "generic", exp.reference, "md", title=exp.name)
    atomic_write_text(Path(out) / "table.md", text)
    return Path(out) / "table.md"


def finalize(p: SweepPlan, records: list[dict[str, Any]], wall: float) -> pd.DataFrame:
    previous, earlier_ids = [], []
    old_path = p.out / "sweep.json"
    if old_path.exists():  # keep the record of earlier invocations (e.g. the one that did the work)
        try:
            old = json.loads(old_path.read_text())
            previous = old.get("invocations") or [
                {k: old[k] for k in ("wall_seconds_this_invocation", "run_seconds_this_invocation") if k in old}
            ]
            if old.get("experiment") == p.experiment.name and bool(old.get("quick")) == bool(p.experiment.quick):
                # a subset invocation (--seeds, --methods, --train-missing ...) adds to the folder's runs
                # (a run whose folder is gone is no longer the folder's: e.g. one superseded after a behaviour bump,
                # vflbench.runs.behaviour, and removed)
                gathered = gathered_runs(p.out)  # (runs folded into manifests.jsonl are the folder's too)
                earlier_ids = [
                    r
                    for r in old.get("run_ids") or []
                    if isinstance(r, str) and ((p.out / "runs" / r).is_dir() or r in gathered)
                ]
        except (OSError, ValueError):
            previous = []
    run_ids = list(dict.fromkeys([*earlier_ids, *p.run_ids]))
    df = collect(p.out, run_ids)
    if p.experiment.quick and len(df):
        df["quick"] = True
    atomic_write_text(p.out / "results.csv", df.to_csv(index=False))
    this = {
        "wall_seconds_this_invocation": wall,
        "run_seconds_this_invocation": sum(r["seconds"] for r in records),
        "runs_executed": len(records),
        "pack": p.pack,
    }
    meta = {
        "experiment": p.experiment.name,
        "file": str(p.experiment.path) if p.experiment.path else None,
        # how table.md is made: `vflbench table DIR` reads these (report.folder_table_args)
        "layout": p.experiment.layout or "generic",
        "reference": p.experiment.reference,
        "title": p.experiment.name,
        "spec": p.experiment.spec,
        "quick": p.experiment.quick,
        "runs_total": len(run_ids),
        "runs_finished": int(sum(run_finished(p.out / "runs" / r)[0] for r in run_ids)),
        "runs_failed": [r for r in records if not r["ok"]],
        "runs_diverged": [r for r in records if r.get("diverged")],
        "skipped_datasets": p.skipped,
        **this,
        "invocations": previous + [this],
        "versions": versions(),
        "run_ids": run_ids,  # this invocation's grid and every run earlier invocations of the same experiment recorded
    }
    atomic_write_text(p.out / "sweep.json", json.dumps(meta, indent=2, default=str))
    return df
