"""The run's channel on the wire (:class:`WireChannel`): what a method sends through ``Method.send`` crosses
between processes, each party's sent rows up and their gradients down after the server's backward, with the boundary
on the wire; PBM-VFL's summed release with real SecAgg keys and each party's own noise (:class:`WirePBMChannel`), and
compressed messages (:class:`WireCompressedChannel`). The links they cross are :mod:`vflbench.federation.wire`."""

from __future__ import annotations

import os
import secrets

import torch

from ..compression.channel import CompressedChannel
from ..compression.compressors import payload_bytes
from ..core.errors import VFLBenchError
from ..core.role import SERVER
from ..methods.base import Method
from ..privacy.channel import Channel
from ..privacy.mechanisms import PBMChannel
from ..privacy.secagg import KeyedMasking, agree_pair_keys
from ..runs.faults import PartyLost
from .rejoin import at_epoch_boundary
from .wire import Wire, WireMessages, lost_code, lost_parties


class WireChannel(Channel):
    """The run's channel with the boundary on the wire: counts as :class:`Channel` does (the accounted
    traffic), and moves the sent rows between the processes (the measured traffic)."""

    def message_link(self):
        return WireMessages(self.wire)

    def __init__(self, n_parties: int, wire: Wire):
        self.wire = wire
        super().__init__(n_parties)
        self.crossings: list[
            tuple[torch.Tensor, torch.Tensor, torch.Tensor]
        ] = []  # this step's (values, sent, party_of)

    @property
    def is_server(self) -> bool:
        return self.wire.rank == SERVER

    @property
    def mode(self) -> str:
        return self.wire.phase

    @mode.setter
    def mode(self, value: str) -> None:  # the wire knows the phase: a party lost outside training stops the run
        self.wire.phase = value

    def transform(self, reps: torch.Tensor, sent: torch.Tensor, party_of: torch.Tensor | None) -> torch.Tensor:
        if reps.ndim != 3:
            raise VFLBenchError(
                f"the processes runtime moves [senders, batch, width] tensors; this method sent {tuple(reps.shape)}"
            )
        owner = (torch.arange(reps.shape[0]) if party_of is None else party_of.cpu()).tolist()
        rows = sent.cpu()
        phase = self.mode
        grad = torch.is_grad_enabled() and phase == "train"
        if self.is_server:
            got = torch.zeros(reps.shape, dtype=reps.dtype)
            for m, k in enumerate(owner):
                n = int(rows[m].sum())
                if n:
                    got[m][rows[m]] = self.wire.recv((n, reps.shape[2]), reps.dtype, k + 1, (f"{phase}_up", k))
            got = got.to(reps.device)
            if grad:
                got.requires_grad_(True)
                self.crossings.append((got, rows, owner))
            return got
        me = self.wire.rank - 1
        for m, k in enumerate(owner):
            if k == me and bool(rows[m].any()):
                self.wire.post(reps[m][rows[m].to(reps.device)], SERVER, (f"{phase}_up", k))
        self.wire.flush()  # this party's rows of the crossing, as one transfer
        if grad and reps.requires_grad:
            self.crossings.append((reps, rows, owner))
            self._slot()
        return reps.detach()  # what the rest of this party's copy computes is never used

    def _slot(self) -> None:
        """Local steps: which kept crossing (StaleExchange) a party's crossing is, for the gradient it will receive."""
        if not hasattr(self, "slots"):
            self.slots = []
        self.slots.append(len(self.stale.kept) if self.stale is not None else -1)

    def transform_exact(self, reps: torch.Tensor, sent: torch.Tensor) -> torch.Tensor:
        return WireChannel.transform(self, reps, sent, None)

    @property
    def epoch(self) -> int:
        return self.wire.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.wire.epoch = value
        if (
            self.wire.die_at_epoch is not None and value >= self.wire.die_at_epoch
        ):  # fault-injection test hook (see join)
            os._exit(9)

    # -- the step, around the trainer's forward and backward
    def step_loss(self, method, batch, stage):
        """A method whose parties train alone (``party_losses``): party k keeps its own term to
        back-propagate and sends its value to the server (a control message), which sums the K terms
        as the method does in one process. Any other method: its loss, from what crossed."""
        self.local_term = None
        if type(method).party_losses is Method.party_losses:
            return method.loss(batch, stage)
        terms, active = method.party_losses(batch, stage)
        if self.is_server:  # (a lost party's term: zero, as its term with its block missing for every sample)
            got = [self.wire.recv((1,), terms.dtype, r, None) for r in range(1, self.wire.world)]
            return torch.cat(got).to(terms.device).sum(), active
        me = self.wire.rank - 1
        self.wire.send(terms[me].detach().reshape(1), SERVER, None)  # (nothing in a scheduled outage)
        self.local_term = terms[me]
        return terms.detach().sum(), active  # replaced by the server's value (agree)

    def report(self, method, prediction):
        """Methods whose parties predict alone (``local_only``, e.g. Local: predictor k is party k):
        each party reports its own row of predictions to the server, which scores them (control
        messages: evaluation, not the method's traffic)."""
        if not method.local_only:
            return prediction
        if self.is_server:
            preds, valid = prediction.preds.clone(), prediction.valid.clone()
            scores = None if prediction.scores is None else prediction.scores.clone()
            b = preds.shape[1]
            for k in range(self.k):  # a lost party's row: zeros, not valid (as its row with its block missing)
                preds[k] = self.wire.recv((b,), torch.int64, k + 1, None).to(preds.device)
                valid[k] = self.wire.recv((b,), torch.uint8, k + 1, None).bool().to(valid.device)
                if scores is not None:
                    scores[k] = self.wire.recv((b,), scores.dtype, k + 1, None).to(scores.device)
            return type(prediction)(preds, valid, scores, prediction.counted)
        me = self.wire.rank - 1
        self.wire.post(prediction.preds[me].to(torch.int64), SERVER, None)
        self.wire.post(prediction.valid[me].to(torch.uint8), SERVER, None)
        if prediction.scores is not None:
            self.wire.post(prediction.scores[me], SERVER, None)
        self.wire.flush()
        return prediction

    def agree(self, value: float | None, n_active: int) -> float | None:
        """The server's loss for this step, known to every process (a control message per party)."""
        wire = self.wire
        if self.is_server:
            found = dict(wire.found)
            flag = lost_code(found) if found else 0.0 if value is None else 1.0
            msg = torch.tensor([float("nan") if value is None else value, flag, float(n_active)], dtype=torch.float64)
            for r in range(1, wire.world):
                wire.post(
                    msg, r, None
                )  # goes down with the gradients (or before the next message the server waits for)
            if found:  # a party stopped during this step: every process drops the step and redoes it without it
                wire.flush()
                wire.found = {}
                raise PartyLost(sorted(found), "; ".join(sorted(set(found.values()))))
            return value
        if wire.silent:  # this party's scheduled outage: the step goes on without it
            return value
        msg = wire.recv((3,), torch.float64, SERVER, None)
        if float(msg[1]) < 0:
            self.crossings, self.local_term = [], None
            raise PartyLost(lost_parties(float(msg[1])), "found lost by the server")
        if int(msg[2]) != n_active:
            raise VFLBenchError(
                f"party {self.wire.rank - 1} and the server disagree on the members this step trains ({n_active} vs "
                f"{int(msg[2])}): "
                "the processes do not run the same program (different flags or versions?)"
            )
        if not bool(msg[1]):
            self.crossings, self.local_term = [], None
        return float(msg[0]) if bool(msg[1]) else None

    # -- a restarted party rejoins (vflbench.federation.rejoin)
    draws_noise = False  # a boundary that draws noise (WirePBMChannel) cannot be rejoined exactly

    def epoch_boundary(self, boundary) -> None:
        """Server: note the boundary and re-admit restarted parties that ask. Party: checkpoint its state, then
        learn from the server which parties come back (:func:`vflbench.federation.rejoin.at_epoch_boundary`)."""
        at_epoch_boundary(self, boundary)

    def resume(self):
        return self.wire.resuming

    def agree_order(self, order: torch.Tensor, derived: bool = False) -> torch.Tensor:
        """The server (the label holder) gives every party the epoch's sample order (a control message). A
        class-balanced sampler reads labels the parties do not hold: the order itself crosses, as int32 indices
        while the samples fit. A shuffle or index order reads none (``derived``): every process draws it from its
        replica of the run's streams, so only an 8-byte fingerprint crosses, and a party whose own draw differs
        stops the run (the processes do not run the same program)."""
        if derived:
            return self._agree_fingerprint(order)
        wide = order.numel() and int(order.max()) >= 2**31
        dtype = torch.int64 if wide else torch.int32
        if self.is_server:
            for r in range(1, self.wire.world):
                self.wire.post(order.to(dtype), r, None, force=self.wire.resting(r - 1))
            self.wire.flush()
            return order
        return self.wire.recv(tuple(order.shape), dtype, SERVER, None).to(order.device, order.dtype)

    def _agree_fingerprint(self, order: torch.Tensor) -> torch.Tensor:
        import hashlib

        digest = hashlib.blake2b(order.detach().cpu().to(torch.int64).numpy().tobytes(), digest_size=8).digest()
        mine = torch.tensor([int.from_bytes(digest, "little", signed=True)], dtype=torch.int64)
        if self.is_server:
            for r in range(1, self.wire.world):
                self.wire.post(mine, r, None, force=self.wire.resting(r - 1))
            self.wire.flush()
            return order
        theirs = self.wire.recv((1,), torch.int64, SERVER, None)
        if int(theirs) != int(mine):
            raise VFLBenchError(
                f"party {self.wire.rank - 1} drew another epoch order than the server (epoch {self.wire.epoch + 1}): "
                "the processes do not run the same program (different flags, seeds or versions?)"
            )
        return order

    def backward(self, loss: torch.Tensor) -> None:
        """Server: back-propagate the loss and send each sent row's gradient to its party. Party:
        receive the gradients of the rows it sent and back-propagate them through its own models."""
        crossings, self.crossings = self.crossings, []
        slots, self.slots = getattr(self, "slots", []), []
        local, self.local_term = getattr(self, "local_term", None), None
        if self.stale is not None and self.stale.local:  # a local step: each side on its own, nothing crosses
            if loss.requires_grad:
                loss.backward()
            return
        if self.is_server:
            if loss.requires_grad:  # (a sum of the parties' own terms has no graph here: they train at home)
                loss.backward()
            for got, rows, owner in crossings:
                g = got.grad if got.grad is not None else torch.zeros_like(got)
                self.send_gradients(g.detach().cpu(), rows, owner)
            self.wire.flush()  # the step's control message and gradients, to every party at once
            return
        me = self.wire.rank - 1
        outs, grads = [], []
        for reps, rows, owner in crossings:
            g = self.receive_gradients(reps, rows, owner, me)
            outs.append(reps)
            grads.append(g.to(reps.device))
            slot = slots[len(outs) - 1] if len(slots) >= len(outs) else -1
            if slot >= 0:  # local steps will replay this gradient (StaleExchange)
                self.stale.kept[slot] = (self.stale.kept[slot][0], grads[-1])
            for tap in self.taps:  # what this party received, as it received it (its label attacks observe it)
                party_of = None if owner == list(range(len(owner))) else torch.tensor(owner)
                tap.on_down(g, rows, party_of, self.batch_idx, False)
        if outs:
            torch.autograd.backward(outs, grads)
        if local is not None:  # this party's own loss term (a method whose parties train alone)
            local.backward()

    def send_gradients(self, g: torch.Tensor, rows: torch.Tensor, owner: list[int]) -> None:
        """Server: each party's rows of a crossing's gradient ``g`` (``[M, B, D]``, or ``[B, D]`` for a summed
        crossing, whose gradient every party gets), posted to it."""
        for m, k in enumerate(owner):
            if bool(rows[m].any()):
                self.wire.post((g if g.ndim == 2 else g[m])[rows[m]], k + 1, ("train_down", k))

    def receive_gradients(self, reps: torch.Tensor, rows: torch.Tensor, owner: list[int], me: int) -> torch.Tensor:
        """Party ``me``: the gradient of a crossing it sent, ``[M, B, D]`` (zero where it sent nothing)."""
        g = torch.zeros(reps.shape, dtype=reps.dtype)
        for m, k in enumerate(owner):
            n = int(rows[m].sum())
            if k == me and n:
                g[m][rows[m]] = self.wire.recv((n, reps.shape[2]), reps.dtype, SERVER, ("train_down", k))
        return g

    def discard(self) -> None:
        super().discard()
        self.crossings, self.local_term = [], None


# ----------------------------------------------------------------------------- PBM across processes
def _trace(name: str, values: torch.Tensor, rows: torch.Tensor, noise_source: str = "seeded") -> None:
    """Test hook: with $VFLBENCH_TRACE_DIR set, the first training release's values are saved there
    (a party's plain counts, what the server received), so that a test can inspect both sides. It is
    refused under secret noise: a file of a party's plain counts is exactly what secret noise protects."""
    where = os.environ.get("VFLBENCH_TRACE_DIR")
    if where and noise_source == "secret":
        raise VFLBenchError(
            "VFLBENCH_TRACE_DIR (a test hook) writes a party's plain counts to disk; it is refused with secret noise. "
            "Unset it, or use --noise-source seeded."
        )
    if where and "_release0_train" in name:
        torch.save({"values": values.cpu(), "sent": rows.cpu()}, os.path.join(where, name + ".pt"))


def uint_dtype(bits: int) -> torch.dtype:
    """The smallest integer dtype that carries ``bits``-bit values on the wire."""
    return torch.uint8 if bits <= 8 else torch.int16 if bits <= 15 else torch.int32 if bits <= 31 else torch.int64


class WirePBMChannel(WireChannel, PBMChannel):
    """PBM-VFL's summed release across processes: each party quantises its own values with its own
    noise stream, masks them with keys only it and each peer hold (secagg=masked), and sends integers
    in Z_R; the server sums them and unbiases the sum. The gradient of the sum goes back to every
    party for the rows it sent (:meth:`WireChannel.backward`). Made from the run's
    :class:`~vflbench.privacy.mechanisms.PBMChannel` by :func:`wire_pbm_channel`."""

    draws_noise = True  # each party's own noise: its streams and release count are not checkpointed

    def aggregate(self, reps, sent, idx=None):
        self.count(reps, sent)
        self.note_release(idx, sent, reps.shape[-1], "sum")
        t, self.released = self.released, self.released + 1
        phase, rows, wire = self.mode, sent.cpu(), self.wire
        dtype = uint_dtype(self.bits)
        grad = torch.is_grad_enabled() and phase == "train"
        everyone = list(range(self.k))
        if self.is_server:
            uploads = torch.zeros((self.k, *reps.shape[1:]), dtype=torch.int64)
            for kk in everyone:
                m = int(rows[kk].sum())
                if m:
                    uploads[kk][rows[kk]] = wire.recv((m, reps.shape[2]), dtype, kk + 1, (f"{phase}_up", kk)).to(
                        torch.int64
                    )
            self.last_upload = uploads  # what the server received (masked under secagg), for tests
            _trace(f"server_release{t}_{phase}", uploads, rows, self.noise_source)
            total = uploads.sum(0)
            qsum = (torch.remainder(total, self.R) if self.masked else total).to(reps.dtype).to(reps.device)
            est = self.C / (self.beta * self.b) * (qsum - self.b * sent.sum(0).to(reps.dtype)[:, None] / 2)
            if not grad:
                return est
            exact = torch.zeros(reps.shape[1:], dtype=reps.dtype, device=reps.device, requires_grad=True)
            self.crossings.append((exact, rows, everyone))  # a summed crossing: one gradient [B, P] for every party
            return self.watch(est + (exact - exact.detach()), sent, None, summed=True)
        me = wire.rank - 1
        q = self.quantise(reps, rows=(me,))[me] * sent[me][:, None].to(reps.dtype)
        _trace(f"party{me}_release{t}_{phase}", q.to(torch.int64), rows, self.noise_source)
        if self.masking is not None:
            q = self.masking.upload(q, rows, t)
        if bool(rows[me].any()):
            wire.send(q[rows[me].to(q.device)].to(dtype), SERVER, (f"{phase}_up", me))
        if grad:
            self.crossings.append((reps, rows, everyone))
        return torch.zeros(
            reps.shape[1:], dtype=reps.dtype, device=reps.device
        )  # this party's copy never learns the sum

    def up(self, reps, sent, party_of=None):
        raise VFLBenchError(
            "across processes, PBM runs as a summed release (--method sum or pbm); per-party releases are not built yet"
        )


# ----------------------------------------------------------------------------- compression across processes
class WireCompressedChannel(WireChannel):
    """``--compress`` across processes: each party compresses its own rows with the run's compressor and its draws
    (the same streams as in one process), and sends the payload as the compressor packs it (codes as packed bits,
    ranges and values as float32, a codebook when it goes); the server decodes. What crosses the wire is the
    payload, byte for byte what one process counts, and the server gets the numbers one process gets. Gradients go
    down as float32 rows, or with ``down=1`` as the server's compressed payload of its gradient (after any label
    defense changed it, as in one process). Made from the run's
    :class:`~vflbench.compression.channel.CompressedChannel`."""

    draws_noise = True  # each party's draws and codebook are not checkpointed: a restarted party cannot rejoin exactly

    def __init__(self, base: CompressedChannel, wire: Wire):
        self.compressor, self.gens, self.spec = base.compressor, base.gens, base.spec
        self.down, self.down_compressor = base.down, base.down_compressor
        super().__init__(base.k, wire)

    def begin_epoch(self, epoch: int) -> None:
        if epoch != self.wire.epoch:  # an epoch ends: both sides, a codebook moves (party) and goes again
            self.compressor.end_epoch()
            if self.down_compressor is not None:
                self.down_compressor.end_epoch()
        super().begin_epoch(epoch)

    def up(self, reps, sent, party_of=None):
        if self.stale is not None and self.stale.replaying:
            return self.stale.replay(reps)
        if reps.ndim != 3:
            raise VFLBenchError(
                f"the processes runtime moves [senders, batch, width] tensors; this method sent {tuple(reps.shape)}"
            )
        self.calls += 1
        phase, rows, d = self.mode, sent.cpu(), reps.shape[2]
        owner = (torch.arange(reps.shape[0]) if party_of is None else party_of.cpu()).tolist()
        grad = torch.is_grad_enabled() and phase == "train"
        comp = self.compressor
        expected = [comp.expects(m, int(rows[m].sum()), d) for m in range(len(owner))]  # before after_message
        nbytes = payload_bytes(expected, rows)
        if self.down and grad:  # the gradients' payload, as the down compressor will pack it
            down = [self.down_compressor.expects(m, int(rows[m].sum()), d) for m in range(len(owner))]
            self.book_bytes(None, payload_bytes(down, rows), party_of)
        else:
            self._step.append((sent, party_of, 0.0, d * float(reps.element_size())))  # gradients: float32 rows
        self.book_bytes(nbytes, party_of=party_of)
        if self.is_server:
            got = torch.zeros(reps.shape, dtype=reps.dtype)
            for m, k in enumerate(owner):
                n = int(rows[m].sum())
                if n:
                    parts = [self.wire.recv(shape, dt, k + 1, (f"{phase}_up", k)) for shape, dt in expected[m]]
                    got[m][rows[m]] = comp.decode(parts, m, n, d).to(reps.dtype)
            comp.after_message(rows)
            got = got.to(reps.device)
            if grad:
                got.requires_grad_(True)
                self.crossings.append((got, rows, owner))
            return self.kept(self.watch(got, sent, party_of))
        st = comp.prepare(reps, sent, self.gens[phase], train=phase == "train")
        me = self.wire.rank - 1
        for m, k in enumerate(owner):
            if k == me and bool(rows[m].any()):
                for t in comp.encode(st, m):
                    self.wire.post(t.cpu(), SERVER, (f"{phase}_up", k))
        self.wire.flush()
        comp.after_message(rows)
        if grad and reps.requires_grad:
            self.crossings.append((reps, rows, owner))
            self._slot()
        return self.kept(reps.detach())

    def send_gradients(self, g, rows, owner):
        if not self.down:
            return super().send_gradients(g, rows, owner)
        st = self.down_compressor.prepare(g, rows, self.gens["down"], train=True)  # the in-process hook's draws
        for m, k in enumerate(owner):
            if bool(rows[m].any()):
                for t in self.down_compressor.encode(st, m):
                    self.wire.post(t.cpu(), k + 1, ("train_down", k))
        self.down_compressor.after_message(rows)

    def receive_gradients(self, reps, rows, owner, me):
        if not self.down:
            return super().receive_gradients(reps, rows, owner, me)
        g = torch.zeros(reps.shape, dtype=reps.dtype)
        d = reps.shape[2]
        for m, k in enumerate(owner):
            n = int(rows[m].sum())
            if k == me and n:
                parts = [self.wire.recv(shape, dt, SERVER, ("train_down", k))
                         for shape, dt in self.down_compressor.expects(m, n, d)]  # fmt: skip
                g[m][rows[m]] = self.down_compressor.decode(parts, m, n, d).to(reps.dtype)
        self.down_compressor.after_message(rows)
        return g


def secret_generators(gens: dict[str, list[torch.Generator]], me: int) -> None:
    """noise_source=secret: party ``me``'s noise streams (every phase) reseeded from the OS's randomness,
    inside its own process. The seeds are never sent, logged or recorded, so neither the server nor
    another party can regenerate this party's noise (nor can anyone reproduce the run)."""

    for phase in gens:
        gens[phase][me].manual_seed(secrets.randbits(63))


def wire_pbm_channel(base, wire: Wire, pair_keys: dict[int, bytes], noise_source: str = "seeded") -> WirePBMChannel:
    """The run's PBM channel (its noise streams, accountant state and parameters) on the wire; under
    secagg=masked the simulated masking gives way to :class:`~vflbench.privacy.secagg.KeyedMasking`; under
    ``noise_source=secret`` a party's own noise streams are reseeded from the OS (:func:`secret_generators`)."""
    ch = WirePBMChannel.__new__(WirePBMChannel)
    ch.__dict__.update(base.__dict__)
    ch.wire, ch.crossings, ch.local_term, ch.R = wire, [], None, 1 << base.bits
    ch.masked = base.secagg is not None
    ch.masking = (
        KeyedMasking(wire.rank - 1, base.k, base.bits, pair_keys) if (ch.masked and wire.rank != SERVER) else None
    )
    ch.secagg = None
    ch.noise_source = noise_source
    if noise_source == "secret" and wire.rank != SERVER:
        if ch.party_gens is None:
            raise VFLBenchError("noise_source=secret needs each party's own noise stream (noise=party)")
        ch.party_gens = {phase: list(g) for phase, g in ch.party_gens.items()}
        secret_generators(ch.party_gens, wire.rank - 1)
    return ch


def wire_channel(method, wire: Wire, run=None):
    """The channel a process of a processes run installs on ``method`` (before training). ``run`` gives
    the run key (bound into the SecAgg pair keys) and the noise source."""
    ch = method.channel
    if type(ch) is Channel:
        return WireChannel(method.k, wire)
    if isinstance(ch, CompressedChannel):
        return WireCompressedChannel(ch, wire)
    if isinstance(ch, PBMChannel) and method.sums_at_server:
        keys: dict[int, bytes] = {}
        if ch.secagg is not None:
            keys, wire.key_fingerprint = agree_pair_keys(wire, run.key if run is not None else "")
        new = wire_pbm_channel(
            ch, wire, keys, run.settings.get("noise_source", "seeded") if run is not None else "seeded"
        )
        if method.boundary is not None:
            method.boundary.channel = new
        return new
    raise VFLBenchError(f"{type(ch).__name__} does not run across processes yet.")
