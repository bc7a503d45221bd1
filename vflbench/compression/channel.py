"""The party-to-server boundary with a compressor on it (``--compress SPEC``, :mod:`.compressors`).

What goes up is the compressor's reconstruction; the gradient that comes back flows to the party's exact
representation (straight-through, as C-VFL trains: the server computes its loss on what it received, the party's
model takes the gradient at that point). With ``down=1`` the gradient that comes down is compressed by the same rule
(its own draws), after any label defense changed it (``--label-defense``: the defended gradient is what is compressed
and sent, in one process as across processes). The bytes counted are the payload's: the compressor's bits a message,
per party, by phase.
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

    def begin_epoch(self, epoch: int) -> None:
        """The trainer starts epoch ``epoch``: when an epoch ended since the last one began, a learned codebook
        takes its step (vq's Lloyd step over the epoch's messages), an explicit call, not a side effect of the
        epoch's number changing."""
        if epoch != self.epoch:
            self.compressor.end_epoch()
            if self.down_compressor is not None:
                self.down_compressor.end_epoch()
        super().begin_epoch(epoch)

    def compressed(self, values: torch.Tensor, sent: torch.Tensor, party_of) -> tuple[torch.Tensor, object]:
        """``(received, down)``: what the server receives of ``values`` ``[M, B, D]`` (what the parties release), the
        compressor's reconstruction with the gradient passing straight through to ``values`` (the payload is
        booked); and, with ``down=1`` in training, the function that compresses the gradient going back down (else
        None). The channel's :meth:`~vflbench.privacy.channel.Channel.watch` applies it after the label defenses and
        before the taps: the label party defends its gradient, compresses it, and the party receives (and an attack
        observes) the compressed gradient; the bytes counted are that payload's. The processes runtime does the
        same: the server's gradient, defended, is what it compresses and sends."""
        xhat, nbytes = self.compressor.roundtrip(values, sent, self.cgens[self.mode], train=self.mode == "train")
        down_b = 0.0 if self.down else float(values.element_size())
        self._step.append((sent, party_of, 0.0, values.shape[-1] * down_b))
        self.book_bytes(nbytes, party_of=party_of)
        received = xhat.to(values.dtype) + (values - values.detach())
        down = None
        if self.down and received.requires_grad and self.mode == "train":
            down = self._compressed_down(sent, party_of)
        return received, down

    def _compressed_down(self, sent: torch.Tensor, party_of):
        comp, gen = self.down_compressor, self.cgens["down"]
        sent = sent.clone()  # the mask as it was when the rows went up (a method may reuse its tensor)

        def down(g: torch.Tensor) -> torch.Tensor:
            ghat, nbytes = comp.roundtrip(g, sent, gen)
            self.book_bytes(None, nbytes, party_of)  # the gradients' payload (the step is open: commit follows)
            out = torch.where(sent[..., None], ghat.to(g.dtype), torch.zeros_like(g))  # a row not sent gets none
            # in g's own memory layout: the mask may be a transposed view, and the layout picks the kernels (and the
            # order of their sums) that the party's backward runs
            return torch.empty_like(g).copy_(out)

        return down

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
        received, down = self.compressed(reps, sent, party_of)
        return self.kept(self.watch(received, sent, party_of, down=down))


class CompressedLDPChannel(Compressing, LDPChannel):
    """``--mechanism ldp`` with ``--compress``: noise first, then compression. Each party's noisy release is what
    is compressed, so what crosses is a function of the release alone (post-processing): the certified epsilon is
    the mechanism's, unchanged. Made from the run's LDP channel (its noise streams and accountant state)."""

    def __init__(self, base: LDPChannel, spec: CompressionSpec, gens: dict[str, torch.Generator]):
        self.__dict__.update(base.__dict__)
        self.setup_compression(spec, gens)

    def up(self, reps, sent, party_of=None):
        if self.stale is not None and self.stale.replaying:  # a replay releases nothing new
            return self.stale.replay(reps)
        self.calls += 1
        noisy = self.transform(reps, sent, party_of)  # the mechanism's release (charged to the accountant)
        received, down = self.compressed(noisy, sent, party_of)
        return self.kept(self.watch(received, sent, party_of, down=down))

    def aggregate(self, reps, sent, idx=None):
        self.note_release(idx, sent, reps.shape[-1], "sum")
        self.calls += 1
        received, down = self.compressed(self._noisy(reps), sent, None)
        return (self.watch(received, sent, down=down) * sent[..., None].to(reps.dtype)).sum(0)
