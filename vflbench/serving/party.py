"""A party's serving process: it loads only its own part of a saved model (``model/party_K.*``) and keeps only its
own columns, listens on a TCP port, and answers each request (the test rows of a batch) with what its members send
where the method's prediction crosses to the server, after its emulated delay.

    python -m vflbench.serving.party RUN --party K --port P [--delay MS | lognormal:median=MS,sigma=S] --parent PID

``vflbench serve --runtime processes`` starts one per party (and restarts one that dies). It ends when the server
(``--parent``) dies, however it dies, and removes its log from ``--log-dir`` (and the folder, when it is the last).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from pathlib import Path

import numpy as np

WATCH_S = 0.5  # how often a party checks that the server is still its parent
ORPHAN_WAIT_S = 5.0  # at a death signal, how long a party waits for its server's process to be gone


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--party", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay", default="0")
    ap.add_argument("--net-latency", type=float, default=0.0)
    ap.add_argument("--net-bandwidth", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parent", type=int, default=0, help="the server's pid: this process ends when it is gone")
    ap.add_argument("--log-dir", default="", help="the folder of the party logs, cleaned up when the server is gone")
    a = ap.parse_args(argv)
    from .federation import STOP_SIGNAL, Link, Served, _delay, die_with_parent, environment_threads, pack_arrays

    if a.parent:
        die_with_parent(a.parent)
        signal.signal(signal.SIGTERM, lambda *_: _orphaned(a))  # the server's death (or a kill from outside)
    signal.signal(STOP_SIGNAL, lambda *_: os._exit(0))  # the server's stop: it removes the folder itself
    environment_threads()
    served = Served(a.run_dir, parts=[f"party_{a.party}"], party=a.party)
    delay = _delay(a.delay, f"party{a.party}")
    link = Link(a.net_latency, a.net_bandwidth)
    rng = np.random.default_rng(a.seed)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            n = int.from_bytes(await reader.readexactly(8), "little")
            rows = np.frombuffer(await reader.readexactly(n), dtype=np.int32).astype(np.int64)
            t0 = time.perf_counter()
            payload = pack_arrays(served.party_output(rows))
            wait_ms = delay.draw(rng) + link.ms(len(payload)) - (time.perf_counter() - t0) * 1e3
            if wait_ms > 0:
                await asyncio.sleep(wait_ms / 1e3)
            writer.write(len(payload).to_bytes(8, "little") + payload)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the server gave up on this request (its deadline): nothing to answer
        finally:
            writer.close()

    async def watch() -> None:
        while not a.parent or os.getppid() == a.parent:
            await asyncio.sleep(WATCH_S)
        _orphaned(a)

    async def serve() -> None:
        server = await asyncio.start_server(answer, "127.0.0.1", a.port)
        asyncio.get_running_loop().create_task(watch())
        async with server:
            await server.serve_forever()

    asyncio.run(serve())
    return 0


def _orphaned(a) -> None:
    """The server is gone: remove this party's log, and the log folder when it is the last one left, then end.

    A server killed as a whole (SIGKILL) ends its threads one at a time: when the thread that started this process
    ends first, the process is handed to another thread of the same server, and the death signal comes while
    ``getppid()`` is still the server's. So it waits (up to ORPHAN_WAIT_S) for the server to be gone; a SIGTERM
    from outside while the server lives ends the process, its log left for the server to remove."""
    deadline = time.monotonic() + ORPHAN_WAIT_S
    while a.log_dir and os.getppid() == a.parent and time.monotonic() < deadline:
        time.sleep(0.01)
    if a.log_dir and os.getppid() != a.parent:  # the server could not clean up: the parties do
        folder = Path(a.log_dir)
        (folder / f"party{a.party}.log").unlink(missing_ok=True)
        try:
            folder.rmdir()
        except OSError:
            pass  # another party's log is still there: the last party removes the folder
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
