"""The stumbling expert: it slips before some calls, every slip fails, and it still solves the task."""

from __future__ import annotations

import pytest

from flatscore.agents.diagnosing_expert import DiagnosingExpertAgent
from flatscore.agents.stumbling import SLIP_ID_PREFIX, StumblingAgent, is_slip
from flatscore.agents.users import ScriptedUser
from flatscore.domains import domain_class, load_domain
from flatscore.engine.episode import Episode, EpisodeSettings
from flatscore.engine.runner import drive
from flatscore.engine.scoring import Evaluator


def _run(domain, rate: float):
    evaluator = Evaluator(domain)
    episodes = [
        Episode(
            domain,
            task,
            StumblingAgent(DiagnosingExpertAgent(), rate),
            ScriptedUser(),
            EpisodeSettings(max_steps=200),
            seed=0,
            trial=0,
            evaluator=evaluator,
        )
        for task in domain.tasks()
    ]
    records: list = []
    drive(episodes, None, records.append)
    return episodes, records


@pytest.fixture(scope="module", params=[("retail", 0), ("telecom", 5)], ids=["retail", "telecom"])
def domain(request, tmp_path_factory):
    name, seed = request.param
    path = domain_class(name).generate(tmp_path_factory.mktemp(name), seed=seed, n_tasks=40)
    return load_domain(name, path)


def _slips(episode) -> list[int]:
    return [i for i, m in enumerate(episode.agent_history) if is_slip(m)]


def test_every_slip_fails_and_is_followed_by_the_real_call(domain) -> None:
    episodes, records = _run(domain, 0.3)
    by_task = {r.task_id: r for r in records}
    n_slips = 0
    for episode in episodes:
        record = by_task[episode.task.id]
        slips = _slips(episode)
        n_slips += len(slips)
        assert record.reward == 1.0, (episode.task.id, record.termination)  # a slip changes nothing
        assert record.errors_counted == len(slips) <= 2  # each slip is one counted error, at most two
        for i in slips:
            slipped = episode.agent_history[i]["tool_calls"][0]["function"]
            result = episode.agent_history[i + 1]
            assert result["role"] == "tool" and result["content"].startswith("Error")
            real = episode.agent_history[i + 2]["tool_calls"][0]
            assert not real["id"].startswith(SLIP_ID_PREFIX)
            # the recovery is the call the slip garbled: the same tool, or the same arguments
            assert real["function"]["name"] == slipped["name"] or real["function"]["arguments"] == slipped["arguments"]
    assert n_slips >= len(episodes) // 4  # the rate is felt


def test_slips_are_deterministic_and_off_at_rate_zero(domain) -> None:
    first = [_slips(e) for e in _run(domain, 0.3)[0]]
    again = [_slips(e) for e in _run(domain, 0.3)[0]]
    assert first == again
    # episodes of one seed do not all slip at the same turn
    assert len({tuple(s) for s in first}) > 2
    assert all(not _slips(e) for e in _run(domain, 0.0)[0])


def test_rate_is_a_probability() -> None:
    with pytest.raises(ValueError, match="slip rate"):
        StumblingAgent(DiagnosingExpertAgent(), 1.5)
