"""Log one study cell to MLflow: one experiment per study, a parent "study" run, one nested
run per cell found again by its identity hash, never duplicated.

A cell folder (``<results>/cells/<cell_id>/``) holds ``cell.json``, ``episodes.jsonl`` and
``metrics.json``. :func:`log_cell` makes the cell's MLflow run match that folder:

* same content as already logged (tag ``flatscore.content_sha256``) -> no-op, same run id;
* content changed -> the *same* run gets new metric values (next step), fresh artifacts and
  traces; params already logged are immutable in MLflow and are kept;
* no run yet -> one is created under the study run (``mlflow.parentRunId``).

The content tag is written last, so a run interrupted half-way is redone on the next call.
After success a marker ``tracking.json`` is written in the cell folder; cells without a
current marker are "pending" and :func:`sync_results` logs them. :func:`try_log_cell` never
raises (the episode run must not die because MLflow is down).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from flatscore.tracking.store import (
    bounded_http_env,
    default_artifact_root,
    ensure_store,
    file_lock,
    is_http,
    resolve_tracking_uri,
    store_lock_path,
    with_retry,
)

_log = logging.getLogger(__name__)

CELL_FILE = "cell.json"
EPISODES_FILE = "episodes.jsonl"
METRICS_FILE = "metrics.json"
MARKER_FILE = "tracking.json"
CHANNEL_TABLE_FILE = "channels_by_task.csv"
ARTIFACT_DIR = "cell"

TAG_KIND = "flatscore.kind"
TAG_STUDY = "flatscore.study"
TAG_CELL_HASH = "flatscore.cell_hash"
TAG_CONTENT = "flatscore.content_sha256"
TAG_REVISION = "flatscore.revision"
TAG_CELL_ID = "flatscore.cell_id"
TAG_PARENT = "mlflow.parentRunId"
TAG_RUN_NAME = "mlflow.runName"

#: Default: log traces for cells of at most this many episodes.
TRACE_MAX_EPISODES = 200

_SECRET_WORDS = ("key", "secret", "password", "passwd", "credential", "auth")
# "token" is a secret (hf_token, auth_token) but "tokens" is a count (max_tokens, prompt_tokens).
_TOKEN_SECRET = re.compile(r"token(?!s)", re.IGNORECASE)
_BAD_NAME_CHARS = re.compile(r"[^/\w.\- :]")


# --------------------------------------------------------------------------------------------
# secrets


def is_secret_name(name: str) -> bool:
    """True if a key looks like it holds a credential: it contains key/secret/password/... or
    "token" (but not the count-like "tokens")."""
    low = str(name).lower()
    return any(w in low for w in _SECRET_WORDS) or bool(_TOKEN_SECRET.search(low))


def _secret_env_values() -> list[str]:
    """Values of secret-named environment variables, to be redacted wherever they appear."""
    vals = {v for k, v in os.environ.items() if is_secret_name(k) and v and len(v) >= 6}
    return sorted(vals, key=len, reverse=True)


def _redact_text(text: str, secrets: list[str]) -> str:
    for s in secrets:
        if s in text:
            text = text.replace(s, "***REDACTED***")
    return text


def drop_secrets(obj: Any) -> Any:
    """Recursively drop dict entries whose key is secret-named."""
    if isinstance(obj, dict):
        return {k: drop_secrets(v) for k, v in obj.items() if not is_secret_name(k)}
    if isinstance(obj, list):
        return [drop_secrets(v) for v in obj]
    return obj


# --------------------------------------------------------------------------------------------
# reading a cell


def results_dir_of(cell_dir: Path) -> Path:
    """``<results>/cells/<cell_id>`` (or the workflow's nested
    ``<results>/cells/<model>/<precision>/.../shard<i>``) -> ``<results>``."""
    cell_dir = Path(cell_dir).resolve()
    for ancestor in cell_dir.parents:
        if ancestor.name == "cells":
            return ancestor.parent
    return cell_dir.parent


_SHARD_DIR = re.compile(r"shard\d+")


def cell_run_name(cell_dir: Path, cell: dict[str, Any]) -> str:
    """The cell's name in MLflow (run name and ``flatscore.cell_id``), from its identity in cell.json.

    Every workflow cell folder is called ``shard<i>``, so the folder name alone names nothing:
    ``<model>/<precision>/<domain>/K<budget>/repair-<on|off>/shard<i>``. A flat CLI cell
    (``cells/<name>``) ends with its folder name instead of a shard, which keeps names unique
    across the flat cells of one results folder. A cell.json without those fields keeps the
    folder name.
    """
    cell_dir = Path(cell_dir)
    if any(cell.get(k) is None for k in ("model", "precision", "domain", "budget", "repair")):
        return cell_dir.name
    repair = "on" if cell["repair"] is True or str(cell["repair"]).lower() in ("true", "on", "1") else "off"
    parts = [str(cell["model"]), str(cell["precision"]), str(cell["domain"]), f"K{cell['budget']}", f"repair-{repair}"]
    return "/".join([*parts, cell_dir.name])


def content_sha256(cell_dir: str | os.PathLike[str]) -> str:
    """Checksum of what a cell's run is made of: cell.json, metrics.json, episodes.jsonl."""
    h = hashlib.sha256()
    for name in (CELL_FILE, METRICS_FILE, EPISODES_FILE):
        p = Path(cell_dir) / name
        h.update(name.encode() + b"\0")
        if p.exists():
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        h.update(b"\0\0")
    return h.hexdigest()


def read_episodes(path: Path) -> list[dict[str, Any]]:
    episodes = []
    if not path.exists():
        return episodes
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                episodes.append(json.loads(line))
            except json.JSONDecodeError:
                # A torn last line of a killed run: ignore it, the file is append-only.
                _log.warning("%s:%d: unparseable episode line skipped", path, n)
    return episodes


def _scalar_params(cell: dict[str, Any]) -> dict[str, str]:
    """Every scalar of cell.json (secrets dropped) as MLflow param strings."""
    out: dict[str, str] = {}
    for k, v in cell.items():
        if is_secret_name(k):
            continue
        if isinstance(v, (dict, list, tuple)):
            # Lists of scalars (seeds...) are useful as params too.
            if isinstance(v, (list, tuple)) and all(isinstance(x, (str, int, float, bool)) or x is None for x in v):
                v = json.dumps(list(v))
            else:
                continue
        name = _BAD_NAME_CHARS.sub("_", str(k))[:250]
        out[name] = ("" if v is None else str(v))[:6000]
    return out


def _numeric_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if isinstance(v, bool):
            v = float(v)
        if not isinstance(v, (int, float)):
            continue
        v = float(v)
        if math.isinf(v):
            continue
        name = _BAD_NAME_CHARS.sub("_", str(k))[:250]
        out[name] = v
    return out


def channel_table_csv(episodes: list[dict[str, Any]]) -> str:
    """Per-task table: episodes, scored, successes, errors counted and each channel's count."""
    from flatscore.engine.records import CHANNELS

    channels = list(CHANNELS)
    for ep in episodes:
        for ch in ep.get("channels") or {}:
            if ch not in channels:
                channels.append(ch)
    rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for ep in episodes:
        r = rows[str(ep.get("task_id", ""))]
        r["episodes"] += 1
        r["scored"] += 1 if ep.get("scored") else 0
        r["successes"] += 1 if ep.get("scored") and float(ep.get("reward") or 0) >= 1.0 - 1e-9 else 0
        r["errors_counted"] += int(ep.get("errors_counted") or 0)
        r["agent_tool_calls"] += int(ep.get("agent_tool_calls") or 0)
        for ch, n in (ep.get("channels") or {}).items():
            r[ch] += int(n or 0)
    cols = ["episodes", "scored", "successes", "errors_counted", "agent_tool_calls", *channels]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["task_id", *cols])
    total: dict[str, float] = defaultdict(float)
    for task in sorted(rows):
        w.writerow([task, *(int(rows[task][c]) for c in cols)])
        for c in cols:
            total[c] += rows[task][c]
    w.writerow(["__total__", *(int(total[c]) for c in cols)])
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# MLflow helpers


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _get_or_create_experiment(client, name: str, uri: str) -> str:
    from mlflow.exceptions import MlflowException

    def get():
        return client.get_experiment_by_name(name)

    exp = with_retry(get, what="get_experiment")
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            with_retry(lambda: client.restore_experiment(exp.experiment_id), what="restore_experiment")
        return exp.experiment_id
    try:
        return with_retry(
            lambda: client.create_experiment(
                name,
                artifact_location=default_artifact_root(uri),
                tags={"flatscore.study": name},
            ),
            what="create_experiment",
        )
    except MlflowException as e:  # another process won the race
        exp = with_retry(get, what="get_experiment")
        if exp is None:
            raise e
        return exp.experiment_id


def _search(client, exp_id: str, filter_string: str):
    from mlflow.entities import ViewType

    return with_retry(
        lambda: client.search_runs(
            [exp_id],
            filter_string=filter_string,
            run_view_type=ViewType.ACTIVE_ONLY,
            max_results=1000,
            order_by=["attributes.start_time ASC"],
        ),
        what="search_runs",
    )


def _q(value: str) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _elect(runs):
    """The canonical run of duplicates: earliest start time, then smallest id."""
    return min(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def _find_or_create_study_run(client, exp_id: str, study: str) -> str:
    flt = f"tags.`{TAG_KIND}` = 'study' and tags.`{TAG_STUDY}` = {_q(study)}"
    runs = _search(client, exp_id, flt)
    if runs:
        return _elect(runs).info.run_id
    run = with_retry(
        lambda: client.create_run(exp_id, run_name=study, tags={TAG_KIND: "study", TAG_STUDY: study}),
        what="create_run(study)",
    )
    with_retry(lambda: client.set_terminated(run.info.run_id, "FINISHED"), what="set_terminated")
    # Without a shared lock (several machines on one server) two processes may both create it:
    # keep the elected one, drop ours if we lost.
    runs = _search(client, exp_id, flt)
    winner = _elect(runs).info.run_id if runs else run.info.run_id
    if winner != run.info.run_id:
        with_retry(lambda: client.delete_run(run.info.run_id), what="delete_run")
    return winner


def _find_cell_runs(client, exp_id: str, cell_hash: str):
    return _search(client, exp_id, f"tags.`{TAG_KIND}` = 'cell' and tags.`{TAG_CELL_HASH}` = {_q(cell_hash)}")


def _log_batch(client, run_id: str, *, metrics=(), params=(), tags=()) -> None:
    metrics, params, tags = list(metrics), list(params), list(tags)
    # MLflow limits: 1000 entities per batch, of which at most 100 params and 100 tags.
    while metrics or params or tags:
        p, params = params[:100], params[100:]
        t, tags = tags[:100], tags[100:]
        room = 1000 - len(p) - len(t)
        m, metrics = metrics[:room], metrics[room:]
        with_retry(lambda: client.log_batch(run_id, metrics=m, params=p, tags=t), what="log_batch")


def _write_marker(cell_dir: Path, payload: dict[str, Any]) -> None:
    tmp = cell_dir / (MARKER_FILE + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, cell_dir / MARKER_FILE)


def read_marker(cell_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    p = Path(cell_dir) / MARKER_FILE
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def is_pending(cell_dir: str | os.PathLike[str], tracking_uri: str | None = None) -> bool:
    """A cell is pending unless its marker records the current content (and the same URI)."""
    m = read_marker(cell_dir)
    if not m or m.get("content_sha256") != content_sha256(cell_dir):
        return True
    return tracking_uri is not None and m.get("uri") != tracking_uri


# --------------------------------------------------------------------------------------------
# public API


def log_cell(
    cell_dir: str | os.PathLike[str],
    tracking_uri: str | None = None,
    experiment_name: str | None = None,
    *,
    traces: bool | None = None,
) -> str:
    """Log (or update) one cell's run; return its run id. Raises on tracking failure.

    ``tracking_uri`` None -> ``sqlite:///<results>/mlflow.db``; ``experiment_name`` None ->
    the cell's study. ``traces`` None -> log one MLflow trace per episode when the cell has at
    most :data:`TRACE_MAX_EPISODES` episodes.
    """
    cell_dir = Path(cell_dir).resolve()
    uri = resolve_tracking_uri(tracking_uri, results_dir_of(cell_dir))
    cell = json.loads((cell_dir / CELL_FILE).read_text(encoding="utf-8"))
    metrics_path = cell_dir / METRICS_FILE
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.exists() else {}
    sha = content_sha256(cell_dir)
    study = str(cell.get("study") or "flatscore")
    cell_hash = str(cell["cell_hash"])
    experiment_name = experiment_name or study
    run_name = cell_run_name(cell_dir, cell)

    ensure_store(uri)
    client = _client(uri)
    exp_id = _get_or_create_experiment(client, experiment_name, uri)

    with file_lock(store_lock_path(uri, results_dir_of(cell_dir))):
        parent_id = _find_or_create_study_run(client, exp_id, study)
        runs = _find_cell_runs(client, exp_id, cell_hash)
        if runs:
            keep = _elect(runs)
            for dup in runs:  # heal duplicates left by lock-free concurrent writers
                if dup.info.run_id != keep.info.run_id:
                    with_retry(lambda d=dup: client.delete_run(d.info.run_id), what="delete_run")
            run_id = keep.info.run_id
            existing = keep
        else:
            tags = {TAG_KIND: "cell", TAG_CELL_HASH: cell_hash, TAG_STUDY: study, TAG_PARENT: parent_id}
            run = with_retry(
                lambda: client.create_run(exp_id, run_name=run_name, tags=tags),
                what="create_run(cell)",
            )
            run_id = run.info.run_id
            existing = None

    if existing is not None and existing.data.tags.get(TAG_CONTENT) == sha and existing.info.status == "FINISHED":
        _write_marker_if_stale(cell_dir, run_id, uri, sha)
        return run_id

    from mlflow.entities import Metric, Param, RunTag

    revision = 0
    if existing is not None:
        try:
            revision = int(existing.data.tags.get(TAG_REVISION, "-1")) + 1
        except ValueError:
            revision = 1
        if existing.info.status != "RUNNING":
            with_retry(lambda: client.update_run(run_id, status="RUNNING"), what="update_run")

    secrets = _secret_env_values()
    params = {k: _redact_text(v, secrets) for k, v in _scalar_params(cell).items()}
    if existing is not None:  # params are immutable: only add new ones, report changed ones
        old = existing.data.params
        changed = [k for k, v in params.items() if k in old and old[k] != v]
        if changed:
            _log.warning("cell %s: params changed since first logged, kept old values: %s", cell_hash, changed)
        params = {k: v for k, v in params.items() if k not in old}

    episodes = read_episodes(cell_dir / EPISODES_FILE)
    now_ms = int(time.time() * 1000)
    metric_values = _numeric_metrics(metrics)
    metric_values.setdefault("n_episodes", float(len(episodes)))
    mlf_metrics = [Metric(k, v, now_ms, revision) for k, v in sorted(metric_values.items())]
    tags = {
        TAG_KIND: "cell",
        TAG_CELL_HASH: cell_hash,
        TAG_STUDY: study,
        TAG_CELL_ID: run_name,
        TAG_RUN_NAME: run_name,  # renames a run first logged under its bare folder name
        TAG_PARENT: parent_id,
        TAG_REVISION: str(revision),
    }
    for k in ("model", "precision", "domain", "budget", "repair", "agent", "backend"):
        if k in cell and cell[k] is not None and not isinstance(cell[k], (dict, list)):
            tags[k] = _redact_text(str(cell[k]), secrets)
    _log_batch(
        client,
        run_id,
        metrics=mlf_metrics,
        params=[Param(k, v) for k, v in sorted(params.items())],
        tags=[RunTag(k, v) for k, v in tags.items()],
    )

    _log_artifacts(client, run_id, cell_dir, cell, episodes, secrets)

    if traces is None:
        traces = len(episodes) <= TRACE_MAX_EPISODES
    if traces and episodes:
        try:
            from flatscore.tracking.traces import log_episode_traces

            log_episode_traces(uri, exp_id, run_id, episodes, secrets=secrets, replace=existing is not None)
        except Exception as e:  # noqa: BLE001 - traces are a convenience, never fatal
            _log.warning("cell %s: traces not logged: %s", cell_hash, e)

    # Last: the content tag says "this run holds this content".
    with_retry(lambda: client.set_tag(run_id, TAG_CONTENT, sha), what="set_tag")
    with_retry(lambda: client.set_terminated(run_id, "FINISHED"), what="set_terminated")
    _write_marker(cell_dir, _marker(run_id, uri, sha, exp_id))
    return run_id


def _marker(run_id: str, uri: str, sha: str, exp_id: str | None = None) -> dict[str, Any]:
    m = {
        "run_id": run_id,
        "uri": uri,
        "content_sha256": sha,
        "logged_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if exp_id is not None:
        m["experiment_id"] = exp_id
    return m


def _write_marker_if_stale(cell_dir: Path, run_id: str, uri: str, sha: str) -> None:
    m = read_marker(cell_dir)
    if not m or m.get("run_id") != run_id or m.get("uri") != uri or m.get("content_sha256") != sha:
        _write_marker(cell_dir, _marker(run_id, uri, sha))


def _log_artifacts(client, run_id, cell_dir: Path, cell, episodes, secrets: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="flatscore-artifacts-") as tmp:
        stage = Path(tmp) / ARTIFACT_DIR
        stage.mkdir()
        (stage / CELL_FILE).write_text(
            _redact_text(json.dumps(drop_secrets(cell), indent=2, sort_keys=True), secrets) + "\n",
            encoding="utf-8",
        )
        for name in (EPISODES_FILE, METRICS_FILE):
            src = cell_dir / name
            if not src.exists():
                continue
            if secrets:
                text = src.read_text(encoding="utf-8")
                (stage / name).write_text(_redact_text(text, secrets), encoding="utf-8")
            else:
                shutil.copyfile(src, stage / name)
        (stage / CHANNEL_TABLE_FILE).write_text(channel_table_csv(episodes), encoding="utf-8")
        with_retry(lambda: client.log_artifacts(run_id, str(stage), ARTIFACT_DIR), what="log_artifacts")


def try_log_cell(
    cell_dir: str | os.PathLike[str],
    tracking_uri: str | None = None,
    experiment_name: str | None = None,
    **kwargs: Any,
) -> str | None:
    """:func:`log_cell` that never raises: on any failure log a warning, return None and leave
    the cell pending (``flatscore sync`` logs it later). HTTP retries are bounded."""
    try:
        with bounded_http_env() if tracking_uri and is_http(tracking_uri) else _nullcontext():
            return log_cell(cell_dir, tracking_uri, experiment_name, **kwargs)
    except Exception as e:  # noqa: BLE001 - by contract
        _log.warning("MLflow logging of %s failed, cell left pending: %s: %s", cell_dir, type(e).__name__, e)
        return None


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def iter_cell_dirs(results_dir: str | os.PathLike[str]):
    cells = Path(results_dir) / "cells"
    if not cells.is_dir():
        return
    # cells may be nested (the workflow writes cells/<model>/<precision>/<domain>/K<b>/repair-*/shard<i>)
    for f in sorted(cells.rglob(CELL_FILE)):
        if f.is_file() and ".superseded" not in f.parts:  # stale results moved aside by --supersede
            yield f.parent


def sync_results(
    results_dir: str | os.PathLike[str],
    tracking_uri: str | None = None,
    experiment_name: str | None = None,
    **kwargs: Any,
) -> dict[str, int]:
    """Log every pending cell under ``<results_dir>/cells`` once.

    Returns counts: ``cells`` (seen), ``logged`` (pending and now logged), ``up_to_date``
    (marker current, not touched), ``failed`` (still pending).
    """
    uri = resolve_tracking_uri(tracking_uri, results_dir)
    counts = {"cells": 0, "logged": 0, "up_to_date": 0, "failed": 0}
    for d in iter_cell_dirs(results_dir):
        counts["cells"] += 1
        if not is_pending(d, uri):
            counts["up_to_date"] += 1
            continue
        if try_log_cell(d, uri, experiment_name, **kwargs) is None:
            counts["failed"] += 1
        else:
            counts["logged"] += 1
    return counts
