"""The telecom domain bound to a data folder in tau2-bench's layout."""

from __future__ import annotations

import json
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from ..base import Domain, DomainDataError
from ..generated import GeneratorSettings
from .data_model import TelecomDB
from .environment import TelecomEnvironment
from .tools import TelecomTools
from .user_data_model import TelecomUserDB
from .user_tools import TelecomUserTools


def compose_tau2_policy(main_policy: str, tech_support: str) -> str:
    """The agent policy the way tau2-bench's telecom environment assembles it."""
    return (
        "<main_policy>\n"
        + main_policy
        + "\n</main_policy>\n"
        + "<tech_support_policy>\n"
        + tech_support
        + "\n</tech_support_policy>"
    )


def _read_structured(path: Path) -> Any:
    try:
        if path.suffix == ".toml":
            with path.open("rb") as fh:
                return tomllib.load(fh)
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # tomllib/json decode errors are ValueErrors
        raise DomainDataError(f"telecom: cannot read {path}: {exc}") from exc


@lru_cache(maxsize=32)
def _parse_cached(path_str: str, mtime_ns: int, size: int, model_name: str) -> BaseModel:
    path = Path(path_str)
    model: type[BaseModel] = {"agent": TelecomDB, "user": TelecomUserDB}[model_name]
    raw = _read_structured(path)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise DomainDataError(f"telecom: {path} field '{loc}': {first['msg']}") from exc


def _parse(path: Path, kind: str) -> BaseModel:
    stat = path.stat()
    return _parse_cached(str(path.resolve()), stat.st_mtime_ns, stat.st_size, kind)


class TelecomDomain(Domain):
    """tau2-bench's telecom domain: the agent fixes the user's phone together with the user."""

    name: ClassVar[str] = "telecom"
    dual_control: ClassVar[bool] = True

    def _find(self, *names: str) -> Path | None:
        for name in names:
            candidate = self.data_dir / name
            if candidate.exists():
                return candidate
        return None

    def _agent_db(self) -> TelecomDB:
        path = self._find("db.json", "db.toml")
        if path is None:
            raise DomainDataError(f"telecom: no db.json or db.toml in {self.data_dir}")
        return _parse(path, "agent")  # type: ignore[return-value]

    def _user_db(self) -> TelecomUserDB:
        path = self._find("user_db.json", "user_db.toml")
        if path is None:
            raise DomainDataError(f"telecom: no user_db.json or user_db.toml in {self.data_dir}")
        return _parse(path, "user")  # type: ignore[return-value]

    @property
    def policy(self) -> str:
        if not hasattr(self, "_policy"):
            main, manual = self.data_dir / "main_policy.md", self.data_dir / "tech_support_manual.md"
            if main.exists() and manual.exists():
                self._policy = compose_tau2_policy(main.read_text(), manual.read_text())
            elif (self.data_dir / "policy.md").exists():
                self._policy = (self.data_dir / "policy.md").read_text()
            else:
                raise DomainDataError(
                    f"telecom: no policy in {self.data_dir} (need main_policy.md + tech_support_manual.md, or policy.md)"
                )
        return self._policy

    def fresh_environment(self) -> TelecomEnvironment:
        agent = TelecomTools(self._agent_db().model_copy(deep=True))
        user = TelecomUserTools(self._user_db().model_copy(deep=True))
        return TelecomEnvironment(agent, user, self.policy)

    @classmethod
    def write_synthetic(cls, out_dir: Path, settings: GeneratorSettings) -> Path:
        from .generator import generate

        return generate(out_dir, settings)
