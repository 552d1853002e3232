"""The retail domain bound to a data folder in tau2-bench's layout."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError

from ..base import Domain, DomainDataError
from ..cow import CopyOnAccessDict
from ..environment import Environment
from ..generated import GeneratorSettings
from .data_model import Order, Product, RetailDB, User
from .db_builder import IDENTITY_SHAPES
from .task_maker import TASK_KINDS
from .task_maker_base import USER_DETAIL_FORMS
from .tools import RetailTools

POLICY_FILES = ("policy.md", "main_policy.md")

# Parsed databases by (path, mtime, size): constructing many domains over one folder parses once.
_DB_CACHE: dict[tuple[str, int, int], dict[str, Any]] = {}
_DB_LOCK = threading.Lock()


def _pristine_db(path: Path) -> dict[str, Any]:
    """The plain (validated, then dumped) form of ``db.json``; fresh DBs are validated from it."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    with _DB_LOCK:
        cached = _DB_CACHE.get(key)
        if cached is None:
            try:
                db = RetailDB.load(path)
            except ValidationError as exc:
                first = exc.errors()[0]
                loc = ".".join(str(p) for p in first["loc"])
                raise DomainDataError(f"retail: {path} field '{loc}': {first['msg']}") from exc
            except ValueError as exc:
                raise DomainDataError(f"retail: {path} is not readable JSON: {exc}") from exc
            cached = db.model_dump()
            _DB_CACHE[key] = cached
        return cached


class RetailDomain(Domain):
    """tau2-bench's retail domain: users, products with variants, orders; agent-only tools."""

    name: ClassVar[str] = "retail"
    dual_control: ClassVar[bool] = False
    IDENTITY_SHAPES: ClassVar[tuple[str, ...]] = IDENTITY_SHAPES
    TASK_KINDS: ClassVar[tuple[str, ...] | None] = TASK_KINDS
    USER_DETAIL_FORMS: ClassVar[tuple[str, ...]] = USER_DETAIL_FORMS

    def __init__(self, data_dir: Path | str) -> None:
        super().__init__(data_dir)
        db_path = self.data_dir / "db.json"
        if not db_path.is_file():
            raise DomainDataError(f"retail: no db.json in {self.data_dir}")
        self._plain_db = _pristine_db(db_path)
        self._pristine: RetailDB | None = None
        #: digests of the pristine records, by collection: shared by every fresh DB's collections
        self._pristine_digests: dict[str, dict[str, str]] = {"products": {}, "users": {}, "orders": {}}
        policy_path = next((self.data_dir / n for n in POLICY_FILES if (self.data_dir / n).is_file()), None)
        if policy_path is None:
            raise DomainDataError(f"retail: no policy.md in {self.data_dir}")
        self._policy = policy_path.read_text()

    @property
    def policy(self) -> str:
        return self._policy

    def pristine_db(self) -> RetailDB:
        """The database validated once; shared by every fresh DB, so it must never be mutated."""
        if self._pristine is None:
            self._pristine = RetailDB.model_validate(self._plain_db)
        return self._pristine

    def fresh_db(self) -> RetailDB:
        """A pristine database that shares no mutable object with any other *once accessed*.

        Its three collections are :class:`~flatscore.domains.cow.CopyOnAccessDict` over the
        records of :meth:`pristine_db`: a record is validated again from the cached plain dump
        (exactly what validating the whole database did) only the first time the episode
        reaches it, so an episode pays for the few records it touches instead of for the whole
        store, and keeps the garbage collector's heap small with many episodes in flight.
        """
        pristine = self.pristine_db()
        plain = self._plain_db

        def copier(collection: str, model: type[Order] | type[Product] | type[User]):  # type: ignore[no-untyped-def]
            records = plain[collection]
            return lambda key, _value: model.model_validate(records[key])

        return RetailDB.model_construct(
            products=CopyOnAccessDict(
                pristine.products, copier("products", Product), self._pristine_digests["products"]
            ),
            users=CopyOnAccessDict(pristine.users, copier("users", User), self._pristine_digests["users"]),
            orders=CopyOnAccessDict(pristine.orders, copier("orders", Order), self._pristine_digests["orders"]),
        )

    def fresh_environment(self) -> Environment:
        return Environment("retail", RetailTools(self.fresh_db()), None, self._policy)

    @classmethod
    def write_synthetic(cls, out_dir: Path, settings: GeneratorSettings) -> Path:
        from .generator import generate

        return generate(out_dir, settings)
