"""One run as a pipeline: :func:`prepare` (data, partition, masks from the named streams) ->
:func:`build` (the method from the registry) -> :func:`train` (:func:`vflbench.training.fit`) ->
:func:`evaluate` (every test setting, :mod:`vflbench.metrics`) -> :func:`record` (CSV rows and the
manifest). :func:`execute` chains them; writing files is :mod:`vflbench.outputs`' job. The
benchmark script calls the same steps."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .config import ResolvedRun
from .devices import choose_device
from .errors import VFLBenchError
from .methods import METHODS, Method, MethodContext
from .metrics import compute_metrics
from .missingness import Masks, p_key
from .models import ModelSpec
from .outputs import versions
from .preparation import Prepared, draw_masks
from .preparation import prepare as prepare_data
from .settings import columns as settings_columns
from .training import BlockData, Callback, History, StageHP, TrainPolicy, TrainSet, fit, predict


@dataclass
class RunInputs:
    """Everything prepared for one run, identical for every method given the seed."""

    prep: Prepared
    device: torch.device
    train: TrainSet
    test: BlockData
    y_test: np.ndarray
    train_masks: Masks
    test_masks: dict[str, Masks]
    timings: dict[str, float] = field(default_factory=dict)
    val: BlockData | None = None  # protocol option val_split: labeled training samples held out of training
    y_val: np.ndarray | None = None
    val_masks: dict[str, Masks] = field(default_factory=dict)
    device_reason: str = ""  # why the run computes where it does (vflbench.devices)


def prepare(run: ResolvedRun, device: str | torch.device = "auto") -> RunInputs:
    from .paths import register

    register(run.path_bases)  # a worker process reads the files the experiment file named
    t = time.perf_counter()
    dev, why = choose_device(device, run.model.get("arch", "mlp"))
    proto = run.protocol
    prep = prepare_data(run.dataset, run.data_options, run.parties, run.partitioner, run.partition_options, run.seed)
    timings = {"load_and_partition_s": time.perf_counter() - t}
    t = time.perf_counter()
    if proto.permute_once:  # the authors' HAPT loader permutes rows once with the seed
        prep.permute_rows(prep.streams.numpy("permute"))
    data = prep.data
    if run.labeled is not None and run.labeled > len(data.y_train):
        raise VFLBenchError(f"--labeled {run.labeled} is larger than the training set ({len(data.y_train)} samples).")
    bs = run.hp.batch_size
    train_masks = draw_masks(prep, run.train_missing, split="train", granularity=proto.train_granularity, batch_size=bs,
                             all_missing=proto.all_missing, labeled=run.labeled, aligned=run.aligned)
    test_masks = {s: draw_masks(prep, s, split="test", granularity=proto.test_granularity, batch_size=bs, all_missing=proto.all_missing)
                  for s in run.test_missing}
    structural = getattr(data, "structural", None)
    if structural is not None:  # parties' own files: a block the party does not hold is missing (vflbench.alignment)
        train_masks.observed = train_masks.observed & structural["train"]
        for m in test_masks.values():
            m.observed = m.observed & structural["test"]
        train_masks.info["alignment"] = "blocks whose party does not hold the sample's ID are missing, under the drawn mask"
    for s, m in test_masks.items():
        if not m.observed.any():
            raise VFLBenchError(f"The test setting '{s}' observes no block of any test sample, so nothing can be evaluated; lower its missing probability or drop it from --test-missing.")
    if not train_masks.observed.any():
        raise VFLBenchError(f"The training mask '{run.train_missing}' observes no block of any sample, so nothing can be trained; lower the missing probability.")
    keep = np.arange(len(data.y_train))
    val = y_val = None
    val_masks: dict[str, Masks] = {}
    if proto.val_split > 0:
        keep, val_idx = validation_split(run, train_masks, prep.streams.numpy("validation"))
        val, y_val = BlockData(data.x_train[val_idx], prep.partition, dev), data.y_train[val_idx]
        for s in run.test_missing:  # the test settings' mechanisms on the validation samples, each from its own stream
            full = draw_masks(prep, s, split="train", stream=f"val_masks/{s}", granularity=proto.test_granularity, batch_size=bs,
                              all_missing=proto.all_missing)
            full.observed = full.observed[val_idx]
            val_masks[s] = full
        train_masks.info.update({"validation_samples": int(len(val_idx)), "val_split": proto.val_split})
    if n := run.settings.get("train_samples", 0):  # --train-samples: a uniform subset of what training would see
        if n > len(keep):
            raise VFLBenchError(f"--train-samples {n} is more than the {len(keep)} training samples this run has; lower it (0 = all).")
        keep = np.sort(prep.streams.numpy("train_samples").choice(keep, size=n, replace=False))
        train_masks.info["train_samples"] = int(n)
    labeled = None
    if train_masks.labeled is not None:
        lab = np.zeros(len(data.y_train), dtype=bool)
        lab[train_masks.labeled] = True
        labeled = torch.as_tensor(lab[keep], device=dev)
    x_train = data.x_train if len(keep) == len(data.y_train) else data.x_train[keep]
    train = TrainSet(BlockData(x_train, prep.partition, dev), torch.as_tensor(data.y_train[keep], device=dev),
                     torch.as_tensor(train_masks.observed[keep], device=dev), labeled)
    test = BlockData(data.x_test, prep.partition, dev)
    timings["masks_and_tensors_s"] = time.perf_counter() - t
    return RunInputs(prep, dev, train, test, data.y_test, train_masks, test_masks, timings, val, y_val, val_masks, why)


def report_alignment(inputs: RunInputs) -> None:
    """Warn, before training, about a party that holds none (or few) of the samples of an aligned run."""
    align = inputs.prep.data.preprocessing.get("alignment")
    if align is None:
        return
    import warnings

    from .alignment import holding_report
    from .errors import VFLBenchWarning

    for w in holding_report(align)[1]:
        warnings.warn(w, VFLBenchWarning, stacklevel=2)


def validation_split(run: ResolvedRun, masks: Masks, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(training rows kept, validation rows): ``val_split`` of the labeled samples outside the aligned
    reserve, drawn uniformly from the ``validation`` stream, leave the training set entirely (neither
    labeled nor unlabeled data for any stage)."""
    if masks.labeled is None:
        raise VFLBenchError("Protocol option val_split holds out labeled samples of a semi-supervised run; give --labeled (and --aligned).")
    n = len(masks.observed)
    rest = np.setdiff1d(np.asarray(masks.labeled), masks.reserve if masks.reserve is not None else [])
    n_val = int(round(run.protocol.val_split * len(rest)))
    if n_val < 1:
        raise VFLBenchError(f"val_split={run.protocol.val_split} of {len(rest)} labeled samples outside the reserve holds out none; raise it.")
    val = np.sort(rng.choice(rest, size=n_val, replace=False))
    return np.setdiff1d(np.arange(n), val), val


def build(run: ResolvedRun, inputs: RunInputs) -> Method:
    t = time.perf_counter()
    data, part = inputs.prep.data, inputs.prep.partition
    x = data.x_train
    ms = run.model
    ctx = MethodContext(
        k=part.n_parties, n_classes=data.n_classes, widths=part.widths(), in_ch=int(x.shape[1]) if x.ndim == 4 else 1,
        model=ModelSpec(ms["arch"], int(ms["cut"]), tuple(ms.get("hidden", ())), int(ms.get("head_hidden", 0))), device=inputs.device, streams=inputs.prep.streams,
        options=dict(run.method_options), positive_class=data.info.positive_class,
        epochs=sum(int(hp.epochs) for hp in run.stage_hp.values()) or int(run.hp.epochs), monitored=bool(run.target),
    )
    if ctx.model.arch == "mlp" and x.ndim == 4:
        raise VFLBenchError("An MLP extractor cannot read image tiles; use --arch cnn-small, resnet18 or resnet18-half.")
    if ctx.model.arch != "mlp" and x.ndim != 4:
        raise VFLBenchError(f"Extractor '{ctx.model.arch}' needs image data; use --arch mlp for tabular data.")
    method = METHODS.get(run.method)(ctx)
    mech = run.settings.get("mechanism")
    if mech is not None and mech.name != "none":  # --mechanism: privacy at the party-to-server boundary, whatever the method
        from .mechanisms import attach

        attach(method, mech, run.settings.get("secagg", "plain")).owner = "run"
    if method.boundary is not None:  # against whom its epsilon holds depends on where the parties run and who can derive their noise
        method.boundary.runtime, method.boundary.noise_source = run.runtime, run.settings.get("noise_source", "seeded")
    inputs.timings["build_s"] = time.perf_counter() - t
    return method


def cost_extras(method: Method) -> dict[str, Any]:
    """The run's cost columns: traffic, the method's own extras and, for a mechanism the run attached
    (``--mechanism``), its privacy columns."""
    out = {**method.channel.extras(), **method.extras()}
    b = method.boundary
    if b is not None and getattr(b, "owner", None) == "run":
        out.update({"mechanism": str(b.spec), "secagg": b.secagg, **b.extras()})
    return out


def stage_hp(run: ResolvedRun) -> dict[str, StageHP]:
    return dict(run.stage_hp)


def policy(run: ResolvedRun) -> TrainPolicy:
    p = run.protocol
    return TrainPolicy(per_batch_masks=p.train_granularity == "batch", shuffle=p.shuffle, balanced_sampler=p.balanced_sampler,
                       augment=p.augment, stale_updates=p.stale_updates)


class TargetMonitor(Callback):
    """``--target train_auprc=0.9``: after every epoch, one pass over the training set the way the
    method predicts (PBM-VFL: through its mechanism), in the ``monitor`` phase; records the first
    epoch at or above the target and the run's cost columns (``comm_*``, ``epsilon_*``) at that
    point. Epochs count across stages."""

    COST_PREFIXES = ("comm_", "epsilon_")

    def __init__(self, target: str, inputs: RunInputs, method: Method, batch_size: int):
        name, _, value = target.partition("=")
        self.metric, self.value = name.removeprefix("train_"), float(value)
        self.inputs, self.batch_size, self.method = inputs, batch_size, method
        n_classes = inputs.prep.data.n_classes
        if self.metric in ("auprc", "f1") and n_classes != 2:  # (dataset options can change the class count)
            raise VFLBenchError(f"This data has {n_classes} classes; {name} is defined for binary tasks only. Use train_accuracy.")
        self.curve: list[float] = []
        self.reached: int | None = None
        self.at_target: dict[str, Any] = {}

    def on_epoch_end(self, loop) -> None:
        tr = self.inputs.train
        keep = None if tr.labeled is None else tr.labeled.cpu().numpy()  # only labeled samples can be scored
        met = score(loop.method, self.inputs, tr.blocks, tr.obs, tr.y.cpu().numpy(), self.batch_size, phase="monitor", keep=keep)
        v = float(met[self.metric]) / 100.0  # metrics are percentages; targets are fractions
        self.curve.append(v)
        if self.reached is None and v >= self.value:
            self.reached = len(self.curve)
            cost = cost_extras(loop.method)
            self.at_target = {f"{k}_at_target": x for k, x in cost.items() if k.startswith(self.COST_PREFIXES)}

    def extras(self) -> dict[str, Any]:
        out: dict[str, Any] = {"target": f"train_{self.metric}>={self.value:g}",
                               "epochs_to_target": float(self.reached) if self.reached is not None else float("inf")}
        if self.reached is None:  # never reached: the cost to reach it is unbounded
            cost = cost_extras(self.method)
            out.update({f"{k}_at_target": float("inf") for k in cost if k.startswith(self.COST_PREFIXES)})
        out.update(self.at_target)
        return out


class BudgetEvaluator(Callback):
    """``--eval-epochs``: evaluate under every test setting after the listed epochs (counted across
    stages), as if training had stopped there. Random draws that evaluation makes are restored
    afterwards, so training, and the final evaluation, are the same as in a run without it."""

    def __init__(self, run: ResolvedRun, inputs: RunInputs, method: Method):
        self.run, self.inputs, self.method = run, inputs, method
        self.epochs = set(run.eval_epochs or ())
        self.seen = 0
        self.results: dict[int, list[Evaluation]] = {}

    def on_epoch_end(self, loop) -> None:
        self.seen += 1
        if self.seen not in self.epochs:
            return
        m = self.method
        gens = [m.gen, *getattr(m.channel, "gens", {}).values()]
        states = [g.get_state() for g in gens]
        self.results[self.seen] = evaluate(self.run, self.inputs, m, timed=False)
        for g, st in zip(gens, states, strict=True):
            g.set_state(st)


class SSLProbe(Callback):
    """What self-supervised pretraining learned, for runs with a stage that hides labels and a
    method that exposes its representations (:meth:`Method.probe_representations`): a linear probe
    (standardised features, multinomial logistic regression) fitted on the labeled training samples'
    frozen representations and scored on the test set, every block observed, before the first
    unlabeled stage and after the last one; and SimSiam's collapse diagnostic, the std of the
    L2-normalised projector output (about 1/sqrt(d) when spread, 0 when collapsed), on up to 2,048
    training samples under the training mask. Columns ``ssl_probe_acc_init``,
    ``ssl_probe_acc_pretrained`` (%), ``ssl_collapse_std_init``, ``ssl_collapse_std_pretrained``, ``ssl_collapse_ref``."""

    MAX_FIT = 5000

    def __init__(self, run: ResolvedRun, inputs: RunInputs, method: Method):
        self.run, self.inputs, self.method = run, inputs, method
        self.out: dict[str, Any] = {}
        self.state = "before"

    @staticmethod
    def wanted(method: Method) -> bool:
        """Any run with a stage that hides labels; a method without representations to probe or a
        collapse diagnostic answers None to both and adds no column."""
        return any(not st.labels for st in method.stages)

    def _reps(self, data: BlockData, idx: torch.Tensor) -> np.ndarray | None:
        m = self.method
        parts = []
        for start in range(0, len(idx), self.run.eval_batch_size):
            j = idx[start : start + self.run.eval_batch_size]
            obs = torch.ones(len(j), m.k, dtype=torch.bool, device=j.device)
            r = m.probe_representations(data.batch(j), obs)
            if r is None:
                return None
            parts.append(r.permute(1, 0, 2).reshape(len(j), -1).float().cpu().numpy())
        return np.concatenate(parts)

    @torch.no_grad()
    def _measure(self, suffix: str) -> None:
        from sklearn.linear_model import LogisticRegression
        from sklearn.preprocessing import StandardScaler

        m, inp = self.method, self.inputs
        was = m.store.training
        m.train(False)
        m.store.begin()
        tr = inp.train
        dev = tr.obs.device
        pool = (tr.labeled.nonzero().view(-1) if tr.labeled is not None else torch.arange(tr.blocks.n, device=dev))[: self.MAX_FIT]
        x_tr = self._reps(tr.blocks, pool)
        if x_tr is not None:
            x_te = self._reps(inp.test, torch.arange(inp.test.n, device=dev))
            scaler = StandardScaler().fit(x_tr)
            clf = LogisticRegression(max_iter=2000).fit(scaler.transform(x_tr), tr.y[pool].cpu().numpy())
            self.out[f"ssl_probe_acc{suffix}"] = float(100.0 * (clf.predict(scaler.transform(x_te)) == np.asarray(inp.y_test)).mean())
        sub = torch.arange(min(2048, tr.blocks.n), device=dev)
        std = m.collapse_std(tr.blocks.batch(sub), tr.obs[sub])
        if std is not None:
            self.out[f"ssl_collapse_std{suffix}"] = std
            self.out["ssl_collapse_ref"] = 1.0 / math.sqrt(512)
        m.train(was)

    def on_stage_start(self, loop) -> None:
        if self.state == "before" and not loop.stage.labels:
            self._measure("_init")
            self.state = "pretraining"
        elif self.state == "pretraining" and loop.stage.labels:
            self._measure("_pretrained")
            self.state = "done"

    def extras(self) -> dict[str, Any]:
        if self.state == "pretraining":  # no labeled stage followed
            self._measure("_pretrained")
            self.state = "done"
        return dict(self.out)


def train(run: ResolvedRun, inputs: RunInputs, method: Method, callbacks: list[Callback] = ()) -> History:
    t = time.perf_counter()
    hist = fit(method, inputs.train, stage_hp(run), policy(run), inputs.prep.streams.seed_for, callbacks)
    inputs.timings["train_s"] = time.perf_counter() - t
    return hist


@dataclass
class Evaluation:
    setting: str
    metrics: dict[str, Any]
    masks: dict[str, Any]


METRICS = ("accuracy", "f1", "auprc")


def score(method: Method, inputs: RunInputs, data: BlockData, obs: torch.Tensor, y: np.ndarray, batch_size: int,
          tta: torch.Generator | None = None, phase: str = "eval", keep: np.ndarray | None = None) -> dict[str, Any]:
    """Predict over a split and apply the metric rules (``keep``: the samples that are scored)."""
    preds, valid, scores, counted = predict(method, data, obs, batch_size, tta, phase)
    if keep is not None:
        preds, valid, counted, y = preds[:, keep], valid[:, keep], counted[keep], y[keep]
        scores = None if scores is None else scores[:, keep]
    info = inputs.prep.data
    return compute_metrics(preds, valid, scores, counted, y, rule=method.f1_rule, n_classes=info.n_classes, positive_class=info.info.positive_class)


def evaluate(run: ResolvedRun, inputs: RunInputs, method: Method, timed: bool = True) -> list[Evaluation]:
    t = time.perf_counter()
    out = []
    for s, m in inputs.test_masks.items():
        tta = None
        if run.protocol.test_time_augmentation:
            tta = torch.Generator(device=inputs.device)
            tta.manual_seed(inputs.prep.streams.seed_for(f"tta/{s}"))
        obs = torch.as_tensor(m.observed, device=inputs.device)
        met = score(method, inputs, inputs.test, obs, inputs.y_test, run.eval_batch_size, tta)
        default = run.method_options.get("eval")
        for variant in (v for v in method.eval_variants if v != default):  # e.g. PBM-VFL with exact sums
            method.use_variant(variant)
            other = score(method, inputs, inputs.test, obs, inputs.y_test, run.eval_batch_size, tta)
            met.update({f"{k}@{variant}": other[k] for k in METRICS if k in other})
            method.use_variant(default)
        if inputs.val is not None:  # the same setting's mechanism on the held-out validation samples
            vobs = torch.as_tensor(inputs.val_masks[s].observed, device=inputs.device)
            vmet = score(method, inputs, inputs.val, vobs, inputs.y_val, run.eval_batch_size, tta)
            met.update({f"val_{k}": vmet[k] for k in (*METRICS, "n_counted", "n_test") if k in vmet})
        out.append(Evaluation(s, met, {**m.info, **mask_summary(m.observed)}))
    if timed:
        inputs.timings["eval_s"] = time.perf_counter() - t
    return out


def record(run: ResolvedRun, inputs: RunInputs, method: Method, hist: History, evals: list[Evaluation],
           callbacks: list[Callback] = ()) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The run's tidy CSV rows (one per test setting and metric, with the run's extras as columns)
    and its manifest."""
    t_record = time.perf_counter()
    extras = cost_extras(method)
    if "alignment" in inputs.prep.data.preprocessing:  # which parties hold no sample: 'none' then is not 'every block observed'
        from .alignment import absent_parties

        extras["parties_absent"] = absent_parties(inputs.prep.data.preprocessing["alignment"])
    for cb in callbacks:
        extras.update(cb.extras())
    metrics = [*METRICS, *(f"{n}@{v}" for v in method.eval_variants for n in METRICS), *(f"val_{n}" for n in METRICS)]
    total = sum(h.epochs for h in run.stage_hp.values())
    budgets = {ep: ev for cb in callbacks if isinstance(cb, BudgetEvaluator) for ep, ev in cb.results.items()}
    rows = [row(run, e.setting, metric, e.metrics[metric], e.metrics, extras, epoch)
            for epoch, evs in [*sorted(budgets.items()), (total, evals)] for e in evs for metric in metrics if metric in e.metrics]
    prep = inputs.prep
    mask_info = {"train": {**inputs.train_masks.info, **mask_summary(inputs.train_masks.observed)}}
    mask_info.update({f"test/{e.setting}": e.masks for e in evals})
    mcls = type(method)
    manifest = {
        "run_id": run.run_id,
        "run_key": run.key,
        "config": run.to_dict(),
        "method": {"name": mcls.name, "display": mcls.display, "paper": mcls.paper, "stages": [s.__dict__ for s in mcls.stages_for(run.method_options)],
                   "options": dict(run.method_options), "option_sources": dict(run.option_sources), "assumptions": list(method.assumptions)},
        "device": str(inputs.device),
        "device_reason": inputs.device_reason,
        "threads": torch.get_num_threads(),
        "versions": versions(),
        "data": {**prep.data.summary(), "checksums": prep.data.checksums},
        "partition": prep.partition.describe(),
        "seeds": {"run_seed": run.seed, "streams": secret_streams(prep.streams.used) if run.settings.get("noise_source") == "secret" else prep.streams.used},
        "masks": mask_info,
        "parameters": {"total": method.n_params(), "members": method.n_members},
        "communication": method.channel.summary(),
        "extras": extras,
        "timings": {**inputs.timings, "seconds_per_epoch": float(np.mean(hist.seconds)) if hist.seconds else 0.0,
                    "stage_seconds": {st: float(sum(t for t, s in zip(hist.seconds, hist.stage, strict=True) if s == st)) for st in dict.fromkeys(hist.stage)}},
        "history": {"loss": hist.loss, "lr": hist.lr, "seconds": hist.seconds, "stage": hist.stage, "skipped_batches": hist.skipped_batches,
                    **{f"train_{cb.metric}": cb.curve for cb in callbacks if isinstance(cb, TargetMonitor)}},
    }
    if "alignment" in prep.data.preprocessing:
        manifest["alignment"] = prep.data.preprocessing["alignment"]  # intersection sizes (vflbench.alignment)
    privacy = method.boundary.manifest() if method.boundary is not None else None
    if privacy is not None:
        manifest["privacy"] = {**privacy, **(method.privacy_manifest(bool(run.target)) if hasattr(method, "privacy_manifest") else {})}
    manifest["timings"]["record_s"] = time.perf_counter() - t_record
    return rows, manifest


def secret_streams(used: dict[str, int]) -> dict[str, Any]:
    """The manifest's stream seeds under noise_source=secret: the parties' noise streams were reseeded
    inside each party process from the OS, so their run-seed values are replaced by a note."""
    return {k: ("secret: drawn from the OS inside the party process; not recorded" if k.startswith("mechanism/party") else v) for k, v in used.items()}


def intra_op_threads(run: ResolvedRun) -> int:
    """Torch intra-op threads for a run: ``--threads`` (``VFLBENCH_THREADS``) when given; else one for
    tabular models, whose steps are too small to split (on a loaded 2-core machine two threads made
    an epoch 23x slower), and the worker's share of the cores for image models."""
    explicit = os.environ.get("VFLBENCH_THREADS")
    if explicit:
        return max(1, int(explicit))
    if run.model.get("arch") == "mlp":
        return 1
    return max(1, int(os.environ.get("VFLBENCH_WORKER_THREADS", os.cpu_count() or 1)))


def execute(run: ResolvedRun, device: str = "auto", callbacks: list[Callback] = (), wire=None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Prepare, build, train, evaluate and record one resolved run; returns (CSV rows, manifest).
    ``wire`` (vflbench.runtime.Wire): this process is one party or the server of a run whose parties
    are processes; it keeps only its share of the data and its channel crosses the wire."""
    started = time.time()  # the run's start: vflbench.timing measures startup up to here
    if wire is None and run.runtime == "processes":  # one process per party on this machine, this one the server
        from .runtime import run_processes

        # every process resolves the same request by the same rule (vflbench.devices), so computes where the in-process run
        # would; the server refuses a party on another device (runtime.check_same_run)
        return run_processes(run, str(device), callbacks)
    torch.set_num_threads(intra_op_threads(run))
    inputs = prepare(run, device)
    inputs.timings["started_at"] = started
    if wire is not None:
        from .runtime import place, wire_channel

        inputs.timings["setup_comm_s"], wire.comm_s = wire.comm_s, 0.0  # e.g. entity alignment, apart from training's
        from .methods import METHODS
        from .methods.base import Method as _Method

        trains_alone = METHODS.get(run.method).party_losses is not _Method.party_losses
        place(inputs, wire.rank, labels_at_parties=trains_alone)
    report_alignment(inputs)
    for cb in callbacks:
        cb.on_prepared(inputs)
    method = build(run, inputs)
    if wire is not None:
        method.channel = wire_channel(method, wire, run)
    callbacks = list(callbacks)
    if run.target:
        callbacks.append(TargetMonitor(run.target, inputs, method, run.eval_batch_size))
    if run.eval_epochs:
        callbacks.append(BudgetEvaluator(run, inputs, method))
    if SSLProbe.wanted(method):
        callbacks.append(SSLProbe(run, inputs, method))
    hist = train(run, inputs, method, callbacks)
    evals = evaluate(run, inputs, method)
    return record(run, inputs, method, hist, evals, callbacks)


def execute_pack(runs: list[ResolvedRun], device: str = "auto") -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Runs that differ only in their seed (and where the method allows, their training missingness), trained together (:mod:`vflbench.packing`) and then
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
    torch.set_num_threads(intra_op_threads(runs[0]))
    started = time.time()
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
    hists = fit(methods, [i.train for i in inputs], stage_hp(runs[0]), policy(runs[0]), [i.prep.streams.seed_for for i in inputs], callbacks,
                vectorised=True)
    train_s = time.perf_counter() - t
    out = []
    for r, i, m, h, cbs in zip(runs, inputs, methods, hists, callbacks, strict=True):
        i.timings["train_s"] = train_s
        rows, manifest = record(r, i, m, h, evaluate(r, i, m), cbs)
        manifest["pack"] = {"size": len(runs), "seeds": [x.seed for x in runs], "train_missing": [x.train_missing for x in runs],
                            "run_ids": [x.run_id for x in runs],
                            "note": "trained together with the other runs of the pack (one vmapped model bank, each run with its own "
                                    "streams); train_s and the epoch seconds are the whole pack's"}
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
    from .methods import METHODS

    return all(st.samples not in ("aligned", "complete") for st in METHODS.get(r.method).stages_for(r.method_options))


def mask_summary(obs: np.ndarray) -> dict[str, Any]:
    return {"observed_rate_per_block": obs.mean(0).round(4).tolist(), "fully_observed_fraction": float(obs.all(1).mean()), "all_missing_count": int((~obs.any(1)).sum())}


def protocol_overrides(r: ResolvedRun) -> str:
    """``key=value;...`` of the protocol options this run sets apart from its named protocol's."""
    from .protocols import PROTOCOLS

    named = PROTOCOLS.get(r.protocol.name)
    if named is None:
        return ""
    base = named.resolve(r.dataset).as_dict()
    return ";".join(f"{k}={v}" for k, v in r.protocol.as_dict().items() if k != "name" and base.get(k) != v)


def row(r: ResolvedRun, test_missing: str, metric: str, value: float, met: dict[str, Any], extras: dict[str, Any], epoch: int | None = None) -> dict[str, Any]:
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
        "seed": r.seed,
        "epochs": sum(h.epochs for h in r.stage_hp.values()) if r.stage_hp else r.hp.epochs,  # every stage's epochs
        **({"stage_epochs": ";".join(f"{k}:{h.epochs}" for k, h in r.stage_hp.items())} if len(r.stage_hp) > 1 else {}),
        **({"options": ";".join(f"{k}={v}" for k, v in sorted(r.method_options.items()) if r.option_sources.get(k) == "user")}
           if any(src == "user" for src in r.option_sources.values()) else {}),  # the method options a user set (variants of a method)
        **({"protocol_options": po} if (po := protocol_overrides(r)) else {}),  # protocol options set apart from the named protocol's
        **({"epoch": epoch} if r.eval_epochs else {}),  # runs evaluated at several budgets: the epoch of each row
        "metric": metric,
        "value": value,
        "n_counted": met["val_n_counted" if metric.startswith("val_") else "n_counted"],  # validation rows: the held-out samples
        "n_test": met["val_n_test" if metric.startswith("val_") else "n_test"],
        "status": "ok",
        **settings_columns(r.settings),  # declared settings set apart from their defaults (vflbench.settings)
        **extras,
    }
