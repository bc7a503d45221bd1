"""Where the party-to-server boundary runs: inside one process (``inprocess``, the default) or between
processes (``processes``), one per party plus one for the server, over ``torch.distributed`` (gloo).

The method code is the same in both. Under ``processes`` every process runs the same deterministic
program (the method, the trainer, the seeded streams), but each holds only its share of the data
(:func:`place`): party ``k`` (rank ``k + 1``) the columns of its own block, the server (rank 0) the
labels and no feature. This module holds the programs of the two roles (:func:`serve`, :func:`join`:
connect, check that every process resolved the same run on the same device, then run the pipeline's
``execute``, passed in) and the local launcher of ``--runtime processes`` (:func:`run_processes`).
What crosses, and how it is measured, is :mod:`vflbench.federation.wire`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from ..core.errors import VFLBenchError

# the runtime's face
from ..core.role import (  # noqa: F401
    RUNTIMES,
    SERVER,
    current_wire,
    federated,
    parse_rendezvous,
    refusal,
    set_federated,
    set_wire,
)
from ..methods import METHODS
from ..methods.base import Method
from ..runs.devices import choose_device
from .rejoin import form_group, request_rejoin
from .wire import PartyFailed, Wire  # noqa: F401  (the runtime's face)
from .wire_channels import WireChannel, WirePBMChannel, uint_dtype, wire_channel, wire_pbm_channel  # noqa: F401


# ----------------------------------------------------------------------------- processes
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def connect(rank: int, world: int, rendezvous: str, timeout_s: float, group: bool = True):
    """Reach the rendezvous store at ``rendezvous`` (the server hosts it) and, with ``group``, form the first
    process group on it; returns the store (a restarted party forms its group later, once re-admitted)."""
    import torch.distributed as dist

    host, port = parse_rendezvous(rendezvous)
    try:
        store = dist.TCPStore(host, port, None, rank == SERVER, timedelta(seconds=timeout_s), wait_for_workers=False)
        if group:
            form_group(store, 0, rank, world, timeout_s)
    except (RuntimeError, ValueError) as e:
        raise VFLBenchError(
            f"Could not join the federation at {rendezvous} as rank {rank} of {world} within {timeout_s:.0f}s: "
            f"{str(e).splitlines()[0][:160]}. Start the server and every party with the same --rendezvous."
        ) from None
    return store


DEVICE_CODES = ("cpu", "cuda")
MAX_RESTARTS = 3  # --restart-lost: restarts of one party's process before the launcher gives up on it
PARTY_PATIENCE = 3  # a party's timeout, in multiples of the server's (see join)


def check_same_run(wire: Wire, key: str, device: str = "cpu") -> list[str]:
    """Every process must run the same resolved run on the same kind of device: the parties send their
    run key and device to the server, which refuses any difference (a party on another device would
    give other numbers, silently). Returns the parties' devices (server side; [] on a party)."""
    dev = str(device).split(":")[0]
    code = torch.tensor([int(key, 16), DEVICE_CODES.index(dev)], dtype=torch.int64)
    if wire.rank == SERVER:
        devices = []
        for r in range(1, wire.world):
            got = wire.recv((2,), torch.int64, r, None)
            theirs = DEVICE_CODES[int(got[1])] if 0 <= int(got[1]) < len(DEVICE_CODES) else "?"
            why = (
                f"party {r - 1} resolved another run (run key {int(got[0]):012x}, the server's {key}); give every "
                "process the same flags."
                if int(got[0]) != int(code[0])
                else f"party {r - 1} computes on {theirs}, the server on {dev}: the numbers would differ from one "
                "process's; "
                f"give every process the same --device."
                if theirs != dev
                else None
            )
            if why:
                msg = torch.tensor([0], dtype=torch.int64)
                for q in range(1, wire.world):
                    wire.send(msg, q, None)
                raise VFLBenchError(why)
            devices.append(theirs)
        for q in range(1, wire.world):
            wire.send(torch.tensor([1], dtype=torch.int64), q, None)
        return devices
    wire.send(code, SERVER, None)
    if not int(wire.recv((1,), torch.int64, SERVER, None)):
        raise VFLBenchError(
            "the server resolved another run than this party, or computes on another device; give every process the "
            "same flags."
        )
    return []


def place(inputs, rank: int, labels_at_parties: bool = False) -> None:
    """Keep only this process's share of the data: a party its own block (and no label, unless the
    method's parties train alone on the labels: Local, Ensemble), the server the labels (no feature)."""
    keep = rank - 1  # -1 for the server: no block
    wrong = [d for d, _ in getattr(inputs, "test_wrong", {}).values()]  # the test blocks made wrong, per setting
    for data in (inputs.train.blocks, inputs.test, inputs.val, *wrong):
        if data is None:
            continue
        for k in range(data.x.shape[0]):
            if k != keep:
                data.x[k].zero_()
    if rank != SERVER and not labels_at_parties:
        inputs.train.y = torch.zeros_like(inputs.train.y)
        inputs.y_test = inputs.y_test * 0
        if inputs.y_val is not None:
            inputs.y_val = inputs.y_val * 0


def _party_entry(
    started,
    rank: int,
    rendezvous: str,
    config: dict[str, Any],
    timeout_s: float,
    device: str,
    env: dict[str, str],
    cwd: str,
    log: str,
    execute,
    rejoin: bool = False,
    checkpoints: str | None = None,
) -> None:
    """A party of a local launch, in a process forked from the launcher's fork server: what ``vflbench
    party --run-file`` does (resolve the recorded run, :func:`join` it), with the launcher's environment
    and working directory, its stderr in ``log`` and the exit status ``vflbench party`` would give."""
    started.set()  # the launcher waits for this: a process that died before it never ran (see launch_parties)
    os.environ.clear()
    os.environ.update(env)  # test hooks and data paths as a fresh process would inherit them
    os.chdir(cwd)
    with open(log, "w") as f:
        os.dup2(f.fileno(), 2)
    with open(os.devnull, "w") as f:
        os.dup2(f.fileno(), 1)
    from ..runs.config import config_from_manifest, resolve

    set_federated(True)  # this process holds its own party's share only
    try:
        run = resolve(config_from_manifest({"config": config}))
        join(run, rank, rendezvous, execute, timeout_s, device, rejoin=rejoin, checkpoint_dir=checkpoints)
    except VFLBenchError as e:
        sys.stderr.write(f"error: {e}\n")
        sys.stderr.flush()
        os._exit(getattr(e, "exit_code", 2))
    sys.stderr.flush()
    os._exit(0)


_FORKS: list[Any] = []  # the multiprocessing context of local launches (its fork server starts once per process)


def _fork_context():
    """A ``forkserver`` context whose server has imported the pipeline once: every party of every later
    launch from this process is a fork of it, not a fresh interpreter importing torch again."""
    if not _FORKS:
        import multiprocessing as mp

        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["vflbench.training.pipeline"])
        _FORKS.append(ctx)
    return _FORKS[0]


class LocalParty:
    """One party process of a local launch (:func:`launch_parties`): its exit status and last error line."""

    def __init__(self, k: int, proc, log: str):
        self.k, self.proc, self.log = k, proc, log

    def poll(self) -> int | None:
        return None if self.proc.is_alive() else self.proc.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.proc.join(timeout)
        if self.proc.is_alive():
            raise subprocess.TimeoutExpired(f"party {self.k}", timeout or 0)
        return self.proc.exitcode

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()

    def last_line(self) -> str:
        try:
            lines = [ln for ln in open(self.log).read().splitlines() if ln.strip()]
        except OSError:
            lines = []
        return lines[-1].strip() if lines else "no message"


def launch_parties(
    run,
    rendezvous: str,
    timeout_s: float,
    execute,
    device: str = "cpu",
    only: int | None = None,
    logs: str | None = None,
) -> list[LocalParty]:
    """Start one party process per party on this machine, each given the resolved run (forked from the
    launcher's fork server; a deployment starts ``vflbench party`` on each party's machine instead). Each
    checkpoints under its log folder. ``only``: restart that party alone, rejoining (its log folder ``logs``)."""
    import json
    import tempfile

    ctx = _fork_context()
    config = json.loads(json.dumps(run.to_dict(), default=str))
    logs = logs or tempfile.mkdtemp(prefix="vflbench-parties-")
    procs, flags = [], []
    env = dict(os.environ)
    if only is not None:
        env.pop("VFLBENCH_KILL_PARTY", None)  # the test hook kills a process once, not its restart
    keep = logs if run.settings.get("restart_lost") else None  # checkpoints: only a restart reads them
    for k in range(run.parties) if only is None else [only]:
        log = os.path.join(logs, f"party{k}.log" if only is None else f"party{k}.rejoin{time.monotonic_ns()}.log")
        started = ctx.Event()
        args = (started, k, rendezvous, config, timeout_s, device, env, os.getcwd(), log, execute)
        p = ctx.Process(
            target=_party_entry, args=(*args, only is not None, keep), name=f"vflbench-party{k}", daemon=False
        )
        p.start()
        procs.append(LocalParty(k, p, log))
        flags.append(started)
    for party, started in zip(
        procs, flags, strict=True
    ):  # each party signals once it runs: fail now, not at the rendezvous timeout
        while not started.wait(0.05):
            if party.poll() is not None:
                for q in procs:
                    if q.poll() is None:
                        q.kill()
                raise VFLBenchError(
                    f"party {party.k}'s process stopped before it started (status {party.poll()}). A Python script "
                    "that starts "
                    'a run with --runtime processes must guard its entry with `if __name__ == "__main__":` (the rule '
                    "of "
                    "multiprocessing's fork server: it imports the main script again); the traceback is above."
                )
    return procs


def check(run) -> None:
    mcls = METHODS.get(run.method)
    why = refusal(mcls, run)
    if why:
        raise VFLBenchError(f"{mcls.display} cannot run with --runtime processes: {why}.")


def _finish(wire: Wire, method_summary: dict[str, Any], manifest: dict[str, Any]) -> None:
    """The manifest's ``runtime`` block: measured traffic beside the accounted, and the time split."""
    measured = wire.summary()
    keys = [f"bytes_{ph}_{d}_per_party" for ph in ("train", "eval", "monitor") for d in ("up", "down")]
    agrees = {k: measured[k] == method_summary.get(k) for k in keys}
    tm = manifest["timings"]
    busy = tm.get("train_s", 0.0) + tm.get("eval_s", 0.0)
    manifest["runtime"] = {
        "name": "processes",
        "world_size": wire.world,
        "backend": "gloo",
        "measured": measured,
        "measured_equals_accounted": all(agrees.values()),
        "mismatch": [k for k, ok in agrees.items() if not ok],
        "framing": {
            "messages": measured["messages"],
            "control_bytes": measured["control_bytes"],
            "control_bytes_by_phase": measured.get("control_bytes_by_phase", {}),
            "note": "payload bytes are the tensors' own; gloo's per-message transport header is not observable from "
            "Python and is not included; control bytes of phase align are the entity alignment's (PSI messages, "
            "the intersection sent to each party)",
        },
    }
    tm["comm_s"] = measured["comm_s"]  # the server's time inside send/receive calls (waiting for the parties included)
    tm["compute_s"] = max(busy - measured["comm_s"], 0.0)


def serve(
    run, rendezvous: str, execute, timeout_s: float = 60.0, device: str = "auto", callbacks=(), expect_restarts=False
):
    """This process is the server (rank 0) of a run whose parties are processes: wait for the
    parties, check they run the same run, train and evaluate with ``execute`` (the pipeline's
    :func:`~vflbench.training.pipeline.execute`, passed in: the runtime sits below the pipeline); returns
    (CSV rows, manifest)."""
    import torch.distributed as dist

    check(run)
    world = run.parties + 1
    store = connect(SERVER, world, rendezvous, timeout_s)
    try:
        wire = Wire(SERVER, world, run.net_latency, run.net_bandwidth, timeout_s)
        dev, _ = choose_device(device, run.model.get("arch", "mlp"))
        wire.store, wire.run_key, wire.device = store, run.key, str(dev).split(":")[0]
        wire.expect_restarts, wire.restarts = expect_restarts, bool(run.settings.get("restart_lost"))
        party_devices = check_same_run(wire, run.key, str(dev))
        wire.comm_s = 0.0  # communication of the run itself (alignment, training, evaluation)
        set_wire(wire)
        rows, manifest = execute(run, device, callbacks, wire)
        wire.flush()
        _finish(wire, manifest["communication"], manifest)
        manifest["runtime"]["party_devices"] = party_devices
        manifest["runtime"]["labels_at_parties"] = (
            METHODS.get(run.method).party_losses is not Method.party_losses
        )  # Local, Ensemble: parties train alone on the labels
        return rows, manifest
    finally:
        set_wire(None)
        if dist.is_initialized():
            dist.destroy_process_group()


def join(
    run,
    party: int,
    rendezvous: str,
    execute,
    timeout_s: float = 60.0,
    device: str = "auto",
    on_joined=None,
    rejoin: bool = False,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """This process is party ``party`` (rank ``party + 1``): it trains its own models from the
    server's gradients with ``execute`` (passed in, as to :func:`serve`); returns its measured traffic.
    ``on_joined()`` is called once every process has checked that they run the same run. With
    ``checkpoint_dir`` the party checkpoints its state there at every epoch boundary of a run that goes on
    without a lost party; ``rejoin``: this is a restarted process, which reloads that checkpoint and asks
    the server to take it back (vflbench.federation.wire, "rejoin")."""
    import torch.distributed as dist

    check(run)
    if not 0 <= party < run.parties:
        raise VFLBenchError(f"--rank {party} is not a party of this run (0 .. {run.parties - 1}).")
    if rejoin and not checkpoint_dir:
        raise VFLBenchError("--rejoin reloads the party's checkpoint: give the --checkpoint-dir it wrote to.")
    world = run.parties + 1
    # a party waits three times as long as the server: when another party goes silent, the server (waiting
    # timeout_s for it) finds it lost and tells this party to drop the step before this party's own wait ends
    store = connect(party + 1, world, rendezvous, PARTY_PATIENCE * timeout_s, group=not rejoin)
    try:
        wire = Wire(party + 1, world, run.net_latency, run.net_bandwidth, PARTY_PATIENCE * timeout_s)
        dev, _ = choose_device(device, run.model.get("arch", "mlp"))
        wire.store, wire.run_key, wire.device = store, run.key, str(dev).split(":")[0]
        wire.restarts = bool(run.settings.get("restart_lost"))
        if checkpoint_dir:
            wire.checkpoint = os.path.join(checkpoint_dir, f"party{party}.pt")
        if rejoin:
            wire.resuming = request_rejoin(wire, run.key, str(dev), Path(wire.checkpoint))
        else:
            # test hook: METHOD:PARTY:EPOCH kills that party process at that epoch
            fault = os.environ.get("VFLBENCH_KILL_PARTY", "")
            if fault.count(":") == 2 and fault.split(":")[:2] == [run.method, str(party)]:
                wire.die_at_epoch = int(fault.split(":")[2])
            check_same_run(wire, run.key, str(dev))
        if on_joined is not None:
            on_joined()
        set_wire(wire)
        execute(run, device, (), wire)
        return wire.summary()
    finally:
        set_wire(None)
        if dist.is_initialized():
            dist.destroy_process_group()


def run_processes(run, execute, device: str = "auto", callbacks=(), timeout_s: float = 60.0):
    """``vflbench run --runtime processes``: start the parties on this machine, serve them, and
    return the server's (CSV rows, manifest). A party that fails stops the run (PartyFailed, exit 3), unless the
    run goes on without it (vflbench.runs.faults: its manifest then records the loss). With ``--restart-lost`` a party
    process that dies is started again at once, rejoining from its checkpoint (vflbench.federation.wire, "rejoin")."""
    check(run)
    if run.dataset.startswith("aligned:"):  # every party runs on this machine: its file must be here
        from ..core.paths import user_path
        from ..data.alignment import check_local_id_forms, parse_party_data

        for name, path in parse_party_data(run.dataset.split(":", 1)[1]):
            if not user_path(path).exists():
                raise VFLBenchError(f"--party-data {name}={path}: no such file; check the path.")
        check_local_id_forms(run.dataset, run.data_options)
    url = f"tcp://127.0.0.1:{free_port()}"
    first = launch_parties(run, url, timeout_s, execute, device)
    logs = os.path.dirname(first[0].log)
    procs = list(first)  # each party's current process (a restarted one replaces the one that died)
    everyone = list(first)
    restart = bool(run.settings.get("restart_lost"))
    stop = threading.Event()

    restarts = [0] * run.parties

    def restarter() -> None:  # the launcher's own restart: a party process that died comes back, rejoining
        while not stop.wait(0.05):
            for k, p in enumerate(procs):
                # died (a signal, a crash): not a clean exit, nor a refusal or bad input (2), which a restart repeats
                if p.poll() not in (None, 0, 2) and not stop.is_set() and restarts[k] < MAX_RESTARTS:
                    restarts[k] += 1
                    again = launch_parties(run, url, timeout_s, execute, device, only=k, logs=logs)[0]
                    procs[k] = again
                    everyone.append(again)

    watcher = threading.Thread(target=restarter, name="vflbench-restarter", daemon=True) if restart else None
    if watcher is not None:
        watcher.start()
    try:
        try:
            out = serve(run, url, execute, timeout_s, device, callbacks, expect_restarts=restart)
        except (PartyFailed, VFLBenchError) as e:
            stop.set()  # no restart while the failure is reported
            raise _with_party_error(e, procs) from None
        stop.set()
        if watcher is not None:
            watcher.join()
        # lost when the run ended: dead, exited, silent, or restarted too late (stopped now)
        lost = {rec["party"] for rec in out[1].get("party_losses", []) if rec.get("rejoined_epoch") is None}
        for k, p in enumerate(procs):
            if k in lost:
                if p.poll() is None:
                    p.kill()
                continue
            try:
                code = p.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise PartyFailed(f"party {k} did not stop within {timeout_s:.0f}s after the run.") from None
            if code != 0:
                raise PartyFailed(f"party {k} exited with status {code}: {p.last_line()}")
        return out
    finally:
        stop.set()
        for p in everyone:
            if p.poll() is None:
                p.kill()
        import shutil

        if not os.environ.get("VFLBENCH_KEEP_LOGS"):
            shutil.rmtree(logs, ignore_errors=True)


def _with_party_error(e: VFLBenchError, procs: list[LocalParty]) -> VFLBenchError:
    """A failure seen by the server, with what a party that stopped said (if one did)."""
    time.sleep(0.2)
    dead = [(k, p.poll()) for k, p in enumerate(procs) if p.poll() not in (None, 0)]
    if isinstance(e, PartyFailed) or dead:
        extra = "; ".join(f"party {k} exited with status {code}: {procs[k].last_line()}" for k, code in dead)
        return PartyFailed(f"{e}{' (' + extra + ')' if extra else ''}")
    return e
