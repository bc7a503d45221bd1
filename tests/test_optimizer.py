"""The masked optimiser steps only its active members' spans of the flat store, with the arithmetic of the masked
update over the whole store: the two give the same parameters and state, bit for bit, in every configuration."""

from __future__ import annotations

import itertools

import pytest
import torch

from vflbench.nn.optim import MaskedOptimizer, member_bounds


class Store:
    def __init__(self, flat, member_of):
        self.flat, self.member_of = flat, member_of

    def n_params(self):
        return self.flat.numel()


CONFIGS = [
    c
    for c in itertools.product(("adam", "sgd"), (0.0, 1e-3), (0.0, 0.8), (False, True), (None, [0, 0, 1, 1, 2, 2]))
    if not (c[0] == "adam" and c[2])
]


@pytest.mark.parametrize("name,wd,momentum,stale,groups", CONFIGS)
def test_stepping_only_active_spans_equals_the_masked_update(name, wd, momentum, stale, groups):
    sizes = [5, 0, 7, 3, 11, 4]  # a member without elements among them
    mem = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    init = torch.randn(len(mem), generator=torch.Generator().manual_seed(0))
    out = []
    for spans in (True, False):
        flat = torch.nn.Parameter(init.clone())
        opt = MaskedOptimizer(
            Store(flat, mem),
            [],
            6,
            name=name,
            lr=0.05,
            weight_decay=wd,
            momentum=momentum,
            groups=groups,
            stale_updates=stale,
        )
        if not spans:
            opt.bounds = [None] * len(opt.bounds)  # the masked update over the whole store
        g = torch.Generator().manual_seed(1)
        for step in range(25):
            flat.grad = torch.randn(len(mem), generator=g)
            opt.step(torch.rand(6, generator=g) < (0.5 if step % 5 else 1.1))
        out.append((flat.detach().clone(), {k: v.clone() for k, v in opt.state[0].items()}))
    assert torch.equal(out[0][0], out[1][0])
    assert out[0][1].keys() == out[1][1].keys() and all(torch.equal(out[0][1][k], out[1][1][k]) for k in out[0][1])


def test_member_bounds_needs_contiguous_members():
    assert member_bounds(torch.tensor([0, 0, 2, 2, 2]), 3) == [(0, 2), (2, 2), (2, 5)]
    assert member_bounds(torch.tensor([0, 1, 0]), 2) is None
