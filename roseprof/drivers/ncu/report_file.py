"""What an .ncu-rep says about itself, read without ncu: the file format version and the tool versions that wrote it.

An ncu report is `NVR\\0`, a little-endian uint32 size and a FileHeader protobuf message (field 1: Version), then
blocks, each a uint32 size, a BlockHeader message and a payload. The first BlockHeader's SessionDetails (field 3)
carries VersionInfo entries (field 8: Provider, Version) naming the Nsight Compute that wrote it. (Layout: the
.proto files Nsight Compute ships in extras/FileFormat/ProfilerReport.proto, and Extra-P's ncu-report.ksy.)
An ncu older than the report's writer cannot load it; this is how roseprof says which version can.
"""

from __future__ import annotations

import struct
from pathlib import Path

MAGIC = b"NVR\x00"
MAX_HEADER_BYTES = 256 << 20  # a block header holds the string table; refuse absurd sizes from a damaged file


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message; length-delimited values as bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"protobuf wire type {wire}")
        yield num, wire, value


def describe(path: Path) -> dict | None:
    """{"format": int, "versions": {provider: version}} of an .ncu-rep, or None where it is not one."""
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != MAGIC:
                return None
            (size,) = struct.unpack("<I", fh.read(4))
            header = fh.read(size)
            (block_size,) = struct.unpack("<I", fh.read(4))
            block = fh.read(min(block_size, MAX_HEADER_BYTES))
    except (OSError, struct.error):
        return None
    out: dict = {"format": None, "versions": {}}
    try:
        for num, wire, value in fields(header):
            if num == 1 and wire == 0:
                out["format"] = value
        for num, wire, value in fields(block):
            if num == 3 and wire == 2:  # SessionDetails
                for n2, w2, v2 in fields(value):
                    if n2 == 8 and w2 == 2:  # VersionInfo
                        info = {n3: v3 for n3, w3, v3 in fields(v2) if w3 == 2}
                        provider = info.get(1, b"?").decode("utf-8", "replace")
                        out["versions"][provider] = info.get(2, b"?").decode("utf-8", "replace")
    except (ValueError, IndexError):
        pass  # a damaged or cut file: say what was readable
    return out
