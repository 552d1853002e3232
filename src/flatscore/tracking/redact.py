"""Secret redaction for MLflow: a re-export of :mod:`flatscore.redact`, the one set of rules that
every writer (episode store, backends, tracking) uses."""

from __future__ import annotations

from flatscore.redact import (
    MIN_SECRET_LEN,
    REDACTED,
    drop_secrets,
    is_secret_name,
    redact,
    redact_text,
    secret_env_values,
)

__all__ = ["MIN_SECRET_LEN", "REDACTED", "drop_secrets", "is_secret_name", "redact", "redact_text", "secret_env_values"]
