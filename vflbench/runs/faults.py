"""Party failures: a schedule of them (``--fail-party P@E[:R]``), the losses a run meets as it trains,
and what a lost party means for the rest of the run.

Party ``P`` (0-based, as ``--rank``) fails at the start of epoch ``E`` and, with ``:R``, rejoins at the
start of epoch ``R``. Epochs are 1-based and count across the run's stages, as ``--eval-epochs`` does.
A lost party is a missing block: from the loss on, its block is unobserved for every sample (the mask
path that missingness uses), at training and at prediction, and its own models are held (neither
stepped nor decayed), so that a party that rejoins resumes from the state it last checkpointed. A party
still lost when training ends is missing at evaluation too.

The schedule is a declared run setting (it enters the run key): every process of a run knows it, so the
same schedule gives the same numbers in one process and across processes. A loss nobody scheduled (a
party process that dies, or stays silent past the timeout) is met by the server across processes
(:mod:`vflbench.federation.wire`) and handled by the same :class:`PartyFaults`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..core.errors import VFLBenchError

EXAMPLE = "2@5 or 2@5:15 (party 2 fails at the start of epoch 5 and, with :15, rejoins at the start of epoch 15)"


@dataclass(frozen=True)
class Failure:
    party: int
    epoch: int  # fails at the start of this epoch (1-based)
    rejoin: int | None = None  # rejoins at the start of this epoch

    def text(self) -> str:
        return f"{self.party}@{self.epoch}" + (f":{self.rejoin}" if self.rejoin is not None else "")


class FailureSchedule(tuple):
    """A sorted tuple of :class:`Failure` (empty: no failure); ``str`` gives its canonical text,
    ``2@5:15;3@8`` or ``none``."""

    def __new__(cls, items=()):
        return super().__new__(cls, sorted(items, key=lambda f: (f.epoch, f.party, f.rejoin or 0)))

    def __str__(self) -> str:
        return ";".join(f.text() for f in self) or "none"

    def at(self, epoch: int) -> tuple[list[int], list[int]]:
        """The parties that fail and those that rejoin at the start of (1-based) ``epoch``."""
        return [f.party for f in self if f.epoch == epoch], [f.party for f in self if f.rejoin == epoch]

    def lost_at(self, epoch: int, k: int) -> list[bool]:
        """Which of ``k`` parties are lost during (1-based) ``epoch``."""
        out = [False] * k
        for f in self:
            if f.epoch <= epoch and (f.rejoin is None or epoch < f.rejoin) and f.party < k:
                out[f.party] = True
        return out


def parse_failures(value) -> FailureSchedule:
    """``"2@5:15"``, ``"2@5;3@8"``, ``"2@5,3@8"``, a list of such items, ``"none"`` or None -> a
    :class:`FailureSchedule`. Errors name the form."""
    if isinstance(value, FailureSchedule):
        return value
    if value is None:
        return FailureSchedule()
    items: list[str] = []
    for part in value if isinstance(value, (list, tuple)) else [value]:
        for item in str(part).replace(";", ",").split(","):
            item = item.strip()
            if item.lower() in ("", "none"):
                if item == "" and str(part).strip().lower() not in ("", "none"):
                    raise VFLBenchError(f"--fail-party {part!r} has an empty item; give items like {EXAMPLE}.")
                continue
            items.append(item)
    out = []
    for item in items:
        try:
            party, at, when = item.partition("@")
            fail, colon, back = when.partition(":")
            if not at or (colon and not back):
                raise ValueError
            f = Failure(int(party), int(fail), int(back) if back else None)
        except ValueError:
            raise VFLBenchError(f"--fail-party takes P@E or P@E:R, e.g. {EXAMPLE}; got {item!r}.") from None
        if f.party < 0 or f.epoch < 1 or (f.rejoin is not None and f.rejoin <= f.epoch):
            raise VFLBenchError(
                f"--fail-party {item}: the party is >= 0, the epoch >= 1 and a rejoin comes after the failure "
                f"({EXAMPLE})."
            )
        out.append(f)
    for p in {f.party for f in out}:  # one party's failures must not overlap
        mine = sorted((f for f in out if f.party == p), key=lambda f: f.epoch)
        for a, b in zip(mine, mine[1:], strict=False):
            if a.rejoin is None or b.epoch < a.rejoin:
                raise VFLBenchError(
                    f"--fail-party: party {p} fails again at epoch {b.epoch} before it rejoined; give failures of one "
                    "party that do not overlap."
                )
    return FailureSchedule(out)


def check_schedule(
    schedule: FailureSchedule, parties: int, total_epochs: int, unit: str = "epochs (over all its stages)"
) -> None:
    """Against the run: a party that exists, an epoch the run reaches (``unit``: what the method's epochs are)."""
    for f in schedule:
        if f.party >= parties:
            raise VFLBenchError(f"--fail-party {f.text()}: the run has parties 0 .. {parties - 1}; name one of them.")
        if f.epoch > total_epochs or (f.rejoin is not None and f.rejoin > total_epochs):
            raise VFLBenchError(
                f"--fail-party {f.text()}: the run trains {total_epochs} {unit}; fail and rejoin within them."
            )
    for e in sorted({f.epoch for f in schedule}):
        if all(schedule.lost_at(e, parties)):
            raise VFLBenchError(
                f"--fail-party {schedule}: every party is lost from epoch {e}; keep at least one party in the run."
            )


@dataclass
class LossRecord:
    """One party loss a run met (the manifest's ``party_losses``; the rows' ``parties_lost``)."""

    party: int
    epoch: int  # 1-based, across stages
    step: int  # the batch of that epoch from which the block is missing (0: the epoch's first)
    cause: str  # "scheduled" (--fail-party), or what the server met (connection reset, timed out ...)
    rejoined: int | None = None  # the epoch from which it took part again
    restored: int | None = None  # a restarted process rejoined from its checkpoint after this many epochs

    def as_dict(self) -> dict:
        out = {
            "party": self.party,
            "epoch": self.epoch,
            "step": self.step,
            "cause": self.cause,
            "rejoined_epoch": self.rejoined,
        }
        if self.restored is not None:
            out["rejoined_from_checkpoint_after_epoch"] = self.restored
        return out

    @classmethod
    def from_dict(cls, d: dict) -> LossRecord:
        return cls(
            d["party"],
            d["epoch"],
            d["step"],
            d["cause"],
            d["rejoined_epoch"],
            d.get("rejoined_from_checkpoint_after_epoch"),
        )

    def text(self) -> str:
        return f"{self.party}@{self.epoch}" + (f":{self.rejoined}" if self.rejoined is not None else "")


class EveryPartyLost(VFLBenchError):
    """No party is left: the run stops (exit status 3)."""

    exit_code = 3


class PartyFailed(VFLBenchError):
    """A party process stopped (died, or went silent past the timeout): exit status 3."""

    exit_code = 3


class PartyLost(VFLBenchError):
    """Raised inside a training step when parties are found lost (across processes): the trainer drops
    the step, marks them lost from that batch on, and redoes the batch without them."""

    exit_code = 3

    def __init__(self, parties: list[int], cause: str):
        super().__init__(f"party {', '.join(map(str, parties))} lost ({cause})")
        self.parties, self.cause = list(parties), cause


def loss_refusal(mcls, options: dict | None, settings: dict) -> str | None:
    """Why a run cannot go on when a party is lost (None: it can): the method's own answer
    (:meth:`vflbench.methods.base.Method.loss_refusal`). Pairwise-masked secure aggregation goes on: the masks of a
    release cover exactly the parties that take part in each sample, which a lost party no longer does, and a
    release under way when a party is lost is abandoned and the step redone without it (docs/RUNTIME.md)."""
    return mcls.loss_refusal(options or {})


def check_run(
    mcls, options: dict, settings: dict, parties: int, total_epochs: int, unit: str = "epochs (over all its stages)"
) -> None:
    """A run's failure settings against its method, options, party count and epochs (before any work)."""
    schedule = parse_failures(settings.get("fail_party"))
    action = settings.get("on_party_loss")
    why = loss_refusal(mcls, options, settings)
    if schedule:
        check_schedule(schedule, parties, total_epochs, unit)
        if action == "stop":
            raise VFLBenchError(
                f"--fail-party {schedule} schedules a loss the run would stop at (--on-party-loss stop); drop one."
            )
        if why:
            raise VFLBenchError(f"--fail-party {schedule}: {mcls.display} cannot go on without a party: {why}.")
    if action == "continue" and why:
        raise VFLBenchError(f"--on-party-loss continue: {mcls.display} cannot go on without a party: {why}.")


def continues(mcls, options: dict, settings: dict) -> bool:
    """Whether a run goes on when a party is lost (``--on-party-loss``, else where the method can)."""
    action = settings.get("on_party_loss")
    if action is not None:
        return action == "continue"
    return loss_refusal(mcls, options, settings) is None


class PartyFaults:
    """The party losses of one run as training meets them: the schedule's, and any the runtime reports
    (:meth:`lose`). ``announce`` prints one line per event; ``listeners`` learn the lost parties (the wire).
    A lost party's members need no holding: with its block missing for every sample no loss reaches them,
    so the optimiser leaves them (and their state) as they were."""

    def __init__(self, schedule: FailureSchedule, k: int, announce: Callable[[str], None] | None = None):
        self.schedule, self.k = schedule, k
        self.announce = announce
        self.lost = [False] * k
        self.records: list[LossRecord] = []
        self.epoch = 0  # epochs begun, across stages (1-based once the first began)
        self.unit = "epoch"  # what an epoch is to the run's method, in what it says ("tree": boosting rounds)
        self.step = 0  # the batch of the current epoch
        self._available: dict[str, torch.Tensor] = {}  # per device, rebuilt when the lost parties change
        self.listeners: list[Callable[[list[bool]], None]] = []
        self.rejoin_hooks: list[Callable[[int, int], None]] = []  # (party, epoch): a party takes part again
        self.admitted: dict[
            int, int
        ] = {}  # restarted parties re-admitted at the next epoch -> their checkpoint's epoch

    @property
    def any_lost(self) -> bool:
        return any(self.lost)

    def begin_epoch(self) -> None:
        """The next epoch begins: the schedule's failures and rejoins at it take effect."""
        self.epoch += 1
        self.step = 0
        fail, back = self.schedule.at(self.epoch)
        admitted, self.admitted = self.admitted, {}
        for p, after in admitted.items():  # restarted processes re-admitted at this epoch (vflbench.federation.wire)
            self.rejoin(p, restored=after)
        for p in back:
            self.rejoin(p)
        for p in fail:
            self.lose(p, 0, "scheduled")

    def lose(self, party: int, step: int, cause: str) -> None:
        if self.lost[party]:
            return
        self.lost[party] = True
        self.records.append(LossRecord(party, max(self.epoch, 1), step, cause))
        if all(self.lost):
            raise EveryPartyLost(
                f"Every party is lost (the last, party {party}, in {self.unit} {max(self.epoch, 1)}: {cause}); nothing "
                "is left to train, and nothing was written as a finished result."
            )
        self._changed()
        if self.announce:
            where = f"{self.unit} {max(self.epoch, 1)}" + (f", step {step}" if step else "")
            self.announce(
                f"party {party} lost in {where} ({cause}): its block is missing from here on; the run goes on with "
                f"{self.k - sum(self.lost)} of {self.k} parties."
            )

    def rejoin(self, party: int, restored: int | None = None) -> None:
        """``party`` takes part again from this epoch (``restored``: a restarted process, from the checkpoint
        it wrote after that many epochs)."""
        if not self.lost[party]:
            return
        self.lost[party] = False
        rec = self.lost_record(party)
        rec.rejoined, rec.restored = self.epoch, restored
        for hook in self.rejoin_hooks:
            hook(party, self.epoch)
        self._changed()
        if self.announce:
            how = "" if restored is None else f" (a restarted process, from its checkpoint after epoch {restored})"
            self.announce(f"party {party} rejoined at {self.unit} {self.epoch}{how}: its block is observed again.")

    def awaiting(self) -> list[int]:
        """The parties lost by no schedule (a process that died) and not back: a restarted one may rejoin."""
        return sorted(
            {r.party for r in self.records if r.cause != "scheduled" and r.rejoined is None and self.lost[r.party]}
        )

    def due(self, restarts: bool) -> list[int]:
        """The parties whose restarted process may come back at the coming epoch boundary: those lost by no
        schedule, and (``restarts``: their processes exit and restart) those the schedule brings back then."""
        out = set(self.awaiting())
        if restarts:
            out |= {f.party for f in self.schedule if f.rejoin == self.epoch + 1 and self.lost[f.party]}
        return sorted(out)

    def lost_record(self, party: int) -> LossRecord:
        """The party's latest loss."""
        return next(r for r in reversed(self.records) if r.party == party)

    # -- what a rejoining process takes over from the server
    def state(self) -> dict:
        return {"lost": list(self.lost), "epoch": self.epoch, "records": [r.as_dict() for r in self.records]}

    def load_state(self, state: dict) -> None:
        self.epoch = int(state["epoch"])
        self.records = [LossRecord.from_dict(d) for d in state["records"]]
        self.lost = [bool(x) for x in state["lost"]]
        self._changed()

    def _changed(self) -> None:
        self._available = {}
        for f in self.listeners:
            f(list(self.lost))

    # -- what a loss means for the run
    def available(self, device) -> torch.Tensor:
        """``[K]`` bool: the parties not lost (one tensor per device while the lost parties stay the same)."""
        key = str(device)
        if key not in self._available:
            self._available[key] = ~torch.tensor(self.lost, dtype=torch.bool, device=device)
        return self._available[key]

    def mask(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs`` ``[n, K]`` with the lost parties' blocks missing (``obs`` itself when none is lost)."""
        return obs & self.available(obs.device)[None, :] if self.any_lost else obs

    def column(self) -> str:
        """The rows' ``parties_lost``: ``2@5:15;3@8`` (party@epoch[:rejoined]), or ``none``."""
        return ";".join(r.text() for r in self.records) or "none"

    def manifest(self) -> list[dict]:
        return [r.as_dict() for r in self.records]
