"""``vflbench serve RUN``: a trained federation (``vflbench run ... --save-model``) behind an HTTP endpoint, under
party deadlines (:mod:`vflbench.serving`)."""

from __future__ import annotations

import typer

from ..core.errors import VFLBenchError
from .app import app, console, friendly


@app.command()
@friendly
def serve(
    run_dir: str = typer.Argument(..., metavar="RUN", help="a run folder written with --save-model"),
    port: int = typer.Option(8000, help="the HTTP port"),
    host: str = typer.Option("127.0.0.1", help="the address to listen on"),
    deadline_ms: float = typer.Option(
        1000.0,
        help="per request, the longest the server waits for each party; a party not in by then is a missing "
        "block for that request",
    ),
    delay: list[str] = typer.Option(
        [], help="make parties late on purpose: partyK=MS, or lognormal:median=MS,sigma=S (every party, or partyK=...)"
    ),
    runtime: str = typer.Option(
        "inprocess",
        help="inprocess (every part here, delays emulated) | processes (one process per party, each "
        "loading only its own part)",
    ),
    net_latency: float = typer.Option(0.0, help="emulated one-way latency between a party and the server, ms"),
    net_bandwidth: float = typer.Option(0.0, help="emulated bandwidth of each party's link, Mbit/s (0: unlimited)"),
    batch_window_ms: float = typer.Option(2.0, help="requests arriving within this of the first are one batch"),
    seed: int = typer.Option(0, help="seed of the delay draws"),
):
    """Serve a trained run's predictions over HTTP (GET /health, POST /predict), a late or lost party being a missing
    block under the method's own missing-block inference."""
    from pathlib import Path

    if runtime not in ("inprocess", "processes"):
        raise VFLBenchError(f"--runtime takes inprocess or processes, got {runtime!r}.")
    if not 0 < deadline_ms <= 3_600_000:
        raise VFLBenchError(f"--deadline-ms must be in (0, 3600000], got {deadline_ms:g}.")
    if not 1 <= port <= 65535:
        raise VFLBenchError(f"--port must be in 1..65535, got {port}.")
    from ..serving.app import Server, make_app
    from ..serving.federation import InProcessParties, Link, ProcessParties, Served, parse_delays

    run_path = Path(run_dir)
    if runtime == "processes":
        from ..serving.model_files import model_index

        index = model_index(run_path)
        served = Served(run_path, parts=["server"])
        if not any(n.startswith("party_") for n in index["parts"]):
            raise VFLBenchError(
                f"{served.run.method} has no party parts (the central reference): serve it in one process."
            )
        if served.method.trains_whole:
            raise VFLBenchError(
                "gradient-boosted trees are served in one process for now (SecureBoost's prediction is rounds of "
                "queries to the parties' lookup tables); drop --runtime processes."
            )
        delays = parse_delays(delay, served.k)
        parties = ProcessParties(run_path, served.k, delays, Link(net_latency, net_bandwidth), seed)
        parties.start()
        parties.wait_ready()
    else:
        served = Served(run_path)
        delays = parse_delays(delay, served.k)
        parties = InProcessParties(served, delays, Link(net_latency, net_bandwidth), seed)
    server = Server(served, parties, deadline_ms, batch_window_ms)
    console.print(
        f"serving {served.run.run_id} ({served.run.method}, {served.k} parties, {runtime}) on http://{host}:{port} "
        f"with a {deadline_ms:g} ms deadline; delays: {', '.join(f'party{k}={d}' for k, d in enumerate(delays))}",
        markup=False,
        highlight=False,
    )
    import uvicorn

    uvicorn.run(make_app(server), host=host, port=port, log_level="warning")
