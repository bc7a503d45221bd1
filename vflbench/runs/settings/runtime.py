"""Where and how the parties run: in process or as processes, a lost party's restart, the emulated network, the
source of the parties' noise and the failures a run injects."""

from __future__ import annotations

from typing import Any

from ...core.errors import VFLBenchError, did_you_mean
from ...core.limits import check as check_limit
from ..schema import (
    Setting,
    declare,
)


def _runtime(value: Any) -> str:
    from ...core.role import RUNTIMES

    v = str(value).strip().lower()
    if v not in RUNTIMES:
        raise VFLBenchError(f"--runtime takes {' | '.join(RUNTIMES)}, got {value!r}.{did_you_mean(v, RUNTIMES)}")
    return v


def _check_runtime(values: dict[str, Any], mcls) -> None:
    if values["runtime"] == "inprocess":
        if values["net_latency"] or values["net_bandwidth"]:
            raise VFLBenchError(
                "--net-latency and --net-bandwidth emulate the link between party processes; add --runtime processes."
            )
        return
    from ...core.role import refusal

    if mcls is not None and (why := refusal(mcls)):
        raise VFLBenchError(f"{mcls.display} cannot run with --runtime processes: {why}.")


def _non_negative(flag: str, unit: str, limit: str):
    def parse(value: Any) -> float:
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise VFLBenchError(f"{flag} takes a number of {unit}, got {value!r}.") from None
        if not v >= 0 or v == float("inf"):
            raise VFLBenchError(f"{flag} must be a finite number >= 0 ({unit}), got {value!r}.")
        check_limit(limit, v, flag)
        return v

    return parse


declare(
    Setting(
        "runtime",
        "inprocess",
        "where the parties run: inprocess (one process) | processes (one OS process per party and one for the "
        "server, over torch.distributed; the same numbers)",
        _runtime,
        metavar="NAME",
        keyed=False,
        column=False,
        check=_check_runtime,
        example="processes",
        bad="threads",
    )
)


def _yes_no(flag: str):
    def parse(value: Any) -> bool:
        v = str(value).strip().lower()
        if v in ("yes", "true", "on", "1"):
            return True
        if v in ("no", "false", "off", "0", "none", ""):
            return False
        raise VFLBenchError(f"{flag} takes yes | no, got {value!r}.")

    return parse


def _check_restart(values: dict[str, Any], mcls) -> None:
    if not values["restart_lost"]:
        return
    if values["runtime"] != "processes":
        raise VFLBenchError("--restart-lost restarts party processes; add --runtime processes.")
    mech = values.get("mechanism")
    if (mech is not None and mech.name != "none") or getattr(mcls, "draws_noise", False):
        raise VFLBenchError(
            "--restart-lost: a restarted party cannot rejoin a run whose boundary is a mechanism (its noise streams, "
            "release count and masks are not restored); drop --restart-lost, or the mechanism."
        )


declare(
    Setting(
        "restart_lost",
        False,
        "with --runtime processes: yes restarts a party process that dies; it reloads the checkpoint it wrote at its "
        "last epoch boundary and rejoins at the server's next one (docs/RUNTIME.md, 'Rejoin')",
        _yes_no("--restart-lost"),
        metavar="yes|no",
        keyed=False,
        column=False,
        check=_check_restart,
        example=True,
        bad="maybe",
        example_with=(("runtime", "processes"),),
    )
)
declare(
    Setting(
        "net_latency",
        0.0,
        "with --runtime processes: one-way delay per message, in milliseconds (an emulated WAN link per party)",
        _non_negative("--net-latency", "milliseconds", "net_latency"),
        metavar="MS",
        keyed=False,
        column=False,
        example=20,
        bad=-1,
        example_with=(("runtime", "processes"),),
    )
)
declare(
    Setting(
        "net_bandwidth",
        0.0,
        "with --runtime processes: link bandwidth per party in Mbit/s (0 = unlimited)",
        _non_negative("--net-bandwidth", "Mbit/s", "net_bandwidth"),
        metavar="MBPS",
        keyed=False,
        column=False,
        example=10,
        bad="fast",
        example_with=(("runtime", "processes"),),
    )
)


NOISE_SOURCES = ("seeded", "secret")


def _noise_source(value: Any) -> str:
    v = str(value).strip().lower()
    if v not in NOISE_SOURCES:
        raise VFLBenchError(
            f"--noise-source takes {' | '.join(NOISE_SOURCES)}, got {value!r}.{did_you_mean(v, NOISE_SOURCES)}"
        )
    return v


def draws_privacy_noise(values: dict[str, Any], mcls) -> bool:
    """Whether a run draws privacy noise at its boundary: a private ``--mechanism``, or a method that
    attaches its own (``draws_noise``, e.g. PBM-VFL)."""
    mech = values.get("mechanism")
    return bool((mech is not None and mech.private) or getattr(mcls, "draws_noise", False))


def _noise_default(values: dict[str, Any], mcls) -> str:
    """Secret where each party draws its noise in its own process, reproducible (seeded) elsewhere."""
    return "secret" if values["runtime"] == "processes" and draws_privacy_noise(values, mcls) else "seeded"


def _check_noise_source(values: dict[str, Any], mcls) -> None:
    if values["noise_source"] != "secret":
        return
    if values["runtime"] != "processes":
        raise VFLBenchError(
            "--noise-source secret draws each party's noise inside its own process, which one process cannot do (it "
            "also "
            "plays the server); add --runtime processes, or use --noise-source seeded."
        )
    if mcls is not None and not draws_privacy_noise(values, mcls):
        raise VFLBenchError(
            "--noise-source applies to runs that draw privacy noise (a --mechanism, or --method pbm); this run draws "
            "none."
        )


declare(
    Setting(
        "noise_source",
        "seeded",
        "who can derive the parties' privacy noise: secret (each party process draws it from the OS's "
        "randomness; never sent or recorded; not reproducible) | seeded (from the run seed: reproducible, but the "
        "server and every "
        "party can regenerate it) [default: secret under --runtime processes, seeded in one process]",
        _noise_source,
        metavar="SOURCE",
        check=_check_noise_source,
        default_for=_noise_default,
        example="secret",
        bad="urandom",
        example_with=(("runtime", "processes"), ("mechanism", "pbm:b=32,beta=0.1,noise=party")),
    )
)


def _fail_party(value: Any) -> str:
    from ..faults import parse_failures

    return str(parse_failures(value))


def _on_party_loss(value: Any) -> str | None:
    if value is None or str(value).strip() == "":
        return None
    v = str(value).strip().lower()
    if v not in ("continue", "stop"):
        raise VFLBenchError(
            f"--on-party-loss takes continue | stop, got {value!r}.{did_you_mean(v, ('continue', 'stop'))}"
        )
    return v


declare(
    Setting(
        "fail_party",
        "none",
        "party failures: P@E fails party P at the start of epoch E (1-based, over all stages), P@E:R rejoins it at "
        "the start of epoch R; repeat the flag (or separate with ;) for more. A lost party's block is missing from "
        "then on (docs/RUNTIME.md, 'Lost parties')",
        _fail_party,
        metavar="P@E[:R]",
        many=True,
        example="1@2",
        bad="1@0",
        axis="fail_party",
    )
)
declare(
    Setting(
        "on_party_loss",
        None,
        "what a lost party does to the run: continue (its block is missing from then on; methods that handle a "
        "missing block) | stop (exit 3) [default: continue where the method can, else stop]",
        _on_party_loss,
        metavar="ACTION",
        keyed=False,
        column=False,
        example="stop",
        bad="retry",
    )
)
