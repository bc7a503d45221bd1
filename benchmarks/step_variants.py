"""Per-step overhead experiments: does torch.compile make a training epoch faster?

    python benchmarks/step_variants.py                     # LASER-VFL, Credit, compat, p_train 0.1
    python benchmarks/step_variants.py --method svfl --rounds 7

Variants, each timed on whole training epochs, interleaved round by round, one intra-op thread:

* ``eager``         the trainer as shipped;
* ``compile-adam``  the masked Adam update (the elementwise chain on the flat parameter vector)
                    compiled with inductor into one fused kernel;
* ``compile-loss``  the method's ``loss`` (forward) compiled with ``torch.compile``; backward runs
                    through AOTAutograd.

Every variant trains its own copy of the same model from the same seed; the script checks that the
epoch losses agree (compilation may reorder floating-point sums, so agreement is to 1e-4, not bit
for bit) and prints median seconds per epoch and the ratio to ``eager``. The first (compiling)
epoch of every variant is a warm-up and is not timed. Results and what was kept are recorded in
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("VFLBENCH_DATA_MIRROR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))

from vflbench.nn.optim import MaskedOptimizer  # noqa: E402
from vflbench.runs.config import RunConfig, resolve  # noqa: E402
from vflbench.training import pipeline  # noqa: E402
from vflbench.training.trainer import StageHP, fit  # noqa: E402


def _adam_kernel(p, g, m, v, t, lr, b1, b2, eps):
    m.lerp_(g, 1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    tt = t.clamp_min(1.0)
    step = m / ((v.sqrt() / (1 - torch.pow(b2, tt)).sqrt()) + eps) * (lr / (1 - torch.pow(b1, tt)))
    p.sub_(step)


def _adam_kernel_masked(p, g, m, v, t, a, lr, b1, b2, eps):
    m.lerp_(g, (1 - b1) * a)
    v.lerp_(g * g, (1 - b2) * a)
    tt = t.clamp_min(1.0)
    step = m / ((v.sqrt() / (1 - torch.pow(b2, tt)).sqrt()) + eps) * (lr / (1 - torch.pow(b1, tt)))
    p.sub_(step * a)


class CompiledAdam(MaskedOptimizer):
    """MaskedOptimizer whose flat-vector Adam update runs as one compiled kernel (Adam, no weight
    decay on module tensors owned by one member: those go through the eager path)."""

    kernel = staticmethod(torch.compile(_adam_kernel, dynamic=False))
    kernel_masked = staticmethod(torch.compile(_adam_kernel_masked, dynamic=False))

    @torch.no_grad()
    def step(self, active):
        if self.name != "adam" or len(self.entries) != 1:
            return super().step(active)
        active = self.effective(active.to(self.steps.device))
        self.steps += active.float()
        (p, mem), st = self.entries[0], self.state[0]
        if p.grad is None:
            return
        a = None if bool(active.all()) else active[mem].to(p.dtype)
        if "t" not in st:
            st["t"], st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p), torch.zeros_like(p)
        st["t"].add_(1.0 if a is None else a)
        g = p.grad if not self.wd else torch.add(p.grad, p, alpha=self.wd)
        b1, b2 = self.betas
        if a is None:
            self.kernel(p, g, st["m"], st["v"], st["t"], self.lr, b1, b2, self.eps)
        else:
            self.kernel_masked(p, g, st["m"], st["v"], st["t"], a, self.lr, b1, b2, self.eps)


def setup(method_name: str, protocol: str, train_missing: str, variant: str):
    run = resolve(
        RunConfig(
            dataset="credit", method=method_name, train_missing=train_missing, test_missing=["none"], protocol=protocol
        )
    )
    inputs = pipeline.prepare(run, "cpu")
    method = pipeline.build(run, inputs)
    if variant == "compile-loss":
        method.loss = torch.compile(method.loss, dynamic=False)
    one_epoch = {k: StageHP(**{**hp.as_dict(), "epochs": 1}) for k, hp in run.stage_hp.items()}
    return method, (inputs.train, one_epoch, pipeline.policy(run), inputs.prep.streams.seed_for)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", default="laser")
    ap.add_argument("--protocol", default="compat")
    ap.add_argument("--train-missing", default="mcar:0.1")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default="eager,compile-adam,compile-loss")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import vflbench.training.trainer as training

    variants = args.variants.split(",")
    state = {}
    for v in variants:
        state[v] = setup(args.method, args.protocol, args.train_missing, v)
    opt_cls = {v: (CompiledAdam if v == "compile-adam" else MaskedOptimizer) for v in variants}
    times: dict[str, list[float]] = {v: [] for v in variants}
    losses: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(args.rounds + 1):  # round 0: warm-up (compilation), not timed
        for v in variants:
            training.MaskedOptimizer = opt_cls[v]
            method, fit_args = state[v]
            t0 = time.perf_counter()
            hist = fit(method, *fit_args)
            dt = time.perf_counter() - t0
            losses[v].append(hist.loss[-1])
            if r:
                times[v].append(dt)
            print(f"round {r} {v:13s} {dt:7.2f} s  loss {hist.loss[-1]:.6f}", flush=True)
    training.MaskedOptimizer = MaskedOptimizer
    base = statistics.median(times["eager"]) if "eager" in times else None
    print(
        f"\n{args.method}, credit, {args.protocol}, train {args.train_missing}, 1 thread, {args.rounds} timed epochs "
        "each (interleaved)"
    )
    for v in variants:
        med = statistics.median(times[v])
        agree = max(abs(a - b) for a, b in zip(losses[v], losses[variants[0]], strict=True))
        ratio = f"{base / med:.2f}x eager speed" if base else ""
        print(
            f"  {v:13s} median {med:6.2f} s/epoch  (range {min(times[v]):.2f}-{max(times[v]):.2f})  {ratio}  max "
            f"|loss - {variants[0]}| {agree:.2e}"
        )


if __name__ == "__main__":
    main()
