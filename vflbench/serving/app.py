"""The HTTP endpoint of a served federation (FastAPI on uvicorn): ``GET /health``, ``POST /predict``.

``POST /predict`` takes one of ``{"split": "test"}`` (every test row of the run), ``{"rows": [...]}`` (test row
numbers) or ``{"ids": [...]}`` (sample IDs, for a run trained on party files) and answers::

    {"predictions": [{"row": 17, "predicted": 1, "score": 0.73, "parties": [0, 1, 2]}, ...],
     "latency_ms": 212.4, "deadline_ms": 200.0, "batched_with": 2}

``parties`` are those that answered in time (the others' blocks were missing for this request). Requests that
arrive together are batched: the batcher takes every request waiting within ``batch_window_ms`` of the first (up to
``max_batch_rows`` rows), asks the parties once for all of their rows, and answers each. A bad request gets a 4xx
with the reason; an error while predicting a batch is a 500 for that batch's requests, and the server goes on.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class _Pending:
    rows: np.ndarray
    labels: list[Any]
    key: str
    future: asyncio.Future
    arrived: float


class Server:
    """The serving loop: a queue of requests, one batch at a time, the parties' answers gathered within the
    deadline (:mod:`.federation`), the method's prediction with the late parties' blocks missing."""

    def __init__(self, served, parties, deadline_ms: float, batch_window_ms: float = 2.0, max_batch_rows: int = 65536):
        self.served, self.parties = served, parties
        self.deadline_ms = float(deadline_ms)
        self.window = batch_window_ms / 1e3
        self.max_rows = int(max_batch_rows)
        self.queue: asyncio.Queue[_Pending] | None = None
        self.task: asyncio.Task | None = None
        self.batches = 0

    async def start(self) -> None:
        self.queue = asyncio.Queue()
        self.task = asyncio.create_task(self._batcher())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        await self.parties.close()

    async def submit(self, rows: np.ndarray, labels: list[Any], key: str) -> dict[str, Any]:
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put(_Pending(rows, labels, key, fut, time.perf_counter()))
        return await fut

    async def _batcher(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = await self.queue.get()
            batch = [first]
            n = len(first.rows)
            end = time.perf_counter() + self.window
            while n < self.max_rows:
                left = end - time.perf_counter()
                if left <= 0:
                    break
                try:
                    nxt = await asyncio.wait_for(self.queue.get(), left)
                except asyncio.TimeoutError:
                    break
                batch.append(nxt)
                n += len(nxt.rows)
            rows = np.concatenate([p.rows for p in batch])
            try:
                answered, received = await self.parties.gather(rows, self.deadline_ms)
                pred, score, _n = await loop.run_in_executor(None, self.served.predict, rows, answered, received)
            except Exception as e:  # the batch fails, the server goes on
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(e)
                continue
            self.batches += 1
            who = [int(k) for k in np.flatnonzero(answered)]
            at = 0
            for p in batch:
                m = len(p.rows)
                out = [
                    {p.key: lab, "predicted": int(pr), "score": None if np.isnan(sc) else float(sc), "parties": who}
                    for lab, pr, sc in zip(
                        p.labels, pred[at : at + m].tolist(), score[at : at + m].tolist(), strict=True
                    )
                ]
                at += m
                if not p.future.done():
                    p.future.set_result(
                        {
                            "predictions": out,
                            "latency_ms": (time.perf_counter() - p.arrived) * 1e3,
                            "deadline_ms": self.deadline_ms,
                            "batched_with": len(batch),
                        }
                    )


def make_app(server: Server):
    """The FastAPI application of ``server`` (its handlers' annotations resolve here, where FastAPI is imported)."""
    import contextlib

    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        await server.start()
        try:
            yield
        finally:
            await server.stop()

    app = FastAPI(
        title="vflbench serve", description="A trained VFL federation under party deadlines.", lifespan=lifespan
    )

    @app.get("/health")
    async def health() -> dict[str, Any]:
        s = server.served
        return {
            "status": "ok",
            "run": s.run.run_id,
            "method": s.run.method,
            "parties": s.k,
            "parties_alive": server.parties.alive(),
            "runtime": server.parties.runtime,
            "deadline_ms": server.deadline_ms,
            "test_rows": s.n_test,
            "batches": server.batches,
        }

    async def predict(request):
        try:
            body = await request.json()
        except ValueError:
            raise HTTPException(
                400, 'the body is not JSON; send {"split": "test"}, {"rows": [...]} or {"ids": [...]}'
            ) from None
        if not isinstance(body, dict):
            raise HTTPException(
                400, 'the body must be a JSON object: {"split": "test"}, {"rows": [...]} or {"ids": [...]}'
            )
        unknown = set(body) - {"split", "rows", "ids"}
        if unknown:
            raise HTTPException(400, f"unknown field(s) {', '.join(sorted(unknown))}; give split, rows or ids")
        try:
            rows, labels = server.served.rows_for(body)
        except (ValueError, TypeError) as e:
            raise HTTPException(400, str(e)) from None
        try:
            return await server.submit(rows, labels, "id" if "ids" in body else "row")
        except Exception as e:  # noqa: BLE001 - one batch failed; the server stays up
            return JSONResponse({"detail": f"prediction failed: {type(e).__name__}: {e}"}, status_code=500)

    predict.__annotations__ = {"request": Request}  # (this module's annotations are strings: FastAPI reads this one)
    app.post("/predict")(predict)
    return app
