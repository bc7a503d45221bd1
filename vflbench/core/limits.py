"""Bounds on every run setting that sizes memory or time, checked where each setting is parsed, before
any work: a value outside its bound is refused with one line that names the limit and why it exists.
``tests/test_limits.py`` tries a huge value of each and expects a refusal within a second; docs/SETTINGS.md
lists them. The estimates that depend on several settings (a model's parameters, a synthetic table)
are checked against this machine's memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import VFLBenchError


@dataclass(frozen=True)
class Limit:
    flag: str  # how a user sets it
    low: float | None  # None: no lower bound beyond the parse's own
    high: float | None
    why: str
    huge: str  # a value the conformance suite tries (refused within a second)


LIMITS: dict[str, Limit] = {
    "parties": Limit(
        "--parties", 1, 64, "every party has its own models and the subset methods grow as 2^K", "1000000000"
    ),
    "cut": Limit("--cut", 1, 65_536, "the representation width of every party's extractor", "1000000000"),
    "hidden": Limit("--hidden", 1, 65_536, "an MLP layer's width; at most 16 layers", "1000000000,10"),
    "head_hidden": Limit("head_hidden", 0, 65_536, "the fusion head's hidden width", "1000000000"),
    "batch_size": Limit("--batch-size", 1, 1_048_576, "samples per step (2^20)", "1000000000000"),
    "eval_batch_size": Limit("--eval-batch-size", 1, 1_048_576, "samples per evaluation batch (2^20)", "1000000000000"),
    "eval_epochs": Limit(
        "--eval-epochs", 1, 100_000, "budgets at which a run is evaluated (at most the epoch limit)", "1:1000000000"
    ),
    "pbm_b": Limit(
        "pbm b",
        1,
        1_024,
        "8x the PBM-VFL paper's largest b (128): the accountant's privacy-loss distributions take "
        "8 (b+1)((K-1)b+1) bytes and time that grows with them (4 s at b=256, 75 s at 4,096, 96 GiB at 65,536 for 4 "
        "parties)",
        "pbm:b=1000000000,beta=0.1",
    ),
    "net_latency": Limit("--net-latency", 0, 60_000, "milliseconds of emulated one-way delay per message", "100000000"),
    "net_bandwidth": Limit(
        "--net-bandwidth",
        0.01,
        None,
        "Mbit/s of an emulated link (0 = unlimited): slower links make one message take hours",
        "0.000000001",
    ),
    "local_steps": Limit(
        "--local-steps",
        1,
        1_000,
        "updates per exchange, each a full step of the server and the parties (FedBCD and C-VFL take tens; 10^9 made "
        "one Credit epoch run for hours)",
        "1000000000",
    ),
    "synthetic_n": Limit("synthetic n", 2, 10_000_000, "samples of the synthetic generator", "n=1000000000000"),
    "synthetic_width": Limit(
        "synthetic blocks x block_width", 1, 1_000_000, "features of the synthetic generator", "block_width=1000000000"
    ),
    "n_classes": Limit("synthetic n_classes", 2, 1_000, "classes of the synthetic generator", "n_classes=1000000000"),
    "workers": Limit("--workers", 1, 256, "worker processes of a sweep or a tuner", "1000000"),
    "pack": Limit("--pack", 1, 256, "runs trained together in one vmapped bank", "1000000"),
    "threads": Limit("--threads", 1, 1_024, "torch intra-op threads per run", "1000000"),
    "timeout": Limit(
        "--timeout", 1, 86_400, "seconds a party or the server waits for the others (a day)", "1000000000"
    ),
}


def check(name: str, value: float, flag: str | None = None) -> None:
    """Refuse ``value`` outside the bound of ``name`` (one line: the value, the limit and why)."""
    lim = LIMITS[name]
    flag = flag or lim.flag
    if lim.high is not None and value > lim.high:
        raise VFLBenchError(f"{flag} {_fmt(value)} is above its limit of {_fmt(lim.high)} ({lim.why}); lower it.")
    if lim.low is not None and value < lim.low and not (name == "net_bandwidth" and value == 0):
        raise VFLBenchError(f"{flag} {_fmt(value)} is below its limit of {_fmt(lim.low)} ({lim.why}).")


def _fmt(v: float) -> str:
    return f"{int(v):,}" if float(v) == int(v) and abs(v) >= 1 else f"{v:g}"


def machine_memory() -> int:
    """Physical memory of this machine in bytes (24 GiB when the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # pragma: no cover - not Linux
        return 24 << 30


def check_memory(what: str, nbytes: float, share: float = 0.5, fix: str = "lower it") -> None:
    """Refuse an estimate above ``share`` of this machine's memory (before anything is allocated)."""
    avail = machine_memory()
    if nbytes > share * avail:
        raise VFLBenchError(
            f"{what} needs about {nbytes / 2**30:,.1f} GiB, more than {share:.0%} of this machine's "
            f"{avail / 2**30:.0f} GiB; {fix}."
        )


def mlp_parameters(in_width: int, hidden: list[int], cut: int) -> int:
    """Parameters of one party's MLP extractor (weights and biases)."""
    sizes = [int(in_width), *map(int, hidden), int(cut)]
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=False))
