"""The party-to-server boundary with a compressor on it (``--compress SPEC``, :mod:`.compressors`).

What goes up is the compressor's reconstruction; the gradient that comes back flows to the party's exact
representation (straight-through, as C-VFL trains: the server computes its loss on what it received, the party's
model takes the gradient at that point). With ``down=1`` the gradient that comes down is compressed by the same rule
(its own draws). The bytes counted are the payload's: the compressor's bits a message, per party, by phase.
"""

from __future__ import annotations

import torch

from ..privacy.channel import PHASES, Channel
from ..privacy.mechanisms import LDPChannel
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


class Compressing:
    """What a compressing channel adds to its base (:class:`~vflbench.privacy.channel.Channel`, or a mechanism's
    channel): :meth:`compressed` turns what a party releases into what the server receives, and books the payload."""

    def setup_compression(self, spec: CompressionSpec, gens: dict[str, torch.Generator]) -> None:
        self.cspec = spec
        self.compressor = make_compressor(spec, self.k)
        self.down = bool(dict(spec.params).get("down", 0))
        self.down_compressor = make_compressor(spec, self.k) if self.down else None
        self.cgens = gens

    @property
    def epoch(self) -> int:
        return self._epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        if hasattr(self, "compressor") and value != getattr(self, "_epoch", value):  # a learned codebook's step
            self.compressor.end_epoch()
            if self.down_compressor is not None:
                self.down_compressor.end_epoch()
        self._epoch = value

    def compressed(self, values: torch.Tensor, sent: torch.Tensor, party_of) -> torch.Tensor:
        """What the server receives of ``values`` ``[M, B, D]`` (what the parties release): the compressor's
        reconstruction, with the gradient passing straight through to ``values``; the payload is booked."""
        xhat, nbytes = self.compressor.roundtrip(values, sent, self.cgens[self.mode], train=self.mode == "train")
        down_b = 0.0 if self.down else float(values.element_size())
        self._step.append((sent, party_of, 0.0, values.shape[-1] * down_b))
        self.book_bytes(nbytes, party_of=party_of)
        received = xhat.to(values.dtype) + (values - values.detach())
        if self.down and received.requires_grad and self.mode == "train":
            received = self._compressed_down(received, sent, party_of)
        return received

    def _compressed_down(self, received: torch.Tensor, sent: torch.Tensor, party_of) -> torch.Tensor:
        comp, gen = self.down_compressor, self.cgens["down"]
        sent = sent.clone()  # the mask as it was when the rows went up (a method may reuse its tensor)

        def down(g: torch.Tensor) -> torch.Tensor:
            ghat, nbytes = comp.roundtrip(g, sent, gen)
            self.book_bytes(None, nbytes, party_of)  # the gradients' payload (the step is open: commit follows)
            out = torch.where(sent[..., None], ghat.to(g.dtype), torch.zeros_like(g))  # a row not sent gets none
            # in g's own memory layout: the mask may be a transposed view, and the layout picks the kernels (and the
            # order of their sums) that the party's backward runs
            return torch.empty_like(g).copy_(out)

        received.register_hook(down)
        return received

    def summary(self):
        out = super().summary()
        out["compression"] = str(self.cspec)
        return out


class CompressedChannel(Compressing, Channel):
    """:class:`~vflbench.privacy.channel.Channel` whose crossings are compressed (per party, vectorised over
    parties)."""

    def __init__(self, n_parties: int, spec: CompressionSpec, gens: dict[str, torch.Generator]):
        super().__init__(n_parties)
        self.setup_compression(spec, gens)

    @property
    def spec(self) -> CompressionSpec:
        return self.cspec

    @property
    def gens(self) -> dict[str, torch.Generator]:
        return self.cgens

    def up(self, reps: torch.Tensor, sent: torch.Tensor, party_of: torch.Tensor | None = None) -> torch.Tensor:
        if self.stale is not None and self.stale.replaying:
            return self.stale.replay(reps)
        self.calls += 1
        return self.kept(self.watch(self.compressed(reps, sent, party_of), sent, party_of))


class CompressedLDPChannel(Compressing, LDPChannel):
    """``--mechanism ldp`` with ``--compress``: noise first, then compression. Each party's noisy release is what
    is compressed, so what crosses is a function of the release alone (post-processing): the certified epsilon is
    the mechanism's, unchanged. Made from the run's LDP channel (its noise streams and accountant state)."""

    def __init__(self, base: LDPChannel, spec: CompressionSpec, gens: dict[str, torch.Generator]):
        self.__dict__.update(base.__dict__)
        self._epoch = base.epoch
        self.setup_compression(spec, gens)

    def up(self, reps, sent, party_of=None):
        if self.stale is not None and self.stale.replaying:  # a replay releases nothing new
            return self.stale.replay(reps)
        self.calls += 1
        noisy = self.transform(reps, sent, party_of)  # the mechanism's release (charged to the accountant)
        return self.kept(self.watch(self.compressed(noisy, sent, party_of), sent, party_of))

    def aggregate(self, reps, sent, idx=None):
        self.note_release(idx, sent, reps.shape[-1], "sum")
        self.calls += 1
        received = self.compressed(self._noisy(reps), sent, None)
        return (self.watch(received, sent) * sent[..., None].to(reps.dtype)).sum(0)
