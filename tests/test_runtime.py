"""Parties as processes (vflbench.federation.runtime): for every method that claims support, a run with
``--runtime processes`` (one OS process per party and one for the server, over torch.distributed's
gloo) gives bit-identical metrics, losses and accounted traffic to the same run in one process, and
the bytes measured on the wire equal the accounted ones. A method that cannot run distributed is
refused with one line; a party killed mid-run stops the server with one line and exit status 3."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from _testenv import TEST_DEVICE
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.federation.runtime import free_port, refusal
from vflbench.methods import METHODS

from .conftest import needs_mirror
from .helpers import start_federation

runner = CliRunner()
SUPPORTED = [
    m for m in METHODS if refusal(METHODS.get(m)) is None and METHODS.get(m).__module__.startswith("vflbench.methods")
]  # not a test's plugin
# --device: under VFLBENCH_TEST_DEVICE=cuda (make test-gpu) both runtimes compute on the GPU, every process of the
# processes run included
FLAGS = [
    "--dataset",
    "credit",
    "--epochs",
    "2",
    "--seed",
    "1",
    "--train-missing",
    "mcar:0.3",
    "--train-samples",
    "1500",
    "--batch-size",
    "300",  # 5 steps an epoch: the same equivalence with a fifth of the round trips (make test's time)
    "--test-missing",
    "none,mcar:0.5",
    "--quiet",
    "--device",
    TEST_DEVICE,
]


def _flags(method: str) -> list[str]:
    """FLAGS, less --epochs for a tree method (it grows --method-opt trees=N; its tests give their own)."""
    if not METHODS.get(method).trains_whole:
        return FLAGS
    at = FLAGS.index("--epochs")
    return FLAGS[:at] + FLAGS[at + 2 :]


def test_the_methods_the_issue_names_claim_support():
    assert {"local", "svfl", "ensemble", "combinatorial", "plug", "laser", "sum", "pbm"} <= set(SUPPORTED)
    for m in ("false1", "false2", "fedhssl"):  # not yet: each says why (vflbench methods)
        assert refusal(METHODS.get(m)), m


def _one(out: Path) -> tuple[pd.DataFrame, dict]:
    (d,) = [p for p in out.iterdir() if p.is_dir()]
    return pd.read_csv(d / "results.csv"), json.loads((d / "manifest.json").read_text())


SEEDED = (
    "--noise-source",
    "seeded",
)  # reproducible party noise: the equivalence needs it (the default across processes is secret)
CASES = [
    *[(m, ()) for m in SUPPORTED if m != "pbm"],
    ("pbm", ("--method-opt", "noise=party", *SEEDED)),  # PBM-VFL: each party draws its own noise
    (
        "pbm",
        ("--method-opt", "noise=party", "--method-opt", "secagg=masked", *SEEDED),
    ),  # with SecAgg keys from X25519 across processes
    ("sum", ("--mechanism", "pbm:b=32,beta=0.2,noise=party", "--secagg", "masked", *SEEDED)),
]


# make test-slow (CI) runs every case of the conformance suite: each spawns a process group (five interpreters that
# import torch), which on a 2-core machine costs 10-15 core-seconds whatever the run; make test runs none
IN_MAKE_TEST: set[str] = set()


@needs_mirror
@pytest.mark.parametrize(
    "method,extra",
    [c if c[0] in IN_MAKE_TEST and not c[1] else pytest.param(*c, marks=pytest.mark.integration) for c in CASES],
    ids=[f"{m}{'-' + '-'.join(e[1::2]) if e else ''}" for m, e in CASES],
)
def test_processes_give_the_numbers_of_one_process(method, extra, tmp_path):
    flags = _flags(method)
    a = runner.invoke(app, ["run", "--method", method, *flags, *extra, "--out", str(tmp_path / "in")])
    assert a.exit_code == 0, a.output
    b = runner.invoke(
        app, ["run", "--method", method, *flags, *extra, "--runtime", "processes", "--out", str(tmp_path / "pr")]
    )
    assert b.exit_code == 0, b.output
    (ra, ma), (rb, mb) = _one(tmp_path / "in"), _one(tmp_path / "pr")
    assert ma["run_key"] == mb["run_key"]
    assert ra["value"].tolist() == rb["value"].tolist()  # bit-identical metrics
    assert ma["history"]["loss"] == mb["history"]["loss"]  # and losses
    drop = lambda c: {k: v for k, v in c.items() if k != "model"}  # noqa: E731  (the channel's class name)
    assert drop(ma["communication"]) == drop(mb["communication"])  # and accounted traffic
    trains_alone = method in ("local", "ensemble")  # nothing crosses in training
    assert (
        ma["extras"]["comm_bytes_up"] == mb["extras"]["comm_bytes_up"]
        and (mb["extras"]["comm_bytes_up"] > 0) != trains_alone
    )
    rt = mb["runtime"]
    assert rt["measured_equals_accounted"], rt["mismatch"]
    for key in ("train_up", "train_down", "eval_up"):
        assert rt["measured"][f"bytes_{key}_per_party"] == mb["communication"][f"bytes_{key}_per_party"]
    assert (rt["measured"]["bytes_train_up"] > 0) != trains_alone and rt["framing"]["messages"] > 0
    assert "runtime=processes" not in ",".join(rb.columns) and mb["config"]["settings"]["runtime"] == "processes"
    assert rt["labels_at_parties"] == trains_alone  # parties that train alone hold the labels
    assert (
        ma["device"] == mb["device"] == TEST_DEVICE and rt["party_devices"] == [TEST_DEVICE] * 4
    )  # every process on one device


@pytest.mark.integration  # `make test-slow`: a process group (seconds on a 2-core machine)
@needs_mirror
def test_the_server_never_receives_an_unmasked_count_and_masked_equals_plain(tmp_path, monkeypatch):
    runs = {}
    for mode in ("plain", "masked"):
        trace = tmp_path / f"trace_{mode}"
        trace.mkdir()
        monkeypatch.setenv("VFLBENCH_TRACE_DIR", str(trace))
        r = runner.invoke(
            app,
            [
                "run",
                "--method",
                "pbm",
                *FLAGS,
                "--method-opt",
                "noise=party",
                "--method-opt",
                f"secagg={mode}",
                "--runtime",
                "processes",
                *SEEDED,
                "--out",
                str(tmp_path / mode),
            ],
        )
        assert r.exit_code == 0, r.output
        runs[mode] = _one(tmp_path / mode)
        import torch

        got = torch.load(trace / "server_release0_train.pt")
        plain = torch.stack([torch.load(trace / f"party{k}_release0_train.pt")["values"] for k in range(4)])
        sent = got["sent"]  # [K, B]
        received = got["values"]  # [K, B, P]: what the server process received from each party
        assert torch.equal(received.sum(0) % 256, plain.sum(0) % 256)  # the sums agree (R = 256 for b=32, four parties)
        shared = sent.sum(0) >= 2  # samples at least two parties took part in: their uploads are masked
        if mode == "plain":
            assert torch.equal(received, plain)
        else:
            for k in range(4):
                rows = sent[k] & shared
                same = (received[k][rows] == plain[k][rows]).float().mean()
                assert same < 0.05, (k, same)  # masked: equal to the plain count about 1/256 of the time, by chance
                assert received[k][rows].float().mean() > 100  # spread over Z_256, not counts in 0..32
    (rp, mp), (rm, mm) = runs["plain"], runs["masked"]
    assert (
        rp["value"].tolist() == rm["value"].tolist() and mp["history"]["loss"] == mm["history"]["loss"]
    )  # bit-identical to plain


@pytest.mark.integration  # `make test-slow`: a process group (seconds on a 2-core machine)
@needs_mirror
def test_secret_noise_is_drawn_inside_each_party_and_the_epsilon_says_whom_it_holds_against(tmp_path):
    """The default across processes: each party reseeds its noise from the OS. The run is not the
    seeded one (its numbers differ), the manifest and every row say so, no secret seed is recorded,
    and with masked SecAgg the epsilon holds against the server; in one process it does not."""
    flags = [
        "--dataset",
        "credit",
        "--epochs",
        "1",
        "--seed",
        "1",
        "--train-missing",
        "mcar:0.3",
        "--train-samples",
        "800",
        "--test-missing",
        "none",
        "--quiet",
        "--method",
        "pbm",
        "--method-opt",
        "noise=party",
        "--method-opt",
        "secagg=masked",
    ]
    r = runner.invoke(app, ["run", *flags, "--runtime", "processes", "--out", str(tmp_path / "secret")])
    assert r.exit_code == 0, r.output
    s = runner.invoke(app, ["run", *flags, "--out", str(tmp_path / "seeded")])
    assert s.exit_code == 0, s.output
    (rs, ms), (rd, md) = _one(tmp_path / "secret"), _one(tmp_path / "seeded")
    assert ms["config"]["settings"]["noise_source"] == "secret" and "noise_source" not in md["config"].get(
        "settings", {}
    )
    assert ms["run_key"] != md["run_key"] and ms["history"]["loss"] != md["history"]["loss"]
    assert set(rs["noise_source"]) == {"secret"} and set(rd["noise_source"]) == {"seeded"}
    assert set(rs["epsilon_holds_against"]) == {"server,parties,observer"} and set(rd["epsilon_holds_against"]) == {
        "observer-without-seed"
    }
    assert ms["privacy"]["holds_against"]["server"]["holds"] and not md["privacy"]["holds_against"]["server"]["holds"]
    assert all(
        str(v).startswith("secret") for k, v in ms["seeds"]["streams"].items() if k.startswith("mechanism/party")
    )
    assert len(ms["runtime"]["measured"]["secagg_key_fingerprint"]) == 19


def test_pbm_across_processes_draws_each_partys_own_noise_by_default(tmp_path):
    """noise=party is the only PBM-VFL setting that runs across processes: it is the default there (source
    runtime:processes), a value the user sets still wins, and noise=shared is refused in one line."""
    from vflbench.runs.config import RunConfig, resolve

    run = resolve(RunConfig(dataset="synthetic", method="pbm", runtime="processes"))
    assert run.method_options["noise"] == "party" and run.option_sources["noise"] == "runtime:processes"
    alone = resolve(RunConfig(dataset="synthetic", method="pbm"))
    assert alone.method_options["noise"] == "shared" and alone.option_sources["noise"] == "default"
    r = runner.invoke(
        app,
        ["run", "--dataset", "synthetic", "--method", "pbm", "--runtime", "processes", "--method-opt", "noise=shared"]
        + ["--out", str(tmp_path)],
    )
    assert r.exit_code == 2 and "noise=party" in r.output and len(r.output.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_secagg_masked_is_pbm_vfls_own_option():
    """--method pbm --secagg masked means --method-opt secagg=masked (the same run key); the two disagreeing is
    refused."""
    from vflbench.core.errors import VFLBenchError
    from vflbench.runs.config import RunConfig, resolve

    flag = resolve(RunConfig(dataset="synthetic", method="pbm", secagg="masked"))
    option = resolve(RunConfig(dataset="synthetic", method="pbm", method_options={"secagg": "masked"}))
    assert flag.method_options["secagg"] == "masked" and flag.key == option.key
    with pytest.raises(VFLBenchError, match="disagree"):
        resolve(RunConfig(dataset="synthetic", method="pbm", secagg="masked", method_options={"secagg": "plain"}))


def test_a_method_that_cannot_run_distributed_is_refused_in_one_line(tmp_path):
    r = runner.invoke(
        app, ["run", "--dataset", "synthetic", "--method", "fedhssl", "--runtime", "processes", "--out", str(tmp_path)]
    )
    assert (
        r.exit_code == 2
        and "cannot run with --runtime processes" in r.output
        and len(r.output.strip().splitlines()) == 1
    )
    r = runner.invoke(
        app, ["run", "--dataset", "synthetic", "--method", "laser", "--net-latency", "20", "--out", str(tmp_path)]
    )
    assert r.exit_code == 2 and "add --runtime processes" in r.output
    rows = {r["name"]: r for r in json.loads(runner.invoke(app, ["methods", "--format", "json"]).output)}
    assert rows["laser"]["processes"] and rows["local"]["processes"] and not rows["false1"]["processes"]
    assert "comes down outside Method.send" in rows["false1"]["runtime_refusal"]


@pytest.mark.integration  # `make test-slow` (an end-to-end check: real processes, sweeps or image models; CI runs it)
@needs_mirror
def test_a_killed_party_stops_the_server_with_one_line_and_exit_3(tmp_path):
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    flags = [
        "--dataset",
        "credit",
        "--method",
        "laser",
        "--parties",
        "2",
        "--epochs",
        "40",
        "--seed",
        "0",
        "--timeout",
        "30",
        "--on-party-loss",
        "stop",  # LASER-VFL would go on without the party (tests/test_faults.py); asked to stop, it stops
    ]
    server, parties = start_federation(url, tmp_path / "out", flags)
    try:
        line = parties[1].stderr.readline()  # blocks until party 1 has joined (every process checked the run key)
        assert "joined run" in line, line
        time.sleep(3)  # mid-training (40 epochs of about a second)
        assert server.poll() is None, server.communicate()
        parties[1].send_signal(signal.SIGKILL)
        t0 = time.time()
        out, err = server.communicate(timeout=60)
        assert time.time() - t0 < 30
    finally:
        for p in [server, *parties]:
            if p.poll() is None:
                p.kill()
            p.wait()
    assert server.returncode == 3, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "party 1" in lines[0] and "epoch" in lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("results.csv"))


@pytest.mark.integration  # `make test-slow`: a process group (seconds on a 2-core machine)
@needs_mirror
def test_a_sweep_records_a_run_whose_party_died_as_failed_and_goes_on(tmp_path, monkeypatch):
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: dies\nruntime: processes\nseeds: [0]\nparties: [4]\ntrain_missing: [none]\ntest_missing: [none]\n"
        "hp: {epochs: 2}\ntrain_samples: 1500\nmethods: [svfl, laser]\ndatasets:\n  credit: {data_options: {}}\n"
    )
    # party 1 of the Standard VFL run dies when its second epoch starts: Standard VFL (an incomplete sample gets a
    # random class) cannot go on without it; LASER-VFL could (tests/test_faults.py)
    monkeypatch.setenv("VFLBENCH_KILL_PARTY", "svfl:1:1")
    r = runner.invoke(app, ["sweep", str(exp), "--workers", "1", "--out", str(tmp_path / "out")])
    summary = json.loads((tmp_path / "out" / "sweep.json").read_text())
    failed = summary["runs_failed"]
    assert (
        len(failed) == 1
        and "svfl" in failed[0]["run_id"]
        and "Lost party 1" in failed[0]["error"]
        and "epoch 2" in failed[0]["error"]
    ), r.output
    rows = pd.read_csv(tmp_path / "out" / "results.csv")
    assert set(rows["method"]) == {"laser"}  # the other run finished; nothing of the failed one was written


@pytest.mark.integration  # `make test-slow`: two fresh interpreters (the script, then its fork server)
def test_an_unguarded_script_gets_one_clear_error_at_once(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from vflbench.runs.config import RunConfig, resolve\nfrom vflbench.training.pipeline import execute\n"
        "execute(resolve(RunConfig(dataset='synthetic', method='laser', runtime='processes', hp={'epochs': 1})), "
        "'cpu')\n"
    )
    t0 = time.time()
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    took = time.time() - t0
    # "at once": the error of a party process that stopped before it started, never the server waiting out its
    # 60 s rendezvous timeout. Told apart by the message, not the clock: on a loaded machine the two interpreters'
    # start-up alone took 54 s (24 s on a quiet one)
    assert p.returncode != 0, p.stderr[-2000:]
    assert 'must guard its entry with `if __name__ == "__main__":`' in p.stderr, (took, p.stderr[-2000:])
    assert "Could not join the federation" not in p.stderr, (took, p.stderr[-2000:])
