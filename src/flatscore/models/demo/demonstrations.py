"""Expert demonstrations the demo model learns from: successful expert episodes as conversations.

Each row is the agent's side of one successful episode (system prompt, every turn, the tool
list), rendered with the same prompter the LLM agent uses at evaluation time. Extra synthetic
databases (``augment_dbs``) give every conversation fresh ids, so a tiny model must learn to
copy ids from its context instead of memorising the few ids of one database.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from flatscore.agents.diagnosing_expert import DiagnosingExpertAgent
from flatscore.agents.expert import ExpertAgent, check_answer_form
from flatscore.agents.llm import LLMAgent
from flatscore.agents.stumbling import StumblingAgent, is_slip
from flatscore.agents.users import ScriptedUser
from flatscore.domains import domain_class, load_domain
from flatscore.domains.base import Domain
from flatscore.domains.generated import generated_ids, generated_task_kinds, generated_user_details
from flatscore.domains.retail.db_builder import IDENTITY_SHAPES as RETAIL_IDENTITY_SHAPES
from flatscore.engine.episode import Episode, EpisodeSettings
from flatscore.engine.runner import drive
from flatscore.engine.scoring import Evaluator

#: Seeds of the extra synthetic databases: far from the small seeds studies use for their eval data.
AUGMENT_SEED0 = 10_001


def expert_conversations(
    domain: Domain,
    split: str,
    expert_cls: type,
    prompter: LLMAgent,
    slip_rate: float = 0.0,
    answer_form: str = "plain",
) -> list[dict[str, Any]]:
    """The successful expert episodes of ``domain``'s ``split``, as agent-side conversations.

    With ``slip_rate`` > 0 the expert slips before some calls and recovers
    (:class:`~flatscore.agents.stumbling.StumblingAgent`); a slipped call's message carries
    ``"learn": false``: the model reads it and its error as context, and learns only the recovery.
    ``answer_form``: how the expert says the values a task asks for (:data:`~flatscore.agents.expert.ANSWER_FORMS`).
    """
    evaluator = Evaluator(domain)

    def agent() -> Any:
        expert = expert_cls(answer_form)
        return expert if slip_rate <= 0 else StumblingAgent(expert, slip_rate)

    episodes = [
        Episode(domain, task, agent(), ScriptedUser(), EpisodeSettings(), seed=0, trial=0, evaluator=evaluator)
        for task in domain.tasks(split)
    ]
    finished: list[Any] = []
    drive(episodes, None, finished.append)
    rows = []
    for episode, record in zip(episodes, finished):
        if record.reward != 1.0:
            continue  # only successful demonstrations teach the model
        system = prompter.system_message(domain.name, episode.env.policy, episode._agent_tools, episode._user_tools)
        tools = [spec.openai_schema() for spec in episode._agent_tools.values()]
        rows.append(
            {
                "domain": domain.name,
                "task_id": record.task_id,
                "messages": [
                    {"role": "system", "content": system},
                    *({**m, "learn": False} if is_slip(m) else m for m in episode.agent_history),
                ],
                "tools": tools,
            }
        )
    return rows


def build_demonstrations(
    data_dirs: Mapping[str, str | Path],
    split: str,
    prompt: Literal["compact", "full"],
    expert: Literal["diagnosing", "oracle"],
    augment_dbs: int,
    slip_rate: float = 0.0,
    augment_identities: str = "pool",
    answer_form: str = "plain",
) -> list[dict[str, Any]]:
    """Conversations of every domain in ``data_dirs`` (name -> data folder), plus augmented databases.

    ``slip_rate``: the augmented databases' experts slip and recover at that rate per call (the
    eval database's own train split stays clean, so every task is also seen solved without a slip).
    ``augment_identities``: ``open`` gives the augmented retail databases made-up names and zips, so
    that a name in a call can only be copied from the conversation, never guessed from a short list.
    ``answer_form``: ``quoted`` has the expert say an asked-for value from its field's key on, as
    the tool result writes it (:func:`~flatscore.agents.expert.quoted_value`), in every conversation.
    """
    if augment_dbs < 0:
        raise ValueError(f"--augment-dbs: expected a count >= 0, got {augment_dbs}")
    if augment_identities not in RETAIL_IDENTITY_SHAPES:  # retail's are every shape any domain has
        raise ValueError(
            f"--augment-identities: expected one of {list(RETAIL_IDENTITY_SHAPES)}, got {augment_identities!r}"
        )
    check_answer_form(answer_form)  # before any episode runs
    prompter = LLMAgent(compact=prompt == "compact")
    expert_cls = DiagnosingExpertAgent if expert == "diagnosing" else ExpertAgent
    rows: list[dict[str, Any]] = []
    for name, data in data_dirs.items():
        domain = load_domain(name, data)
        rows += expert_conversations(domain, split, expert_cls, prompter, answer_form=answer_form)
        n_tasks = len(domain.tasks())
        ids = generated_ids(data)  # the extra databases have the eval data's id shapes and task kinds
        task_kinds = generated_task_kinds(data)
        user_details = generated_user_details(data)  # and the same form of the user's details
        # made-up names and zips where the domain's generator has them (retail); the pool elsewhere
        cls = domain_class(name)
        identities = augment_identities if augment_identities in cls.IDENTITY_SHAPES else "pool"
        with tempfile.TemporaryDirectory(prefix="flatscore-augment-") as tmp:
            for i in range(augment_dbs):
                seed = AUGMENT_SEED0 + i
                path = cls.generate(
                    Path(tmp) / f"{name}-{seed}",
                    seed=seed,
                    n_tasks=n_tasks,
                    ids=ids,
                    task_kinds=task_kinds,
                    identities=identities,
                    user_details=user_details,
                )
                extra = expert_conversations(
                    load_domain(name, path), split, expert_cls, prompter, slip_rate, answer_form
                )
                rows += [{**row, "source": f"synthetic seed {seed}"} for row in extra]
    return rows
