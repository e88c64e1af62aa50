"""A build-cache bundle: the whole cache in one file (or parts of a bounded size), to copy to a fresh machine.

An instructor prebuilds once, exports, and imports the bundle on every machine with the same GPU architecture and
the same code generators (``./course prebuild --export FILE`` / ``--import FILE``). The bundle is

- a header per file: magic, part number, part count, and the SHA-256 of the whole compressed stream;
- the stream: a tar of ``manifest.json`` (format, compute capability, the code generators' versions, whether it is
  launch-only, every entry's key and the SHA-256 of its payload) and each entry's payload, xz-compressed, but for
  libmathdx's LTO-IR, which goes as it is (zlib, bz2 and xz leave it at its size: ``instructor-notes/machinery.md``).
  ``--compare`` prints the alternatives on a real cache.

By default a bundle is *launch-only*: what a launch of a kernel the cache holds reads (the cubins, the trait values,
and the LTO-IR's digests, :class:`~.store.CodeDigest`), without the LTO-IR, which only a new link needs and which is
nine tenths of the cache. A kernel that is not in the bundle then generates its code as if there were no bundle;
``with_ltoir=True`` (``--export ... --with-ltoir``) carries the LTO-IR too, so that such a kernel is only linked.

An import checks the header of every part, the stream's digest, the manifest against what the caller expects
(this machine's compute capability and code generators) and every payload's digest before it writes anything:
a corrupt, partial or foreign bundle is refused whole, with the reason.
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .store import FORMAT, CodeDigest, DiskCache, _unpack, digest_key, is_digest

BUNDLE_FORMAT = 1
MAGIC = b"TCFBNDL1"
HEADER = len(MAGIC) + 2 + 2 + 32  # magic, part number, part count, SHA-256 of the stream
MANIFEST = "manifest.json"
# xz level 6, not 9 extreme: nearly as small, five times faster (instructor-notes/machinery.md has the figures)
XZ_PRESET = 6


class BundleError(ValueError):
    """A bundle that cannot be imported here; the message says why and what to do."""


@dataclass
class Exported:
    parts: list[Path]
    entries: int
    cache_bytes: int  # the entries as the cache stores them
    payload_bytes: int  # their payloads, uncompressed
    bundle_bytes: int  # what was written, headers included
    left_out: tuple[int, int] = (0, 0)  # LTO-IR entries a launch-only bundle left out, and their bytes in the cache
    stale: tuple[int, int] = (0, 0)  # cubins no process touched since ``fresh_since``, left out, and their bytes

    def summary(self) -> str:
        mib = 2**20
        where = ", ".join(p.name for p in self.parts)
        count, size = self.left_out
        kept = f"launch-only, {count} LTO-IR entries ({size / mib:.1f} MiB) left out; " if count else ""
        old, old_size = self.stale
        kept += f"{old} stale cubins ({old_size / mib:.1f} MiB) left out; " if old else ""
        return (
            f"bundle: {kept}{self.entries} entries, {self.cache_bytes / mib:.1f} MiB in the cache "
            f"({self.payload_bytes / mib:.1f} MiB uncompressed) -> {self.bundle_bytes / mib:.1f} MiB in "
            f"{len(self.parts)} file(s): {where}"
        )


def entries(cache: DiskCache) -> Iterator[tuple[str, bytes]]:
    """(key, payload) of every sound entry of the cache, by key; corrupt entries are skipped."""
    if not cache.root.exists():
        return
    for path in sorted(p for p in cache.root.glob("*/*") if p.is_file() and not p.name.startswith(".")):
        payload = _unpack(path.read_bytes())
        if payload is not None:
            yield path.name, payload


def _pack_entry(payload: bytes) -> tuple[str, bytes]:
    """(suffix, data): LTO-IR as it is, anything else xz-compressed."""
    if kind_of(payload).startswith("LTO-IR"):
        return ".raw", payload
    return ".xz", lzma.compress(payload, preset=XZ_PRESET)


def launch_entries(cache: DiskCache) -> tuple[list[tuple[str, bytes]], tuple[int, int]]:
    """What a launch reads: every entry but the LTO-IR, with each LTO-IR entry's digest (made here if the cache,
    filled before digests existed, lacks it); and the LTO-IR entries left out, counted with their bytes."""
    kept: dict[str, bytes] = {}
    count = size = 0
    found = dict(entries(cache))
    for key, payload in found.items():
        # LTO-IR: an entry with a digest beside it (the interposer stores both), or one that looks like it (an
        # entry stored before digests existed)
        if digest_key(key) not in found and not kind_of(payload).startswith("LTO-IR"):
            kept[key] = payload
            continue
        count, size = count + 1, size + _stored_size(cache, key)
        digest = CodeDigest.of(int.from_bytes(payload[:8], "little", signed=True), payload[8:])
        kept.setdefault(digest_key(key), digest.pack())
    return sorted(kept.items()), (count, size)


def _stored_size(cache: DiskCache, key: str) -> int:
    return (cache.root / key[:2] / key).stat().st_size


def stale(cache: DiskCache, found: list[tuple[str, bytes]], since: float) -> set[str]:
    """The cubins of ``found`` no process read or wrote since ``since`` (a time, seconds since the epoch): kernels
    of code changed since, which nothing builds any more. Every other kind of entry stays (each is small)."""
    old = set()
    for key, payload in found:
        path = cache.root / key[:2] / key
        if kind_of(payload) == CUBINS and path.exists() and path.stat().st_mtime < since:
            old.add(key)
    return old


def _stream(
    cache: DiskCache, manifest: dict[str, Any], with_ltoir: bool, fresh_since: float | None = None
) -> tuple[bytes, int, int, int, tuple, tuple]:
    """The bundle's stream, the number of entries, the cache's bytes, the payloads' bytes, what was left out and the
    stale cubins left out (count, bytes)."""
    found, left_out = (list(entries(cache)), (0, 0)) if with_ltoir else launch_entries(cache)
    dropped = stale(cache, found, fresh_since) if fresh_since is not None else set()
    old = (len(dropped), sum(_stored_size(cache, key) for key in dropped))
    found = [(key, payload) for key, payload in found if key not in dropped]
    manifest = {
        **manifest,
        "format": BUNDLE_FORMAT,
        "cache_format": FORMAT,
        "launch_only": not with_ltoir,
        "entries": {key: hashlib.sha256(payload).hexdigest() for key, payload in found},
    }
    members = [(MANIFEST, json.dumps(manifest, indent=1).encode())]
    for key, payload in found:
        suffix, data = _pack_entry(payload)
        members.append((key + suffix, data))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    cache_bytes = sum(_stored_size(cache, key) for key, _ in found if (cache.root / key[:2] / key).exists())
    return raw.getvalue(), len(found), cache_bytes, sum(len(p) for _, p in found), left_out, old


def part_paths(path: Path, count: int) -> list[Path]:
    """``FILE`` for one part, ``FILE.part1`` ... ``FILE.partN`` for several."""
    return [path] if count == 1 else [path.with_name(f"{path.name}.part{i}") for i in range(1, count + 1)]


def export(
    cache: DiskCache,
    path: Path | str,
    manifest: dict[str, Any],
    max_part_bytes: int | None = None,
    *,
    with_ltoir: bool = False,
    fresh_since: float | None = None,
) -> Exported:
    """Write the cache's entries to ``path`` (or ``path.part1``... of at most ``max_part_bytes`` each): what a
    launch reads, or everything with ``with_ltoir`` (the module docstring says when that is worth it). With
    ``fresh_since`` (the start of a prebuild of every job), the cubins no process touched since are left out."""
    path = Path(path)
    stream, count, cache_bytes, payload_bytes, left_out, old = _stream(cache, manifest, with_ltoir, fresh_since)
    if count == 0:
        raise BundleError(f"the build cache at {cache.root.parent} holds no kernels: run ./course prebuild first")
    room = len(stream) if not max_part_bytes else max_part_bytes - HEADER
    if room <= 0:
        raise BundleError(f"a part must hold more than its {HEADER}-byte header")
    chunks = [stream[i : i + room] for i in range(0, len(stream), room)]
    digest = hashlib.sha256(stream).digest()
    paths = part_paths(path, len(chunks))
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f"{path.name}.part*"):
        stale.unlink()  # parts of an earlier export would be read as this one's
    for number, (where, chunk) in enumerate(zip(paths, chunks, strict=True), start=1):
        header = MAGIC + number.to_bytes(2, "little") + len(chunks).to_bytes(2, "little") + digest
        where.write_bytes(header + chunk)
    return Exported(paths, count, cache_bytes, payload_bytes, sum(p.stat().st_size for p in paths), left_out, old)


def _read_parts(path: Path) -> bytes:
    """The stream from ``path`` (one file, or any of ``FILE.partN``), every part checked."""
    base = Path(str(path)[: str(path).rfind(".part")]) if ".part" in path.name else path
    first = path if path.exists() else base.with_name(f"{base.name}.part1")
    if not first.exists():
        raise BundleError(f"{path}: no such bundle")
    blob = first.read_bytes()
    if len(blob) < HEADER or not blob.startswith(MAGIC):
        raise BundleError(f"{first}: not a build-cache bundle (no bundle header)")
    count, digest = int.from_bytes(blob[10:12], "little"), blob[12:HEADER]
    paths = part_paths(base, count)
    chunks = []
    for number, where in enumerate(paths, start=1):
        if not where.exists():
            raise BundleError(f"partial bundle: {where.name} (part {number} of {count}) is missing")
        data = where.read_bytes() if where != first else blob
        if data[:HEADER] != MAGIC + number.to_bytes(2, "little") + count.to_bytes(2, "little") + digest:
            raise BundleError(f"{where.name} is not part {number} of {count} of this bundle")
        chunks.append(data[HEADER:])
    stream = b"".join(chunks)
    if hashlib.sha256(stream).digest() != digest:
        raise BundleError(f"corrupt bundle: the parts of {base.name} do not add up to what was exported")
    return stream


def read(path: Path | str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and the payloads of a bundle, every digest checked."""
    stream = _read_parts(Path(path))
    try:
        tar = tarfile.open(fileobj=io.BytesIO(stream), mode="r:")
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
        manifest = json.loads(members.pop(MANIFEST))
        files = {}
        for name, data in members.items():
            key, suffix = name.rsplit(".", 1)
            files[key] = lzma.decompress(data) if suffix == "xz" else data
    except (lzma.LZMAError, tarfile.TarError, EOFError, KeyError, ValueError, AttributeError) as exc:
        raise BundleError(f"corrupt bundle {path}: {type(exc).__name__}: {exc}") from None
    if manifest.get("format") != BUNDLE_FORMAT or manifest.get("cache_format") != FORMAT:
        raise BundleError(
            f"{path}: bundle format {manifest.get('format')} (cache format "
            f"{manifest.get('cache_format')}); this course reads {BUNDLE_FORMAT} ({FORMAT})"
        )
    listed = manifest.get("entries", {})
    if set(listed) != set(files):
        raise BundleError(f"partial bundle {path}: {len(set(listed) ^ set(files))} entries differ from its manifest")
    bad = [key for key, payload in files.items() if hashlib.sha256(payload).hexdigest() != listed[key]]
    if bad:
        raise BundleError(f"corrupt bundle {path}: {len(bad)} entries do not match their digests")
    return manifest, files


def mismatches(manifest: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """What differs between the bundle's manifest and this machine: one line each (empty when it fits)."""
    lines = []
    for field, want in expected.items():
        got = manifest.get(field)
        if isinstance(want, dict):
            got = got or {}
            lines += [
                f"{field} {name}: bundle {got.get(name)}, this machine {value}"
                for name, value in sorted(want.items())
                if got.get(name) != value
            ]
        elif got != want:
            lines.append(f"{field}: bundle {got}, this machine {want}")
    return lines


def import_(cache: DiskCache, path: Path | str, expected: dict[str, Any]) -> tuple[int, int]:
    """Check the bundle (see the module docstring) and write its entries into ``cache``: (written, already there).

    Raises :class:`BundleError` naming what differs (compute capability, a code generator's version) or what is
    wrong with the bundle; nothing is written then."""
    manifest, files = read(path)
    differ = mismatches(manifest, expected)
    if differ:
        raise BundleError(
            f"{path} was built for another GPU or stack; its kernels would not be used here:\n"
            + "\n".join(f"- {line}" for line in differ)
            + "\nBuild on this machine instead: ./course prebuild"
        )
    written = present = 0
    for key, payload in sorted(files.items()):
        if cache.get(key, count=False) == payload:
            present += 1
        else:
            cache.put(key, payload)
            written += 1
    return written, present


CUBINS = "cubins (linked kernels)"


def kind_of(payload: bytes) -> str:
    """What an entry holds, from its first bytes: libmathdx's LTO-IR or its digest, a linked cubin (ELF), or a small
    value."""
    if is_digest(payload):
        return "digests of LTO-IR (what a launch-only bundle keeps of it)"
    if payload[8:12] == b"\xedCN\x7f":  # an ISA number (8 bytes), then NVVM's LTO-IR container
        return "LTO-IR (libmathdx device functions)"
    named = 4 + int.from_bytes(payload[:4], "little")  # a kernel's cubin follows the entry name it was linked with
    if payload.startswith(b"\x7fELF") or payload[named : named + 4] == b"\x7fELF":
        return CUBINS
    return "traits and other small values"


def breakdown(cache: DiskCache) -> dict[str, tuple[int, int]]:
    """Entries and bytes (as stored) of each kind (:func:`kind_of`)."""
    sizes: dict[str, tuple[int, int]] = {}
    for key, payload in entries(cache):
        count, size = sizes.get(kind_of(payload), (0, 0))
        sizes[kind_of(payload)] = (count + 1, size + (cache.root / key[:2] / key).stat().st_size)
    return sizes


def compression_table(cache: DiskCache, sample_bytes: int = 64 * 2**20) -> list[tuple[str, int]]:
    """Bytes of the cache's entries under other compressions, to choose the bundle's (smallest last): on the
    first entries by key up to ``sample_bytes`` of payload (xz runs at about a megabyte a second)."""
    import bz2
    import zlib

    found: list[tuple[str, bytes]] = []
    for key, payload in entries(cache):
        if found and sum(len(p) for _, p in found) + len(payload) > sample_bytes:
            break
        found.append((key, payload))
    joined = b"".join(payload for _, payload in found)
    sizes = [
        ("entries as stored (zlib level 1 each)", sum((cache.root / k[:2] / k).stat().st_size for k, _ in found)),
        ("zlib level 9, each entry", sum(len(zlib.compress(p, 9)) for _, p in found)),
        ("bz2 level 9, all entries together", len(bz2.compress(joined, 9))),
        ("xz level 9, each entry", sum(len(lzma.compress(p, preset=9)) for _, p in found)),
        ("xz level 9 extreme, all entries together", len(lzma.compress(joined, preset=9 | lzma.PRESET_EXTREME))),
        ("the bundle: LTO-IR as it is, the rest xz level 6 each", sum(len(_pack_entry(p)[1]) for _, p in found)),
    ]
    return [
        (f"{what} ({len(found)} entries, {len(joined) / 2**20:.1f} MiB uncompressed)", size)
        for what, size in sorted(sizes, key=lambda row: -row[1])
    ]
