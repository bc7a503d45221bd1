"""A trained run's model on disk, split by who holds it, and its test predictions.

``vflbench run --save-model`` writes into the run's folder::

    model/server.json, model/server.pt    the server's part (heads, fusion; SecureBoost's trees; gbdt's booster)
    model/party_K.json, model/party_K.pt  party K's part (its bottom models; SecureBoost's binning and lookup
                                          table): all it needs
    model/model.json     what each file holds, its bytes and sha256, the run key, the parties lost in training
    predictions.csv      one row per test sample and test setting: row, test_missing, predicted, score, predictors

A part is JSON (its structure, plain values) and a file of named tensors (:mod:`vflbench.core.tensortree`), read
with ``torch.load(weights_only=True)``: loading a model runs no code, and a file that is anything else (a planted
pickle) is refused in one line before any of it runs. A party process of ``vflbench serve --runtime processes``
loads only its own files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..core import tensortree
from ..core.errors import VFLBenchError
from ..core.files import atomic_write_text
from ..results.predictions import COLUMNS, answers
from ..training.trainer import Callback

FORMAT = 2  # 1: each part a pickle (torch.save of any object); 2: JSON and a file of tensors


def _entry(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    return {"file": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def save_model(folder: Path, method, run, lost: list[int] = ()) -> dict[str, Any]:
    """Write each of the method's parts as ``NAME.json`` and ``NAME.pt``, and the index ``model.json`` (``lost``: the
    parties still lost when training ended, whose blocks every prediction of the run has missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = method.model_parts()
    index: dict[str, Any] = {
        "format": FORMAT,
        "run_key": run.key,
        "method": run.method,
        "lost_parties": sorted(int(k) for k in lost),
        "parts": {},
    }
    for name, part in parts.items():
        structure, tensors = tensortree.split(part)
        tensortree.save(tensors, folder / f"{name}.pt")
        atomic_write_text(folder / f"{name}.json", json.dumps(structure, allow_nan=False))
        index["parts"][name] = {**_entry(folder / f"{name}.pt"), "structure": _entry(folder / f"{name}.json")}
    atomic_write_text(folder / "model.json", json.dumps(index, indent=2))
    return index


def write_predictions(path: Path, kept: dict, n_classes: int, positive: int | None) -> int:
    import pandas as pd

    frames = []
    for setting, (preds, valid, scores, _counted) in kept.items():
        pred, score, n = answers(preds, valid, scores, n_classes, positive)
        frames.append(
            pd.DataFrame(
                {
                    "row": np.arange(len(pred)),
                    "test_missing": setting,
                    "predicted": pred,
                    "score": score,
                    "predictors": n,
                }
            )
        )
    df = pd.concat(frames, ignore_index=True)[list(COLUMNS)]
    atomic_write_text(path, df.to_csv(index=False, float_format="%.17g"))
    return len(df)


class ModelKeeper(Callback):
    """``--save-model``: keeps the test predictions of every setting, then writes the model's parts and
    ``predictions.csv`` into the run's folder under ``out``."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.saved: dict[str, Any] = {}

    def on_prepared(self, inputs) -> None:
        inputs.predictions = {}

    def on_finished(self, run, inputs, method) -> None:
        run_dir = self.out / run.run_id
        faults = getattr(method, "faults", None)
        lost = [k for k, gone in enumerate(faults.lost) if gone] if faults is not None else []
        index = save_model(run_dir / "model", method, run, lost)
        info = inputs.prep.data.info
        rows = write_predictions(run_dir / "predictions.csv", inputs.predictions, info.n_classes, info.positive_class)
        self.saved = {"model": index, "predictions_rows": rows}

    def extras(self):
        return {}


def model_index(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "model" / "model.json"
    if not path.exists():
        raise VFLBenchError(
            f"{run_dir} holds no saved model (no model/model.json); train it with `vflbench run ... --save-model`."
        )
    try:
        index = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise VFLBenchError(f"{path} is not readable JSON ({e}); save the model again.") from None
    if not isinstance(index, dict) or not isinstance(index.get("parts"), dict):
        raise VFLBenchError(f"{path} is not a vflbench model index (no parts); save the model again.")
    if index.get("format") != FORMAT:
        raise VFLBenchError(
            f"{path} is a model of format {index.get('format')!r}, and this vflbench reads format {FORMAT} (format 1 "
            "parts are pickles, which can run code when loaded: they are not read); train the run again with "
            "--save-model."
        )
    return index


def _checked(path: Path, info: Any) -> bytes:
    data = path.read_bytes() if path.exists() else b""
    if not isinstance(info, dict) or hashlib.sha256(data).hexdigest() != info.get("sha256"):
        raise VFLBenchError(f"{path} is missing or changed since it was saved (sha256 differs); save the model again.")
    return data


def load_part(run_dir: Path, name: str):
    """Part ``name`` of a saved model: its structure (JSON) with its tensors, each file checked against the index;
    a file that is not what vflbench writes is refused in one line, and nothing in it runs."""
    index = model_index(run_dir)
    info = index["parts"].get(name)
    if info is None:
        raise VFLBenchError(f"{run_dir}: the saved model has no part {name!r} (it has {', '.join(index['parts'])}).")
    folder = Path(run_dir) / "model"
    tensors_path, structure_path = folder / f"{name}.pt", folder / f"{name}.json"
    _checked(tensors_path, info)
    text = _checked(structure_path, info.get("structure"))
    try:
        structure = json.loads(text)
        return tensortree.join(structure, tensortree.load(tensors_path))
    except (ValueError, UnicodeDecodeError) as e:  # NotATensorTree is a ValueError
        raise VFLBenchError(
            f"{folder / name}.*: not a model part vflbench wrote ({e}); nothing in it was run. Save the model again."
        ) from None
