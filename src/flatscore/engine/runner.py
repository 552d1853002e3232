"""Running a cell: many episodes, their model requests batched, each appended as it finishes.

The driver keeps up to ``max_in_flight`` episodes alive. At each step it gathers the
pending model request of every live episode, groups them by role, and gives each group
to that role's backend in one ``generate`` call: the transformers backend runs them as
one batch, the HTTP backend keeps them in flight together. Oracle agents never yield, so
with them the driver is a plain loop.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ..agents.base import Agent, UserSimulator
from ..backends.base import Backend, InfrastructureError, ModelRequest, ModelResponse
from ..domains.base import Domain
from ..domains.tasks import Task
from .episode import Episode, EpisodeSettings
from .records import EpisodeRecord, Termination
from .scoring import Evaluator
from .seeding import episode_seed
from .store import EpisodeStore
from .store_writer import DEFAULT_MAX_PENDING, StoreWriter


@dataclass
class _Live:
    episode: Episode
    gen: Any
    request: ModelRequest | None


def drive(
    episodes: Iterable[Episode],
    backends: dict[str, Backend] | None,
    on_done: Callable[[EpisodeRecord], None],
    max_in_flight: int = 1,
) -> None:
    """Play ``episodes`` to the end, batching model requests across up to ``max_in_flight``."""
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight: expected an integer >= 1, got {max_in_flight!r}")
    backends = backends or {}
    pending: Iterator[Episode] = iter(episodes)
    live: list[_Live] = []

    def finish(item: _Live, record: EpisodeRecord) -> None:
        for role, backend in backends.items():
            backend.release(f"{item.episode.episode_id}:{role}")
        on_done(record)

    def advance(item: _Live, send: Callable[[], ModelRequest]) -> bool:
        try:
            item.request = send()
            return True
        except StopIteration as done:
            finish(item, done.value)
            return False

    while True:
        while len(live) < max_in_flight:
            episode = next(pending, None)
            if episode is None:
                break
            item = _Live(episode, episode.run(), None)
            if advance(item, lambda item=item: next(item.gen)):
                live.append(item)
        if not live:
            return
        by_role: dict[str, list[_Live]] = {}
        for item in live:
            assert item.request is not None
            by_role.setdefault(item.request.role, []).append(item)
        still: list[_Live] = []
        for role, items in by_role.items():
            backend = backends.get(role)
            answers: list[ModelResponse | InfrastructureError]
            if backend is None:
                answers = [InfrastructureError(f"no backend configured for role '{role}'")] * len(items)
            else:
                answers = backend.generate_each([i.request for i in items])  # type: ignore[misc]
            for item, answer in zip(items, answers, strict=True):
                # each episode gets its own answer, or its own request's failure (never another's)
                if isinstance(answer, InfrastructureError):
                    ok = advance(item, lambda item=item, error=answer: item.gen.throw(error))
                else:
                    ok = advance(item, lambda item=item, r=answer: item.gen.send(r))
                if ok:
                    still.append(item)
        live = still


def run_cell(
    domain: Domain,
    tasks: list[Task],
    agent: Agent,
    user: UserSimulator,
    settings: EpisodeSettings,
    trials: int,
    base_seed: int,
    store: EpisodeStore,
    backends: dict[str, Backend] | None = None,
    max_in_flight: int = 1,
    cell_hash: str = "",
    infra_retries: int = 2,
    progress: bool = True,
    evaluator: Evaluator | None = None,
    first_trial: int = 0,
    write_behind: int = DEFAULT_MAX_PENDING,
) -> EpisodeStore:
    """Run every (task, trial) not yet in ``store``; infrastructure failures are retried.

    ``write_behind``: finished episodes are made durable by a writer thread, at most that many
    not yet fsynced at any time (what a SIGKILL may lose; see store_writer). Every episode is
    on disk when this returns, also when it raises. 0 writes and fsyncs each episode in the
    driver before the next one starts.
    """
    if trials < 1:
        raise ValueError(f"trials: expected an integer >= 1, got {trials!r}")
    evaluator = evaluator or Evaluator(domain, tau2_parity=settings.tau2_compat)
    trial_ids = range(first_trial, first_trial + trials)
    todo = [(task, trial) for trial in trial_ids for task in tasks if not store.has(task.id, trial)]
    bar = _progress(len(todo), f"{domain.name} K={settings.max_errors}{' repair' if settings.repair else ''}", progress)

    writer = StoreWriter(store, max_pending=write_behind) if write_behind > 0 else None
    append = writer.append if writer is not None else store.append
    try:
        for attempt in range(infra_retries + 1):
            failed: list[tuple[Task, int]] = []
            last_try = attempt == infra_retries

            def done(record: EpisodeRecord, last_try: bool = last_try, failed: list = failed) -> None:
                record.cell = cell_hash
                if record.termination == Termination.INFRASTRUCTURE_ERROR.value and not last_try:
                    failed.append((by_id[record.task_id], record.trial))
                    return
                append(record)
                if bar is not None:
                    bar.update(1)

            by_id = {t.id: t for t in tasks}
            episodes = (
                Episode(domain, task, agent, user, settings, episode_seed(base_seed, task.id, trial), trial, evaluator)
                for task, trial in todo
            )
            drive(episodes, backends, done, max_in_flight=max_in_flight)
            if not failed:
                break
            todo = failed
    finally:
        if writer is not None:
            writer.close()
    if bar is not None:
        bar.close()
    return store


def _progress(total: int, label: str, enabled: bool) -> Any:
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit="ep", file=sys.stderr, dynamic_ncols=True, leave=False)
