"""One MLflow trace per episode (MLflow 3 tracing): a root span for the episode, a child
span per message (agent turn = LLM span, tool result = TOOL span, user turn = CHAIN span),
error events attached as span events. Linked to the cell's run (``mlflow.sourceRun``).

MLflow's tracer exports to the *global* tracking URI, so it is switched for the duration of
the call and restored afterwards. Spans are given synthetic, monotone timestamps (an episode
record keeps wall time per episode only).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from flatscore.redact import redact_text

_log = logging.getLogger(__name__)

_MAX_TEXT = 4000


@contextlib.contextmanager
def _global_tracking(uri: str) -> Iterator[None]:
    """Point MLflow's global tracking URI (hence the tracer's exporter) at ``uri``, then put it back.

    The tracer exports to the global URI only (a trace destination names an experiment, not a
    store), so it is switched for the call. Only public API is used: ``mlflow.set_tracking_uri``
    also exports the URI as ``MLFLOW_TRACKING_URI``, so an unset variable before the call means
    no URI had been set, and MLflow is put back to "unset" (``set_tracking_uri(None)``, which
    MLflow handles as such); otherwise to the URI it resolved before. The variable itself is
    restored exactly as it was.
    """
    import mlflow

    prev_env = os.environ.get("MLFLOW_TRACKING_URI")
    prev_uri = mlflow.get_tracking_uri() if prev_env is not None else None
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(prev_uri)
        if prev_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = prev_env


def _clip(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        text = "" if value is None else str(value)
    text = redact_text(text, secrets)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "...[clipped]"


def _span_kind(msg: dict[str, Any]) -> tuple[str, str]:
    from mlflow.entities import SpanType

    role = str(msg.get("role", "message"))
    if role == "assistant":
        calls = msg.get("tool_calls") or []
        names = [str((c.get("function") or c).get("name", "?")) for c in calls if isinstance(c, dict)]
        return (f"agent: {', '.join(names)}" if names else "agent"), SpanType.LLM
    if role == "tool":
        return f"tool: {msg.get('name') or msg.get('tool') or '?'}", SpanType.TOOL
    if role == "user":
        return "user", SpanType.CHAIN
    return role, SpanType.UNKNOWN


def _existing_trace_ids(client, exp_id: str, run_id: str) -> list[str]:
    ids: list[str] = []
    token = None
    while True:
        page = client.search_traces(
            locations=[exp_id],
            filter_string=f"metadata.`mlflow.sourceRun` = '{run_id}'",
            max_results=500,
            page_token=token,
        )
        ids.extend(t.info.trace_id for t in page)
        token = getattr(page, "token", None)
        if not token:
            return ids


def log_episode_traces(
    uri: str,
    exp_id: str,
    run_id: str,
    episodes: list[dict[str, Any]],
    *,
    secrets: list[str] | None = None,
    replace: bool = False,
) -> int:
    """Log one trace per episode; with ``replace``, delete the run's earlier traces first."""
    from mlflow.entities import SpanEvent, SpanType
    from mlflow.tracking import MlflowClient

    secrets = secrets or []
    client = MlflowClient(tracking_uri=uri)
    n = 0
    with _global_tracking(uri):
        if replace:
            old = _existing_trace_ids(client, exp_id, run_id)
            for i in range(0, len(old), 100):
                client.delete_traces(exp_id, trace_ids=old[i : i + 100])
        t0 = time.time_ns() - 10**9 * 60
        for ep in episodes:
            key = f"{ep.get('task_id')}#{ep.get('trial')}"
            msgs = [m for m in (ep.get("messages") or []) if isinstance(m, dict)]
            step_ns = 1_000_000
            start = t0
            root = client.start_trace(
                name=f"episode {key}",
                span_type=SpanType.AGENT,
                inputs={"task_id": ep.get("task_id"), "trial": ep.get("trial"), "seed": ep.get("seed")},
                attributes={
                    "domain": str(ep.get("domain")),
                    "budget": str(ep.get("budget")),
                    "repair": str(ep.get("repair")),
                    "termination": str(ep.get("termination")),
                },
                tags={"flatscore.task_id": str(ep.get("task_id")), "flatscore.termination": str(ep.get("termination"))},
                experiment_id=exp_id,
                start_time_ns=start,
                run_id=run_id,
            )
            events_by_step: dict[int, list[dict[str, Any]]] = {}
            for ev in ep.get("error_events") or []:
                if isinstance(ev, dict):
                    events_by_step.setdefault(int(ev.get("step", -1)), []).append(ev)
            agent_turn = 0
            for i, msg in enumerate(msgs):
                name, stype = _span_kind(msg)
                s = start + (i + 1) * step_ns
                span = client.start_span(
                    name=name,
                    trace_id=root.trace_id,
                    parent_id=root.span_id,
                    span_type=stype,
                    inputs={"role": msg.get("role")},
                    start_time_ns=s,
                )
                if msg.get("role") == "assistant":
                    for ev in events_by_step.get(agent_turn, []):
                        span.add_event(
                            SpanEvent(name=f"error:{ev.get('channel')}", attributes={k: str(v) for k, v in ev.items()})
                        )
                    agent_turn += 1
                out: dict[str, Any] = {"content": _clip(msg.get("content"), secrets)}
                if msg.get("tool_calls"):
                    out["tool_calls"] = _clip(msg.get("tool_calls"), secrets)
                client.end_span(trace_id=root.trace_id, span_id=span.span_id, outputs=out, end_time_ns=s + step_ns // 2)
            status = "OK" if ep.get("termination") not in ("too_many_errors", "infrastructure_error") else "ERROR"
            client.end_trace(
                root.trace_id,
                outputs={
                    "reward": ep.get("reward"),
                    "scored": ep.get("scored"),
                    "termination": ep.get("termination"),
                    "channels": ep.get("channels"),
                },
                status=status,
                end_time_ns=start + (len(msgs) + 1) * step_ns,
            )
            t0 = start + (len(msgs) + 2) * step_ns
            n += 1
        try:
            import mlflow

            mlflow.flush_trace_async_logging()
        except Exception:  # noqa: BLE001
            pass
    return n
