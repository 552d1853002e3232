"""Building the study's user simulator, and the backend its model answers through.

The user is one choice for every arm of a study: the scripted user (the demo protocol), or an
LLM user on an OpenAI-compatible server at full precision, never quantized with the agent. It
lives with the models because it decides by a served model, as the agent factory beside it does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from flatscore.agents.base import UserSimulator
from flatscore.agents.llm_user import LLMUser
from flatscore.agents.users import ScriptedUser
from flatscore.backends.base import Backend
from flatscore.engine.cell_run import USER_ROLE
from flatscore.models.llm_factory import SERVER_OUTAGE_S
from flatscore.models.manifest import MANIFEST_NAME, Manifest


@dataclass(frozen=True)
class UserSettings:
    """Which user plays the scenarios; for ``llm``, where its model answers and how it samples."""

    kind: Literal["scripted", "llm"] = "scripted"
    #: the user's OpenAI-compatible server (from --user-base-url or a serve job's announcement)
    base_url: str | None = None
    #: the model name at that server; a model folder's path there carries its manifest
    model: str | None = None
    temperature: float = 0.0
    max_new_tokens: int = 256
    #: a file whose text replaces the built-in user guidelines; None: the built-in ones
    prompt_file: str | None = None
    #: what the user's server does to its answers (a serve job's announced settings)
    server: dict[str, Any] = field(default_factory=dict)


def _manifest_sha(model: str) -> str:
    """A served folder's manifest hash (what its weights are), or "" where the name is no folder."""
    path = Path(model) / MANIFEST_NAME
    return Manifest.load(path).sha if path.exists() else ""


def make_user(settings: UserSettings) -> tuple[UserSimulator, dict[str, Backend], dict[str, Any]]:
    """The user simulator, {role: backend} it needs, and its part of the cell's identity.

    The scripted user adds nothing to the identity, so every cell that ran before the user was a
    choice keeps its hash. An LLM user's identity names the model (served name and manifest),
    its prompt's digest, its generation settings and its server's settings; never the URL (a
    shared server's port changes from run to run).
    """
    if settings.kind == "scripted":
        return ScriptedUser(), {}, {}
    if not settings.base_url:
        raise ValueError("--user llm: needs --user-base-url or --user-base-url-file (the user model's server)")
    if not settings.model:
        raise ValueError("--user llm: needs --user-model (the user model's name at its server)")
    guidelines = None
    if settings.prompt_file:
        try:
            guidelines = Path(settings.prompt_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"--user-prompt: cannot read {settings.prompt_file}: {exc.strerror}") from None
    from flatscore.backends.openai_backend import OpenAIBackend

    user = LLMUser(max_new_tokens=settings.max_new_tokens, role=USER_ROLE, guidelines=guidelines)
    backend = OpenAIBackend(
        settings.base_url, settings.model, temperature=settings.temperature, outage_s=SERVER_OUTAGE_S
    )
    identity = {
        **user.describe(),
        "user_model": settings.model,
        "user_model_manifest_sha": _manifest_sha(settings.model),
        "user_temperature": settings.temperature,
        **{f"user_server_{k}": v for k, v in sorted(settings.server.items())},
    }
    return user, {USER_ROLE: backend}, identity


__all__ = ["USER_ROLE", "UserSettings", "make_user"]
