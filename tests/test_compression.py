"""Compression at the boundary (--compress) and local steps (--local-steps): known answers for each compressor (round
trip within its stated error, unbiased where it claims to be, bytes as stated), the stale exchange a local step
replays, and the runs' bars on Credit."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from vflbench.cli import app
from vflbench.compression import COMPRESSORS, parse_compression
from vflbench.compression.compressors import COMPRESSORS as IMPLEMENTED
from vflbench.compression.compressors import make_compressor
from vflbench.core.errors import VFLBenchError
from vflbench.privacy.channel import Channel
from vflbench.training.local_steps import StaleExchange

from .conftest import needs_mirror

runner = CliRunner()


def _msg(m=3, b=64, d=10, seed=0, p_sent=0.7):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, b, d, generator=g) * torch.linspace(0.5, 3, d)
    sent = torch.rand(m, b, generator=g) < p_sent
    sent[:, 0] = True
    return x, sent


def test_every_declared_compressor_is_implemented_and_nothing_else():
    assert set(COMPRESSORS) == set(IMPLEMENTED.names())


@pytest.mark.parametrize(
    "spec", ["none", "quant:bits=4", "quant:bits=3,scale=row", "topk:ratio=0.1", "vq:codes=16", "vq:codes=300,dim=3"]
)
def test_a_payload_decodes_to_the_in_process_numbers_and_weighs_what_is_counted(spec):
    """What a party encodes and the server decodes across processes is the reconstruction of one process, bit for bit,
    and its tensors hold exactly the bytes counted."""
    x, sent = _msg(m=3, b=128)
    party, server = (make_compressor(parse_compression(spec), 3) for _ in range(2))
    for step in range(3):  # a second and third message: a codebook is not sent again
        st = party.prepare(x + step, sent, torch.Generator().manual_seed(step), True)
        rec, nbytes = party.reconstruct(st), party.nbytes(st)
        for j in range(3):
            n = int(sent[j].sum())
            parts = party.encode(st, j)
            assert [(tuple(t.shape), t.dtype) for t in parts] == server.expects(j, n, 10)
            assert torch.equal(server.decode(parts, j, n, 10), rec[j][sent[j]])
            assert sum(t.numel() * t.element_size() for t in parts) == nbytes[j]
        party.after_message(sent)
        server.after_message(sent)


def test_packing_round_trips_any_width():
    g = torch.Generator().manual_seed(0)
    for bits in (1, 2, 3, 4, 5, 7, 8, 10, 16):
        codes = torch.randint(1 << bits, (1001,), generator=g)
        from vflbench.compression.compressors import pack, packed_bytes, unpack

        packed = pack(codes, bits)
        assert packed.dtype == torch.uint8 and len(packed) == packed_bytes(1001, bits)
        assert torch.equal(unpack(packed, 1001, bits), codes)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("scale", ["message", "row"])
def test_quant_rounds_to_a_neighbouring_level_unbiased_with_the_stated_bits(bits, scale):
    x, sent = _msg()
    comp = make_compressor(parse_compression(f"quant:bits={bits},scale={scale}"), 3)
    draws = [comp.roundtrip(x, sent, torch.Generator().manual_seed(s)) for s in range(400)]
    xhat, nbits = draws[0]
    w = sent[..., None].expand_as(x)
    # the range: per message (over the rows that cross) or per row
    v = torch.where(w, x, torch.nan)
    lo = v.nan_to_num(float("inf")).amin(-1, keepdim=True)
    hi = v.nan_to_num(float("-inf")).amax(-1, keepdim=True)
    if scale == "message":
        lo, hi = lo.amin(1, keepdim=True), hi.amax(1, keepdim=True)
    step = (hi - lo) / (2**bits - 1)
    err = (xhat - x).abs()
    assert bool((err[w] <= step.expand_as(x)[w] + 1e-5).all())  # one step at most: a neighbouring level
    levels = ((xhat - lo) / step).round()
    assert bool(((levels >= 0) & (levels <= 2**bits - 1))[w].all())  # 2^bits levels
    mean = torch.stack([d[0] for d in draws]).mean(0)
    se = step.expand_as(x) / 2 / math.sqrt(len(draws))  # a Bernoulli between two levels: sd <= step / 2
    assert bool(((mean - x).abs() <= 5 * se + 1e-6)[w].all())  # unbiased
    rows = sent.sum(1).double()
    ranges = rows if scale == "row" else torch.ones(3, dtype=torch.float64)
    assert torch.equal(nbits, torch.ceil(rows * 10 * bits / 8) + ranges * 8)  # packed codes, (min, max) float32


@pytest.mark.parametrize("ratio, k", [(0.1, 1), (0.3, 3), (0.55, 6), (1.0, 10)])
def test_topk_keeps_the_largest_values_of_each_vector_and_counts_their_indices(ratio, k):
    x, sent = _msg()
    xhat, nbits = make_compressor(parse_compression(f"topk:ratio={ratio}"), 3).roundtrip(x, sent, None)
    kept = xhat != 0
    assert bool((kept.sum(-1) == k).all())
    assert torch.equal(xhat[kept], x[kept])
    smallest_kept = torch.where(kept, x.abs(), torch.inf).amin(-1)
    largest_dropped = torch.where(kept, -torch.inf, x.abs()).amax(-1)
    assert bool((smallest_kept >= largest_dropped).all())
    rows = sent.sum(1).double()
    assert torch.equal(nbits, rows * k * 4 + torch.ceil(rows * k * 4 / 8))  # float32 values, 4-bit indices (of 10)


def test_vq_sends_codewords_learns_them_by_lloyd_steps_and_counts_the_codebook_when_it_changes():
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([[-2.0, -2.0], [2.0, 2.0], [2.0, -2.0], [-2.0, 2.0]])
    pick = torch.randint(4, (2, 256), generator=g)
    x = (centres[pick] + 0.1 * torch.randn(2, 256, 2, generator=g)).reshape(2, 128, 4)  # two sub-vectors a row
    sent = torch.ones(2, 128, dtype=torch.bool)
    comp = make_compressor(parse_compression("vq:codes=4,dim=2"), 2)
    xhat, nbits = comp.roundtrip(x, sent, torch.Generator().manual_seed(1))
    book = comp.book.clone()
    subs = xhat.reshape(2, -1, 2)
    assert all(bool((subs[j][:, None] == book[j][None]).all(-1).any(-1).all()) for j in range(2))  # codewords only
    codes = 128 * 2 * 2 / 8  # two 2-bit codes a row
    assert torch.equal(nbits, torch.full((2,), codes + 4 * 2 * 4.0, dtype=torch.float64))  # codes + codebook
    _, again = comp.roundtrip(x, sent, None)
    assert torch.equal(again, torch.full((2,), codes, dtype=torch.float64))  # the codebook goes once an epoch
    err0 = ((xhat - x) ** 2).mean()
    # Lloyd's step: every codeword moves to the mean of the sub-vectors it coded (over the epoch's two messages)
    code = torch.cdist(x.reshape(2, -1, 2), book).argmin(-1)
    expect = torch.stack([
        torch.stack([x.reshape(2, -1, 2)[j][code[j] == c].mean(0) if (code[j] == c).any() else book[j, c]
                     for c in range(4)]) for j in range(2)
    ])  # fmt: skip
    comp.end_epoch()
    assert torch.allclose(comp.book, expect, atol=1e-6)
    xhat2, nbits2 = comp.roundtrip(x, sent, None)
    assert bool((nbits2 > again).all())  # the next epoch's first message carries the codebook again
    assert ((xhat2 - x) ** 2).mean() <= err0


@pytest.mark.parametrize(
    "spec, message",
    [
        ("zip", "Unknown compressor 'zip'"),
        ("quant:bits=0", "bits must be in (0, 16]"),
        ("quant:bits=4,levels=3", "unknown parameter 'levels'"),
        ("topk:ratio=1.5", "ratio must be in (0, 1]"),
        ("vq:codes=1", "codes must be in (1, 65536]"),
        ("quant:scale=col", "scale is one of message, row"),
    ],
)
def test_bad_specs_are_one_clear_message(spec, message):
    with pytest.raises(VFLBenchError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_compression(spec)


def test_a_local_step_replays_what_the_server_received_and_the_gradient_the_party_got():
    """Party: r = P (its representation is its parameter); server: loss = sum(W * received^2). At the exchange the
    party gets G = 2 W0 r0; in a local step with W moved and P moved, the server computes on r0 (stale) and the party
    back-propagates G (stale), not 2 W1 P1."""
    ch = Channel(1)
    ch.stale = StaleExchange()
    sent = torch.ones(1, 3, dtype=torch.bool)
    p = torch.tensor([[[1.0, -2.0], [0.5, 0.0], [3.0, 1.0]]], requires_grad=True)
    w = torch.tensor([0.5, 2.0], requires_grad=True)
    ch.stale.start_exchange()
    (w * ch.up(p, sent) ** 2).sum().backward()
    g0 = p.grad.clone()
    assert torch.equal(g0, 2 * w.detach() * p.detach())
    r0 = p.detach().clone()
    with torch.no_grad():
        p -= 0.1 * p.grad
        w -= 0.1 * w.grad
    p.grad, w.grad = None, None
    ch.stale.start_replay()
    received = ch.up(p, sent)
    ch.stale.stop()
    assert torch.equal(received, r0)  # the server's side: the exchange's values
    (w * received**2).sum().backward()
    assert torch.equal(p.grad, g0)  # the party's side: the exchange's gradient
    assert torch.equal(w.grad, (r0**2).sum((0, 1)))  # the server's own gradient, on the stale values
    assert ch.totals["train_up"].sum() == 0 and len(ch._step) == 1  # the replay crossed nothing


def _run(tmp_path, name, *extra):
    out = tmp_path / name
    r = runner.invoke(
        app,
        ["run", "--dataset", "credit", "--method", "svfl", "--parties", "4", "--train-missing", "none",
         "--test-missing", "none", "--seed", "0", "--out", str(out), "--quiet", *extra],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    (run_dir,) = list(out.iterdir())
    man = json.loads((run_dir / "manifest.json").read_text())
    res = pd.read_csv(run_dir / "results.csv")
    return man, float(res.loc[res["metric"] == "f1", "value"].iloc[0]), (run_dir / "results.csv").read_bytes()


@needs_mirror
@pytest.mark.slow
def test_the_communication_bars_on_credit(tmp_path):
    """Issue "communication": Standard VFL on Credit, 4 parties, no missing blocks, seed 0: quant:bits=4 for 10
    epochs sends at most 15% of the plain run's upward bytes within 2 F1 points; 5 local steps for 2 epochs (the
    plain run's updates) at most 25% within 3 points; --local-steps 1 is the plain run, bit for bit."""
    plain, f1, csv = _run(tmp_path, "plain", "--epochs", "10")
    quant, f1_q, _ = _run(tmp_path, "quant", "--epochs", "10", "--compress", "quant:bits=4")
    local, f1_l, _ = _run(tmp_path, "local", "--epochs", "2", "--local-steps", "5")
    _, _, csv_1 = _run(tmp_path, "one", "--epochs", "10", "--local-steps", "1")
    up = plain["extras"]["comm_bytes_up"]
    assert quant["extras"]["comm_bytes_up"] <= 0.15 * up and abs(f1_q - f1) <= 2
    assert local["extras"]["comm_bytes_up"] <= 0.25 * up and abs(f1_l - f1) <= 3
    assert csv_1 == csv
    assert quant["config"]["settings"]["compress"] == "quant:bits=4,scale=message,down=0"


def test_compression_and_local_steps_refuse_what_they_cannot_do_in_one_line():
    for extra, message in [
        (["--method", "local", "--compress", "quant:bits=4"], "sends nothing that a compressor could act on"),
        (["--method", "sum", "--compress", "quant:bits=4", "--mechanism", "pbm"], "PBM's release is already quantised"),
        (["--method", "ensemble", "--local-steps", "5"], "replays the exchange at the party-to-server boundary"),
        (["--method", "svfl", "--local-steps", "0"], "at least 1"),
    ]:
        r = runner.invoke(app, ["run", "--dataset", "synthetic", *extra, "--out", "/nonexistent/never"])
        assert r.exit_code == 2 and message in r.output, (extra, r.output)


@needs_mirror
@pytest.mark.parametrize(
    "spec, method, q",
    [
        ("quant:bits=4", "svfl", 3),
        pytest.param("topk:ratio=0.1", "laser", 1, marks=pytest.mark.integration),
        pytest.param("vq:codes=16", "svfl", 1, marks=pytest.mark.integration),
        pytest.param("none", "laser", 5, marks=pytest.mark.integration),
        pytest.param("quant:bits=4,down=1", "svfl", 2, marks=pytest.mark.integration),
        pytest.param("vq:codes=16,down=1", "laser", 1, marks=pytest.mark.integration),
        # bar `trust` 3: a label defense and compressed gradients meet in one order in both runtimes
        pytest.param("quant:bits=4,down=1;gaussian:scale=1", "svfl", 1, marks=pytest.mark.integration),
        pytest.param("quant:bits=4,down=1;max_norm", "laser", 1, marks=pytest.mark.integration),
    ],
)
def test_across_processes_the_payload_crosses_the_wire_and_gives_the_numbers_of_one_process(spec, method, q, tmp_path):
    """Compression and local steps across processes: the same results.csv as one process, and the wire's bytes (the
    packed payload) equal to the accounted. In a local step each process replays what it kept of the exchange. With a
    label defense (``SPEC;DEFENSE``) the defended gradient is what is compressed, in both runtimes."""
    spec, _, defense = spec.partition(";")
    flags = ["--dataset", "credit", "--method", method, "--parties", "4", "--epochs", "2", "--train-missing",
             "mcar:0.3", "--test-missing", "none,mcar:0.5", "--seed", "0", "--compress", spec, "--local-steps",
             str(q), "--quiet", *(["--label-defense", defense] if defense else [])]  # fmt: skip
    outs = {}
    for rt in ("inprocess", "processes"):
        r = runner.invoke(app, ["run", *flags, "--runtime", rt, "--out", str(tmp_path / rt)])
        assert r.exit_code == 0, r.output
        (outs[rt],) = list((tmp_path / rt).iterdir())
    one_csv, many_csv = (pd.read_csv(outs[rt] / "results.csv") for rt in ("inprocess", "processes"))
    pd.testing.assert_frame_equal(one_csv, many_csv[one_csv.columns])  # (a run that survives a lost party adds a
    # parties_lost column across processes)
    man = json.loads((outs["processes"] / "manifest.json").read_text())
    one = json.loads((outs["inprocess"] / "manifest.json").read_text())
    rt = man["runtime"]
    assert rt["measured_equals_accounted"]
    assert rt["measured"]["bytes_train_up"] == one["extras"]["comm_bytes_up"] == man["extras"]["comm_bytes_up"]


@needs_mirror
@pytest.mark.parametrize("method", ["svfl", "sum"])
def test_compression_after_ldp_noise_keeps_the_certified_epsilon(method, tmp_path):
    """Noise first, then compression: what crosses is a function of the LDP release alone (post-processing), so the
    run's certified epsilons are those of the same run without compression, and the bytes are the compressed ones."""
    mans = {}
    for name, extra in (("ldp", []), ("ldp_quant", ["--compress", "quant:bits=4"])):
        out = tmp_path / name
        r = runner.invoke(app, ["run", "--dataset", "credit", "--method", method, "--parties", "4", "--epochs", "1",
                                "--train-missing", "none", "--test-missing", "none", "--seed", "0", "--mechanism",
                                "ldp:sigma=0.5", "--quiet", "--out", str(out), *extra])  # fmt: skip
        assert r.exit_code == 0, r.output
        (run_dir,) = list(out.iterdir())
        mans[name] = json.loads((run_dir / "manifest.json").read_text())
    eps = {n: {k: v for k, v in m["extras"].items() if k.startswith("epsilon")} for n, m in mans.items()}
    assert eps["ldp"] and eps["ldp"] == eps["ldp_quant"]
    assert mans["ldp_quant"]["extras"]["comm_bytes_up"] < 0.15 * mans["ldp"]["extras"]["comm_bytes_up"]
    assert mans["ldp_quant"]["communication"]["compression"] == "quant:bits=4,scale=message,down=0"


def test_a_label_defense_changes_the_gradient_before_it_is_compressed_and_the_party_gets_the_compressed_one():
    """One process, ``down=1`` with a label defense: the defense sees the server's exact gradient, the compressor
    packs what the defense returned, and the party (and an attack's tap) gets the compressor's output, a few levels per
    message; the bytes counted are that payload's."""
    from vflbench.compression.channel import CompressedChannel, compression_generators
    from vflbench.compression.spec import parse_compression
    from vflbench.core.rng import Streams

    ch = CompressedChannel(2, parse_compression("quant:bits=2,down=1"), compression_generators(Streams(0), "cpu"))
    seen_by_defense, seen_by_tap = [], []

    def defense(g, sent, party_of, summed):
        seen_by_defense.append(g.clone())
        return g + 0.5  # a shift the party would not see uncompressed

    class Tap:
        def on_up(self, *a):
            pass

        def on_down(self, g, *a):
            seen_by_tap.append(g.clone())

    ch.down_hooks.append(defense)
    ch.taps.append(Tap())
    reps = torch.randn(2, 64, 3, requires_grad=True)
    sent = torch.ones(2, 64, dtype=torch.bool)
    received = ch.up(reps, sent)
    g = torch.randn(2, 64, 3)
    received.backward(g)
    assert torch.equal(seen_by_defense[0], g)  # the exact gradient, not a compressed one
    party = reps.grad
    assert torch.equal(seen_by_tap[0], party)
    for m in range(2):  # 2 bits: at most 4 levels in each party's message, spanning the defended gradient's range
        levels = torch.unique(party[m])
        assert len(levels) <= 4
        assert abs(float(levels.min()) - float((g[m] + 0.5).min())) < 1e-5
        assert abs(float(levels.max()) - float((g[m] + 0.5).max())) < 1e-5


def test_local_steps_keep_the_training_exchange_only_never_an_evaluations_crossings():
    """What the replay needs is the training exchange's crossings: an evaluation pass between exchanges (every
    batch of the test set) adds nothing to what is kept, and the next exchange starts afresh."""
    ch = Channel(2)
    ch.stale = StaleExchange()
    sent = torch.ones(2, 8, dtype=torch.bool)
    reps = torch.randn(2, 8, 4, requires_grad=True)
    ch.stale.start_exchange()
    ch.up(reps, sent).sum().backward()
    assert len(ch.stale.kept) == 1 and ch.stale.kept[0][1] is not None
    ch.mode = "eval"
    with torch.no_grad():
        for _ in range(50):
            ch.up(torch.randn(2, 8, 4), sent)
    assert len(ch.stale.kept) == 1
    ch.mode = "train"
    ch.stale.start_exchange()
    assert ch.stale.kept == []
