"""A process's training state as plain tensors and random-stream states, found by walking its objects.

Every process of a run builds the same objects from the same seeds (the method, its models, the trainer's
optimiser and streams), so the path to a tensor or a :class:`torch.Generator` (attribute names, dict keys
and list positions from a root) names the same thing in every process. That is what a party that rejoins
needs (:mod:`vflbench.federation.wire`, "rejoin"): it restores its own tensors (models, optimiser state) from the
checkpoint it wrote after its last epoch, and the run's random streams from the server, whose streams are
in step with every process's.

:func:`tensors` and :func:`generators` walk a root; :func:`save` writes a checkpoint atomically;
:func:`restore_tensors` and :func:`restore_generators` put values back in place (a tensor that exists is
copied into, so a parameter keeps its identity and every view of it; one that does not yet exist, such as
an optimiser moment created at the first step, is set).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..core.errors import VFLBenchError

Path_ = tuple  # a path from a root: ("attr", name) / ("key", k) / ("idx", i) steps

# a method's links to the run, and scratch buffers (values that carry nothing from one step to the next): not state
SKIP = frozenset({"ctx", "channel", "faults", "boundary", "scratch"})


def _children(obj: Any) -> Iterator[tuple[tuple, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, (str, int)):
                yield ("key", k), v
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield ("idx", i), v
    elif isinstance(obj, torch.nn.Module) or type(obj).__module__.startswith("vflbench"):
        for name, v in vars(obj).items():
            if name not in SKIP:
                yield ("attr", name), v


def walk(root: Any) -> Iterator[tuple[Path_, Any]]:
    """``(path, value)`` for every tensor and generator reachable from ``root`` (each object once, at the
    first path met; the order is the objects' own, the same in every process that built them alike)."""
    seen: set[int] = set()
    stack: list[tuple[Path_, Any]] = [((), root)]
    while stack:
        path, obj = stack.pop()
        if id(obj) in seen:
            continue
        if isinstance(obj, (torch.Tensor, torch.Generator)):
            seen.add(id(obj))
            yield path, obj
            continue
        if isinstance(obj, (str, bytes, int, float, bool, type(None), slice)):
            continue
        seen.add(id(obj))
        kids = list(_children(obj))
        for step, v in reversed(kids):  # depth first, in the objects' own order
            stack.append(((*path, step), v))


def tensors(root: Any) -> dict[Path_, torch.Tensor]:
    """Every tensor reachable from ``root``, detached copies on the CPU."""
    return {p: v.detach().cpu().clone() for p, v in walk(root) if isinstance(v, torch.Tensor)}


def generators(root: Any) -> dict[Path_, torch.Tensor]:
    """The state of every random stream reachable from ``root``."""
    return {p: v.get_state() for p, v in walk(root) if isinstance(v, torch.Generator)}


def _parent(root: Any, path: Path_) -> Any:
    """The object holding the last step of ``path`` (None where the way passes an attribute that is None here:
    transient state built lazily, such as a batch's draws, which the next step draws again)."""
    obj = root
    for kind, name in path[:-1]:
        obj = getattr(obj, name) if kind == "attr" else obj[name]
        if obj is None:
            return None
    return obj


def _get(obj: Any, step: tuple) -> Any:
    kind, name = step
    if kind == "attr":
        return getattr(obj, name, None)
    try:
        return obj[name]
    except (KeyError, IndexError):
        return None


@torch.no_grad()
def restore_tensors(root: Any, saved: dict[Path_, torch.Tensor]) -> None:
    for path, value in saved.items():
        try:
            parent = _parent(root, path)
        except (AttributeError, KeyError, IndexError, TypeError):
            raise VFLBenchError(f"the checkpoint holds {format_path(path)}, which this process does not have") from None
        if parent is None:
            continue
        here = _get(parent, path[-1])
        if isinstance(here, torch.Tensor) and here.shape == value.shape and here.dtype == value.dtype:
            here.copy_(value.to(here.device))
            continue
        device = next((t.device for _, t in walk(parent) if isinstance(t, torch.Tensor)), torch.device("cpu"))
        kind, name = path[-1]
        if kind == "attr":
            setattr(parent, name, value.to(device))
        else:
            parent[name] = value.to(device)


def restore_generators(root: Any, saved: dict[Path_, torch.Tensor]) -> None:
    mine = {p: g for p, g in walk(root) if isinstance(g, torch.Generator)}
    if set(mine) != set(saved):
        raise VFLBenchError(
            "this process's random streams are not the server's (another method, options or version?): "
            f"{len(mine)} here, {len(saved)} sent"
        )
    for p, state in saved.items():
        mine[p].set_state(state)


def format_path(path: Path_) -> str:
    return "".join(f".{n}" if k == "attr" else f"[{n!r}]" for k, n in path) or "<root>"


def save(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically (a reader sees the old file or the new one, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise VFLBenchError(
            f"no checkpoint at {path}: a party rejoins from the checkpoint it wrote after its last epoch; give the "
            "--checkpoint-dir of the process that was lost."
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - a torn or foreign file: one line
        raise VFLBenchError(f"the checkpoint {path} cannot be read ({str(e).splitlines()[0][:120]}).") from None
