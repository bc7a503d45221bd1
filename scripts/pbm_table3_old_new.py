"""Table 3 before and after a change, row by row: epochs to the target (per seed and mean), the
test AUPRC, and the epsilon columns each version reports.

    python scripts/pbm_table3_old_new.py OLD_FOLDER NEW_FOLDER
    (e.g. OLD_FOLDER from `git worktree add /tmp/old d966872`: /tmp/old/results/pbm/table3)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from vflbench.results.artefacts.pbm import _pbm_ref, pbm_aggregate  # noqa: E402
from vflbench.results.report import load_reference, load_results  # noqa: E402


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    old, new = (_pbm_ref(pbm_aggregate(load_results(p)), load_reference("pbm-table3")) for p in sys.argv[1:])
    key = ["mechanism", "b", "beta"]
    m = old.merge(new, on=key, suffixes=("_old", "_new"))
    print(
        "| b | β | paper epochs | epochs old (seeds) | epochs new (seeds) | AUPRC old | AUPRC new | ε old (paper "
        "mode, c0 = 8, 100 ep.) | "
        "ε new: certified record-level at target | at 100 epochs | within max(2 sd, 2) old / new |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in m.itertuples():
        b = "NPQ" if r.mechanism == "npq" else str(int(float(r.b)))
        beta = "–" if r.mechanism == "npq" else f"{float(r.beta):g}"
        fmt = lambda v: "∞" if not np.isfinite(v) else f"{v:.4g}"  # noqa: E731
        pe = "∞" if not np.isfinite(r.paper_epochs_old) else f"{r.paper_epochs_old:g}"
        print(
            f"| {b} | {beta} | {pe} | {r.epochs_mean_old:.1f} ({r.epochs_seeds_old}) | {r.epochs_mean_new:.1f} "
            f"({r.epochs_seeds_new}) | "
            f"{r.test_mean_old:.1f} | {r.test_mean_new:.1f} | {fmt(r.eps_paper_run_old)} | {fmt(r.eps_target_new)} | "
            f"{fmt(r.eps_run_new)} | "
            f"{'yes' if r.within_tol_old else 'no'} / {'yes' if r.within_tol_new else 'no'} |"
        )
    print(
        f"\nwithin max(2 sd, 2) epochs of the paper: old {int(old['within_tol'].astype(bool).sum())}/{len(old)}, "
        f"new {int(new['within_tol'].astype(bool).sum())}/{len(new)}; agree on reaching: old "
        f"{int(old['agree_reach'].astype(bool).sum())}/{len(old)}, "
        f"new {int(new['agree_reach'].astype(bool).sum())}/{len(new)}"
    )


if __name__ == "__main__":
    main()
