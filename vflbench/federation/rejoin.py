"""Rejoining a restarted party process.

A party process that died can be restarted (`vflbench party --rejoin`, or the launcher's own restart under
--restart-lost). It reloads the state it checkpointed at its last epoch boundary, asks the server to take it
back (through the rendezvous store, which outlives process groups), and is re-admitted at the server's next
epoch boundary: every live process then forms a new process group (the next generation) with it, and the
server hands it the run's random streams (in step in every process) and the record of losses. Refused, with
one line: another run key, a checkpoint of another run, a stale checkpoint (older than the party's last
boundary before its loss), a party that is not lost, a run whose boundary carries noise (PBM-VFL).

The wire's channel (:class:`vflbench.federation.wire_channels.WireChannel`) calls :func:`at_epoch_boundary` at every
epoch boundary; the runtime calls :func:`form_group` for the first group and :func:`request_rejoin` in a restarted
process. Nothing here imports the wire: the channel and the wire are passed in."""

from __future__ import annotations

import io
import json
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from ..core.errors import VFLBenchError
from ..core.role import SERVER
from ..runs.faults import PartyFailed
from . import checkpoint


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


def form(wire, generation: int) -> None:
    """Form again the process group of every live process (a restarted party rejoins it)."""
    form_group(wire.store, generation, wire.rank, wire.world, wire.timeout_s)
    wire.generation = generation


@dataclass
class Resume:
    """What a re-admitted party process takes up training with: where (stage group, epoch), its own
    checkpoint, and from the server the run's random streams and record of losses."""

    group: int
    epoch: int
    saved: dict[str, Any]  # its checkpoint (vflbench.federation.checkpoint.save): key, party, after, group, tensors
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


def request_rejoin(wire, run_key: str, device: str, path: Path) -> Resume:
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


def _refusal(channel, ask: dict, party: int, faults, due: bool) -> str | None:
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
    if channel.draws_noise:
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


def admit(channel, boundary) -> dict[int, int]:
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


def at_epoch_boundary(channel, boundary) -> None:
    """At every epoch boundary of a run across processes. Server: note the boundary and re-admit restarted
    parties that ask (:func:`admit`). Party: checkpoint its state, then learn from the server which parties
    come back (and form the new process group)."""
    wire, faults = channel.wire, boundary.faults
    if channel.is_server:
        wire.boundaries.append(faults.epoch)
        admit(channel, boundary)
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
