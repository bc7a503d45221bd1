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
