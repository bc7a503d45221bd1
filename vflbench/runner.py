"""One run: (dataset, method, K, partitioner, train missingness, seed) -> trained model evaluated
under every test missingness setting -> tidy CSV rows + JSON manifest.

The path from a CLI flag to a CSV row: :class:`RunConfig` (flags) -> :func:`resolve` (presets and
protocol filled in, validated) -> :func:`execute` (data, partition and masks from named streams;
method from the registry; :func:`vflbench.training.fit`; :func:`vflbench.metrics.compute_metrics`)
-> rows written by :func:`write_outputs`.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import __version__
from .errors import VFLBenchError
from .methods import METHODS, MethodContext
from .metrics import compute_metrics
from .missingness import parse_mechanism
from .models import ModelSpec
from .presets import hyperparameters, load_preset, model_spec
from .protocols import get_protocol
from .setup import draw_masks, prepare
from .training import BlockData, fit, predict

HP_KEYS = ("optimizer", "lr", "weight_decay", "momentum", "batch_size", "epochs", "schedule", "eta_min_ratio")


@dataclass
class RunConfig:
    dataset: str
    method: str
    parties: int = 4
    partitioner: str | None = None
    train_missing: str = "none"
    test_missing: list[str] = field(default_factory=lambda: ["none"])
    seed: int = 0
    protocol: str = "clean"
    protocol_options: dict[str, Any] = field(default_factory=dict)
    data_options: dict[str, Any] = field(default_factory=dict)
    partition_options: dict[str, Any] = field(default_factory=dict)
    method_options: dict[str, Any] = field(default_factory=dict)
    hp: dict[str, Any] = field(default_factory=dict)  # overrides of the preset
    model: dict[str, Any] = field(default_factory=dict)  # overrides: arch, hidden, cut
    preset: str = "laser_table1"
    device: str = "auto"
    eval_batch_size: int | None = None


def p_of(spec: str) -> float | str | None:
    """The missing probability a preset is keyed by: 'none' -> 0.0, 'mcar:0.1' -> 0.1, others verbatim."""
    s = spec.strip().lower()
    if s == "none":
        return 0.0
    if s.startswith("mcar:") and "," not in s:
        return float(s.split(":")[1])
    return s


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise VFLBenchError("--device cuda requested but CUDA is not available; use --device cpu or auto.")
    if name not in ("cpu", "cuda"):
        raise VFLBenchError(f"Unknown device '{name}'. Choices: auto, cpu, cuda.")
    return torch.device(name)


def resolve(cfg: RunConfig) -> dict[str, Any]:
    """Validate and fill in everything a run depends on; the result is what the manifest records
    and what the run key hashes. Raises VFLBenchError on bad input, before any work."""
    from .datasets import DATASETS, resolve_options

    spec = DATASETS.get(cfg.dataset)
    mcls = METHODS.get(cfg.method)
    if cfg.parties < 1:
        raise VFLBenchError(f"--parties must be >= 1, got {cfg.parties}.")
    for s in [cfg.train_missing, *cfg.test_missing]:
        parse_mechanism(s)
    if not cfg.test_missing:
        raise VFLBenchError("Give at least one --test-missing setting.")
    proto = get_protocol(cfg.protocol, cfg.protocol_options)
    load_preset(cfg.preset)
    hp = hyperparameters(cfg.preset, cfg.dataset, mcls.hp_key, p_of(cfg.train_missing))
    unknown = set(cfg.hp) - set(HP_KEYS)
    if unknown:
        raise VFLBenchError(f"Unknown hyper-parameter(s) {', '.join(sorted(unknown))}. Known: {', '.join(HP_KEYS)}.")
    hp.update({k: v for k, v in cfg.hp.items() if v is not None})
    hp.setdefault("weight_decay", 0.0)
    hp.setdefault("momentum", 0.0)
    if int(hp["epochs"]) < 1 or int(hp["batch_size"]) < 1:
        raise VFLBenchError("epochs and batch_size must be >= 1.")
    if float(hp["lr"]) <= 0:
        raise VFLBenchError(f"lr must be > 0, got {hp['lr']}.")
    if hp.get("schedule") not in (None, "none", "cosine"):
        raise VFLBenchError(f"Unknown schedule '{hp.get('schedule')}'. Choices: none, cosine.")
    model = model_spec(cfg.preset, cfg.dataset, spec.info.kind)
    model.update({k: v for k, v in cfg.model.items() if v is not None})
    method_opts = {**mcls.option_defaults}
    unknown = set(cfg.method_options) - set(method_opts)
    if unknown:
        raise VFLBenchError(f"Method '{cfg.method}' has no option {', '.join(sorted(unknown))}. Options: {', '.join(method_opts) or 'none'}.")
    method_opts.update(cfg.method_options)
    p = proto.resolve(cfg.dataset)
    if "plug_denominator" in method_opts:
        method_opts["plug_denominator"] = p["plug_denominator"]
        method_opts["granularity"] = p["train_granularity"]
    if "laser_subsets" in method_opts:
        method_opts["laser_subsets"] = p["laser_subsets"]
    data_options = dict(cfg.data_options)
    if str(data_options.get("split_seed", "")).lower() == "run":  # a fresh split per run seed (VFLAIR style)
        data_options["split_seed"] = int(cfg.seed)
    out = {
        "dataset": cfg.dataset,
        "data_options": resolve_options(spec, data_options),
        "method": cfg.method,
        "method_display": mcls.display,
        "method_options": method_opts,
        "parties": int(cfg.parties),
        "partitioner": cfg.partitioner or ("tiles" if spec.info.kind == "image" else "contiguous"),
        "partition_options": dict(cfg.partition_options),
        "train_missing": cfg.train_missing,
        "test_missing": list(cfg.test_missing),
        "seed": int(cfg.seed),
        "protocol": p,
        "preset": cfg.preset,
        "hp": hp,
        "model": model,
        # per-batch test masks are drawn with the training batch size, so evaluate in those batches
        "eval_batch_size": int(hp["batch_size"]) if p["test_granularity"] == "batch" else int(cfg.eval_batch_size or max(int(hp["batch_size"]), 1024)),
        "vflbench_version": __version__,
    }
    return out


def run_key(resolved: dict[str, Any]) -> str:
    """Stable hash of everything that determines a run's numbers (device excluded)."""
    blob = json.dumps(resolved, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def run_id(resolved: dict[str, Any]) -> str:
    return f"{resolved['dataset']}_{resolved['method']}_K{resolved['parties']}_{_slug(resolved['train_missing'])}_s{resolved['seed']}_{run_key(resolved)}"


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "-" for c in s)


def versions() -> dict[str, str]:
    import pandas
    import sklearn

    out = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__, "numpy": np.__version__, "pandas": pandas.__version__, "scikit-learn": sklearn.__version__, "vflbench": __version__}
    try:
        import torchvision

        out["torchvision"] = torchvision.__version__
    except Exception:  # pragma: no cover
        pass
    return out


def execute(resolved: dict[str, Any], device: str = "auto", progress=None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run one resolved configuration; returns (CSV rows, manifest). ``progress(epoch, epochs, loss)``."""
    timings: dict[str, float] = {}
    t = time.perf_counter()
    dev = pick_device(device)
    torch.set_num_threads(max(1, int(os.environ.get("VFLBENCH_THREADS", torch.get_num_threads()))))
    proto, hp = resolved["protocol"], resolved["hp"]
    prep = prepare(resolved["dataset"], resolved["data_options"], resolved["parties"], resolved["partitioner"], resolved["partition_options"], resolved["seed"])
    data = prep.data
    timings["load_and_partition_s"] = time.perf_counter() - t

    t = time.perf_counter()
    if proto["permute_once"]:  # the authors' HAPT loader permutes rows once with the seed
        prep.permute_rows(prep.streams.numpy("permute"))
    x_tr, y_tr, x_te, y_te = data.x_train, data.y_train, data.x_test, data.y_test
    bs = int(hp["batch_size"])
    train_masks = draw_masks(prep, resolved["train_missing"], split="train", granularity=proto["train_granularity"], batch_size=bs, all_missing=proto["all_missing"])
    test_masks = {
        s: draw_masks(prep, s, split="test", granularity=proto["test_granularity"], batch_size=bs, all_missing=proto["all_missing"])
        for s in resolved["test_missing"]
    }
    tr = BlockData(x_tr, prep.partition, dev)
    te = BlockData(x_te, prep.partition, dev)
    ytr, obs_tr = torch.as_tensor(y_tr, device=dev), torch.as_tensor(train_masks.observed, device=dev)
    timings["masks_and_tensors_s"] = time.perf_counter() - t

    mspec = resolved["model"]
    ctx = MethodContext(
        k=prep.partition.n_parties, n_classes=data.n_classes, widths=prep.partition.widths(),
        in_ch=int(x_tr.shape[1]) if x_tr.ndim == 4 else 1,
        model=ModelSpec(mspec["arch"], int(mspec["cut"]), tuple(mspec.get("hidden", ()))),
        device=dev, streams=prep.streams, hp=hp, options=resolved["method_options"], positive_class=data.info.positive_class,
    )
    if ctx.model.arch == "mlp" and x_tr.ndim == 4:
        raise VFLBenchError("An MLP extractor cannot read image tiles; use --arch cnn-small, resnet18 or resnet18-half.")
    if ctx.model.arch != "mlp" and x_tr.ndim != 4:
        raise VFLBenchError(f"Extractor '{ctx.model.arch}' needs image data; use --arch mlp for tabular data.")
    t = time.perf_counter()
    method = METHODS.get(resolved["method"])(ctx)
    timings["build_s"] = time.perf_counter() - t

    t = time.perf_counter()
    hist = fit(method, tr, ytr, obs_tr, hp, proto, prep.streams.seed_for, None if progress is None else (lambda e, loss: progress(e + 1, int(hp["epochs"]), loss)))
    timings["train_s"] = time.perf_counter() - t

    rows, mask_info = [], {"train": {**train_masks.info, **_mask_summary(train_masks.observed)}}
    t = time.perf_counter()
    for s, m in test_masks.items():
        tta = None
        if proto["test_time_augmentation"]:
            tta = torch.Generator(device=dev)
            tta.manual_seed(prep.streams.seed_for(f"tta/{s}"))
        preds, valid, scores, counted = predict(method, te, torch.as_tensor(m.observed, device=dev), resolved["eval_batch_size"], tta)
        met = compute_metrics(preds, valid, scores, counted, y_te, rule=method.f1_rule, n_classes=data.n_classes, positive_class=data.info.positive_class)
        mask_info[f"test/{s}"] = {**m.info, **_mask_summary(m.observed)}
        for metric in ("accuracy", "f1", "auprc"):
            if metric in met:
                rows.append(_row(resolved, s, metric, met[metric], met))
    timings["eval_s"] = time.perf_counter() - t

    manifest = {
        "run_id": run_id(resolved),
        "run_key": run_key(resolved),
        "config": resolved,
        "device": str(dev),
        "versions": versions(),
        "data": {**data.summary(), "checksums": data.checksums},
        "partition": prep.partition.describe(),
        "seeds": {"run_seed": resolved["seed"], "streams": prep.streams.used},
        "masks": mask_info,
        "parameters": {"total": method.n_params(), "members": method.n_members},
        "timings": {**timings, "seconds_per_epoch": float(np.mean(hist.seconds)) if hist.seconds else 0.0},
        "history": {"loss": hist.loss, "lr": hist.lr, "seconds": hist.seconds, "skipped_batches": hist.skipped_batches},
    }
    return rows, manifest


def _mask_summary(obs: np.ndarray) -> dict[str, Any]:
    return {"observed_rate_per_block": obs.mean(0).round(4).tolist(), "fully_observed_fraction": float(obs.all(1).mean()), "all_missing_count": int((~obs.any(1)).sum())}


def _row(r: dict[str, Any], test_missing: str, metric: str, value: float, met: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": run_id(r),
        "run_key": run_key(r),
        "dataset": r["dataset"],
        "method": r["method"],
        "method_display": r["method_display"],
        "parties": r["parties"],
        "partitioner": r["partitioner"],
        "protocol": r["protocol"]["name"],
        "train_missing": r["train_missing"],
        "p_miss_train": p_of(r["train_missing"]),
        "test_missing": test_missing,
        "p_miss_test": p_of(test_missing),
        "seed": r["seed"],
        "epochs": r["hp"]["epochs"],
        "metric": metric,
        "value": value,
        "n_counted": met["n_counted"],
        "n_test": met["n_test"],
    }


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_outputs(out_dir: Path, rows: list[dict[str, Any]], manifest: dict[str, Any]) -> Path:
    """Write ``<out>/<run_id>/results.csv`` and ``manifest.json``. The manifest is written last and
    marks the run complete; both writes are atomic."""
    import pandas as pd

    run_dir = Path(out_dir) / manifest["run_id"]
    atomic_write_text(run_dir / "results.csv", pd.DataFrame(rows).to_csv(index=False))
    atomic_write_text(run_dir / "manifest.json", json.dumps(manifest, indent=2, default=_json_default))
    return run_dir


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def config_from_dict(d: dict[str, Any]) -> RunConfig:
    names = {f for f in RunConfig.__dataclass_fields__}
    unknown = set(d) - names
    if unknown:
        raise VFLBenchError(f"Unknown run setting(s) {', '.join(sorted(unknown))}.")
    return RunConfig(**d)


def as_dict(cfg: RunConfig) -> dict[str, Any]:
    return asdict(cfg)
