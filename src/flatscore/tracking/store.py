"""Where runs go: tracking URI resolution, one-time sqlite store creation, retries.

MLflow 3's sqlite store runs its alembic migrations when a store object is first built
against an empty file. Several processes doing that at once on a *new* file break the
store for good (migration race). :func:`ensure_store` therefore creates/upgrades the store
exactly once, under an exclusive ``fcntl.flock`` on ``<db>.lock``; every later caller finds
the schema at head and returns at once. Writers into an existing store still meet
"database is locked" under contention: :func:`with_retry` retries those with backoff.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: Default file names under a results directory.
DEFAULT_DB_NAME = "mlflow.db"
DEFAULT_ARTIFACT_DIR = "mlartifacts"

#: How many times a "database is locked" style failure is retried, and the first delay (s).
LOCK_RETRIES = 8
LOCK_BACKOFF_S = 0.25

_INITIALISED: set[str] = set()


def resolve_tracking_uri(uri_or_none: str | None, results_dir: str | os.PathLike[str]) -> str:
    """The tracking URI to use: the given one, else ``sqlite:///<abs results_dir>/mlflow.db``.

    A relative sqlite path or a bare filesystem path is made absolute so that every process
    (whatever its working directory) talks to the same store.
    """
    if uri_or_none:
        uri = str(uri_or_none).strip()
        if uri.startswith("sqlite:///"):
            path = uri[len("sqlite:///") :]
            if path and not os.path.isabs(path):
                return "sqlite:///" + str(Path(path).resolve())
            return uri
        if "://" not in uri:  # a bare path: take it as a sqlite file
            return "sqlite:///" + str(Path(uri).resolve())
        return uri
    return "sqlite:///" + str((Path(results_dir) / DEFAULT_DB_NAME).resolve())


def is_sqlite(uri: str) -> bool:
    return uri.startswith("sqlite:")


def sqlite_path(uri: str) -> Path:
    """The database file of a ``sqlite:///`` URI."""
    if not uri.startswith("sqlite:///"):
        raise ValueError(f"not a file-backed sqlite URI: {uri!r}")
    return Path(uri[len("sqlite:///") :].split("?", 1)[0])


def default_artifact_root(uri: str) -> str | None:
    """Artifact root for experiments we create: ``<db dir>/mlartifacts`` for sqlite, else the
    server's choice (None)."""
    if is_sqlite(uri):
        return (sqlite_path(uri).parent / DEFAULT_ARTIFACT_DIR).resolve().as_uri()
    return None


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str], timeout_s: float = 300.0) -> Iterator[None]:
    """Exclusive inter-process lock (``fcntl.flock``) on ``path``; not re-entrant."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"could not lock {path} within {timeout_s:.0f}s") from None
                time.sleep(0.02 + random.random() * 0.03)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def store_lock_path(uri: str, results_dir: str | os.PathLike[str] | None = None) -> Path:
    """The lock serialising find-or-create of runs: next to the sqlite file, else in results."""
    if is_sqlite(uri):
        p = sqlite_path(uri)
        return p.with_name(p.name + ".lock")
    base = Path(results_dir) if results_dir is not None else Path.cwd()
    return base / ".flatscore-tracking.lock"


def ensure_store(uri: str) -> None:
    """Create or upgrade a sqlite store once, safe under concurrent callers. No-op otherwise.

    Under an exclusive lock on ``<db>.lock``: if the schema is missing or behind, build the
    store through MLflow's own ``SqlAlchemyStore`` (which runs the alembic migrations) and
    upgrade an out-of-date schema with ``mlflow.store.db.utils._upgrade_db`` (what ``mlflow db
    upgrade`` does). Processes that come after find the schema at head and skip the work.
    """
    if not is_sqlite(uri) or uri in _INITIALISED:
        return
    if uri in ("sqlite://", "sqlite:///:memory:"):
        return
    db = sqlite_path(uri)
    db.parent.mkdir(parents=True, exist_ok=True)
    import sqlalchemy
    from mlflow.store.db import utils as db_utils

    with file_lock(db.with_name(db.name + ".lock")):
        engine = sqlalchemy.create_engine(uri, connect_args={"timeout": 30})
        try:
            head = db_utils._get_latest_schema_revision()
            current = None
            if db.exists() and db.stat().st_size > 0:
                insp = sqlalchemy.inspect(engine)
                if "alembic_version" in insp.get_table_names():
                    current = db_utils._get_schema_version(engine)
            if current == head and db_utils._all_tables_exist(engine):
                _INITIALISED.add(uri)
                return
            if current is not None and current != head:
                _log.info("upgrading MLflow schema of %s from %s to %s", db, current, head)
                db_utils._upgrade_db(engine)
        finally:
            engine.dispose()
        # Fresh (or just upgraded) file: let MLflow build it the way it always does.
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        store = SqlAlchemyStore(uri, default_artifact_root(uri) or "./mlartifacts")
        store.engine.dispose()
    _INITIALISED.add(uri)


def is_lock_error(exc: BaseException) -> bool:
    """A transient contention failure worth retrying ("database is locked", busy, 503...)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e).lower()
        if "database is locked" in text or "database table is locked" in text or "sqlite_busy" in text:
            return True
        try:
            import sqlalchemy.exc

            if isinstance(e, sqlalchemy.exc.OperationalError) and "locked" in text:
                return True
        except ImportError:  # pragma: no cover
            pass
        code = getattr(e, "error_code", None)
        if code == "TEMPORARILY_UNAVAILABLE" and "locked" in text:
            return True
        e = e.__cause__ or e.__context__
    return False


def with_retry(
    fn: Callable[[], T],
    *,
    retries: int = LOCK_RETRIES,
    backoff_s: float = LOCK_BACKOFF_S,
    retry_if: Callable[[BaseException], bool] = is_lock_error,
    what: str = "tracking call",
) -> T:
    """Call ``fn``; on a retryable failure, sleep (exponential backoff with jitter) and retry."""
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - filtered by retry_if
            attempt += 1
            if attempt > retries or not retry_if(exc):
                raise
            delay = backoff_s * (2 ** (attempt - 1)) * (0.5 + random.random())
            _log.warning("%s failed (%s); retry %d/%d in %.2fs", what, exc, attempt, retries, delay)
            time.sleep(delay)


#: HTTP settings used while logging to a server, unless the user set them: fail in seconds
#: rather than MLflow's default of ~minutes of retries with a 120 s timeout.
HTTP_ENV_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}


@contextlib.contextmanager
def bounded_http_env(overrides: dict[str, str] | None = None) -> Iterator[None]:
    """Temporarily set bounded MLflow HTTP retry/timeout env vars (user's own values win)."""
    wanted = dict(HTTP_ENV_DEFAULTS)
    wanted.update(overrides or {})
    saved: dict[str, str | None] = {}
    for k, v in wanted.items():
        if k in os.environ and not (overrides and k in overrides):
            continue
        saved[k] = os.environ.get(k)
        os.environ[k] = v
    try:
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


def is_http(uri: str) -> bool:
    return urlparse(uri).scheme in ("http", "https")
