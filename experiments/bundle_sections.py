"""Reads the typed sections of an xmc bundle file (layout: src/bundle/mod.rs), for the scripts
under experiments/ that look inside plans and models. Standard library only."""
import struct

DTYPES = {2: ("I", 4), 3: ("Q", 8), 4: ("f", 4), 6: ("B", 1), 7: ("H", 2)}


def sections(path):
    """Every numeric section of the bundle at `path`, by name, as a tuple of its values."""
    data = open(path, "rb").read()
    (count,) = struct.unpack_from("<I", data, 16)
    out = {}
    for i in range(count):
        entry = 64 + 64 * i
        name = data[entry : entry + 32].rstrip(b"\0").decode()
        tag, _crc, offset, length = struct.unpack_from("<IIQQ", data, entry + 32)
        if tag in DTYPES:
            code, size = DTYPES[tag]
            out[name] = struct.unpack_from(f"<{length // size}{code}", data, offset)
    return out
