"""A nested structure of plain values and arrays as JSON plus named tensors: what a saved model part is made of, so
that loading one runs no code.

:func:`split` turns a structure (dicts, lists, tuples, strings, numbers, booleans, None, numpy arrays and scalars,
torch tensors, bytes) into a JSON-able tree, where every array stands as ``{"$tensor": NAME}``, and a dict of those
tensors; :func:`join` puts them back. :func:`save` writes the tensors with ``torch.save`` and :func:`load` reads them
with ``torch.load(weights_only=True)``: torch's restricted unpickler, whose allow-list is tensors and plain
containers, so a planted pickle is refused before any of its code runs. Anything else in a structure (an object of
some class) is refused when it is split: a model part holds values, not objects.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

MARKS = ("$tensor", "$array", "$bytes", "$tuple", "$items", "$float", "$dict")


class NotATensorTree(ValueError):
    """A file or structure that is not a tensor tree (the reason is the message)."""


def split(obj: Any) -> tuple[Any, dict[str, Any]]:
    """``(tree, tensors)``: ``obj`` as JSON-able values, its arrays as named CPU tensors."""
    import torch

    tensors: dict[str, torch.Tensor] = {}

    def put(t: torch.Tensor) -> str:
        name = f"t{len(tensors)}"
        tensors[name] = t.detach().cpu().contiguous()
        return name

    def walk(v: Any, where: str) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, (int, np.integer)) and not isinstance(v, np.bool_):
            return int(v)
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, (float, np.floating)):
            f = float(v)
            return f if math.isfinite(f) else {"$float": repr(f)}
        if isinstance(v, torch.Tensor):
            return {"$tensor": put(v)}
        if isinstance(v, np.ndarray):
            if v.dtype == object or v.dtype.kind not in "biuf":
                raise NotATensorTree(f"{where}: an array of dtype {v.dtype} (only numbers and booleans are saved)")
            return {"$array": put(torch.from_numpy(np.ascontiguousarray(v)))}
        if isinstance(v, (bytes, bytearray)):
            return {"$bytes": put(torch.frombuffer(bytearray(v), dtype=torch.uint8))} if v else {"$bytes": None}
        if isinstance(v, tuple):
            return {"$tuple": [walk(x, f"{where}[{i}]") for i, x in enumerate(v)]}
        if isinstance(v, list):
            return [walk(x, f"{where}[{i}]") for i, x in enumerate(v)]
        if isinstance(v, dict):
            if all(isinstance(k, str) for k in v):
                out = {k: walk(x, f"{where}.{k}") for k, x in v.items()}
                return {"$dict": out} if any(k in MARKS for k in v) else out
            return {"$items": [[walk(k, f"{where} key"), walk(x, f"{where}[{k!r}]")] for k, x in v.items()]}
        raise NotATensorTree(f"{where}: a {type(v).__name__} (a saved part holds values and arrays, not objects)")

    return walk(obj, "part"), tensors


def join(tree: Any, tensors: dict[str, Any]) -> Any:
    """The structure :func:`split` was given (numpy arrays back as numpy, tensors as tensors)."""

    def tensor(name: Any):
        t = tensors.get(name) if isinstance(name, str) else None
        if t is None:
            raise NotATensorTree(f"it names a tensor {name!r} that the tensor file does not hold")
        return t

    def walk(v: Any) -> Any:
        if isinstance(v, list):
            return [walk(x) for x in v]
        if not isinstance(v, dict):
            return v
        if len(v) == 1:
            ((mark, x),) = v.items()
            if mark == "$tensor":
                return tensor(x)
            if mark == "$array":
                return tensor(x).numpy()
            if mark == "$bytes":
                return b"" if x is None else tensor(x).numpy().tobytes()
            if mark == "$tuple":
                return tuple(walk(i) for i in x)
            if mark == "$items":
                return {_key(walk(k)): walk(i) for k, i in x}
            if mark == "$float":
                return float(x)
            if mark == "$dict":
                return {k: walk(i) for k, i in x.items()}
        return {k: walk(x) for k, x in v.items()}

    return walk(tree)


def _key(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k


def save(tensors: dict[str, Any], path: Path) -> None:
    import torch

    torch.save(dict(tensors), path)


def load(path: Path) -> dict[str, Any]:
    """The named tensors of ``path``, read by torch's restricted unpickler; anything else is refused
    (:class:`NotATensorTree`) before it runs."""
    import pickle
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # (torch warns of pickle protocols it reads with care: the refusal says it)
            warnings.simplefilter("ignore")
            got = torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError, AttributeError, TypeError) as e:
        text = str(e)
        if "Unsupported global" in text or "weights_only" in text.lower() or "Weights only" in text:
            found = [ln.strip() for ln in text.splitlines() if "Unsupported" in ln or "GLOBAL" in ln]
            why = "it asks to load objects beyond tensors, refused by torch's weights-only unpickler"
            why += f": {found[0][:100]}" if found else ""
        else:
            why = (text.strip().splitlines() or [type(e).__name__])[0][:120] or type(e).__name__
        raise NotATensorTree(f"not a file of tensors ({why})") from None
    if not isinstance(got, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in got.items()):
        raise NotATensorTree("it holds something other than named tensors")
    return got
