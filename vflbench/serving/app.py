"""The HTTP endpoint of a served federation (FastAPI on uvicorn): ``GET /health``, ``POST /predict``.

``POST /predict`` takes one of ``{"split": "test"}`` (every test row of the run), ``{"rows": [...]}`` (test row
numbers) or ``{"ids": [...]}`` (sample IDs, for a run trained on party files) and answers::

    {"predictions": [{"row": 17, "predicted": 1, "score": 0.73, "parties": [0, 1, 2]}, ...],
     "latency_ms": 212.4, "deadline_ms": 200.0, "batched_with": 2}

``parties`` are those whose blocks the prediction had: the parties that answered in time, less those the run never
has for that sample (a party file without its ID, a party lost in training). Requests that arrive together are
batched: the batcher takes every request already waiting, then those arriving within ``batch_window_ms``, up to
``max_batch_rows`` rows; it asks the parties once for all of their rows, and answers each request. A bad request
gets a 4xx with a short reason (a body over ``max_request_bytes`` or naming more than ``max_request_rows`` rows:
413); an error while predicting a batch is a 500 for that batch's requests, and the server goes on. The request's
schema is in ``/openapi.json``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .federation import TooManyRows

MAX_REQUEST_BYTES = 8 << 20  # a body larger than this is refused (413) before it is read whole
MAX_REQUEST_ROWS = 65_536  # a request naming more rows is refused (413)

PREDICT_SCHEMA = {
    "title": "PredictRequest",
    "description": "Exactly one of split, rows or ids.",
    "type": "object",
    "properties": {
        "split": {"type": "string", "enum": ["test"], "description": "every test row of the run"},
        "rows": {
            "type": "array",
            "items": {"type": "integer", "minimum": 0},
            "minItems": 1,
            "maxItems": MAX_REQUEST_ROWS,
            "description": "test row numbers",
        },
        "ids": {
            "type": "array",
            "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "minItems": 1,
            "maxItems": MAX_REQUEST_ROWS,
            "description": "sample IDs of a run trained on party files (--party-data)",
        },
    },
    "additionalProperties": False,
    "minProperties": 1,
    "maxProperties": 1,
}


class BadRequest(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


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

    def __init__(
        self,
        served,
        parties,
        deadline_ms: float,
        batch_window_ms: float = 2.0,
        max_batch_rows: int = 65536,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_request_rows: int = MAX_REQUEST_ROWS,
    ):
        self.served, self.parties = served, parties
        self.deadline_ms = float(deadline_ms)
        self.window = batch_window_ms / 1e3
        self.max_rows = int(max_batch_rows)
        self.max_request_bytes, self.max_request_rows = int(max_request_bytes), int(max_request_rows)
        self.queue: asyncio.Queue[_Pending] | None = None
        self.task: asyncio.Task | None = None
        self.batches = 0
        self.last_answered: list[int] | None = None  # the parties whose blocks the last batch had (None: no batch yet)
        self.last_batch_at: float | None = None

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

    async def _next_batch(self) -> list[_Pending]:
        """The requests of the next batch: the first to come, every one already waiting (however long the last
        batch took: a late party does not shrink the batches), then those arriving within the window."""
        first = await self.queue.get()
        batch, n = [first], len(first.rows)
        end = time.perf_counter() + self.window
        while n < self.max_rows:
            try:
                nxt = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                left = end - time.perf_counter()
                if left <= 0:
                    break
                try:
                    nxt = await asyncio.wait_for(self.queue.get(), left)
                except asyncio.TimeoutError:
                    break
            batch.append(nxt)
            n += len(nxt.rows)
        return batch

    async def _batcher(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            rows = np.concatenate([p.rows for p in batch])
            try:
                answered, received = await self.parties.gather(rows, self.deadline_ms)
                used, (pred, score, _n) = await loop.run_in_executor(
                    None, self.served.predict_answered, rows, answered, received
                )
            except Exception as e:  # the batch fails, the server goes on
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(e)
                continue
            self.batches += 1
            self.last_answered = [int(k) for k in np.flatnonzero(used)]
            self.last_batch_at = time.time()
            held = self.served.mask(rows, used)
            at = 0
            for p in batch:
                m = len(p.rows)
                out = [
                    {
                        p.key: lab,
                        "predicted": int(pr),
                        "score": None if np.isnan(sc) else float(sc),
                        "parties": np.flatnonzero(h).tolist(),
                    }
                    for lab, pr, sc, h in zip(
                        p.labels,
                        pred[at : at + m].tolist(),
                        score[at : at + m].tolist(),
                        held[at : at + m],
                        strict=True,
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

    def health(self) -> dict[str, Any]:
        """The server's state: each party's process (running or not) and whether it answered the last batch's
        deadline; ``status`` is "ok" when every party answered the last batch (or none was asked yet and every
        process runs), "degraded" otherwise."""
        s = self.served
        running = [bool(v) for v in self.parties.alive()]
        answered = self.last_answered
        ok = all(running) and (answered is None or len(answered) == s.k - len(s.lost))
        return {
            "status": "ok" if ok else "degraded",
            "run": s.run.run_id,
            "method": s.run.method,
            "parties": s.k,
            "parties_running": running,
            "parties_answered_last_batch": answered,
            "parties_lost_in_training": s.lost,
            "malformed_answers": {str(k): v for k, v in sorted(s.malformed.items())},
            "last_batch_at": self.last_batch_at,
            "runtime": self.parties.runtime,
            "deadline_ms": self.deadline_ms,
            "rounds_per_prediction": s.rounds,
            "test_rows": s.n_test,
            "batches": self.batches,
        }

    async def read_request(self, request) -> tuple[np.ndarray, list[Any], str]:
        """A request's rows and labels, read within the size limits (:class:`BadRequest` otherwise)."""
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > self.max_request_bytes:
            raise BadRequest(
                413, f"the body has {int(size)} bytes; a request may have at most {self.max_request_bytes}"
            )
        chunks, got = [], 0
        async for chunk in request.stream():
            got += len(chunk)
            if got > self.max_request_bytes:
                raise BadRequest(
                    413, f"the body has more than {self.max_request_bytes} bytes, the most a request may have"
                )
            chunks.append(chunk)
        usage = 'send {"split": "test"}, {"rows": [...]} or {"ids": [...]}'
        try:
            body = json.loads(b"".join(chunks))
        except RecursionError:
            raise BadRequest(400, "the body nests too deeply to be a request; " + usage) from None
        except (ValueError, UnicodeDecodeError):
            raise BadRequest(400, "the body is not JSON; " + usage) from None
        if not isinstance(body, dict):
            raise BadRequest(400, "the body must be a JSON object: " + usage[5:])
        unknown = sorted(str(k)[:40] for k in set(body) - {"split", "rows", "ids"})
        if unknown:
            raise BadRequest(400, f"unknown field(s) {', '.join(unknown[:5])}; give split, rows or ids")
        try:
            rows, labels = self.served.rows_for(body, self.max_request_rows)
        except TooManyRows as e:
            raise BadRequest(413, str(e)) from None
        except (ValueError, TypeError) as e:
            raise BadRequest(400, str(e)[:300]) from None
        return rows, labels, "id" if "ids" in body else "row"


def make_app(server: Server):
    """The FastAPI application of ``server`` (its handlers' annotations resolve here, where FastAPI is imported)."""
    import contextlib

    from fastapi import FastAPI, Request
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
        return server.health()

    async def predict(request):
        try:
            rows, labels, key = await server.read_request(request)
        except BadRequest as e:
            return JSONResponse({"detail": e.detail}, status_code=e.status)
        try:
            return await server.submit(rows, labels, key)
        except Exception as e:  # noqa: BLE001 - one batch failed; the server stays up
            return JSONResponse({"detail": f"prediction failed: {type(e).__name__}: {str(e)[:200]}"}, status_code=500)

    predict.__annotations__ = {"request": Request}  # (this module's annotations are strings: FastAPI reads this one)
    schema = dict(PREDICT_SCHEMA)
    schema["properties"] = {
        **schema["properties"],
        "rows": {**schema["properties"]["rows"], "maxItems": server.max_request_rows},
        "ids": {**schema["properties"]["ids"], "maxItems": server.max_request_rows},
    }
    app.post(
        "/predict",
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
            "responses": {
                "400": {"description": "a malformed request (the reason in detail)"},
                "413": {
                    "description": f"a body over {server.max_request_bytes} bytes or over "
                    f"{server.max_request_rows} rows"
                },
            },
        },
    )(predict)
    return app
