"""Tool registry: Python methods become agent/user tools with generated JSON schemas.

A tool is a method decorated with :func:`tool`. Its type hints are turned into a pydantic
model once (when the toolkit class is created), so that the JSON schema shown to the model
and the validation applied to the model's arguments come from the same source and can
never disagree. tau2-bench does no schema validation (it calls the Python function and
reports the TypeError text); flatscore validates first so that a wrong argument is
classified as ``invalid_arguments`` rather than as a domain error.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

Side = Literal["assistant", "user"]


class ToolError(Exception):
    """A domain error raised by a tool ("Order not found"): the call was well formed."""


class ArgumentsError(Exception):
    """The arguments do not fit the tool's schema (unknown, missing or wrongly typed)."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, the side that may call it, its argument model and description."""

    name: str
    side: Side
    description: str
    arguments_model: type[BaseModel]
    method_name: str
    mutates: bool

    def openai_schema(self) -> dict[str, Any]:
        """The tool in OpenAI function-calling form (what chat templates and vLLM expect)."""
        params = self.arguments_model.model_json_schema()
        params.pop("title", None)
        for prop in params.get("properties", {}).values():
            prop.pop("title", None)
        params.setdefault("properties", {})
        params.setdefault("required", [])
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    def signature(self) -> str:
        """A compact one-line signature, e.g. ``get_order_details(order_id: str)``."""
        props = self.openai_schema()["function"]["parameters"]["properties"]
        parts = []
        for arg, schema in props.items():
            parts.append(f"{arg}: {_short_type(schema)}")
        return f"{self.name}({', '.join(parts)})"


def _short_type(schema: dict[str, Any]) -> str:
    if "type" in schema:
        if schema["type"] == "array":
            return f"list[{_short_type(schema.get('items', {}))}]"
        return {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "object": "dict"}.get(
            schema["type"], schema["type"]
        )
    if "enum" in schema:
        return "|".join(repr(v) for v in schema["enum"])
    if "anyOf" in schema:
        return "|".join(_short_type(s) for s in schema["anyOf"])
    return "any"


def tool(func: Callable | None = None, *, mutates: bool = False) -> Any:
    """Mark a toolkit method as a tool. ``mutates`` tells whether it writes state."""

    def mark(f: Callable) -> Callable:
        f.__flatscore_tool__ = {"mutates": mutates}  # type: ignore[attr-defined]
        return f

    return mark(func) if func is not None else mark


def _arguments_model(cls_name: str, method: Callable) -> type[BaseModel]:
    hints = get_type_hints(method)
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(method).parameters.items():
        if name == "self":
            continue
        annotation = hints.get(name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (annotation, default)
    return create_model(  # type: ignore[call-overload]
        f"{cls_name}_{method.__name__}_args",
        __config__=ConfigDict(extra="forbid", strict=False),
        **fields,
    )


def _description(method: Callable) -> str:
    doc = inspect.getdoc(method) or method.__name__
    return doc.strip()


class Toolkit:
    """Base class of a side's tools over one shared state object.

    Subclasses set ``side`` and decorate methods with :func:`tool`. ``specs`` is built once
    per class; instances hold the mutable state (``self.db``).
    """

    side: ClassVar[Side] = "assistant"
    specs: ClassVar[dict[str, ToolSpec]] = {}
    #: True once the toolkit answers as tau2 does (parity mode): the few tool bodies where tau2
    #: behaves otherwise (a bug it has, a rounding it skips) read it; see docs/tau2-parity.md.
    tau2_parity: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        specs: dict[str, ToolSpec] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                meta = getattr(value, "__flatscore_tool__", None)
                if meta is None:
                    continue
                specs[attr] = ToolSpec(
                    name=attr,
                    side=cls.side,
                    description=_description(value),
                    arguments_model=_arguments_model(cls.__name__, value),
                    method_name=attr,
                    mutates=meta["mutates"],
                )
        cls.specs = specs

    def __init__(self, db: Any) -> None:
        self.db = db

    @classmethod
    def tool_names(cls) -> list[str]:
        return list(cls.specs)

    @classmethod
    def openai_schemas(cls) -> list[dict[str, Any]]:
        return [spec.openai_schema() for spec in cls.specs.values()]

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Validate ``arguments`` against the tool's model, then call it.

        Raises KeyError for an unknown name, ArgumentsError for bad arguments and ToolError
        (or any exception from the tool body) for domain failures.
        """
        spec = self.specs[name]
        try:
            parsed = spec.arguments_model.model_validate(arguments)
        except ValidationError as exc:
            raise ArgumentsError(_validation_summary(name, exc)) from exc
        kwargs = {field: getattr(parsed, field) for field in spec.arguments_model.model_fields}
        return getattr(self, spec.method_name)(**kwargs)


def _validation_summary(tool_name: str, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<arguments>"
        problems.append(f"{loc}: {err['msg']}")
    return f"Invalid arguments for {tool_name}: " + "; ".join(problems)


def render_result(value: Any) -> str:
    """Tool results as text, the way the model sees them (JSON for structured values)."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, default=_json_default, ensure_ascii=False)


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)
