"""Writing files so that a reader never sees half of one: a temporary file beside the target, then
an atomic rename; temporary files get the umask's mode, so results and data stay shareable."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = shareable_mkstemp(path.parent, f".{path.name}.")
    except OSError as e:  # name the file the user asked for, not the temporary one beside it
        raise type(e)(e.errno, e.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def shareable_mkstemp(folder: Path, prefix: str) -> tuple[int, str]:
    """A unique temporary file with the umask's mode (mkstemp's is 0600; results and data files
    are meant to be shared)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)
    return fd, tmp
