"""Where a run computes (vflbench.runs.devices), where the optimiser keeps its tensors, and whether a run's
timings add up: CPU-runnable checks of the rules behind the GPU fixes (issue: on a GPU every test green)."""

from __future__ import annotations

import json

import pytest
import torch

from vflbench.core.errors import VFLBenchError
from vflbench.methods import METHODS
from vflbench.nn.optim import MaskedOptimizer
from vflbench.runs import devices
from vflbench.runs.config import RunConfig, resolve
from vflbench.training.pipeline import build, policy, prepare
from vflbench.training.trainer import make_optimizer


def test_auto_puts_tabular_runs_on_the_cpu_and_image_runs_on_cuda_when_there_is_one(monkeypatch):
    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    dev, why = devices.choose_device("auto", "mlp")
    assert dev.type == "cpu" and "tabular" in why
    dev, why = devices.choose_device("auto", "resnet18-half")
    assert dev.type == "cuda" and "image" in why
    assert devices.choose_device("cpu", "resnet18")[0].type == "cpu"  # --device forces
    assert devices.choose_device("cuda", "mlp")[0].type == "cuda"
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    dev, why = devices.choose_device("auto", "resnet18")
    assert dev.type == "cpu" and "no CUDA" in why
    with pytest.raises(VFLBenchError, match="CUDA is not available"):
        devices.choose_device("cuda")
    with pytest.raises(VFLBenchError, match="Choices"):
        devices.choose_device("tpu")


def test_the_optimiser_keeps_every_index_and_mask_on_the_device_of_its_parameters():
    """The rule behind the CUDA crash (a CPU mask indexing a CUDA member map): whatever device the
    trainable mask and groups come on, the optimiser places them where its parameters live. ``meta``
    stands in for a second device on a CPU-only machine."""
    w = torch.nn.Parameter(torch.zeros(3, 2, device="meta"))
    b = torch.nn.Parameter(torch.zeros(2, device="meta"))
    opt = MaskedOptimizer(
        None, [(w, 0), (b, 1)], 2, name="adam", lr=0.1, trainable=torch.tensor([True, False]), groups=[0, 1]
    )
    assert opt.device.type == "meta"
    assert {d.type for d in opt.placement().values()} == {"meta"}, opt.placement()
    with pytest.raises(VFLBenchError, match="share one device"):
        MaskedOptimizer(None, [(w, 0), (torch.nn.Parameter(torch.zeros(2)), 1)], 2, name="sgd", lr=0.1)


@pytest.mark.parametrize(
    "method,options", [("fedhssl", {}), ("svfl", {"pretrain": "simsiam"}), ("laser", {}), ("false1", {})]
)
def test_every_stage_optimiser_of_a_built_method_lives_where_its_parameters_do(method, options):
    """The methods whose stages freeze members (the CUDA failures: FedHSSL, pretrain=simsiam): each
    stage's optimiser, indices and masks included, on the run's device."""
    semi = {"labeled": 60, "aligned": 20} if METHODS.get(method).needs_labeled else {}
    run = resolve(RunConfig(dataset="synthetic", method=method, method_options=options, hp={"epochs": 1}, **semi))
    inputs = prepare(run, "cpu")
    m = build(run, inputs)
    for stage in m.stages:
        opt = make_optimizer(m, stage, run.stage_hp[stage.name], policy(run))
        assert {d.type for d in opt.placement().values()} == {m.device.type}, (stage.name, opt.placement())


@pytest.mark.integration  # `make test-slow`: a fresh `vflbench run` interpreter (its imports are what is timed)
def test_a_tabular_run_records_cpu_and_why_and_timings_that_cover_its_process_wall_time(tmp_path):
    """A real ``vflbench run`` process: the wall time from the process's start, parts within 10% of it."""
    import subprocess
    import sys

    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "vflbench",
            "run",
            "--dataset",
            "synthetic",
            "--method",
            "laser",
            "--epochs",
            "1",
            "--device",
            "auto",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    (d,) = list(tmp_path.iterdir())
    man = json.loads((d / "manifest.json").read_text())
    assert man["device"] == "cpu" and man["device_reason"].startswith("--device auto")
    t = man["timings"]
    parts = sum(
        t[k]
        for k in (
            "startup_s",
            "load_and_partition_s",
            "masks_and_tensors_s",
            "build_s",
            "train_s",
            "eval_s",
            "record_s",
            "write_s",
        )
    )
    assert t["wall_from"] == "process start" and t["startup_s"] > 0.3  # the interpreter and its imports are counted
    assert t["wall_s"] > 0 and abs(parts - t["wall_s"]) <= 0.1 * t["wall_s"] and t["coverage"] >= 0.9


def test_process_start_is_before_now_and_after_boot():
    import time

    from vflbench.core.timing import process_start

    start = process_start()
    assert time.time() - 3600 * 24 * 365 < start <= time.time()


def test_synthetic_images_have_the_requested_shape_and_feed_an_image_model():
    run = resolve(
        RunConfig(
            dataset="synthetic",
            method="svfl",
            data_options={"shape": "3x32x32", "n": 200, "n_classes": 10},
            hp={"epochs": 1},
            model={"arch": "cnn-small"},
        )
    )
    inputs = prepare(run, "cpu")
    assert inputs.prep.data.x_train.shape[1:] == (3, 32, 32) and inputs.prep.data.n_classes == 10
    assert run.partitioner == "tiles"
    with pytest.raises(VFLBenchError, match="CxHxW"):
        resolve(RunConfig(dataset="synthetic", method="svfl", data_options={"shape": "32x32"}))
