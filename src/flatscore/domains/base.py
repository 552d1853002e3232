"""The domain interface: where a domain's data lives, how tasks and fresh environments are made.

A domain reads a folder in tau2-bench's layout (``db.json`` or ``db.toml``, a policy file,
``tasks*.json``, optional ``split_tasks.json``). The synthetic generator writes the very same
layout, so generated and real data go through one loading path.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from .environment import Environment
from .generated import GeneratorSettings
from .tasks import Task, TaskFileError, load_tasks, task_split


class DomainDataError(ValueError):
    """A domain data folder is missing files or holds data of the wrong shape."""


class Domain(ABC):
    """One tau-bench-style domain bound to a data folder."""

    name: ClassVar[str]
    #: True where the user has tools of their own (telecom): the engine then runs user tool calls.
    dual_control: ClassVar[bool] = False

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir)
        if not self.data_dir.is_dir():
            raise DomainDataError(f"{self.name}: data folder not found: {self.data_dir}")
        self._tasks: dict[str | None, list[Task]] = {}

    # -- tasks ---------------------------------------------------------------------------
    def task_file(self) -> Path:
        for name in ("tasks.json", "tasks_train.json"):
            candidate = self.data_dir / name
            if candidate.exists():
                return candidate
        raise TaskFileError(f"{self.name}: no tasks.json or tasks_train.json in {self.data_dir}")

    def tasks(self, split: str | None = None) -> list[Task]:
        """All tasks, or those of a split named in ``split_tasks.json``."""
        if split not in self._tasks:
            tasks = load_tasks(self.task_file())
            ids = task_split(self.data_dir, split)
            if ids is not None:
                tasks = [t for t in tasks if t.id in ids]
            self._tasks[split] = tasks
        return self._tasks[split]

    def task(self, task_id: str) -> Task:
        for candidate in self.tasks():
            if candidate.id == task_id:
                return candidate
        raise KeyError(f"{self.name}: no task with id '{task_id}'")

    # -- environments --------------------------------------------------------------------
    @abstractmethod
    def fresh_environment(self) -> Environment:
        """An environment over a pristine copy of the domain's databases."""

    def environment_for(self, task: Task) -> Environment:
        """A fresh environment with the task's initial state applied."""
        env = self.fresh_environment()
        env.apply_initial_state(task.initial_state)
        return env

    @property
    @abstractmethod
    def policy(self) -> str:
        """The agent's policy text (tau2's policy.md / main_policy.md)."""

    # -- synthetic data ------------------------------------------------------------------
    #: How the generator may draw customers' identities: ``pool`` (names from a fixed list) in
    #: every domain; retail also makes them up (``open``) for the demo model's extra databases.
    IDENTITY_SHAPES: ClassVar[tuple[str, ...]] = ("pool",)

    #: How a generated task may tell the user their identifying details and order ids: ``prose``
    #: ("You are Liam Wilson, and your zip code is 02125.") in every domain; retail also ``json``,
    #: in the form the identifying call takes ({"first_name": "Liam", ...}).
    USER_DETAIL_FORMS: ClassVar[tuple[str, ...]] = ("prose",)

    #: The task kinds a domain's generator can draw by name (retail's); None: it draws none by kind.
    TASK_KINDS: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def generate(
        cls,
        out_dir: Path,
        seed: int,
        n_tasks: int = 120,
        eval_fraction: float = 0.3,
        ids: str = "tau2",
        task_kinds: Sequence[str] | None = None,
        identities: str = "pool",
        user_details: str = "prose",
    ) -> Path:
        """Write a seeded synthetic data folder in tau2's layout, with a train/test split.

        ``task_kinds``: the task kinds to draw (None: all); a domain without kinds refuses a list.
        ``identities``: one of :attr:`IDENTITY_SHAPES`, how customers' names and zips are drawn.
        ``user_details``: one of :attr:`USER_DETAIL_FORMS`, how a task tells the user their details.
        Each is refused here, before anything is written, where the domain cannot draw it.
        """
        if user_details not in cls.USER_DETAIL_FORMS:
            raise ValueError(
                f"user_details: {cls.name}'s generator writes the user's details as one of "
                f"{list(cls.USER_DETAIL_FORMS)}, got {user_details!r}"
            )
        if identities not in cls.IDENTITY_SHAPES:
            raise ValueError(
                f"identities: {cls.name}'s generator draws names as one of {list(cls.IDENTITY_SHAPES)}, "
                f"got {identities!r}"
            )
        if task_kinds is not None and cls.TASK_KINDS is None:
            raise ValueError(
                f"task_kinds: only retail's generator draws tasks by kind; {cls.name}'s are drawn otherwise, "
                f"so leave domains.{cls.name}.task_kinds unset"
            )
        settings = GeneratorSettings(
            seed=seed,
            n_tasks=n_tasks,
            eval_fraction=eval_fraction,
            ids=ids,
            task_kinds=None if task_kinds is None else tuple(task_kinds),
            identities=identities,
            user_details=user_details,
        )
        return cls.write_synthetic(Path(out_dir), settings)

    @classmethod
    @abstractmethod
    def write_synthetic(cls, out_dir: Path, settings: GeneratorSettings) -> Path:
        """The domain's generator: write the folder that :meth:`generate` describes."""
