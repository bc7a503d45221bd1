"""Fresh ``vflbench run`` processes from the working tree or from a git revision, for side-by-side timings.

``worktree(rev)`` checks a revision out in a temporary git worktree (removed afterwards); ``cli_run(tree, args,
out)`` runs ``python -m vflbench run ARGS --out OUT`` with ``tree`` first on the import path, as a user starts a
run, and returns its manifest and a digest of its ``results.csv`` (two trees that compute the same numbers
write the same file, timing columns aside: they are not in ``results.csv``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def worktree(rev: str):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev],
                       check=True, capture_output=True)  # fmt: skip
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], capture_output=True)


def cli_run(tree: Path, args: list[str], out: Path) -> tuple[dict, str]:
    """The manifest and the ``results.csv`` digest of one ``vflbench run`` from ``tree`` (a fresh process)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.setdefault("VFLBENCH_DATA_MIRROR", str(ROOT.parent / "shared" / "data"))
    cmd = [sys.executable, "-m", "vflbench", "run", *args, "--out", str(out)]
    got = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if got.returncode:
        raise SystemExit(f"{' '.join(cmd)} (in {tree}) failed:\n{got.stderr[-2000:]}")
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return manifest, hashlib.sha256((run_dir / "results.csv").read_bytes()).hexdigest()[:12]
