"""Writing a run's files: ``<out>/<run_id>/results.csv`` and ``manifest.json``, atomically, the
manifest last (it marks the run complete). Nothing here computes anything."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..core.errors import VFLBenchError

# re-exported: writing results is this module's job
from ..core.files import atomic_write_text, shareable_mkstemp  # noqa: F401


def check_output_dir(path: Path, flag: str = "--out") -> None:
    """Fail before any work if ``path`` cannot become a writable directory."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise VFLBenchError(f"{flag} {p} is a file; give a directory.")
    probe = p
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise VFLBenchError(f"{flag} {p}: {probe} is a file, so the directory cannot be created; give another path.")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise VFLBenchError(f"{flag} {p}: {probe} is not writable; give a directory you can write to.")


def check_output_file(path: Path, flag: str = "--out") -> None:
    """Fail before any work if ``path`` cannot be written as a file (its folder must exist)."""
    p = Path(path)
    if p.is_dir():
        raise VFLBenchError(f"{flag} {p} is a directory; give a file path.")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise VFLBenchError(f"{flag} {p}: the folder {parent} does not exist; create it first or give another path.")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise VFLBenchError(f"{flag} {p} is not writable; give a path you can write to.")


def write_outputs(
    out_dir: Path,
    rows: list[dict[str, Any]],
    manifest: dict[str, Any],
    origin: float | None = None,
    origin_name: str = "run start",
) -> Path:
    """The manifest, written last, records the CSV's sha256 and row count: a run is finished only
    when both files exist and agree (:func:`run_finished`). Its ``timings`` are completed here
    (:func:`vflbench.core.timing.close`): wall time from ``origin`` (epoch seconds: the process's start for
    ``vflbench run``; default, the run's own start) and the parts that cover it."""
    t = time.perf_counter()  # before the imports: a first import of pandas here is part of writing
    import pandas as pd

    from ..core.timing import close

    run_dir = Path(out_dir) / manifest["run_id"]
    text = pd.DataFrame(rows).to_csv(index=False)
    manifest = {**manifest, "results_file": {"sha256": hashlib.sha256(text.encode()).hexdigest(), "rows": len(rows)}}
    atomic_write_text(run_dir / "results.csv", text)
    if manifest.get("warnings"):  # libraries' warnings during the run (vflbench.core.warnlog)
        from ..core.warnlog import LOG_NAME, log_text

        atomic_write_text(run_dir / LOG_NAME, log_text(manifest["warnings"]))
    if isinstance(manifest.get("timings"), dict):
        manifest["timings"] = close(dict(manifest["timings"]), origin, origin_name, time.perf_counter() - t)
    atomic_write_text(run_dir / "manifest.json", json.dumps(manifest, indent=2, default=json_default))
    return run_dir


def csv_problem(path: Path) -> str | None:
    """Why a results CSV cannot be trusted (empty, a line with the wrong number of fields, cut off
    mid-line), or None."""
    import csv

    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        return f"cannot be read ({e})"
    if not text.strip():
        return "is empty"
    lines = list(csv.reader(text.splitlines()))
    width = len(lines[0])
    for i, row in enumerate(lines[1:], start=2):
        if len(row) != width:
            return f"line {i} has {len(row)} fields where the header has {width}"
    if len(lines) < 2:
        return "has a header but no rows"
    if not text.endswith("\n"):
        return f"ends in the middle of line {len(lines)}"
    return None


def run_finished(run_dir: Path) -> tuple[bool, str | None]:
    """(finished, why not) for a run folder. Not started: (False, None). A run whose files are
    damaged: (False, reason), so it is re-run, never read as data."""
    data, why = finished_results(run_dir)
    return data is not None, why


GATHERED = "manifests.jsonl"  # a gathered sweep's runs: one JSON line each (vflbench gather)


def gathered_runs(folder: Path) -> dict[str, dict]:
    """The runs of a gathered sweep folder (``<folder>/manifests.jsonl``): run id -> ``{"manifest": ...,
    "results_csv": the run's own CSV text}`` (read once per version of the file)."""
    path = Path(folder) / GATHERED
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return {}
    cached = _GATHERED.get(str(path))
    if cached is not None and cached[0] == stamp:
        return cached[1]
    runs: dict[str, dict] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            runs[rec["run_id"]] = rec
        except (ValueError, KeyError, TypeError):
            raise VFLBenchError(f"{path}: line {n} is not a gathered run; gather the folder again.") from None
    _GATHERED[str(path)] = (stamp, runs)
    return runs


_GATHERED: dict[str, tuple[int, dict]] = {}


def is_sweep_folder(path: Path) -> bool:
    """A sweep's output folder: run folders (``runs/``, a sweep running or not gathered yet) or gathered runs
    (``manifests.jsonl``)."""
    path = Path(path)
    return (path / "runs").is_dir() or (path / GATHERED).exists()


def sweep_manifests(folder: Path) -> list[dict]:
    """Every run manifest of a sweep folder: its run folders' (``runs/*/manifest.json``), then the gathered ones
    (``manifests.jsonl``) no run folder repeats, in run-id order."""
    folder = Path(folder)
    runs = folder / "runs"
    out = (
        {p.parent.name: json.loads(p.read_text()) for p in sorted(runs.glob("*/manifest.json"))}
        if runs.is_dir()
        else {}
    )
    for run_id, rec in gathered_runs(folder).items():
        out.setdefault(run_id, rec["manifest"])
    return [out[k] for k in sorted(out)]


def sweep_records(folder: Path) -> list[tuple[dict, object]]:
    """Every finished run of a sweep folder, run folders and gathered alike: (its manifest, its rows as a DataFrame),
    in run-id order. What a study's report reads."""
    from io import BytesIO

    folder = Path(folder)
    out = []
    for m in sweep_manifests(folder):
        data, _ = finished_results(folder / "runs" / m["run_id"])
        if data is not None:
            out.append((m, read_results_csv(BytesIO(data))))
    return out


def finished_results(run_dir: Path) -> tuple[bytes | None, str | None]:
    """A finished run's ``results.csv`` as bytes, read once and checked as :func:`run_finished` says
    (else None, and why not). A run gathered into its sweep's ``manifests.jsonl`` is read from there, checked
    against the same sha256."""
    run_dir = Path(run_dir)
    man = run_dir / "manifest.json"
    if not man.exists():
        rec = gathered_runs(run_dir.parent.parent).get(run_dir.name) if run_dir.parent.name == "runs" else None
        if rec is None:
            return None, None
        data = rec["results_csv"].encode()
        want = (rec["manifest"].get("results_file") or {}).get("sha256")
        if want and hashlib.sha256(data).hexdigest() != want:
            return None, f"its rows in {GATHERED} do not match the sha256 recorded in its manifest"
        return data, None
    try:
        rec = json.loads(man.read_text()).get("results_file")
    except (OSError, ValueError):
        return None, "manifest.json is unreadable"
    csv_path = run_dir / "results.csv"
    if not csv_path.exists():
        return None, "results.csv is missing"
    data = csv_path.read_bytes()
    if rec:
        if hashlib.sha256(data).hexdigest() != rec["sha256"]:
            return None, "results.csv does not match the sha256 recorded in its manifest"
        return data, None
    problem = csv_problem(csv_path)  # runs written before checksums were recorded
    return (None, f"results.csv {problem}") if problem else (data, None)


def json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def versions() -> dict[str, str]:
    """Versions of Python and the packages a run's numbers depend on, read from package metadata (an
    import of torchvision or scikit-learn only to read its version costs a tabular run seconds)."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    out = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    for name, module in (("pandas", "pandas"), ("scikit-learn", "sklearn"), ("torchvision", "torchvision")):
        loaded = sys.modules.get(module)  # already imported (an image run): its own version, build tag included
        try:
            out[name] = loaded.__version__ if loaded is not None else version(name)
        except PackageNotFoundError:  # pragma: no cover
            pass
    # the trees' libraries (XGBoost's booster and sketch; Paillier's keys and arithmetic): recorded in every manifest,
    # "absent" where the trees extra is not installed
    from ..runs.behaviour import library_version

    out["xgboost"] = library_version("xgboost")
    for name in ("phe", "gmpy2"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    out["vflbench"] = __version__
    out["cpu"] = cpu_model()
    out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()  # the ISA of torch's CPU kernels (AVX2, AVX512)
    keys = ("python", "platform", "torch", "numpy", "pandas", "scikit-learn", "vflbench", "torchvision")
    keys += ("xgboost", "phe", "gmpy2")
    return {k: out[k] for k in (*keys, "cpu", "cpu_capability") if k in out}


def cpu_model() -> str:
    """The processor's model name. Bit-identical repeats hold on one kind of CPU: another one's floating-point
    kernels (MKL's and torch's per instruction set) may round differently (README, "Reproducibility")."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # not Linux
        pass
    return platform.processor() or platform.machine()


# identity columns that hold text: read them as text, or pandas turns a protocol named "false" into
# the boolean False (and "none" into NaN) when it merges run CSVs
TEXT_COLUMNS = (
    "run_id",
    "run_key",
    "dataset",
    "method",
    "method_display",
    "partitioner",
    "protocol",
    "train_missing",
    "test_missing",
    "options",
    "protocol_options",
    "settings",
    "mechanism",
    "secagg",
    "metric",
    "status",
    "stage_epochs",
)


def read_results_csv(path, **kw):
    """``pd.read_csv`` of a vflbench results CSV with its text columns kept as text."""
    import pandas as pd

    dtype = {c: str for c in TEXT_COLUMNS}
    dtype.update(kw.pop("dtype", {}))
    return pd.read_csv(path, dtype=dtype, keep_default_na=True, **kw)


def read_results_texts(texts: list[bytes]):
    """Many runs' results CSVs (bytes, as :func:`finished_results` gives them) as one frame, in order.

    Consecutive files with the same header are joined and parsed by one ``read_csv``: a table over
    hundreds of runs pays the parser's fixed cost a few times instead of once per run. The frame is the
    one that reading each file and concatenating them gives (tests/test_report.py checks it)."""
    import pandas as pd

    chunks: list[tuple[bytes, list[bytes]]] = []
    for data in texts:
        head, _, body = data.partition(b"\n")
        if body and not body.endswith(b"\n"):
            body += b"\n"
        if body and chunks and chunks[-1][0] == head and chunks[-1][1][-1]:  # a header-only file stays alone
            chunks[-1][1].append(body)
        else:
            chunks.append((head, [body]))
    frames = []
    for head, bodies in chunks:
        df = read_results_csv(BytesIO(head + b"\n" + b"".join(bodies)))
        if len(bodies) > 1 and not _inferred_as_each_file_alone(df, bodies):
            frames += [read_results_csv(BytesIO(head + b"\n" + body)) for body in bodies]
        else:
            frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


_BOOL_WORDS = {"True", "TRUE", "true", "False", "FALSE", "false"}


def _certainly_text(v) -> bool:
    """A parsed cell that no file could have read as a number or a bool."""
    if not isinstance(v, str) or v in _BOOL_WORDS:
        return False
    try:
        float(v)
    except ValueError:
        return True
    return False


def _inferred_as_each_file_alone(df, bodies: list[bytes]) -> bool:
    """Whether ``df``, parsed from the files ``bodies`` joined, has the columns and types that reading each
    file alone and concatenating would give. A numeric column is safe (a file's ints become the whole's
    floats either way). A text column is safe only if every file holds a cell that cannot be a number or a
    bool: a file of numbers alone (p_miss_train 0.1 beside another's mar1), or of empty cells only, is read
    as numbers, and the concatenation keeps them as numbers."""
    import pandas as pd

    text = [c for c, t in df.dtypes.items() if c not in TEXT_COLUMNS and not pd.api.types.is_numeric_dtype(t)]
    if not text:
        return True
    rows = [body.count(b"\n") for body in bodies]
    if sum(rows) != len(df) or 0 in rows:  # a quoted line break or an empty file: no cheap proof
        return False
    segment = np.repeat(np.arange(len(bodies)), rows)
    for c in text:
        values = df[c].to_numpy(dtype=object)
        certain = {v: _certainly_text(v) for v in pd.unique(values)}
        hit = np.fromiter((certain.get(v, False) for v in values), dtype=bool, count=len(values))
        if not np.bincount(segment, weights=hit, minlength=len(bodies)).all():
            return False
    return True


SUPERSEDED = "superseded"  # a gathered folder's runs that its experiment no longer asks for (gather --experiment)


def gather(folder: Path, keep: set[str] | None = None) -> tuple[int, list[str]]:
    """Fold a sweep folder's finished run folders (``runs/<id>/manifest.json`` and ``results.csv``) into
    ``manifests.jsonl`` (one line a run: its manifest and its CSV's text, keyed by run id; a run gathered before is
    replaced) and the tidy ``results.csv`` of every gathered run, then remove those run folders. A run folder
    holding anything else (a saved model, predictions) or not finished is left where it is. With ``keep`` (the run
    ids the folder's experiment asks for now), every other run is moved to ``superseded/``, a gathered folder of its
    own (runs made under an earlier default: kept for comparison, out of the folder's tables and ranks). Returns the
    number of runs gathered now and the folders left, with why."""
    import shutil

    folder = Path(folder)
    runs_dir = folder / "runs"
    records = dict(gathered_runs(folder))
    now, left, done_dirs = 0, [], []
    for d in sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []:
        if not d.is_dir():
            continue
        extra = sorted(p.name for p in d.iterdir() if p.name not in ("manifest.json", "results.csv"))
        data, why = finished_results(d)
        if data is None:
            left.append(f"{d.name} ({why or 'not finished'})")
            continue
        if extra:
            left.append(f"{d.name} (it also holds {', '.join(extra)})")
            continue
        records[d.name] = {
            "run_id": d.name,
            "manifest": json.loads((d / "manifest.json").read_text()),
            "results_csv": data.decode(),
        }
        done_dirs.append(d)
        now += 1
    if keep is not None and (old := {k: v for k, v in records.items() if k not in keep}):
        _write_gathered(folder / SUPERSEDED, {**gathered_runs(folder / SUPERSEDED), **old})
        records = {k: v for k, v in records.items() if k in keep}
    _write_gathered(folder, records)
    for d in done_dirs:  # only once the runs are safe in manifests.jsonl
        shutil.rmtree(d)
    if runs_dir.is_dir() and not any(runs_dir.iterdir()):
        runs_dir.rmdir()
    return now, left


def _write_gathered(folder: Path, records: dict[str, dict]) -> None:
    """``manifests.jsonl`` and the tidy ``results.csv`` of a gathered folder's ``records`` (run id -> record)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(records[k], sort_keys=True, default=json_default) for k in sorted(records)]
    atomic_write_text(folder / GATHERED, "\n".join(lines) + ("\n" if lines else ""))
    _GATHERED.pop(str(folder / GATHERED), None)
    if records:  # in the sweep's order of runs (sweep.json), as the sweep wrote its results.csv
        try:
            order = json.loads((folder / "sweep.json").read_text()).get("run_ids") or []
        except (OSError, ValueError):
            order = []
        ids = [r for r in dict.fromkeys(order) if r in records] + sorted(set(records) - set(order))
        df = read_results_texts([records[r]["results_csv"].encode() for r in ids])
        atomic_write_text(folder / "results.csv", df.to_csv(index=False))
