"""Which GPU code an object file carries: the entries of its .nv_fatbin section.

Fatbin layout (stable across CUDA 11-13): a 16-byte container header
(magic 0xBA55ED50, version, header size, payload size), then entries, each
with its own header: kind (1 = PTX, 2 = cubin), header size, payload size,
and at byte 28 the arch (80 for sm_80). Entry headers stay uncompressed
under -Xfatbin -compress-all.
"""

from __future__ import annotations

import struct
import subprocess
import tempfile
from pathlib import Path

from .errors import HarnessError

_MAGIC = 0xBA55ED50
KIND_NAMES = {1: "ptx", 2: "cubin"}


def fatbin_entries(obj: Path) -> set[tuple[str, int]]:
    """{('cubin', 80), ('ptx', 90), ...} for an object nvcc compiled."""
    with tempfile.NamedTemporaryFile() as section:
        proc = subprocess.run(
            ["objcopy", "-O", "binary", "--only-section=.nv_fatbin", str(obj), section.name],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise HarnessError(f"objcopy could not read {obj}: {proc.stderr.strip()}")
        data = Path(section.name).read_bytes()
    entries = set()
    offset = 0
    while offset + 16 <= len(data):
        magic, _, header_size, payload_size = struct.unpack_from("<IHHQ", data, offset)
        if magic != _MAGIC:
            break  # padding after the last container
        cursor, end = offset + header_size, offset + header_size + payload_size
        while cursor + 32 <= end:
            kind, _, entry_header, size = struct.unpack_from("<HHIQ", data, cursor)
            arch = struct.unpack_from("<I", data, cursor + 28)[0]
            entries.add((KIND_NAMES.get(kind, f"kind{kind}"), arch))
            cursor += entry_header + size
        offset = end
    return entries
