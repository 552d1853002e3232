"""What an episode is made of and what it leaves behind: channels, terminations, the record.

An episode record is one JSON object (one line of a cell's ``episodes.jsonl``). Everything
the analysis needs is in it; the ``timing`` block is the only part that may differ between
two runs of the same seed, so :func:`canonical_without_timing` is what reproducibility
tests compare byte for byte.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any

from flatscore.redact import redact_json_line

SCHEMA_VERSION = 1


class Channel(str, Enum):
    """Exactly one channel per error. ``hallucinated_tool`` = invented_tool + other_side_tool.

    The last two are the inference server's failures, not the model's (:data:`SERVER_CHANNELS`):
    recorded and reported beside the model's errors, never counted toward the budget, and left
    out of every sum of the model's errors in the analysis.
    """

    INVENTED_TOOL = "invented_tool"  # the name exists nowhere in the domain
    OTHER_SIDE_TOOL = "other_side_tool"  # the name is the other party's tool (telecom user tools)
    MALFORMED_CALL = "malformed_call"  # looked like a tool call, did not parse
    INVALID_ARGUMENTS = "invalid_arguments"  # unknown/missing argument or wrong type
    TOOL_ERROR = "tool_error"  # the agent's tool raised a domain error
    USER_TOOL_ERROR = "user_tool_error"  # the user's own tool failed (dual control)
    #: Dual control: the agent asks the user to run a phone action that does not exist. No tool
    #: call fails, so tau2 never sees it and it does not count toward K; the demo model showed it.
    INVENTED_USER_ACTION = "invented_user_action"
    #: A server's tool-call parser left a well-formed call in ``content`` (no ``tool_calls``):
    #: flatscore parsed and ran it (agents/server_answer.py). The server's miss: not counted.
    SERVER_MISSED_CALL = "server_missed_call"
    #: A server's answer off the OpenAI format (``tool_calls`` not a list, a call without
    #: ``function.name``, ``arguments`` not a JSON string...): read where it can be, else the turn
    #: is malformed in this channel. The server's fault: not counted.
    SERVER_BAD_ANSWER = "server_bad_answer"


CHANNELS: tuple[str, ...] = tuple(c.value for c in Channel)
HALLUCINATION_CHANNELS: tuple[str, ...] = (Channel.INVENTED_TOOL.value, Channel.OTHER_SIDE_TOOL.value)
#: The inference server's failures (never counted toward K, never summed with the model's errors).
SERVER_CHANNELS: tuple[str, ...] = (Channel.SERVER_MISSED_CALL.value, Channel.SERVER_BAD_ANSWER.value)
#: The model's own error channels: every channel but the server's.
MODEL_CHANNELS: tuple[str, ...] = tuple(c for c in CHANNELS if c not in SERVER_CHANNELS)


class Termination(str, Enum):
    USER_STOP = "user_stop"
    AGENT_STOP = "agent_stop"
    MAX_STEPS = "max_steps"
    TOO_MANY_ERRORS = "too_many_errors"
    #: tau2_compat only: tau2 lets an unparseable call crash the episode and drops it from the score.
    MALFORMED_DROPPED = "malformed_dropped"
    #: Inference infrastructure failed (server down, timeout): excluded from the score, reported beside it.
    INFRASTRUCTURE_ERROR = "infrastructure_error"
    #: The conversation outgrew the model's context window (the server refused the prompt): the
    #: model's limit, so the episode is scored, as a failure, like one that hit max_steps.
    CONTEXT_OVERFLOW = "context_overflow"


#: Terminations under which the episode is graded at all (others score 0, as in tau2).
GRADED_TERMINATIONS = frozenset({Termination.USER_STOP.value, Termination.AGENT_STOP.value})
#: Terminations that are not the model's doing: excluded from the score and counted beside it.
UNSCORED_TERMINATIONS = frozenset({Termination.MALFORMED_DROPPED.value, Termination.INFRASTRUCTURE_ERROR.value})


@dataclass
class ErrorEvent:
    step: int
    channel: str
    side: str
    tool: str
    detail: str
    counted: bool  # whether it was added to the error-budget counter


@dataclass
class EpisodeRecord:
    task_id: str
    trial: int
    seed: int
    domain: str
    budget: int
    repair: bool
    termination: str
    reward: float
    scored: bool
    reward_info: dict[str, Any]
    errors_counted: int
    channels: dict[str, int]
    error_events: list[ErrorEvent]
    agent_tool_calls: int
    user_tool_calls: int
    steps: int
    messages: list[dict[str, Any]]
    usage: dict[str, int] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    cell: str = ""
    tau2_compat: bool = False
    schema: int = SCHEMA_VERSION

    @property
    def key(self) -> str:
        return episode_key(self.task_id, self.trial)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        """The record's line. Same text as dumping :meth:`to_dict`, without its deep copy.

        Why: ``asdict`` rebuilds every nested dict and list of the trajectory first (about
        0.6 ms an episode, in the driver thread); json only needs the nested dataclasses
        (error events) turned into dicts, which ``default`` does where it meets them.

        Secrets are redacted here, the one place a record becomes text for the store
        (:func:`flatscore.redact.redact_json_line`): an error text may echo an ``Authorization``
        header, a message an environment variable's value.
        """
        shallow = {f.name: getattr(self, f.name) for f in fields(self)}
        return redact_json_line(_dump_line(shallow), _dump_line)


def _dump_line(obj: Any) -> str:
    """An episode line's JSON text: canonical key order, compact, non-ASCII kept."""
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=_dataclass_dict)


def _dataclass_dict(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def episode_key(task_id: str, trial: int) -> str:
    return f"{task_id}#{trial}"


def canonical_without_timing(record: dict[str, Any]) -> str:
    """The record as canonical JSON, minus what measures cost: equal seeds give equal strings.

    Dropped: wall-clock ``timing``, and ``usage.prefill_tokens``, the prompt tokens the backend
    actually ran; it depends on what the backend had cached (a conversation's own earlier
    turns, a system prompt lent by another episode), i.e. on scheduling, not on the episode.
    Also dropped: the ids of the calls in a server's verbatim answer (``messages[*].server``):
    vLLM draws them at random (``chatcmpl-tool-<random>``); flatscore's own call ids are kept.
    """
    stripped = {k: v for k, v in record.items() if k != "timing"}
    usage = stripped.get("usage")
    if isinstance(usage, dict) and "prefill_tokens" in usage:
        stripped["usage"] = {k: v for k, v in usage.items() if k != "prefill_tokens"}
    messages = stripped.get("messages")
    if isinstance(messages, list) and any(isinstance(m, dict) and "server" in m for m in messages):
        stripped["messages"] = [_without_server_call_ids(m) for m in messages]
    return json.dumps(stripped, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _without_server_call_ids(message: Any) -> Any:
    server = message.get("server") if isinstance(message, dict) else None
    calls = server.get("tool_calls") if isinstance(server, dict) else None
    if not isinstance(calls, list):
        return message
    calls = [{k: v for k, v in c.items() if k != "id"} if isinstance(c, dict) else c for c in calls]
    return {**message, "server": {**server, "tool_calls": calls}}


def empty_channel_counts() -> dict[str, int]:
    return {name: 0 for name in CHANNELS}
