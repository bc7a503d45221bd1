"""What crosses the party-to-server boundary: the mechanism at it and secure aggregation, the compressor of the
messages and the local steps between exchanges."""

from __future__ import annotations

from typing import Any

from ...core.errors import VFLBenchError
from ...core.limits import check as check_limit
from ..schema import (
    Setting,
    declare,
)
from .run import _int_at_least


def _mechanism(value: Any):
    from ...privacy.mechanism_spec import parse_mechanism

    return parse_mechanism(value)


def _secagg(value: Any) -> str:
    from ...privacy.mechanism_spec import parse_secagg

    return parse_secagg(value)


def _check_boundary(values: dict[str, Any], mcls) -> None:
    from ...privacy.mechanism_spec import check_support

    if mcls is not None:
        check_support(mcls, values["mechanism"], values["secagg"])


def _default_mechanism():
    from ...privacy.mechanism_spec import MechanismSpec

    return MechanismSpec()


declare(
    Setting(
        "mechanism",
        _default_mechanism(),
        "privacy mechanism at the party-to-server boundary, for any method that supports it: "
        "none | npq | pbm:b=32,beta=0.1[,C=1,bound=clip|tanh,accountant=pld,delta=1e-5] | ldp:sigma=1[,C=1,bound=...] "
        "(`vflbench methods` lists the parameters)",
        _mechanism,
        metavar="SPEC",
        check=_check_boundary,
        example="ldp:sigma=0.5",
        bad="pbm:beta=0.5",
    )
)
declare(
    Setting(
        "secagg",
        "plain",
        "secure aggregation of PBM counts: plain | masked (methods that sum at the server: sum)",
        _secagg,
        metavar="MODE",
        example="masked",
        bad="maybe",
        example_with=(("mechanism", "pbm"),),
    )
)


def _compress(value: Any):
    from ...compression import parse_compression

    return parse_compression(value)


def _default_compress():
    from ...compression import CompressionSpec

    return CompressionSpec()


def _check_compress(values: dict[str, Any], mcls) -> None:
    spec = values["compress"]
    if spec.name == "none":
        return
    if mcls is not None and mcls.boundary_refusal:
        raise VFLBenchError(
            f"--compress {spec}: {mcls.display} sends nothing that a compressor could act on: {mcls.boundary_refusal}."
        )
    mech = values.get("mechanism")
    if mech is not None and mech.name == "pbm":
        raise VFLBenchError(
            f"--compress with --mechanism {mech}: PBM's release is already quantised (integer counts in 0..b, summed "
            "and masked under SecAgg), so a second compressor has nothing to act on that the counts' b does not set; "
            "lower b instead, or use --mechanism ldp (noise first, then compression)."
        )


declare(
    Setting(
        "compress",
        _default_compress(),
        "compress what the parties send up (and with down=1 the gradients that come down), for any method that sends "
        "representations: none | quant:bits=B[,scale=message|row] (C-VFL's scalar quantisation, stochastic rounding) "
        "| topk:ratio=R | vq:codes=C[,dim=2] (a learned codebook per party); docs/COMMUNICATION.md",
        _compress,
        metavar="SPEC",
        check=_check_compress,
        example="quant:bits=4",
        bad="quant:bits=0",
    )
)


def _local_steps(value: Any) -> int:
    try:
        v = int(str(value).strip())
    except ValueError:
        raise VFLBenchError(f"--local-steps takes a whole number of updates per exchange, got {value!r}.") from None
    if v < 1:
        raise VFLBenchError(f"--local-steps must be at least 1 (1: one update per exchange, as usual), got {v}.")
    check_limit("local_steps", v)
    return v


def _check_local_steps(values: dict[str, Any], mcls) -> None:
    q = values["local_steps"]
    if q == 1:
        return
    if mcls is not None and mcls.boundary_refusal:
        raise VFLBenchError(
            f"--local-steps {q} replays the exchange at the party-to-server boundary, which {mcls.display} does not "
            f"open to it: {mcls.boundary_refusal}."
        )
    mech = values.get("mechanism")
    if mech is not None and mech.name != "none":
        raise VFLBenchError(f"--local-steps with --mechanism {mech} is not built yet; run one of the two.")


declare(
    Setting(
        "local_steps",
        1,
        "Q: parameter updates per exchange (FedBCD, C-VFL). After each exchange, Q - 1 more updates on its minibatch: "
        "the server on the representations it received, each party with the gradient it received. An epoch stays "
        "one pass of exchanges, so Q local steps make Q times the updates (equal updates: epochs / Q)",
        _local_steps,
        metavar="Q",
        check=_check_local_steps,
        example=5,
        bad=0,
    )
)

declare(
    Setting(
        "train_samples",
        0,
        "train on this many samples of the training split, drawn uniformly without replacement from the "
        "run's own stream (train_samples), after any validation hold-out; 0 = all. For learning curves by data size",
        _int_at_least(
            "--train-samples", 0, "a number of training samples (0 = all)", " (0 = the whole training split)"
        ),
        metavar="N",
        example=500,
        bad=-1,
    )
)
