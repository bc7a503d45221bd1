"""The wire between a run's processes: point-to-point links over ``torch.distributed`` (gloo) with
measured traffic and an emulated WAN link (:class:`Wire`), and the run's channel with its boundary on
the wire (:class:`WireChannel`; PBM-VFL's summed release with real SecAgg keys and each party's own
noise: :class:`WirePBMChannel`). What crosses is exactly what a method sends through
``Method.send``: each party's sent rows up, their gradients down after the server's backward; control
messages carry the server's loss, the epoch's order and the run key. The programs that use it, and the
launcher, are :mod:`vflbench.runtime`."""

from __future__ import annotations

import io
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from . import checkpoint
from .channel import Channel
from .errors import VFLBenchError
from .faults import PartyLost
from .federation import SERVER
from .mechanisms import PBMChannel
from .methods.base import Method
from .secagg import KeyedMasking, agree_pair_keys

RESTART_ME = 75  # a party process's exit status for a scheduled outage it is to be restarted from (EX_TEMPFAIL)


class PartyFailed(VFLBenchError):
    """A party process stopped (died, or went silent past the timeout): exit status 3."""

    exit_code = 3


class Wire:
    """The point-to-point links of one process, with measured traffic and an emulated WAN link."""

    def __init__(
        self, rank: int, world: int, latency_ms: float = 0.0, bandwidth_mbps: float = 0.0, timeout_s: float = 60.0
    ):
        self.rank, self.world = rank, world
        self.latency, self.bandwidth = latency_ms / 1e3, bandwidth_mbps
        self.timeout_s = timeout_s
        k = world - 1
        self.payload = {f"{ph}_{d}": [0] * k for ph in ("train", "eval", "monitor") for d in ("up", "down")}
        self.control_bytes = 0
        self.messages = 0
        self.comm_s = 0.0
        self.epoch = 0
        self.pending: list[tuple[torch.Tensor, int, tuple[str, int] | None]] = []
        self.die_at_epoch: int | None = None
        self.key_fingerprint: str | None = None  # SecAgg: the fingerprint of the public keys this party received
        # party losses (vflbench.faults): the parties lost (agreed by every process), those the server found lost in
        # this step (dead, or silent past the timeout; announced to the others at the step's agreement), whether the
        # server goes on when it finds one, and the phase of the current crossings (a loss at evaluation stops)
        self.lost: set[int] = set()
        self.found: dict[int, str] = {}
        self.tolerant = False
        self.phase = "train"
        self.rejoins: dict[int, list[int]] = {}  # party -> the epochs it rejoins at (a scheduled outage)
        # rejoin of a restarted party process (see Rejoin): the rendezvous store the process groups are formed on,
        # the group's generation, where this party checkpoints, how long the server waits for a restarted party
        self.store = None
        self.generation = 0
        self.checkpoint: str | None = None
        self.expect_restarts = False  # the launcher restarts dead parties: the server waits for them at a boundary
        self.restarts = False  # --restart-lost: a scheduled outage exits the party's process, restarted to rejoin
        self.resuming: Resume | None = None  # a restarted party: where it takes up training
        self.boundaries: list[int] = []  # server: the epochs completed at each epoch boundary
        self.given_up: set[int] = set()  # server: restarted parties it waited for in vain (it no longer waits)
        self.admitted_here = False  # a restarted party at the boundary it was re-admitted at
        self.run_key = ""
        self.device = "cpu"

    def watch(self, faults) -> None:
        """Follow a run's :class:`~vflbench.faults.PartyFaults`: skip lost parties' links and, on the server,
        go on when a party is found lost. A party process whose scheduled failure has no rejoin exits."""
        self.tolerant, self.faults = True, faults
        for f in faults.schedule:
            if f.rejoin is not None:
                self.rejoins.setdefault(f.party, []).append(f.rejoin)
        faults.listeners.append(self._lost_changed)

    def _lost_changed(self, lost: list[bool]) -> None:
        self.lost = {p for p, gone in enumerate(lost) if gone}
        me = self.rank - 1
        if self.rank == SERVER or me not in self.lost or self.admitted_here:  # (a restarted one learning its past)
            return
        rec = self.faults.lost_record(me)
        if rec.cause != "scheduled" or rec.epoch != self.faults.epoch:
            return
        back = any(r > self.faults.epoch for r in self.rejoins.get(me, []))
        if self.restarts or not back:
            # a scheduled failure: this party's process exits, as a failed one would; under --restart-lost with a
            # rejoin to come it exits with RESTART_ME, and the launcher starts it again (it rejoins on schedule)
            self.flush()
            sys.stderr.flush()
            os._exit(RESTART_ME if back else 0)

    @property
    def silent(self) -> bool:
        """A party process during its own scheduled outage: it keeps its state and sends and receives nothing."""
        return self.rank != SERVER and (self.rank - 1) in self.lost

    def resting(self, party: int) -> bool:
        """A party in a scheduled outage it will come back from: it still gets each epoch's sample order, so
        that its own random streams stay in step with the run's (a class-balanced order reads labels)."""
        faults = getattr(self, "faults", None)
        if self.restarts:  # its process exited, to be restarted for the rejoin
            return False
        return party in self.lost and faults is not None and any(r > faults.epoch for r in self.rejoins.get(party, []))

    def away(self, rank: int) -> bool:
        """Whether the server skips the link to ``rank``: its party is lost, or was found lost in this step."""
        return self.rank == SERVER and rank != SERVER and (rank - 1 in self.lost or rank - 1 in self.found)

    def _tolerate(self, peer: int, e: Exception) -> bool:
        """On the server, in training, of a run that goes on: note the party found lost, and go on. A party
        silent past the timeout is not survived: after a timeout gloo closes the server's other links too
        (measured: every other party then fails with "application timeout caused pair closure")."""
        if not (self.tolerant and self.rank == SERVER and peer != SERVER and self.phase == "train"):
            return False
        if "timed out" in _cause(e) or "timeout" in str(e).lower():
            return False
        self.found[peer - 1] = _cause(e)
        return True

    def party_of_rank(self, rank: int) -> int:
        return rank - 1

    def _delay(self, nbytes: int) -> None:
        if self.latency or self.bandwidth:
            time.sleep(self.latency + (nbytes * 8 / (self.bandwidth * 1e6) if self.bandwidth else 0.0))

    def send(self, t: torch.Tensor, dst: int, book: tuple[str, int] | None) -> None:
        """Send now (after the emulated link's delay for this message)."""
        self.post(t, dst, book)
        self.flush()

    def post(self, t: torch.Tensor, dst: int, book: tuple[str, int] | None, force: bool = False) -> None:
        """Queue a message: :meth:`flush` sends the queue together, as over parallel links (one delay: the
        latency plus the serialisation time of the busiest link). Nothing goes to a lost party, nor from one
        (``force``: the epoch's order to a resting party)."""
        if not force and (self.away(dst) or self.silent):
            return
        self.pending.append((t.detach().contiguous().cpu(), dst, book))

    def flush(self) -> None:
        import torch.distributed as dist

        if not self.pending:
            return
        pending, self.pending = self.pending, []
        t0 = time.perf_counter()
        per_link: dict[int, int] = {}
        for t, dst, _ in pending:
            per_link[dst] = per_link.get(dst, 0) + t.numel() * t.element_size()
        self._delay(
            max(per_link.values())
        )  # the links run in parallel; a link carries its messages one after the other
        for t, dst, book in pending:
            if self.rank == SERVER and dst - 1 in self.found:  # found lost earlier in this flush
                continue
            try:
                dist.send(t, dst=dst)
            except RuntimeError as e:
                if self._tolerate(dst, e):
                    continue
                raise self._failed(dst, e) from None
            nbytes = t.numel() * t.element_size()
            self.messages += 1
            if book is None:
                self.control_bytes += nbytes
            else:
                self.payload[book[0]][book[1]] += nbytes
        self.comm_s += time.perf_counter() - t0

    def recv(self, shape, dtype, src: int, book: tuple[str, int] | None) -> torch.Tensor:
        import torch.distributed as dist

        self.flush()  # what this process queued goes first (nobody waits on a message never sent)
        if self.away(src):
            if self.phase != "train" and src - 1 in self.found:
                raise PartyFailed(
                    f"Lost party {src - 1} (rank {src}) at evaluation ({self.found[src - 1]}); a loss the server meets "
                    "outside training stops the run; nothing was written as a finished result."
                )
            return torch.zeros(shape, dtype=dtype)  # a lost party's message: nothing (its terms are zeros)
        t0 = time.perf_counter()
        buf = torch.empty(shape, dtype=dtype)
        try:
            dist.recv(buf, src=src)
        except RuntimeError as e:
            if self._tolerate(src, e):
                return torch.zeros(shape, dtype=dtype)
            raise self._failed(src, e) from None
        self.comm_s += time.perf_counter() - t0
        self.messages += 1
        nbytes = buf.numel() * buf.element_size()
        if book is None:
            self.control_bytes += nbytes
        else:
            self.payload[book[0]][book[1]] += nbytes
        return buf

    def _failed(self, peer: int, e: Exception) -> PartyFailed:
        who = "the server" if peer == SERVER else f"party {self.party_of_rank(peer)}"
        why = _cause(e)
        silent = (
            " (a party silent past --timeout stops the run even where a dead one is survived: after a timeout gloo "
            "closes the server's other links too)"
            if self.tolerant and self.rank == SERVER and ("timed out" in why or "timeout" in str(e).lower())
            else ""
        )
        return PartyFailed(
            f"Lost {who} (rank {peer}) in epoch {self.epoch + 1} ({why}){silent}; nothing was written as a finished "
            "result."
        )

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"bytes_{key}_per_party": list(v) for key, v in self.payload.items()}
        out.update({f"bytes_{key}": int(sum(v)) for key, v in self.payload.items()})
        out.update(
            {
                "control_bytes": self.control_bytes,
                "messages": self.messages,
                "comm_s": self.comm_s,
                "latency_ms": self.latency * 1e3,
                "bandwidth_mbps": self.bandwidth,
            }
        )
        if self.key_fingerprint is not None:
            out["secagg_key_fingerprint"] = self.key_fingerprint
        return out


def _cause(e: Exception) -> str:
    """What a failed link says, in a few words (connection reset by peer, timed out ...)."""
    text = str(e)
    why = next(
        (w for w in ("Connection closed by peer", "Connection reset by peer", "Timed out", "timed out") if w in text),
        (text.splitlines() or ["no message"])[0][:80],
    )
    return why.lower()


def lost_code(parties) -> float:
    """The agreement's flag when the server abandons a step: -1 - (the found parties as a bit set)."""
    return -1.0 - float(sum(1 << p for p in parties))


def lost_parties(code: float) -> list[int]:
    bits = int(-1.0 - code)
    return [p for p in range(bits.bit_length()) if bits >> p & 1]


class WireChannel(Channel):
    """The run's channel with the boundary on the wire: counts as :class:`Channel` does (the accounted
    traffic), and moves the sent rows between the processes (the measured traffic)."""

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
        return reps.detach()  # what the rest of this party's copy computes is never used

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

    # -- a restarted party rejoins (see Rejoin below)
    def epoch_boundary(self, boundary) -> None:
        """Server: note the boundary and re-admit restarted parties that ask (:func:`admit`). Party: checkpoint
        its state, then learn from the server which parties come back (and form the new process group)."""
        wire, faults = self.wire, boundary.faults
        if self.is_server:
            wire.boundaries.append(faults.epoch)
            admit(self, boundary)
            return
        if wire.checkpoint is not None:
            checkpoint.save(
                Path(wire.checkpoint),
                {
                    "key": wire.run_key,
                    "party": wire.rank - 1,
                    "after": faults.epoch,
                    "group": boundary.group,
                    "tensors": checkpoint.tensors(boundary.state()),
                },
            )
        if wire.admitted_here:  # this process was re-admitted at this very boundary
            wire.admitted_here = False
            return
        if faults.due(wire.restarts):
            news = wire.recv((2 + wire.world - 1,), torch.int64, SERVER, None)
            back = {p: int(news[2 + p]) for p in range(wire.world - 1) if int(news[1]) >> p & 1}
            if back:
                form(wire, int(news[0]))
                faults.admitted.update(back)

    def resume(self):
        return self.wire.resuming

    def agree_order(self, order: torch.Tensor) -> torch.Tensor:
        """The server (the label holder) sends the epoch's sample order to every party (a control
        message): a class-balanced sampler reads labels the parties do not hold."""
        if self.is_server:
            for r in range(1, self.wire.world):
                self.wire.post(order.to(torch.int64), r, None, force=self.wire.resting(r - 1))
            self.wire.flush()
            return order
        return self.wire.recv(tuple(order.shape), torch.int64, SERVER, None).to(order.device, order.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """Server: back-propagate the loss and send each sent row's gradient to its party. Party:
        receive the gradients of the rows it sent and back-propagate them through its own models."""
        crossings, self.crossings = self.crossings, []
        local, self.local_term = getattr(self, "local_term", None), None
        if self.is_server:
            if loss.requires_grad:  # (a sum of the parties' own terms has no graph here: they train at home)
                loss.backward()
            for got, rows, owner in crossings:
                g = got.grad if got.grad is not None else torch.zeros_like(got)
                g = g.detach().cpu()
                for m, k in enumerate(owner):
                    if bool(rows[m].any()):  # a summed crossing ([B, D], PBM) sends every party the sum's gradient
                        self.wire.post((g if g.ndim == 2 else g[m])[rows[m]], k + 1, ("train_down", k))
            self.wire.flush()  # the step's control message and gradients, to every party at once
            return
        me = self.wire.rank - 1
        outs, grads = [], []
        for reps, rows, owner in crossings:
            g = torch.zeros(reps.shape, dtype=reps.dtype)
            for m, k in enumerate(owner):
                n = int(rows[m].sum())
                if k == me and n:
                    g[m][rows[m]] = self.wire.recv((n, reps.shape[2]), reps.dtype, SERVER, ("train_down", k))
            outs.append(reps)
            grads.append(g.to(reps.device))
        if outs:
            torch.autograd.backward(outs, grads)
        if local is not None:  # this party's own loss term (a method whose parties train alone)
            local.backward()

    def discard(self) -> None:
        super().discard()
        self.crossings, self.local_term = [], None


# ----------------------------------------------------------------------------- rejoin
# A party process that died can be restarted (`vflbench party --rejoin`, or the launcher's own restart under
# --restart-lost). It reloads the state it checkpointed at its last epoch boundary, asks the server to take it
# back (through the rendezvous store, which outlives process groups), and is re-admitted at the server's next
# epoch boundary: every live process then forms a new process group (the next generation) with it, and the
# server hands it the run's random streams (in step in every process) and the record of losses. Refused, with
# one line: another run key, a checkpoint of another run, a stale checkpoint (older than the party's last
# boundary before its loss), a party that is not lost, a run whose boundary carries noise (PBM-VFL).
def form_group(store, generation: int, rank: int, world: int, timeout_s: float) -> None:
    """Form (again) this process's group: generation ``generation`` of the process groups on ``store``."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore(f"gen{generation}/", store),
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
    )


def form(wire: Wire, generation: int) -> None:
    """Form again the process group of every live process (a restarted party rejoins it)."""
    form_group(wire.store, generation, wire.rank, wire.world, wire.timeout_s)
    wire.generation = generation


@dataclass
class Resume:
    """What a re-admitted party process takes up training with: where (stage group, epoch), its own
    checkpoint, and from the server the run's random streams and record of losses."""

    group: int
    epoch: int
    saved: dict[str, Any]  # its checkpoint (vflbench.checkpoint.save): key, party, after, group, tensors
    streams: dict
    faults: dict
    admitted: dict[int, int]

    def apply(self, boundary) -> None:
        tensors = self.saved["tensors"]
        if self.saved["group"] != boundary.group:  # checkpointed in an earlier stage: this stage's optimiser is new
            tensors = {p: t for p, t in tensors.items() if p[:1] != (("key", "optimizers"),)}
        checkpoint.restore_tensors(boundary.state(), tensors)
        checkpoint.restore_generators(boundary.streams(), self.streams)
        boundary.faults.load_state(self.faults)
        boundary.faults.admitted.update(self.admitted)


def _blob(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def request_rejoin(wire: Wire, run_key: str, device: str, path: Path) -> Resume:
    """A restarted party: load its checkpoint, ask the server to take it back, wait for the answer (until
    the server's next epoch boundary), and form the new process group with the others."""
    saved = checkpoint.load(path)
    me = wire.rank - 1
    nonce = secrets.token_hex(8)
    ask = {
        "key": run_key,
        "device": str(device).split(":")[0],
        "checkpoint_key": saved.get("key"),
        "checkpoint_party": saved.get("party"),
        "after": saved.get("after"),
        "nonce": nonce,
    }
    wire.store.set(f"rejoin/{me}", json.dumps(ask))
    answer_key = f"admit/{me}/{nonce}"
    while True:  # until the server answers (at its next epoch boundary) or is gone
        try:
            if wire.store.check([answer_key]):
                break
        except RuntimeError:
            raise VFLBenchError(
                f"party {me}: the server stopped before it re-admitted this party (the run may have ended)."
            ) from None
        time.sleep(0.05)
    answer = json.loads(wire.store.get(answer_key))
    if not answer["ok"]:
        raise VFLBenchError(f"party {me}: the server refused the rejoin: {answer['why']}")
    state = torch.load(io.BytesIO(wire.store.get(f"state/{me}/{nonce}")), weights_only=False)
    form(wire, int(answer["generation"]))
    wire.admitted_here = True
    return Resume(
        int(answer["group"]),
        int(answer["epoch"]),
        saved,
        state["streams"],
        state["faults"],
        {int(p): int(a) for p, a in answer["admitted"].items()},
    )


def _refusal(channel: WireChannel, ask: dict, party: int, faults, due: bool) -> str | None:
    wire = channel.wire
    if ask["key"] != wire.run_key:
        return f"it resolved another run (run key {ask['key']}, the server's {wire.run_key}); give it the same flags"
    if ask["device"] != wire.device:
        return f"it computes on {ask['device']}, the server on {wire.device}; give every process the same --device"
    if ask["checkpoint_key"] != wire.run_key or ask["checkpoint_party"] != party:
        return (
            f"its checkpoint is of run {ask['checkpoint_key']}, party {ask['checkpoint_party']}, not of party {party} "
            f"of run {wire.run_key}"
        )
    if not due:
        if not faults.lost[party]:
            return f"party {party} is not lost: its process takes part in the run"
        return f"party {party} is lost by the schedule until a later epoch, or for good"
    if type(channel) is not WireChannel:
        return "the run's boundary draws noise (a mechanism), whose streams and release count a rejoin does not restore"
    rec = faults.lost_record(party)
    expected = max((c for c in wire.boundaries if c < rec.epoch), default=0)
    if ask["after"] != expected:
        return (
            f"its checkpoint holds its state after epoch {ask['after']}, but it took part until it was lost in epoch "
            f"{rec.epoch} (step {rec.step}), after checkpointing epoch {expected}: the checkpoint is "
            f"{'stale' if ask['after'] < expected else 'not the one it wrote'}"
        )
    return None


def admit(channel: WireChannel, boundary) -> dict[int, int]:
    """Server, at an epoch boundary: answer the restarted processes that ask to rejoin, taking back those whose
    party is lost and may come back now (waiting up to the timeout for one the launcher restarted or the schedule
    brings back); when some party may come back, tell every live party who does, and form the new group."""
    wire, faults = channel.wire, boundary.faults
    say = faults.announce or (lambda line: None)
    back: dict[int, int] = {}
    answers: dict[int, tuple[str, bytes | None, dict]] = {}
    unscheduled, due = faults.awaiting(), faults.due(wire.restarts)
    for p in range(wire.world - 1):
        key = f"rejoin/{p}"
        ready = wire.store.check([key])
        scheduled = p in due and p not in unscheduled  # the schedule brings it back now: its process must be there
        if not ready and (scheduled or (p in unscheduled and wire.expect_restarts and p not in wire.given_up)):
            deadline = time.perf_counter() + wire.timeout_s
            while not ready and time.perf_counter() < deadline:
                time.sleep(0.05)
                ready = wire.store.check([key])
            if not ready and scheduled:
                raise PartyFailed(
                    f"party {p} is scheduled to rejoin at epoch {faults.epoch + 1}, and no restarted process of it "
                    f"asked to within {wire.timeout_s:.0f}s; nothing was written as a finished result."
                )
            if not ready:
                wire.given_up.add(p)
                say(
                    f"party {p} was restarted but did not ask to rejoin within {wire.timeout_s:.0f}s; going on "
                    "without it."
                )
        if not ready:
            continue
        ask = json.loads(wire.store.get(key))
        wire.store.delete_key(key)
        why = _refusal(channel, ask, p, faults, p in due)
        if why:
            say(f"party {p} asked to rejoin and was refused: {why}.")
            answers[p] = (ask["nonce"], None, {"ok": False, "why": why})
            continue
        back[p] = int(ask["after"])
        answers[p] = (ask["nonce"], None, {"ok": True})
    gen = wire.generation + 1 if back else wire.generation
    if due:  # every live party expects the news at this boundary (it knows the same losses and schedule)
        news = torch.tensor(
            [gen, sum(1 << p for p in back), *[back.get(p, -1) for p in range(wire.world - 1)]], dtype=torch.int64
        )
        for r in range(1, wire.world):
            wire.post(news, r, None, force=wire.resting(r - 1))
        wire.flush()
    for p, (nonce, _, answer) in answers.items():
        if answer["ok"]:
            state = {"streams": checkpoint.generators(boundary.streams()), "faults": faults.state()}
            wire.store.set(f"state/{p}/{nonce}", _blob(state))
            answer = {
                "ok": True,
                "generation": gen,
                "group": boundary.group,
                "epoch": boundary.epoch,
                "admitted": {str(q): a for q, a in back.items()},
            }
        wire.store.set(f"admit/{p}/{nonce}", json.dumps(answer))
    if back:
        form(wire, gen)
        faults.admitted.update(back)
    return back


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
    :class:`~vflbench.mechanisms.PBMChannel` by :func:`wire_pbm_channel`."""

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
            return est + (exact - exact.detach())
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


def secret_generators(gens: dict[str, list[torch.Generator]], me: int) -> None:
    """noise_source=secret: party ``me``'s noise streams (every phase) reseeded from the OS's randomness,
    inside its own process. The seeds are never sent, logged or recorded, so neither the server nor
    another party can regenerate this party's noise (nor can anyone reproduce the run)."""
    import secrets

    for phase in gens:
        gens[phase][me].manual_seed(secrets.randbits(63))


def wire_pbm_channel(base, wire: Wire, pair_keys: dict[int, bytes], noise_source: str = "seeded") -> WirePBMChannel:
    """The run's PBM channel (its noise streams, accountant state and parameters) on the wire; under
    secagg=masked the simulated masking gives way to :class:`~vflbench.secagg.KeyedMasking`; under
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
