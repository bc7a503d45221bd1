"""Serving a trained federation (issue "serving"): the saved model and predictions; a served prediction equals the
offline one bit for bit when no deadline binds, and equals the offline prediction with a block missing when that
party is past the deadline; concurrent requests are batched; bad requests get a 4xx; a killed party process is a
missing block and rejoins."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from vflbench.cli import app

from .conftest import needs_mirror

runner = CliRunner()
TESTS = "none,mcar:0,0,0,1"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("saved")
    r = runner.invoke(app, ["run", "--dataset", "credit", "--method", "laser", "--parties", "4", "--epochs", "1",
                            "--train-missing", "mcar:0.5", "--seed", "0", "--test-missing", TESTS, "--save-model",
                            "--quiet", "--out", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    (run_dir,) = list(out.iterdir())
    return run_dir


def _saved_predictions(run_dir, setting):
    p = pd.read_csv(run_dir / "predictions.csv")
    return p[p["test_missing"] == setting].set_index("row")


def _same_scores(a, b) -> bool:
    """Scores are float32 values: equal bit for bit as float32 (a CSV parser that rounds the 17 written digits to
    the double next to the value's, as older pandas' default does, still gives the same float32)."""
    return np.array_equal(np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32), equal_nan=True)


@needs_mirror
def test_the_run_folder_holds_each_partys_part_the_servers_and_the_predictions(saved):
    index = json.loads((saved / "model" / "model.json").read_text())
    assert set(index["parts"]) == {"server", "party_0", "party_1", "party_2", "party_3"}
    import torch

    from vflbench.serving.model_files import load_part

    parts = {n: load_part(saved, n) for n in index["parts"]}
    idx = torch.cat([p["flat_index"] for p in parts.values()])
    assert len(idx) == len(torch.unique(idx))  # each value held by exactly one of them
    p = pd.read_csv(saved / "predictions.csv")
    assert list(p.columns) == ["row", "test_missing", "predicted", "score", "predictors"]
    assert len(p) == 2 * 6000 and set(p["test_missing"]) == {"none", "mcar:0,0,0,1"}
    # LASER-VFL answers with its valid heads: all four with every block, three when party 3's is missing
    assert set(p[p["test_missing"] == "none"]["predictors"]) == {4}
    assert set(p[p["test_missing"] == "mcar:0,0,0,1"]["predictors"]) == {3}


def _client(run_dir, deadline_ms, delays):
    from fastapi.testclient import TestClient

    from vflbench.serving.app import Server, make_app
    from vflbench.serving.federation import InProcessParties, Link, Served, parse_delays

    served = Served(run_dir)
    parties = InProcessParties(served, parse_delays(delays, served.k), Link())
    return TestClient(make_app(Server(served, parties, deadline_ms))), parties


@needs_mirror
def test_served_predictions_equal_the_offline_ones_and_a_late_party_is_a_missing_block(saved):
    client, _ = _client(saved, 600_000, [])
    with client:
        r = client.post("/predict", json={"split": "test"})
        assert r.status_code == 200
        got = pd.DataFrame(r.json()["predictions"]).set_index("row")
        off = _saved_predictions(saved, "none")
        assert (got["predicted"] == off["predicted"]).all() and _same_scores(got["score"], off["score"])  # bit for bit
        assert got["parties"].iloc[0] == [0, 1, 2, 3]
    # party 3 answers 20 s late; the server waits its 50 ms deadline (the bound leaves room for a loaded CI machine:
    # 0.45 s was seen under load with a 0.4 s bound, so the late party is made far later instead of the bound tighter)
    client, _ = _client(saved, 50, ["party3=20000"])
    with client:
        t0 = time.perf_counter()
        r = client.post("/predict", json={"rows": list(range(0, 6000, 7))})
        assert r.status_code == 200 and 0.05 <= time.perf_counter() - t0 < 5.0  # it waited the deadline, not party 3
        got = pd.DataFrame(r.json()["predictions"]).set_index("row")
        off = _saved_predictions(saved, "mcar:0,0,0,1").loc[got.index]
        assert (got["predicted"] == off["predicted"]).all() and _same_scores(got["score"], off["score"])
        assert got["parties"].iloc[0] == [0, 1, 2]


@needs_mirror
def test_bad_requests_get_a_4xx_with_the_reason_and_the_server_stays_up(saved):
    client, _ = _client(saved, 1000, [])
    with client:
        for body, status, words in [
            ({"rows": [1, 6000]}, 400, "not a test row"),
            ({"rows": []}, 400, "non-empty list"),
            ({"rows": ["a"]}, 400, "integers"),
            ({"split": "train"}, 400, '"split" takes "test"'),
            ({"ids": ["x"]}, 400, "no IDs"),
            ({"rows": [1], "split": "test"}, 400, "exactly one"),
            ({"row": [1]}, 400, "unknown field"),
            ([1, 2], 400, "JSON object"),
        ]:
            r = client.post("/predict", json=body)
            assert r.status_code == status and words in r.json()["detail"], (body, r.text)
        r = client.post("/predict", content=b"not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and "not JSON" in r.json()["detail"]
        assert client.get("/health").json()["status"] == "ok"
        assert client.post("/predict", json={"rows": [0]}).status_code == 200


@needs_mirror
def test_concurrent_requests_are_batched_and_each_gets_its_own_rows(saved):
    from vflbench.serving.app import Server
    from vflbench.serving.federation import InProcessParties, Link, Served, parse_delays

    served = Served(saved)
    server = Server(served, InProcessParties(served, parse_delays("20", served.k), Link()), 1000, batch_window_ms=20)
    off = _saved_predictions(saved, "none")

    async def go():
        await server.start()
        rows = [np.arange(i * 50, i * 50 + 50) for i in range(12)]
        outs = await asyncio.gather(*(server.submit(r, r.tolist(), "row") for r in rows))
        await server.stop()
        return rows, outs

    rows, outs = asyncio.run(go())
    assert max(o["batched_with"] for o in outs) > 1 and server.batches < 12
    for r, o in zip(rows, outs, strict=True):
        got = pd.DataFrame(o["predictions"])
        assert got["row"].tolist() == r.tolist()
        assert (got["predicted"].to_numpy() == off.loc[r, "predicted"].to_numpy()).all()


@needs_mirror
@pytest.mark.integration
def test_party_processes_load_their_own_part_a_killed_one_is_a_missing_block_and_rejoins(saved):
    from vflbench.serving.app import Server
    from vflbench.serving.federation import Link, ProcessParties, Served, parse_delays

    served = Served(saved, parts=["server"])
    parties = ProcessParties(saved, 4, parse_delays([], 4), Link())
    parties.start()
    parties.wait_ready()
    server = Server(served, parties, 3000)
    rows = np.arange(0, 6000, 11)

    async def ask():
        return await server.submit(rows, rows.tolist(), "row")

    async def go():
        await server.start()
        first = await ask()
        parties.restart = False
        parties.kill(2)
        lost = await ask()
        parties.restart = True
        parties.supervise()  # restarted: it loads its part again
        await asyncio.get_running_loop().run_in_executor(None, parties.wait_ready)
        back = await ask()
        await server.stop()
        return first, lost, back

    first, lost, back = asyncio.run(go())
    off = _saved_predictions(saved, "none").loc[rows]
    f = pd.DataFrame(first["predictions"])
    assert (f["predicted"].to_numpy() == off["predicted"].to_numpy()).all()
    assert _same_scores(f["score"], off["score"])  # across processes, bit for bit
    assert lost["predictions"][0]["parties"] == [0, 1, 3]
    assert back["predictions"][0]["parties"] == [0, 1, 2, 3]
    assert (pd.DataFrame(back["predictions"])["predicted"].to_numpy() == off["predicted"].to_numpy()).all()


def test_a_run_on_party_files_is_asked_by_sample_id(tmp_path):
    """{"ids": [...]} names test samples of a run trained on party files (--party-data): the same answers as their
    rows."""
    from fastapi.testclient import TestClient

    from vflbench.serving.app import Server, make_app
    from vflbench.serving.federation import InProcessParties, Link, Served, parse_delays

    rng = np.random.default_rng(0)
    n = 300
    ids = np.array([f"u{i:04d}" for i in range(n)])
    x = rng.normal(size=(n, 4))
    y = np.where(x[:, 0] + x[:, 2] > 0, "yes", "no")
    files = {
        "a": pd.DataFrame({"ID": ids, "a1": x[:, 0], "label": y}),
        "b": pd.DataFrame({"ID": ids, "b1": x[:, 1]}),
        "c": pd.DataFrame({"ID": ids, "c1": x[:, 2], "c2": x[:, 3]})[rng.random(n) < 0.8],
    }
    for name, df in files.items():
        df.to_csv(tmp_path / f"{name}.csv", index=False)
    spec = ",".join(f"party{k}={tmp_path / f'{name}.csv'}" for k, name in enumerate(files))
    r = runner.invoke(app, ["run", "--party-data", spec, "--id-column", "ID", "--align", "plain", "--data-opt",
                            "target=label",
                            "--parties", "3", "--method", "svfl", "--epochs", "2", "--test-missing", "none",
                            "--save-model", "--quiet", "--out", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code == 0, r.output
    (run_dir,) = list((tmp_path / "o").iterdir())
    served = Served(run_dir)
    test_ids = list(served.ids)
    with TestClient(make_app(Server(served, InProcessParties(served, parse_delays([], 3), Link()), 1000))) as client:
        by_id = client.post("/predict", json={"ids": test_ids[:5]}).json()["predictions"]
        by_row = client.post("/predict", json={"rows": [served.ids[i] for i in test_ids[:5]]}).json()["predictions"]
        assert [p["id"] for p in by_id] == test_ids[:5]
        assert [p["predicted"] for p in by_id] == [p["predicted"] for p in by_row]
        bad = client.post("/predict", json={"ids": ["nobody"]})
        assert bad.status_code == 400 and "not a test sample" in bad.json()["detail"]


@needs_mirror
@pytest.mark.parametrize("method", ["svfl", "ensemble", "gbdt", "secureboost"])
def test_every_kind_of_method_is_saved_and_served_as_it_predicted_offline(method, tmp_path):
    opts = ["--method-opt", "trees=5"] if method in ("gbdt", "secureboost") else ["--epochs", "1"]
    r = runner.invoke(app, ["run", "--dataset", "credit", "--method", method, "--parties", "4", "--train-missing",
                            "mcar:0.5", "--test-missing", TESTS, "--seed", "0", *opts, "--save-model", "--quiet",
                            "--out", str(tmp_path)])  # fmt: skip
    assert r.exit_code == 0, r.output
    (run_dir,) = list(tmp_path.iterdir())
    from vflbench.serving.federation import Served

    served = Served(run_dir)
    rows = np.arange(0, 6000, 13)
    for setting, answered in (("none", [True] * 4), ("mcar:0,0,0,1", [True, True, True, False])):
        pred, score, _ = served.predict(rows, np.array(answered))
        off = _saved_predictions(run_dir, setting).loc[rows]
        # Ensemble breaks tied votes, and Standard VFL answers an incomplete sample, with a random class (the method's
        # generator): a fresh draw each time
        if method != "ensemble" and not (method == "svfl" and setting != "none"):
            assert (pred == off["predicted"].to_numpy()).all(), setting
            assert _same_scores(score, off["score"]), setting


def test_serve_refuses_bad_input_in_one_line(tmp_path):
    for args, words in [
        ([str(tmp_path)], "not a finished run folder"),
        ([str(tmp_path), "--deadline-ms", "0"], "--deadline-ms must be in"),
        ([str(tmp_path), "--runtime", "threads"], "--runtime takes inprocess or processes"),
        ([str(tmp_path), "--port", "0"], "--port must be in"),
        ([str(tmp_path), "--net-latency", "-5"], "--net-latency must be in [0"),
        ([str(tmp_path), "--net-bandwidth", "-1"], "--net-bandwidth must be in [0"),
        ([str(tmp_path), "--batch-window-ms", "-2"], "--batch-window-ms must be in [0"),
        ([str(tmp_path), "--seed", "-1"], "--seed must be a non-negative"),
        ([str(tmp_path), "--max-request-rows", "0"], "--max-request-rows must be in"),
    ]:
        r = runner.invoke(app, ["serve", *args])
        assert r.exit_code == 2 and words in r.output, (args, r.output)
    from vflbench.core.errors import VFLBenchError
    from vflbench.serving.federation import parse_delays

    for bad, words in [
        ("party9=5", "not a party"),
        ("lognormal:mean=3", "lognormal:median=MS"),
        ("soon", "milliseconds"),
    ]:
        with pytest.raises(VFLBenchError, match=words):
            parse_delays([bad], 4)
    d = parse_delays(["lognormal:median=30,sigma=0.8", "party3=2000"], 4)
    assert str(d[3]) == "2000" and str(d[0]) == "lognormal:median=30,sigma=0.8"


@needs_mirror
def test_a_saved_run_without_a_model_is_refused_with_the_fix(tmp_path):
    r = runner.invoke(app, ["run", "--dataset", "credit", "--method", "svfl", "--epochs", "1", "--quiet", "--out",
                            str(tmp_path)])  # fmt: skip
    assert r.exit_code == 0, r.output
    (run_dir,) = list(tmp_path.iterdir())
    r = runner.invoke(app, ["serve", str(run_dir)])
    assert r.exit_code == 2 and "--save-model" in r.output


def _party_files(tmp_path, n=600, seed=0):
    """Three parties' files of one table: party 2 holds 80% of the IDs (its block is missing for the rest)."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"u{i:04d}" for i in range(n)])
    x = rng.normal(size=(n, 5))
    y = np.where(x[:, 0] + x[:, 2] - x[:, 4] > 0, "yes", "no")
    files = {
        "a": pd.DataFrame({"ID": ids, "a1": x[:, 0], "label": y}),
        "b": pd.DataFrame({"ID": ids, "b1": x[:, 1], "b2": x[:, 2]}),
        "c": pd.DataFrame({"ID": ids, "c1": x[:, 3], "c2": x[:, 4]}).iloc[np.sort(rng.permutation(n)[: int(0.8 * n)])],
    }
    for name, df in files.items():
        df.to_csv(tmp_path / f"{name}.csv", index=False)
    return ",".join(f"party{k}={tmp_path / f'{name}.csv'}" for k, name in enumerate(files))


@pytest.mark.parametrize("method", ["laser", "secureboost"])
@pytest.mark.parametrize("case", ["party_files", "fail_party"])
def test_served_answers_equal_the_saved_ones_with_blocks_not_held_and_parties_lost(method, case, tmp_path):
    """Through HTTP, with no deadline binding: the served mask is the offline one (a party's block of a sample whose
    ID it does not hold is missing; a party lost in training is missing from every prediction), so every served
    answer equals the saved one at test setting none, bit for bit."""
    from fastapi.testclient import TestClient

    from vflbench.serving.app import Server, make_app
    from vflbench.serving.federation import InProcessParties, Link, Served, parse_delays

    spec = _party_files(tmp_path)
    train = ["--method-opt", "trees=6", "--method-opt", "max_depth=3"] if method == "secureboost" else ["--epochs", "3"]
    fail = ["--fail-party", "1@3"] if case == "fail_party" else []
    r = runner.invoke(app, ["run", "--party-data", spec, "--id-column", "ID", "--align", "plain", "--data-opt",
                            "target=label", "--parties", "3", "--method", method, *train, *fail, "--test-missing",
                            "none", "--save-model", "--quiet", "--out", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code == 0, r.output
    (run_dir,) = list((tmp_path / "o").iterdir())
    served = Served(run_dir)
    assert served.lost == ([1] if case == "fail_party" else [])
    off = _saved_predictions(run_dir, "none")
    with TestClient(make_app(Server(served, InProcessParties(served, parse_delays([], 3), Link()), 600_000))) as c:
        got = pd.DataFrame(c.post("/predict", json={"split": "test"}).json()["predictions"]).set_index("row")
        by_id = c.post("/predict", json={"ids": list(served.ids)[:7]}).json()["predictions"]
    assert (got["predicted"] == off["predicted"]).all()
    assert _same_scores(got["score"], off["score"])
    held = served.held
    assert [list(p) for p in got["parties"]] == [np.flatnonzero(h).tolist() for h in held]
    if case == "fail_party":
        assert all(1 not in p for p in got["parties"])
    else:
        assert any(2 not in p for p in got["parties"]) and any(2 in p for p in got["parties"])
    assert [p["predicted"] for p in by_id] == off.loc[
        [served.ids[i] for i in list(served.ids)[:7]], "predicted"
    ].tolist()


def _late_server(saved, deadline_ms=200, **kw):
    from vflbench.serving.app import Server
    from vflbench.serving.federation import InProcessParties, Link, Served, parse_delays

    served = Served(saved)
    return Server(served, InProcessParties(served, parse_delays(["party3=20000"], 4), Link()), deadline_ms, **kw)


@needs_mirror
def test_batches_take_every_waiting_request_however_late_a_party_is(saved):
    """With party 3 always late (each batch waits the 200 ms deadline) and an event loop busy with other work (each
    turn of it 3 ms, as a server parsing many requests is), requests that came while a batch waited all join the
    next batch: 31 requests in at most 3 batches, not a batch or two each."""
    server = _late_server(saved)

    async def busy():  # a loop whose every turn takes 3 ms
        while True:
            time.sleep(0.003)
            await asyncio.sleep(0)

    async def go():
        await server.start()
        hog = asyncio.create_task(busy())
        first = asyncio.create_task(server.submit(np.arange(4), list(range(4)), "row"))
        await asyncio.sleep(0.05)  # the first batch is waiting for the parties
        rest = [np.arange(10 * i, 10 * i + 10) for i in range(30)]
        outs = await asyncio.gather(first, *(server.submit(r, r.tolist(), "row") for r in rest))
        hog.cancel()
        await server.stop()
        return outs

    outs = asyncio.run(go())
    assert server.batches <= 3 and max(o["batched_with"] for o in outs) >= 25, [o["batched_with"] for o in outs]
    assert all(o["predictions"][0]["parties"] == [0, 1, 2] for o in outs)


@needs_mirror
def test_requests_over_the_limits_get_413_and_malformed_ones_a_short_400(saved):
    from fastapi.testclient import TestClient

    from vflbench.serving.app import make_app

    server = _late_server(saved, deadline_ms=100, max_request_bytes=4096, max_request_rows=50)
    with TestClient(make_app(server)) as client:
        for body, status, words in [
            (json.dumps({"rows": list(range(51))}).encode(), 413, "at most 50"),
            (json.dumps({"split": "test"}).encode(), 413, "at most 50"),  # the test split has 6,000 rows
            (json.dumps({"rows": list(range(2000))}).encode(), 413, "at most 4096"),  # bytes, by Content-Length
            (b"[" * 2000 + b"]" * 2000, 400, "nests too deeply"),
            (json.dumps({"rows": [1, True]}).encode(), 400, "got True"),
            (json.dumps({"rows": [1.0]}).encode(), 400, "got 1.0"),
            (json.dumps({"rows": [[1]]}).encode(), 400, "got [1]"),
            (json.dumps({"rows": [10**30]}).encode(), 400, "not a test row"),
            (json.dumps({"ids": [{"a": 1}]}).encode(), 400, "no IDs"),
            (json.dumps({"rows": "x" * 3000}).encode(), 400, "non-empty list"),
            (json.dumps({"x" * 3000: 1}).encode(), 400, "unknown field"),
        ]:
            r = client.post("/predict", content=body, headers={"content-type": "application/json"})
            assert r.status_code == status and words in r.json()["detail"], (body[:60], r.text[:300])
            assert len(r.content) < 400, r.text[:100]  # a short body: the input is never echoed at length

        def chunks():  # no Content-Length: the limit holds while the body streams in
            yield b'{"rows": ['
            for _ in range(500):
                yield b"1, " * 10
            yield b"1]}"

        r = client.post("/predict", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "more than 4096 bytes" in r.json()["detail"]
        assert client.post("/predict", json={"rows": [0, 1]}).status_code == 200  # the server stays up
        schema = client.get("/openapi.json").json()["paths"]["/predict"]["post"]["requestBody"]["content"]
        props = schema["application/json"]["schema"]["properties"]
        assert set(props) == {"split", "rows", "ids"} and props["rows"]["maxItems"] == 50


@needs_mirror
def test_health_names_the_parties_that_answered_the_last_deadline(saved):
    from fastapi.testclient import TestClient

    from vflbench.serving.app import make_app

    server = _late_server(saved, deadline_ms=50)
    with TestClient(make_app(server)) as client:
        h = client.get("/health").json()
        assert h["status"] == "ok" and h["parties_answered_last_batch"] is None  # nothing asked yet
        client.post("/predict", json={"rows": [0]})
        h = client.get("/health").json()
        assert h["status"] == "degraded" and h["parties_answered_last_batch"] == [0, 1, 2]
        assert h["parties_running"] == [True] * 4 and h["rounds_per_prediction"] == 1


@needs_mirror
def test_a_party_answer_of_the_wrong_shape_is_a_missing_block_for_that_batch(saved, caplog):
    """Across processes the server replays what each party sent: a party whose answer has the wrong shape, is not
    floating point, holds NaN, or has too few or too many crossings is missing for that batch (logged), and the
    others' answers give the offline prediction without its block."""
    from vflbench.serving.federation import Served

    server_side = Served(saved, parts=["server"])
    rows = np.arange(0, 6000, 97)
    sent = {k: Served(saved, parts=[f"party_{k}"], party=k).party_output(rows) for k in range(4)}
    every = np.ones(4, dtype=bool)
    used, (pred, score, _) = server_side.predict_answered(rows, every, sent)
    off = _saved_predictions(saved, "none").loc[rows]
    assert used.all() and (pred == off["predicted"].to_numpy()).all() and _same_scores(score, off["score"])
    off3 = _saved_predictions(saved, "mcar:0,0,0,1").loc[rows]
    for bad in (
        [a[:, :-1] for a in sent[3]],  # wrong shape
        [a.astype(np.int64) for a in sent[3]],  # not floating point
        [np.full_like(a, np.nan) for a in sent[3]],  # not finite
        sent[3] * 2,  # too many crossings
        [],  # too few
    ):
        caplog.clear()
        used, (pred, score, _) = server_side.predict_answered(rows, every, {**sent, 3: bad})
        assert used.tolist() == [True, True, True, False]
        assert (pred == off3["predicted"].to_numpy()).all() and _same_scores(score, off3["score"])
        assert "party 3's answer is malformed" in caplog.text
    assert server_side.malformed == {3: 5}


def _resign(model_dir, name, data: bytes) -> None:
    """Write ``data`` as a model file and rewrite its checksum in model.json, as an attacker with write access
    to the folder would."""
    import hashlib

    (model_dir / name).write_bytes(data)
    index = json.loads((model_dir / "model.json").read_text())
    part = name.rsplit(".", 1)[0]
    entry = index["parts"][part] if name.endswith(".pt") else index["parts"][part]["structure"]
    entry["sha256"], entry["bytes"] = hashlib.sha256(data).hexdigest(), len(data)
    (model_dir / "model.json").write_text(json.dumps(index))


class _Payload:
    """A pickle that, when loaded by an unrestricted unpickler, creates a file (its code running)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.path}",))


@needs_mirror
@pytest.mark.parametrize("plant", ["pickle", "torch_pickle", "empty", "garbage", "json_of_another_shape", "format1"])
def test_a_model_file_that_is_not_tensors_is_refused_in_one_line_and_runs_nothing(saved, tmp_path, plant):
    import pickle
    import shutil

    import torch

    run_dir = tmp_path / saved.name
    shutil.copytree(saved, run_dir)
    model = run_dir / "model"
    ran = tmp_path / "payload_ran"
    if plant == "pickle":
        _resign(model, "party_1.pt", pickle.dumps({"flat_index": _Payload(ran)}))
    elif plant == "torch_pickle":
        buf = tmp_path / "p.pt"
        torch.save({"flat_index": _Payload(ran)}, buf)
        _resign(model, "server.pt", buf.read_bytes())
    elif plant == "empty":
        _resign(model, "party_0.pt", b"")
    elif plant == "garbage":
        _resign(model, "server.pt", b"\x80\x05not a pickle at all")
    elif plant == "json_of_another_shape":
        _resign(model, "party_2.json", b'{"weights": [1, 2, 3]}')
    else:
        index = json.loads((model / "model.json").read_text())
        index["format"] = 1
        (model / "model.json").write_text(json.dumps(index))
    r = runner.invoke(app, ["serve", str(run_dir), "--port", "8999"])
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert r.exit_code == 2 and r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "model" in r.output and ("save the model again" in r.output.lower() or "--save-model" in r.output), r.output
    assert len(lines) <= 3, r.output  # one message (folded by the console)
    assert not ran.exists()  # the planted code never ran


def _children(pid: int) -> list[int]:
    out = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        ppid = next((ln.split()[1] for ln in text.splitlines() if ln.startswith("PPid:")), None)
        if ppid == str(pid):
            out.append(int(status.parent.name))
    return out


def _gone(pids, within_s: float) -> bool:
    import os

    end = time.monotonic() + within_s
    while time.monotonic() < end:
        alive = []
        for p in pids:
            try:
                os.kill(p, 0)
                state = Path(f"/proc/{p}/status").read_text()
                if "State:\tZ" not in state:
                    alive.append(p)
            except (OSError, FileNotFoundError):
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


@needs_mirror
@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc for the server's child processes")
def test_party_processes_end_when_the_server_is_killed_or_fails_to_start(saved, tmp_path):
    """``vflbench serve --runtime processes``: SIGKILL the server and its party processes end within seconds, their
    temporary folder removed; a server that cannot take its port stops its parties too."""
    import signal
    import socket
    import subprocess
    import sys

    # the server's temporary folder is looked for in a folder of this test's own (TMPDIR), so that another test
    # (or pytest worker) serving at the same time cannot add a folder to the count
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    before = set(tmp.glob("vflbench-serve-*"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "vflbench", "serve", str(saved), "--runtime", "processes", "--port", str(port)]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    line = server.stdout.readline()  # "serving ..." once every party is up
    assert "serving" in line, line
    parties = _children(server.pid)
    assert len(parties) == 4
    assert len(set(tmp.glob("vflbench-serve-*")) - before) == 1
    server.send_signal(signal.SIGKILL)
    server.wait()
    assert _gone(parties, 10), "party processes outlived a killed server"
    assert not (set(tmp.glob("vflbench-serve-*")) - before)
    # a port already taken: the server fails to start, and stops its parties
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cmd[-1] = str(taken.getsockname()[1])
        failed = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        out = failed.communicate(timeout=300)[0]
    assert failed.returncode == 2 and "could not listen" in out, out
    assert not (set(tmp.glob("vflbench-serve-*")) - before)
    assert not _parties_of(failed.pid)


def _parties_of(server_pid: int) -> list[int]:
    """Party processes started by server ``server_pid`` still running (they name it with --parent)."""
    out = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"vflbench.serving.party" in args and b"--parent" in args:
            if args[args.index(b"--parent") + 1] == str(server_pid).encode():
                if "State:\tZ" not in (cmdline.parent / "status").read_text():
                    out.append(int(cmdline.parent.name))
    return out


def test_a_delay_is_charged_once_per_round_and_a_party_late_in_any_round_is_missing():
    """SecureBoost's prediction takes one round per tree level: each round every party still in time draws its
    delay again, the server waits for the last of them (or the deadline), and a party late in any round is missing
    for the batch. One round (the neural methods) is one draw, as before."""
    from types import SimpleNamespace

    from vflbench.serving.federation import InProcessParties, Link, parse_delays

    def timeline(rounds, delays, deadline, seed=0, k=3):
        served = SimpleNamespace(k=k, rounds=rounds, answer_bytes=lambda n: 8 * n)
        return InProcessParties(served, parse_delays(delays, k), Link(), seed).timeline(64, deadline)

    answered, wait = timeline(6, ["10", "party2=30"], 50)
    assert answered.all() and wait == pytest.approx(6 * 30)  # six rounds, each waits for the slowest party
    answered, wait = timeline(6, ["10", "party2=60"], 50)
    assert answered.tolist() == [True, True, False] and wait == pytest.approx(50 + 5 * 10)  # late once: gone
    answered, wait = timeline(1, ["10", "party2=60"], 50)
    assert answered.tolist() == [True, True, False] and wait == pytest.approx(50)
    # jitter: a party is in time over D rounds with probability p^D (lognormal(median 30, sigma 0.8), deadline 50)
    from scipy.stats import norm

    p = norm.cdf(np.log(50 / 30) / 0.8)
    for rounds in (1, 4):
        hits = np.mean([timeline(rounds, ["lognormal:median=30,sigma=0.8"], 50, seed=s)[0] for s in range(1500)])
        assert hits == pytest.approx(p**rounds, abs=0.03), rounds
    # the link's time for the answer's bytes is charged every round too
    served = SimpleNamespace(k=2, rounds=3, answer_bytes=lambda n: 125_000)  # 1 Mbit: 10 ms at 100 Mbit/s
    answered, wait = InProcessParties(served, parse_delays([], 2), Link(2.0, 100.0)).timeline(64, 1000)
    assert answered.all() and wait == pytest.approx(3 * (2 * 2.0 + 10.0))


@needs_mirror
def test_secureboost_is_served_in_one_round_per_tree_level(tmp_path):
    r = runner.invoke(app, ["run", "--dataset", "credit", "--method", "secureboost", "--parties", "4", "--method-opt",
                            "trees=3", "--method-opt", "max_depth=4", "--test-missing", "none", "--save-model",
                            "--quiet", "--out", str(tmp_path)])  # fmt: skip
    assert r.exit_code == 0, r.output
    from vflbench.serving.federation import Served

    served = Served(next(tmp_path.iterdir()))
    assert served.rounds == max(max(t.depth) for t in served.method.model.trees) == 4
