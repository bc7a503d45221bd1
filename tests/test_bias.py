"""The masked optimiser's per-member bias corrections give the per-element computation's numbers bit for bit.

The reference is the per-element Adam step the optimiser had before (a step-count tensor as large as the
store, ``torch.pow`` over all of it): kept here, verbatim in its arithmetic, as the definition of the numbers.
The cases are chosen to hit what makes this hard: stores whose length is not a multiple of the CPU's vector
block (scalar tails), stores large enough to be split between two threads (a tail per chunk), members with
different step counts, packs, stale updates and trainable spans, and enough steps for ``pow``'s two code paths
to disagree.
"""

from __future__ import annotations

import pytest
import torch

from vflbench.nn import bias, models, optim
from vflbench.nn.models import ParamStore
from vflbench.nn.optim import MaskedOptimizer


@pytest.fixture(autouse=True)
def per_member_from_one_element(monkeypatch):
    """The per-member path on these small stores (a run takes it from optim.PER_MEMBER elements), and blocks of
    100 elements for the all-active step (so a store is stepped in several blocks, the last one short)."""
    monkeypatch.setattr(optim, "PER_MEMBER", 1)
    monkeypatch.setattr(optim, "BLOCK", 100)


class PerElement(MaskedOptimizer):
    """The reference: a step count per element and the bias corrections computed per element."""

    def _step_flat(self, p, grad, mem, st, all_active, active, scratch):
        if self.name != "adam":
            return super()._step_flat(p, grad, mem, st, all_active, active, scratch)
        b1, b2 = self.betas
        a = None if all_active else active[..., mem].to(p.dtype)
        t = st.get("te")
        if t is None:
            t = st["te"] = torch.zeros_like(p)
        t.add_(1.0 if a is None else a)
        g = grad if not self.wd else torch.add(grad, p, alpha=self.wd)
        if "m" not in st:
            st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
        m, v = st["m"], st["v"]
        if a is None:
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
        else:
            m.lerp_(g, (1 - b1) * a)
            v.lerp_(g * g, (1 - b2) * a)
        bc2_sqrt, scale = self._bias_corrections(t)
        denom = (v.sqrt() / bc2_sqrt).add_(self.eps)
        step = m / denom * scale
        p.sub_(step if a is None else step * a)


def store(rows: list[tuple[int, int]], members: int, seed: int = 0) -> ParamStore:
    """A store of batched tensors ``[members, r, c]`` (one run of ``r * c`` elements per member and tensor)."""
    s = ParamStore()
    for i, (r, c) in enumerate(rows):
        s.add(f"w{i}", (members, r, c), torch.arange(members), 0.5)
    s.finalize(torch.Generator().manual_seed(seed))
    return s


def run_both(rows, members, steps, *, threads=1, p_active=0.8, pack=None, **kw):
    torch.set_num_threads(threads)
    try:
        out = []
        for cls in (PerElement, MaskedOptimizer):
            s = store(rows, members)
            flat = s.flat if pack is None else torch.nn.Parameter(s.flat.detach().repeat(pack, 1))
            if pack is not None:
                s.flat = flat
            opt = cls(s, [], members, name="adam", lr=1e-3, pack=pack, **kw)
            g = torch.Generator().manual_seed(1)
            lead = () if pack is None else (pack,)
            for _ in range(steps):
                flat.grad = torch.randn(flat.shape, generator=g)
                active = torch.rand(*lead, members, generator=g) < p_active
                opt.step(active)
            out.append(flat.detach().clone())
        return out
    finally:
        torch.set_num_threads(1)


def test_vector_and_scalar_pow_are_the_two_paths_of_a_long_tensor():
    e = torch.arange(1, 2049, dtype=torch.float32)
    long = torch.pow(0.999, e.repeat(40))[: len(e)]  # a long tensor's body: vector code
    assert torch.equal(bias.vector_pow(0.999, e), long)
    assert torch.equal(bias.scalar_pow(0.999, e[:5]), torch.stack([torch.pow(0.999, x) for x in e[:5]]))


def test_scalar_tail_is_where_a_long_pow_takes_the_scalar_path():
    if bias._find_probe() is None:
        pytest.skip("this CPU's vector and scalar pow agree: no tail to find")
    tail = bias.scalar_tail(torch.empty(1000))
    assert tail is not None and 0 < len(tail) < 64
    assert int(tail[-1]) == 999 and bool((torch.diff(tail) == 1).all())  # the last elements, contiguous
    assert bias.scalar_tail(torch.empty(1024)) is None  # whole blocks only


@pytest.mark.parametrize(
    "rows,members,threads,kw",
    [
        ([(3, 5), (1, 7)], 5, 1, {}),  # tiny, odd length: all tail
        ([(13, 11), (1, 13)], 31, 1, {"weight_decay": 1e-3}),
        ([(37, 29), (1, 37), (5, 37)], 63, 2, {}),  # 76,000+ elements: two chunks, two tails
        ([(37, 29), (1, 37)], 63, 2, {"stale_updates": True, "groups": list(range(63))}),
        ([(20, 21)], 7, 1, {"trainable": torch.tensor([0, 1, 1, 1, 0, 1, 0], dtype=torch.bool)}),
    ],
)
def test_per_member_bias_corrections_equal_the_per_element_ones_bit_for_bit(rows, members, threads, kw):
    ref, new = run_both(rows, members, steps=300, threads=threads, **kw)
    assert torch.equal(ref, new)


def disagreeing_counts(n: int, gen: torch.Generator) -> torch.Tensor:
    """Step counts one short of the exponents where the vector and scalar pow of b1 or b2 disagree."""
    e = torch.arange(1, 2049, dtype=torch.float32)
    d = (bias.vector_pow(0.9, e) != bias.scalar_pow(0.9, e)) | (bias.vector_pow(0.999, e) != bias.scalar_pow(0.999, e))
    pick = e[d] - 1
    return pick[torch.randint(len(pick), (n,), generator=gen)]


@pytest.mark.parametrize(
    "threads,all_active,one_count", [(1, True, False), (1, False, False), (2, True, False), (2, False, False),
                                     (1, True, True), (2, True, True)]
)  # fmt: skip
def test_one_step_at_disagreeing_counts_is_the_per_element_step(threads, all_active, one_count):
    """Parameters at zero, so the update is seen whole; every member's step count sits where the two pows
    differ, so a per-member value on the wrong path, or a tail left unfixed, changes the result."""
    if bias._find_probe() is None:
        pytest.skip("this CPU's vector and scalar pow agree")
    torch.set_num_threads(threads)
    try:
        got = []
        for cls in (PerElement, MaskedOptimizer):
            s = store([(37, 29), (1, 37)], 63)
            gen = torch.Generator().manual_seed(3)
            counts = disagreeing_counts(63, gen)
            if one_count:  # every member at one count: the blocked step, its tail fixed block by block
                counts = torch.full((63,), 167.0)  # 0.999^168 differs between the two paths (and 1 - it shows it)
            s.flat.data.zero_()
            opt = cls(s, [], 63, name="adam", lr=1e-3)
            n = s.flat.numel()
            st = opt.state[0]
            st["m"], st["v"] = torch.randn(n, generator=gen), torch.rand(n, generator=gen)
            st["te" if cls is PerElement else "t"] = counts[s.member_of] if cls is PerElement else counts
            s.flat.grad = torch.randn(n, generator=gen)
            active = torch.ones(63, dtype=torch.bool) if all_active else torch.rand(63, generator=gen) < 0.7
            opt.step(active)
            got.append(s.flat.detach().clone())
        assert torch.equal(got[0], got[1])
    finally:
        torch.set_num_threads(1)


def test_all_members_active_every_step_uses_one_number_and_still_matches():
    ref, new = run_both([(41, 43)], 3, steps=300, p_active=1.1)
    assert torch.equal(ref, new)


def test_a_pack_of_runs_matches_bit_for_bit():
    ref, new = run_both([(9, 11), (1, 9)], 13, steps=200, pack=3)
    assert torch.equal(ref, new)


def test_layout_spreads_per_member_values_like_a_gather():
    s = store([(2, 3), (1, 2), (4, 1)], 5)
    values = torch.rand(5) + 0.5
    for lay in (bias.Layout(s.member_of), bias.Layout(s.member_of, s.runs)):  # scanned, and the store's own runs
        w = torch.rand(s.flat.numel())
        want = w / values[s.member_of]
        lay.div_(w, values)
        assert torch.equal(w, want)
        assert len(lay.groups) == 3  # one group per tensor: its rows are runs of one length
        assert lay.present.tolist() == [0, 1, 2, 3, 4]


def test_a_large_store_writes_its_gradient_into_the_last_one_with_torchs_values(monkeypatch):
    """Above RECYCLE_GRAD the split's backward concatenates into the buffer the optimiser's zero_grad handed
    back: the same values as torch's split backward (zeros for an unused tensor), and no new buffer."""
    monkeypatch.setattr(models, "RECYCLE_GRAD", 1)
    s = store([(4, 5), (1, 5)], 3)
    opt = MaskedOptimizer(s, [], 3, name="adam", lr=1e-3)
    where = []
    for _ in range(3):
        s.begin()
        (s["w0"] ** 2).sum().backward()  # w1 unused
        want = torch.cat([2 * s["w0"].detach().reshape(-1), torch.zeros(15)])
        assert torch.equal(s.flat.grad, want)
        where.append(s.flat.grad.data_ptr())
        opt.step(torch.ones(3, dtype=torch.bool))
        opt.zero_grad()
    assert where[1] == where[2] and s.scratch is not None


def test_only_stores_from_per_member_elements_take_the_per_member_path(monkeypatch):
    monkeypatch.setattr(optim, "PER_MEMBER", 1000)
    for rows, per_member in (([(3, 5)], False), ([(20, 21)], True)):  # 105 and 1,260 elements (x 3 members)
        s = store(rows, 3)
        opt = MaskedOptimizer(s, [], 3, name="adam", lr=1e-3)
        s.flat.grad = torch.ones_like(s.flat)
        opt.step(torch.ones(3, dtype=torch.bool))
        assert bool(opt.scratch) == per_member
        assert opt.state[0]["t"].numel() == (3 if per_member else s.flat.numel())


def _bank_store(gen_seed: int):
    s = ParamStore()
    ext = models.MLPBank(s, "ext", [0, 1, 1, 2], [0, 1, 2, 3], [5, 3, 4], [6], 7)
    head = models.HeadBank(s, "head", [4, 5], 7, 3, hidden=4)
    s.add("unused", (2, 3), torch.tensor([4, 5]), 0.5)
    s.finalize(torch.Generator().manual_seed(gen_seed))
    return s, ext, head


def _store_losses(s, ext, head, x, twice: bool, split_twice: bool):
    s.begin()
    emb = ext(x)  # [4, B, 7]
    if split_twice:  # a second forward in the same step (a fresh split): only the latest may take the buffer
        s.begin()
    out = head(torch.stack([emb[:2].sum(0), emb[2:].sum(0)]))
    loss = out.square().mean() + emb.abs().mean()
    if twice:  # a tensor used twice: autograd sums the gradients, and the sum must be copied in
        loss = loss + ext(x * 0.5).square().mean()
    return loss


@pytest.mark.parametrize("twice,split_twice", [(False, False), (True, False), (False, True), (True, True)])
def test_gradients_written_in_place_are_torchs_bit_for_bit(monkeypatch, twice, split_twice):
    """Above RECYCLE_GRAD a bank's affine maps write their weight and bias gradients into the spare buffer
    (_StoreAffine): the same bits as torch's baddbmm backward, step after step, with a tensor used twice, a
    second forward in the step, and an unused tensor (zeros)."""
    gen = torch.Generator().manual_seed(5)
    xs = [torch.randn(3, 9, 5, generator=gen) for _ in range(4)]
    got = []
    for threshold in (1 << 40, 1):
        monkeypatch.setattr(models, "RECYCLE_GRAD", threshold)
        s, ext, head = _bank_store(3)
        opt = MaskedOptimizer(s, [], 6, name="adam", lr=1e-2)
        grads, where = [], []
        for x in xs:
            opt.zero_grad()
            _store_losses(s, ext, head, x, twice, split_twice).backward()
            grads.append(s.flat.grad.clone())
            where.append(s.flat.grad.data_ptr())
            if threshold == 1 and len(where) > 1:  # written in place: the heads' tensors at least
                assert len(s.recycle.claimed) == (4 if split_twice and not twice else 8)  # all but the unused one
            opt.step(torch.ones(6, dtype=torch.bool))
        got.append((grads, s.flat.detach().clone()))
        if threshold == 1 and not split_twice:
            assert where[1] == where[3]  # the buffer came back (two alternate: the optimiser's and the spare)
    (ref_grads, ref_flat), (new_grads, new_flat) = got
    for a, b in zip(ref_grads, new_grads, strict=True):
        assert torch.equal(a, b)
        assert not bool(b[-6:].any())  # the unused tensor's gradient is zeros
    assert torch.equal(ref_flat, new_flat)
