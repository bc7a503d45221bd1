"""`vflbench tune`: every method of an experiment tuned with the same budget, on validation data.

One Optuna study per dataset and method (named ``DATASET/METHOD``) lives in a real database: Optuna's RDB
storage, ``sqlite:///OUT/tuning.db`` by default or any URL Optuna takes, so tuning is resumable, several
tuners can share a study (``--workers W`` starts W on one database), and a killed tuner loses at most the trial in
flight (a heartbeat marks it failed). ``--trials N`` is the total of finished trials per method: the same call with a
larger N adds the difference. No trial is drawn twice by a restarted or a second tuner
(:func:`trial_seeded_sampler`), and only a study's first N finished trials decide its preset.

A trial trains the method with the trial's hyper-parameters on a tuning seed (never a reporting seed of the
experiment) under each of the experiment's training settings, on the training data less a validation split
(``val_split`` of the training samples, held out by the validation stream), and scores it on that split
under each test setting's mechanism. Test data is never scored. The objective is the mean validation
metric. The search space: the learning rate (log, a decade either side of the preset's), weight decay
(log, 1e-6 to 1e-2), batch size (64, 128, 256) and epochs (a quarter to twice the preset's), less any the
experiment fixes in ``hp``, plus the method's own ``search_space`` (e.g. PlugVFL's ``p_drop``). A method with
several training stages (FALSE-VFL's two, FedHSSL's SimSiam stages, ``pretrain=simsiam``) is searched stage by
stage around each stage's own preset values (``stage:NAME.lr`` and so on; batch size half, equal or double the
stage's), so that a stage trained at a batch of 512 is not searched at 64-256 and one stage's values never
overwrite another's.

The result is a preset (``OUT/tuned.yaml``: the experiment's preset with a ``method:NAME`` block per tuned
method and dataset, a ``method:NAME.STAGE`` block per stage of a method with several, and ``method_options``)
that ``vflbench run/sweep --preset`` takes, and a summary (``OUT/summary.md``, ``OUT/summary.json``): the best
trial per method, the number of trials, the time they took and each parameter's importance (Optuna's fANOVA).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import TrainingDiverged, VFLBenchError
from ..runs.config import RunConfig, resolve
from ..runs.presets import hyperparameters, load_preset
from .sweep import worker_init

COMMON = ("lr", "weight_decay", "batch_size", "epochs")
DEFAULT_SEEDS = (1000,)  # tuning seeds: apart from any reporting seed an experiment lists


def study_name(dataset: str, method: str) -> str:
    return f"{dataset}/{method}"


def _common_dims(base_hp: dict[str, Any], stage: bool = False) -> list[tuple[str, tuple]]:
    """The searched hyper-parameters around one recipe's values: the learning rate a decade either side, weight
    decay 1e-6 to 1e-2, epochs a quarter to twice; batch size 64, 128 or 256 (a stage of a method with several:
    half, equal or double its own)."""
    lr = float(base_hp.get("lr", 1e-3))
    epochs = int(base_hp.get("epochs", 30))
    b = int(base_hp.get("batch_size", 128))
    batches = tuple(sorted({max(1, b // 2), b, 2 * b})) if stage else (64, 128, 256)
    return [
        ("lr", ("log", lr / 10, lr * 10)),
        ("weight_decay", ("log", 1e-6, 1e-2)),
        ("batch_size", ("choice", batches)),
        ("epochs", ("int", max(1, epochs // 4), max(2, epochs * 2))),
    ]


def space_for(cfg: RunConfig, base_hp: dict[str, Any], mcls, stages: dict[str, dict[str, Any]] | None = None):
    """The search space of one method on one dataset: the common hyper-parameters the experiment leaves
    open, and the method's own options the experiment leaves open. ``stages`` (stage name -> its resolved
    hyper-parameters), for a method with several stages: each stage's own dimensions, ``stage:NAME.KEY``."""
    fixed = {k for k, v in cfg.hp.items() if v is not None}
    space: dict[str, tuple] = {}
    if getattr(mcls, "trains_whole", False):  # trees: no optimiser, batch or epochs; their options are the space
        stages, fixed = {}, set(COMMON)
    if stages is None:
        for name, dim in _common_dims(base_hp):
            if name not in fixed:
                space[name] = dim
    else:
        for st, hp in stages.items():
            own = fixed | {k for k, v in cfg.stage_hp.get(st, {}).items() if v is not None}
            for name, dim in _common_dims(hp, stage=True):
                if name not in own:
                    space[f"stage:{st}.{name}"] = dim
    for name, dim in mcls.search_space.items():
        if name not in cfg.method_options:
            space[f"option:{name}"] = dim
    return space


def stage_params(params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``stage:NAME.KEY`` parameters -> {stage name: {key: value}}."""
    out: dict[str, dict[str, Any]] = {}
    for k, v in params.items():
        if k.startswith("stage:"):
            st, key = k[len("stage:") :].rsplit(".", 1)
            out.setdefault(st, {})[key] = v
    return out


def suggest(trial, space: dict[str, tuple]) -> dict[str, Any]:
    out = {}
    for name, dim in space.items():
        kind = dim[0]
        if kind == "log":
            out[name] = trial.suggest_float(name, dim[1], dim[2], log=True)
        elif kind == "float":
            out[name] = trial.suggest_float(name, dim[1], dim[2])
        elif kind == "int":
            out[name] = trial.suggest_int(name, dim[1], dim[2])
        elif kind == "choice":
            out[name] = trial.suggest_categorical(name, list(dim[1]))
        else:
            raise VFLBenchError(f"search space {name}: unknown kind {kind!r} (log, float, int or choice)")
    return out


def trial_config(cfg: RunConfig, params: dict[str, Any], seed: int, val_split: float) -> RunConfig:
    hp = {**cfg.hp, **{k: v for k, v in params.items() if k in COMMON}}
    opts = {**cfg.method_options, **{k[7:]: v for k, v in params.items() if k.startswith("option:")}}
    settings = {**cfg.settings, "seed": seed}
    settings.pop("eval_epochs", None)
    per_stage = stage_params(params)
    stage_hp = {st: {**cfg.stage_hp.get(st, {}), **per_stage.get(st, {})} for st in {*cfg.stage_hp, *per_stage}}
    tuned = [k for k in params if k in COMMON] + [k for st in per_stage.values() for k in st]
    return replace(
        cfg,
        hp=hp,
        stage_hp=stage_hp,
        hp_sources={**cfg.hp_sources, **dict.fromkeys(tuned, "tune")},
        method_options=opts,
        protocol_options={**cfg.protocol_options, "val_split": val_split},
        settings=settings,
    )


def validation_score(cfg: RunConfig, metric: str, device: str) -> float:
    """Train one run and score it on its validation split under each test setting (test data never scored)."""
    import torch

    from ..training.evaluation import score
    from ..training.pipeline import build, intra_op_threads, prepare, train

    run = resolve(cfg)
    torch.set_num_threads(intra_op_threads(run))  # as a run of `vflbench run` (one thread for a tabular model)
    inputs = prepare(run, device)
    method = build(run, inputs)
    train(run, inputs, method)
    values = []
    for s in run.test_missing:
        vobs = torch.as_tensor(inputs.val_masks[s].observed, device=inputs.device)
        met = score(method, inputs, inputs.val, vobs, inputs.y_val, run.eval_batch_size, None)
        if metric not in met:
            raise VFLBenchError(f"--metric {metric} is not recorded for {run.dataset}; choose accuracy, f1 or auprc.")
        values.append(float(met[metric]))
    return sum(values) / len(values)


def refusal(mcls) -> str | None:
    """Why a method cannot be tuned (None: it can)."""
    if getattr(mcls, "draws_noise", False):
        return (
            "it draws privacy noise: tuning on the private data would spend privacy budget that no run accounts "
            "for (tune its non-private counterpart, --method sum)"
        )
    return None


def studies(exp) -> list[tuple[str, str, list[RunConfig]]]:
    """(dataset, method, one config per training setting) for each study of an experiment (its first
    seed, party count and grid entry)."""
    groups: dict[tuple[str, str], dict[str, RunConfig]] = {}
    for cfg in exp.runs:
        g = groups.setdefault((cfg.dataset, cfg.method), {})
        g.setdefault(str(cfg.train_missing), cfg)
    return [(ds, m, list(g.values())) for (ds, m), g in groups.items()]


def trial_seeded_sampler(seed: int):
    """Optuna's TPE sampler, seeded, whose draws never repeat because a tuner was restarted or shared its study.

    A plain ``TPESampler(seed)`` restarts its random stream in every process: a resumed study (``--trials`` raised,
    or a tuner killed and started again) draws its first new trials with the values of its first old ones, and two
    tuners started together on one study draw the same values. Here a tuner keeps the seeded stream while it is the
    only one that ever drew in the study (trial number = the trials it started itself), so an uninterrupted tuner
    draws exactly what ``TPESampler(seed)`` draws; from the first trial that breaks that (a resumed study, a second
    tuner), each trial's draws come from ``(seed, trial number)``, which no other trial of the study shares."""
    import optuna

    class TrialSeededTPE(optuna.samplers.TPESampler):
        def __init__(self) -> None:
            super().__init__(seed=seed)
            self._started = 0

        def before_trial(self, study, trial) -> None:
            if trial.number != self._started:  # not this tuner's own uninterrupted sequence
                s0, s1 = np.random.SeedSequence([seed, trial.number]).generate_state(2)
                self._rng.rng.seed(int(s0))
                self._random_sampler._rng.rng.seed(int(s1))
            self._started += 1
            super().before_trial(study, trial)

    return TrialSeededTPE()


def open_storage(url: str):
    """Optuna's RDB storage at ``url``, with a heartbeat (a killed tuner's trial is marked failed)."""
    import optuna

    for attempt in range(5):  # tuners started together race to create the schema: the loser opens it once it exists
        try:
            return optuna.storages.RDBStorage(url, heartbeat_interval=60, grace_period=120)
        except Exception as e:  # noqa: BLE001  (any database error: one line)
            if attempt == 4:
                raise VFLBenchError(
                    f"--storage {url}: Optuna cannot open it ({str(e).splitlines()[0][:160]})."
                ) from None
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


class _Surplus(Exception):
    """A worker's trial that the study's earlier trials already make up: closed as failed (tagged ``surplus``),
    untrained, and not counted anywhere."""


WAIT_SECONDS = 10.0  # how often a tuner that waits on other tuners' running trials looks again


def optimize(study, cfgs, space, trials, seeds, val_split, metric, device, callback=None) -> bool:
    """Run trials of one study, one at a time, while it has room for one: fewer than ``trials`` finished and running
    trials (every tuner's). True once the study holds ``trials`` finished ones; False when the rest are running in
    other tuners (its fellow ``--workers``, or other tuners on the same storage), which :func:`run_studies` then
    waits for. So tuners sharing a study run N trials, not N plus one per extra tuner. Tuners that start a trial at
    the same instant both see room for it: the one whose earlier trials already make N is closed untrained as a
    surplus (tagged, and counted nowhere)."""
    import optuna

    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)  # a diverged trial is pruned
    taken = (*finished, optuna.trial.TrialState.RUNNING)

    def objective(trial):
        if sum(t.number < trial.number for t in study.get_trials(deepcopy=False, states=taken)) >= trials:
            trial.set_user_attr("surplus", True)  # tuners that started together: the earlier trials make N
            study.stop()
            raise _Surplus
        params = suggest(trial, space)
        t0 = time.perf_counter()
        try:
            value = sum(
                validation_score(trial_config(c, params, s, val_split), metric, device) for c in cfgs for s in seeds
            ) / (len(cfgs) * len(seeds))
        except TrainingDiverged as e:
            raise optuna.TrialPruned(str(e)) from None
        trial.set_user_attr("seconds", time.perf_counter() - t0)
        return value

    while True:
        # a killed tuner's running trial is failed by the storage's heartbeat (after its grace period) and no longer
        # counts, so a waiting tuner runs one in its place
        optuna.storages.fail_stale_trials(study)
        held = study.get_trials(deepcopy=False, states=taken)
        if sum(t.state in finished for t in held) >= trials:
            return True
        if len(held) >= trials:  # the rest are running in other tuners
            return False
        study.optimize(objective, n_trials=1, callbacks=[callback] if callback else None, catch=(_Surplus,))


def run_studies(jobs, run) -> None:
    """``optimize`` every study of ``jobs`` (``(study, cfgs, space, callback)``) to its ``trials`` finished ones: a
    study whose remaining trials run in other tuners is left for the next study and looked at again every
    ``WAIT_SECONDS``, until they finish (or fail, and this tuner runs one in place of each)."""
    pending = list(jobs)
    while pending:
        pending = [j for j in pending if not optimize(j[0], j[1], j[2], *run, callback=j[3])]
        if pending:
            time.sleep(WAIT_SECONDS)


def _tune_worker(url: str, jobs, run) -> None:
    """One of ``--workers`` tuner processes: every study in turn, sharing the storage with the others."""
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a surplus trial is closed as failed with a warning
    store = open_storage(url)
    studies = [
        (optuna.load_study(study_name=name, storage=store, sampler=trial_seeded_sampler(0)), cfgs, space, None)
        for name, cfgs, space in jobs
    ]
    run_studies(studies, run)


def _in_parallel(url: str, pending, run, workers: int, progress) -> None:
    """``workers`` tuner processes on one storage; the bar follows the studies' finished trials."""
    import multiprocessing as mp
    import os
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    import optuna

    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)
    jobs = [(name, cfgs, space) for _, name, cfgs, space in pending]

    def count():
        return [
            sum(not t.user_attrs.get("surplus") for t in st.get_trials(deepcopy=False, states=finished))
            for st, *_ in pending
        ]

    shown = count()
    threads = max(1, (os.cpu_count() or 1) // workers)
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=mp.get_context("spawn"), initializer=worker_init, initargs=(threads,)
    ) as pool:
        futures = {pool.submit(_tune_worker, url, jobs, run) for _ in range(workers)}
        while futures:
            done, futures = wait(futures, timeout=2.0, return_when=FIRST_COMPLETED)
            for f in done:
                f.result()  # a worker's error stops the tuner, as it does in one process
            now = count()
            if progress is not None:
                for (name, _, _), a, b in zip(jobs, shown, now, strict=True):
                    for i in range(a, b):
                        progress.advance(f"{name}: trial {i + 1} finished")
            shown = now


def tune(
    exp_path: str,
    out: Path,
    trials: int,
    storage: str | None = None,
    seeds: list[int] | None = None,
    metric: str = "accuracy",
    val_split: float = 0.2,
    device: str = "cpu",
    progress=None,
    workers: int = 1,
) -> dict[str, Any]:
    """Run the missing trials of every study of the experiment, then write the preset and the summary."""
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # the storage's heartbeat
    from ..data.datasets import fetch_all
    from ..runs.protocols import default_preset
    from .experiment import load_experiment

    if trials < 1:
        raise VFLBenchError(f"--trials must be >= 1, got {trials}.")
    if not 0.0 < val_split < 1.0:
        raise VFLBenchError(f"--val-split must be in (0, 1), got {val_split}.")
    exp = load_experiment(exp_path)
    seeds = list(seeds or DEFAULT_SEEDS)
    reporting = sorted({int(r.seed) for r in exp.runs})
    clash = sorted(set(seeds) & set(reporting))
    if clash:
        raise VFLBenchError(
            f"--seeds {','.join(map(str, clash))} are reporting seeds of {exp_path}; tune on other seeds "
            f"(default {DEFAULT_SEEDS[0]})."
        )
    plan = _plan(exp)
    fetch_all(p[0] for p in plan)  # data missing is one message, before any study or folder exists
    out.mkdir(parents=True, exist_ok=True)
    url = storage or f"sqlite:///{(out / 'tuning.db').resolve()}"
    todo = _open_studies(plan, open_storage(url), trials)
    _run_trials(todo, url, (trials, seeds, val_split, metric, device), workers, progress)
    base_name = plan[0][4].settings["preset"] if plan else default_preset("clean")
    summary = {
        "experiment": str(exp_path),
        "storage": url,
        "metric": metric,
        "val_split": val_split,
        "tuning_seeds": seeds,
        "reporting_seeds": reporting,
        "trials_per_method": trials,
        "studies": [],
    }
    preset = copy.deepcopy(load_preset(base_name))
    for study, ds, m, cfgs_of, space, _, first in todo:
        summary["studies"].append(_judge(study, ds, m, cfgs_of, space, first, trials, preset, base_name))
    _write_tuned(out, preset, summary, exp_path, trials, base_name, metric, seeds)
    return summary


def _plan(exp) -> list[tuple]:
    """(dataset, method, runs, search space, first run resolved) per study; a method that cannot be tuned, or
    whose space is empty, is refused before any study exists."""
    from ..methods import METHODS

    plan = []
    for ds, m, cfgs in studies(exp):
        mcls = METHODS.get(m)
        why = refusal(mcls)
        if why:
            raise VFLBenchError(f"{mcls.display} cannot be tuned: {why}.")
        first = resolve(cfgs[0])
        base = hyperparameters(first.settings["preset"], ds, mcls.hp_key, None, m)
        several = {st: hp.as_dict() for st, hp in first.stage_hp.items()} if len(first.stage_hp) > 1 else None
        space = space_for(cfgs[0], base, mcls, several)
        if not space:
            raise VFLBenchError(
                f"{mcls.display} on {ds} has an empty search space: the experiment fixes every hyper-parameter in hp "
                f"({', '.join(COMMON)}) and the method has no option to search; drop some from hp."
            )
        plan.append((ds, m, cfgs, space, first))
    return plan


COUNTED = ("COMPLETE", "PRUNED")  # the trial states a budget counts (a diverged trial is pruned)


def _counted():
    import optuna

    return tuple(getattr(optuna.trial.TrialState, s) for s in COUNTED)


def _open_studies(plan: list[tuple], store, trials: int) -> list[tuple]:
    """Each study created or reopened, with the number of trials it still owes."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    todo = []
    for ds, m, cfgs, space, first in plan:
        study = optuna.create_study(
            study_name=study_name(ds, m),
            storage=store,
            direction="maximize",
            sampler=trial_seeded_sampler(0),
            load_if_exists=True,
        )
        done = len(study.get_trials(deepcopy=False, states=_counted()))
        todo.append((study, ds, m, cfgs, space, max(0, trials - done), first))
    return todo


def _run_trials(todo: list[tuple], url: str, run: tuple, workers: int, progress) -> None:
    """The owed trials: by ``workers`` processes sharing the storage, else in this one."""
    if progress is not None:
        progress.start(sum(t[5] for t in todo))
    pending = [(study, study_name(ds, m), cfgs, space) for study, ds, m, cfgs, space, n, _ in todo if n]
    if workers > 1 and pending:
        _in_parallel(url, pending, run, workers, progress)

    def advanced(label):
        def callback(study, trial):
            if progress is not None:
                shown = f"{trial.value:.2f}" if trial.value is not None else trial.state.name.lower()
                progress.advance(f"{label}: {shown}")

        return callback

    # one tuner (after workers, which return only once every study holds its N trials, there is nothing left)
    run_studies([(study, cfgs, space, advanced(name)) for study, name, cfgs, space in pending], run)
    if progress is not None:
        progress.stop()


def _judge(study, ds: str, m: str, cfgs_of, space, first, trials: int, preset: dict, base_name: str) -> dict:
    """A study's best trial among its first N written into ``preset`` (a method:NAME block, per stage where the
    method has several, and its options); returns the study's summary entry."""
    import optuna

    from ..methods import METHODS

    # the budget is the first N finished trials by number: a study can hold more (a trial added by hand, or
    # tuners of earlier versions, which counted only finished trials), and those never decide the preset, so
    # that every method is judged on N trials
    finished = study.get_trials(deepcopy=False, states=_counted())
    budget = sorted(finished, key=lambda t: t.number)[:trials]
    done = [t for t in budget if t.state == optuna.trial.TrialState.COMPLETE]
    if not done:
        raise VFLBenchError(f"Every trial of {ds}/{m} failed; nothing to write. Check the runs' settings.")
    best = max(done, key=lambda t: (t.value, -t.number))  # Optuna's best_trial: the first of the best values
    judged = study
    if len(budget) < len(finished):
        judged = optuna.create_study(direction="maximize")
        judged.add_trials(done)
    mcls = METHODS.get(m)
    blocks = preset.setdefault("hyperparameters", {}).setdefault(ds, {})
    if len(first.stage_hp) == 1:
        base = hyperparameters(base_name, ds, mcls.hp_key, None, m)
        blocks[f"method:{m}"] = {"default": {**base, **{k: v for k, v in best.params.items() if k in COMMON}}}
    else:
        # each stage: its recipe in the preset (without the experiment's own hp, which a sweep of the
        # experiment applies again) with the tuned values in it, as a block of its own
        recipe = resolve(replace(cfgs_of[0], hp={}, stage_hp={}))
        tuned = stage_params(best.params)
        for st in mcls.stages_for(recipe.method_options):
            stage_block = {**recipe.stage_hp[st.name].as_dict(), **tuned.get(st.name, {})}
            # a stage on the method's own recipe (the supervised stage after SimSiam) tunes the method's block
            blocks[f"method:{m}.{st.hp}" if st.hp else f"method:{m}"] = {"default": stage_block}
    opts = {k[7:]: v for k, v in best.params.items() if k.startswith("option:")}
    if opts:
        preset.setdefault("method_options", {}).setdefault(ds, {})[m] = opts
    try:
        importance = {k: float(v) for k, v in optuna.importance.get_param_importances(judged).items()}
    except (RuntimeError, ValueError, ZeroDivisionError):
        importance = {}  # fewer than two distinct finished trials
    return {
        "study": study.study_name,
        "dataset": ds,
        "method": m,
        "trials": len(done),
        "failed": sum(
            not t.user_attrs.get("surplus")
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))
        ),
        "beyond_budget": len(finished) - len(budget),
        "seconds": float(sum(t.user_attrs.get("seconds", 0.0) for t in done)),
        "best_value": float(best.value),
        "best_params": best.params,
        "importance": importance,
        "space": {k: list(v[1]) if v[0] == "choice" else list(v) for k, v in space.items()},
    }


def _write_tuned(out: Path, preset: dict, summary: dict, exp_path, trials: int, base_name: str, metric, seeds) -> None:
    import yaml

    from ..core.files import atomic_write_text

    header = (
        f"# Written by `vflbench tune {exp_path} --trials {trials}` from preset {base_name}: a method:NAME block per\n"
        f"# tuned method (validation {metric}, tuning seeds {seeds}); use it with --preset {out / 'tuned.yaml'}.\n"
    )
    atomic_write_text(out / "tuned.yaml", header + yaml.safe_dump(preset, sort_keys=False))
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    atomic_write_text(out / "summary.md", summary_md(summary))


def summary_md(summary: dict[str, Any]) -> str:
    lines = [
        f"# Tuning of {summary['experiment']}",
        "",
        f"Validation {summary['metric']} (val_split {summary['val_split']} of the training samples), tuning seeds "
        f"{summary['tuning_seeds']} (reporting seeds {summary['reporting_seeds']}), {summary['trials_per_method']} "
        f"trials per method; study storage `{summary['storage']}`.",
        "",
        "| study | trials | failed | seconds | best | best parameters | importance |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summary["studies"]:
        params = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in s["best_params"].items())
        imp = ", ".join(f"{k} {v:.2f}" for k, v in s["importance"].items()) or "-"
        lines.append(
            f"| {s['study']} | {s['trials']} | {s['failed']} | {s['seconds']:.0f} | {s['best_value']:.2f} | {params} "
            f"| {imp} |"
        )
    extra = [f"{s['study']} {s['beyond_budget']}" for s in summary["studies"] if s.get("beyond_budget")]
    if extra:
        lines += [
            "",
            f"Finished beyond the {summary['trials_per_method']} trials of the budget (tuners sharing a study; "
            f"not used for the preset or the table): {', '.join(extra)}.",
        ]
    return "\n".join(lines) + "\n"
