"""What a cubin says about its functions, read without the CUDA toolkit (plain Python): its ELF sections, and per
function the registers and stack ptxas gave it (the ``.nv.info`` attributes ``cuobjdump --dump-resource-usage``
prints). ``tools/cubin_report.py`` prints them for kernels built on a CPU; ``tools/combined_link.py`` compares
machine code."""

from __future__ import annotations

import struct

# .nv.info attributes (EIATTR_*) of one function: (function symbol index, value) in an 8-byte payload
ATTRIBUTES = {0x2F: "registers", 0x12: "min_stack", 0x11: "frame", 0x23: "max_stack"}
_SVAL = 0x04  # the format of a payload with a 16-bit size


def _headers(cubin: bytes) -> list[tuple[int, ...]]:
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not a 64-bit ELF file (a cubin)")
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", cubin, 0x3A)
    return [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]


def sections(cubin: bytes) -> dict[str, bytes]:
    """The named sections of an ELF64 file (a cubin), by name."""
    heads = _headers(cubin)
    (shstrndx,) = struct.unpack_from("<H", cubin, 0x3E)
    strtab = heads[shstrndx]
    names = cubin[strtab[4] : strtab[4] + strtab[5]]
    out = {}
    for name_at, kind, _, _, offset, size, *_ in heads:
        name = names[name_at : names.index(b"\0", name_at)].decode()
        out[name] = b"" if kind == 8 else cubin[offset : offset + size]  # SHT_NOBITS holds no bytes
    return out


def machine_code(cubin: bytes) -> dict[str, bytes]:
    """Each function's machine code (its ``.text.<name>`` section)."""
    return {name: data for name, data in sections(cubin).items() if name.startswith(".text.")}


def symbols(cubin: bytes) -> list[str]:
    """The symbol table's names, by index."""
    found = sections(cubin)
    table, names = found.get(".symtab", b""), found.get(".strtab", b"")
    out = []
    for at in range(0, len(table) - 23, 24):
        (name_at,) = struct.unpack_from("<I", table, at)
        out.append(names[name_at : names.index(b"\0", name_at)].decode() if name_at < len(names) else "")
    return out


def resources(cubin: bytes) -> dict[str, dict[str, int]]:
    """Per function with machine code: ``registers``, ``min_stack``, ``frame``, ``max_stack`` (what the cubin
    records of them, bytes for the stacks) and ``text`` (its machine code's bytes)."""
    names = symbols(cubin)
    found = sections(cubin)
    out: dict[str, dict[str, int]] = {
        name.removeprefix(".text."): {"text": len(data)} for name, data in found.items() if name.startswith(".text.")
    }
    for section, data in found.items():
        if not section.startswith(".nv.info"):
            continue
        at = 0
        while at + 4 <= len(data):
            fmt, attr, size = data[at], data[at + 1], struct.unpack_from("<H", data, at + 2)[0]
            if fmt != _SVAL:
                at += 4 if fmt != 1 else 2  # EIFMT_HVAL: 2-byte value; EIFMT_NVAL: none
                continue
            payload = data[at + 4 : at + 4 + size]
            at += 4 + size
            if attr in ATTRIBUTES and size == 8:
                index, value = struct.unpack("<II", payload)
                name = names[index] if index < len(names) else f"#{index}"
                out.setdefault(name, {})[ATTRIBUTES[attr]] = value
    return out
