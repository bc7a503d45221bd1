"""Against whom a certified epsilon holds (vflbench.privacy.mechanisms.epsilon_scope), and the noise source
setting that decides it: hand-built cases of the rules docs/RUNTIME.md states in its table."""

from __future__ import annotations

import pytest

from vflbench.core.errors import VFLBenchError
from vflbench.privacy.mechanisms import epsilon_scope, holds_against_text
from vflbench.runs.config import RunConfig, resolve


def holds(scope):
    return {k for k, v in scope.items() if v["holds"]}


@pytest.mark.parametrize(
    "release,secagg,runtime,noise,expected,text",
    [
        ("sum", "masked", "processes", "secret", {"server", "parties", "observer"}, "server,parties,observer"),
        (
            "sum",
            "plain",
            "processes",
            "secret",
            {"parties", "observer"},
            "parties,observer",
        ),  # the server reads each party's counts
        (
            "each",
            "plain",
            "processes",
            "secret",
            {"server", "parties", "observer"},
            "server,parties,observer",
        ),  # charged one by one
        (
            "sum",
            "masked",
            "processes",
            "seeded",
            {"observer"},
            "observer-without-seed",
        ),  # the server regenerates seeded noise
        (
            "sum",
            "masked",
            "inprocess",
            "seeded",
            {"observer"},
            "observer-without-seed",
        ),  # a simulation: one program draws it all
    ],
)
def test_epsilon_holds_against_exactly_whom_the_rules_say(release, secagg, runtime, noise, expected, text):
    scope = epsilon_scope(release, secagg, runtime, noise)
    assert holds(scope) == expected
    assert holds_against_text(scope, noise) == text
    assert all(v["why"] for v in scope.values())


def _resolve(**kw):
    return resolve(RunConfig(dataset="synthetic", **kw))


def test_the_noise_source_defaults_to_secret_across_processes_and_seeded_in_one():
    pbm = dict(method="pbm", method_options={"noise": "party"})
    assert _resolve(**pbm, runtime="processes").settings["noise_source"] == "secret"
    assert _resolve(**pbm).settings["noise_source"] == "seeded"
    assert (
        _resolve(method="sum", mechanism="pbm:b=32,beta=0.1,noise=party", runtime="processes").settings["noise_source"]
        == "secret"
    )
    assert (
        _resolve(method="svfl", runtime="processes").settings["noise_source"] == "seeded"
    )  # nothing to hide: no noise drawn
    seeded = _resolve(**pbm, runtime="processes", noise_source="seeded")
    assert seeded.key == _resolve(**pbm).key  # seeded is the canonical default: no earlier key moves
    assert _resolve(**pbm, runtime="processes").key != seeded.key  # a secret run is another run


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(method="pbm", noise_source="secret"), "add --runtime processes"),
        (dict(method="svfl", runtime="processes", noise_source="secret"), "draws none"),
        (dict(method="pbm", noise_source="urandom"), "seeded | secret"),
    ],
)
def test_a_noise_source_that_cannot_hold_is_refused_in_one_line(kw, msg):
    with pytest.raises(VFLBenchError, match=msg):
        _resolve(**kw)


def test_the_plain_count_trace_hook_is_refused_with_secret_noise(monkeypatch, tmp_path):
    import torch

    from vflbench.federation.wire_channels import _trace

    monkeypatch.setenv("VFLBENCH_TRACE_DIR", str(tmp_path))
    with pytest.raises(VFLBenchError, match="refused with secret noise"):
        _trace("party0_release0_train", torch.zeros(2, 2), torch.ones(1, 2, dtype=torch.bool), "secret")
    _trace("party0_release0_train", torch.zeros(2, 2), torch.ones(1, 2, dtype=torch.bool), "seeded")
    assert list(tmp_path.iterdir())
