"""Per-member masked SGD / Adam with PyTorch's exact update rules, and the cosine schedule.

The authors' code gives every predictor its own optimiser (Local, Combinatorial, Ensemble) and
skips models and parameters that a batch did not touch. Here all members share one optimiser
object, but each member has its own step count and moments and is updated only when ``active``;
the arithmetic is torch.optim.Adam / torch.optim.SGD's (coupled L2 weight decay, bias-corrected
Adam, heavy-ball momentum without dampening).
"""

from __future__ import annotations

import math

import torch

from .errors import VFLBenchError
from .models import ParamStore


class MaskedOptimizer:
    def __init__(self, store: ParamStore | None, module_params: list[tuple[torch.nn.Parameter, int]], n_members: int, *, name: str, lr: float, weight_decay: float = 0.0, momentum: float = 0.0, betas=(0.9, 0.999), eps: float = 1e-8):
        if name not in ("adam", "sgd"):
            raise VFLBenchError(f"Unknown optimizer '{name}'. Choices: adam, sgd.")
        if lr <= 0:
            raise VFLBenchError(f"Learning rate must be > 0, got {lr}.")
        self.name, self.lr, self.wd, self.momentum, self.betas, self.eps = name, lr, weight_decay, momentum, betas, eps
        self.entries: list[tuple[torch.Tensor, torch.Tensor | int]] = []
        if store is not None and store.flat is not None and store.n_params():
            self.entries.append((store.flat, store.member_of))
        self.entries += module_params
        self.n_members = n_members
        self.steps = torch.zeros(n_members)
        self.state: list[dict[str, torch.Tensor]] = [{} for _ in self.entries]

    def to(self, device) -> None:
        self.steps = self.steps.to(device)

    def zero_grad(self) -> None:
        for p, _ in self.entries:
            p.grad = None

    @torch.no_grad()
    def step(self, active: torch.Tensor) -> None:
        """``active``: bool ``[n_members]``, the members that took part in this batch."""
        active = active.to(self.steps.device)
        self.steps += active.float()
        b1, b2 = self.betas
        for (p, mem), st in zip(self.entries, self.state, strict=True):
            if isinstance(mem, int):
                if not bool(active[mem]) or p.grad is None:
                    continue
                a = None
                t = self.steps[mem]
            else:
                a = active[mem]
                t = self.steps[mem]
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            if self.wd:
                g = g.add(p, alpha=self.wd)
            if self.name == "sgd":
                if self.momentum:
                    buf = st.setdefault("buf", torch.zeros_like(p))
                    new = buf * self.momentum + g
                    buf.copy_(new if a is None else torch.where(a, new, buf))
                    g = buf
                upd = g * self.lr
            else:
                m = st.setdefault("m", torch.zeros_like(p))
                v = st.setdefault("v", torch.zeros_like(p))
                m_new = m * b1 + g * (1 - b1)
                v_new = v * b2 + g * g * (1 - b2)
                if a is None:
                    m.copy_(m_new)
                    v.copy_(v_new)
                else:
                    m.copy_(torch.where(a, m_new, m))
                    v.copy_(torch.where(a, v_new, v))
                tt = t.clamp_min(1)
                bc1 = 1 - b1**tt
                bc2 = 1 - b2**tt
                upd = (m / bc1) * self.lr / (v.sqrt() / bc2.sqrt() + self.eps)
            if a is None:
                p.sub_(upd)
            else:
                p.sub_(torch.where(a, upd, torch.zeros((), device=p.device)))


def cosine_lr(base_lr: float, epoch: int, t_max: int, eta_min_ratio: float) -> float:
    """CosineAnnealingLR's closed form, stepped per epoch: lr at the start of ``epoch`` (0-based)."""
    eta_min = base_lr * eta_min_ratio
    return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * epoch / t_max)) / 2
