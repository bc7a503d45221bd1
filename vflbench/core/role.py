"""What running the parties as processes means to the rest of the code, below the runtime that does
it (:mod:`vflbench.federation.runtime`): the runtimes there are, this process's role (the server or a party, and
its wire while a run crosses processes), and which runs can cross processes at all (:func:`refusal`).
Data loaders (entity alignment) and the settings read it here; only the runtime sets it."""

from __future__ import annotations

from typing import Any

RUNTIMES = ("inprocess", "processes")
SERVER = 0  # torch.distributed rank of the server; party k is rank k + 1
_CURRENT: dict[str, Any] = {"wire": None, "federated": False}


def current_wire():
    """The wire of this process when it is a party or the server of a processes run (else None)."""
    return _CURRENT["wire"]


def set_wire(wire) -> None:
    _CURRENT["wire"] = wire


def federated() -> bool:
    """True in a ``vflbench party`` / ``server`` process: it may not hold every party's file."""
    return bool(_CURRENT["federated"])


def set_federated(value: bool = True) -> None:
    _CURRENT["federated"] = value


def refusal(mcls, run=None) -> str | None:
    """Why a method (or, given ``run``, a resolved run) cannot use the ``processes`` runtime (None: it can)."""
    why = getattr(mcls, "runtime_refusal", None)
    if why or run is None:
        return why
    if len(mcls.stages_for(run.method_options)) > 1:
        return (
            "runs with a party-local stage (e.g. --method-opt pretrain=simsiam) do not run across processes yet: "
            "their loss never crosses the boundary"
        )
    if run.model.get("arch") != "mlp":
        return "image data does not run across processes yet (tiles are cut from one tensor after augmentation)"
    opts = run.method_options
    if "mechanism" in opts and "noise" in opts:  # PBM-VFL's own mechanism, from its options
        name, noise, how = opts["mechanism"], opts["noise"], "--method-opt noise=party"
    else:
        spec = run.settings.get("mechanism")
        if spec is None or spec.name == "none":
            return None
        name, noise, how = spec.name, dict(spec.params).get("noise"), f"--mechanism {spec.name}:...,noise=party"
    if name == "npq":
        return None
    if name != "pbm" or not mcls.sums_at_server:
        return (
            "across processes, a mechanism runs as PBM's summed release (--method pbm, or --method sum --mechanism "
            "pbm:...) only"
        )
    if noise != "party":
        return f"each party process draws its own noise: give {how} (noise=shared simulates one stream for every party)"
    return None


def parse_rendezvous(text: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` -> (host, port), checked before anything starts: a port outside 1..65535 or a
    missing host is refused in one line (torch's ``TCPStore`` would raise a ``TypeError`` deep inside)."""
    from .errors import VFLBenchError

    form = "--rendezvous takes tcp://HOST:PORT (the server's address, PORT in 1..65535)"
    if not isinstance(text, str) or not text.startswith("tcp://"):
        raise VFLBenchError(f"{form}, got {text!r}.")
    host, sep, port = text[len("tcp://") :].rpartition(":")
    host = host.strip("[]")  # an IPv6 literal, tcp://[::1]:29500
    if not sep or not host or not port.isdigit():
        raise VFLBenchError(f"{form}, got {text!r}.")
    if not 1 <= int(port) <= 65535:
        raise VFLBenchError(f"{form}: port {int(port)} is out of range in {text!r}.")
    return host, int(port)
