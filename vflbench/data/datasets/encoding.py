"""A table's columns as model inputs, fitted on the training rows only, written straight into float32:

* numeric: median-imputed, then scaled (``scaler``), one column at a time through scikit-learn's own
  imputer and scaler (the same numbers as a ColumnTransformer over all of them: tested bit for bit);
* categorical with at most ``embed_above`` levels in the training split: imputed with the most frequent
  level and one-hot encoded (scikit-learn), as before;
* categorical with more levels: one column of integer *codes* that the owning party's bottom model embeds
  (:mod:`vflbench.nn.models`, one table per column). Codes 0, 1 and 2 are reserved: a missing cell, a level
  never seen in training, and the pooled rare levels (seen fewer than ``min_count`` times in training);
  the levels seen often enough follow in sorted order. With ``hash_buckets=N`` the codes are a stable hash
  of the level's text into N buckets (pandas' ``hash_array``; no vocabulary to keep), a missing cell still 0.

Codes are stored as float32 in the same array as everything else, exact below 2^24, so partitions, masks,
packing and the processes runtime treat them as ordinary columns; only a bottom model's first layer reads
them as indices. The width of the encoded table is known before anything is allocated, and a table that
cannot fit is refused with the estimate and the fix (:func:`check_fits`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.errors import VFLBenchError

if TYPE_CHECKING:  # pandas is imported where a table is encoded, not when a loader registers its options
    import pandas as pd

MISSING, UNSEEN, RARE = 0, 1, 2  # reserved codes of an embedded column
RESERVED = 3
MAX_CODES = 1 << 24  # float32 holds every integer up to here exactly
EMBED_MAX_DIM = 16
SCALERS = ("standard", "minmax", "quantile", "none")


def embedding_dim(rows: int, fixed: int = 0) -> int:
    """The embedding size of a column whose table has ``rows`` rows: ``fixed`` when given, else fastai's rule of
    thumb ``round(1.6 * rows ** 0.56)`` capped at :data:`EMBED_MAX_DIM` (a party's block stays tabular-sized)."""
    if fixed:
        return int(fixed)
    return int(max(1, min(EMBED_MAX_DIM, round(1.6 * rows**0.56))))


# the encoding's dataset options, shared by every loader that encodes a table (users' tables, party files, click logs)
OPTION_DEFAULTS: dict[str, Any] = {"embed_above": 50, "embed_dim": 0, "hash_buckets": 0, "min_count": 2}
OPTION_HELP = {
    "embed_above": "a categorical column with more levels than this (in the training split) is embedded by its "
    "party's bottom model instead of one-hot encoded",
    "embed_dim": "the embedding size of every embedded column (0: min(16, round(1.6 * rows^0.56)), rows = its table's)",
    "hash_buckets": "embedded columns hashed into this many buckets (0: a vocabulary of the training levels)",
    "min_count": "levels seen fewer times than this in training share one pooled 'rare' embedding",
}


@dataclass
class EncodingOptions:
    scaler: str = "standard"
    embed_above: int = 50
    embed_dim: int = 0
    hash_buckets: int = 0
    min_count: int = 2

    @classmethod
    def from_options(cls, opts: dict[str, Any], where: str = "") -> EncodingOptions:
        o = cls(
            scaler=str(opts.get("scaler") or "none"),
            embed_above=int(opts.get("embed_above", 50)),
            embed_dim=int(opts.get("embed_dim", 0) or 0),
            hash_buckets=int(opts.get("hash_buckets", 0) or 0),
            min_count=int(opts.get("min_count", 2)),
        )
        if o.scaler not in SCALERS:
            raise VFLBenchError(f"{where}unknown scaler {o.scaler!r}. Choices: {', '.join(SCALERS)}.")
        if o.embed_above < 1:
            raise VFLBenchError(f"{where}embed_above must be >= 1 (levels), got {o.embed_above}.")
        if o.embed_dim < 0:
            raise VFLBenchError(f"{where}embed_dim must be >= 0 (0: the size rule), got {o.embed_dim}.")
        if not 0 <= o.hash_buckets <= MAX_CODES - RESERVED:
            raise VFLBenchError(
                f"{where}hash_buckets must be between 0 (off) and {MAX_CODES - RESERVED:,} (codes are stored "
                f"exactly in float32), got {o.hash_buckets}."
            )
        if o.min_count < 1:
            raise VFLBenchError(f"{where}min_count must be >= 1, got {o.min_count}.")
        return o


@dataclass
class ColumnPlan:
    name: str
    kind: str  # numeric | onehot | embedding
    width: int  # encoded columns
    levels: int = 0  # distinct levels in the training split (categorical)


@dataclass
class Encoded:
    x_train: np.ndarray  # float32 [n_train, W]
    x_test: np.ndarray
    sources: list[str]  # per encoded column: its source column
    names: list[str]
    embedded: dict[int, tuple[int, int]] = field(default_factory=dict)  # encoded column -> (table rows, dim)
    columns: dict[str, dict[str, Any]] = field(default_factory=dict)  # per source column: what was done


def format_level(v: Any) -> Any:
    """A categorical value as text (integers without ``.0``), NaN for missing."""
    import pandas as pd

    if pd.isna(v):
        return np.nan
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def as_text(s: pd.Series) -> pd.Series:
    """A categorical column as text with NaN for missing (integers written without ``.0``). A pandas categorical
    column (the click-log loaders make them) stays categorical, its categories as text: no object per row."""
    import pandas as pd

    if isinstance(s.dtype, pd.CategoricalDtype):
        cats = [format_level(c) for c in s.cat.categories]
        if len(set(cats)) == len(cats):
            return s.cat.rename_categories(cats)
        codes = s.cat.codes.to_numpy()
        vals = np.asarray(cats, dtype=object)[np.maximum(codes, 0)]
        vals[codes < 0] = np.nan
        return pd.Series(pd.Categorical(vals), index=s.index, name=s.name)
    return s.map(format_level).astype(object)


def plan_columns(frame: pd.DataFrame, num: list[str], cat: list[str], tr_idx, opts: EncodingOptions):
    """Each source column's encoding and width, from the training rows' levels (``frame``'s categorical columns
    already text)."""

    plans = {c: ColumnPlan(c, "numeric", 1) for c in num}
    for c in cat:
        levels = int(frame[c].iloc[tr_idx].nunique(dropna=True))
        if levels > opts.embed_above:
            plans[c] = ColumnPlan(c, "embedding", 1, levels)
        else:
            # the imputer fills a missing cell with a training level: one column per level (at least one)
            plans[c] = ColumnPlan(c, "onehot", max(levels, 1), levels)
    return plans


def available_memory() -> int:
    """Bytes this machine can still give (``MemAvailable``), or 0 when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


COPIES = 2  # a run holds the encoded table and the parties' stacked blocks


def check_fits(label: str, plans: dict[str, ColumnPlan], n_rows: int, opts: EncodingOptions) -> int:
    """Refuse, before anything is allocated, a table whose encoding cannot fit in this machine's memory; returns
    the encoded width."""
    width = sum(p.width for p in plans.values())
    need = COPIES * 4 * n_rows * width
    have = available_memory()
    if have and need > have:
        onehot = sorted((p for p in plans.values() if p.kind == "onehot"), key=lambda p: -p.width)
        gb = 1 << 30
        if onehot and onehot[0].width > 1:
            big = onehot[0]
            fix = (
                f"column '{big.name}' has {big.levels:,} levels, and one-hot encoding it alone needs "
                f"{COPIES * 4 * n_rows * big.width / gb:.1f} GB: embed it (--data-opt embed_above={big.levels - 1} "
                f"or lower; the default {EncodingOptions.embed_above} embeds every column above "
                f"{EncodingOptions.embed_above} levels) or drop it (drop={big.name})"
            )
        else:
            fix = "use fewer rows (a row cap or a sample of the file) or fewer columns (drop=A,B)"
        raise VFLBenchError(
            f"{label}: the encoded table needs about {need / gb:.1f} GB ({n_rows:,} rows x {width:,} columns as "
            f"float32, {COPIES} copies during a run) and {have / gb:.1f} GB are available; {fix}."
        )
    return width


def _numeric_pipeline(scaler: str):
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline

    steps = [("impute", SimpleImputer(strategy="median", keep_empty_features=True))]
    if scaler != "none":
        steps.append(("scale", make_scaler(scaler)))
    return Pipeline(steps)


def make_scaler(name: str):
    """scikit-learn's scaler of that name, fitted on the training rows: standard (zero mean, unit variance), minmax
    ([0, 1]) or quantile (each column mapped through its empirical quantiles, at most 1,000, to a standard normal:
    heavy tails and skew gone, as Gorishniy et al. 2021 and the tabular benchmark of Grinsztajn et al. 2022 scale
    inputs for neural networks)."""
    from sklearn.preprocessing import MinMaxScaler, QuantileTransformer, StandardScaler

    if name == "quantile":
        return QuantileTransformer(output_distribution="normal", n_quantiles=1000, subsample=10**9, random_state=0)
    return {"standard": StandardScaler, "minmax": MinMaxScaler}[name]()


def _onehot_pipeline():
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder

    return Pipeline(
        [
            ("impute", SimpleImputer(strategy="most_frequent", keep_empty_features=True)),
            ("onehot", OneHotEncoder(handle_unknown="ignore", sparse_output=False, dtype=np.float32)),
        ]
    )


def embedding_codes(s: pd.Series, tr_idx, opts: EncodingOptions) -> tuple[np.ndarray, int, dict[str, Any]]:
    """``(codes for every row, table rows, what was done)`` of one embedded column (text, NaN for missing)."""
    import pandas as pd

    if isinstance(s.dtype, pd.CategoricalDtype):
        return _category_codes(s, tr_idx, opts)
    missing = s.isna().to_numpy()
    if opts.hash_buckets:
        text = s.fillna("").astype(str).to_numpy(dtype=object)
        h = pd.util.hash_array(text, categorize=True)  # stable across runs and machines (SipHash, fixed key)
        codes = (RESERVED + (h % np.uint64(opts.hash_buckets))).astype(np.int64)
        codes[missing] = MISSING
        return codes, RESERVED + opts.hash_buckets, {"hashed": True, "buckets": opts.hash_buckets}
    counts = s.iloc[tr_idx].value_counts(dropna=True)
    kept = np.sort(counts.index[counts.to_numpy() >= opts.min_count].to_numpy(dtype=object).astype(str))
    rare = counts.index[counts.to_numpy() < opts.min_count]
    if RESERVED + len(kept) > MAX_CODES:
        raise VFLBenchError(
            f"column '{s.name}' keeps {len(kept):,} levels, more than float32 codes hold exactly ({MAX_CODES:,}); "
            "hash it (hash_buckets=N) or raise min_count."
        )
    codes = pd.Index(kept).get_indexer(s.to_numpy(dtype=object)).astype(np.int64)
    found = codes >= 0
    codes[found] += RESERVED
    codes[~found] = np.where(s.isin(rare).to_numpy()[~found], RARE, UNSEEN)
    codes[missing] = MISSING
    info = {
        "hashed": False,
        "kept_levels": int(len(kept)),
        "rare_levels": int(len(rare)),
        "rare_rows_train": int(counts.to_numpy()[counts.to_numpy() < opts.min_count].sum()),
        "min_count": opts.min_count,
    }
    return codes, RESERVED + len(kept), info


def _category_codes(s: pd.Series, tr_idx, opts: EncodingOptions) -> tuple[np.ndarray, int, dict[str, Any]]:
    """:func:`embedding_codes` of a pandas categorical column, computed on its categories and integer codes (the
    same codes as for the column as text)."""
    import pandas as pd

    cats = np.asarray([str(c) for c in s.cat.categories], dtype=object)
    raw = s.cat.codes.to_numpy().astype(np.int64)  # -1: missing
    missing = raw < 0
    if opts.hash_buckets:
        h = pd.util.hash_array(cats, categorize=True) if len(cats) else np.zeros(0, np.uint64)
        table = (RESERVED + (h % np.uint64(opts.hash_buckets))).astype(np.int64)
        codes = np.where(missing, MISSING, table[np.where(missing, 0, raw)] if len(cats) else MISSING)
        return codes.astype(np.int64), RESERVED + opts.hash_buckets, {"hashed": True, "buckets": opts.hash_buckets}
    tr = raw[np.asarray(tr_idx)]
    counts = np.bincount(tr[tr >= 0], minlength=len(cats))
    seen = counts > 0
    kept = counts >= opts.min_count
    order = np.argsort(cats[kept].astype(str), kind="stable")  # kept levels in sorted text order
    if RESERVED + int(kept.sum()) > MAX_CODES:
        raise VFLBenchError(
            f"column '{s.name}' keeps {int(kept.sum()):,} levels, more than float32 codes hold exactly "
            f"({MAX_CODES:,}); hash it (hash_buckets=N) or raise min_count."
        )
    table = np.full(len(cats), UNSEEN, dtype=np.int64)
    table[seen & ~kept] = RARE
    table[np.flatnonzero(kept)[order]] = RESERVED + np.arange(int(kept.sum()))
    codes = np.where(missing, MISSING, table[np.where(missing, 0, raw)] if len(cats) else MISSING).astype(np.int64)
    rare = seen & ~kept
    info = {
        "hashed": False,
        "kept_levels": int(kept.sum()),
        "rare_levels": int(rare.sum()),
        "rare_rows_train": int(counts[rare].sum()),
        "min_count": opts.min_count,
    }
    return codes, RESERVED + int(kept.sum()), info


def encode(
    label: str,
    frame: pd.DataFrame,
    feats: list[str],
    kinds: dict[str, str],
    opts: EncodingOptions,
    tr_idx: np.ndarray,
    te_idx: np.ndarray,
) -> Encoded:
    """Encode ``frame``'s ``feats`` (fitted on rows ``tr_idx``) into float32 train and test arrays, columns in
    the source columns' order, each with its source column and name."""
    import pandas as pd

    num = [c for c in feats if kinds[c] == "numeric"]
    cat = [c for c in feats if kinds[c] == "categorical"]
    text = {c: as_text(frame[c]) for c in cat}
    plans = plan_columns(pd.DataFrame(text, index=frame.index) if cat else frame, num, cat, tr_idx, opts)
    width = check_fits(label, plans, len(tr_idx) + len(te_idx), opts)
    xtr = np.empty((len(tr_idx), width), dtype=np.float32)
    xte = np.empty((len(te_idx), width), dtype=np.float32)
    sources: list[str] = []
    names: list[str] = []
    embedded: dict[int, tuple[int, int]] = {}
    columns: dict[str, dict[str, Any]] = {}
    off = 0
    for c in feats:
        p = plans[c]
        if p.kind == "numeric":
            col = pd.to_numeric(frame[c], errors="coerce").astype(float).to_frame()
            pipe = _numeric_pipeline(opts.scaler)
            xtr[:, off] = pipe.fit_transform(col.iloc[tr_idx])[:, 0]
            xte[:, off] = pipe.transform(col.iloc[te_idx])[:, 0]
            sources.append(c)
            names.append(c)
            columns[c] = {"kind": "numeric", "encoded_width": 1}
            off += 1
        elif p.kind == "onehot":
            col = text[c].to_frame()
            pipe = _onehot_pipeline()
            a = pipe.fit_transform(col.iloc[tr_idx])
            cats = pipe.named_steps["onehot"].categories_[0]
            w = a.shape[1]
            xtr[:, off : off + w] = a
            del a
            xte[:, off : off + w] = pipe.transform(col.iloc[te_idx])
            sources += [c] * w
            names += [f"{c}={v}" for v in cats]
            columns[c] = {"kind": "categorical", "encoding": "onehot", "encoded_width": w, "levels": p.levels}
            off += w
            if w != p.width:  # the plan's width is the allocated one: shrink (never happens with the imputer)
                raise AssertionError(f"{c}: planned {p.width} one-hot columns, got {w}")
        else:
            codes, rows, info = embedding_codes(text[c], np.asarray(tr_idx), opts)
            xtr[:, off] = codes[tr_idx]
            xte[:, off] = codes[te_idx]
            dim = embedding_dim(rows, opts.embed_dim)
            embedded[off] = (int(rows), int(dim))
            sources.append(c)
            names.append(f"{c}#code")
            columns[c] = {
                "kind": "categorical",
                "encoding": "embedding",
                "encoded_width": 1,
                "levels": p.levels,
                "table_rows": int(rows),
                "dim": int(dim),
                "unseen_rows_test": int((codes[te_idx] == UNSEEN).sum()),
                "missing_rows": int((codes == MISSING).sum()),
                **info,
            }
            off += 1
    return Encoded(xtr, xte, sources, names, embedded, columns)
