"""The party-to-server boundary with a compressor on it (``--compress SPEC``, :mod:`.compressors`).

What goes up is the compressor's reconstruction; the gradient that comes back flows to the party's exact
representation (straight-through, as C-VFL trains: the server computes its loss on what it received, the party's
model takes the gradient at that point). With ``down=1`` the gradient that comes down is compressed by the same rule
(its own draws). The bytes counted are the payload's: the compressor's bits a message, per party, by phase.
"""

from __future__ import annotations

import torch

from ..privacy.channel import PHASES, Channel
from .compressors import CompressionSpec, make_compressor


def compression_generators(streams, device) -> dict[str, torch.Generator]:
    """One stream per phase (``compress``, ``compress/eval``, ``compress/monitor``) and one for the gradients
    (``compress/down``): evaluation never shifts training's draws."""
    gens = {}
    for name in (*PHASES, "down"):
        g = torch.Generator(device=device)
        g.manual_seed(streams.seed_for("compress" if name == "train" else f"compress/{name}"))
        gens[name] = g
    return gens


class CompressedChannel(Channel):
    """:class:`~vflbench.privacy.channel.Channel` whose crossings are compressed (per party, vectorised over
    parties)."""

    def __init__(self, n_parties: int, spec: CompressionSpec, gens: dict[str, torch.Generator]):
        super().__init__(n_parties)
        self.spec = spec
        self.compressor = make_compressor(spec, n_parties)
        self.down = bool(dict(spec.params).get("down", 0))
        self.down_compressor = make_compressor(spec, n_parties) if self.down else None
        self.gens = gens
        self._epoch = 0
        self._down_bits: list[tuple[torch.Tensor, torch.Tensor | None]] = []

    @property
    def epoch(self) -> int:
        return self._epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        if value != getattr(self, "_epoch", value):  # between epochs: a learned codebook takes its step
            self.compressor.end_epoch()
        self._epoch = value

    def up(self, reps: torch.Tensor, sent: torch.Tensor, party_of: torch.Tensor | None = None) -> torch.Tensor:
        if self.stale is not None and self.stale.replaying:
            return self.stale.replay(reps)
        self.calls += 1
        xhat, nbytes = self.compressor.roundtrip(reps, sent, self.gens[self.mode], train=self.mode == "train")
        down_b = 0.0 if self.down else float(reps.element_size())
        self._step.append((sent, party_of, 0.0, reps.shape[-1] * down_b))
        self.extra_up(nbytes, party_of)
        received = xhat.to(reps.dtype) + (reps - reps.detach())  # straight-through to the party's exact values
        if self.down and received.requires_grad and self.mode == "train":
            received = self._compressed_down(received, sent, party_of)
        return self.kept(self.watch(received, sent, party_of))

    def _compressed_down(self, received: torch.Tensor, sent: torch.Tensor, party_of) -> torch.Tensor:
        comp, gen = self.down_compressor, self.gens["down"]

        def down(g: torch.Tensor) -> torch.Tensor:
            ghat, nbytes = comp.roundtrip(g, sent, gen)
            # the gradients' payload, booked with the step (commit follows the backward)
            self._down_bits.append((nbytes.detach().to("cpu", torch.float64), party_of))
            return ghat.to(g.dtype)

        received.register_hook(down)
        return received

    def commit(self, phase: str, backward: bool) -> None:
        if self.down and backward and self._down_bits:
            for b, party_of in self._down_bits:
                per_party = torch.zeros(self.k, dtype=torch.float64)
                if party_of is None:
                    per_party[: len(b)] += b
                else:
                    per_party.index_add_(0, party_of.to("cpu"), b)
                self.totals[f"{phase}_down"] += per_party
        self._down_bits = []
        super().commit(phase, backward)

    def discard(self) -> None:
        self._down_bits = []
        super().discard()

    def summary(self):
        out = super().summary()
        out["compression"] = str(self.spec)
        return out
