"""A cell's headline numbers, computed from its episode records.

The score counts scored episodes only; infrastructure failures and tau2_compat drops are
counted beside it (``n_unscored``, ``n_infrastructure_failures``, ``n_malformed_dropped``),
never silently left out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable

from .records import CHANNELS, HALLUCINATION_CHANNELS, Termination
from .scoring import pass_hat_k


def summarize(records: Iterable[dict[str, Any]], trials: int | None = None) -> dict[str, float]:
    records = list(records)
    scored = [r for r in records if r["scored"]]
    metrics: dict[str, float] = {
        "n_episodes": len(records),
        "n_scored": len(scored),
        "n_unscored": len(records) - len(scored),
        "n_infrastructure_failures": sum(r["termination"] == Termination.INFRASTRUCTURE_ERROR.value for r in records),
        "n_malformed_dropped": sum(r["termination"] == Termination.MALFORMED_DROPPED.value for r in records),
        "n_context_overflow": sum(r["termination"] == Termination.CONTEXT_OVERFLOW.value for r in records),
        "success_rate": (sum(r["reward"] for r in scored) / len(scored)) if scored else float("nan"),
    }
    per_task: dict[str, list[float]] = defaultdict(list)
    for r in scored:
        per_task[r["task_id"]].append(r["reward"])
    max_k = trials or max((len(v) for v in per_task.values()), default=0)
    counts = [(int(sum(1 for x in v if x >= 1.0)), len(v)) for v in per_task.values()]
    for k in range(1, max_k + 1):
        metrics[f"pass_hat_{k}"] = pass_hat_k(counts, k)
    calls = sum(r["agent_tool_calls"] for r in scored)
    metrics["agent_tool_calls"] = calls
    metrics["user_tool_calls"] = sum(r["user_tool_calls"] for r in scored)
    for channel in CHANNELS:
        total = sum(r["channels"].get(channel, 0) for r in scored)
        metrics[f"channel_{channel}"] = total
        metrics[f"rate_{channel}"] = total / calls if calls else 0.0
    halluc = sum(metrics[f"channel_{c}"] for c in HALLUCINATION_CHANNELS)
    metrics["channel_hallucinated_tool"] = halluc
    metrics["rate_hallucinated_tool"] = halluc / calls if calls else 0.0
    metrics["errors_counted"] = sum(r["errors_counted"] for r in scored)
    terminations = Counter(r["termination"] for r in records)
    for reason in Termination:
        metrics[f"termination_{reason.value}"] = terminations.get(reason.value, 0)
    for key in ("prompt_tokens", "completion_tokens", "prefill_tokens"):
        metrics[key] = sum(r.get("usage", {}).get(key, 0) for r in records)
    metrics["wall_seconds"] = sum(r.get("timing", {}).get("wall_seconds", 0.0) for r in records)
    metrics["model_seconds"] = sum(r.get("timing", {}).get("model_seconds", 0.0) for r in records)
    metrics["mean_steps"] = (sum(r["steps"] for r in scored) / len(scored)) if scored else 0.0
    return metrics
