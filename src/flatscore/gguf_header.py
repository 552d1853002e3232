"""What a GGUF file's header says, read without loading the model: its chat template.

The study refuses, before any job runs, a GGUF model whose chat template cannot render tools (it
could never make a tool call). The ``gguf`` package's ``GGUFReader`` answers that too, but it
parses every tensor and every token of the vocabulary into arrays first: 9 s for the 0.5B Qwen
on this machine, on every Snakemake parse. The metadata is a flat list of key/value pairs at
the start of the file, so this module walks it and stops at the key it wants (well under a
second; the vocabulary's strings are skipped, not decoded). Top level and free of the package's
imports: the config checks (run while Snakemake parses) and the importer both use it.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"

#: GGUF value types of a fixed size: type id -> struct format (little endian).
_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GGUFHeaderError(ValueError):
    """The file is not a GGUF file flatscore can read (wrong magic, unknown value type, cut short)."""


def _read(source: BinaryIO, size: int) -> bytes:
    data = source.read(size)
    if len(data) != size:
        raise GGUFHeaderError("the file ends inside its header")
    return data


def _unpack(source: BinaryIO, fmt: str) -> int | float | bool:
    return struct.unpack(fmt, _read(source, struct.calcsize(fmt)))[0]


def _string(source: BinaryIO) -> bytes:
    return _read(source, int(_unpack(source, "<Q")))


def _skip_value(source: BinaryIO, value_type: int) -> None:
    """Move past one value without building it (a vocabulary array holds ~150k strings)."""
    if value_type in _FIXED:
        source.seek(struct.calcsize(_FIXED[value_type]), 1)
    elif value_type == _STRING:
        source.seek(int(_unpack(source, "<Q")), 1)
    elif value_type == _ARRAY:
        item_type, count = int(_unpack(source, "<I")), int(_unpack(source, "<Q"))
        if item_type in _FIXED:
            source.seek(struct.calcsize(_FIXED[item_type]) * count, 1)
        else:
            for _ in range(count):
                _skip_value(source, item_type)
    else:
        raise GGUFHeaderError(f"unknown GGUF value type {value_type}")


def metadata_string(path: Path | str, key: str) -> str | None:
    """The string value of ``key`` in the header of the GGUF file ``path``, or None if it has none."""
    with open(path, "rb") as source:
        if _read(source, 4) != MAGIC:
            raise GGUFHeaderError("not a GGUF file (its first bytes are not 'GGUF')")
        _version, _n_tensors, n_kv = struct.unpack("<IQQ", _read(source, 20))
        for _ in range(n_kv):
            name = _string(source).decode("utf-8", errors="replace")
            value_type = int(_unpack(source, "<I"))
            if name == key and value_type == _STRING:
                return _string(source).decode("utf-8")
            _skip_value(source, value_type)
    return None


def file_sha256(path: Path | str) -> str:
    """The file's sha256, read in 1 MiB chunks (a GGUF file is hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def has_tool_template(chat_template: str | None) -> bool:
    """Whether a chat template renders the request's tools (a model without one cannot be an agent)."""
    return bool(chat_template) and "tools" in str(chat_template)


__all__ = ["CHAT_TEMPLATE_KEY", "GGUFHeaderError", "file_sha256", "has_tool_template", "metadata_string"]
