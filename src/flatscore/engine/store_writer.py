"""Write-behind for an episode store: the driver hands finished episodes to a writer thread.

Why: ``EpisodeStore.append`` fsyncs every episode before returning (2-5 ms of wall time on
these disks). The driver of an HTTP backend finishes episodes in waves (every in-flight
episode's request answers at about the same time), so 32 episodes finishing together used to
stall the next 32 requests behind 32 fsyncs in a row. Here the driver only serialises the
record and queues its line; one thread writes whatever has queued with a single ``write``
and a single ``fsync`` (group commit) while the driver keeps the backend busy.

Durability, exactly:

* at most ``max_pending`` finished episodes are not yet durable at any moment (queued, or in
  the batch being written): :meth:`StoreWriter.append` blocks while that many are pending, so
  a SIGKILL loses at most ``max_pending`` finished episodes (plus nothing else: every line is
  written whole, a torn tail is cut when the store is opened, and a resume reruns exactly
  the episodes that are missing, with the same seeds);
* :meth:`StoreWriter.close` returns only once every queued episode is written and fsynced
  (``run_cell`` calls it before it returns, so ``metrics.json`` is never written before the
  episodes it summarises are on disk); a write error is raised there, or by the next
  ``append``, never swallowed.
"""

from __future__ import annotations

import threading
from collections import deque

from .records import EpisodeRecord
from .store import EpisodeStore

#: Default bound on finished-but-not-yet-durable episodes (what a SIGKILL may lose).
DEFAULT_MAX_PENDING = 64


class StoreWriter:
    """Appends records to an :class:`EpisodeStore` from one background thread (group commit)."""

    def __init__(self, store: EpisodeStore, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending: expected an integer >= 1, got {max_pending!r}")
        self.store = store
        self.max_pending = max_pending
        self.batches = 0  # number of write+fsync calls made (for tests and benchmarks)
        self._queue: deque[tuple[str, bytes]] = deque()  # (episode key, its line)
        self._pending = 0  # queued + being written
        self._error: BaseException | None = None
        self._closing = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"store-writer:{store.path.name}", daemon=True)
        self._thread.start()

    def append(self, record: EpisodeRecord) -> bool:
        """Queue one episode; False if it is already stored or queued. Blocks while the bound is reached."""
        with self._cond:
            self._raise_error()
            if self._closing:
                raise RuntimeError("StoreWriter.append after close")
        line = self.store.reserve(record)
        if line is None:
            return False
        with self._cond:
            while self._pending >= self.max_pending and self._error is None:
                self._cond.wait()
            self._raise_error()
            self._queue.append((record.key, line))
            self._pending += 1
            self._cond.notify_all()
        return True

    def flush(self) -> None:
        """Wait until every queued episode is written and fsynced; raise a write error if one happened."""
        with self._cond:
            while self._pending and self._error is None:
                self._cond.wait()
            self._raise_error()

    def close(self) -> None:
        """Flush, then stop the thread. Safe to call twice."""
        try:
            self.flush()
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            self._thread.join()

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the thread ----------------------------------------------------------------------------
    def _raise_error(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"writing {self.store.path} failed: {self._error}") from self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                batch = list(self._queue)
                self._queue.clear()
            try:
                self.store.write_lines(b"".join(line for _, line in batch))
            except BaseException as exc:  # reported to the driver, never lost
                with self._cond:
                    self._error = exc
                    for key, _ in batch + list(self._queue):  # not stored after all
                        self.store.forget(key)
                    self._queue.clear()
                    self._cond.notify_all()
                return
            with self._cond:
                self.batches += 1
                self._pending -= len(batch)
                self._cond.notify_all()
