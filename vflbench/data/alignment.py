"""Entity alignment: parties that bring their own files, keyed by an ID column.

``--party-data party0=a.csv,party1=b.csv,... --id-column ID --data-opt target=LABEL`` names one file
per party; the file that holds the target column also gives the labels (the server's side). The run's
samples are the IDs that have a label; party k's block of a sample is *observed* when party k's file
holds the sample's ID and *missing* otherwise: vflbench's missingness model meets real data, and the
run's own missingness (``--train-missing``) is drawn on top of it.

Which IDs each party holds is found by private set intersection (``--align psi``, the default:
openmined-psi, ECDH-based, the label side as the PSI client, so only it learns the intersection; it
then tells each party which of the party's own IDs are samples) or by plain intersection
(``--align plain``: every ID is shown in clear; labelled not private).

The data a party holds never leaves it: each party encodes its own columns (numeric: median-imputed
and scaled; categorical: one-hot, or embedded above ``embed_above`` levels), fitted on the training samples, as the
table loader does, with the
samples it does not hold imputed like missing cells. In one process (``--runtime inprocess``) every
party's block is built by the same function from its own file, so a run across processes equals the
in-process run on the joined table with the alignment's missingness mask.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..core.errors import VFLBenchError
from .datasets.encoding import OPTION_DEFAULTS, OPTION_HELP

ALIGN = ("psi", "plain")
DEFAULTS: dict[str, Any] = {
    "id": "id",
    "target": "",
    "align": "psi",
    "test_size": 0.2,
    "split_seed": 0,
    "scaler": "standard",
    **OPTION_DEFAULTS,
}
HELP = {
    "id": "the ID column every party file has (--id-column)",
    "target": "the label column; the file that has it gives the labels (required)",
    "align": "psi (private set intersection) | plain (IDs in clear; not private) (--align)",
    "test_size": "held-out fraction of the stratified split of the labelled samples",
    "split_seed": "random_state of the split",
    "scaler": "standard | minmax | quantile | none (each party's numeric columns, fitted on the training samples)",
    **OPTION_HELP,
}


def parse_party_data(text: str) -> list[tuple[str, str]]:
    """``party0=a.csv,party1=b.csv`` -> [(name, path), ...] in the given order."""
    from ..core.textlists import split_items

    out: list[tuple[str, str]] = []
    for item in split_items(text, "--party-data", "party0=a.csv,party1=b.csv"):
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise VFLBenchError(f"--party-data takes name=path pairs, e.g. party0=a.csv,party1=b.csv; got {item!r}.")
        if any(n == name.strip() for n, _ in out):
            raise VFLBenchError(f"--party-data names party {name.strip()!r} twice.")
        out.append((name.strip(), path.strip()))
    if len(out) < 2:
        raise VFLBenchError("--party-data needs at least two party files (name=path,name=path).")
    return out


def _header(path: str) -> list[str]:
    """A party file's column names (its first line), without reading the rest."""
    import pandas as pd

    from ..core.paths import user_path
    from .datasets.reading import read_table

    try:
        return [str(c) for c in pd.read_csv(user_path(path), nrows=0, sep=None, engine="python").columns]
    except (
        ValueError,
        OSError,
        pd.errors.ParserError,
    ):  # not plain CSV text (e.g. ARFF, gzip): read it the loader's way
        return [str(c) for c in read_table(user_path(path)).columns]


def read_party(path: str, id_col: str):
    """A party's file as a DataFrame with the ID column as the exact text the file holds (whitespace
    trimmed, case kept: ``00123`` and ``123`` are different IDs)."""
    from ..core.paths import user_path
    from .datasets.reading import read_table

    df = read_table(user_path(path), text_columns=(id_col,))
    if id_col not in df.columns:
        raise VFLBenchError(
            f"{path}: no ID column {id_col!r} (its columns: {', '.join(map(str, df.columns[:12]))}); give --id-column "
            "NAME."
        )
    df = df.copy()
    df[id_col] = df[id_col].astype(str).str.strip()
    if df[id_col].duplicated().any():
        dup = df[id_col][df[id_col].duplicated()].iloc[0]
        raise VFLBenchError(f"{path}: ID {dup!r} appears twice in column {id_col!r}; IDs must be unique per party.")
    return df


def _loose(ident: str) -> str:
    """An ID as a careless join would compare it: digits as a number (leading zeros dropped), text without case."""
    return (ident.lstrip("0") or "0") if ident.isdigit() else ident.casefold()


def id_form_warning(label_name: str, label_ids: list[str], party_name: str, party_ids: list[str]) -> str | None:
    """A warning when two files write their IDs in different forms: IDs that would match as numbers or
    without case (``001000`` / ``1000``, ``AB12`` / ``ab12``) but do not match as text; None otherwise.
    Alignment joins on the exact text; the warning shows one example."""
    exact = set(label_ids)
    loose = {}
    for i in label_ids:
        loose.setdefault(_loose(i), i)
    for p in party_ids:
        if p not in exact and (q := loose.get(_loose(p))) is not None:
            n = sum(1 for x in party_ids if x not in exact and _loose(x) in loose)
            return (
                f"IDs of {party_name} and {label_name} are written differently: {p!r} in {party_name} would be {q!r} "
                f"in {label_name} if "
                f"compared as numbers or without case ({n} such ID(s)). They are joined as exact text (whitespace "
                "trimmed, case kept), "
                f"so these are different entities; fix the files if they are the same ones."
            )
    return None


def warn_id_forms(files: list[tuple[str, str]], ids: dict[str, list[str]], owner: str) -> None:
    """One warning per party file whose IDs are written differently from the label file's."""
    import warnings

    from ..core.errors import VFLBenchWarning

    for n, p in files:
        if n != owner and (msg := id_form_warning(dict(files)[owner], ids[owner], p, ids[n])):
            warnings.warn(msg, VFLBenchWarning, stacklevel=2)


MIN_SHARE = 0.05  # a party holding fewer than this share of the samples is warned about (as one holding none)


def holding_report(align: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(one line per party with the samples it holds, warnings for a party that holds none or less than
    :data:`MIN_SHARE` of them) from a run's alignment block."""
    n = max(int(align["samples"]), 1)
    lines, warns = [], []
    for name, held in align["held_per_party"].items():
        lines.append(f"alignment ({align['method']}): {name} holds {held:,} of {n:,} samples ({held / n:.1%})")
        if held == 0:
            warns.append(
                f"{name} holds none of the {n:,} samples: its block is missing for every sample, in training and in "
                "every test "
                "setting (test setting 'none' then means no further missingness, not every block observed; rows: "
                "parties_absent)."
            )
        elif held < MIN_SHARE * n:
            warns.append(
                f"{name} holds only {held:,} of {n:,} samples ({held / n:.1%}, under {MIN_SHARE:.0%}): its block is "
                "missing for almost every sample."
            )
    return lines, warns


def absent_parties(align: dict[str, Any]) -> str:
    """The CSV column ``parties_absent``: the parties that hold no sample (``none`` when every party holds some)."""
    return ";".join(n for n, held in align["held_per_party"].items() if held == 0) or "none"


def check_local_id_forms(name: str, opts: dict[str, Any]) -> None:
    """Where every party file is on this machine (the local launcher of ``--runtime processes``):
    the ID-form warning of :func:`warn_id_forms`, reading only the ID columns and the headers."""
    import pandas as pd

    from ..core.paths import user_path

    files = parse_party_data(name.split(":", 1)[1])
    id_col, target = str(opts["id"]), str(opts["target"]).strip()
    ids, owner = {}, None
    for n, p in files:
        try:
            ids[n] = (
                pd.read_csv(user_path(p), usecols=[id_col], dtype=str, sep=None, engine="python")[id_col]
                .astype(str)
                .str.strip()
                .tolist()
            )
        except (ValueError, OSError, pd.errors.ParserError):
            return  # not plain CSV text, or no such column: the party process reports it in its own words
        if owner is None and target and target in _header(p):
            owner = n
    if owner is not None:
        warn_id_forms(files, ids, owner)


@dataclass
class LabelSide:
    ids: list[str]  # the samples, in order
    y: np.ndarray
    classes: list[str]
    positive: int | None
    train: np.ndarray  # sample indices of the training split
    test: np.ndarray


def label_side(df, id_col: str, opts: dict[str, Any], path: str) -> LabelSide:
    """The samples (IDs with a label, in ID order), their classes, and the stratified split, exactly
    as the table loader makes them for the joined table (vflbench.data.datasets.table)."""
    from sklearn.model_selection import train_test_split

    from .datasets.table import Table, resolve_target

    target = str(opts["target"]).strip()
    df = df[df[target].notna()].sort_values(id_col, kind="stable").reset_index(drop=True)
    tgt = resolve_target(Table(path, df, None), {"target": target, "positive": ""})
    y = tgt.y_text.map(tgt.mapping).to_numpy(np.int64)
    try:
        tr, te = train_test_split(
            np.arange(len(y)), test_size=float(opts["test_size"]), random_state=int(opts["split_seed"]), stratify=y
        )
    except ValueError as e:
        raise VFLBenchError(f"{path}: cannot split the labelled samples ({e}).") from None
    return LabelSide(df[id_col].tolist(), y, list(tgt.classes), tgt.positive, tr, te)


def party_block(
    df, id_col: str, exclude: set[str], sample_ids: list[str], train: np.ndarray, test: np.ndarray, opts: dict[str, Any]
):
    """A party's encoded columns for every sample (``[n_train, w]``, ``[n_test, w]``, names, and its embedded
    categorical columns ``{column: (table rows, size)}``): its own rows where it holds the sample's ID, imputed like
    missing cells elsewhere; fitted on the training samples, by the table loader's encoder (one-hot up to
    ``embed_above`` levels, embedded above)."""
    import pandas as pd

    from .datasets.encoding import EncodingOptions, encode
    from .datasets.table import column_kinds

    feats = [c for c in df.columns if c != id_col and c not in exclude]
    if not feats:
        raise VFLBenchError("a party file has no feature column besides the ID (and the target)")
    frame = df.set_index(id_col)[feats].reindex(pd.Index(sample_ids, name=id_col)).reset_index(drop=True)
    kinds = column_kinds(frame, [])  # on every sample, as the table loader does
    enc = encode("a party file: ", frame, feats, kinds, EncodingOptions.from_options(opts), train, test)
    return enc.x_train, enc.x_test, enc.names, enc.embedded


def intersect(label_ids: list[str], party_ids: list[str], how: str) -> np.ndarray:
    """Which samples a party holds (bool, in sample order): plain, or by PSI run in one process."""
    if how == "plain":
        have = set(party_ids)
        return np.array([i in have for i in label_ids], dtype=bool)
    client, request = psi_request(label_ids)
    setup, response = psi_answer(party_ids, len(label_ids), request)
    return psi_result(client, label_ids, setup, response)


def intersect_all(label_ids: list[str], party_ids: list[list[str]], how: str) -> np.ndarray:
    """``[n, K]``: which samples each party holds. By PSI, the label side blinds its IDs once and the parties'
    answers are computed at the same time (threads: openmined-psi releases the GIL), as across processes."""
    if how == "plain":
        return np.stack([intersect(label_ids, ids, how) for ids in party_ids], axis=1)
    import os
    from concurrent.futures import ThreadPoolExecutor

    client, request = psi_request(label_ids)
    with ThreadPoolExecutor(max_workers=max(1, min(len(party_ids), os.cpu_count() or 1))) as pool:
        answers = list(pool.map(lambda ids: psi_answer(ids, len(label_ids), request), party_ids))
        held = list(pool.map(lambda a: psi_result(client, label_ids, *a), answers))
    return np.stack(held, axis=1)


# ----------------------------------------------------------------------------- PSI (openmined-psi)
def _psi():
    try:
        import private_set_intersection.python as psi
    except ImportError:
        raise VFLBenchError(
            "--align psi needs openmined-psi: pip install 'vflbench[parties]' (or use --align plain, which is not "
            "private)."
        ) from None
    return psi


def psi_request(label_ids: list[str]):
    """The label side (PSI client): its blinded IDs."""
    psi = _psi()
    client = psi.client.CreateWithNewKey(True)
    return client, client.CreateRequest(label_ids).SerializeToString()


def psi_answer(party_ids: list[str], n_client: int, request: bytes) -> tuple[bytes, bytes]:
    """A party (PSI server): its setup (its own blinded IDs) and its answer to the client's request."""
    psi = _psi()
    server = psi.server.CreateWithNewKey(True)
    setup = server.CreateSetupMessage(0.0, n_client, party_ids, psi.DataStructure.RAW)
    req = psi.Request()
    req.ParseFromString(request)
    return setup.SerializeToString(), server.ProcessRequest(req).SerializeToString()


def psi_result(client, label_ids: list[str], setup: bytes, response: bytes) -> np.ndarray:
    """Which label-side IDs party's answer holds. A client object is not safe across threads: one made from the
    same key serves each call (the key blinded the request)."""
    psi = _psi()
    client = psi.client.CreateFromKey(client.GetPrivateKeyBytes(), True)
    s, r = psi.ServerSetup(), psi.Response()
    s.ParseFromString(setup)
    r.ParseFromString(response)
    held = np.zeros(len(label_ids), dtype=bool)
    held[np.asarray(client.GetIntersection(s, r), dtype=np.int64)] = True
    return held


# ----------------------------------------------------------------------------- the dataset
def target_file(files: list[tuple[str, str]], frames: dict[str, Any], target: str) -> str:
    having = [n for n, _ in files if frames.get(n) is not None and target in frames[n].columns]
    if not target:
        raise VFLBenchError("Aligned party files need the label column: --data-opt target=COLUMN.")
    if len(having) != 1:
        raise VFLBenchError(
            f"The target {target!r} must be in exactly one party file (found in {len(having)}: "
            f"{', '.join(having) or 'none'})."
        )
    return having[0]


def assemble(
    name: str,
    files: list[tuple[str, str]],
    side: LabelSide,
    blocks: list[tuple[np.ndarray, np.ndarray, list[str]] | None],
    widths: list[int],
    held: np.ndarray,
    how: str,
    checksums: dict[str, str],
    labels: bool = True,
    embedded: list[dict[int, tuple[int, int]]] | None = None,
):
    """The run's Dataset: every party's block in its column range (zeros for a block this process
    does not hold), ``party_widths`` for the partition and the alignment's observed mask."""
    from .datasets.base import Dataset, DatasetInfo

    n_tr, n_te = len(side.train), len(side.test)
    xtr = np.zeros((n_tr, sum(widths)), dtype=np.float32)
    xte = np.zeros((n_te, sum(widths)), dtype=np.float32)
    names: list[str] = []
    off = 0
    for k, w in enumerate(widths):
        b = blocks[k]
        if b is not None:
            xtr[:, off : off + w], xte[:, off : off + w] = b[0], b[1]
            names += [f"{files[k][0]}:{c}" for c in b[2]]
        else:
            names += [f"{files[k][0]}:#{j}" for j in range(w)]
        off += w
    info = DatasetInfo(
        name=name,
        title=name,
        kind="tabular",
        n_classes=len(side.classes),
        shape=(int(sum(widths)),),
        source=name,
        license="the user's",
        positive_class=side.positive,
        embeds=True,  # as the probe's: every process knows it before any party file is read (the key's input)
    )
    y = side.y if labels else np.zeros_like(side.y)
    offsets = np.cumsum([0, *widths])
    glob = {int(offsets[k] + j): tuple(v) for k, emb in enumerate(embedded or []) for j, v in emb.items()}
    info = replace(info, embedded=tuple(glob.values()))
    ds = Dataset(info, xtr, y[side.train], xte, y[side.test], feature_names=names, embedded=glob)
    ds.party_widths = list(widths)
    ds.party_names = [n for n, _ in files]
    ds.test_ids = [side.ids[i] for i in side.test]  # the test samples' IDs (vflbench serve: {"ids": [...]})
    ds.structural = {"train": held[side.train], "test": held[side.test]}  # [n, K]: the party holds the sample's ID
    ds.checksums = dict(checksums)
    ds.preprocessing = {
        "alignment": {
            "method": how,
            "private": how == "psi",
            "samples": int(len(side.ids)),
            "held_per_party": {files[k][0]: int(held[:, k].sum()) for k in range(len(files))},
            "held_by_all": int(held.all(1).sum()),
            "held_by_none": int((~held.any(1)).sum()),
            "rows_train": int(n_tr),
            "rows_test": int(n_te),
        }
    }
    return ds


def load_aligned(name: str, opts: dict[str, Any]):
    """Every party's file in this process (``--runtime inprocess``, or a process that holds them all)."""
    from ..core.paths import user_path
    from .datasets.fetch import sha256_file

    files = parse_party_data(name.split(":", 1)[1])
    how = str(opts["align"])
    if how not in ALIGN:
        raise VFLBenchError(f"--align takes psi or plain, got {how!r}.")
    id_col, target = str(opts["id"]), str(opts["target"]).strip()
    frames = {n: read_party(p, id_col) for n, p in files}
    owner = target_file(files, frames, target)
    warn_id_forms(files, {n: frames[n][id_col].tolist() for n, _ in files}, owner)
    side = label_side(frames[owner], id_col, opts, dict(files)[owner])
    held = intersect_all(side.ids, [frames[n][id_col].tolist() for n, _ in files], how)
    blocks = [party_block(frames[n], id_col, {target}, side.ids, side.train, side.test, opts) for n, _ in files]
    sums = {p: sha256_file(user_path(p)) for _, p in files}
    widths = [b[0].shape[1] for b in blocks]
    return assemble(name, files, side, blocks, widths, held, how, sums, embedded=[b[3] for b in blocks])


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


# ----------------------------------------------------------------------------- across processes
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
