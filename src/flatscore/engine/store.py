"""A cell's episodes on disk: one JSON line each, appended atomically, resumable.

Each finished episode is written with a single ``write`` on an ``O_APPEND`` descriptor and
``fsync``-ed before the next one starts, so a killed run leaves at most one partial line at
the end. Opening the store cuts such a tail (a line without its newline or that is not
JSON) and the run resumes after the last complete episode; episodes already present are
never written twice.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from .records import EpisodeRecord, episode_key


class CorruptStoreError(ValueError):
    """A complete (newline-terminated) line in the middle of the file is not valid JSON."""


class EpisodeStore:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired_bytes = self._repair_tail()
        self._keys = {episode_key(r["task_id"], r["trial"]) for r in self.records()}

    def _repair_tail(self) -> int:
        """Cut a partial last line left by a kill; returns the number of bytes removed."""
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        keep = len(data)
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
        else:
            # A complete but unparseable last line can only come from a torn write too.
            last_start = data.rfind(b"\n", 0, max(len(data) - 1, 0)) + 1
            if data[last_start:].strip():
                try:
                    json.loads(data[last_start:])
                except ValueError:
                    keep = last_start
        if keep != len(data):
            with open(self.path, "r+b") as handle:
                handle.truncate(keep)
                handle.flush()
                os.fsync(handle.fileno())
        return len(data) - keep

    def records(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    yield json.loads(line)
                except ValueError as exc:
                    raise CorruptStoreError(f"{self.path}: line {number} is not valid JSON ({exc})") from exc

    def has(self, task_id: str, trial: int) -> bool:
        return episode_key(task_id, trial) in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def append(self, record: EpisodeRecord) -> bool:
        """Write one episode; False (and nothing written) if that episode is already stored."""
        if record.key in self._keys:
            return False
        line = (record.to_json() + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, line)
            while written < len(line):  # os.write may write less on some filesystems
                written += os.write(fd, line[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        self._keys.add(record.key)
        return True
