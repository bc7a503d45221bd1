"""Adam's bias corrections computed once per member, with the values a per-element computation gives.

The masked optimiser used to compute ``1 - b^t`` for every element of the flat store (tens of millions of
``torch.pow`` calls a step for Combinatorial at K = 8), although ``t`` is one number per member. Computing it per
member must not change a single bit of any run, and there is a catch: on the CPU, torch evaluates an elementwise
op with vectorised code on whole blocks of ``2 * Vec::size()`` elements and with the scalar code on each
parallel chunk's last ``numel % block`` elements, and the vectorised ``pow`` (SLEEF) and the C library's can
differ in the last bit. So:

- :func:`vector_pow` computes a short tensor's ``pow`` padded to whole blocks: every value is the vector path's,
  as nearly every element of a per-element ``pow`` over the store was;
- :func:`scalar_tail` finds the positions that a per-element ``pow`` over a tensor of a given shape computes on
  the scalar path, by probing: one ``pow`` over a tensor of that shape filled with an exponent whose two paths
  differ, cached per (numel, threads); the optimiser recomputes those few elements' updates with
  :func:`scalar_pow`;
- :class:`Layout` spreads per-member values over a flat store whose member ids come in runs (a batched tensor
  ``[members, ...]`` is one run per row): one broadcast op per group of equal-length runs, or one scalar when
  every member present has the same value. Division and multiplication are exact in both paths, so only
  ``pow`` needs the care above.

``tests/test_bias.py`` holds the optimiser against a per-element reference bit for bit, at one and two threads,
on stores large enough to be split between threads.
"""

from __future__ import annotations

import torch

from ..core.errors import VFLBenchError

_BLOCK = 256  # a multiple of every CPU vector block of float32 (AVX-512: 32 elements, AVX2: 16)
_GRAIN = 32768  # at::internal::GRAIN_SIZE: tensors below it are never split between threads
_probe: tuple[float, float] | None | bool = False  # (base, exponent) whose vector and scalar pow differ; None: none
_tails: dict[tuple[int, int], torch.Tensor | None] = {}


def vector_pow(base: float, t: torch.Tensor) -> torch.Tensor:
    """``torch.pow(base, t)`` with every element on the vector path (the value of a long tensor's body)."""
    flat = t.reshape(-1)
    n = flat.numel()
    if t.device.type != "cpu":
        return torch.pow(base, t)  # one code path per element off the CPU
    size = -(-max(n, 1) // _BLOCK) * _BLOCK
    padded = flat.new_ones(size)
    padded[:n] = flat
    out = torch.cat([torch.pow(base, piece) for piece in padded.split(_GRAIN - _GRAIN % _BLOCK)])
    return out[:n].view(t.shape)


def scalar_pow(base: float, t: torch.Tensor) -> torch.Tensor:
    """``torch.pow(base, t)`` with every element on the scalar path (the value of a long tensor's tail)."""
    if t.device.type != "cpu":
        return torch.pow(base, t)
    flat = t.reshape(-1)
    pieces = [torch.pow(base, piece) for piece in flat.split(8)]  # below any vector block: scalar code only
    return (torch.cat(pieces) if pieces else flat.clone()).view(t.shape)


def _find_probe() -> tuple[float, float] | None:
    """A (base, exponent) whose vector and scalar ``pow`` differ, or None when the two paths agree everywhere."""
    exps = torch.arange(1, 4097, dtype=torch.float32)
    for base in (0.9, 0.999, 0.99):
        differ = (vector_pow(base, exps) != scalar_pow(base, exps)).nonzero().view(-1)
        if len(differ):
            e = float(exps[differ[0]])
            body = torch.pow(base, torch.full((_BLOCK,), e))
            if not bool((body == vector_pow(base, torch.tensor([e]))).all()):
                raise VFLBenchError(
                    "internal: this CPU's vector blocks do not divide 256 elements; the optimiser's "
                    "per-member bias corrections (vflbench/nn/bias.py) cannot match the per-element ones"
                )
            return base, e
    return None


def scalar_tail(like: torch.Tensor) -> torch.Tensor | None:
    """Flat positions that ``torch.pow(b, x)`` over a contiguous CPU tensor ``x`` shaped as ``like`` computes on
    the scalar path, at this process's thread count; None when there are none or the paths agree. The probe is
    written into ``like`` (a scratch tensor: its values are overwritten)."""
    global _probe
    if _probe is False:
        _probe = _find_probe()
    if _probe is None:
        return None
    if like.device.type != "cpu":
        return None
    key = (like.numel(), torch.get_num_threads())
    if key not in _tails:
        base, e = _probe
        got = torch.pow(base, like.view(-1).fill_(e), out=like.view(-1))
        scalar = scalar_pow(base, torch.tensor([e]))
        where = (got == scalar).nonzero().view(-1)
        _tails[key] = where if len(where) else None
    return _tails[key]


class Layout:
    """The runs of equal member ids in a flat store's ``member_of`` (``[P]``), grouped by run length, to apply
    per-member values (``[members]``, or ``[pack, members]`` over a pack's ``[pack, P]``) elementwise."""

    def __init__(self, member_of: torch.Tensor, runs: list[tuple[int, int, int, torch.Tensor]] | None = None):
        """``runs``: the store's own (offset, rows, length, members) per tensor (ParamStore.runs), which spares
        the scan of ``member_of`` (tenths of a second over 49 M elements)."""
        if runs is not None:
            dev = member_of.device
            self.groups = [(off, rows, length, members.to(dev)) for off, rows, length, members in runs]
            self.present = torch.unique(torch.cat([g[3] for g in self.groups])) if self.groups else member_of[:0]
            self.numel = member_of.numel()
            return
        m = member_of.reshape(-1).cpu()
        n = m.numel()
        change = (m[1:] != m[:-1]).nonzero().view(-1) + 1
        starts = torch.cat([torch.zeros(1, dtype=torch.long), change])
        lengths = torch.diff(torch.cat([starts, torch.tensor([n])]))
        cut = (lengths[1:] != lengths[:-1]).nonzero().view(-1) + 1
        bounds = torch.cat([torch.zeros(1, dtype=torch.long), cut, torch.tensor([len(starts)])]).tolist()
        dev = member_of.device
        self.groups = [
            (int(starts[i]), j - i, int(lengths[i]), m[starts[i:j]].to(dev))
            for i, j in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        self.present = torch.unique(m[starts]).to(dev)  # the members of the runs: far fewer than elements
        self.numel = n

    def uniform(self, *values: torch.Tensor) -> tuple[float, ...] | None:
        """Each of ``values`` as one number when it is the same for every member present, else None."""
        out = []
        for v in values:
            here = v[..., self.present]
            if not bool(here.min() == here.max()):
                return None
            out.append(float(here.reshape(-1)[0]))
        return tuple(out)

    def _apply(self, w: torch.Tensor, values: torch.Tensor, op: str) -> None:
        one = self.uniform(values)
        if one is not None:  # one step count for every member present: one number
            getattr(w, op)(one[0])
            return
        lead = w.shape[:-1]
        for off, rows, length, members in self.groups:
            seg = w[..., off : off + rows * length].view(*lead, rows, length)
            getattr(seg, op)(values[..., members].unsqueeze(-1))

    def div_(self, w: torch.Tensor, values: torch.Tensor) -> None:
        self._apply(w, values, "div_")

    def mul_(self, w: torch.Tensor, values: torch.Tensor) -> None:
        self._apply(w, values, "mul_")
