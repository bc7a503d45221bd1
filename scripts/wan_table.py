"""The systems cost of robustness to missing parties: seconds per epoch and bytes per epoch of
LASER-VFL, Standard VFL and PBM-VFL (b=32, beta=0.1, secagg=masked with X25519 keys, each party
drawing its own noise) on Credit with each party in its
own process (``--runtime processes``), over an emulated WAN link per party (latency 0, 20 and 100 ms
one way, 10 Mbit/s). Writes a Markdown table (docs/RUNTIME.md quotes it).

    python scripts/wan_table.py --epochs 1 --out results/runtime/wan
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="laser,svfl,pbm")
    ap.add_argument("--latencies", default="0,20,100")
    ap.add_argument("--bandwidth", type=float, default=10.0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--parties", type=int, default=4)
    ap.add_argument("--out", default="results/runtime/wan")
    a = ap.parse_args()
    out = Path(a.out)
    rows = []
    for lat in [float(x) for x in a.latencies.split(",")]:
        for m in a.methods.split(","):
            d = out / f"{m}_lat{lat:g}"
            extra = ["--method-opt", "noise=party", "--method-opt", "secagg=masked"] if m == "pbm" else []
            cmd = [
                sys.executable,
                "-m",
                "vflbench",
                "run",
                "--dataset",
                "credit",
                "--method",
                m,
                *extra,
                "--runtime",
                "processes",
                "--parties",
                str(a.parties),
                "--epochs",
                str(a.epochs),
                "--seed",
                "0",
                "--test-missing",
                "none",
                "--net-latency",
                str(lat),
                "--net-bandwidth",
                str(a.bandwidth),
                "--quiet",
                "--out",
                str(d),
            ]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            (run_dir,) = [p for p in d.iterdir() if p.is_dir()]
            man = json.loads((run_dir / "manifest.json").read_text())
            tm, meas = man["timings"], man["runtime"]["measured"]
            rows.append(
                {
                    "method": man["method"]["display"],
                    "latency_ms": lat,
                    "bandwidth_mbps": a.bandwidth,
                    "s_per_epoch": tm["seconds_per_epoch"],
                    "comm_share": tm["comm_s"] / max(tm["train_s"] + tm["eval_s"], 1e-9),
                    "mb_up_per_epoch": meas["bytes_train_up"] / a.epochs / 1e6,
                    "mb_down_per_epoch": meas["bytes_train_down"] / a.epochs / 1e6,
                    "messages": meas["messages"],
                    "equal": man["runtime"]["measured_equals_accounted"],
                }
            )
            print(rows[-1], flush=True)
    lines = [
        "| method | latency (ms) | Mbit/s | s / epoch | server time in send/recv | MB up / epoch | MB down / epoch | "
        "measured = accounted |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines += [
        f"| {r['method']} | {r['latency_ms']:g} | {r['bandwidth_mbps']:g} | {r['s_per_epoch']:.1f} | "
        f"{100 * r['comm_share']:.0f}% | "
        f"{r['mb_up_per_epoch']:.2f} | {r['mb_down_per_epoch']:.2f} | {'yes' if r['equal'] else 'NO'} |"
        for r in rows
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
