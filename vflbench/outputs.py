"""Writing a run's files: ``<out>/<run_id>/results.csv`` and ``manifest.json``, atomically, the
manifest last (it marks the run complete). Nothing here computes anything."""

from __future__ import annotations

import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_outputs(out_dir: Path, rows: list[dict[str, Any]], manifest: dict[str, Any]) -> Path:
    import pandas as pd

    run_dir = Path(out_dir) / manifest["run_id"]
    atomic_write_text(run_dir / "results.csv", pd.DataFrame(rows).to_csv(index=False))
    atomic_write_text(run_dir / "manifest.json", json.dumps(manifest, indent=2, default=json_default))
    return run_dir


def json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def versions() -> dict[str, str]:
    import pandas
    import sklearn
    import torch

    out = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__, "numpy": np.__version__,
           "pandas": pandas.__version__, "scikit-learn": sklearn.__version__, "vflbench": __version__}
    try:
        import torchvision

        out["torchvision"] = torchvision.__version__
    except Exception:  # pragma: no cover
        pass
    return out
