"""Reading a user's table file as a DataFrame: CSV, TSV, ARFF or Parquet, gzipped or not, the field
separator detected from the first lines, text columns kept as text (an ID ``001000`` is not the number
1000), every failure one line that names the fix (:func:`read_table`; results cached per path, size and
mtime). Encoding the table into a dataset is :mod:`vflbench.data.datasets.table`.

Every file is read exactly, whatever its size, compression or format: integers as int64, decimals as
float64, text as text. Large delimited files (over :data:`LARGE_FILE` bytes on disk) go through pyarrow's
multithreaded reader with the same column types that pandas gives a small one, and are not cached; the
size on disk decides only the reader, never a value. Then each numeric column is narrowed to float32
where float32 holds every one of its values (:func:`narrow_exact`), to halve its memory; a column it
cannot hold stays as read, and a large table says so in one line. Columns named ``exact`` (the target,
categorical columns) are never narrowed: a categorical integer ID above 2^24 keeps its own level."""

from __future__ import annotations

import csv
import gzip
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ...core.errors import VFLBenchError

SEPARATORS = ",;\t|"
LARGE_FILE = 64 << 20  # bytes on disk: above this a delimited table is read by pyarrow, and no table is cached
WIDE_NOTE = 64 << 20  # bytes: numeric columns that float32 cannot hold and take more than this are named in one line
PARQUET = (".parquet", ".pq")

_CACHE: dict[tuple, pd.DataFrame] = {}


def read_table(
    path: Path, sep: str = "", text_columns: tuple[str, ...] = (), exact: tuple[str, ...] = ()
) -> pd.DataFrame:
    """One table file as a DataFrame (cached per path, size and mtime). Errors name the fix.
    ``sep``: the field separator of a delimited file; empty: detected from the first lines (the
    separator used is in ``df.attrs["sep"]``). ``text_columns``: read as the text they hold (an ID
    ``001000`` stays ``001000``, not the number 1000). ``exact``: columns kept as read, never narrowed to
    float32 (the target, categorical columns). The columns narrowed and those float32 could not hold are
    in ``df.attrs["narrowed"]`` and ``df.attrs["kept_wide"]``."""
    path = Path(path)
    if not path.exists():
        raise VFLBenchError(
            f"No such file: {path}. Give the path of a .csv, .csv.gz, .tsv or .arff file (relative to the working "
            "directory)."
        )
    if path.is_dir():
        raise VFLBenchError(
            f"{path} is a directory; give the path of a table file (.csv, .csv.gz, .tsv, .arff or .parquet)."
        )
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, sep, tuple(text_columns), tuple(exact))
    if key in _CACHE:
        return _CACHE[key]
    if st.st_size == 0:
        raise VFLBenchError(f"{path} is empty; a table needs a header row and data rows.")
    name = path.name.lower()
    if name.endswith(PARQUET):
        df = narrow_exact(read_parquet_frame(path), (*text_columns, *exact), path)
        df.attrs["large_file"] = st.st_size > LARGE_FILE
        if st.st_size <= LARGE_FILE:
            _CACHE[key] = df
        return df
    gz = name.endswith(".gz")
    opener = gzip.open if gz else open
    try:
        with opener(path, "rb") as f:
            head = f.read(1 << 16)
    except (OSError, EOFError) as e:
        raise VFLBenchError(
            f"{path} cannot be read ({e}); if it is compressed, check that it is a complete .gz file."
        ) from None
    if b"\x00" in head:
        raise VFLBenchError(f"{path} is not a table: it holds binary data (NUL bytes). Export it as CSV, TSV or ARFF.")
    if not head.strip():
        raise VFLBenchError(f"{path} is empty; a table needs a header row and data rows.")
    base = name[:-3] if gz else name
    if base.endswith(".arff"):
        df = read_arff_frame(path)
    else:
        used = sep or ("\t" if base.endswith(".tsv") else sniff_separator(head))
        if st.st_size > LARGE_FILE:
            df = read_large_delimited(path, head, used, text_columns)
        else:
            df = _read_delimited(path, head, used, text_columns)
        df.attrs["sep"] = used
    if len(df) == 0:
        raise VFLBenchError(f"{path} has a header but no data rows.")
    df = narrow_exact(df, (*text_columns, *exact), path)
    df.attrs["large_file"] = st.st_size > LARGE_FILE
    if st.st_size <= LARGE_FILE:  # a large table is not kept twice
        _CACHE[key] = df
    return df


def float32_holds(values: np.ndarray) -> bool:
    """Whether float32 holds every value of a numeric array exactly (NaN as NaN)."""
    if values.dtype == np.float32 or values.size == 0:
        return True
    with np.errstate(invalid="ignore", over="ignore"):
        if values.dtype.kind in "iu":
            lo, hi = int(values.min()), int(values.max())
            if -(1 << 24) <= lo and hi <= 1 << 24:  # every integer up to 2^24 is a float32
                return True
            if lo < -(1 << 62) or hi > 1 << 62:
                return False
            return bool(np.array_equal(values.astype(np.float32).astype(np.int64), values))
        return bool(np.array_equal(values.astype(np.float32).astype(values.dtype), values, equal_nan=True))


def narrow_exact(df: pd.DataFrame, exact: tuple[str, ...] = (), path: Path | None = None) -> pd.DataFrame:
    """Every int or float column of ``df`` (booleans, text and the ``exact`` columns untouched) as float32 where
    float32 holds all its values, column by column; the others stay as read. Which were narrowed and which were
    kept wide is in ``df.attrs``; kept columns larger than :data:`WIDE_NOTE` together are named in one warning."""
    import warnings

    from ...core.errors import VFLBenchWarning

    keep = {str(c) for c in exact}
    narrowed, wide = [], []
    for c in list(df.columns):
        s = df[c]
        if str(c) in keep or not pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s):
            continue
        if s.dtype == np.float32 or not isinstance(s.dtype, np.dtype):
            continue  # already narrow, or a pandas extension type (nullable integers): as read
        values = s.to_numpy()
        if float32_holds(values):
            df[c] = values.astype(np.float32)
            narrowed.append(str(c))
        else:
            wide.append(str(c))
    wide_bytes = sum(int(df[c].to_numpy().nbytes) // 2 for c in wide)  # what float32 would have saved
    if wide and wide_bytes > WIDE_NOTE:
        shown = ", ".join(wide[:6]) + (f" and {len(wide) - 6} more" if len(wide) > 6 else "")
        warnings.warn(
            f"{path or 'the table'}: {len(wide)} numeric column(s) kept at 64 bits because float32 would change "
            f"their values ({shown}; {wide_bytes / 1e6:,.0f} MB more than float32).",
            VFLBenchWarning,
            stacklevel=3,
        )
    df.attrs["narrowed"] = narrowed
    df.attrs["kept_wide"] = wide
    return df


def release_memory() -> None:
    """Hand the memory a large table's reading and encoding freed back to the system: Arrow's allocator keeps
    freed pages for reuse, and glibc's heap keeps its top (130 MB and 25 MB after a 1,000,000 x 24 table)."""
    import sys

    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def sniff_separator(head: bytes) -> str:
    """The field separator of a delimited file from its first lines (``csv.Sniffer`` over , ; tab |);
    a comma when the lines do not say."""
    text = head.decode("utf-8-sig", errors="replace")
    lines = text.splitlines()[:20]
    if len(lines) > 1 and not text.endswith(("\n", "\r")):
        lines = lines[:-1]  # the last line may be cut mid-way
    try:
        return csv.Sniffer().sniff("\n".join(lines), delimiters=SEPARATORS).delimiter
    except csv.Error:
        return ","


def _read_delimited(path: Path, head: bytes, sep: str, text_columns: tuple[str, ...] = ()) -> pd.DataFrame:
    _header_names(path, head, sep)  # one clear line for a bad header
    first = head.decode("utf-8-sig").splitlines()[0]
    try:
        text = {
            raw: str for raw in next(csv.reader(io.StringIO(first), delimiter=sep), []) if raw.strip() in text_columns
        }
        df = pd.read_csv(
            path, sep=sep, compression="infer", skipinitialspace=True, encoding="utf-8-sig", dtype=text or None
        )
    except pd.errors.ParserError as e:
        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(e))
        if m:
            raise VFLBenchError(
                f"{path}: line {m.group(2)} has {m.group(3)} fields but the header has {m.group(1)}; "
                "every row needs one value per column (quote values that contain the separator)."
            ) from None
        raise VFLBenchError(f"{path} is not a well-formed table: {str(e).splitlines()[-1]}") from None
    except UnicodeDecodeError:
        raise VFLBenchError(f"{path} is not a UTF-8 text table; re-save it as UTF-8 CSV.") from None
    except pd.errors.EmptyDataError:
        raise VFLBenchError(f"{path} is empty; a table needs a header row and data rows.") from None
    df.columns = [str(c).strip() for c in df.columns]
    return df


def _header_names(path: Path, head: bytes, sep: str) -> list[str]:
    try:
        first = head.decode("utf-8-sig").splitlines()[0]
    except UnicodeDecodeError:
        raise VFLBenchError(f"{path} is not a UTF-8 text table; re-save it as UTF-8 CSV.") from None
    header = [h.strip() for h in next(csv.reader(io.StringIO(first), delimiter=sep), [])]
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise VFLBenchError(
            f"{path}: duplicate column name(s) {', '.join(repr(d) for d in dupes)} in the header; every column needs "
            "a unique name."
        )
    if any(h == "" for h in header) and len(header) > 1:
        raise VFLBenchError(
            f"{path}: the header has an empty column name (column {header.index('') + 1}); name every column."
        )
    return header


def read_large_delimited(path: Path, head: bytes, sep: str, text_columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """A large delimited file through pyarrow's multithreaded CSV reader, with the column types pandas gives a
    small file: the kinds from the first rows (pandas), integer columns as int64, decimals as float64, text as
    text. A column that turns out to hold decimals further down is read as float64, one that holds text as text
    (it is then a numeric column with stray text, handled as any table's). The Arrow buffers are freed as the
    frame is made; :func:`narrow_exact` then narrows what float32 holds."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    header = _header_names(path, head, sep)
    try:
        sample = pd.read_csv(path, sep=sep, nrows=2000, compression="infer", encoding="utf-8-sig")
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise VFLBenchError(f"{path} is not a well-formed table: {str(e).splitlines()[-1]}") from None
    raw = list(sample.columns)  # as the file spells them (the reader matches these)
    kind: dict[str, str] = {}  # raw name -> int | float | text
    for r, h in zip(raw, header, strict=False):
        s = sample[r]
        if h in text_columns or not pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s):
            kind[r] = "text" if (h in text_columns or not pd.api.types.is_bool_dtype(s)) else "bool"
        else:
            kind[r] = "int" if pd.api.types.is_integer_dtype(s) else "float"
    arrow = {"int": pa.int64(), "float": pa.float64(), "text": pa.string(), "bool": pa.bool_()}
    wider = {"int": "float", "float": "text", "bool": "text"}
    pool = pa.default_memory_pool()
    for _ in range(2 * len(raw) + 1):
        try:
            tab = pacsv.read_csv(
                path,
                read_options=pacsv.ReadOptions(use_threads=True, block_size=1 << 24),
                parse_options=pacsv.ParseOptions(delimiter=sep),
                convert_options=pacsv.ConvertOptions(
                    column_types={r: arrow[k] for r, k in kind.items()}, strings_can_be_null=True
                ),
                memory_pool=pool,
            )
            break
        except pa.ArrowInvalid as e:
            msg = str(e)
            m = re.search(r"In CSV column #(\d+): CSV conversion error to (\w+)", msg)
            if m and kind.get(raw[int(m.group(1))]) in wider:  # a wider kind further down: read the column as that
                col = raw[int(m.group(1))]
                kind[col] = wider[kind[col]]
                continue
            m = re.search(r"Expected (\d+) columns, got (\d+)", msg)
            if m:
                raise VFLBenchError(
                    f"{path}: a row has {m.group(2)} fields but the header has {m.group(1)}; every row needs one value "
                    "per column (quote values that contain the separator)."
                ) from None
            raise VFLBenchError(f"{path} is not a well-formed table: {msg.splitlines()[0][:300]}") from None
    df = tab.to_pandas(split_blocks=True, self_destruct=True, memory_pool=pool)
    del tab
    pool.release_unused()  # the parser's spent buffers back to the system, not kept by Arrow's allocator
    df.columns = [str(c).strip().lstrip("\ufeff") for c in df.columns]
    return df


def read_parquet_frame(path: Path) -> pd.DataFrame:
    """A Parquet file (pyarrow), its columns as stored."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        raise VFLBenchError("Reading .parquet needs pyarrow: pip install pyarrow.") from None
    try:
        pool = pa.default_memory_pool()
        tab = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise VFLBenchError(f"{path} is not a readable Parquet file ({first}); re-export it.") from None
    names = [str(c) for c in tab.column_names]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise VFLBenchError(f"{path}: duplicate column name(s) {', '.join(dupes)}; every column needs a unique name.")
    df = tab.to_pandas(split_blocks=True, self_destruct=True, memory_pool=pool)
    del tab
    pool.release_unused()
    df.columns = [str(c).strip() for c in df.columns]
    if len(df) == 0:
        raise VFLBenchError(f"{path} has columns but no rows.")
    return df


def read_arff_frame(path: Path) -> pd.DataFrame:
    """ARFF through ``scipy.io.arff``: nominal values decoded to text, ``?`` to missing."""
    from scipy.io import arff

    try:
        if path.name.lower().endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
                data, meta = arff.loadarff(f)
        else:
            data, meta = arff.loadarff(str(path))
    except (ValueError, NotImplementedError, arff.ParseArffError, UnicodeDecodeError) as e:
        raise VFLBenchError(
            f"{path} is not a readable ARFF file: "
            f"{str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}"
        ) from None
    names = list(meta.names())
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise VFLBenchError(
            f"{path}: duplicate attribute name(s) {', '.join(dupes)}; every attribute needs a unique name."
        )
    df = pd.DataFrame(data)
    for c, kind in zip(names, meta.types(), strict=True):
        if kind == "nominal":
            s = df[c].map(lambda v: v.decode("utf-8") if isinstance(v, bytes) else v)
            df[c] = s.where(s != "?", np.nan)
    return df


# ----------------------------------------------------------------------------- preprocessing
