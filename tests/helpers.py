"""Small builders shared by the method and runtime tests."""

import os
import subprocess
import sys
from pathlib import Path

import torch

from vflbench.methods import Batch, Stage
from vflbench.training.trainer import StageHP, TrainPolicy, make_optimizer


def batch(blocks, obs, y=None, number=0):
    n = obs.shape[0]
    return Batch(blocks, obs, y, torch.arange(n), number)


def train_step(method, b, hp=None):
    """One optimiser step on one batch, as the trainer takes it; returns the loss (None if skipped)."""
    stage = method.stages[0]
    hp = hp or StageHP("adam", 1e-2, 0.0, 0.0, b.size, 1)
    opt = getattr(method, "_test_opt", None) or make_optimizer(
        method, stage, hp, TrainPolicy(False, False, False, False)
    )
    method._test_opt = opt
    method.store.begin()
    loss, active = method.loss(b, stage)
    if loss is None or not bool(active.any()):
        return None
    opt.zero_grad()
    loss.backward()
    opt.step(active)
    return float(loss.detach())


STAGE = Stage()


def start_federation(url: str, out, flags: list[str], parties: int = 2, watched: int = 1):
    """A `vflbench server` and its `vflbench party` processes on this machine (the two-machine commands, run
    locally): the server's stdout and stderr are piped, and party ``watched``'s stderr (its "joined run" line)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "vflbench", "server", "--rendezvous", url, "--out", str(out), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "vflbench", "party", "--rank", str(k), "--rendezvous", url, *flags]
            + ["--checkpoint-dir", str(Path(out).parent / f"checkpoints-{Path(out).name}")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE if k == watched else subprocess.DEVNULL,
            text=True,
            env=env,
        )
        for k in range(parties)
    ]
    return server, procs
