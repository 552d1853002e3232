"""A cell's episodes on disk: one JSON line each, appended atomically, resumable.

Lines are written whole with a single ``write`` on an ``O_APPEND`` descriptor and
``fsync``-ed before :meth:`EpisodeStore.append` (or :meth:`EpisodeStore.write_lines`)
returns, so a killed run leaves at most one partial line at the end. ``run_cell`` appends
through :class:`~flatscore.engine.store_writer.StoreWriter`, which does the write+fsync in a
thread and bounds how many finished episodes may not be durable yet (what a SIGKILL may
lose; they are rerun on resume). Opening the store cuts a torn tail (a line without its
newline or that is not a JSON object) and the run resumes after the last complete episode; episodes
already present are never written twice.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

from .cell_folder import (
    CorruptEpisodeLine,
    duplicate_message,
    iter_episode_lines,
    parse_episode_line,
    read_episode_records,
)
from .records import EpisodeRecord, episode_key


class CorruptStoreError(CorruptEpisodeLine):
    """A complete (newline-terminated) line in the middle of the file is not a JSON object.

    The cell folder's :class:`~flatscore.engine.cell_folder.CorruptEpisodeLine` (a ``ValueError``)
    raised by the store, so callers of either catch it; it names the file and the line.
    """


class DuplicateEpisodeError(CorruptStoreError):
    """Two complete lines of the store hold the same episode (task_id, trial)."""

    def __init__(self, path: Path, lineno: int, message: str) -> None:
        self.path, self.lineno, self.reason = Path(path), lineno, message
        ValueError.__init__(self, message)


class EpisodeStore:
    """The writer of a cell's ``episodes.jsonl``: the only code that may cut a torn tail."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired_bytes = self._repair_tail()
        #: Lines cut when the store opened: a kill tears at most the last one.
        self.repaired_lines = 1 if self.repaired_bytes else 0
        self._keys = self._load_keys()

    def resume_message(self) -> str | None:
        """One line saying what opening the store kept and cut, or None for a fresh store.

        Why: a resumed or repaired cell looks like any other once it is done; the job log is the
        one place that can say the run was interrupted and what the writer did about it.
        """
        if not self._keys and not self.repaired_bytes:
            return None
        message = f"resuming {self.path}: kept {len(self._keys)} episodes"
        if self.repaired_bytes:
            message += f"; cut {self.repaired_lines} torn line ({self.repaired_bytes} bytes)"
        return message

    def _load_keys(self) -> set[str]:
        """The stored episodes' keys; a key stored twice is refused (:class:`DuplicateEpisodeError`).

        A kill leaves at most a torn last line (cut above), never a second complete copy of an
        episode, so a duplicate is corruption from outside (a copied line, a second writer): the
        store says where instead of silently dropping one (which copy would be the right one?).
        """
        lines: dict[str, int] = {}
        if not self.path.exists():
            return set()
        try:
            for lineno, line in iter_episode_lines(self.path):
                record = parse_episode_line(self.path, lineno, line)
                key = episode_key(record["task_id"], record["trial"])
                earlier = lines.setdefault(key, lineno)
                if earlier != lineno:
                    raise DuplicateEpisodeError(
                        self.path,
                        lineno,
                        duplicate_message(self.path, earlier, lineno, record["task_id"], record["trial"]),
                    )
        except DuplicateEpisodeError:
            raise
        except CorruptEpisodeLine as exc:
            raise CorruptStoreError(exc.path, exc.lineno, exc.reason) from exc
        return set(lines)

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
                    parse_episode_line(self.path, data.count(b"\n", 0, last_start) + 1, data[last_start:])
                except CorruptEpisodeLine:
                    keep = last_start
        if keep != len(data):
            with open(self.path, "r+b") as handle:
                handle.truncate(keep)
                handle.flush()
                os.fsync(handle.fileno())
        return len(data) - keep

    def records(self) -> Iterator[dict[str, Any]]:
        """Every stored episode in file order, read with the cell folder's one reader (its tail was
        cut when the store opened, so a bad line here is corruption: :class:`CorruptStoreError`)."""
        if not self.path.exists():
            return
        try:
            yield from read_episode_records(self.path)
        except CorruptEpisodeLine as exc:
            raise CorruptStoreError(exc.path, exc.lineno, exc.reason) from exc

    def has(self, task_id: str, trial: int) -> bool:
        return episode_key(task_id, trial) in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def reserve(self, record: EpisodeRecord) -> bytes | None:
        """Claim ``record``'s key and return its line; None if that episode is already stored.

        Split from :meth:`write_lines` so that a writer thread can make the line durable while
        the driver goes on (see :mod:`flatscore.engine.store_writer`): the key is taken at
        once, so the same episode is never queued twice.
        """
        if record.key in self._keys:
            return None
        line = (record.to_json() + "\n").encode("utf-8")
        self._keys.add(record.key)
        return line

    def write_lines(self, data: bytes) -> None:
        """Append complete lines with one ``write`` and ``fsync`` them before returning."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, data)
            while written < len(data):  # os.write may write less on some filesystems
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)

    def append(self, record: EpisodeRecord) -> bool:
        """Write one episode durably; False (and nothing written) if that episode is already stored."""
        line = self.reserve(record)
        if line is None:
            return False
        try:
            self.write_lines(line)
        except BaseException:
            self.forget(record.key)
            raise
        return True

    def forget(self, key: str) -> None:
        """Release a key taken by :meth:`reserve` whose line could not be written."""
        self._keys.discard(key)
