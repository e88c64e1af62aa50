"""``utilities.machinery.cubin`` on an ELF file written here the way ptxas lays a cubin out: named sections, a symbol
table, and ``.nv.info`` attributes of (function index, value) among attributes of other formats."""

from __future__ import annotations

import struct

import pytest

from utilities.machinery import cubin


def elf(sections: dict[str, bytes], kinds: dict[str, int] | None = None) -> bytes:
    """An ELF64 file of these sections (after the null one), its section-name table last."""
    kinds = kinds or {}
    names = [""] + list(sections) + [".shstrtab"]
    shstrtab = b"\0".join(n.encode() for n in names) + b"\0"
    offsets_in_names = [shstrtab.index(n.encode() + b"\0") if n else 0 for n in names]
    body, placed = b"", []
    for data in [*sections.values(), shstrtab]:
        placed.append((64 + len(body), len(data)))
        body += data
    shoff = 64 + len(body)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, shoff, 0, 64, 0,
                                                                     0, 64, len(names), len(names) - 1)  # fmt: skip
    table = bytes(64)  # the null section
    for i, name in enumerate(names[1:], start=1):
        offset, size = placed[i - 1]
        table += struct.pack("<IIQQQQIIQQ", offsets_in_names[i], kinds.get(name, 1), 0, 0, offset, size, 0, 0, 1, 0)
    return header + body + table


def symtab(names: list[str]) -> tuple[bytes, bytes]:
    strtab = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    table = bytes(24)  # symbol 0
    for n in names:
        table += struct.pack("<IBBHQQ", strtab.index(n.encode() + b"\0"), 0x12, 0, 1, 0, 0)
    return table, strtab


def attribute(attr: int, index: int, value: int) -> bytes:
    return struct.pack("<BBHII", 0x04, attr, 8, index, value)


def test_registers_and_stacks_are_read_per_function():
    table, strtab = symtab(["kernel", "$callee"])
    info = (
        struct.pack("<BBH", 0x03, 0x1B, 255)  # a 16-bit value (the kernel's register cap): skipped
        + attribute(0x2F, 1, 86)  # registers of symbol 1, the kernel
        + attribute(0x11, 2, 128)  # the callee's frame
        + attribute(0x12, 1, 8)
        + struct.pack("<BBH", 0x04, 0x37, 4)
        + b"\0\0\0\0"  # a payload of another size: skipped
    )
    data = elf(
        {".text.kernel": b"\x90" * 256, ".nv.info": info, ".symtab": table, ".strtab": strtab, ".bss": b""},
        kinds={".bss": 8},
    )
    found = cubin.resources(data)
    assert found["kernel"] == {"text": 256, "registers": 86, "min_stack": 8}
    assert found["$callee"] == {"frame": 128}
    assert cubin.machine_code(data) == {".text.kernel": b"\x90" * 256}
    assert cubin.symbols(data) == ["", "kernel", "$callee"]


def test_a_file_that_is_no_cubin_is_refused():
    with pytest.raises(ValueError, match="not a 64-bit ELF"):
        cubin.sections(b"MZ" + bytes(100))
