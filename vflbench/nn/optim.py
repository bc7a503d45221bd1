"""Per-member masked SGD / Adam with PyTorch's exact update rules, and the cosine schedule.

The authors' code gives every predictor its own optimiser (Local, Combinatorial, Ensemble) and
skips models and parameters that a batch did not touch. Here all members share one optimiser
object, but each member has its own step count and moments and is updated only when ``active``;
the arithmetic is torch.optim.Adam / torch.optim.SGD's (coupled L2 weight decay, bias-corrected
Adam, heavy-ball momentum without dampening).

``stale_updates`` reproduces PyTorch < 2.0, whose ``zero_grad()`` zeroed gradients instead of
dropping them: once a member has had a gradient, every later step of *its* optimiser (``group``)
updates it with a zero gradient when a batch did not use it (weight decay and stale Adam moments
still move it, and its step count advances).
"""

from __future__ import annotations

import math

import torch

from ..core.errors import VFLBenchError
from .bias import Layout, scalar_pow, scalar_tail, vector_pow
from .models import ParamStore

# From this many elements a flat tensor's Adam step computes its bias corrections per member (bias.py) and writes
# its update into a reused buffer; below it, the per-element computation costs less than that bookkeeping (a
# 10-epoch Credit run took 1.2-1.3x as long with it).
PER_MEMBER = 1 << 18
# Elements per block of a step whose members all share one step count: 256 Ki floats (1 MiB) per tensor, so the
# update's ten passes read a block from cache (51 against 81 ms a step over 49.1 M elements, two threads).
BLOCK = 1 << 18


class MaskedOptimizer:
    def __init__(
        self,
        store: ParamStore | None,
        module_params: list[tuple[torch.nn.Parameter, int]],
        n_members: int,
        *,
        name: str,
        lr: float,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        groups: list[int] | None = None,
        stale_updates: bool = False,
        trainable: torch.Tensor | None = None,
        pack: int | None = None,
    ):
        if name not in ("adam", "sgd"):
            raise VFLBenchError(f"Unknown optimizer '{name}'. Choices: adam, sgd.")
        if lr <= 0:
            raise VFLBenchError(f"Learning rate must be > 0, got {lr}.")
        self.name, self.lr, self.wd, self.momentum, self.betas, self.eps = name, lr, weight_decay, momentum, betas, eps
        self.entries: list[tuple[torch.Tensor, torch.Tensor | int]] = []
        self.store = store
        if store is not None and store.flat is not None and store.n_params():
            self.entries.append((store.flat, store.member_of))
        self.entries += module_params
        # The one placement rule: every index, mask and counter the optimiser keeps lives on the device of
        # the parameters it updates (whatever device its arguments come on); ``step`` moves ``active``
        # there on entry. A parameter on another device than the first is an error, not a silent copy.
        self.device = self.entries[0][0].device if self.entries else torch.device("cpu")
        for p, mem in self.entries:
            if p.device != self.device or (isinstance(mem, torch.Tensor) and mem.device != self.device):
                raise VFLBenchError(
                    f"internal: the optimiser's parameters live on {self.device} and {p.device}; a run's members "
                    "share one device"
                )
        dev = self.device
        self.n_members = n_members
        self.pack = (
            pack  # a pack of runs (vflbench.training.packing): parameters [pack, P], ``active`` [pack, n_members]
        )
        lead = () if pack is None else (pack,)
        self.steps = torch.zeros(*lead, n_members, device=dev)
        self.stale = bool(stale_updates)
        host_groups = [int(g) for g in groups] if groups is not None else [0] * n_members
        self.one_group = len(set(host_groups)) <= 1  # host-side bookkeeping, decided once
        self.groups = torch.as_tensor(host_groups, dtype=torch.long).to(dev)
        self.ever = torch.zeros(*lead, n_members, dtype=torch.bool, device=dev)  # members that have had a gradient
        self.trainable = None if trainable is None or bool(trainable.all()) else trainable.bool().to(dev)
        # The flat store's elements outside the trainable members never change: step only the span
        # that holds them (e.g. a fine-tuning stage leaves the pretraining heads' millions alone).
        self.spans: list[slice | None] = [None] * len(self.entries)
        if self.trainable is not None and pack is None:
            for i, (_, mem) in enumerate(self.entries):
                if isinstance(mem, torch.Tensor):
                    where = self.trainable[mem].nonzero().view(-1)
                    lo, hi = (int(where[0]), int(where[-1]) + 1) if len(where) else (0, 0)
                    if hi - lo < len(mem):
                        self.spans[i] = slice(lo, hi)
        self.state: list[dict[str, torch.Tensor]] = [{} for _ in self.entries]
        # Per flat entry: ``w``, a tensor like its parameters that an Adam step writes its update into (reused:
        # a fresh store-sized tensor every step costs more in page faults than its arithmetic), and ``layout``,
        # its member runs (bias.Layout). Carries nothing from one step to the next (a checkpoint skips it:
        # vflbench.federation.checkpoint.SKIP).
        self.scratch: dict[int, dict] = {}
        self._has_owned = any(isinstance(mem, int) for _, mem in self.entries)

    def placement(self) -> dict[str, torch.device]:
        """Where each index, mask and counter the optimiser keeps lives (all on :attr:`device`)."""
        out = {"steps": self.steps.device, "groups": self.groups.device, "ever": self.ever.device}
        if self.trainable is not None:
            out["trainable"] = self.trainable.device
        for i, (p, mem) in enumerate(self.entries):
            out[f"entry{i}"] = p.device
            if isinstance(mem, torch.Tensor):
                out[f"entry{i}.member_of"] = mem.device
        for i, st in enumerate(self.state):
            out.update({f"state{i}.{k}": v.device for k, v in st.items()})
        return out

    def effective(self, active: torch.Tensor) -> torch.Tensor:
        """The members this step updates: the active ones, restricted to the trainable ones, plus
        (with stale updates) every member that ever had a gradient in an optimiser group that steps."""
        if self.trainable is not None:
            active = active & self.trainable
        if not self.stale:
            return active
        self.ever |= active
        if self.pack is not None:  # the same rules, per run of the pack
            if self.one_group:
                return torch.where(active.any(-1, keepdim=True), self.ever, active)
            n_groups = int(self.groups.max()) + 1
            stepping = torch.zeros(self.pack, n_groups, dtype=torch.long, device=active.device)
            stepping.scatter_reduce_(1, self.groups.expand(self.pack, -1), active.long(), "amax")
            return active | (self.ever & stepping.bool()[:, self.groups])
        if self.one_group:  # one optimiser (LASER-VFL, PlugVFL): it steps whenever anything is active
            return self.ever.clone() if bool(active.any()) else active
        stepping = torch.zeros(int(self.groups.max()) + 1, dtype=torch.bool, device=active.device)
        stepping.index_fill_(0, self.groups[active], True)
        return active | (self.ever & stepping[self.groups])

    def zero_grad(self) -> None:
        if self.store is not None and self.store.flat is not None and self.store.flat.grad is not None:
            self.store.scratch = self.store.flat.grad  # the store writes its next gradient into it
        for p, _ in self.entries:
            p.grad = None

    @torch.no_grad()
    def step(self, active: torch.Tensor) -> None:
        """``active``: bool ``[n_members]`` (``[pack, n_members]``), the members that took part in this batch."""
        active = self.effective(active.to(self.device))
        all_active = self.pack is None and bool(active.all())  # a pack always takes the masked path
        self.steps += active.float()
        # Whole tensors owned by one member (a member's nn.Module, e.g. a party's ResNet) are stepped together,
        # member by member, with multi-tensor (``torch._foreach_*``) ops: the same elementwise arithmetic as one
        # tensor at a time, in a handful of kernel launches per member instead of ~15 per tensor, and with one
        # device-to-host copy of ``active`` per step instead of one per tensor.
        owned: dict[int, list[int]] = {}
        host = active.cpu() if self._has_owned else None
        for i, ((param, mem), st, span) in enumerate(zip(self.entries, self.state, self.spans, strict=True)):
            if isinstance(mem, int):
                if not bool(host[mem]):
                    continue
                if param.grad is None:
                    if not self.stale:
                        continue
                    param.grad = torch.zeros_like(param)  # a zeroed (not dropped) gradient, as PyTorch < 2.0
                owned.setdefault(mem, []).append(i)
                continue
            if param.grad is None:
                continue
            p, grad = param, param.grad
            whole = span is None and self.store is not None and mem is self.store.member_of
            if span is not None:
                if span.stop == span.start:
                    continue
                p, grad, mem = param.detach()[span], grad[span], mem[span]
            if self.name == "adam" and p.numel() >= PER_MEMBER and i not in self.scratch:
                runs = self.store.runs if whole else None  # the store's runs, unless a span cuts them
                self.scratch[i] = {"w": torch.empty_like(p), "layout": Layout(mem, runs)}
            self._step_flat(p, grad, mem, st, all_active, active, self.scratch.get(i))
        for mem, idx in owned.items():
            self._step_owned(mem, idx)

    def _step_flat(self, p, grad, mem, st, all_active: bool, active: torch.Tensor, scratch: dict | None) -> None:
        """One tensor shared by many members (the flat store): each element moves only if its member is active."""
        b1, b2 = self.betas
        a = None if all_active else active[..., mem].to(p.dtype)
        if self.name == "adam":  # step counts: per member (of every run of a pack) with a scratch, else per element
            t = st.get("t")
            if t is None:
                t = st["t"] = torch.zeros_like(self.steps if scratch is not None else p)
            t.add_(1.0 if a is None else active.to(t.dtype) if scratch is not None else a)
        w = None if scratch is None else scratch["w"]
        tail = None if w is None else scalar_tail(w)  # first: its probe (once per shape and thread count) writes w
        if w is not None and self.name == "adam":  # per member, on the vector path (bias.py)
            bc2_sqrt, scale = self._bias_corrections(t, vector_pow)
        if w is not None and a is None and self.name == "adam" and "m" in st:
            one = scratch["layout"].uniform(bc2_sqrt, scale)
            if one is not None:  # every member active, one step count: the whole update block by block
                fix = None if tail is None else lambda at: self._fix_tail(w, st["m"], st["v"], t, mem, at)
                self._adam_blocks(p, grad, st["m"], st["v"], w, *one, tail, fix)
                return
        g = grad if not self.wd else torch.add(grad, p, alpha=self.wd, out=w)  # w: free until the update
        if self.name == "sgd":
            if self.momentum:
                buf = st.get("buf")
                if buf is None:
                    buf = st["buf"] = torch.zeros_like(p)
                if a is None:
                    buf.mul_(self.momentum).add_(g)
                else:  # inactive members keep their buffer
                    buf.add_((buf * (self.momentum - 1.0) + g) * a)
                g = buf
            p.add_(g if a is None else g * a, alpha=-self.lr)
            return
        m = st.get("m")
        if m is None:
            m = st["m"] = torch.zeros_like(p)
            st["v"] = torch.zeros_like(p)
        v = st["v"]
        if a is None:
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
        else:
            m.lerp_(g, (1 - b1) * a)
            v.lerp_(g * g, (1 - b2) * a)
        if scratch is None:  # a small tensor: per element, as torch.optim.Adam computes them
            bc2_sqrt, scale = self._bias_corrections(t)
            step = m / (v.sqrt() / bc2_sqrt).add_(self.eps) * scale
            p.sub_(step if a is None else step * a)
            return
        # Adam's bias corrections, one value per member (vectorised pow, as the per-element kernel computes
        # nearly all of them), spread over the elements by the store's layout; then the few elements that a
        # per-element pow would have computed on its scalar tail get the scalar value (see bias.py).
        layout = scratch["layout"]
        torch.sqrt(v, out=w)  # g (when it lives in w) is not read again
        layout.div_(w, bc2_sqrt)
        w.add_(self.eps)
        torch.div(m, w, out=w)
        layout.mul_(w, scale)
        if tail is not None:
            self._fix_tail(w, m, v, t, mem, tail)
        p.sub_(w if a is None else w.mul_(a))

    def _adam_blocks(self, p, grad, m, v, w, bc2_sqrt: float, scale: float, tail, fix) -> None:
        """The step of a flat tensor whose members all step with one count: the same operations as the
        whole-tensor step, on blocks of :data:`BLOCK` elements that stay in cache between operations (every one
        of them rounds the same on torch's vector and scalar paths, unlike ``pow``: tests/test_bias.py); ``fix``
        recomputes the update at the ``tail`` positions of a block before the block moves."""
        b1, b2 = self.betas
        blocks: dict[int, list[int]] = {}  # block -> its tail positions
        for pos in [] if tail is None else tail.tolist():
            blocks.setdefault(pos // BLOCK, []).append(pos)
        for i in range(0, p.numel(), BLOCK):
            at = slice(i, i + BLOCK)
            pb, mb, vb, wb = p[at], m[at], v[at], w[at]
            g = grad[at] if not self.wd else torch.add(grad[at], pb, alpha=self.wd, out=wb)
            mb.lerp_(g, 1 - b1)
            vb.mul_(b2).addcmul_(g, g, value=1 - b2)
            torch.sqrt(vb, out=wb)
            wb.div_(bc2_sqrt).add_(self.eps)
            torch.div(mb, wb, out=wb)
            wb.mul_(scale)
            if i // BLOCK in blocks:
                fix(torch.tensor(blocks[i // BLOCK], device=p.device))
            pb.sub_(wb)

    def _fix_tail(self, w, m, v, t, mem, tail: torch.Tensor) -> None:
        """The update of the elements at ``tail`` (flat positions) with scalar-path bias corrections."""
        n = mem.numel()
        member = mem.view(-1)[tail % n]
        tt = t[member] if t.ndim == 1 else t[tail // n, member]
        bc2_sqrt, scale = self._bias_corrections(tt, scalar_pow)
        wf, mf, vf = w.view(-1), m.view(-1), v.view(-1)
        wf[tail] = mf[tail] / ((vf[tail].sqrt() / bc2_sqrt).add_(self.eps)) * scale

    def _step_owned(self, mem: int, idx: list[int]) -> None:
        """The tensors ``idx`` of one active member: torch.optim's update for each, as multi-tensor ops."""
        b1, b2 = self.betas
        ps = [self.entries[i][0] for i in idx]
        sts = [self.state[i] for i in idx]
        gs = [p.grad for p in ps]
        if self.wd:
            gs = torch._foreach_add(gs, ps, alpha=self.wd)
        if self.name == "sgd":
            if self.momentum:
                for st, p in zip(sts, ps, strict=True):
                    if "buf" not in st:
                        st["buf"] = torch.zeros_like(p)
                bufs = [st["buf"] for st in sts]
                torch._foreach_mul_(bufs, self.momentum)
                torch._foreach_add_(bufs, gs)
                gs = bufs
            torch._foreach_add_(ps, gs, alpha=-self.lr)
            return
        for st, p in zip(sts, ps, strict=True):
            if "m" not in st:
                st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
        ms, vs = [st["m"] for st in sts], [st["v"] for st in sts]
        torch._foreach_lerp_(ms, gs, 1 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, gs, gs, value=1 - b2)
        bc2_sqrt, scale = self._bias_corrections(self.steps[mem])  # the member's step count: one for all its tensors
        denom = torch._foreach_sqrt(vs)
        torch._foreach_div_(denom, bc2_sqrt)
        torch._foreach_add_(denom, self.eps)
        update = torch._foreach_div(ms, denom)
        torch._foreach_mul_(update, scale)
        torch._foreach_sub_(ps, update)

    def _bias_corrections(self, t: torch.Tensor, pow=torch.pow) -> tuple[torch.Tensor, torch.Tensor]:
        """Adam's ``sqrt(1 - b2^t)`` and ``lr / (1 - b1^t)`` for step counts ``t`` (torch.optim.Adam's arithmetic)."""
        b1, b2 = self.betas
        tt = t.clamp_min(1.0)
        bc1 = 1 - pow(b1, tt)
        return (1 - pow(b2, tt)).sqrt_(), self.lr / bc1


def cosine_lr(base_lr: float, epoch: int, t_max: int, eta_min_ratio: float) -> float:
    """CosineAnnealingLR's closed form, stepped per epoch: lr at the start of ``epoch`` (0-based)."""
    eta_min = base_lr * eta_min_ratio
    return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * epoch / t_max)) / 2
