"""SecureBoost's messages: a kind and named fields, scalars as JSON and arrays as raw bytes, so what is counted is
what crosses (:func:`encode`, :func:`decode`, :func:`encoded_size`), and bit-packed routes (:func:`pack_bits`)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np


def encode(kind: str, **fields: Any) -> bytearray:
    """A message as bytes: a JSON header (its kind, its scalars, each array's dtype and shape), then the arrays."""
    arrays = {n: np.ascontiguousarray(v) for n, v in fields.items() if not _scalar(v)}
    head = _header(
        kind, {n: v for n, v in fields.items() if _scalar(v)}, {n: (a.dtype, a.shape) for n, a in arrays.items()}
    )
    out = bytearray(4 + len(head) + sum(a.nbytes for a in arrays.values()))  # each array copied once, in place
    out[:4], out[4 : 4 + len(head)] = len(head).to_bytes(4, "little"), head
    at = 4 + len(head)
    for a in arrays.values():
        if a.nbytes:
            out[at : at + a.nbytes] = memoryview(a).cast("B")
        at += a.nbytes
    return out


def encoded_size(kind: str, scalars: dict[str, Any], arrays: dict[str, tuple[Any, tuple[int, ...]]]) -> int:
    """The bytes :func:`encode` makes of a message with these scalars and arrays of these (dtype, shape), without
    making the arrays (a cost model's exact count)."""
    head = _header(kind, scalars, arrays)
    body = sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize for dt, shape in arrays.values())
    return 4 + len(head) + body


def _scalar(v: Any) -> bool:
    return isinstance(v, (bool, int, float, str)) or v is None


def _header(kind: str, scalars: dict[str, Any], arrays: dict[str, tuple[Any, tuple[int, ...]]]) -> bytes:
    head = {
        "kind": kind,
        "s": dict(scalars),
        "a": [[n, np.dtype(dt).str, list(shape)] for n, (dt, shape) in arrays.items()],
    }
    return json.dumps(head, separators=(",", ":")).encode()


def decode(data: bytes | bytearray) -> tuple[str, dict[str, Any]]:
    """A message's kind and fields; its arrays are read-only views of ``data`` (nothing is copied)."""
    view = memoryview(data)
    n = int.from_bytes(view[:4], "little")
    head = json.loads(bytes(view[4 : 4 + n]))
    out = dict(head["s"])
    at = 4 + n
    for name, dt, shape in head["a"]:
        dtype = np.dtype(dt)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        a = np.frombuffer(view[at : at + size], dtype=dtype).reshape(shape)
        a.flags.writeable = False
        out[name] = a
        at += size
    return head["kind"], out


def pack_bits(b: np.ndarray) -> np.ndarray:
    return np.packbits(np.asarray(b, dtype=bool))


def unpack_bits(p: np.ndarray, n: int) -> np.ndarray:
    return np.unpackbits(np.asarray(p, dtype=np.uint8), count=n).astype(bool)
