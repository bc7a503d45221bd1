"""A party's serving process: it loads only its own part of a saved model (``model/party_K.pt``) and keeps only its
own columns, listens on a TCP port, and answers each request (the test rows of a batch) with what its members send
where the method's prediction crosses to the server, after its emulated delay.

    python -m vflbench.serving.party RUN --party K --port P [--delay MS | lognormal:median=MS,sigma=S]

``vflbench serve --runtime processes`` starts one per party (and restarts one that dies).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--party", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay", default="0")
    ap.add_argument("--net-latency", type=float, default=0.0)
    ap.add_argument("--net-bandwidth", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    from .federation import Link, Served, _delay, environment_threads, pack_arrays

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

    async def serve() -> None:
        server = await asyncio.start_server(answer, "127.0.0.1", a.port)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
