"""Finds, downloads and verifies dataset files.

Where a file comes from, in order:

1. the data directory the user names (``--data-dir`` or ``AMP_SUITE_DATA``);
2. the copy shipped inside the package, for the few small files amp-suite
   ships (MNIST's t10k images and labels, see ``datasets/data/``);
3. the per-user cache (``$AMP_SUITE_CACHE``, else ``$XDG_CACHE_HOME/amp-suite``,
   else ``~/.cache/amp-suite``), under ``datasets/NAME/``;
4. a download into that cache: first from ``$AMP_SUITE_MIRROR/NAME/FILE`` when
   set, then from the official source and its well-known mirrors.

Every file is checked against its known size and SHA-256 before use.  A
download is streamed into a temporary file beside its target, verified, and
only then renamed into place, so the cache never holds a partial file.  A
file that does not match is never used: the error names it, its expected
checksum and the fix.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DATA_DIR_ENV = "AMP_SUITE_DATA"
CACHE_ENV = "AMP_SUITE_CACHE"
MIRROR_ENV = "AMP_SUITE_MIRROR"
DOWNLOAD_TIMEOUT_S = 60
CHUNK = 1 << 20
# A download slower than this on average (after the grace period) is abandoned.
MIN_RATE_BYTES_S = 20_000
MIN_RATE_GRACE_S = 30.0
# Every download ends by this many seconds plus the time its size takes at the minimum rate.
DOWNLOAD_BASE_DEADLINE_S = 120.0


class DatasetError(Exception):
    """A dataset file is missing, unreachable or does not match its checksum."""


class ChecksumMismatch(DatasetError):
    """A file exists but cannot be the official one (corrupt, truncated, different, unreadable, a directory)."""


@dataclass(frozen=True)
class DatasetFile:
    """One official file: its name, size in bytes and SHA-256."""

    name: str
    size: int
    sha256: str


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "amp-suite"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: Path, spec: DatasetFile) -> None:
    """Raise :class:`ChecksumMismatch` unless ``path`` is exactly the official file."""
    if not path.is_file():
        raise ChecksumMismatch(f"{path} is not a regular file (a directory?); put the official {spec.name} there, "
                               "or remove it to download the file")
    try:
        _verify_readable(path, spec)
    except OSError as exc:
        raise ChecksumMismatch(f"cannot read {path}: {exc.strerror or exc}; fix its permissions or remove it "
                               "to download the file again") from None


def _verify_readable(path: Path, spec: DatasetFile) -> None:
    size = path.stat().st_size
    if size != spec.size:
        raise ChecksumMismatch(
            f"{path}: {size} bytes, expected {spec.size} (sha256 {spec.sha256}); the file is truncated or "
            f"not the official {spec.name}: delete it and run again to download it, or replace it with the "
            "official file"
        )
    actual = sha256_of(path)
    if actual != spec.sha256:
        raise ChecksumMismatch(
            f"{path}: sha256 {actual} does not match the expected {spec.sha256}; the file is corrupt or "
            f"not the official {spec.name}: delete it and run again to download it, or replace it with the "
            "official file"
        )


def download_deadline_s(size: int) -> float:
    """Seconds a download of ``size`` bytes may take in all."""
    return DOWNLOAD_BASE_DEADLINE_S + size / MIN_RATE_BYTES_S


def check_pace(url: str, received: int, expected: int, elapsed: float, allowed: float) -> None:
    """Raise :class:`DatasetError` when a download ran past its deadline or below the minimum rate."""
    if elapsed > allowed:
        raise DatasetError(f"{url}: no complete file after {elapsed:.0f} s ({received} of {expected} bytes); "
                           "the mirror is too slow, the partial file was removed")
    if elapsed > MIN_RATE_GRACE_S and received / elapsed < MIN_RATE_BYTES_S:
        raise DatasetError(f"{url}: {received / elapsed:.0f} bytes/s, below the minimum of {MIN_RATE_BYTES_S} "
                           f"({received} of {expected} bytes in {elapsed:.0f} s); the partial file was removed")


def check_data_dir(text: str | os.PathLike[str]) -> None:
    """A one-line :class:`~amp_suite.errors.UsageError` for a data directory that cannot be looked up."""
    from amp_suite.errors import UsageError

    try:
        mode = os.stat(text).st_mode
    except FileNotFoundError:  # else the packaged or cached copy would stand in, unsaid
        raise UsageError(f"the data directory {str(text)!r} does not exist; create it and put the dataset's "
                         "files there, or leave out --data-dir (and $AMP_SUITE_DATA) to use the packaged or "
                         "cached copy") from None
    except (OSError, ValueError) as exc:  # a link loop, an over-long name, an unreadable parent
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot use the data directory {str(text)!r}: {reason}") from None
    if not stat.S_ISDIR(mode):  # a file there would be passed over in silence, and the data looked for elsewhere
        from amp_suite.safe_files import describe_mode

        raise UsageError(f"the data directory {str(text)!r} is {describe_mode(mode)}, not a directory")


def download(url: str, target: Path, spec: DatasetFile) -> None:
    """Stream ``url`` into ``target`` atomically; raise :class:`DatasetError` if it is not ``spec``."""
    # Imported here, not with the module: every cell worker loads this module, few download anything, and
    # urllib.request (http.client, email) took 40-55 ms of each worker's start.
    import urllib.request

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        size = 0
        started = time.monotonic()
        deadline = started + download_deadline_s(spec.size)
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            while True:
                chunk = response.read1(CHUNK)  # what has arrived, so a trickle is checked byte by byte
                if not chunk:
                    break
                check_pace(url, size + len(chunk), spec.size, time.monotonic() - started,
                           deadline - started)
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
                if size > spec.size:
                    raise DatasetError(f"{url}: more than the expected {spec.size} bytes")
            out.flush()
            os.fsync(out.fileno())
        if size != spec.size:
            raise DatasetError(f"{url}: got {size} bytes, expected {spec.size} (truncated download)")
        if digest.hexdigest() != spec.sha256:
            raise DatasetError(f"{url}: sha256 {digest.hexdigest()} does not match the expected {spec.sha256}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def locate(dataset: str, spec: DatasetFile, urls: list[str], *, data_dir: str | Path | None = None,
           allow_download: bool = True, bundled: Path | None = None) -> Path:
    """The verified path of ``spec``: from the data directory, the package, the cache, or a download.

    ``bundled`` is the file's copy inside the package, when amp-suite ships it.
    """
    data_dir = data_dir or os.environ.get(DATA_DIR_ENV) or None
    if data_dir is not None:
        candidate = Path(data_dir) / spec.name
        if candidate.exists():
            verify(candidate, spec)
            return candidate
    if bundled is not None and bundled.exists():
        verify(bundled, spec)  # a damaged installation is named, never used
        return bundled
    cached = cache_root() / "datasets" / dataset / spec.name
    if cached.exists():
        verify(cached, spec)
        return cached
    where = f"{Path(data_dir) / spec.name} or {cached}" if data_dir else str(cached)
    if not allow_download:
        raise DatasetError(f"{spec.name} of {dataset} is not in {where} and downloads are off: put the file "
                           "there, or allow downloads (--download)")
    mirror = os.environ.get(MIRROR_ENV)
    tried = []
    for url in ([f"{mirror.rstrip('/')}/{dataset}/{spec.name}"] if mirror else []) + urls:
        try:
            download(url, cached, spec)
            return cached
        except (DatasetError, OSError) as exc:  # urllib's URLError is an OSError
            tried.append(f"{url} ({exc})")
    raise DatasetError(
        f"{spec.name} of {dataset} is not in {where} and could not be downloaded: tried "
        + "; ".join(tried)
        + f". Put the official file in a directory and pass --data-dir (or set {DATA_DIR_ENV})"
    )
