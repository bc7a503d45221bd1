"""Each communication protocol across processes over an emulated WAN link (issue "communication"): Credit, Standard
VFL, 4 parties, every block, seed 0, ``--runtime processes --net-latency 50 --net-bandwidth 100``. Per protocol: the
training seconds measured (five processes on this machine), the bytes measured on the wire against the accounted, and
the link model of scripts/communication_report.py (exchanges x 2 x 50 ms + the busiest party's bytes at 100 Mbit/s)
for the same run, so that the report's WAN column for the in-process sweep can be checked against a real wire.

    python benchmarks/communication_wan.py --epochs 1 --out results/communication/wan.csv
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import ROOT, cli_run  # noqa: E402

PROTOCOLS = [
    ("none", []),
    ("quant:bits=4", ["--compress", "quant:bits=4"]),
    ("quant:bits=4,down=1", ["--compress", "quant:bits=4,down=1"]),
    ("topk:ratio=0.1", ["--compress", "topk:ratio=0.1"]),
    ("vq:codes=16,dim=2", ["--compress", "vq:codes=16,dim=2"]),
    ("none + Q=5", ["--local-steps", "5"]),
    ("quant:bits=4 + Q=5", ["--compress", "quant:bits=4", "--local-steps", "5"]),
]
LATENCY_MS, MBIT = 50, 100


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "communication" / "wan.csv")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in PROTOCOLS:
            args = [*f"--dataset credit --method svfl --parties 4 --epochs {a.epochs} --train-missing none".split(),
                    *"--test-missing none --seed 0 --quiet --runtime processes".split(),
                    "--net-latency", str(LATENCY_MS), "--net-bandwidth", str(MBIT), *extra]  # fmt: skip
            man, _ = cli_run(ROOT, args, Path(tmp) / name.replace(" ", "_").replace(":", "-"))
            comm, rt = man["communication"], man["runtime"]
            exchanges = math.ceil(man["data"]["n_train"] / man["config"]["hp"]["batch_size"]) * a.epochs
            up, down = comm["bytes_train_up_per_party"], comm["bytes_train_down_per_party"]
            model = exchanges * 2 * LATENCY_MS / 1000 + (max(up) + max(down)) * 8 / (MBIT * 1e6)
            row = {
                "protocol": name,
                "epochs": a.epochs,
                "exchanges": exchanges,
                "train_s_measured": round(man["timings"]["train_s"], 2),
                "wan_model_s": round(model, 2),
                "bytes_up_wire": rt["measured"]["bytes_train_up"],
                "bytes_down_wire": rt["measured"]["bytes_train_down"],
                "measured_equals_accounted": rt["measured_equals_accounted"],
                "messages": rt["measured"]["messages"],
                "note": "",
            }
            rows.append(row)
            print(row, flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fields = ["protocol", "epochs", "exchanges", "train_s_measured", "wan_model_s", "bytes_up_wire", "bytes_down_wire",
              "measured_equals_accounted", "messages", "note"]  # fmt: skip
    with a.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerows(rows)
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
