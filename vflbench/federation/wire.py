"""The wire between a run's processes: point-to-point links over ``torch.distributed`` (gloo) with measured traffic and
an emulated WAN link (:class:`Wire`), and the control messages (:class:`WireMessages`); the run's channel with its
boundary on the wire is :mod:`vflbench.federation.wire_channels`. What crosses is exactly what a method sends
through ``Method.send``: each party's sent rows up, their gradients down after the server's backward; control
messages carry the server's loss, the epoch's order and the run key. The programs that use it, and the launcher, are
:mod:`vflbench.federation.runtime`."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import torch

from ..core.role import SERVER
from ..runs.faults import PartyFailed
from .rejoin import Resume

RESTART_ME = 75  # a party process's exit status for a scheduled outage it is to be restarted from (EX_TEMPFAIL)


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
        self.control_by_phase: dict[str, int] = {}  # control bytes per phase (align, train, eval, monitor)
        self.messages = 0
        self.comm_s = 0.0
        self.epoch = 0
        self.pending: list[tuple[torch.Tensor, int, tuple[str, int] | None]] = []
        self.die_at_epoch: int | None = None
        self.key_fingerprint: str | None = None  # SecAgg: the fingerprint of the public keys this party received
        # party losses (runs.faults): the parties lost (agreed by every process), those the server found lost in
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
        """Follow a run's :class:`~vflbench.runs.faults.PartyFaults`: skip lost parties' links and, on the server,
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
                self.control_by_phase[self.phase] = self.control_by_phase.get(self.phase, 0) + nbytes
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
            self.control_by_phase[self.phase] = self.control_by_phase.get(self.phase, 0) + nbytes
        else:
            self.payload[book[0]][book[1]] += nbytes
        return buf

    # -- long phases (entity alignment): progress through the rendezvous store, not a blocking receive. A process
    # that computes for minutes (PSI over 10^5 IDs) keeps a heartbeat in the store; one that waits for another
    # polls the store for the step it waits for. The beat carries the process's progress: a step counter that its
    # main thread advances (:meth:`advance`) and the phase it is in, and the ranks it waits for while it waits. A
    # rank whose beat stops for the timeout is lost; a rank that beats but neither advances nor waits for another for
    # STALL_FACTOR timeouts is stuck (a deadlock, a thrashing peer) and reported with its name and phase; two ranks
    # that wait for each other are reported at once. A receive is posted once the sender has announced its message,
    # so no gloo wait outlasts a transfer.
    BEAT_S = 0.5
    STALL_FACTOR = 5  # a computing rank must advance its step counter within this many --timeout (300 s by default)

    def _key(self, name: str) -> str:
        return f"vflbench/{self.run_key}/{self.generation}/{name}"

    def advance(self, phase: str) -> None:
        """This process made progress: its step counter moves on and its beat says ``phase`` (what it computes now)."""
        self.steps_done = getattr(self, "steps_done", 0) + 1
        self.step_phase = phase

    @property
    def stall_s(self) -> float:
        return self.STALL_FACTOR * self.timeout_s

    def beating(self):
        """A context manager: while inside, a thread sets this process's heartbeat in the store every
        :data:`BEAT_S` seconds (the computations it covers release the GIL: openmined-psi's, numpy's, torch's). The
        beat is ``tick|steps|waits|phase``: the thread's tick (life), the main thread's step counter (progress), the
        ranks it waits for (comma-separated; empty while it computes) and its phase."""
        import contextlib
        import threading

        wire = self

        @contextlib.contextmanager
        def beat():
            if wire.store is None:
                yield
                return
            stop = threading.Event()

            def loop():
                n = 0
                while not stop.is_set():
                    n += 1
                    waits = ",".join(map(str, getattr(wire, "waiting_for", ())))
                    steps, phase = getattr(wire, "steps_done", 0), getattr(wire, "step_phase", "")
                    wire.store.set(wire._key(f"alive/{wire.rank}"), f"{n}|{steps}|{waits}|{phase}")
                    stop.wait(wire.BEAT_S)

            t = threading.Thread(target=loop, name="vflbench-heartbeat", daemon=True)
            t.start()
            try:
                yield
            finally:
                stop.set()
                t.join()

        return beat()

    def announce(self, name: str) -> None:
        """Tell the others, through the store, that step ``name`` is done (its message can be received)."""
        if self.store is not None:
            self.store.set(self._key(name), "1")
        self.advance(f"announced {name}")

    def who(self, rank: int) -> str:
        return "the server" if rank == SERVER else f"party {rank - 1}"

    def await_any(self, names: dict[str, int], what: str) -> str:
        """Wait until one of the steps ``names`` (step -> the rank that announces it) is announced, as long as the
        ranks that owe them are alive and making progress; returns the first announced. A rank whose heartbeat
        stops for longer than the timeout is lost; one that beats without advancing its step counter (and waits for
        nobody) for :attr:`stall_s` is stuck; one that waits for this process while it waits for that one is
        deadlocked (each PartyFailed, naming the rank and its phase)."""
        if self.store is None:
            return next(iter(names))
        last: dict[int, tuple[str, float]] = {}  # rank -> (its tick, when it last changed)
        progress: dict[int, tuple[str, float]] = {}  # rank -> (its step counter, when it last moved)
        mutual: dict[int, float] = {}  # rank -> since when it has waited for this process, as this one for it
        self.waiting_for = sorted(set(names.values()))
        try:
            while True:
                now = time.monotonic()
                for name, rank in names.items():
                    if self.store.check([self._key(name)]):
                        return name
                    beat_key = self._key(f"alive/{rank}")
                    beat = self.store.get(beat_key).decode() if self.store.check([beat_key]) else ""
                    tick, steps, waits, phase = (beat.split("|", 3) + ["", "", "", ""])[:4]
                    seen, since = last.get(rank, ("", now))
                    if tick != seen or rank not in last:
                        last[rank] = (tick, now)
                    elif now - since > self.timeout_s:
                        raise PartyFailed(
                            f"Lost {self.who(rank)} (rank {rank}) while {what}: no sign of life for "
                            f"{self.timeout_s:.0f}s (--timeout); nothing was written as a finished result."
                        )
                    waiting = [int(r) for r in waits.split(",") if r]
                    if self.rank not in waiting:
                        mutual.pop(rank, None)
                    elif now - mutual.setdefault(rank, now) > 3 * self.BEAT_S + 0.5:  # not a beat written late
                        raise PartyFailed(
                            f"{self.who(rank)} (rank {rank}) and this process ({self.who(self.rank)}) wait for each "
                            f"other while {what} ({self.who(rank)}: {phase or 'no phase'}): a deadlock; nothing was "
                            "written as a finished result."
                        )
                    moved, at = progress.get(rank, ("", now))
                    if (
                        steps != moved or rank not in progress or waiting
                    ):  # a waiting rank is judged by whom it waits for
                        progress[rank] = (steps, now)
                    elif now - at > self.stall_s:
                        raise PartyFailed(
                            f"{self.who(rank)} (rank {rank}) is alive but stuck while {what}: its beat goes on, but "
                            f"its progress stayed at step {steps or 0} ({phase or 'no phase'}) for {now - at:.0f}s "
                            f"(the bound: {self.STALL_FACTOR} x --timeout = {self.stall_s:.0f}s); nothing was written "
                            "as a finished result."
                        )
                time.sleep(0.02)
        finally:
            self.waiting_for = []

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
                "control_bytes_by_phase": dict(self.control_by_phase),
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


class WireMessages:
    """Byte messages between the server and the party processes (SecureBoost's protocol): a length (control) then
    the payload, booked as the phase's traffic to or from the party, as the accounted traffic books it."""

    def __init__(self, wire: Wire):
        self.wire = wire

    @property
    def rank(self) -> int:
        return self.wire.rank

    def to_party(self, k: int, data: bytes) -> None:
        self.wire.post(torch.tensor([len(data)], dtype=torch.int64), k + 1, None)
        self.wire.post(torch.frombuffer(bytearray(data), dtype=torch.uint8), k + 1, (f"{self.wire.phase}_down", k))
        self.wire.flush()

    def from_party(self, k: int) -> bytes:
        n = int(self.wire.recv((1,), torch.int64, k + 1, None))
        return bytes(self.wire.recv((n,), torch.uint8, k + 1, (f"{self.wire.phase}_up", k)).numpy().tobytes())

    def lost(self, k: int) -> str | None:
        """Server: why party ``k`` was found lost in this exchange (its process stopped), else None. The wire then
        skips its link until the run's party losses say so too (:class:`~vflbench.runs.faults.PartyFaults`)."""
        if k not in self.wire.found:
            return None
        self.wire.lost.add(k)
        return self.wire.found.pop(k)

    def from_server(self) -> bytes:
        n = int(self.wire.recv((1,), torch.int64, SERVER, None))
        return bytes(self.wire.recv((n,), torch.uint8, SERVER, None).numpy().tobytes())

    def to_server(self, data: bytes) -> None:
        self.wire.post(torch.tensor([len(data)], dtype=torch.int64), SERVER, None)
        self.wire.post(torch.frombuffer(bytearray(data), dtype=torch.uint8), SERVER, None)
        self.wire.flush()
