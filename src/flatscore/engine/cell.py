"""Cell identity and the files a cell leaves: ``cell.json``, ``episodes.jsonl``, ``metrics.json``.

A cell is (model, precision, domain, budget, repair, trials, seed, ...). Its identity hash
covers everything that can change its results — the cell's settings, the model manifest
hash, the task data digest and the code version — so a rerun finds finished work again and
a change anywhere that matters gives a new identity instead of mixing results.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .. import __version__

#: Keys that never enter the identity (they describe where/how, not what).
#: ``base_url`` too: a shared server listens on a free port, which changes from run to run.
NON_IDENTITY_KEYS = frozenset({"cell_hash", "study", "max_in_flight", "progress", "created_at", "base_url"})


def code_version() -> str:
    """The package version plus, where available, the git commit of the source tree."""
    return __version__


def cell_hash(identity: dict[str, Any]) -> str:
    material = {k: v for k, v in sorted(identity.items()) if k not in NON_IDENTITY_KEYS}
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def data_digest(data_dir: Path) -> str:
    """Digest of a domain data folder's files (names and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(data_dir).rglob("*") if p.is_file()):
        digest.update(path.relative_to(data_dir).as_posix().encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def episodes_sha256(path: Path) -> str:
    """Content checksum of a cell's episodes file (what integrity checks compare)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
