"""Reading a user's table file as a DataFrame: CSV, TSV or ARFF, gzipped or not, the field separator
detected from the first lines, text columns kept as text (an ID ``001000`` is not the number 1000),
every failure one line that names the fix (:func:`read_table`; results cached per path, size and
mtime). Encoding the table into a dataset is :mod:`vflbench.data.datasets.table`."""

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

_CACHE: dict[tuple, pd.DataFrame] = {}


def read_table(path: Path, sep: str = "", text_columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """One table file as a DataFrame (cached per path, size and mtime). Errors name the fix.
    ``sep``: the field separator of a delimited file; empty: detected from the first lines (the
    separator used is in ``df.attrs["sep"]``). ``text_columns``: read as the text they hold (an ID
    ``001000`` stays ``001000``, not the number 1000)."""
    path = Path(path)
    if not path.exists():
        raise VFLBenchError(
            f"No such file: {path}. Give the path of a .csv, .csv.gz, .tsv or .arff file (relative to the working "
            "directory)."
        )
    if path.is_dir():
        raise VFLBenchError(f"{path} is a directory; give the path of a table file (.csv, .csv.gz, .tsv or .arff).")
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, sep, tuple(text_columns))
    if key in _CACHE:
        return _CACHE[key]
    if st.st_size == 0:
        raise VFLBenchError(f"{path} is empty; a table needs a header row and data rows.")
    name = path.name.lower()
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
        df = _read_delimited(path, head, used, text_columns)
        df.attrs["sep"] = used
    if len(df) == 0:
        raise VFLBenchError(f"{path} has a header but no data rows.")
    _CACHE[key] = df
    return df


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
    try:
        first = head.decode("utf-8-sig").splitlines()[0]
    except UnicodeDecodeError:
        raise VFLBenchError(f"{path} is not a UTF-8 text table; re-save it as UTF-8 CSV.") from None
    header = next(csv.reader(io.StringIO(first), delimiter=sep), [])
    header = [h.strip() for h in header]
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
