"""The ``aligned:party0=a.csv,...`` dataset (made by ``--party-data``): the parties' own files aligned in one process
(:func:`vflbench.data.alignment.load_aligned`) or, when the parties are processes, across them: the label side
(the server) blinds its IDs once and each party answers with its own, over the wire, so no file leaves its party
(:func:`load_distributed`). How IDs are read, intersected and assembled is :mod:`vflbench.data.alignment`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import VFLBenchError
from .alignment import (
    DEFAULTS,
    HELP,
    LabelSide,
    _header,
    assemble,
    label_side,
    load_aligned,
    parse_party_data,
    party_block,
    psi_answer,
    psi_request,
    psi_result,
    read_party,
)


def aligned_spec(name: str):
    """The DatasetSpec of ``aligned:party0=a.csv,...`` (made by ``--party-data``)."""
    from .datasets.base import DatasetInfo
    from .datasets.registry import DatasetSpec

    files = parse_party_data(name.split(":", 1)[1])
    info = DatasetInfo(
        name=name, title=name, kind="tabular", n_classes=0, shape=(0,), source=name, license="the user's", embeds=True
    )

    def load(_dir, opts):
        from ..core.role import current_wire

        wire = current_wire()
        return load_aligned(name, opts) if wire is None else load_distributed(name, opts, wire)

    def probe(opts):
        from ..core.role import federated

        if federated():  # a party or server process may hold its own file only: the shapes come with the alignment
            return info
        return load_aligned(name, opts).info

    from ..core.paths import user_path

    return DatasetSpec(
        info,
        load,
        (),
        dict(DEFAULTS),
        dict(HELP),
        fetcher=lambda _dir, download: {},
        available_fn=lambda _dir: _federated() or all(user_path(p).exists() for _, p in files),
        prober=probe,
    )


def _federated() -> bool:
    from ..core.role import federated

    return federated()


def _send_bytes(wire, data: bytes, dst: int) -> None:
    import torch

    wire.send(torch.tensor([len(data)], dtype=torch.int64), dst, None)
    if data:
        wire.send(torch.frombuffer(bytearray(data), dtype=torch.uint8), dst, None)


def _recv_bytes(wire, src: int) -> bytes:
    import torch

    n = int(wire.recv((1,), torch.int64, src, None))
    return bytes(wire.recv((n,), torch.uint8, src, None).numpy().tobytes()) if n else b""


def _send_array(wire, a: np.ndarray, dst: int) -> None:
    import torch

    wire.send(torch.from_numpy(np.ascontiguousarray(a)), dst, None)


def _recv_array(wire, n: int, dtype, src: int) -> np.ndarray:

    return wire.recv((n,), dtype, src, None).numpy()


def _ids_blob(ids) -> bytes:
    """IDs as one UTF-8 blob, newline-separated (an ID holds no newline: it is one field of a table row)."""
    return "\n".join(ids).encode()


def _blob_ids(blob: bytes) -> list[str]:
    return blob.decode().split("\n") if blob else []


def load_distributed(name: str, opts: dict[str, Any], wire):
    """Alignment across processes: the server (rank 0) reads only the IDs and labels of the file with
    the target column; party k reads only its own file. The server learns which samples each party
    holds (PSI, or plain IDs), splits the samples, and tells each party which of its IDs are samples
    and which are training samples; the parties encode their own columns and announce their widths.

    Every long step runs under a heartbeat and is announced through the rendezvous store before its message is
    received (:meth:`vflbench.federation.wire.Wire.await_any`): the server blinds its IDs once and sends the same
    request to every party, the parties answer at the same time, and nobody times out while another computes."""
    from ..core.paths import user_path
    from ..core.progress import report
    from ..core.role import SERVER
    from .datasets.fetch import sha256_file

    files = parse_party_data(name.split(":", 1)[1])
    k = len(files)
    if wire.world - 1 != k:
        raise VFLBenchError(f"--party-data names {k} parties but the run has {wire.world - 1}; give --parties {k}.")
    how, id_col, target = str(opts["align"]), str(opts["id"]), str(opts["target"]).strip()
    phase, wire.phase = wire.phase, "align"  # its control bytes are counted apart from training's
    try:
        with wire.beating():
            if wire.rank == SERVER:
                return _align_server(name, files, opts, wire, how, id_col, target, report, user_path, sha256_file)
            return _align_party(name, files, opts, wire, how, id_col, target, user_path, sha256_file)
    finally:
        wire.phase = phase


def _align_server(name, files, opts, wire, how, id_col, target, report, user_path, sha256_file):
    import json

    import torch

    k = len(files)
    what = f"alignment ({how}): {k} parties"
    owner_path = None
    for n, p in files:  # the server reads one file whole: the label holder's (it only looks at the others' header)
        if user_path(p).exists() and target in _header(p):
            owner_path = (n, p, read_party(p, id_col)[[id_col, target]])
            break
    if owner_path is None:
        raise VFLBenchError(
            f"The server found no file with the target {target!r} among {', '.join(p for _, p in files)}."
        )
    side = label_side(owner_path[2], id_col, opts, owner_path[1])
    wire.advance("blinding the label side's IDs")
    n = len(side.ids)
    steps = 2 * k + 2  # request, k answers, k results, the parties' blocks
    report(what, 0, steps)
    header = json.dumps({"align": how, "n": n}).encode()
    request = b""
    if how == "psi":
        client, request = psi_request(side.ids)
    report(what, 1, steps)
    wire.announce("align/request")
    for j in range(k):  # one request for every party: the label side's IDs blinded once
        _send_bytes(wire, header, j + 1)
        if how == "psi":
            _send_bytes(wire, request, j + 1)
    answers: dict[int, tuple[bytes, bytes]] = {}
    owed = {f"align/answer/{j}": j + 1 for j in range(k)}
    while owed:  # the parties answer at the same time; take each answer as it is announced
        step = wire.await_any(owed, "answering the alignment")
        j = owed.pop(step) - 1
        wire.advance(f"receiving party {j}'s answer")
        if how == "psi":
            answers[j] = (_recv_bytes(wire, j + 1), _recv_bytes(wire, j + 1))
        else:  # plain: the party's IDs in clear (not private)
            answers[j] = (_recv_bytes(wire, j + 1), b"")
        report(what, 1 + len(answers), steps)
    held = np.zeros((n, k), dtype=bool)
    if how == "psi":  # the parties' results at the same time (threads: openmined-psi releases the GIL)
        import os
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, min(k, os.cpu_count() or 1))) as pool:
            futures = {j: pool.submit(psi_result, client, side.ids, *answers.pop(j)) for j in range(k)}
            for j in range(k):
                held[:, j] = futures[j].result()
                wire.advance(f"intersecting party {j}'s answer")
                report(what, 1 + k + j + 1, steps)
    else:
        for j in range(k):
            have = set(_blob_ids(answers.pop(j)[0]))
            held[:, j] = [i in have for i in side.ids]
            report(what, 1 + k + j + 1, steps)
    wire.announce("align/result")
    meta = json.dumps({"n": n, "classes": side.classes, "positive": side.positive}).encode()
    ids = np.asarray(side.ids, dtype=object)
    for j in range(k):  # which of party j's own IDs are samples (their text and place), and the split
        at = np.flatnonzero(held[:, j])
        _send_bytes(wire, meta, j + 1)
        _send_bytes(wire, _ids_blob(ids[at]), j + 1)
        wire.send(torch.tensor([len(at), len(side.train), len(side.test)], dtype=torch.int64), j + 1, None)
        _send_array(wire, at.astype(np.int32), j + 1)
        _send_array(wire, np.asarray(side.train, dtype=np.int32), j + 1)
        _send_array(wire, np.asarray(side.test, dtype=np.int32), j + 1)
    owed = {f"align/width/{j}": j + 1 for j in range(k)}
    shapes: list[dict[str, Any]] = [{}] * k
    while owed:  # each party encodes its own columns: its width and its embedded columns' tables (not their levels)
        step = wire.await_any(owed, "encoding its columns")
        j = owed.pop(step) - 1
        shapes[j] = json.loads(_recv_bytes(wire, j + 1).decode())
    report(what, steps, steps)
    every = json.dumps(shapes).encode()
    for j in range(k):
        _send_bytes(wire, every, j + 1)
        wire.send(torch.from_numpy(held.astype(np.uint8)), j + 1, None)  # the masks every process replicates
    sums = {owner_path[1]: sha256_file(user_path(owner_path[1]))}
    widths, embedded = _shapes(shapes)
    return assemble(name, files, side, [None] * k, widths, held, how, sums, embedded=embedded)


def _shapes(shapes: list[dict[str, Any]]) -> tuple[list[int], list[dict[int, tuple[int, int]]]]:
    """The parties' announced widths and embedded columns (position -> (table rows, size))."""
    widths = [int(s["width"]) for s in shapes]
    embedded = [{int(p): (int(r), int(d)) for p, r, d in s["embedded"]} for s in shapes]
    return widths, embedded


def _align_party(name, files, opts, wire, how, id_col, target, user_path, sha256_file):
    import json

    import torch

    from ..core.role import SERVER

    k = len(files)
    me = wire.rank - 1
    path = files[me][1]
    wire.advance("reading its file")
    df = read_party(path, id_col)
    ids = df[id_col].tolist()
    wire.await_any({"align/request": SERVER}, "blinding the label side's IDs")
    wire.advance("answering the PSI request" if how == "psi" else "sending its IDs")
    header = json.loads(_recv_bytes(wire, SERVER).decode())
    if header["align"] != how:
        raise VFLBenchError(
            f"the server aligns by {header['align']}, this party by {how}; give every process the same --align."
        )
    if how == "psi":
        request = _recv_bytes(wire, SERVER)
        setup, response = psi_answer(ids, int(header["n"]), request)
        wire.announce(f"align/answer/{me}")
        _send_bytes(wire, setup, SERVER)
        _send_bytes(wire, response, SERVER)
    else:
        wire.announce(f"align/answer/{me}")
        _send_bytes(wire, _ids_blob(ids), SERVER)
    wire.await_any({"align/result": SERVER}, "intersecting the parties' answers")
    meta = json.loads(_recv_bytes(wire, SERVER).decode())
    mine_ids = _blob_ids(_recv_bytes(wire, SERVER))
    n_mine, n_train, n_test = wire.recv((3,), torch.int64, SERVER, None).tolist()
    positions = _recv_array(wire, n_mine, torch.int32, SERVER)
    train = _recv_array(wire, n_train, torch.int32, SERVER).astype(np.int64)  # the split, in the server's order
    test = _recv_array(wire, n_test, torch.int32, SERVER).astype(np.int64)
    n = int(meta["n"])
    wire.advance("encoding its columns")
    # the party's view of the samples: its own IDs where it holds them, placeholders elsewhere (imputed)
    sample_ids = [f"\x00not-held-{i}" for i in range(n)]
    for pos, ident in zip(positions.tolist(), mine_ids, strict=True):
        sample_ids[pos] = ident
    block = party_block(df, id_col, {target}, sample_ids, train, test, opts)
    wire.announce(f"align/width/{me}")
    mine = {"width": int(block[0].shape[1]), "embedded": [[p, r, d] for p, (r, d) in block[3].items()]}
    _send_bytes(wire, json.dumps(mine).encode(), SERVER)
    widths, embedded = _shapes(json.loads(_recv_bytes(wire, SERVER).decode()))
    held = wire.recv((n, k), torch.uint8, SERVER, None).numpy().astype(bool)
    side = LabelSide(sample_ids, np.zeros(n, dtype=np.int64), list(meta["classes"]), meta["positive"], train, test)
    blocks: list[Any] = [None] * k
    blocks[me] = block
    sums = {path: sha256_file(user_path(path))}
    return assemble(name, files, side, blocks, widths, held, how, sums, labels=False, embedded=embedded)


from .datasets.registry import register_scheme  # noqa: E402  (the scheme needs aligned_spec, defined above)

register_scheme("aligned", aligned_spec)  # DATASETS.get("aligned:party0=a.csv,...") (--party-data)
