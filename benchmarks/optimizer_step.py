"""The optimiser step of member-owned tensors: per tensor (git revision ``--base``, default 01887c4) against
the working tree's multi-tensor step, on the same device, in one process.

    python benchmarks/optimizer_step.py                      # on CUDA if present: CIFAR-10-shaped, 50,000 samples
    python benchmarks/optimizer_step.py --n 4096 --rounds 2  # a CPU-sized run

Two checks, both side by side in one process:

1. **Same numbers.** 24 configurations (Adam and SGD, weight decay, momentum, stale updates, one or two
   optimiser groups; five tensors owned by three members, random active members and dropped gradients,
   12 steps) stepped by the base revision's ``MaskedOptimizer.step`` and by the working tree's, compared
   bit for bit (parameters and every state tensor).
2. **Seconds per epoch.** Standard VFL and LASER-VFL on the registered ``synthetic`` dataset at CIFAR-10's
   shape (four parties of 16x16 tiles, ResNet-18-half extractors, cut 1024, batch 1024: the LASER-VFL
   Table 1 setting); one warm-up epoch, then ``--rounds`` pairs of epochs of the same built method, base and new
   step alternating which goes first (ABBA). Reported: the medians and their ratio, and LASER-VFL over
   Standard VFL with each step.

The base revision's ``vflbench/nn/optim.py`` is read with ``git show`` (so this needs a git checkout) and only
its ``step`` is swapped in: the rest of the run is the working tree's. Not a test: the timings depend on the
machine; issue notes quote them with the machine named.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vflbench.nn import optim  # noqa: E402
from vflbench.runs.config import RunConfig, resolve  # noqa: E402
from vflbench.training import pipeline  # noqa: E402
from vflbench.training.trainer import StageHP, fit  # noqa: E402


def base_optimizer(rev: str):
    """``MaskedOptimizer`` of ``vflbench/nn/optim.py`` at git revision ``rev`` (its relative imports made absolute)."""
    for where in ("vflbench/nn/optim.py", "vflbench/optim.py"):  # the module's place before and after the folders
        got = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{where}"], capture_output=True, text=True)
        if got.returncode == 0:
            src = got.stdout
            break
    else:
        raise SystemExit(f"revision {rev} has no vflbench/nn/optim.py or vflbench/optim.py")
    for a, b in (("from ..core.errors", "from .errors"), ("from .errors", "from vflbench.core.errors")):
        src = src.replace(a, b)
    src = src.replace("from .models", "from vflbench.nn.models")
    path = Path(tempfile.mkdtemp()) / "base_optim.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("base_optim", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.MaskedOptimizer


def stepped(cls, device, name, wd, momentum, stale, groups, steps=12):
    g = torch.Generator().manual_seed(0)
    shapes, owners = [(5, 3), (7,), (2, 3, 3), (4,), (6, 2)], [0, 0, 1, 2, 2]
    params = [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in shapes]
    opt = cls(None, list(zip(params, owners, strict=True)), 3, name=name, lr=0.01, weight_decay=wd,
              momentum=momentum, stale_updates=stale, groups=groups)  # fmt: skip
    for _ in range(steps):
        active = torch.rand(3, generator=g) < 0.6
        for p, o in zip(params, owners, strict=True):
            keep = bool(active[o]) and float(torch.rand(1, generator=g)) < 0.9
            p.grad = torch.randn(p.shape, generator=g).to(device) if keep else None
        opt.step(active)
    return params, opt.state


def same_numbers(base_cls, device) -> tuple[int, int]:
    grid = itertools.product(["adam", "sgd"], [0.0, 1e-3], [0.0, 0.9], [False, True], [None, [0, 1, 1]])
    cases = [c for c in grid if not (c[0] == "adam" and c[2])]
    differ = 0
    for case in cases:
        (pa, sa), (pb, sb) = stepped(base_cls, device, *case), stepped(optim.MaskedOptimizer, device, *case)
        same = all(torch.equal(x, y) for x, y in zip(pa, pb, strict=True)) and all(
            x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(sa, sb, strict=True)
        )
        differ += not same
    return differ, len(cases)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="01887c4", help="git revision of the per-tensor step")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n", type=int, default=50_000, help="samples of the CIFAR-10-shaped data (4%% held out)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--arch", default="resnet18-half", help="image extractor (cnn-small for a quick CPU check)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.set_num_threads(a.threads)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    base = base_optimizer(a.base)
    differ, total = same_numbers(base, dev)
    print(f"optimiser step, {a.base} vs working tree, on {dev}: {total - differ}/{total} configurations bit-identical")
    new_step, old_step = optim.MaskedOptimizer.step, base.step
    med = {}
    try:
        for method in ("svfl", "laser"):
            run = resolve(
                RunConfig(
                    dataset="synthetic",
                    method=method,
                    test_missing=["none"],
                    hp={"batch_size": 1024},
                    data_options={"shape": "3x32x32", "n": a.n, "n_classes": 10, "test_size": 0.04},
                    model={"arch": a.arch, "cut": 1024},
                )
            )
            inp = pipeline.prepare(run, dev)
            model = pipeline.build(run, inp)
            one = {k: StageHP(**{**hp.as_dict(), "epochs": 1}) for k, hp in run.stage_hp.items()}
            policy, seeds = pipeline.policy(run), inp.prep.streams.seed_for

            def epoch(step, args=(model, inp.train, one, policy, seeds)) -> float:
                optim.MaskedOptimizer.step = step
                sync()
                t0 = time.perf_counter()
                fit(*args)
                sync()
                return time.perf_counter() - t0

            epoch(new_step)  # warm-up
            times = {"base": [], "new": []}
            for r in range(a.rounds):  # ABBA: which step goes first alternates
                for k in ("base", "new") if r % 2 == 0 else ("new", "base"):
                    times[k].append(epoch(old_step if k == "base" else new_step))
            med[method] = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"{method}: s/epoch base {[round(x, 3) for x in times['base']]}, "
                f"new {[round(x, 3) for x in times['new']]}"
                f"; median base/new {med[method]['base'] / med[method]['new']:.2f}x"
            )
    finally:
        optim.MaskedOptimizer.step = new_step
    for k in ("base", "new"):
        ratio = med["laser"][k] / med["svfl"][k]
        print(f"LASER-VFL / Standard VFL per epoch with the {k} step: {ratio:.3f}x")


if __name__ == "__main__":
    main()
