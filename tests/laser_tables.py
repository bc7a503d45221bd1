"""The LASER-VFL subset tables that vflbench used up to revision e04ca54 (every pair S <= O enumerated, 3^K), kept
here as the reference the table-free draws of :mod:`vflbench.methods.laser` are tested against bit for bit."""

from __future__ import annotations

import math

import torch


def subset_table(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Lookup tables for uniform subset sampling.

    ``table[O, i, s-1, r]`` is the r-th subset (as a bitmask) of observed set O (bitmask) that contains
    head i and has size s; ``count[O, i, s-1]`` how many there are (C(|O|-1, s-1) when i is in O).
    Built by enumerating every pair S <= O once (3^K pairs).
    """
    width = max(math.comb(k - 1, j) for j in range(k))
    table = torch.zeros(2**k, k, k, width, dtype=torch.long)
    count = torch.zeros(2**k, k, k, dtype=torch.long)
    for o in range(1, 2**k):
        sub = o
        while sub:  # every non-empty submask of o
            size = sub.bit_count()
            for i in range(k):
                if sub >> i & 1:
                    c = count[o, i, size - 1]
                    table[o, i, size - 1, c] = sub
                    count[o, i, size - 1] = c + 1
            sub = (sub - 1) & o
    return table, count


def subset_table_any(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`subset_table` for one head that every subset serves: ``table[O, 0, s-1, r]`` is the
    r-th subset of O of size s, ``count[O, 0, s-1]`` = C(|O|, s)."""
    width = max(math.comb(k, j) for j in range(k + 1))
    table = torch.zeros(2**k, 1, k, width, dtype=torch.long)
    count = torch.zeros(2**k, 1, k, dtype=torch.long)
    for o in range(1, 2**k):
        sub = o
        while sub:
            size = sub.bit_count()
            c = count[o, 0, size - 1]
            table[o, 0, size - 1, c] = sub
            count[o, 0, size - 1] = c + 1
            sub = (sub - 1) & o
    return table, count


def subset_slots(pattern: torch.Tensor, gen: torch.Generator, tables) -> torch.Tensor:
    """The draw behind :func:`sample_subsets`, as slots of the subset table: ``[B, head*size]`` indices
    into ``table.view(-1)``. One uniform per (sample, head, size), ``r = floor(u * count)``; the table of
    each pattern's first slots is built once per tables (gathers by ``index_select``: the same values as
    advanced indexing, several times faster on CPU)."""
    table, count = tables[0], tables[1]
    h, k = table.shape[1], table.shape[2]
    if len(tables) < 3:
        raise ValueError("subset_slots needs tables from slot_tables()")
    first = tables[2]  # [2^K, head*size]: pattern * (h k width) + j * width
    cnt = torch.index_select(count.view(-1, h * k), 0, pattern)  # [B, head*size]
    u = torch.rand((pattern.shape[0], h * k), generator=gen, device=pattern.device)
    r = (u * cnt).long()  # uniform in 0..cnt-1 (u < 1); 0 where cnt = 0 -> the empty entry
    return torch.index_select(first, 0, pattern) + r


def slot_tables(tables) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(table, count, first slots per pattern) for :func:`subset_slots`."""
    table, count = tables[0], tables[1]
    h, k, width = table.shape[1], table.shape[2], table.shape[-1]
    patterns = torch.arange(table.shape[0], device=table.device)
    first = patterns[:, None] * (h * k * width) + torch.arange(h * k, device=table.device)[None] * width
    return table, count, first


def sample_subsets(
    obs: torch.Tensor, gen: torch.Generator, shared: bool, tables=None, pattern: torch.Tensor | None = None
) -> torch.Tensor:
    """Draw the LASER tasks. Returns ``chosen[b, i, s-1]``, the bitmask of the subset of size s drawn
    for head i, uniformly among the subsets of O that contain i (independently per head and
    size, like the authors' ``random.sample``). Entries for heads outside O or sizes above |O| are
    empty (0; their loss weight is 0 too). ``shared=True`` draws one subset per (head, size) for the
    whole batch (the authors' per-batch code): ``obs`` rows must then be equal, and one row comes back."""
    tables = tables if tables is not None else subset_table(obs.shape[1])
    table, count = tables[0], tables[1]
    h, k = table.shape[1], table.shape[2]  # heads, sizes (= blocks)
    if shared:
        obs = obs[:1]
        pattern = None if pattern is None else pattern[:1]
    if pattern is None:
        pattern = (obs.long() << torch.arange(k, device=obs.device)).sum(1)  # [B]
    slots = subset_slots(
        pattern, gen, tables if tables is not None and len(tables) > 2 else slot_tables((table, count))
    )
    return torch.index_select(table.view(-1), 0, slots.view(-1)).view(pattern.shape[0], h, k)


def bitmask_members(chosen: torch.Tensor, k: int) -> torch.Tensor:
    """Bitmasks ``[...]`` -> membership ``[..., K]`` (bool)."""
    return ((chosen[..., None] >> torch.arange(k, device=chosen.device)) & 1).bool()
