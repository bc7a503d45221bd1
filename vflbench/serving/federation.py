"""Inference under party deadlines: for each batch of requests the server asks every party for its part (its bottom
models' output for the rows), waits at most the deadline for each, and predicts with the method's own missing-block
inference, a party that has not answered being a missing block (LASER-VFL fuses the subsets that answered, Standard
VFL follows its incomplete-sample rule, SecureBoost sends the sample the default way at that party's nodes).

Where parties are:
* ``inprocess``: every part in the server's process; a party's answer time is drawn from its delay model (and the
  emulated link's), the server waits for the answers that come in time (a real wait, so latency is measured), and
  computes the prediction with the late parties' blocks missing: the numbers of an offline evaluation with that
  mask, bit for bit.
* ``processes``: one process per party (:mod:`.party`) that loads only its own part and its own columns, and answers
  over TCP after its delay; the server receives their outputs and replays them into the method where they would
  have crossed (the channel). A party that is dead or late is a missing block; a restarted one answers again.

:class:`Served` is a loaded run ready to predict; :class:`InProcessParties` and :class:`ProcessParties` gather the
answers of one batch within the deadline.
"""

from __future__ import annotations

import asyncio
import io
import logging
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import VFLBenchError
from ..privacy.channel import Channel

log = logging.getLogger("vflbench.serve")

# ----------------------------------------------------------------------------- delays


@dataclass(frozen=True)
class Delay:
    """How long a party takes to answer, in milliseconds: a fixed time, or a lognormal draw per request."""

    kind: str = "fixed"  # fixed | lognormal
    ms: float = 0.0
    median: float = 0.0
    sigma: float = 0.0

    def draw(self, rng: np.random.Generator) -> float:
        if self.kind == "lognormal":
            return float(self.median * math.exp(self.sigma * rng.standard_normal()))
        return float(self.ms)

    def __str__(self) -> str:
        return f"lognormal:median={self.median:g},sigma={self.sigma:g}" if self.kind == "lognormal" else f"{self.ms:g}"


def _delay(text: str, where: str) -> Delay:
    text = text.strip()
    if text.startswith("lognormal"):
        _, _, rest = text.partition(":")
        kv = dict(p.split("=", 1) for p in rest.split(",") if "=" in p)
        unknown = set(kv) - {"median", "sigma"}
        if unknown or "median" not in kv:
            raise VFLBenchError(f"--delay {where}: a lognormal delay is lognormal:median=MS,sigma=S (got {text!r}).")
        try:
            median, sigma = float(kv["median"]), float(kv.get("sigma", 0.5))
        except ValueError:
            raise VFLBenchError(f"--delay {where}: median and sigma take numbers, got {text!r}.") from None
        if median < 0 or sigma < 0:
            raise VFLBenchError(f"--delay {where}: median and sigma must be >= 0, got {text!r}.")
        return Delay("lognormal", median=median, sigma=sigma)
    try:
        ms = float(text)
    except ValueError:
        raise VFLBenchError(
            f"--delay {where}: give milliseconds (party3=2000) or lognormal:median=MS,sigma=S, got {text!r}."
        ) from None
    if ms < 0 or ms > 3_600_000:
        raise VFLBenchError(f"--delay {where}: milliseconds in [0, 3600000], got {ms:g}.")
    return Delay("fixed", ms=ms)


def parse_delays(items: list[str] | str | None, k: int) -> list[Delay]:
    """``--delay`` (repeated, or ;-separated): ``partyK=SPEC`` for one party, ``SPEC`` for every party (a party's own
    item wins); SPEC is milliseconds or ``lognormal:median=MS,sigma=S``."""
    if isinstance(items, str):
        items = [items]
    out = [Delay() for _ in range(k)]
    every: Delay | None = None
    own: dict[int, Delay] = {}
    for item in [p for i in items or [] for p in str(i).split(";") if p.strip()]:
        head, eq, spec = item.partition("=")
        if eq and head.strip().startswith("party"):
            try:
                j = int(head.strip()[5:])
            except ValueError:
                raise VFLBenchError(f"--delay {item}: name a party as partyK, K in 0..{k - 1}.") from None
            if not 0 <= j < k:
                raise VFLBenchError(f"--delay {item}: party {j} is not a party of this run (0..{k - 1}).")
            own[j] = _delay(spec, item)
        else:
            every = _delay(item, item)
    for j in range(k):
        out[j] = own.get(j, every or Delay())
    return out


@dataclass(frozen=True)
class Link:
    """The emulated network between a party and the server (--net-latency ms one way, --net-bandwidth Mbit/s)."""

    latency_ms: float = 0.0
    bandwidth_mbps: float = 0.0

    def ms(self, nbytes: int) -> float:
        wire = 0.0 if not self.bandwidth_mbps else nbytes * 8 / (self.bandwidth_mbps * 1e6) * 1e3
        return 2 * self.latency_ms + wire


# ----------------------------------------------------------------------------- a loaded run


class Served:
    """A saved run loaded for inference: its resolved run, its prepared test data, the built method with the parts
    this process holds (``parts``: every part, or one party's)."""

    def __init__(self, run_dir: Path, parts: list[str] | None = None, party: int | None = None):
        import torch

        from ..runs.config import config_from_manifest, resolve
        from ..training.pipeline import build, prepare
        from .model_files import load_part, model_index

        self.run_dir = Path(run_dir)
        manifest_path = self.run_dir / "manifest.json"
        if not manifest_path.exists():
            raise VFLBenchError(
                f"{run_dir} is not a finished run folder (no manifest.json); give RUN = a run's folder."
            )
        import json

        self.manifest = json.loads(manifest_path.read_text())
        index = model_index(self.run_dir)
        run = resolve(config_from_manifest(self.manifest))
        if run.key != index["run_key"]:
            raise VFLBenchError(
                f"{run_dir}: the saved model was trained as run {index['run_key']}, and this vflbench resolves its "
                f"manifest as {run.key} (a behaviour bump since?); train it again with --save-model."
            )
        self.run = run
        torch.set_num_threads(1)
        self.inputs = prepare(run, "cpu")
        self.method = build(run, self.inputs)
        names = list(index["parts"]) if parts is None else parts
        for name in names:
            part = load_part(self.run_dir, name)
            try:
                self.method.load_part(name, part)
            except (KeyError, TypeError, ValueError, IndexError, RuntimeError, AttributeError) as e:
                raise VFLBenchError(
                    f"{self.run_dir / 'model' / name}.*: not a part of this run's model ({type(e).__name__}: "
                    f"{str(e)[:120]}); save the model again."
                ) from None
        self.party = party
        if party is not None:  # a party process keeps only its own columns
            x = self.inputs.test.x
            for j in range(x.shape[0]):
                if j != party:
                    x[j].zero_()
        self.k = int(run.parties)
        info = self.inputs.prep.data.info
        self.n_classes, self.positive = info.n_classes, info.positive_class
        self.n_test = int(self.inputs.test.n)
        self.ids = self._test_ids()
        self.lost = [int(k) for k in index.get("lost_parties", [])]
        self.held = self._held()
        self.rounds = int(self.method.prediction_rounds())
        self.malformed: dict[int, int] = {}  # per party, the batches its answer was malformed in

    def _held(self) -> np.ndarray:
        """[n_test, K]: the blocks a served prediction can have, as offline evaluation has them: a party's block of
        a sample it does not hold (party files) is missing, and so is every block of a party still lost when
        training ended (``--fail-party``); the parties late for a request are taken out on top (:meth:`predict`)."""
        held = np.ones((self.n_test, self.k), dtype=bool)
        structural = getattr(self.inputs.prep.data, "structural", None)
        if structural is not None:
            held &= np.asarray(structural["test"], dtype=bool)
        held[:, self.lost] = False
        return held

    def _test_ids(self) -> dict[str, int] | None:
        ids = getattr(self.inputs.prep.data, "test_ids", None)
        return None if ids is None else {str(v): i for i, v in enumerate(ids)}

    def rows_for(self, request: dict[str, Any], max_rows: int | None = None) -> tuple[np.ndarray, list[Any]]:
        """The test rows a request names, and how to label them in the answer (its rows, or its IDs). Row numbers
        are JSON integers (not booleans, not floats), IDs strings or integers; a request naming more than
        ``max_rows`` rows raises :class:`TooManyRows`. Messages quote at most a few characters of the input."""
        given = [k for k in ("split", "rows", "ids") if request.get(k) is not None]
        if len(given) != 1:
            raise ValueError('give exactly one of {"split": "test"}, {"rows": [...]} or {"ids": [...]}')
        what = given[0]
        if what == "split":
            if request["split"] != "test":
                raise ValueError(f'"split" takes "test" (the run\'s held-out samples), got {_short(request["split"])}')
            if max_rows is not None and self.n_test > max_rows:
                raise TooManyRows(f'"split" names {self.n_test} rows; a request may name at most {max_rows}')
            rows = np.arange(self.n_test)
            return rows, rows.tolist()
        items = request[what]
        if not isinstance(items, list) or not items:
            raise ValueError(
                f'"{what}" takes a non-empty list of '
                + ("test row numbers (integers)" if what == "rows" else "sample IDs")
            )
        if max_rows is not None and len(items) > max_rows:
            raise TooManyRows(f'"{what}" names {len(items)} rows; a request may name at most {max_rows}')
        if what == "rows":
            bad = next((v for v in items if type(v) is not int), None)  # bool is not a row number
            if bad is not None:
                raise ValueError(f'"rows" takes a non-empty list of test row numbers (integers), got {_short(bad)}')
            out = [v for v in items if not 0 <= v < self.n_test]
            if out:
                raise ValueError(f"row {_short(out[0])} is not a test row of this run (0 .. {self.n_test - 1})")
            return np.asarray(items, dtype=np.int64), list(items)
        if self.ids is None:
            raise ValueError('this run\'s data has no IDs (it was not trained on party files); use {"rows": [...]}')
        bad = next((v for v in items if type(v) not in (str, int)), None)
        if bad is not None:
            raise ValueError(f'"ids" takes sample IDs (strings or integers), got {_short(bad)}')
        ids = [str(i) for i in items]
        missing = next((i for i in ids if i not in self.ids), None)
        if missing is not None:
            raise ValueError(f"ID {_short(missing)} is not a test sample of this run")
        return np.asarray([self.ids[i] for i in ids], dtype=np.int64), ids

    def predict(self, rows: np.ndarray, answered: np.ndarray, received=None) -> tuple[np.ndarray, ...]:
        """(predicted, score, predictors) of test ``rows`` with the blocks of parties not ``answered`` missing (and
        those the run never has: :meth:`_held`); ``received``: what answering parties sent (processes), replayed
        where it crosses."""
        return self.predict_answered(rows, answered, received)[1]

    def predict_answered(
        self, rows: np.ndarray, answered: np.ndarray, received=None
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """``(parties used, (predicted, score, predictors))``. A party whose answer is malformed (a crossing of the
        wrong shape or type, values not finite, too few or too many crossings) is missing for this batch, as a late
        one is, and logged; the batch is predicted again without it."""
        answered = np.asarray(answered, dtype=bool).copy()
        received = None if received is None else {k: v for k, v in received.items() if answered[k]}
        while True:
            try:
                return answered, self._predict(rows, answered, received)
            except MalformedAnswer as e:
                log.warning("party %d's answer is malformed (%s): its block is missing for this batch", e.party, e)
                self.malformed[e.party] = self.malformed.get(e.party, 0) + 1
                answered[e.party] = False
                received.pop(e.party, None)

    def _predict(self, rows: np.ndarray, answered: np.ndarray, received) -> tuple[np.ndarray, ...]:
        import torch

        from ..methods.base import Batch
        from ..results.predictions import answers

        m = self.method
        m.train(False)
        m.channel.mode = "eval"
        if received is not None:
            m.channel = ReplayChannel(self.k, received)
        idx = torch.as_tensor(rows, dtype=torch.long)
        obs = torch.as_tensor(self.mask(rows, answered))
        m.store.begin()
        with torch.no_grad():
            p = m.predict(Batch(self.inputs.test.batch(idx, None), obs, None, idx, 0))
        if received is not None:
            m.channel.check_all_used()
        scores = None if p.scores is None else p.scores.float().cpu().numpy()
        return answers(p.preds.cpu().numpy(), p.valid.cpu().numpy(), scores, self.n_classes, self.positive)

    def mask(self, rows: np.ndarray, answered: np.ndarray) -> np.ndarray:
        """[len(rows), K]: the blocks a prediction of ``rows`` has (offline evaluation's, less the parties not
        ``answered``): what the method predicts with, and each answer's ``parties``."""
        return self.held[rows] & np.asarray(answered, dtype=bool)[None, :]

    def answer_bytes(self, n_rows: int) -> int:
        """The bytes of one party's answer to one round for ``n_rows`` rows (what the emulated link carries): its
        representations at the cut (float32), or for a tree method one bit per (row, tree) query."""
        if self.method.trains_whole:  # (gbdt has no federated trees: one bit a row)
            trees = max(1, len(getattr(getattr(self.method, "model", None), "trees", None) or ()))
            return -(-n_rows * trees // 8)
        cut = int(self.manifest["config"]["model"].get("cut", 16))
        return n_rows * cut * 4

    def party_output(self, rows: np.ndarray) -> list[np.ndarray]:
        """A party process's answer for ``rows``: what its members send where the method's prediction crosses to
        the server (the channel's crossings, in order: its own rows of each)."""
        import torch

        from ..methods.base import Batch

        m = self.method
        cap = CaptureChannel(self.k, self.party)
        m.channel = cap
        m.train(False)
        idx = torch.as_tensor(rows, dtype=torch.long)
        obs = torch.ones(len(rows), self.k, dtype=torch.bool)
        m.store.begin()
        with torch.no_grad():
            m.predict(Batch(self.inputs.test.batch(idx, None), obs, None, idx, 0))
        return cap.captured


class CaptureChannel(Channel):
    """A party process's channel: records its own rows of each crossing (what it would send)."""

    def __init__(self, k: int, party: int):
        super().__init__(k)
        self.party = party
        self.captured: list[np.ndarray] = []

    def up(self, reps, sent, party_of=None):
        owner = np.arange(reps.shape[0]) if party_of is None else party_of.cpu().numpy()
        self.captured.append(reps[owner == self.party].detach().float().cpu().numpy())
        return reps


class TooManyRows(ValueError):
    """A request names more rows than the server takes in one (the message says how many it may)."""


def _short(v: Any, n: int = 40) -> str:
    """``repr(v)``, cut to ``n`` characters: what an error message quotes of a client's input."""
    r = repr(v)
    return r if len(r) <= n else r[: n - 3] + "..."


class MalformedAnswer(Exception):
    """What a party process sent cannot be what its members compute (the reason is the message)."""

    def __init__(self, party: int, why: str):
        super().__init__(why)
        self.party = party


class ReplayChannel(Channel):
    """The server's channel in a processes federation: each crossing's rows of an answering party are what that
    party sent (the server's own computation for them had no block). Each crossing is checked first: the shape the
    server's own computation has for those rows, floating point, finite (:class:`MalformedAnswer` otherwise)."""

    def __init__(self, k: int, received: dict[int, list[np.ndarray]]):
        super().__init__(k)
        self.received = received
        self.calls_made = 0

    def up(self, reps, sent, party_of=None):
        import torch

        i = self.calls_made
        self.calls_made += 1
        out = reps.clone()
        owner = np.arange(reps.shape[0]) if party_of is None else party_of.cpu().numpy()
        for k, parts in self.received.items():
            if i >= len(parts):
                raise MalformedAnswer(k, f"{len(parts)} crossings sent, and the prediction has more")
            rows = np.flatnonzero(owner == k)
            got = parts[i]
            want = (len(rows), *reps.shape[1:])
            if not isinstance(got, np.ndarray) or got.dtype.kind != "f" or tuple(got.shape) != want:
                what = f"{getattr(got, 'dtype', type(got).__name__)} {tuple(getattr(got, 'shape', ()))}"
                raise MalformedAnswer(k, f"crossing {i} is {what}, not float {want}")
            if not np.isfinite(got).all():
                raise MalformedAnswer(k, f"crossing {i} holds values that are not finite")
            out[torch.as_tensor(rows)] = torch.as_tensor(got, dtype=reps.dtype, device=reps.device)
        return out

    def check_all_used(self) -> None:
        for k, parts in self.received.items():
            if len(parts) != self.calls_made:
                raise MalformedAnswer(k, f"{len(parts)} crossings sent, and the prediction has {self.calls_made}")


# ----------------------------------------------------------------------------- gathering a batch's answers


class InProcessParties:
    """Every part here; each party's answer time drawn from its delay (plus the emulated link's)."""

    runtime = "inprocess"

    def __init__(self, served: Served, delays: list[Delay], link: Link, seed: int = 0):
        self.served, self.delays, self.link = served, delays, link
        self.rng = np.random.default_rng(seed)
        self.down: set[int] = set()  # parties marked down (tests; a lost party in one process)

    def alive(self) -> list[bool]:
        return [k not in self.down for k in range(self.served.k)]

    async def gather(self, rows: np.ndarray, deadline_ms: float):
        """The parties in time for this batch, after waiting as the server would: each round of the method's
        prediction (:attr:`Served.rounds`), every party still in time answers after a fresh draw of its delay plus
        its link's time; the server waits for the last of them, or the deadline when one is late, and a party late
        in any round is a missing block for the whole batch (its block is missing from every round's answer)."""
        answered, wait_ms = self.timeline(len(rows), deadline_ms)
        await asyncio.sleep(wait_ms / 1e3)
        return answered, None

    def timeline(self, n_rows: int, deadline_ms: float) -> tuple[np.ndarray, float]:
        """``(answered [K], the server's wait in ms)`` of one batch of ``n_rows`` rows (see :meth:`gather`)."""
        link_ms = self.link.ms(self.served.answer_bytes(n_rows))
        answered = np.array([k not in self.down for k in range(self.served.k)])  # a dead party: refused at once
        wait = 0.0
        for _ in range(self.served.rounds):
            times = {k: self.delays[k].draw(self.rng) + link_ms for k in np.flatnonzero(answered)}
            late = [k for k, t in times.items() if t > deadline_ms]
            answered[late] = False
            wait += deadline_ms if late else max(times.values(), default=0.0)
        return answered, wait

    async def close(self) -> None:
        return None


class ProcessParties:
    """One process per party (``python -m vflbench.serving.party``), each loading only its own part; the server asks
    them over TCP and keeps what comes within the deadline. A party process that dies is restarted (``restart``) and
    answers again once it is up. The party processes end with the server: :meth:`close`, a failed start, or the
    server's death by any signal (each party watches its parent and stops when it is gone); their temporary folder
    goes with them."""

    runtime = "processes"

    def __init__(self, run_dir: Path, k: int, delays: list[Delay], link: Link, seed: int = 0, restart: bool = True):
        self.run_dir, self.k, self.delays, self.link, self.seed = Path(run_dir), k, delays, link, seed
        self.restart = restart
        self.ports = [_free_port() for _ in range(k)]
        self.procs: list[subprocess.Popen | None] = [None] * k
        import tempfile

        # the party processes' stderr (not the run's folder); removed by close, or by the last party to go
        self.log_dir = Path(tempfile.mkdtemp(prefix="vflbench-serve-"))
        self.logs = [self.log_dir / f"party{j}.log" for j in range(k)]
        self.starts = [0] * k

    def start(self, j: int | None = None) -> None:
        for k in range(self.k) if j is None else [j]:
            cmd = [
                sys.executable, "-m", "vflbench.serving.party", str(self.run_dir), "--party", str(k), "--port",
                str(self.ports[k]), "--delay", str(self.delays[k]), "--net-latency", str(self.link.latency_ms),
                "--net-bandwidth", str(self.link.bandwidth_mbps), "--seed", str(self.seed + 1000 * k + self.starts[k]),
                "--parent", str(os.getpid()), "--log-dir", str(self.log_dir),
            ]  # fmt: skip
            self.starts[k] += 1
            with open(self.logs[k], "w") as err:
                self.procs[k] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        t0 = time.monotonic()
        for k in range(self.k):
            while not self._up(k):
                if self.procs[k].poll() is not None:
                    tail = self.logs[k].read_text().strip().splitlines()[-1:] if self.logs[k].exists() else []
                    raise VFLBenchError(f"party {k}'s serving process stopped: {tail[0] if tail else 'no output'}")
                if time.monotonic() - t0 > timeout_s:
                    raise VFLBenchError(f"party {k}'s serving process did not start within {timeout_s:.0f}s.")
                time.sleep(0.2)

    def _up(self, k: int) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.ports[k]), timeout=0.5):
                return True
        except OSError:
            return False

    def alive(self) -> list[bool]:
        return [p is not None and p.poll() is None for p in self.procs]

    def kill(self, k: int) -> None:
        """Kill party ``k``'s process (tests, the fault study)."""
        if self.procs[k] is not None:
            self.procs[k].kill()
            self.procs[k].wait()

    def supervise(self) -> None:
        """Restart every party process that died (called between batches)."""
        if not self.restart:
            return
        for k, p in enumerate(self.procs):
            if p is not None and p.poll() is not None:
                self.start(k)

    async def _ask(self, k: int, rows: np.ndarray) -> list[np.ndarray]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.ports[k])
        try:
            data = rows.astype(np.int32).tobytes()
            writer.write(len(data).to_bytes(8, "little") + data)
            await writer.drain()
            n = int.from_bytes(await reader.readexactly(8), "little")
            if n > MAX_ANSWER_BYTES:
                raise MalformedAnswer(k, f"an answer of {n} bytes announced (at most {MAX_ANSWER_BYTES})")
            try:
                return unpack_arrays(await reader.readexactly(n))
            except (ValueError, OSError, KeyError, EOFError) as e:  # not an .npz of plain arrays
                raise MalformedAnswer(k, f"not arrays ({type(e).__name__})") from None
        finally:
            writer.close()

    async def gather(self, rows: np.ndarray, deadline_ms: float):
        self.supervise()
        tasks = {k: asyncio.ensure_future(self._ask(k, rows)) for k in range(self.k)}
        done, pending = await asyncio.wait(tasks.values(), timeout=deadline_ms / 1e3)
        for t in pending:
            t.cancel()
        answered = np.zeros(self.k, dtype=bool)
        received: dict[int, list[np.ndarray]] = {}
        for k, t in tasks.items():
            if t in done and not t.cancelled() and t.exception() is None:
                answered[k] = True
                received[k] = t.result()
            elif t in done and isinstance(t.exception(), MalformedAnswer):
                log.warning(
                    "party %d's answer is malformed (%s): its block is missing for this batch", k, t.exception()
                )
        return answered, received

    async def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        """End every party process (at most 10 s each, then killed) and remove their temporary folder."""
        import shutil

        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(STOP_SIGNAL)  # not SIGTERM: that one tells a party its server died
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(self.log_dir, ignore_errors=True)


# how the server ends its party processes (SIGTERM is the signal of the server's death: vflbench.serving.party)
STOP_SIGNAL = getattr(signal, "SIGUSR1", signal.SIGTERM)
MAX_ANSWER_BYTES = 1 << 30  # a party's answer announcing more than this is malformed (nothing that large is read)


def die_with_parent(parent: int) -> None:
    """In a party process: end it when the server's process ``parent`` dies, by any signal (SIGKILL included). On
    Linux the kernel sends SIGTERM at the parent's death (PR_SET_PDEATHSIG, asked for here, in the child itself);
    everywhere, the party's loop also watches its parent (:mod:`.party`)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    if os.getppid() != parent:  # it died before the request above took effect
        raise SystemExit(0)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pack_arrays(arrays: list[np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, *arrays)
    return buf.getvalue()


def unpack_arrays(data: bytes) -> list[np.ndarray]:
    with np.load(io.BytesIO(data)) as z:
        return [z[f"arr_{i}"] for i in range(len(z.files))]


def environment_threads() -> None:
    """One intra-op thread per serving process (many processes share the machine)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
