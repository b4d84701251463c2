"""A CUDA library's device code, read from the file without running any of it (`judge.replay`).

nvcc puts a translation unit's device code in the host library's `.nv_fatbin` section: fat binaries (magic
0xBA55ED50, a 16-byte header, then entries, each a header and a payload — a cubin, an ELF for one GPU architecture,
or PTX; nvcc writes more than one for a file). The timing worker hands each to the driver (`cuModuleLoadData`), so the
host code that would register them — and everything else the library's host code would do — never runs there.
`images` reads them; `entries` lists an image's entries (kind, architecture, payload); `symbols` reads the functions
and data objects the uncompressed cubins define, which the evaluator checks a description's kernels against before
any worker loads anything (`nodes.unreplayable`), and which name the module's `__device__`/`__constant__` data to
copy across.

Guarantees: reads bytes and nothing else; a file that is not a 64-bit little-endian ELF, has no `.nv_fatbin`, or
whose section is not a sequence of well-formed fat binaries is a `FatbinError` naming why. Not guaranteed: the names
of a compressed or PTX-only entry (`symbols` then returns None: the driver's load is the check), nor that the driver
loads what parses here.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = 0xBA55ED50
HEADER = struct.Struct("<IHHQ")                 # magic, version, header size, size of what follows
ENTRY = struct.Struct("<HHIQ")                  # kind, version, header size, payload size
PTX, CUBIN = 1, 2
STT_OBJECT, STT_FUNC = 1, 2


class FatbinError(ValueError):
    """The library's device code cannot be read as one fat binary."""


@dataclass(frozen=True)
class Entry:
    kind: int                                   # PTX or CUBIN
    arch: int                                   # e.g. 90 for sm_90 (0 when the header does not say)
    payload: bytes

    @property
    def elf(self) -> bool:
        return self.payload[:4] == b"\x7fELF"


def section(lib: str | Path, name: str = ".nv_fatbin") -> bytes:
    """The bytes of section `name` of the ELF file `lib`."""
    data = Path(lib).read_bytes()
    for sec_name, offset, size in _sections(data):
        if sec_name == name:
            if offset + size > len(data):
                raise FatbinError(f"{lib}: section {name} runs past the file's end")
            return data[offset:offset + size]
    raise FatbinError(f"{lib}: no {name} section (not built by nvcc, or no device code)")


def images(lib: str | Path) -> list[bytes]:
    """Each fat binary of `lib`'s `.nv_fatbin`, in order (nvcc writes more than one for a translation unit: on CUDA
    13 an empty cubin, then the one with the kernels), padding between them skipped: what `cuModuleLoadData` is given,
    one module each."""
    data, out, at = section(lib), [], 0
    while at < len(data) and data[at:].strip(b"\0"):
        _, _, head, size = _header(data, at)
        out.append(data[at:at + head + size])
        at += head + size
        at += -at % 8
    if not out:
        raise FatbinError("the .nv_fatbin section holds no fat binary")
    return out


def entries(fat: bytes) -> list[Entry]:
    """The entries of one fat binary (`image`)."""
    _, _, head, size = _header(fat, 0)
    out, at, end = [], head, head + size
    while at < end:
        if at + ENTRY.size > end:
            raise FatbinError("a fat binary entry's header runs past its end")
        kind, _, ehead, payload = ENTRY.unpack_from(fat, at)
        if ehead < ENTRY.size or at + ehead + payload > end:
            raise FatbinError("a fat binary entry runs past its end")
        arch = struct.unpack_from("<I", fat, at + 0x1C)[0] if ehead >= 0x20 else 0
        out.append(Entry(kind, arch, fat[at + ehead:at + ehead + payload]))
        at += ehead + payload
    return out


def symbols(fats: list[bytes]) -> tuple[set[str], set[str]] | None:
    """(functions, data objects) the cubin entries of the fat binaries `fats` define, or None where an entry cannot be
    read here (compressed, PTX only)."""
    functions: set[str] = set()
    objects: set[str] = set()
    cubins = [e for fat in fats for e in entries(fat) if e.kind == CUBIN]
    if not cubins or not all(e.elf for e in cubins):
        return None
    for e in cubins:
        for name, kind, defined in _symtab(e.payload):
            if defined and name:
                (functions if kind == STT_FUNC else objects if kind == STT_OBJECT else set()).add(name)
    return functions, objects


def _header(data: bytes, at: int) -> tuple[int, int, int, int]:
    if len(data) < at + HEADER.size:
        raise FatbinError("too short for a fat binary")
    magic, version, head, size = HEADER.unpack_from(data, at)
    if magic != MAGIC:
        raise FatbinError(f"not a fat binary (magic {magic:#x})")
    if head < HEADER.size or at + head + size > len(data):
        raise FatbinError("a fat binary whose size runs past its section")
    return magic, version, head, size


def _sections(data: bytes) -> list[tuple[str, int, int]]:
    """(name, file offset, size) of every section of a 64-bit little-endian ELF."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise FatbinError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize) for k in range(shnum)]
    names = heads[shstrndx][4] if shstrndx < len(heads) else 0

    def name(off: int) -> str:
        start = names + off
        return data[start:data.index(b"\0", start)].decode(errors="replace")
    return [(name(h[0]), h[4], h[5]) for h in heads]


def _symtab(elf: bytes) -> list[tuple[str, int, bool]]:
    """(name, type, defined) of every symbol of an ELF's `.symtab`."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, _ = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + k * shentsize) for k in range(shnum)]
    out = []
    for h in heads:
        if h[1] != 2 or h[6] >= len(heads):                    # SHT_SYMTAB, with its string table
            continue
        strs = heads[h[6]][4]
        for k in range(h[5] // 24):
            st_name, info, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", elf, h[4] + k * 24)
            start = strs + st_name
            out.append((elf[start:elf.index(b"\0", start)].decode(errors="replace"), info & 0xF, shndx != 0))
    return out
