"""Getting raw files onto disk: local data dir, then the offline mirror, then the official source.

Layout: every dataset keeps its raw files under ``<data_root>/<name>/`` (``data/`` in the repository,
override with ``VFLBENCH_DATA``). A mirror directory (``VFLBENCH_DATA_MIRROR``) holds copies that can be
used without network; CI points it at ``../shared/data``. Files are verified by sha256 where the
published checksum is known, and every checksum is recorded in the run manifest.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import DataUnavailableError, VFLBenchError
from ...core.files import shareable_mkstemp

MIRROR_ENV = "VFLBENCH_DATA_MIRROR"
DATA_ENV = "VFLBENCH_DATA"


def data_root() -> Path:
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser()
    # the repository's data/ when running from a checkout, else ./data
    here = Path(__file__).resolve().parents[3]
    if (here / "pyproject.toml").exists():
        return here / "data"
    return Path.cwd() / "data"


def mirror_root() -> Path | None:
    env = os.environ.get(MIRROR_ENV)
    return Path(env).expanduser() if env else None


def sha256_file(path: Path, decompress_gz: bool = False) -> str:
    h = hashlib.sha256()
    opener = gzip.open if decompress_gz else open
    with opener(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class RawFile:
    """One raw file of a dataset.

    ``path`` is relative to the dataset directory. ``sha256`` is the published checksum of the file's
    content (of the uncompressed content when ``sha256_of_uncompressed``), or None when unknown.
    """

    path: str
    sha256: str | None = None
    sha256_of_uncompressed: bool = False

    def digest(self, path: Path) -> str:
        return sha256_file(path, decompress_gz=self.sha256_of_uncompressed and path.suffix == ".gz")

    def verify(self, path: Path, ds_dir: Path | None = None) -> tuple[str, str]:
        """sha256 of the file and the kind of check made: ``published`` (against the source's
        checksum), ``recorded`` (against the sha256 vflbench recorded the first time it used the
        file) or ``first-use`` (recorded now); ``... (unchanged since verified)`` when the file's size,
        times and inode are those of an earlier full verification (:class:`VerifiedDigests`: the bytes
        are not read again; ``VFLBENCH_VERIFY=full`` reads them every time). A file that cannot be
        read or does not match is moved aside as ``*.corrupt`` and a one-line error says how to restore it."""
        memo = VerifiedDigests(ds_dir or path.parent)
        if os.environ.get(VERIFY_ENV, "").lower() != "full":
            known = memo.get(self.path, path, self.sha256)
            if known is not None:
                return known
        try:
            got = self.digest(path)
        except (OSError, EOFError, zlib.error) as e:
            damaged(path, f"unreadable: {e or type(e).__name__}")
        got, kind = self._check(path, ds_dir, got)
        memo.put(self.path, path, got, kind)
        return got, kind

    def _check(self, path: Path, ds_dir: Path | None, got: str) -> tuple[str, str]:
        if self.sha256:
            if got != self.sha256:
                damaged(path, f"sha256 {got[:12]}... instead of the published {self.sha256[:12]}...")
            return got, "published"
        book = RecordedChecksums(ds_dir or path.parent)
        known = book.get(self.path)
        if known is None:
            book.put(self.path, got)
            return got, "first-use"
        if known != got:
            book.forget(self.path)  # the next copy is checked afresh
            damaged(path, f"sha256 {got[:12]}... instead of {known[:12]}... recorded when it was first used")
        return got, "recorded"


VERIFY_ENV = "VFLBENCH_VERIFY"


class VerifiedDigests:
    """sha256 of files that passed a full verification, keyed by what any change to a file changes:
    its size, modification and status-change times (ns) and inode (``.verified.json`` beside the
    files). A run of a dataset whose files are unchanged since they were verified skips re-reading
    them (180 MB for CIFAR-10 on every run); an edited, replaced or touched file is read again."""

    def __init__(self, ds_dir: Path):
        self.file = Path(ds_dir) / ".verified.json"

    @staticmethod
    def _stamp(path: Path) -> list[int]:
        st = path.stat()
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]

    def _read(self) -> dict[str, Any]:
        try:
            return json.loads(self.file.read_text())
        except (OSError, ValueError):
            return {}

    def get(self, rel: str, path: Path, published: str | None) -> tuple[str, str] | None:
        entry = self._read().get(rel)
        try:
            if not entry or entry.get("stamp") != self._stamp(path) or (published and entry.get("sha256") != published):
                return None
        except OSError:
            return None
        return entry["sha256"], f"{entry['kind']} (unchanged since verified)"

    def put(self, rel: str, path: Path, sha: str, kind: str) -> None:
        try:
            base = (
                "recorded" if kind == "first-use" else kind.split(" (")[0]
            )  # a later run checks against the recorded sha256
            book = {**self._read(), rel: {"sha256": sha, "kind": base, "stamp": self._stamp(path)}}
            tmp = self.file.with_name(f".verified.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(book, indent=1, sort_keys=True))
            os.replace(tmp, self.file)
        except OSError:  # a read-only data folder only costs the next run a full check
            pass


class RecordedChecksums:
    """sha256 of files without a published checksum, recorded on first use (``.checksums.json``)."""

    def __init__(self, ds_dir: Path):
        self.file = Path(ds_dir) / ".checksums.json"

    def _read(self) -> dict[str, str]:
        try:
            return json.loads(self.file.read_text())
        except (OSError, ValueError):
            return {}

    def get(self, rel: str) -> str | None:
        return self._read().get(rel)

    def put(self, rel: str, sha: str) -> None:
        book = {**self._read(), rel: sha}
        tmp = self.file.with_name(f".checksums.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(book, indent=1, sort_keys=True))
        os.replace(tmp, self.file)

    def forget(self, rel: str) -> None:
        book = self._read()
        if book.pop(rel, None) is not None:
            tmp = self.file.with_name(f".checksums.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(book, indent=1, sort_keys=True))
            os.replace(tmp, self.file)


def damaged(path: Path, reason: str, name: str | None = None, ds_dir: Path | None = None) -> None:
    """Move a damaged local copy aside (``*.corrupt``) so the next run restores it, and say so.
    ``ds_dir``: forget the sha256 recorded for it there, so a fresh copy is checked afresh."""
    path = Path(path)
    if ds_dir is not None:
        try:
            RecordedChecksums(ds_dir).forget(str(path.relative_to(ds_dir)))
        except ValueError:
            pass
    aside = path.with_name(path.name + ".corrupt")
    moved = ""
    try:
        os.replace(path, aside)
        moved = (
            f" It was moved aside to {aside.name}; run again to restore it from the mirror ({MIRROR_ENV}) or with "
            f"`vflbench data fetch{' ' + name if name else ''}` online."
        )
    except OSError:
        moved = f" Delete it and run `vflbench data fetch{' ' + name if name else ''}` to restore it."
    raise VFLBenchError(f"Data file {path} is damaged ({reason}).{moved}")


@dataclass(frozen=True)
class Variant:
    """A set of raw files that together make the dataset readable (e.g. official xls, or mirror CSV).

    ``mirror_dir`` is the sub-directory of the mirror that holds these files (same relative paths).
    ``urls`` are the official downloads: one per file, or a single archive (zip, or tar/tar.gz by its name) whose
    members end with the files' relative paths (``extract_zip``).
    """

    name: str
    files: tuple[RawFile, ...]
    mirror_dir: str | None = None
    urls: tuple[str, ...] = ()  # one per file, or one zip archive when extract_zip
    extract_zip: bool = False


def _atomic_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = shareable_mkstemp(dst.parent, ".tmp-" + dst.name)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_verified_cache(path: Path, source_sha256: str, what: str) -> tuple[Any, dict[str, str]]:
    """A derived cache (``.npy``) is data: it is used only when its sidecar (``<path>.sha256``) names
    the sha256 of the source it was parsed from *and* of its own bytes, and both match. Anything else
    (no sidecar, another source, edited or damaged bytes) is rebuilt with a warning, never trained
    on. Returns (array or None, what the manifest records about the cache)."""
    import warnings

    import numpy as np

    info = {"cache": path.name, "source_sha256": source_sha256}
    side = path.with_name(path.name + ".sha256")
    if not path.exists():
        return None, {**info, "status": "built"}
    why = None
    try:
        meta = json.loads(side.read_text())
        actual = sha256_file(path)
        if meta.get("source_sha256") != source_sha256:
            why = "it was parsed from another version of the source file"
        elif meta.get("sha256") != actual:
            why = "its bytes do not match the checksum written with it (edited or damaged)"
        else:
            if path.suffix == ".npz":
                with np.load(path, allow_pickle=False) as z:
                    arr = {k: z[k] for k in z.files}
            else:
                arr = np.load(path, allow_pickle=False)
            return arr, {**info, "sha256": actual, "status": "verified"}
    except FileNotFoundError:
        why = "it has no checksum file"
    except (OSError, ValueError) as e:
        why = f"it cannot be read ({type(e).__name__})"
    warnings.warn(f"{what}: the parsed cache {path.name} is not used and is rebuilt: {why}.", stacklevel=2)
    path.unlink(missing_ok=True)
    side.unlink(missing_ok=True)
    return None, {**info, "status": f"rebuilt ({why})"}


def write_verified_cache(path: Path, arr: Any, source_sha256: str) -> dict[str, str]:
    """Write ``arr`` (an array, or a dict of arrays for ``.npz``) as a cache with its sidecar of
    checksums (see :func:`load_verified_cache`)."""
    import io

    import numpy as np

    buf = io.BytesIO()
    if path.suffix == ".npz":
        np.savez(buf, **arr)
    else:
        np.save(buf, arr)
    data = buf.getvalue()
    own = hashlib.sha256(data).hexdigest()
    write_cache(path, lambda f: f.write(data))
    write_cache(
        path.with_name(path.name + ".sha256"),
        lambda f: f.write(json.dumps({"source_sha256": source_sha256, "sha256": own}).encode()),
    )
    return {"cache": path.name, "source_sha256": source_sha256, "sha256": own}


def write_cache(path: Path, write: Callable[[Any], None]) -> None:
    """Write a derived cache (parsed arrays) under a name unique to this process, then move it into
    place. Parallel first runs each write their own file and the last rename wins with identical
    content; a cache that cannot be written only costs the next run a re-parse, never this one."""
    try:
        fd, tmp = shareable_mkstemp(path.parent, ".tmp-" + path.name)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _download(url: str, dst: Path, timeout: float = 30.0) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = shareable_mkstemp(dst.parent, ".dl-" + dst.name)
    os.close(fd)
    try:
        req = urllib.request.Request(url, headers={"User-Agent": "vflbench"})
        with urllib.request.urlopen(req, timeout=timeout) as r, open(tmp, "wb") as f:
            shutil.copyfileobj(r, f)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class fetch_lock:  # noqa: N801 - used as a context manager
    """Serialise fetching one dataset across processes (``flock`` on ``<ds_dir>/.fetch.lock``), so
    two runs or sweep workers never write the same files at once."""

    def __init__(self, ds_dir: Path):
        self.path = Path(ds_dir) / ".fetch.lock"
        self.fd: int | None = None

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def gunzip_atomic(src: Path, dst: Path) -> None:
    """Decompress ``src`` to ``dst`` through a unique temporary file."""
    fd, tmp = shareable_mkstemp(dst.parent, ".tmp-" + dst.name)
    try:
        with gzip.open(src, "rb") as fin, os.fdopen(fd, "wb") as fout:
            shutil.copyfileobj(fin, fout)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def variant_present(ds_dir: Path, variant: Variant) -> bool:
    return all((ds_dir / f.path).exists() for f in variant.files)


def variant_in_mirror(name: str, variant: Variant) -> Path | None:
    mirror = mirror_root()
    if mirror is None or variant.mirror_dir is None:
        return None
    src = mirror / variant.mirror_dir
    if all((src / f.path).exists() for f in variant.files):
        return src
    return None


def unavailable_message(
    name: str, what: str = "", ds_dir: Path | None = None, variants: tuple[Variant, ...] = ()
) -> str:
    """Say what is missing, where it was looked for, and how to supply it."""
    files = ", ".join(f.path for f in variants[0].files) if variants else "its raw files"
    mirror = mirror_root()
    looked = f"not in {ds_dir}" if ds_dir is not None else "not on disk"
    subdirs = sorted({v.mirror_dir for v in variants if v.mirror_dir})
    looked += (
        f", not in the mirror {mirror}/{'|'.join(subdirs) or name}"
        if mirror is not None
        else f", and {MIRROR_ENV} is not set"
    )
    urls = [u for v in variants for u in v.urls]
    manual = f" download {urls[0]} by hand into {ds_dir or 'the data folder'}," if urls else ""
    return (
        f"Dataset '{name}' is missing ({files}): {looked}{what}. To supply it:{manual} or set {MIRROR_ENV} to a folder "
        f"holding {'/'.join(subdirs) or name}/ with those files (e.g. {MIRROR_ENV}=../shared/data), or run `vflbench "
        f"data fetch {name}` "
        f"on a machine with internet access."
    )


def ensure_variant(
    name: str, ds_dir: Path, variants: tuple[Variant, ...], download: bool = True
) -> tuple[Variant, dict[str, str]]:
    """Make one variant's files present under ``ds_dir``; return it with the files' sha256.

    Order: a variant already on disk; a variant in the mirror (copied); the first variant with a URL
    (downloaded, when ``download``). Every file is verified against its known checksum. Holds the
    dataset's fetch lock throughout.
    """
    with fetch_lock(ds_dir):
        return _ensure_variant(name, ds_dir, variants, download)


def _ensure_variant(
    name: str, ds_dir: Path, variants: tuple[Variant, ...], download: bool
) -> tuple[Variant, dict[str, str]]:
    chosen = next((v for v in variants if variant_present(ds_dir, v)), None)
    if chosen is None:
        for v in variants:
            src = variant_in_mirror(name, v)
            if src is not None:
                for f in v.files:
                    _atomic_copy(src / f.path, ds_dir / f.path)
                chosen = v
                break
    if chosen is None and download:
        errors = []
        for v in variants:
            if not v.urls:
                continue
            try:
                _fetch_url_variant(ds_dir, v)
                chosen = v
                break
            except OSError as e:  # URLError is an OSError
                errors.append(f"{v.urls[0]}: {e}")
        if chosen is None:
            raise DataUnavailableError(
                unavailable_message(name, "; the download failed (" + "; ".join(errors) + ")", ds_dir, variants)
            )
    if chosen is None:
        raise DataUnavailableError(unavailable_message(name, "", ds_dir, variants))
    sums, kinds = {}, {}
    for f in chosen.files:
        sums[f.path], kinds[f.path] = f.verify(ds_dir / f.path, ds_dir)
    LAST_CHECKS[name] = kinds
    return chosen, sums


LAST_CHECKS: dict[str, dict[str, str]] = {}  # dataset -> file -> kind of check made by the last fetch


def _archive(path: Path):
    """``(names, open_member)`` of a zip or tar(.gz) archive, and the context that closes it. Members are streamed:
    a 4 GB archive is never held whole."""
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        import tarfile

        tar = tarfile.open(path)
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        return list(members), lambda name: tar.extractfile(members[name]), tar
    import zipfile

    z = zipfile.ZipFile(path)
    return z.namelist(), z.open, z


def _fetch_url_variant(ds_dir: Path, v: Variant) -> None:
    if v.extract_zip:
        archive = ds_dir / ("download-" + Path(v.urls[0]).name.replace("%20", "_"))
        if not archive.exists():
            _download(v.urls[0], archive)
        names, open_member, handle = _archive(archive)
        with handle:
            for f in v.files:
                member = next((n for n in names if n.endswith("/" + f.path) or n == f.path), None)
                if member is None:
                    raise VFLBenchError(
                        f"Downloaded archive {archive.name} has no member {f.path}; the official layout changed?"
                    )
                target = ds_dir / f.path
                target.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = shareable_mkstemp(target.parent, ".tmp-" + target.name)
                with open_member(member) as src, os.fdopen(fd, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
                os.replace(tmp, target)
    else:
        for url, f in zip(v.urls, v.files, strict=True):
            _download(url, ds_dir / f.path)
