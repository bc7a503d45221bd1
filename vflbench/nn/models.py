"""Representation models (extractors) and fusion heads, vectorised across parties and predictors.

Tabular MLP extractors of all parties (or of all predictors of a method) live in one
:class:`ParamStore`: a single flat parameter vector with per-element *member* ids. A forward pass
computes every member with a chain of batched matrix products (``torch.baddbmm``), so a method with
32 extractors (Combinatorial, K=4) costs the same number of kernel launches as one with 4. Image
extractors (torchvision ResNet-18, a small CNN) are ordinary modules held in a :class:`ModuleBank`.

"Members" are the independently trained units of a method (an extractor, a head). The masked
optimiser steps only members that took part in a batch, which reproduces separate per-model
optimisers and PyTorch's skipping of parameters that received no gradient.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..core.errors import VFLBenchError

# A store this large writes its gradient into the previous step's buffer (handed back by the optimiser's
# zero_grad) instead of a fresh one: faulting in ~200 MB of new pages every step cost Combinatorial at K = 8
# (49.1 M parameters) about 30 ms of a 230 ms step. Below it, torch's own split is cheaper (no Python hop).
RECYCLE_GRAD = 1 << 22


class _Spare:
    """The spent gradient buffer that one forward's backward pass writes into (held by the store as ``scratch``,
    taken by the first node that needs it, and only by the store's latest forward)."""

    def __init__(self, store: ParamStore):
        self.store, self.taken, self.claimed = store, False, set()
        self.scratch: torch.Tensor | None = None

    def take(self) -> torch.Tensor | None:
        if not self.taken:
            self.taken = True
            if self.store.recycle is self:
                self.scratch, self.store.scratch = self.store.scratch, None
        return self.scratch

    def slot(self, offset: int, shape: torch.Size) -> torch.Tensor | None:
        """A view of the buffer where tensor ``offset``'s gradient goes, once per forward (a second use of the
        same tensor gets None: autograd sums the two gradients, and the sum is copied in)."""
        buf = self.take()
        if buf is None or offset in self.claimed:
            return None
        self.claimed.add(offset)
        return buf[offset : offset + math.prod(shape)].view(shape)


class _RecycledSplit(torch.autograd.Function):
    """``flat.split(sizes)`` whose backward writes the parts' gradients into the spare buffer when there is one
    (the same values as torch's split backward: a copy, zeros for unused parts). A part whose gradient was
    computed in place (:class:`_StoreAffine`) is not copied."""

    @staticmethod
    def forward(ctx, flat, spare, *sizes):
        ctx.spare = spare
        return flat.split(list(sizes))

    @staticmethod
    def backward(ctx, *grads):
        buf = ctx.spare.take()
        ctx.spare.scratch = None
        flat = [g.reshape(-1) for g in grads]
        if buf is None:
            return (torch.cat(flat), None, *([None] * len(grads)))
        off, size = 0, buf.element_size()
        for g in flat:
            if g.data_ptr() != buf.data_ptr() + off * size:  # not written in place
                buf[off : off + g.numel()].copy_(g)
            off += g.numel()
        return (buf, None, *([None] * len(grads)))


class _StoreAffine(torch.autograd.Function):
    """``torch.baddbmm(bias, x, weight)`` over a store's tensors, with the backward of torch's own formula
    (``x^T g`` for the weight, ``g W^T`` for the input, ``g`` summed over the broadcast axis for the bias),
    the weight's and bias's gradients written straight into the store's spare gradient buffer. A fresh
    ``[M, in, out]`` gradient costs its page faults on every step: the weight gradient of Combinatorial at
    K = 8 took 29 ms a call into new memory and takes 8 ms into the spare (benchmarks/README.md, the slow paths)."""

    @staticmethod
    def forward(ctx, bias, x, weight, spare, w_off, b_off):
        ctx.save_for_backward(x, weight)
        ctx.spare, ctx.w_off, ctx.b_off, ctx.b_shape = spare, w_off, b_off, bias.shape
        return torch.baddbmm(bias, x, weight)

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        gb = gx = gw = None
        if ctx.needs_input_grad[0]:  # the engine's sum_to: a sum over the broadcast (batch) axis, kept
            out = ctx.spare.slot(ctx.b_off, ctx.b_shape)
            gb = g.sum(1, keepdim=True) if out is None else torch.sum(g, 1, keepdim=True, out=out)
        if ctx.needs_input_grad[1]:
            gx = g.bmm(weight.transpose(1, 2))
        if ctx.needs_input_grad[2]:
            out = ctx.spare.slot(ctx.w_off, weight.shape)
            gw = x.transpose(1, 2).bmm(g) if out is None else torch.bmm(x.transpose(1, 2), g, out=out)
        return gb, gx, gw, None, None, None


class ParamStore(nn.Module):
    """Many small parameter tensors as views of one flat leaf tensor.

    Each tensor has a leading *member* axis (``members`` gives a global member id per row) or
    belongs to one member entirely. Views are re-sliced on every forward, so autograd writes a
    single flat gradient and the optimiser updates everything with a handful of vector ops.
    """

    def __init__(self) -> None:
        super().__init__()
        self._specs: dict[str, tuple[int, tuple[int, ...]]] = {}
        self._pending: list[tuple[str, tuple[int, ...], torch.Tensor, torch.Tensor]] = []
        self._total = 0
        self.flat: nn.Parameter | None = None
        self._cache: dict[str, torch.Tensor] | None = None
        # Affine maps computed as (W^T x^T)^T (see affine): set while a pack's loss runs, where the
        # batched products are N x K tall-thin GEMMs (benchmarks/README.md, per-step overhead).
        self.transposed = False
        self.register_buffer("member_of", torch.zeros(0, dtype=torch.long), persistent=False)
        # (offset, rows, row length, member of each row) per tensor: ``member_of`` in runs (nn.bias.Layout)
        self.runs: list[tuple[int, int, int, torch.Tensor]] = []
        # a spent gradient of ``flat`` to write the next one into (_RecycledSplit); not state (checkpoint.SKIP)
        self.scratch: torch.Tensor | None = None
        self.recycle: _Spare | None = None  # the latest forward's claim on it
        self.bound = False  # inside bound_to (a pack's vmapped loss): activations are not the store's own

    def add(self, name: str, shape: Sequence[int], members: torch.Tensor | int, bound: torch.Tensor | float) -> None:
        shape = tuple(int(s) for s in shape)
        n = math.prod(shape)
        if isinstance(members, int):
            mem = torch.full(shape, members, dtype=torch.long)
        else:
            mem = members.view(-1, *([1] * (len(shape) - 1))).expand(shape).clone()
        b = torch.as_tensor(bound, dtype=torch.float32)
        if b.ndim:
            b = b.view(-1, *([1] * (len(shape) - 1))).expand(shape)
        self._specs[name] = (self._total, shape)
        self._pending.append((name, shape, mem, b))
        rows = torch.tensor([members]) if isinstance(members, int) else members.reshape(-1).long()
        self.runs.append((self._total, len(rows), n // len(rows), rows))
        self._total += n

    def finalize(self, gen: torch.Generator) -> None:
        """Initialise every tensor U(-bound, bound) (PyTorch's nn.Linear default) from ``gen``."""
        flat = torch.empty(self._total)
        member_of = torch.empty(self._total, dtype=torch.long)
        for name, shape, mem, bound in self._pending:
            off, _ = self._specs[name]
            n = math.prod(shape)
            u = torch.rand(shape, generator=gen) * 2 - 1
            flat[off : off + n] = (u * bound).reshape(-1)
            member_of[off : off + n] = mem.reshape(-1)
        self.flat = nn.Parameter(flat)
        self.member_of = member_of
        self._pending = []

    def begin(self) -> None:
        """Slice every tensor out of ``flat`` with one ``split`` (one cheap node in the backward pass
        instead of one full-size gradient buffer per tensor). Call at the start of each forward."""
        names = list(self._specs)
        sizes = [math.prod(self._specs[n][1]) for n in names]
        self.recycle = None
        if self._total >= RECYCLE_GRAD and self.flat.requires_grad and torch.is_grad_enabled():
            self.recycle = _Spare(self)
            parts = _RecycledSplit.apply(self.flat, self.recycle, *sizes)
        else:
            parts = self.flat.split(sizes)
        self._cache = {n: t.view(self._specs[n][1]) for n, t in zip(names, parts, strict=True)}

    # -- the functional API: parameters as a pytree of views of any flat vector (a bank's member rows)
    def names(self) -> list[str]:
        return list(self._specs)

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{name: tensor}`` views of ``flat`` (``[P]``, laid out as :attr:`flat`), e.g. one member's row of a bank."""
        names = list(self._specs)
        sizes = [math.prod(self._specs[n][1]) for n in names]
        return {n: t.view(self._specs[n][1]) for n, t in zip(names, flat.split(sizes), strict=True)}

    @contextmanager
    def bound_to(self, views: dict[str, torch.Tensor], transposed: bool = False):
        """Within the block, every forward reads ``views`` (from :meth:`views`) instead of :attr:`flat`."""
        saved = (self._cache, self.transposed, self.recycle, self.bound)
        self._cache, self.transposed, self.recycle, self.bound = views, transposed, None, True
        try:
            yield self
        finally:
            self._cache, self.transposed, self.recycle, self.bound = saved

    def __getitem__(self, name: str) -> torch.Tensor:
        if self._cache is not None:
            return self._cache[name]
        off, shape = self._specs[name]
        return self.flat[off : off + math.prod(shape)].view(shape)

    def n_params(self) -> int:
        return self._total

    def affine(self, x: torch.Tensor, weight: str, bias: str, bias_view=None) -> torch.Tensor:
        """:func:`affine` of tensors ``weight`` and ``bias`` (``bias_view`` reshapes the bias to ``[M, 1, out]``),
        with their gradients written into the spare buffer when the store recycles one."""
        b = self[bias] if bias_view is None else bias_view(self[bias])
        if self.recycle is None or self.transposed:
            return affine(b, x, self[weight], self.transposed)
        return _StoreAffine.apply(b, x, self[weight], self.recycle, self._specs[weight][0], self._specs[bias][0])

    @torch.no_grad()
    def average_members(self, name: str) -> None:
        """Replace every member's row of tensor ``name`` (leading member axis) by the rows' mean:
        FedAvg with equal weights, in place (optimiser state is left as it is)."""
        off, shape = self._specs[name]
        t = self.flat.data[off : off + math.prod(shape)].view(shape)
        t.copy_(t.mean(0, keepdim=True).expand_as(t))


def linear_bound(fan_in: int | torch.Tensor) -> torch.Tensor | float:
    if isinstance(fan_in, torch.Tensor):
        return 1.0 / fan_in.float().clamp_min(1).sqrt()
    return 1.0 / math.sqrt(max(fan_in, 1))


def affine(bias: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, transposed: bool = False) -> torch.Tensor:
    """``bias + x @ weight`` over a leading batch axis (``torch.baddbmm``). ``transposed`` computes
    the same product as ``(weight^T x^T)^T``: MKL's batched GEMM is about 5x faster on many products
    of a tall batch by a small weight (``[128, 10] @ [10, 10]``) when they are posed wide instead
    (``python benchmarks/pack_layout.py@f5ab53e --gemm``),
    and the result stays in that layout for the next layer. Rounding may differ in the last bit. The
    input is made contiguous in that layout (a no-op after the first layer) because the weight
    gradient's rounding depends on the input's strides, which in a pack depend on the pack size."""
    if transposed:
        return torch.baddbmm(
            bias.transpose(-1, -2), weight.transpose(-1, -2), x.transpose(-1, -2).contiguous()
        ).transpose(-1, -2)
    return torch.baddbmm(bias, x, weight)


# (position in the party's block, embedding table rows, embedding size) of each embedded categorical column, per party
Embedded = Sequence[Sequence[tuple[int, int, int]]]
UNSEEN_CODE = 1  # vflbench.data.datasets.encoding.UNSEEN: a level never seen in training reads a zero vector
EMBED_INIT = math.sqrt(3.0)  # U(-sqrt 3, sqrt 3): unit variance, as nn.Embedding's N(0, 1)


class EmbeddingFront:
    """The first step of a bank whose parties hold embedded categorical columns (integer codes stored in the block,
    :mod:`vflbench.data.datasets.encoding`): every member has one table per column of its party (``[M_p, rows,
    dim]`` in the store, so the masked optimiser steps them with the member), looks its codes up, and reads its
    block with the code columns zeroed followed by the embeddings (zero-padded to the widest party's). One
    gather per embedded column, whatever the batch; a missing cell (code 0) and a rare level (code 2) have
    trained rows, a level unseen in training reads zeros."""

    def __init__(
        self,
        store: ParamStore,
        prefix: str,
        party_of: Sequence[int],
        member_ids: Sequence[int],
        widths: Sequence[int],
        embedded: Embedded,
    ):
        self.store = store
        party_of = list(party_of)
        self.width = max(sum(d for _, _, d in embedded[p]) for p in set(party_of))
        keep = torch.ones(len(widths), max(widths))
        self.groups: list[tuple[int, int, list[tuple[int, str, int]]]] = []  # (party, members, [(pos, name, dim)])
        order: list[int] = []
        plain = [i for i, p in enumerate(party_of) if not embedded[p]]
        for p in sorted(set(party_of)):
            if not embedded[p]:
                continue
            rows = [i for i, q in enumerate(party_of) if q == p]
            mem = torch.as_tensor([member_ids[i] for i in rows], dtype=torch.long)
            cols = []
            for j, (pos, n_rows, dim) in enumerate(embedded[p]):
                name = f"{prefix}.emb{p}.{j}"
                store.add(name, (len(rows), int(n_rows), int(dim)), mem, EMBED_INIT)
                cols.append((int(pos), name, int(dim)))
                keep[p, pos] = 0.0
            self.groups.append((p, len(rows), cols))
            order += rows
        self.n_plain = len(plain)
        order = plain + order
        self.inverse = torch.as_tensor(sorted(range(len(order)), key=order.__getitem__), dtype=torch.long)
        self.reorder = order != sorted(order)
        self.keep = keep[torch.as_tensor(party_of, dtype=torch.long)][:, None, :]  # [M, 1, w]

    def __call__(self, xk: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """``xk``: ``[K, B, w]`` blocks; ``h``: ``[M, B, w]`` each member's block -> ``[M, B, w + width]``."""
        if self.keep.device != h.device:
            self.keep, self.inverse = self.keep.to(h.device), self.inverse.to(h.device)
        b = h.shape[1]
        parts = [h.new_zeros(self.n_plain, b, self.width)] if self.n_plain else []
        for p, _m, cols in self.groups:
            looked = []
            for pos, name, _dim in cols:
                codes = xk[p, :, pos].long()
                e = self.store[name][:, codes]  # [M_p, B, dim]
                looked.append(e * (codes != UNSEEN_CODE).to(e.dtype)[None, :, None])
            e = torch.cat(looked, -1) if len(looked) > 1 else looked[0]
            if e.shape[-1] < self.width:
                e = F.pad(e, (0, self.width - e.shape[-1]))
            parts.append(e)
        emb = torch.cat(parts, 0) if len(parts) > 1 else parts[0]
        if self.reorder:
            emb = emb[self.inverse]
        return torch.cat([h * self.keep, emb], -1)


def embedded_fan_in(widths: Sequence[int], embedded: Embedded | None, p: int) -> int:
    """Party ``p``'s input width to its bottom model: its block with each code column replaced by its embedding."""
    cols = embedded[p] if embedded else ()
    return int(widths[p]) - len(cols) + sum(int(d) for _, _, d in cols)


class MLPBank:
    """M independent MLPs ``width -> hidden... -> out`` (ReLU between layers, none after the last),
    computed together. Member m reads party ``party_of[m]``; inputs are zero-padded to the widest block.
    ``embedded``: the parties' embedded categorical columns (:class:`EmbeddingFront`), if any."""

    def __init__(
        self,
        store: ParamStore,
        prefix: str,
        party_of: Sequence[int],
        member_ids: Sequence[int],
        widths: Sequence[int],
        hidden: Sequence[int],
        out: int,
        embedded: Embedded | None = None,
    ):
        self.store, self.prefix = store, prefix
        self.party_of = torch.as_tensor(list(party_of), dtype=torch.long)
        self.m = len(self.party_of)
        mem = torch.as_tensor(list(member_ids), dtype=torch.long)
        self.identity = self.party_of.tolist() == list(range(len(widths)))
        self.front = None
        in_width = max(widths)
        if embedded and any(embedded[p] for p in party_of):
            self.front = EmbeddingFront(store, prefix, party_of, member_ids, widths, embedded)
            in_width += self.front.width
            true_in = torch.as_tensor([embedded_fan_in(widths, embedded, p) for p in party_of])
        else:
            true_in = torch.as_tensor([widths[p] for p in party_of])
        sizes = [in_width] + list(hidden) + [out]
        self.n_layers = len(sizes) - 1
        for li in range(self.n_layers):
            fan = true_in if li == 0 else sizes[li]
            bound = linear_bound(fan)
            store.add(f"{prefix}.w{li}", (self.m, sizes[li], sizes[li + 1]), mem, bound)
            store.add(f"{prefix}.b{li}", (self.m, 1, sizes[li + 1]), mem, bound)

    def __call__(self, xk: torch.Tensor) -> torch.Tensor:
        """``xk``: ``[K, B, w]`` stacked party blocks -> ``[M, B, out]``."""
        if self.identity:
            h = xk
        else:
            if self.party_of.device != xk.device:
                self.party_of = self.party_of.to(xk.device)
            h = xk[self.party_of]
        if self.front is not None:
            h = self.front(xk, h)
        # ReLU in place on the affine map's fresh output (its backward keeps the input, not the output): the same
        # values and gradient (torch's relu backward reads the result either way), without a new activation-sized
        # tensor per layer. Not on a pack's transposed views, nor under vmap.
        in_place = not (self.store.transposed or self.store.bound)
        for li in range(self.n_layers):
            h = self.store.affine(h, f"{self.prefix}.w{li}", f"{self.prefix}.b{li}")
            if li < self.n_layers - 1:
                h = F.relu(h, inplace=in_place)
        return h


class HeadBank:
    """H fusion heads ``in_dim -> n_classes``: one Linear (the LASER-VFL paper's heads), or with
    ``hidden`` > 0 a 2-layer MLP ``Linear(in, hidden)-ReLU-Linear(hidden, C)`` (the FALSE-VFL paper's
    fusion discriminator)."""

    def __init__(
        self, store: ParamStore, prefix: str, member_ids: Sequence[int], in_dim: int, n_classes: int, hidden: int = 0
    ):
        self.store, self.prefix = store, prefix
        mem = torch.as_tensor(list(member_ids), dtype=torch.long)
        self.h = len(mem)
        self.hidden = int(hidden)
        if self.hidden:
            b0, b1 = linear_bound(in_dim), linear_bound(self.hidden)
            store.add(f"{prefix}.w0", (self.h, in_dim, self.hidden), mem, b0)
            store.add(f"{prefix}.b0", (self.h, 1, self.hidden), mem, b0)
            store.add(f"{prefix}.w", (self.h, self.hidden, n_classes), mem, b1)
            store.add(f"{prefix}.b", (self.h, n_classes), mem, b1)
        else:
            b = linear_bound(in_dim)
            store.add(f"{prefix}.w", (self.h, in_dim, n_classes), mem, b)
            store.add(f"{prefix}.b", (self.h, n_classes), mem, b)

    @property
    def linear(self) -> bool:
        return not self.hidden

    @property
    def weight(self) -> torch.Tensor:
        """The (last) Linear's weight ``[H, in, C]``."""
        return self.store[f"{self.prefix}.w"]

    @property
    def bias(self) -> torch.Tensor:
        return self.store[f"{self.prefix}.b"]

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """``z``: ``[H, B, in]`` -> ``[H, B, C]`` (head h applied to z[h])."""
        if self.hidden:
            z = F.relu(self.store.affine(z, f"{self.prefix}.w0", f"{self.prefix}.b0"))
        return self.store.affine(z, f"{self.prefix}.w", f"{self.prefix}.b", lambda b: b[:, None, :])


# ----------------------------------------------------------------------------- image extractors


def _resnet18_small(in_ch: int, half: bool, out: int) -> nn.Module:
    """torchvision ResNet-18 with the LASER-VFL small-image stems.

    half=True (CIFAR-10): 3x3 stride-1 *padding-0* stem with 32 channels, widths 32-64-128-256.
    half=False (CIFAR-100): 3x3 stride-1 padding-1 stem with 64 channels, standard widths.
    Both: no max-pool; fc replaced by Linear(., out) with no activation after it.
    """
    from torchvision.models import resnet18
    from torchvision.models.resnet import BasicBlock

    m = resnet18()
    if half:
        m.inplanes = 32
        m.conv1 = nn.Conv2d(in_ch, 32, 3, 1, 0, bias=False)
        m.bn1 = nn.BatchNorm2d(32)
        m.layer1 = m._make_layer(BasicBlock, 32, 2)
        m.layer2 = m._make_layer(BasicBlock, 64, 2, stride=2)
        m.layer3 = m._make_layer(BasicBlock, 128, 2, stride=2)
        m.layer4 = m._make_layer(BasicBlock, 256, 2, stride=2)
        m.fc = nn.Linear(256, out)
    else:
        m.conv1 = nn.Conv2d(in_ch, 64, 3, 1, 1, bias=False)
        m.fc = nn.Linear(512, out)
    m.maxpool = nn.Identity()
    return m


def _cnn_small(in_ch: int, out: int) -> nn.Module:
    """A CPU-sized CNN stand-in for ResNet-18 (about 13k parameters for one input channel at out=64)."""
    return nn.Sequential(
        nn.Conv2d(in_ch, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2, ceil_mode=True),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(128, out),
    )


IMAGE_EXTRACTORS = {
    "resnet18-half": lambda c, out: _resnet18_small(c, True, out),
    "resnet18": lambda c, out: _resnet18_small(c, False, out),
    "cnn-small": _cnn_small,
}


class ModuleBank(nn.Module):
    """M image extractors; member m reads party ``party_of[m]``'s tile."""

    def __init__(
        self, arch: str, party_of: Sequence[int], member_ids: Sequence[int], in_ch: int, out: int, gen: torch.Generator
    ):
        super().__init__()
        if arch not in IMAGE_EXTRACTORS:
            raise VFLBenchError(f"Unknown image extractor '{arch}'. Choices: {', '.join(IMAGE_EXTRACTORS)}.")
        self.party_of = list(party_of)
        self.member_ids = list(member_ids)
        self.out = out
        mods = []
        for _ in self.party_of:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
                mods.append(IMAGE_EXTRACTORS[arch](in_ch, out))
        self.mods = nn.ModuleList(mods)

    def member_params(self) -> list[tuple[nn.Parameter, int]]:
        return [(p, mid) for mod, mid in zip(self.mods, self.member_ids, strict=True) for p in mod.parameters()]

    def forward(self, tiles: Sequence[torch.Tensor], need: torch.Tensor | None = None) -> torch.Tensor:
        """``tiles``: K tensors ``[B, C, h, w]``. ``need``: ``[M]`` bool (members to compute) or
        ``[M, B]`` bool (the samples each member may see). A member never reads a sample it does not
        need, so a missing block's pixels never enter its BatchNorm statistics; its outputs there are 0."""
        b = tiles[0].shape[0]
        outs = []
        for i, (mod, p) in enumerate(zip(self.mods, self.party_of, strict=True)):
            rows = None if need is None else need[i]
            if rows is not None and not bool(rows.any()):
                outs.append(tiles[0].new_zeros(b, self.out))
            elif rows is None or rows.ndim == 0 or bool(rows.all()):
                outs.append(mod(tiles[p]))
            else:
                out = tiles[0].new_zeros(b, self.out)
                out[rows] = mod(tiles[p][rows])
                outs.append(out)
        return torch.stack(outs)


@dataclass
class ModelSpec:
    """Which extractor to build: ``mlp`` with ``hidden`` sizes, or an image architecture."""

    arch: str  # "mlp" | "resnet18-half" | "resnet18" | "cnn-small"
    cut: int  # representation size
    hidden: tuple[int, ...] = ()
    head_hidden: int = 0  # fusion heads: 0 = one Linear; > 0 = Linear(in, head_hidden)-ReLU-Linear(head_hidden, C)

    def describe(self) -> dict:
        d = {"arch": self.arch, "cut": self.cut, "hidden": list(self.hidden)}
        if self.head_hidden:
            d["head_hidden"] = self.head_hidden
        return d


class Extractors:
    """Uniform front for MLP (tabular, stacked) and module (image) extractor banks."""

    def __init__(
        self,
        spec: ModelSpec,
        store: ParamStore,
        prefix: str,
        party_of: Sequence[int],
        member_ids: Sequence[int],
        widths: Sequence[int],
        in_ch: int,
        gen: torch.Generator,
        embedded: Embedded | None = None,
    ):
        self.spec = spec
        self.party_of = list(party_of)
        self.member_ids = list(member_ids)
        if spec.arch == "mlp":
            self.bank = MLPBank(store, prefix, party_of, member_ids, widths, spec.hidden, spec.cut, embedded)
            self.modules = None
        else:
            self.bank = None
            self.modules = ModuleBank(spec.arch, party_of, member_ids, in_ch, spec.cut, gen)

    def __call__(self, blocks, need: torch.Tensor | None = None) -> torch.Tensor:
        """-> ``[M, B, cut]``. ``blocks`` is ``[K, B, w]`` (tabular) or a list of K image tiles;
        ``need`` (``[M]`` or ``[M, B]`` bool) lets image extractors skip members or samples. MLP banks
        compute everything (no batch statistics; unneeded outputs are masked by the method)."""
        if self.bank is not None:
            return self.bank(blocks)
        return self.modules(blocks, need)

    def member_params(self) -> list[tuple[nn.Parameter, int]]:
        return self.modules.member_params() if self.modules is not None else []

    def train(self, mode: bool = True) -> None:
        if self.modules is not None:
            self.modules.train(mode)

    def to(self, device) -> None:
        if self.modules is not None:
            self.modules.to(device)
