"""One writer per cell folder: an OS lock (``flock``) held for the whole run.

Two ``flatscore episodes`` on the same ``--out`` (a rerun started while a job is still alive, two
Snakemake instances) would both resume from the same point and append the same episodes twice.
So the writer takes ``flock(LOCK_EX | LOCK_NB)`` on the folder's lock file before it changes
anything there; a second writer is refused at once (no waiting: a queued duplicate run is a
mistake to report, not to serialise) with :class:`CellLockedError` naming the holder, read from
the lock file (pid, host, since when).

The OS releases an ``flock`` when its holder dies, so a killed run never leaves a stale lock that
blocks its resume; the file itself stays (deleting it would race with the next writer opening
it), and its text only matters while the lock is held.

The lock is re-entrant within one process (the CLI takes it before it generates data in the
folder, :func:`~flatscore.engine.cell_run.run_cell_folder` takes it again): a second ``flock`` on
a new descriptor of the same file would conflict with the process's own first one.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .cell_folder import WRITER_LOCK_FILE

#: Folders this process holds the lock of: resolved path -> (descriptor, nesting depth).
_HELD: dict[Path, tuple[int, int]] = {}


class CellLockedError(ValueError):
    """Another live process is writing the cell folder."""


def _holder(fd: int) -> str:
    """The holder's line from the lock file (best effort: it may be mid-write)."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "another process (holder not yet recorded)"


@contextmanager
def writer_lock(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the writer lock of ``folder`` (created if absent) for the ``with`` block.

    Raises :class:`CellLockedError` at once if another process holds it.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    path = folder / WRITER_LOCK_FILE
    if key in _HELD:
        fd, depth = _HELD[key]
        _HELD[key] = (fd, depth + 1)
        try:
            yield path
        finally:
            fd, depth = _HELD[key]
            _HELD[key] = (fd, depth - 1)
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise CellLockedError(
            f"{folder}: is being written by {holder}; wait for it to end, or stop it (a killed run releases the lock)"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    try:
        since = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()} since {since}\n".encode(), 0)
        _HELD[key] = (fd, 1)
        yield path
    finally:
        _HELD.pop(key, None)
        try:
            os.ftruncate(fd, 0)  # only a held lock's text means anything
        finally:
            os.close(fd)  # closing the last descriptor releases the flock
