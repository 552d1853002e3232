"""Tool-call parsing: model text (Hermes format) or server tool_calls -> :class:`TurnOutput`.

Hermes / Qwen / ChatML tool calls look like::

    Let me look that up.
    <tool_call>
    {"name": "get_order_details", "arguments": {"order_id": "#W123"}}
    </tool_call>

Zero or more ``<tool_call>`` blocks may follow optional free text. ``arguments`` may be a
JSON object or a JSON *string* holding an object (some models double-encode); a missing or
null ``arguments`` means ``{}`` (zero-argument tools such as ``toggle_airplane_mode()``).

Parsing never raises. Anything that looks like an attempt at a tool call but does not parse
(an unclosed tag, bad JSON, a missing or non-string name, arguments that are not an object)
yields ``TurnOutput.malformed`` = a short reason, with ``raw`` = the text, and no tool calls
(a bare ``{"name": ...}`` object without tags also counts as a malformed attempt); a partly
valid turn counts as one malformed call (the ``malformed_call`` error channel), never
as a silent subset of calls. Text that contains ``###STOP###`` sets ``stop=True``.

Call ids are deterministic (``call_{turn}_{i}``) so that trajectories are reproducible.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .base import STOP_TOKEN, ToolCall, TurnOutput

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"

# Closing markers a model may leave in decoded text when special tokens are not skipped.
_END_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")
_BLOCK_RE = re.compile(re.escape(OPEN_TAG) + r"(.*?)" + re.escape(CLOSE_TAG), re.DOTALL)
# A bare JSON call without tags: {"name": "...", "arguments": ...} — counted as a call attempt.
_BARE_CALL_RE = re.compile(r'^\s*\{\s*"name"\s*:', re.DOTALL)

MAX_REASON = 200


def call_id(turn: int, index: int) -> str:
    return f"call_{turn}_{index}"


def _clean(text: str) -> str:
    """Drop end-of-turn markers at the end of the text (never inside it: JSON strings may hold them)."""
    changed = True
    while changed:
        changed = False
        stripped = text.rstrip()
        for marker in _END_MARKERS:
            if stripped.endswith(marker):
                text = stripped[: -len(marker)]
                changed = True
    return text


def _short(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."


def _parse_arguments(args: Any, unwrap: bool = True) -> tuple[dict[str, Any] | None, str | None]:
    """Arguments as a dict, or (None, reason).

    A JSON text that decodes to a *string* is decoded once more (``unwrap``): a model that
    double-encodes ``"arguments": "{...}"`` reaches us so through a server (vLLM's hermes parser
    ``json.dumps`` the string again), and the same model output must mean the same call whether
    the server or this parser reads it.
    """
    if args is None:
        return {}, None
    if isinstance(args, dict):
        return args, None
    if isinstance(args, str):
        if not args.strip():
            return {}, None
        try:
            decoded = json.loads(args)
        except (ValueError, RecursionError) as exc:
            return None, f"arguments string is not JSON: {exc}"
        if isinstance(decoded, dict):
            return decoded, None
        if unwrap and isinstance(decoded, str):
            return _parse_arguments(decoded, unwrap=False)
        return None, f"arguments must be a JSON object, got {type(decoded).__name__}"
    return None, f"arguments must be a JSON object, got {type(args).__name__}"


def _parse_block(body: str) -> tuple[tuple[str, dict[str, Any]] | None, str | None]:
    body = body.strip()
    if not body:
        return None, "empty <tool_call> block"
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return None, f"tool call is not valid JSON: {exc}"
    if not isinstance(obj, dict):
        return None, f"tool call must be a JSON object, got {type(obj).__name__}"
    if "name" not in obj:
        return None, "tool call has no 'name'"
    name = obj["name"]
    if not isinstance(name, str) or not name.strip():
        return None, "tool call 'name' must be a non-empty string"
    args, reason = _parse_arguments(obj.get("arguments"))
    if reason is not None:
        return None, f"{name}: {reason}"
    return (name.strip(), args), None  # type: ignore[return-value]


def _stop(text: str | None) -> bool:
    return bool(text) and STOP_TOKEN in text  # type: ignore[operator]


def parse_hermes(text: str | None, turn: int = 0) -> TurnOutput:
    """Parse raw model text into a turn. Never raises."""
    try:
        return _parse_hermes(text if isinstance(text, str) else "", turn)
    except Exception as exc:  # pragma: no cover - defensive: parsing must never break an episode
        return TurnOutput(content=None, malformed=_short(f"parser error: {exc!r}"), raw=text, stop=_stop(text))


def _parse_hermes(text: str, turn: int) -> TurnOutput:
    cleaned = _clean(text)
    stop = _stop(cleaned)
    if OPEN_TAG not in cleaned and CLOSE_TAG not in cleaned:
        if _BARE_CALL_RE.match(cleaned):
            # A JSON call without the tags: an attempt at a call in the wrong format.
            return TurnOutput(content=None, malformed="tool call without <tool_call> tags", raw=text, stop=stop)
        content = cleaned.strip()
        return TurnOutput(content=content, raw=text, stop=stop)

    first = cleaned.find(OPEN_TAG)
    prefix_end = first if first >= 0 else cleaned.find(CLOSE_TAG)
    prefix = cleaned[:prefix_end].strip()
    calls: list[ToolCall] = []
    pos = prefix_end
    while True:
        start = cleaned.find(OPEN_TAG, pos)
        if start < 0:
            rest = cleaned[pos:]
            if CLOSE_TAG in rest:
                return TurnOutput(content=None, malformed="</tool_call> without <tool_call>", raw=text, stop=stop)
            # Text after the last call is dropped from content (it stays in raw; stop is still seen).
            break
        between = cleaned[pos:start]
        if CLOSE_TAG in between:
            return TurnOutput(content=None, malformed="</tool_call> without <tool_call>", raw=text, stop=stop)
        end = cleaned.find(CLOSE_TAG, start + len(OPEN_TAG))
        nested = cleaned.find(OPEN_TAG, start + len(OPEN_TAG))
        if end < 0:
            return TurnOutput(content=None, malformed="unclosed <tool_call> tag", raw=text, stop=stop)
        if 0 <= nested < end:
            return TurnOutput(content=None, malformed="nested or unclosed <tool_call> tag", raw=text, stop=stop)
        parsed, reason = _parse_block(cleaned[start + len(OPEN_TAG) : end])
        if parsed is None:
            return TurnOutput(content=None, malformed=_short(reason or "bad call"), raw=text, stop=stop)
        name, args = parsed
        calls.append(ToolCall(call_id(turn, len(calls)), name, args))
        pos = end + len(CLOSE_TAG)
    return TurnOutput(content=prefix or None, tool_calls=calls, raw=text, stop=stop)


def parse_openai(text: str | None, tool_calls: list[dict[str, Any]] | None, turn: int = 0) -> TurnOutput:
    """A turn from an OpenAI-style response: ``message.content`` and ``message.tool_calls``.

    When the server parsed no calls, the text is parsed as Hermes (so a server without a tool
    parser still works). Never raises.
    """
    try:
        return _parse_openai(text, tool_calls, turn)
    except Exception as exc:  # pragma: no cover - defensive
        return TurnOutput(content=None, malformed=_short(f"parser error: {exc!r}"), raw=text, stop=_stop(text))


def _raw_of(text: str | None, tool_calls: list[Any]) -> str:
    try:
        dumped = json.dumps(tool_calls, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        dumped = repr(tool_calls)
    if text is not None and not isinstance(text, str):  # e.g. a server's list of content parts
        text = json.dumps(text, ensure_ascii=False, default=str)
    return ((text or "") + "\n" if text else "") + dumped


def _parse_openai(text: str | None, tool_calls: list[dict[str, Any]] | None, turn: int) -> TurnOutput:
    if not tool_calls:
        return parse_hermes(text or "", turn)
    content = _clean(text).strip() if isinstance(text, str) else None
    stop = _stop(content)
    raw = _raw_of(text, tool_calls)
    if not isinstance(tool_calls, list):
        return TurnOutput(content=None, malformed="tool_calls is not a list", raw=raw, stop=stop)
    calls: list[ToolCall] = []
    for i, tc in enumerate(tool_calls):
        if not isinstance(tc, dict):
            return TurnOutput(content=None, malformed=f"tool call #{i} is not an object", raw=raw, stop=stop)
        fn = tc.get("function", tc)
        if not isinstance(fn, dict):
            return TurnOutput(content=None, malformed=f"tool call #{i} has no function object", raw=raw, stop=stop)
        name = fn.get("name")
        if not isinstance(name, str) or not name.strip():
            return TurnOutput(content=None, malformed=f"tool call #{i} has no string name", raw=raw, stop=stop)
        args, reason = _parse_arguments(fn.get("arguments"))
        if reason is not None:
            return TurnOutput(content=None, malformed=_short(f"{name}: {reason}"), raw=raw, stop=stop)
        calls.append(ToolCall(call_id(turn, i), name.strip(), args))  # type: ignore[arg-type]
    return TurnOutput(content=content or None, tool_calls=calls, raw=raw, stop=stop)


def format_hermes(name: str, arguments: dict[str, Any]) -> str:
    """The canonical Hermes text of one call (what the parser reads back)."""
    return f"{OPEN_TAG}\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + f"\n{CLOSE_TAG}"
