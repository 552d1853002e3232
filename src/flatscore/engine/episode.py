"""The episode loop: agent <-> environment <-> user, with tau2-bench's error budget.

What counts toward the error budget K (``max_errors``), exactly:

* every tool call, by the agent or by the user, whose result is an error — unknown tool
  (``invented_tool``/``other_side_tool``), arguments that fail the schema
  (``invalid_arguments``), a domain error raised by the tool (``tool_error``, or
  ``user_tool_error`` on the user's side). This is tau2-bench's rule: one counter that never
  resets, incremented once per erroring tool result; when it reaches K the episode ends with
  ``too_many_errors`` and reward 0;
* an agent output that tried to be a tool call but did not parse (``malformed_call``),
  when ``count_malformed`` is on (the default). tau2-bench instead lets such output crash
  the episode and drops it from the score; ``tau2_compat=True`` reproduces that: the episode
  ends as ``malformed_dropped``, is marked unscored and counted beside the score.

Never counted: the inference server's failures (``server_missed_call``: its tool-call parser left
a well-formed call in ``content``, which flatscore parses and runs; ``server_bad_answer``: its
answer is off the OpenAI format, see :mod:`flatscore.agents.server_answer`), and
``invented_user_action``, and an LLM user's output that tried to be a call and did not parse (its
side's ``user_tool_error``, uncounted: no tool ran; its text goes on as its message). In ``tau2_compat`` a server answer without ``tool_calls`` is what tau2
makes of it: its content is the agent's message to the user, whatever calls it spells (tau2 never
parses content); a server answer that cannot be read ends the episode as ``malformed_dropped``.

Channel counts are recorded whatever K is. The loop is a generator: it yields the model
requests of the agent/user and is resumed with the responses, so a driver can batch the
requests of many episodes.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, fields
from typing import Any, Generator

from ..agents.base import STOP_TOKEN, Agent, AgentView, ToolCall, TurnOutput, UserSimulator, UserView
from ..agents.repair import repair_message
from ..agents.user_requests import REQUEST_PREFIX
from ..backends.base import ContextOverflowError, InfrastructureError, ModelRequest, ModelResponse
from ..domains.base import Domain
from ..domains.environment import Environment, UnknownToolError
from ..domains.tasks import Task
from ..domains.tau2_checkout import described_specs
from ..domains.tau2_parity import answer_call
from ..domains.toolkit import ArgumentsError, Side, ToolError, ToolSpec
from .records import Channel, EpisodeRecord, ErrorEvent, Termination, empty_channel_counts
from .scoring import Evaluator
from .seeding import turn_seed

FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"
_ACTION_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\(")


@dataclass(frozen=True)
class EpisodeSettings:
    max_errors: int = 10
    max_steps: int = 200
    repair: bool = False
    count_malformed: bool = True
    tau2_compat: bool = False
    #: parity mode: the tau2-bench checkout whose tool descriptions and schemas the model reads
    tau2_checkout: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_errors, int) or self.max_errors < 1:
            raise ValueError(f"max_errors (error budget): expected an integer >= 1, got {self.max_errors!r}")
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ValueError(f"max_steps: expected an integer >= 1, got {self.max_steps!r}")


def classify(env: Environment, side: Side, call_name: str, exc: BaseException) -> Channel:
    """Map a failed call to its one channel (the engine's own taxonomy; tau2 only has error: bool)."""
    if side == "user":
        return Channel.USER_TOOL_ERROR
    if isinstance(exc, UnknownToolError):
        other: Side = "user" if side == "assistant" else "assistant"
        return Channel.OTHER_SIDE_TOOL if env.has_tool(other, call_name) else Channel.INVENTED_TOOL
    if isinstance(exc, ArgumentsError):
        return Channel.INVALID_ARGUMENTS
    return Channel.TOOL_ERROR


#: tool -> its OpenAI schema as JSON text, rendered once per process (see _SchemaCachedSpec)
_SCHEMA_TEXT: dict[tuple, str] = {}


@dataclass(frozen=True, eq=False)
class _SchemaCachedSpec(ToolSpec):
    """A ToolSpec whose ``openai_schema()`` is built once per tool, not once per turn.

    The LLM agent sends every tool's schema with every request; pydantic's
    ``model_json_schema`` costs about a millisecond per tool, which was the largest cost of
    the harness itself (16 retail tools: ~13 ms a turn). The schema is kept as JSON text and
    each call returns a fresh copy, so callers may still modify what they get.
    """

    def openai_schema(self) -> dict[str, Any]:
        key = (self.name, self.side, self.description, self.arguments_model)
        text = _SCHEMA_TEXT.get(key)
        if text is None:
            text = _SCHEMA_TEXT[key] = json.dumps(ToolSpec.openai_schema(self))
        return json.loads(text)


def _schema_cached(specs: dict[str, ToolSpec]) -> dict[str, ToolSpec]:
    return {
        name: _SchemaCachedSpec(**{f.name: getattr(spec, f.name) for f in fields(ToolSpec)})
        if type(spec) is ToolSpec
        else spec
        for name, spec in specs.items()
    }


class Episode:
    """One episode's state. Use :meth:`run` (a generator) to play it."""

    def __init__(
        self,
        domain: Domain,
        task: Task,
        agent: Agent,
        user: UserSimulator,
        settings: EpisodeSettings,
        seed: int,
        trial: int,
        evaluator: Evaluator,
        episode_id: str | None = None,
    ) -> None:
        self.domain = domain
        self.task = task
        self.agent = agent
        self.user = user
        self.settings = settings
        self.seed = seed
        self.trial = trial
        if evaluator.tau2_parity != settings.tau2_compat:
            raise ValueError(
                "the evaluator's tau2 parity must match the episode's (its gold replay answers as the episode does)"
            )
        self.evaluator = evaluator
        self.episode_id = episode_id or f"{task.id}#{trial}"
        self.env = domain.environment_for(task)
        self.agent_history: list[dict[str, Any]] = []
        self.user_history: list[dict[str, Any]] = []
        self.trajectory: list[dict[str, Any]] = []
        self.channels = empty_channel_counts()
        self.events: list[ErrorEvent] = []
        self.errors_counted = 0
        self.agent_calls = 0
        self.user_calls = 0
        self.turn = 0
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "prefill_tokens": 0}
        self.model_seconds = 0.0
        self.termination: Termination | None = None
        self.infra_detail: str | None = None
        self.overflow_detail: str | None = None
        self._agent_tools = self._shown_tools("assistant")
        self._user_tools = self._shown_tools("user")

    def _shown_tools(self, side: Side) -> dict[str, ToolSpec]:
        """The tools a party is shown: flatscore's, or in parity mode with a checkout, tau2's own texts."""
        specs = self.env.tool_specs(side)
        if self.settings.tau2_compat and self.settings.tau2_checkout and specs:
            return described_specs(specs, self.settings.tau2_checkout, self.domain.name, side)
        return _schema_cached(specs)

    # -- bookkeeping -----------------------------------------------------------------------
    @property
    def steps(self) -> int:
        return len(self.trajectory)

    def _log(self, entry: dict[str, Any]) -> None:
        self.trajectory.append(entry)
        if self.termination is None and self.steps >= self.settings.max_steps:
            self.termination = Termination.MAX_STEPS

    def _record_error(self, channel: Channel, side: str, tool: str, detail: str, counted: bool = True) -> None:
        self.channels[channel.value] += 1
        self.events.append(ErrorEvent(self.steps, channel.value, side, tool, detail[:300], counted))
        if counted:
            self.errors_counted += 1
            if self.errors_counted >= self.settings.max_errors and self.termination is None:
                self.termination = Termination.TOO_MANY_ERRORS

    # -- turns -------------------------------------------------------------------------------
    def _drive(
        self, gen: Generator[ModelRequest, ModelResponse, TurnOutput]
    ) -> Generator[ModelRequest, ModelResponse, TurnOutput]:
        """Forward a turn's model requests to the driver; account the responses' usage."""
        try:
            request = next(gen)
            while True:
                response = yield request
                self.usage["prompt_tokens"] += response.prompt_tokens
                self.usage["completion_tokens"] += response.completion_tokens
                self.usage["prefill_tokens"] += response.prefill_tokens
                self.model_seconds += response.seconds
                request = gen.send(response)
        except StopIteration as done:
            return done.value

    def _invented_user_actions(self, text: str) -> list[str]:
        """Phone actions the agent asks the user to run that the user does not have (dual control)."""
        if not self._user_tools or REQUEST_PREFIX not in text:
            return []
        asked = _ACTION_CALL.findall(text.split(REQUEST_PREFIX, 1)[1])
        return [name for name in asked if name not in self._user_tools]

    def _execute(self, side: Side, call: ToolCall) -> dict[str, Any]:
        """Run one call, classify a failure, and return the tool message for the caller's history."""
        if side == "assistant":
            self.agent_calls += 1
        else:
            self.user_calls += 1
        entry: dict[str, Any] = {"role": "tool", "side": side, "tool_call_id": call.id, "name": call.name}
        if not isinstance(call.arguments, dict):
            channel = Channel.USER_TOOL_ERROR if side == "user" else Channel.MALFORMED_CALL
            content = f"Error: arguments of '{call.name}' are not a JSON object."
            entry.update(content=content, error=True, channel=channel.value)
            self._record_error(channel, side, call.name, content)
            return entry
        answer = answer_call(self.env, side, call.name, call.arguments, tau2_parity=self.settings.tau2_compat)
        if not answer.error:
            entry.update(content=answer.content, error=False)
            return entry
        exc = answer.exception
        assert exc is not None
        channel = classify(self.env, side, call.name, exc)
        content = answer.content
        repaired = False
        if self.settings.repair and side == "assistant" and channel in (Channel.INVENTED_TOOL, Channel.OTHER_SIDE_TOOL):
            content = repair_message(call.name, list(self._agent_tools))
            repaired = True
        entry.update(content=content, error=True, channel=channel.value, repair=repaired)
        if not isinstance(exc, (ToolError, ArgumentsError, UnknownToolError)):
            entry["exception"] = type(exc).__name__
        self._record_error(channel, side, call.name, content)
        return entry

    def _agent_turn(self) -> Generator[ModelRequest, ModelResponse, TurnOutput]:
        view = AgentView(
            domain=self.domain.name,
            policy=self.env.policy,
            messages=self.agent_history,
            tools=self._agent_tools,
            user_tools=self._user_tools,
            turn=self.turn,
            seed=turn_seed(self.seed, self.turn, "agent"),
            episode_id=self.episode_id,
            task=self.task if self.agent.oracle else None,
        )
        out = yield from self._drive(self.agent.respond(view))
        return out

    def _user_turn(self) -> Generator[ModelRequest, ModelResponse, TurnOutput]:
        view = UserView(
            domain=self.domain.name,
            task=self.task,
            messages=self.user_history,
            tools=self._user_tools,
            turn=self.turn,
            seed=turn_seed(self.seed, self.turn, "user"),
            episode_id=self.episode_id,
        )
        out = yield from self._drive(self.user.respond(view))
        return out

    def _play(self) -> Generator[ModelRequest, ModelResponse, None]:
        greeting = {"role": "assistant", "content": FIRST_AGENT_MESSAGE}
        self.agent_history.append(dict(greeting))
        self.user_history.append({"role": "user", "content": FIRST_AGENT_MESSAGE})
        self._log({"role": "assistant", "content": FIRST_AGENT_MESSAGE})
        speaker = "user"
        while self.termination is None:
            self.turn += 1
            if speaker == "user":
                out = yield from self._user_turn()
                speaker = self._handle_user(out)
            else:
                out = yield from self._agent_turn()
                speaker = self._handle_agent(out)

    def _handle_user(self, out: TurnOutput) -> str:
        if out.malformed is not None:
            # an LLM user's call that did not parse: its text goes on as its message; the failure is
            # the user's (its side, its channel), uncounted because no tool call ran (tau2 sees none)
            self._record_error(Channel.USER_TOOL_ERROR, "user", "", f"malformed output: {out.malformed}", counted=False)
        if out.tool_calls:
            self.user_history.append(
                {
                    "role": "assistant",
                    "content": out.content or "",
                    "tool_calls": [c.to_openai() for c in out.tool_calls],
                }
            )
            self._log({"role": "user", "content": out.content, "tool_calls": [c.to_openai() for c in out.tool_calls]})
            for call in out.tool_calls:
                entry = self._execute("user", call)
                self.user_history.append({k: entry[k] for k in ("role", "tool_call_id", "name", "content")})
                self._log(entry)
                if self.termination is not None:
                    break
            return "user"
        text = out.content or ""
        self.user_history.append({"role": "assistant", "content": text})
        self.agent_history.append({"role": "user", "content": text})
        self._log({"role": "user", "content": text})
        if out.stop or STOP_TOKEN in text:
            self.termination = self.termination or Termination.USER_STOP
        return "agent"

    def _tau2_reads_as_text(self, out: TurnOutput) -> TurnOutput:
        """tau2_compat: a server answer without ``tool_calls`` is a message to tau2 (it never parses
        content), so a call left in content is not run and a malformed one is no error; both are
        still recorded, uncounted."""
        server = out.server
        if server is None or server.get("tool_calls") or not (out.tool_calls or out.malformed is not None):
            return out
        if out.malformed is not None and out.malformed_channel != Channel.MALFORMED_CALL.value:
            return out
        if out.malformed is not None:
            detail = f"{out.malformed} (tau2 reads the answer as a message)"
            out.server_events.append((Channel.MALFORMED_CALL.value, "", detail))
        content = server.get("content")
        text = content if isinstance(content, str) else (out.raw or "")
        return TurnOutput(
            content=text.strip(), raw=out.raw, stop=out.stop, server=server, server_events=out.server_events
        )

    def _record_server_events(self, out: TurnOutput) -> None:
        """What the server's parsing got wrong this turn: recorded at the turn's entry, never counted."""
        for channel, tool, detail in out.server_events:
            self._record_error(Channel(channel), "assistant", tool, detail, counted=False)

    def _handle_agent(self, out: TurnOutput) -> str:
        if self.settings.tau2_compat:
            out = self._tau2_reads_as_text(out)
        self._record_server_events(out)
        kept: dict[str, Any] = {"server": out.server} if out.server is not None else {}
        if out.server_events:
            kept["server_channels"] = sorted({channel for channel, _, _ in out.server_events})
        if out.malformed is not None:
            raw = out.raw or ""
            channel = Channel(out.malformed_channel)
            entry = {"role": "assistant", "content": raw, "parse_error": out.malformed, **kept}
            if self.settings.tau2_compat:  # the raw output is the error itself: nothing follows it
                entry.update(error=True, channel=channel.value)
            self._log(entry)
            if self.settings.tau2_compat:
                self.channels[channel.value] += 1
                self.events.append(ErrorEvent(self.steps, channel.value, "assistant", "", out.malformed, False))
                self.termination = Termination.MALFORMED_DROPPED
                return "agent"
            feedback = f"Error: your tool call could not be parsed ({out.malformed}). Emit a valid tool call."
            self.agent_history.append({"role": "assistant", "content": raw})
            self.agent_history.append({"role": "user", "content": feedback})
            self._log(
                {
                    "role": "tool",
                    "side": "assistant",
                    "content": feedback,
                    "error": True,
                    "channel": channel.value,
                }
            )
            counted = self.settings.count_malformed and channel == Channel.MALFORMED_CALL
            self._record_error(channel, "assistant", "", out.malformed, counted=counted)
            return "agent"
        if out.tool_calls:
            calls = [c.to_openai() for c in out.tool_calls]
            self.agent_history.append({"role": "assistant", "content": out.content or "", "tool_calls": calls})
            # a server's answer replaces ``raw`` (its text and calls as parsed): it holds them verbatim
            said = kept or {"raw": out.raw}
            self._log({"role": "assistant", "content": out.content, "tool_calls": calls, **said})
            for call in out.tool_calls:
                entry = self._execute("assistant", call)
                self.agent_history.append({k: entry[k] for k in ("role", "tool_call_id", "name", "content")})
                self._log(entry)
                if self.termination is not None:
                    break
            return "agent"
        text = out.content or ""
        self.agent_history.append({"role": "assistant", "content": text})
        self.user_history.append({"role": "user", "content": text})
        entry: dict[str, Any] = {"role": "assistant", "content": text, **kept}
        invented = self._invented_user_actions(text)
        if invented:
            entry.update(error=True, channel=Channel.INVENTED_USER_ACTION.value, invented_actions=invented)
        self._log(entry)
        for name in invented:
            self._record_error(
                Channel.INVENTED_USER_ACTION, "assistant", name, f"no user action '{name}'", counted=False
            )
        if out.stop or STOP_TOKEN in text:
            self.termination = self.termination or Termination.AGENT_STOP
        return "user"

    # -- public --------------------------------------------------------------------------------
    def run(self) -> Generator[ModelRequest, ModelResponse, EpisodeRecord]:
        """Play the episode; yields model requests; returns the finished record."""
        started = time.perf_counter()
        try:
            yield from self._play()
        except ContextOverflowError as exc:
            self.termination = Termination.CONTEXT_OVERFLOW
            self.overflow_detail = str(exc)[:500]
        except InfrastructureError as exc:
            self.termination = Termination.INFRASTRUCTURE_ERROR
            self.infra_detail = str(exc)[:500]
        finally:
            self.agent.end_episode(self.episode_id)
            self.user.end_episode(self.episode_id)
        return self._finish(time.perf_counter() - started)

    def _finish(self, wall: float) -> EpisodeRecord:
        assert self.termination is not None
        reward_info = self.evaluator.evaluate(self.task, self.env, self.trajectory, self.termination)
        if self.infra_detail:
            reward_info["infrastructure_error"] = self.infra_detail
        if self.overflow_detail:
            reward_info["context_overflow"] = self.overflow_detail
        scored = self.termination.value not in {
            Termination.MALFORMED_DROPPED.value,
            Termination.INFRASTRUCTURE_ERROR.value,
        }
        return EpisodeRecord(
            task_id=self.task.id,
            trial=self.trial,
            seed=self.seed,
            domain=self.domain.name,
            budget=self.settings.max_errors,
            repair=self.settings.repair,
            termination=self.termination.value,
            reward=float(reward_info["reward"]),
            scored=scored,
            reward_info=reward_info,
            errors_counted=self.errors_counted,
            channels=dict(self.channels),
            error_events=list(self.events),
            agent_tool_calls=self.agent_calls,
            user_tool_calls=self.user_calls,
            steps=self.steps,
            messages=json.loads(json.dumps(self.trajectory, default=str)),
            usage=dict(self.usage),
            # ended_at (epoch seconds): the cell's MLflow run spans its episodes, not its logging
            timing={
                "wall_seconds": round(wall, 6),
                "model_seconds": round(self.model_seconds, 6),
                "ended_at": round(time.time(), 3),
            },
            tau2_compat=self.settings.tau2_compat,
        )
