"""Where a FALSE-VFL-I step goes late in training: ``torch.profiler`` over a few epochs of stage 1, after the
first ones, on Isolet at the paper's settings (K = 8, MCAR 0.2, batch 512, kappa 10).

    python benchmarks/profile_false_vfl.py                      # epochs 26-28 of stage 1, 45 rows
    python benchmarks/profile_false_vfl.py --start 0 --epochs 3 # the first three, for comparison
    python benchmarks/profile_false_vfl.py --subnormal          # the decoders' g W^T with tiny rows, timed alone

Prints the seconds of every epoch, the share of the profiled time spent in batched products (``bmm``,
``baddbmm``), and the operators by self time with their input shapes. ``--subnormal`` times the decoders'
output-layer input gradient (``[8, 5120, 154] x [8, 154, 128]``) with 0%, 30% and 90% of its rows scaled to
1e-39, to tell subnormal arithmetic from other costs.
"""

from __future__ import annotations

import argparse
import statistics
import time


def subnormal() -> None:
    import torch

    torch.set_num_threads(2)
    w = torch.randn(8, 128, 154) / 10
    out = torch.empty(8, 5120, 128)
    for frac in (0.0, 0.3, 0.9):
        g = torch.randn(8, 5120, 154)
        g = torch.where(torch.rand(8, 5120, 1) < frac, g * 1e-39, g)
        secs = []
        for _ in range(21):
            t = time.perf_counter()
            torch.bmm(g, w.transpose(1, 2), out=out)
            secs.append(time.perf_counter() - t)
        print(f"rows scaled to 1e-39: {frac:.0%}   g W^T {statistics.median(secs[1:]) * 1e3:.2f} ms (median of 20)")


def profile(start: int, epochs: int, rows: int) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from vflbench.runs.config import RunConfig, resolve
    from vflbench.training import pipeline
    from vflbench.training.trainer import Callback

    class Window(Callback):
        """Profiles stage 1 from the end of epoch ``start`` to the end of epoch ``start + epochs``."""

        def __init__(self):
            self.done, self.ends, self.prof = 0, [time.perf_counter()], None

        def on_stage_start(self, loop):
            if self.done == 0 and start == 0:
                self._open()

        def on_epoch_end(self, loop):
            self.done += 1
            self.ends.append(time.perf_counter())
            if self.done == start and start > 0:
                self._open()
            if self.done == start + epochs and self.prof is not None:
                self.prof.__exit__(None, None, None)

        def _open(self):
            self.prof = torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True)
            self.prof.__enter__()

    window = Window()
    run = resolve(
        RunConfig(
            dataset="isolet",
            method="false1",
            protocol="false",
            parties=8,
            stage_hp={"pretrain": {"epochs": start + epochs}, "train": {"epochs": 1}},
            train_missing="mcar:0.2",
            test_missing=["none"],
            labeled=500,
            aligned=100,
        )
    )
    train = pipeline.train
    pipeline.train = lambda r, inputs, method, callbacks=(): train(r, inputs, method, [*callbacks, window])
    try:
        pipeline.execute(run, device="cpu")
    finally:
        pipeline.train = train
    per_epoch = [b - a for a, b in zip(window.ends, window.ends[1:], strict=False)][: start + epochs]
    print("seconds per epoch of stage 1:", ", ".join(f"{s:.2f}" for s in per_epoch))
    events = window.prof.key_averages(group_by_input_shape=True)
    total = sum(e.self_cpu_time_total for e in events)
    products = sum(e.self_cpu_time_total for e in events if e.key in ("aten::bmm", "aten::baddbmm"))
    print(f"epochs {start + 1}-{start + epochs}: batched products {products / total:.0%} of the profiled self time")
    print(events.table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=26))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=int, default=25, help="epochs of stage 1 before the profiled ones")
    ap.add_argument("--epochs", type=int, default=3, help="epochs profiled")
    ap.add_argument("--rows", type=int, default=45)
    ap.add_argument("--subnormal", action="store_true", help="time g W^T with tiny rows instead")
    a = ap.parse_args()
    if a.start < 0 or a.epochs < 1:
        ap.error("--start must be >= 0 and --epochs >= 1")
    subnormal() if a.subnormal else profile(a.start, a.epochs, a.rows)


if __name__ == "__main__":
    main()
