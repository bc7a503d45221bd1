"""A trained run's model on disk, split by who holds it, and its test predictions.

``vflbench run --save-model`` writes into the run's folder::

    model/server.pt      the server's part (heads, fusion; SecureBoost's trees; gbdt's whole booster)
    model/party_K.pt     party K's part (its bottom models; SecureBoost's binning and lookup table): all it needs
    model/model.json     what each file holds, its bytes and sha256, the run key
    predictions.csv      one row per test sample and test setting: row, test_missing, predicted, score, predictors

A party process of ``vflbench serve --runtime processes`` loads only its own file. The files are pickles written by
vflbench (torch.save): load only files you trust.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import VFLBenchError
from ..core.files import atomic_write_text
from ..results.predictions import COLUMNS, answers
from ..training.trainer import Callback

FORMAT = 1


def save_model(folder: Path, method, run) -> dict[str, Any]:
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    parts = method.model_parts()
    index: dict[str, Any] = {"format": FORMAT, "run_key": run.key, "method": run.method, "parts": {}}
    for name, part in parts.items():
        path = folder / f"{name}.pt"
        torch.save(part, path)
        data = path.read_bytes()
        index["parts"][name] = {"file": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
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
        index = save_model(run_dir / "model", method, run)
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
        return json.loads(path.read_text())
    except ValueError as e:
        raise VFLBenchError(f"{path} is not readable JSON ({e}); save the model again.") from None


def load_part(run_dir: Path, name: str):
    import torch

    index = model_index(run_dir)
    info = index["parts"].get(name)
    if info is None:
        raise VFLBenchError(f"{run_dir}: the saved model has no part {name!r} (it has {', '.join(index['parts'])}).")
    path = Path(run_dir) / "model" / info["file"]
    data = path.read_bytes() if path.exists() else b""
    if hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise VFLBenchError(f"{path} is missing or changed since it was saved (sha256 differs); save the model again.")
    return torch.load(path, weights_only=False, map_location="cpu")
