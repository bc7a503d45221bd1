"""One run as a pipeline: :func:`prepare` (data, partition, masks from the named streams) ->
:func:`build` (the method from the registry) -> :func:`train` (:func:`vflbench.training.trainer.fit`) ->
:func:`evaluate` (every test setting, :mod:`vflbench.core.metrics`) -> :func:`record` (CSV rows and the
manifest). :func:`execute` chains them; writing files is :mod:`vflbench.results.outputs`' job. The
benchmark script calls the same steps."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from ..core.errors import VFLBenchError
from ..core.role import SERVER
from ..core.timing import peak_memory, reset_peak_memory
from ..core.warnlog import LibraryWarnings
from ..data.missingness import p_key
from ..methods import METHODS, Method, MethodContext
from ..nn.models import ModelSpec
from ..results.outputs import versions
from ..runs.config import ResolvedRun
from ..runs.settings import columns as settings_columns
from .evaluation import METRICS, Evaluation, cost_extras, evaluate, mask_summary, score  # noqa: F401

# the pipeline's steps, re-exported
from .inputs import RunInputs, prepare, report_alignment, validation_split  # noqa: F401
from .monitors import BudgetEvaluator, EarlyStopping, SSLProbe, TargetMonitor, TreeRounds  # noqa: F401
from .trainer import Callback, History, StageHP, TrainPolicy, fit, fit_at_once


def build(run: ResolvedRun, inputs: RunInputs) -> Method:
    t = time.perf_counter()
    data, part = inputs.prep.data, inputs.prep.partition
    x = data.x_train
    ms = run.model
    ctx = MethodContext(
        k=part.n_parties,
        n_classes=data.n_classes,
        widths=part.widths(),
        in_ch=int(x.shape[1]) if x.ndim == 4 else 1,
        model=ModelSpec(ms["arch"], int(ms["cut"]), tuple(ms.get("hidden", ())), int(ms.get("head_hidden", 0))),
        device=inputs.device,
        streams=inputs.prep.streams,
        options=dict(run.method_options),
        positive_class=data.info.positive_class,
        epochs=sum(int(hp.epochs) for hp in run.stage_hp.values()) or int(run.hp.epochs),
        monitored=bool(run.target),
        embedded=part.embedded(data.embedded),
    )
    if ctx.model.arch == "mlp" and x.ndim == 4:
        raise VFLBenchError(
            "An MLP extractor cannot read image tiles; use --arch cnn-small, resnet18 or resnet18-half."
        )
    if ctx.model.arch != "mlp" and x.ndim != 4:
        raise VFLBenchError(f"Extractor '{ctx.model.arch}' needs image data; use --arch mlp for tabular data.")
    method = METHODS.get(run.method)(ctx)
    mech = run.settings.get("mechanism")
    if (
        mech is not None and mech.name != "none"
    ):  # --mechanism: privacy at the party-to-server boundary, whatever the method
        from ..privacy.mechanisms import attach

        attach(method, mech, run.settings.get("secagg", "plain")).owner = "run"
    comp = run.settings.get("compress")
    if comp is not None and comp.name != "none":  # --compress: what crosses is compressed, whatever the method
        from ..compression.channel import CompressedChannel, CompressedLDPChannel, compression_generators

        gens = compression_generators(ctx.streams, inputs.device)
        if method.boundary is not None:  # --mechanism ldp: noise first, then compression (post-processing)
            method.channel = method.boundary.channel = CompressedLDPChannel(method.channel, comp, gens)
        else:
            method.channel = CompressedChannel(method.k, comp, gens)
    if (
        method.boundary is not None
    ):  # against whom its epsilon holds depends on where the parties run and who can derive their noise
        method.boundary.runtime, method.boundary.noise_source = run.runtime, run.settings.get("noise_source", "seeded")
    inputs.timings["build_s"] = time.perf_counter() - t
    return method


def data_record(inputs: RunInputs) -> dict[str, Any]:
    """The manifest's ``data``: the dataset's summary, with ``n_train`` and ``train_class_counts`` counting the rows
    trained on (less a --train-samples subset's leftovers and the held-out validation rows; ``n_train_split``: the
    split's training rows)."""
    data = inputs.prep.data
    y = inputs.train.y.cpu().numpy()
    out = {**data.summary(), "checksums": data.checksums}
    out["n_train_split"] = out["n_train"]
    out["n_train"] = int(len(y))
    out["train_class_counts"] = np.bincount(y, minlength=data.n_classes).tolist()
    if inputs.y_val is not None:
        out["n_validation"] = int(len(inputs.y_val))
    return out


def attack_truth(run: ResolvedRun, inputs: RunInputs):
    """What scores a run's attacks: the true training labels and each party's plain block (None: no attack)."""
    from .attacking import attack_specs

    specs = attack_specs(run)
    if not specs:
        return None
    if inputs.prep.data.embedded and any(a.split(":", 1)[0] == "inversion" for a in specs):
        raise VFLBenchError(
            "--attack inversion scores a reconstruction of each party's features by R^2, and an embedded categorical "
            "column (integer codes) has none; scoring it by accuracy is not implemented. One-hot encode such columns "
            "(raise --data-opt embed_above above their levels), drop them, or leave out the inversion attack."
        )
    blocks = inputs.train.blocks
    if blocks.kind != "features":
        raise VFLBenchError("--attack runs on tabular data only for now (image blocks are tiles cut per batch).")
    widths = inputs.prep.partition.widths()
    return inputs.train.y.clone(), [
        blocks.x[k, :, : widths[k]].float().cpu().numpy().copy() for k in range(len(widths))
    ]


def privacy_callbacks(run: ResolvedRun, inputs: RunInputs, method: Method, truth, wire=None) -> list[Callback]:
    """The run's label defense (installed now: randomized response redraws the training labels) and its attacks
    (tapping the channel), as callbacks whose extras and rows the record takes."""
    from .attacking import AttackHarness, Extras, apply_label_defense

    out: list[Callback] = []
    extras = apply_label_defense(run, inputs, method)
    if extras:
        out.append(Extras(extras))
    if truth is not None:
        harness = AttackHarness(run, inputs, *truth, wire=wire)
        harness.install(method)
        out.append(harness)
    return out


def stage_hp(run: ResolvedRun) -> dict[str, StageHP]:
    return dict(run.stage_hp)


def policy(run: ResolvedRun) -> TrainPolicy:
    p = run.protocol
    return TrainPolicy(
        per_batch_masks=p.train_granularity == "batch",
        shuffle=p.shuffle,
        balanced_sampler=p.balanced_sampler,
        augment=p.augment,
        stale_updates=p.stale_updates,
        local_steps=int(run.settings.get("local_steps", 1)),
    )


def party_faults(run: ResolvedRun, wire=None):
    """The run's :class:`~vflbench.runs.faults.PartyFaults`: when it schedules failures (``--fail-party``), or when
    its parties are processes and it goes on without a lost one (``--on-party-loss``); else None."""
    import warnings

    from ..core.errors import VFLBenchWarning
    from ..runs.faults import PartyFaults, continues, parse_failures

    schedule = parse_failures(run.settings.get("fail_party"))
    mcls = METHODS.get(run.method)
    if not schedule and not (wire is not None and continues(mcls, run.method_options, run.settings)):
        return None
    speaks = wire is None or wire.rank == SERVER  # a party process's stderr is its log

    def announce(line: str) -> None:
        if speaks:
            warnings.warn(line, VFLBenchWarning, stacklevel=2)

    faults = PartyFaults(schedule, run.parties, announce)
    if wire is not None:
        wire.watch(faults)
    return faults


def early_stopping(run: ResolvedRun, inputs: RunInputs, method: Method) -> EarlyStopping | TreeRounds | None:
    """The early stopping of the method's last stage when its ``patience`` is set, or of a tree method's rounds when
    its ``early_stop`` is (vflbench.runs.config: early_stopping_split gives both validation rows)."""
    if method.trains_whole:
        rounds = int(method.options.get("early_stop", 0) or 0)
        return TreeRounds(inputs, method, rounds, run.eval_batch_size) if rounds else None
    last = method.stages[-1].name
    hp = run.stage_hp[last]
    return EarlyStopping(inputs, method, last, hp.patience, run.eval_batch_size) if hp.patience else None


def train(run: ResolvedRun, inputs: RunInputs, method: Method, callbacks: list[Callback] = ()) -> History:
    t = time.perf_counter()
    if method.trains_whole:  # gradient-boosted trees: the whole training set at once, weighted as the sampler would
        hist = fit_at_once(method, inputs.train, policy(run).balanced_sampler, callbacks)
    else:
        hist = fit(
            method,
            inputs.train,
            stage_hp(run),
            policy(run),
            inputs.prep.streams.seed_for,
            callbacks,
            faults=method.faults,
        )
    inputs.timings["train_s"] = time.perf_counter() - t
    return hist


def record(
    run: ResolvedRun,
    inputs: RunInputs,
    method: Method,
    hist: History,
    evals: list[Evaluation],
    callbacks: list[Callback] = (),
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The run's tidy CSV rows (one per test setting and metric, with the run's extras as columns)
    and its manifest."""
    t_record = time.perf_counter()
    extras = cost_extras(method)
    if (
        "alignment" in inputs.prep.data.preprocessing
    ):  # which parties hold no sample: 'none' then is not 'every block observed'
        from ..data.alignment import absent_parties

        extras["parties_absent"] = absent_parties(inputs.prep.data.preprocessing["alignment"])
    for cb in callbacks:
        extras.update(cb.extras())
    if method.faults is not None:  # every row of a run that can lose a party says whether it did
        extras["parties_lost"] = method.faults.column()
    metrics = [*METRICS, *(f"{n}@{v}" for v in method.eval_variants for n in METRICS), *(f"val_{n}" for n in METRICS)]
    metrics += [*(f"{n}@screen" for n in METRICS), "screen_auroc", "screen_flagged"]  # --screen (absent without)
    total = sum(h.epochs for h in run.stage_hp.values())
    budgets = {ep: ev for cb in callbacks if isinstance(cb, BudgetEvaluator) for ep, ev in cb.results.items()}
    rows = [
        row(run, e.setting, metric, e.metrics[metric], e.metrics, extras, epoch, e.wrong)
        for epoch, evs in [*sorted(budgets.items()), (total, evals)]
        for e in evs
        for metric in metrics
        if metric in e.metrics
    ]
    rows += attack_rows(run, inputs, callbacks, extras)
    prep = inputs.prep
    mask_info = {"train": {**inputs.train_masks.info, **mask_summary(inputs.train_masks.observed)}}
    mask_info.update({f"test/{e.key}": e.masks for e in evals})
    if inputs.train_wrong is not None:
        mask_info["train"].update(inputs.train_wrong.info)
    mcls = type(method)
    manifest = {
        "run_id": run.run_id,
        "run_key": run.key,
        "config": run.to_dict(),
        "method": {
            "name": mcls.name,
            "display": mcls.display,
            "paper": mcls.paper,
            "stages": [s.__dict__ for s in mcls.stages_for(run.method_options)],
            "options": dict(run.method_options),
            "option_sources": dict(run.option_sources),
            "assumptions": list(method.assumptions),
        },
        "device": str(inputs.device),
        "device_reason": inputs.device_reason,
        "threads": torch.get_num_threads(),
        "versions": versions(),
        "data": data_record(inputs),
        "partition": prep.partition.describe(),
        "seeds": {
            "run_seed": run.seed,
            "streams": secret_streams(prep.streams.used)
            if run.settings.get("noise_source") == "secret"
            else prep.streams.used,
        },
        "masks": mask_info,
        "parameters": {"total": method.n_params(), "members": method.n_members},
        "communication": method.channel.summary(),
        "extras": extras,
        "timings": {
            **inputs.timings,
            "seconds_per_epoch": float(np.mean(hist.seconds)) if hist.seconds else 0.0,
            "stage_seconds": {
                st: float(sum(t for t, s in zip(hist.seconds, hist.stage, strict=True) if s == st))
                for st in dict.fromkeys(hist.stage)
            },
        },
        "history": {
            "loss": hist.loss,
            "lr": hist.lr,
            "seconds": hist.seconds,
            "stage": hist.stage,
            "skipped_batches": hist.skipped_batches,
            **{f"train_{cb.metric}": cb.curve for cb in callbacks if isinstance(cb, TargetMonitor)},
        },
    }
    if "alignment" in prep.data.preprocessing:
        manifest["alignment"] = prep.data.preprocessing["alignment"]  # intersection sizes (vflbench.data.alignment)
    if method.faults is not None:
        manifest["party_losses"] = method.faults.manifest()
    if inputs.screen is not None:  # --screen: the score, what it reads, the thresholds and where they were chosen
        manifest["screen"] = inputs.screen.record()
    manifest.update(privacy_manifest(run, method, extras, callbacks))
    if own := method.manifest_extras():
        manifest[mcls.name] = own
    manifest["memory"] = peak_memory()
    manifest["timings"]["record_s"] = time.perf_counter() - t_record
    return rows, manifest


def privacy_manifest(run: ResolvedRun, method: Method, extras: dict[str, Any], callbacks) -> dict[str, Any]:
    """The manifest's ``privacy`` (the mechanism's certified epsilons and, beside them, the label defense and its
    certified label epsilon) and ``attacks`` (the attacks measured on the run)."""
    out: dict[str, Any] = {}
    privacy = method.boundary.manifest() if method.boundary is not None else None
    if privacy is not None:
        out["privacy"] = {
            **privacy,
            **(method.privacy_manifest(bool(run.target)) if hasattr(method, "privacy_manifest") else {}),
        }
    if "label_defense" in extras:  # the label side's protection, beside the feature side's
        out.setdefault("privacy", {}).update({k: extras[k] for k in ("label_defense", "epsilon_label") if k in extras})
    attacks = [text for cb in callbacks if hasattr(cb, "attacks") for text, _ in cb.attacks]
    if attacks:
        out["attacks"] = attacks
    return out


def attack_rows(
    run: ResolvedRun, inputs: RunInputs, callbacks: list[Callback], extras: dict[str, Any]
) -> list[dict[str, Any]]:
    """``attack:NAME:METRIC`` rows, one per adversary and evaluated epoch, beside the utility rows: scored on the
    training samples, under the training missingness (``test_missing`` is the training setting's)."""
    n = int(inputs.train.y.shape[0])
    counts = {"n_counted": n, "n_test": n}
    out = []
    for cb in callbacks:
        for epoch, items in sorted(getattr(cb, "rows", {}).items()) if hasattr(cb, "attacks") else ():
            for who, metric, spec, value in items:
                r = row(run, run.train_missing, metric, value, counts, extras, epoch)
                out.append({**r, "adversary": who, "attack": spec})
    return out


def secret_streams(used: dict[str, int]) -> dict[str, Any]:
    """The manifest's stream seeds under noise_source=secret: the parties' noise streams were reseeded
    inside each party process from the OS, so their run-seed values are replaced by a note."""
    return {
        k: (
            "secret: drawn from the OS inside the party process; not recorded" if k.startswith("mechanism/party") else v
        )
        for k, v in used.items()
    }


# A step this large (parameters x rows per step) is worth splitting between threads, and splits with the same
# numbers: Combinatorial at K = 8 on Isolet (49.1 M parameters x 32 rows) trained an epoch in 9.0 s on two
# threads against 13.3-14.4 s on one; FALSE-VFL-I on Isolet (1.0 M x 512 x 10 importance samples), 7.2 s against
# 13.5 s for four epochs a stage, its parameters bit for bit the same (docs/SPEED.md). Standard VFL on Isolet
# (0.5 M x 32) is a hundred times below it.
LARGE_STEP = 1_000_000_000


def intra_op_threads(run: ResolvedRun, step_size: int | None = None) -> int:
    """Torch intra-op threads for a run: ``--threads`` (``VFLBENCH_THREADS``) when given; else one for
    tabular models, whose steps are too small to split (on a loaded 2-core machine two threads made
    an epoch 23x slower), unless the built method's ``step_size`` (:func:`step_size`) reaches
    :data:`LARGE_STEP`; and the worker's share of the cores for image models."""
    explicit = os.environ.get("VFLBENCH_THREADS")
    if explicit:
        return max(1, int(explicit))
    if run.model.get("arch") == "mlp" and (step_size is None or step_size < LARGE_STEP):
        return 1
    return max(1, int(os.environ.get("VFLBENCH_WORKER_THREADS", os.cpu_count() or 1)))


def step_size(run: ResolvedRun, method) -> int:
    """Parameters x rows of a training step: the method's parameters, the largest batch of its stages, and
    the rows each sample puts through the models (:meth:`Method.rows_per_sample`)."""
    batch = max([int(h.batch_size) for h in run.stage_hp.values()] or [int(run.hp.batch_size)])
    return method.n_params() * batch * method.rows_per_sample()


def execute(
    run: ResolvedRun, device: str = "auto", callbacks: list[Callback] = (), wire=None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Prepare, build, train, evaluate and record one resolved run; returns (CSV rows, manifest).
    ``wire`` (vflbench.federation.runtime.Wire): this process is one party or the server of a run whose parties
    are processes; it keeps only its share of the data and its channel crosses the wire. Libraries' warnings go to
    the manifest's ``warnings`` (:mod:`vflbench.core.warnlog`), not to the console."""
    with LibraryWarnings() as caught:
        rows, manifest = _execute(run, device, callbacks, wire)
    if manifest and caught.count:
        manifest["warnings"] = caught.manifest()
    return rows, manifest


def _execute(
    run: ResolvedRun, device: str, callbacks: list[Callback], wire
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    started = time.time()  # the run's start: vflbench.core.timing measures startup up to here
    reset_peak_memory()  # the manifest's peak is this run's, also inside a sweep worker
    if wire is None and run.runtime == "processes":  # one process per party on this machine, this one the server
        from ..federation.runtime import run_processes

        # every process resolves the same request by the same rule (runs.devices), so computes where the in-process
        # run would; the server refuses a party on another device (runtime.check_same_run)
        return run_processes(run, execute, str(device), callbacks)
    torch.set_num_threads(intra_op_threads(run))
    inputs = prepare(run, device)
    inputs.timings["started_at"] = started
    truth = attack_truth(run, inputs)  # before a process keeps only its share: the harness scores attacks with it
    if wire is not None:
        from ..federation.runtime import place, wire_channel

        inputs.timings["setup_comm_s"], wire.comm_s = wire.comm_s, 0.0  # e.g. entity alignment, apart from training's
        from ..methods import METHODS
        from ..methods.base import Method as _Method

        trains_alone = METHODS.get(run.method).party_losses is not _Method.party_losses
        place(inputs, wire.rank, labels_at_parties=trains_alone)
    report_alignment(inputs)
    for cb in callbacks:
        cb.on_prepared(inputs)
    method = build(run, inputs)
    if wire is None:  # now that the step's size is known (the processes of one run share the machine: one thread)
        torch.set_num_threads(intra_op_threads(run, step_size(run, method)))
    else:
        method.channel = wire_channel(method, wire, run)
    method.faults = party_faults(run, wire)
    callbacks = [*callbacks, *privacy_callbacks(run, inputs, method, truth, wire)]
    if run.target:
        callbacks.append(TargetMonitor(run.target, inputs, method, run.eval_batch_size))
    if run.eval_epochs:
        callbacks.append(BudgetEvaluator(run, inputs, method))
    if SSLProbe.wanted(method):
        callbacks.append(SSLProbe(run, inputs, method))
    if stop := early_stopping(run, inputs, method):
        callbacks.append(stop)
    hist = train(run, inputs, method, callbacks)
    evals = evaluate(run, inputs, method)
    if (
        wire is not None and wire.rank != SERVER
    ):  # a party's process: the server records the run (a party's manifest would be read by nobody)
        return [], {}
    for cb in callbacks:
        cb.on_finished(run, inputs, method)
    return record(run, inputs, method, hist, evals, callbacks)


def execute_pack(runs: list[ResolvedRun], device: str = "auto") -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Runs that differ only in their seed (and where the method allows, their training missingness), trained together
    (:mod:`vflbench.training.packing`) and then
    evaluated and recorded one by one; one (CSV rows, manifest) per run, in order. Raises
    :class:`NotPackable` (before any training) when the runs cannot share a pack."""
    from .packing import why_not_packable

    if not runs:
        raise NotPackable("a pack needs at least one run")
    keys = {pack_key(r) for r in runs}
    if len(keys) != 1:
        raise NotPackable("the runs differ in more than their seed and training missingness")
    why = why_not_packable(runs[0])
    if why:
        raise NotPackable(why)
    with LibraryWarnings() as caught:
        out = _execute_pack(runs, device)
    for _, manifest in out if caught.count else ():  # the pack's runs were trained together: one record for all
        manifest["warnings"] = caught.manifest()
    return out


def _execute_pack(runs: list[ResolvedRun], device: str) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    from .packing import VectorisedStep

    torch.set_num_threads(intra_op_threads(runs[0]))
    started = time.time()
    reset_peak_memory()  # one peak for the pack's runs: they are trained together
    inputs = [prepare(r, device) for r in runs]
    for i in inputs:
        i.timings["started_at"] = started
    methods = [build(r, i) for r, i in zip(runs, inputs, strict=True)]
    callbacks: list[list[Callback]] = []
    for r, i, m in zip(runs, inputs, methods, strict=True):
        cbs: list[Callback] = []
        if r.target:
            cbs.append(TargetMonitor(r.target, i, m, r.eval_batch_size))
        if r.eval_epochs:
            cbs.append(BudgetEvaluator(r, i, m))
        callbacks.append(cbs)
    t = time.perf_counter()
    hists = fit(
        methods,
        [i.train for i in inputs],
        stage_hp(runs[0]),
        policy(runs[0]),
        [i.prep.streams.seed_for for i in inputs],
        callbacks,
        step=VectorisedStep,
    )
    train_s = time.perf_counter() - t
    out = []
    for r, i, m, h, cbs in zip(runs, inputs, methods, hists, callbacks, strict=True):
        i.timings["train_s"] = train_s
        rows, manifest = record(r, i, m, h, evaluate(r, i, m), cbs)
        manifest["pack"] = {
            "size": len(runs),
            "seeds": [x.seed for x in runs],
            "train_missing": [x.train_missing for x in runs],
            "run_ids": [x.run_id for x in runs],
            "note": "trained together with the other runs of the pack (one vmapped model bank, each run with its own "
            "streams); train_s and the epoch seconds are the whole pack's",
        }
        out.append((rows, manifest))
    return out


class NotPackable(Exception):
    """These runs cannot be trained as one pack (they are then run one at a time)."""


def pack_key(r: ResolvedRun) -> str:
    """Runs with equal keys can share a pack: they differ only in their seed and, where the method
    trains on samples chosen without looking at the masks, in their training missingness (each
    member draws its own masks; the sample pool, and so the number of steps, is the same for all)."""
    import json

    d = r.to_dict()
    d.pop("seed", None)
    if masks_are_per_member(r):
        d.pop("train_missing", None)
    return json.dumps(d, sort_keys=True, default=str)


def masks_are_per_member(r: ResolvedRun) -> bool:
    """Whether runs differing in training missingness can share a pack: no stage of the method picks
    its training samples by their masks (``samples="aligned"`` or ``"complete"`` does; members would take different
    numbers of steps)."""
    from ..methods import METHODS

    return all(st.samples not in ("aligned", "complete") for st in METHODS.get(r.method).stages_for(r.method_options))


def protocol_overrides(r: ResolvedRun) -> str:
    """``key=value;...`` of the protocol options this run sets apart from its named protocol's."""
    from ..runs.protocols import PROTOCOLS

    named = PROTOCOLS.get(r.protocol.name)
    if named is None:
        return ""
    base = named.resolve(r.dataset).as_dict()
    return ";".join(f"{k}={v}" for k, v in r.protocol.as_dict().items() if k != "name" and base.get(k) != v)


def row(
    r: ResolvedRun,
    test_missing: str,
    metric: str,
    value: float,
    met: dict[str, Any],
    extras: dict[str, Any],
    epoch: int | None = None,
    wrong: tuple[str, str] = ("none", "none"),
) -> dict[str, Any]:
    st = r.settings
    wrong_cols = (
        {
            "train_corrupt": str(st["train_corrupt"]),
            "train_misalign": str(st["train_misalign"]),
            "test_corrupt": wrong[0],
            "test_misalign": wrong[1],
        }
        if any(str(st.get(n, "none")) != "none" for n in ("train_corrupt", "train_misalign"))
        or any(tuple(map(str, st.get(n, ("none",)))) != ("none",) for n in ("test_corrupt", "test_misalign"))
        else {}
    )  # fmt: skip  (blocks present but wrong: columns only in the runs that have them, so earlier rows keep theirs)
    return {
        "run_id": r.run_id,
        "run_key": r.key,
        "dataset": r.dataset,
        "method": r.method,
        "method_display": r.method_display,
        "parties": r.parties,
        "partitioner": r.partitioner,
        "protocol": r.protocol.name,
        "train_missing": r.train_missing,
        "p_miss_train": p_key(r.train_missing),
        "test_missing": test_missing,
        "p_miss_test": p_key(test_missing),
        **wrong_cols,
        "seed": r.seed,
        "epochs": sum(h.epochs for h in r.stage_hp.values()) if r.stage_hp else r.hp.epochs,  # every stage's epochs
        **({"stage_epochs": ";".join(f"{k}:{h.epochs}" for k, h in r.stage_hp.items())} if len(r.stage_hp) > 1 else {}),
        **(
            {
                "options": ";".join(
                    f"{k}={v}" for k, v in sorted(r.method_options.items()) if r.option_sources.get(k) == "user"
                )
            }
            if any(src == "user" for src in r.option_sources.values())
            else {}
        ),  # the method options a user set (variants of a method)
        **(
            {"protocol_options": po} if (po := protocol_overrides(r)) else {}
        ),  # protocol options set apart from the named protocol's
        **({"epoch": epoch} if r.eval_epochs else {}),  # runs evaluated at several budgets: the epoch of each row
        "metric": metric,
        "value": value,
        "n_counted": met[
            "val_n_counted" if metric.startswith("val_") else "n_counted"
        ],  # validation rows: the held-out samples
        "n_test": met["val_n_test" if metric.startswith("val_") else "n_test"],
        "status": "ok",
        **settings_columns(r.settings),  # declared settings set apart from their defaults (vflbench.runs.settings)
        **extras,
    }
