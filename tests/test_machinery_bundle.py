"""The build-cache bundle (``utilities.machinery.buildcache.bundle``, ``./course prebuild --export/--import``) on a
fake cache: a round trip, parts, and every refusal (another GPU or stack, a corrupt or partial bundle)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from utilities import prebuild
from utilities.machinery.buildcache import DiskCache, bundle
from utilities.machinery.buildcache.store import CodeDigest, digest_key

MACHINE = {"compute_capability": "9.0", "environment": {"nvmath-python": "1.0.0", "libmathdx": "302"}}


LTOIR = (7).to_bytes(8, "little") + b"\xedCN\x7f"  # an ISA number, then NVVM's LTO-IR container


def _cache(root: Path, entries: int = 6, size: int = 300_000) -> DiskCache:
    cache = DiskCache(root)
    for i in range(entries):  # incompressible payloads, as libmathdx's LTO-IR is
        cache.put(f"{i:02x}" + "0" * 62, LTOIR + os.urandom(size))
    cache.put("fe" + "2" * 62, (4).to_bytes(4, "little") + b"kern" + b"\x7fELF" + bytes(50_000))  # a cubin
    cache.put("ff" + "1" * 62, json.dumps([1, 2, 3]).encode())  # a trait
    return cache


def test_an_exported_bundle_imports_every_entry_on_a_like_machine(tmp_path):
    source = _cache(tmp_path / "a")
    done = bundle.export(source, tmp_path / "course.bundle", {**MACHINE, "date": "2026-11-26"}, with_ltoir=True)
    assert done.entries == 8 and done.parts == [tmp_path / "course.bundle"]
    assert "8 entries" in done.summary() and "MiB" in done.summary()
    target = DiskCache(tmp_path / "b")
    assert bundle.import_(target, tmp_path / "course.bundle", MACHINE) == (8, 0)
    assert dict(bundle.entries(target)) == dict(bundle.entries(source))
    assert bundle.import_(target, tmp_path / "course.bundle", MACHINE) == (0, 8)  # a second import writes nothing


def test_a_read_touches_an_entry_and_an_export_of_this_run_leaves_the_untouched_cubins_out(tmp_path):
    """A cache that built many commits holds the cubins of code changed since: the export of the last full
    prebuild's entries (``--only-this-run``) leaves out the cubins nothing read or wrote since it started; every other
    kind of entry stays."""
    source = _cache(tmp_path / "a")
    old_cubin, new_cubin, trait = "fe" + "2" * 62, "fd" + "3" * 62, "ff" + "1" * 62
    source.put(new_cubin, (4).to_bytes(4, "little") + b"kern" + b"\x7fELF" + bytes(50_000))
    for key, _ in bundle.entries(source):
        os.utime(source.root / key[:2] / key, (1_000_000.0, 1_000_000.0))  # all from an earlier commit
    assert source.get(new_cubin) is not None  # read by this run
    assert (source.root / new_cubin[:2] / new_cubin).stat().st_mtime > 1_000_000.0
    done = bundle.export(source, tmp_path / "course.bundle", MACHINE, fresh_since=2_000_000.0)
    _, files = bundle.read(tmp_path / "course.bundle")
    assert new_cubin in files and trait in files and old_cubin not in files
    assert done.stale[0] == 1 and "1 stale cubins" in done.summary()
    assert bundle.export(source, tmp_path / "all.bundle", MACHINE).stale == (0, 0)  # without: every cubin


def test_only_the_last_full_prebuild_dates_an_export(tmp_path):
    jobs = prebuild.COURSE_JOBS.split(",")
    assert prebuild.last_full_run(tmp_path)[0] is None  # none recorded
    prebuild._record_run(tmp_path, {"started": 5.0, "jobs": jobs[:3], "built": True})
    assert "left out jobs" in prebuild.last_full_run(tmp_path)[1]
    prebuild._record_run(tmp_path, {"started": 5.0, "jobs": jobs[::-1], "built": False})
    assert "did not build every job" in prebuild.last_full_run(tmp_path)[1]
    prebuild._record_run(tmp_path, {"started": 5.0, "jobs": jobs[::-1], "built": True})
    assert prebuild.last_full_run(tmp_path) == (5.0, "")
    extra = prebuild.CONV_SPEED_JOBS.split(",")  # every course job and a speed run's: a full run too
    prebuild._record_run(tmp_path, {"started": 6.0, "jobs": jobs + extra, "built": True})
    assert prebuild.last_full_run(tmp_path) == (6.0, "")


def test_a_launch_only_bundle_leaves_the_ltoir_out_and_keeps_its_digests(tmp_path):
    source = _cache(tmp_path / "a")
    ltoir = {key: payload for key, payload in bundle.entries(source) if bundle.kind_of(payload).startswith("LTO-IR")}
    done = bundle.export(source, tmp_path / "course.bundle", MACHINE)
    full = bundle.export(source, tmp_path / "full.bundle", MACHINE, with_ltoir=True)
    assert done.left_out[0] == 6 and "launch-only, 6 LTO-IR entries" in done.summary()
    assert done.bundle_bytes < full.bundle_bytes / 10
    manifest, files = bundle.read(tmp_path / "course.bundle")
    assert manifest["launch_only"] is True and not bundle.read(tmp_path / "full.bundle")[0]["launch_only"]
    assert not set(ltoir) & set(files), "no LTO-IR travels"
    for key, payload in ltoir.items():  # each digest is where the interposer looks, and says what the code was
        digest = CodeDigest.unpack(files[digest_key(key)])
        assert digest == CodeDigest(7, hashlib.sha256(payload[8:]).hexdigest())
    target = DiskCache(tmp_path / "b")
    assert bundle.import_(target, tmp_path / "course.bundle", MACHINE) == (8, 0)
    kinds = {bundle.kind_of(payload) for _, payload in bundle.entries(target)}
    assert not any(kind.startswith("LTO-IR") for kind in kinds) and any("digests" in kind for kind in kinds)


def test_parts_of_a_bounded_size_import_from_the_first(tmp_path):
    source = _cache(tmp_path / "a")
    limit = 700_000
    done = bundle.export(source, tmp_path / "course.bundle", MACHINE, max_part_bytes=limit, with_ltoir=True)
    assert [p.name for p in done.parts] == [f"course.bundle.part{i}" for i in range(1, len(done.parts) + 1)]
    assert len(done.parts) >= 3 and all(p.stat().st_size <= limit for p in done.parts)
    target = DiskCache(tmp_path / "b")
    assert bundle.import_(target, done.parts[0], MACHINE) == (8, 0)

    done.parts[-1].unlink()
    with pytest.raises(bundle.BundleError, match=rf"partial bundle: course.bundle.part{len(done.parts)} \(part"):
        bundle.import_(DiskCache(tmp_path / "c"), done.parts[0], MACHINE)


@pytest.mark.parametrize(
    "other, named",
    [
        ({**MACHINE, "compute_capability": "8.0"}, "compute_capability: bundle 9.0, this machine 8.0"),
        (
            {**MACHINE, "environment": {**MACHINE["environment"], "libmathdx": "303"}},
            "environment libmathdx: bundle 302, this machine 303",
        ),
    ],
)
def test_a_bundle_for_another_gpu_or_stack_is_refused_naming_what_differs(tmp_path, other, named):
    bundle.export(_cache(tmp_path / "a"), tmp_path / "x.bundle", MACHINE)
    target = DiskCache(tmp_path / "b")
    with pytest.raises(bundle.BundleError, match="another GPU or stack") as error:
        bundle.import_(target, tmp_path / "x.bundle", other)
    assert named in str(error.value) and "./course prebuild" in str(error.value)
    assert list(bundle.entries(target)) == []  # nothing written


def test_a_corrupt_or_foreign_file_is_refused_whole(tmp_path):
    path = tmp_path / "x.bundle"
    bundle.export(_cache(tmp_path / "a"), path, MACHINE)
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    target = DiskCache(tmp_path / "b")
    with pytest.raises(bundle.BundleError, match="corrupt bundle"):
        bundle.import_(target, path, MACHINE)
    path.write_bytes(bytes(blob[: len(blob) // 2]))  # cut short, as a copy that stopped
    with pytest.raises(bundle.BundleError, match="corrupt bundle"):
        bundle.import_(target, path, MACHINE)
    (tmp_path / "other").write_bytes(b"PK\x03\x04 not a bundle")
    with pytest.raises(bundle.BundleError, match="not a build-cache bundle"):
        bundle.import_(target, tmp_path / "other", MACHINE)
    with pytest.raises(bundle.BundleError, match="no such bundle"):
        bundle.import_(target, tmp_path / "missing", MACHINE)
    assert list(bundle.entries(target)) == []


def test_a_manifest_that_does_not_list_its_entries_is_refused(tmp_path):
    stream = bundle._stream(_cache(tmp_path / "a", entries=2), MACHINE, with_ltoir=True)[0]
    forged = stream.replace(b'"entries"', b'"entriez"')  # same length: the tar stays readable
    header = bundle.MAGIC + (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + hashlib.sha256(forged).digest()
    (tmp_path / "x.bundle").write_bytes(header + forged)
    with pytest.raises(bundle.BundleError, match="partial bundle"):
        bundle.import_(DiskCache(tmp_path / "b"), tmp_path / "x.bundle", MACHINE)


def test_an_empty_cache_is_not_exported(tmp_path):
    with pytest.raises(bundle.BundleError, match="run ./course prebuild first"):
        bundle.export(DiskCache(tmp_path / "empty"), tmp_path / "x.bundle", MACHINE)


def test_the_prebuild_command_exports_and_imports_with_sizes(tmp_path, monkeypatch, capsys):
    _cache(tmp_path / "cache")
    monkeypatch.setenv("COURSE_BUILD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(prebuild, "machine", lambda arch=None: dict(MACHINE))
    out = tmp_path / "course.bundle"
    assert prebuild.main(["--export", str(out), "--max-part-mb", "0.5", "--compare", "--with-ltoir"]) == 0
    printed = capsys.readouterr().out
    assert "MiB  the bundle: LTO-IR as it is, the rest xz level 6 each" in printed
    assert "entries as stored" in printed and "prebuild: bundle: 8 entries" in printed
    assert re.search(r"prebuild: +1 entries, +0.0 MiB: traits and other small values", printed)
    monkeypatch.setenv("COURSE_BUILD_CACHE", str(tmp_path / "fresh"))
    assert prebuild.main(["--import", str(out) + ".part1"]) == 0
    assert "imported 8 entries (0 were there)" in capsys.readouterr().out
    monkeypatch.setattr(prebuild, "machine", lambda arch=None: {**MACHINE, "compute_capability": "10.0"})
    assert prebuild.main(["--import", str(out) + ".part1"]) == 1
    assert "compute_capability: bundle 9.0, this machine 10.0" in capsys.readouterr().err
