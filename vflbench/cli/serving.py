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
    max_request_bytes: int = typer.Option(8 << 20, help="the largest request body taken, bytes (larger: 413)"),
    max_request_rows: int = typer.Option(65_536, help="the most rows one request may name (more: 413)"),
    seed: int = typer.Option(0, help="seed of the delay draws"),
):
    """Serve a trained run's predictions over HTTP (GET /health, POST /predict), a late or lost party being a missing
    block under the method's own missing-block inference. The deadline is per round of the prediction: one for the
    neural methods, one per tree level for SecureBoost (docs/SERVING.md)."""
    from pathlib import Path

    check_flags(runtime, deadline_ms, port, net_latency, net_bandwidth, batch_window_ms, max_request_bytes,
                max_request_rows, seed)  # fmt: skip
    from ..serving.app import Server, make_app
    from ..serving.federation import Link, ProcessParties

    run_path = Path(run_dir)
    parties = None
    try:
        served, parties, delays = federation(run_path, runtime, delay, Link(net_latency, net_bandwidth), seed)
        server = Server(
            served,
            parties,
            deadline_ms,
            batch_window_ms,
            max_request_bytes=max_request_bytes,
            max_request_rows=max_request_rows,
        )
        console.print(
            f"serving {served.run.run_id} ({served.run.method}, {served.k} parties, {runtime}) on "
            f"http://{host}:{port} with a {deadline_ms:g} ms deadline per round ({served.rounds} a prediction); "
            f"delays: {', '.join(f'party{k}={d}' for k, d in enumerate(delays))}",
            markup=False,
            highlight=False,
        )
        import uvicorn

        http = uvicorn.Server(uvicorn.Config(make_app(server), host=host, port=port, log_level="warning"))
        try:
            http.run()
        except SystemExit:  # uvicorn exits when it cannot bind
            http.started = False
        if not http.started:
            raise VFLBenchError(
                f"could not listen on {host}:{port} (in use, or not this machine's); give another --port."
            )
    finally:  # the party processes end with the server, whether it stops or fails to start
        if isinstance(parties, ProcessParties):
            parties.stop()


def check_flags(runtime, deadline_ms, port, net_latency, net_bandwidth, batch_window_ms, max_request_bytes,
                max_request_rows, seed) -> None:  # fmt: skip
    """``vflbench serve``'s flags, each refused in one line when it cannot be."""
    if runtime not in ("inprocess", "processes"):
        raise VFLBenchError(f"--runtime takes inprocess or processes, got {runtime!r}.")
    if not 0 < deadline_ms <= 3_600_000:
        raise VFLBenchError(f"--deadline-ms must be in (0, 3600000], got {deadline_ms:g}.")
    if not 1 <= port <= 65535:
        raise VFLBenchError(f"--port must be in 1..65535, got {port}.")
    for flag, value, top in (
        ("--net-latency", net_latency, 3_600_000),
        ("--net-bandwidth", net_bandwidth, 1e9),
        ("--batch-window-ms", batch_window_ms, 60_000),
    ):
        if not 0 <= value <= top:  # (NaN fails too)
            raise VFLBenchError(f"{flag} must be in [0, {top:g}], got {value:g}.")
    if not 1_024 <= max_request_bytes <= 1 << 31:
        raise VFLBenchError(f"--max-request-bytes must be in [1024, {1 << 31}], got {max_request_bytes}.")
    if not 1 <= max_request_rows <= 10_000_000:
        raise VFLBenchError(f"--max-request-rows must be in [1, 10000000], got {max_request_rows}.")
    if not 0 <= seed < 2**63:
        raise VFLBenchError(f"--seed must be a non-negative integer below 2^63, got {seed}.")


def federation(run_path, runtime: str, delay: list[str], link, seed: int):
    """``(served, parties, delays)``: the run loaded where the server predicts, and its parties (in this process, or
    started as processes and up); a failure on the way stops the processes started."""
    from ..serving.federation import InProcessParties, ProcessParties, Served, parse_delays

    if runtime != "processes":
        served = Served(run_path)
        delays = parse_delays(delay, served.k)
        return served, InProcessParties(served, delays, link, seed), delays
    from ..serving.model_files import model_index

    index = model_index(run_path)
    served = Served(run_path, parts=["server"])
    if not any(n.startswith("party_") for n in index["parts"]):
        raise VFLBenchError(f"{served.run.method} has no party parts (the central reference): serve it in one process.")
    if served.method.trains_whole:
        raise VFLBenchError(
            "gradient-boosted trees are served in one process for now (SecureBoost's prediction is rounds of "
            "queries to the parties' lookup tables); drop --runtime processes."
        )
    delays = parse_delays(delay, served.k)
    parties = ProcessParties(run_path, served.k, delays, link, seed)
    try:
        parties.start()
        parties.wait_ready()
    except BaseException:
        parties.stop()
        raise
    return served, parties, delays
