"""Secret redaction: one set of rules for everything flatscore writes (episodes, MLflow, traces).

An episode's text can carry a credential: a server's error page may echo the request's
``Authorization`` header, a message may quote an environment variable's value. Results folders
and MLflow stores are shared, so every writer redacts with this module before writing: the
episode store (:meth:`flatscore.engine.records.EpisodeRecord.to_json`), the OpenAI backend's
error texts, the MLflow cell logger and the trace writer. It sits at the top level and imports
nothing of the package, so every room may use it (the engine may not import ``tracking``).

Two rules: values of secret-named environment variables (:func:`secret_env_values`) wherever
they appear, and header-like patterns (``Authorization: Bearer ...``, ``"api_key": "..."``,
``api_key=...``) whatever the value, since the key in use may not come from this environment.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any

#: What replaces a secret value wherever it appears in written text.
REDACTED = "***REDACTED***"
#: Environment values shorter than this are not redacted (they would match everywhere).
MIN_SECRET_LEN = 6

_SECRET_WORDS = ("key", "secret", "password", "passwd", "credential", "auth")
# "token" is a secret (hf_token, auth_token) but "tokens" is a count (max_tokens, prompt_tokens).
_TOKEN_SECRET = re.compile(r"token(?!s)", re.IGNORECASE)

#: ``Authorization: Bearer <v>``, ``"Authorization": "Basic <v>"``, ``'x-api-key': '<v>'``,
#: ``api_key=<v>`` ...: a credential-named header or field, a separator, maybe a scheme, a value.
#: The value stops at quotes, whitespace and separators, so a JSON or header text stays well formed.
_FIELD_NAMES = ("authorization", "api?key", "apikey", "access?token", "auth?token", "refresh?token", "id?token")
_FIELD_NAMES += ("hf?token", "client?secret", "secret?key", "password", "passwd")
#: Lower-case cores one of which every match contains (checked below): a substring test is much
#: faster than the regex's search on a long line that holds none, the common episode line.
_FIELD_CORES = ("auth", "key", "access", "refresh", "id_token", "id-token", "idtoken", "hf_token", "hf-token")
_FIELD_CORES += ("hftoken", "secret", "passw", "bearer")
assert all(
    any(core in name.replace("?", sep) for core in _FIELD_CORES) for name in _FIELD_NAMES for sep in ("_", "-", "")
)
_FIELD = re.compile(
    r"(?P<name>(?:proxy-|x-)?(?:" + "|".join(n.replace("?", "[_-]?") for n in _FIELD_NAMES) + r"))"
    r"(?P<sep>[\"']?\s*[:=]\s*[\"']?\s*)"
    r"(?P<scheme>(?:bearer|basic|token)\s+)?"
    r"(?P<value>[^\s\"',;&}\]]+)",
    re.IGNORECASE,
)
#: A bearer token anywhere (``Bearer <v>`` without its header name, e.g. in a curl line).
_BEARER = re.compile(r"(?P<scheme>\bbearer\s+)(?P<value>[A-Za-z0-9._~+/=-]{6,})", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """True if a key looks like it holds a credential: it contains key/secret/password/... or
    "token" (but not the count-like "tokens"). Cached: every episode line asks for each
    environment variable's name."""
    low = str(name).lower()
    return any(w in low for w in _SECRET_WORDS) or bool(_TOKEN_SECRET.search(low))


def secret_env_values() -> list[str]:
    """Values of secret-named environment variables, longest first (so a value containing
    another is replaced whole), to be redacted wherever they appear."""
    values = {v for k, v in os.environ.items() if is_secret_name(k) and v and len(v) >= MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def _field_sub(match: re.Match[str]) -> str:
    if match.group("value").startswith(REDACTED):  # already redacted (text redacted twice)
        return match.group(0)
    return f"{match.group('name')}{match.group('sep')}{match.group('scheme') or ''}{REDACTED}"


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with every occurrence of each of ``secrets`` (default: :func:`secret_env_values`)
    and every header-like credential value replaced by :data:`REDACTED`."""
    for secret in secret_env_values() if secrets is None else secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if not _has_field_literal(text):
        return text
    text = _FIELD.sub(_field_sub, text)
    return _BEARER.sub(lambda m: m.group(0) if m.group("value").startswith("*") else m.group("scheme") + REDACTED, text)


#: The one entry point for a piece of text about to be written.
redact = redact_text


def _has_field_literal(text: str) -> bool:
    low = text.lower()
    return any(core in low for core in _FIELD_CORES)


def may_hold_secret(text: str, secrets: list[str]) -> bool:
    """Cheap test (substring checks) whether :func:`redact_text` could change ``text``."""
    return any(s in text for s in secrets) or _has_field_literal(text)


def redact_obj(obj: Any, secrets: list[str] | None = None) -> Any:
    """A copy of a JSON-like value with every string (keys kept) passed through :func:`redact_text`."""
    secrets = secret_env_values() if secrets is None else secrets
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {k: redact_obj(v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v, secrets) for v in obj]
    return obj


def redact_json_line(line: str, dump: Any) -> str:
    """A JSON text ``line`` (made by ``dump(obj)``) redacted without breaking it.

    Why not a regex over the JSON text: a pattern would see escaped quotes and could replace a
    number with an unquoted string. The common line holds nothing to redact and costs one search;
    otherwise it is parsed, every string redacted, and dumped again with ``dump``.
    """
    secrets = secret_env_values()
    escaped = [json.dumps(s)[1:-1] for s in secrets]  # a value as it appears inside a JSON string
    if not may_hold_secret(line, secrets + escaped):
        return line
    return dump(redact_obj(json.loads(line), secrets))


def drop_secrets(obj: Any) -> Any:
    """Recursively drop dict entries whose key is secret-named."""
    if isinstance(obj, dict):
        return {k: drop_secrets(v) for k, v in obj.items() if not is_secret_name(k)}
    if isinstance(obj, list):
        return [drop_secrets(v) for v in obj]
    return obj
