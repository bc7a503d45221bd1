"""Local steps (``--local-steps Q``: FedBCD, Liu et al.; C-VFL, Castiglia et al.): a training schedule in which each
exchange at the party-to-server boundary is followed by Q - 1 updates that cross nothing. The trainer installs a
:class:`StaleExchange` on the method's channel (``channel.stale``); the channel hands it what crosses in a training
step (:meth:`StaleExchange.keep`: never an evaluation's crossings) and, while a local step replays, answers each
crossing with it (:meth:`StaleExchange.replay`). It keeps only what a replay needs: per crossing of the exchange
the values the server received and the gradient sent back for them, until the next exchange.
"""

from __future__ import annotations

import torch


class _Stale(torch.autograd.Function):
    """A local step's crossing: forward, the values the server received at the exchange; backward, the gradient the
    party received at the exchange, whatever the loss now says (a party learns nothing new between exchanges)."""

    @staticmethod
    def forward(ctx, fresh, received, grad):
        ctx.save_for_backward(grad)
        return received.clone()

    @staticmethod
    def backward(ctx, g):
        (grad,) = ctx.saved_tensors
        return grad, None, None


class StaleExchange:
    """Local steps after an exchange (``--local-steps Q``: FedBCD, Liu et al.; C-VFL, Castiglia et al.). At the
    exchange every crossing is kept: what the server received and, from the backward, the gradient sent back for it.
    In each of the Q - 1 local steps that follow on the same minibatch, the method's loss is computed again with its
    crossings replayed in order: the server's side computes on the received values (its own parameters current, the
    parties' representations stale), and each party back-propagates the gradient it received at the exchange through
    its own current model (the stale partial derivative; its Jacobian fresh). Nothing crosses, and nothing is
    counted. A party that sent no row for a sample (its block missing) gets no gradient for it, so a local step
    leaves its model as the exchange's zero gradient does."""

    def __init__(self) -> None:
        self.kept: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        self.replaying = False  # a local step's forward is under way
        self.local = False  # the step under way is a local one (its backward crosses nothing)
        self._at = 0

    def start_exchange(self) -> None:
        self.kept, self.replaying, self.local = [], False, False

    def keep(self, received: torch.Tensor) -> torch.Tensor:
        slot = len(self.kept)
        self.kept.append((received.detach().clone(), None))  # a copy: the party may update its values in place
        if received.requires_grad:

            def grab(g: torch.Tensor) -> torch.Tensor:
                self.kept[slot] = (self.kept[slot][0], g.detach())
                return g

            received.register_hook(grab)
        return received

    def start_replay(self) -> None:
        self.replaying, self.local, self._at = True, True, 0

    def replay(self, fresh: torch.Tensor) -> torch.Tensor:
        if self._at >= len(self.kept):
            raise RuntimeError("a local step crossed the boundary more often than its exchange")
        received, grad = self.kept[self._at]
        self._at += 1
        if grad is None or not fresh.requires_grad:
            return received
        if grad.shape != fresh.shape:  # a summed crossing ([B, D]): each sender's rows got the sum's gradient
            grad = grad.expand(fresh.shape) if grad.ndim == fresh.ndim else grad[None].expand(fresh.shape)
        return _Stale.apply(fresh, received, grad)

    def stop(self) -> None:
        self.replaying = False
