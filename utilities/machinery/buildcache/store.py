"""The build cache's on-disk store: checksummed entries, written atomically, a corrupt one deleted and rebuilt.

Entries live under ``root/v<FORMAT>/<key[:2]>/<key>``: a header (magic, length, SHA-256), then zlib data. Keys are
SHA-256 digests of everything that determines an entry (:func:`make_key`).

A process about to generate an entry *claims* it first (:meth:`DiskCache.claim`: a file made with ``O_EXCL`` beside
it), so that parallel prebuild jobs that need the same libmathdx code generate it once: the others wait for the
entry. A claim whose process is gone, or older than :data:`CLAIM_STALE_S`, is taken over.

Each entry of libmathdx's LTO-IR has a small companion, its *digest* (:func:`digest_key`, :class:`CodeDigest`): the
LTO-IR's ISA version and SHA-256. A linked kernel's key needs only that digest, so a cache that holds the kernels'
cubins and the digests, without the LTO-IR, still serves every kernel it holds (a launch-only bundle).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import threading
import time
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = 1
_MAGIC = b"TCFC"
CLAIM_STALE_S = 1800.0  # a claim this old is taken over: longer than any one piece of code takes to generate


def default_cache_dir() -> Path | None:
    """The cache folder, or None when ``COURSE_BUILD_CACHE=off``."""
    env = os.environ.get("COURSE_BUILD_CACHE")
    if env:
        return None if env.lower() in {"off", "0", "false", "no"} else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tcfusion-course"


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    stored: int = 0
    shared: int = 0  # code another process was generating: waited for, not generated twice
    seconds_generating: float = 0.0

    def summary(self) -> str:
        text = f"{self.hits} from cache, {self.misses - self.shared} generated ({self.seconds_generating:.1f} s)"
        text += f", {self.shared} from another process" if self.shared else ""
        return text + (f", {self.corrupt} corrupt entries rebuilt" if self.corrupt else "")


class DiskCache:
    """Blobs under ``root/v<FORMAT>/<key[:2]>/<key>``: a header (magic, length, SHA-256), then zlib data."""

    def __init__(self, root: Path | str):
        self.root = Path(root) / f"v{FORMAT}"
        self.stats = CacheStats()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str, *, count: bool = True) -> bytes | None:
        """The entry's payload, or None; ``count=False`` leaves the hit and miss counts alone."""
        path = self._path(key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            self.stats.misses += count
            return None
        payload = _unpack(blob)
        if payload is None:
            self.stats.corrupt += 1
            self.stats.misses += count
            warnings.warn(f"build cache: corrupt entry {path} removed; it is being rebuilt", stacklevel=2)
            path.unlink(missing_ok=True)
            return None
        self.stats.hits += count
        try:
            os.utime(path)  # read now: an export of this run's entries keeps it (bundle.export's ``fresh_since``)
        except OSError:
            pass  # a read-only cache serves all the same
        return payload

    def remove(self, key: str) -> None:
        """Drop entry ``key`` if it is there (the next build makes it again)."""
        self._path(key).unlink(missing_ok=True)

    def put(self, key: str, payload: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(_pack(payload))
        os.replace(tmp, path)  # atomic: readers see the old entry or the whole new one
        self.stats.stored += 1

    def _claim_path(self, key: str) -> Path:
        return self.root / key[:2] / f".{key}.claim"  # a dot: never read as an entry, nor bundled

    def claim(self, key: str) -> bool:
        """Claim the making of entry ``key`` for this process: False when another live process holds it."""
        path = self._claim_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._stale(path):
                    return False
                path.unlink(missing_ok=True)  # its process is gone: take it over
                continue
            with os.fdopen(fd, "w") as claim:
                claim.write(f"{os.getpid()} {socket.gethostname()}")
            return True
        return False

    def claimed(self, key: str) -> bool:
        """Whether another process holds a live claim on ``key``."""
        path = self._claim_path(key)
        return path.exists() and not self._stale(path)

    def release(self, key: str) -> None:
        self._claim_path(key).unlink(missing_ok=True)

    @staticmethod
    def _stale(path: Path) -> bool:
        try:
            pid, host = path.read_text().split()
            age = time.time() - path.stat().st_mtime
        except (OSError, ValueError):
            return False  # being written, or just removed: not stale
        if age > CLAIM_STALE_S:
            return True
        if host != socket.gethostname():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, ValueError):
            return False
        return False

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file()) if self.root.exists() else 0


def _pack(payload: bytes) -> bytes:
    data = zlib.compress(payload, 1)
    return _MAGIC + len(data).to_bytes(8, "little") + hashlib.sha256(data).digest() + data


def _unpack(blob: bytes) -> bytes | None:
    if len(blob) < 44 or blob[:4] != _MAGIC:
        return None
    size = int.from_bytes(blob[4:12], "little")
    data = blob[44:]
    if len(data) != size or hashlib.sha256(data).digest() != blob[12:44]:
        return None
    try:
        return zlib.decompress(data)
    except zlib.error:
        return None


_DIGEST_MAGIC = b"TCFD"


@dataclass(frozen=True)
class CodeDigest:
    """What a linked kernel's key needs of one LTO-IR entry: its ISA version and the SHA-256 of its bytes."""

    isa: int
    sha256: str

    @classmethod
    def of(cls, isa: int, ltoir: bytes) -> CodeDigest:
        return cls(int(isa), hashlib.sha256(ltoir).hexdigest())

    def pack(self) -> bytes:
        return _DIGEST_MAGIC + self.isa.to_bytes(8, "little", signed=True) + bytes.fromhex(self.sha256)

    @classmethod
    def unpack(cls, payload: bytes | None) -> CodeDigest | None:
        if payload is None or len(payload) != 44 or not payload.startswith(_DIGEST_MAGIC):
            return None
        return cls(int.from_bytes(payload[4:12], "little", signed=True), payload[12:].hex())


def is_digest(payload: bytes) -> bool:
    return payload.startswith(_DIGEST_MAGIC) and len(payload) == 44


def digest_key(ltoir_key: str) -> str:
    """Where the :class:`CodeDigest` of the LTO-IR entry ``ltoir_key`` lives."""
    return hashlib.sha256(b"ltoir-digest:" + ltoir_key.encode()).hexdigest()


def make_key(kind: str, recipe: Any, environment: dict[str, str]) -> str:
    """SHA-256 of everything that determines an entry: its kind, its recipe and the code generators' versions."""
    text = json.dumps([FORMAT, kind, recipe, sorted(environment.items())], separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
