"""A domain's mutable world: the agent's toolkit, the user's toolkit (dual control), the policy.

The environment only executes; it never decides what an error *is*. It raises typed
exceptions (:class:`UnknownToolError`, :class:`~flatscore.domains.toolkit.ArgumentsError`,
:class:`~flatscore.domains.toolkit.ToolError`) and the engine maps them to error channels.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Iterable

from pydantic import BaseModel

from .cow import CopyOnAccessDict, peek_items, peek_values
from .tasks import EnvAssertion, EnvFunctionCall, InitialState
from .toolkit import Side, Toolkit, ToolSpec


class UnknownToolError(KeyError):
    """The side has no tool of that name."""


class EnvFunctionError(ValueError):
    """A task's set-up or assertion names a function the environment does not have."""


def to_plain(value: Any) -> Any:
    """State as plain JSON-able data (pydantic models dumped), for hashing and snapshots."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def _sha256_of_plain(plain: Any) -> str:
    canonical = json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _is_record_collection(field: Any) -> bool:
    """A database's keyed collection: a non-empty dict whose values are all pydantic records."""
    return isinstance(field, dict) and bool(field) and all(isinstance(v, BaseModel) for v in peek_values(field))


def record_digests(collection: dict[Any, BaseModel]) -> dict[str, str]:
    """The digest of every record of a keyed collection, by key.

    Records a :class:`~.cow.CopyOnAccessDict` still shares with the pristine database are
    digested once per domain (the pristine records are never mutated); records the episode
    holds privately are digested afresh.
    """
    cache = collection.pristine_digests if isinstance(collection, CopyOnAccessDict) else None
    owned = collection.claimed() if cache is not None else frozenset()
    digests: dict[str, str] = {}
    for key, record in peek_items(collection):
        shared = cache is not None and key not in owned
        digest = cache.get(key) if shared else None
        if digest is None:
            digest = _sha256_of_plain(to_plain(record))
            if shared:
                cache[key] = digest
        digests[str(key)] = digest
    return digests


def _digest_form(value: Any) -> Any:
    """What :func:`state_digest` hashes: the plain state, except that each record of a database's
    keyed collections (``users``, ``orders``...) stands as its own digest."""
    if isinstance(value, BaseModel):
        form: dict[str, Any] = {}
        for name in type(value).model_fields:
            field = getattr(value, name)
            form[name] = {"records": record_digests(field)} if _is_record_collection(field) else to_plain(field)
        if value.__pydantic_extra__:
            form["extra"] = to_plain(value.__pydantic_extra__)
        return form
    if isinstance(value, dict):
        return {k: _digest_form(v) for k, v in peek_items(value)}
    return to_plain(value)


def state_digest(value: Any) -> str:
    """A digest of the state that is equal exactly when the states are equal.

    Why per-record digests: scoring digests an episode's whole database once per graded
    episode, and dumping every record (45 ms on tau2's retail DB) cost more than the episode's
    tools; an episode changes a handful of records, and the digests of the untouched ones
    are cached (see :func:`record_digests`).
    """
    return _sha256_of_plain(_digest_form(value))


def deep_update(target: Any, updates: dict[str, Any]) -> Any:
    """Merge ``updates`` into a dict or pydantic model in place (tau2's initialization_data)."""
    for key, value in updates.items():
        if isinstance(target, BaseModel):
            current = getattr(target, key, None)
            if isinstance(value, dict) and isinstance(current, (dict, BaseModel)):
                deep_update(current, value)
            else:
                setattr(target, key, value)
        else:
            current = target.get(key)
            if isinstance(value, dict) and isinstance(current, (dict, BaseModel)):
                deep_update(current, value)
            else:
                target[key] = value
    return target


class Environment:
    """The world of one episode. Domains subclass it only to add cross-side wiring (``sync``)."""

    def __init__(self, domain: str, agent_toolkit: Toolkit, user_toolkit: Toolkit | None, policy: str) -> None:
        self.domain = domain
        self.agent_toolkit = agent_toolkit
        self.user_toolkit = user_toolkit
        self.policy = policy

    # -- tools --------------------------------------------------------------------------
    def toolkit(self, side: Side) -> Toolkit | None:
        return self.agent_toolkit if side == "assistant" else self.user_toolkit

    def tool_specs(self, side: Side) -> dict[str, ToolSpec]:
        kit = self.toolkit(side)
        return dict(kit.specs) if kit is not None else {}

    def tool_schemas(self, side: Side) -> list[dict[str, Any]]:
        return [spec.openai_schema() for spec in self.tool_specs(side).values()]

    def has_tool(self, side: Side, name: str) -> bool:
        return name in self.tool_specs(side)

    def invoke(self, side: Side, name: str, arguments: dict[str, Any]) -> Any:
        """Run one tool call. Raises UnknownToolError, ArgumentsError, ToolError or any error of the tool."""
        kit = self.toolkit(side)
        if kit is None or name not in kit.specs:
            raise UnknownToolError(name)
        try:
            return kit.call(name, arguments)
        finally:
            self.sync()

    def sync(self) -> None:
        """Hook run after each tool call; dual-control domains keep both sides consistent here."""

    # -- set-up and assertions -----------------------------------------------------------
    def run_env_function(self, call: EnvFunctionCall) -> Any:
        kit = self.toolkit(call.env_type)
        func = getattr(kit, call.func_name, None) if kit is not None else None
        if func is None or call.func_name.startswith("_") or not callable(func):
            raise EnvFunctionError(f"{self.domain}: no {call.env_type}-side environment function '{call.func_name}'")
        result = func(**call.arguments)
        self.sync()
        return result

    def apply_initial_state(self, state: InitialState | None) -> None:
        if state is None:
            return
        data = state.initialization_data
        if data is not None:
            if data.agent_data:
                deep_update(self.agent_toolkit.db, copy.deepcopy(data.agent_data))
            if data.user_data and self.user_toolkit is not None:
                deep_update(self.user_toolkit.db, copy.deepcopy(data.user_data))
        for action in state.initialization_actions or []:
            self.run_env_function(action)
        self.sync()

    def check_assertions(self, assertions: Iterable[EnvAssertion]) -> list[dict[str, Any]]:
        """Evaluate env assertions; each result says whether it held."""
        results = []
        for assertion in assertions:
            try:
                value = bool(self.run_env_function(assertion))
                ok = value == assertion.assert_value
                detail = None
            except Exception as exc:  # an assertion that cannot run does not hold
                ok, detail = False, f"{type(exc).__name__}: {exc}"
            results.append(
                {"func_name": assertion.func_name, "env_type": assertion.env_type, "met": ok, "error": detail}
            )
        return results

    # -- state ---------------------------------------------------------------------------
    def state_hash(self) -> str:
        """Digest of the agent DB and the user DB: tau2's DB reward compares these."""
        user_db = self.user_toolkit.db if self.user_toolkit is not None else None
        return state_digest({"agent": self.agent_toolkit.db, "user": user_db})

    def snapshot(self) -> dict[str, Any]:
        user_db = self.user_toolkit.db if self.user_toolkit is not None else None
        return {"agent": to_plain(self.agent_toolkit.db), "user": to_plain(user_db)}
