"""Secret redaction: what never leaves the machine in a run's params, tags, artifacts or traces.

A cell.json may carry credentials (an ``api_key`` of a backend, an ``hf_token``) and an episode's
messages may echo an environment variable's value; MLflow stores are often shared, so both are
dropped or replaced before anything is logged. One home for the rules, used by the cell logger
and the trace writer alike.
"""

from __future__ import annotations

import os
import re
from typing import Any

#: What replaces a secret value wherever it appears in logged text.
REDACTED = "***REDACTED***"
#: Environment values shorter than this are not redacted (they would match everywhere).
MIN_SECRET_LEN = 6

_SECRET_WORDS = ("key", "secret", "password", "passwd", "credential", "auth")
# "token" is a secret (hf_token, auth_token) but "tokens" is a count (max_tokens, prompt_tokens).
_TOKEN_SECRET = re.compile(r"token(?!s)", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """True if a key looks like it holds a credential: it contains key/secret/password/... or
    "token" (but not the count-like "tokens")."""
    low = str(name).lower()
    return any(w in low for w in _SECRET_WORDS) or bool(_TOKEN_SECRET.search(low))


def secret_env_values() -> list[str]:
    """Values of secret-named environment variables, longest first (so a value containing
    another is replaced whole), to be redacted wherever they appear."""
    values = {v for k, v in os.environ.items() if is_secret_name(k) and v and len(v) >= MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, secrets: list[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by :data:`REDACTED`."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def drop_secrets(obj: Any) -> Any:
    """Recursively drop dict entries whose key is secret-named."""
    if isinstance(obj, dict):
        return {k: drop_secrets(v) for k, v in obj.items() if not is_secret_name(k)}
    if isinstance(obj, list):
        return [drop_secrets(v) for v in obj]
    return obj
