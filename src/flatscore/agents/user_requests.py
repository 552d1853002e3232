"""How an agent asks the user to act on their own device (dual control), and how it is read.

The expert phrases a request as ``Please do this on your phone: toggle_airplane_mode()``
(keyword arguments as JSON values). The scripted user performs every call of one of its
own tools that such a message mentions. One shared format keeps the expert's
demonstrations (which the demo model learns from) and the scripted user in agreement.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

REQUEST_PREFIX = "Please do this on your phone:"
_ARG = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null)\s*(?:,|$)')


def format_call(name: str, arguments: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return f"{name}({args})"


def format_user_request(name: str, arguments: dict[str, Any]) -> str:
    return f"{REQUEST_PREFIX} {format_call(name, arguments)}"


def _parse_args(text: str) -> dict[str, Any] | None:
    args: dict[str, Any] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _ARG.match(text, pos)
        if match is None:
            return None
        args[match.group(1)] = json.loads(match.group(2))
        pos = match.end()
    return args


def parse_user_requests(text: str, tool_names: Iterable[str]) -> list[tuple[str, dict[str, Any] | str]]:
    """Every ``name(...)`` mention of one of ``tool_names``; unparseable arguments stay a string."""
    names = sorted(set(tool_names), key=len, reverse=True)
    if not names or not text:
        return []
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\(([^()]*)\)")
    found: list[tuple[str, dict[str, Any] | str]] = []
    for match in pattern.finditer(text):
        parsed = _parse_args(match.group(2))
        found.append((match.group(1), parsed if parsed is not None else match.group(2)))
    return found
