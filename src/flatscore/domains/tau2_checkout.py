"""Tool descriptions and parameter schemas read from the user's tau2-bench checkout (parity mode).

In tau2, what a model reads about a tool is built from the tool function itself: its docstring
(first line, then the rest, then each ``Args:`` entry as a parameter description) and its type
hints, turned into a pydantic model called ``parameters`` whose JSON schema is sent. flatscore
never copies those texts: in parity mode it *reads* them at run time from the checkout the
user names (``tau2_checkout``), by parsing the source with :mod:`ast` (nothing of tau2 is
imported or executed), and builds the same pydantic model, so the schema is the one tau2 sends.

The type hints tau2 uses are resolved from the checkout too: builtins and ``typing`` forms, and
the domain's own enums and records (``NetworkModePreference``, ``APNSettings``), rebuilt from
their class bodies in the domain's data-model files.
"""

from __future__ import annotations

import ast
import copy
import enum
import hashlib
import inspect
import json
import re
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from .toolkit import ToolSpec

#: the toolkit class of each side, per domain, and the files that hold it and its types
_TOOLKITS = {
    "retail": {"assistant": ("tools.py", "RetailTools"), "user": None},
    "telecom": {"assistant": ("tools.py", "TelecomTools"), "user": ("user_tools.py", "TelecomUserTools")},
}
_MODEL_FILES = ("data_model.py", "user_data_model.py")
_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Returns|Return|Yields|Yield|Raises|Raise|Exceptions|Except|"
    r"Attributes|Attribute|Example|Examples|Note|Notes|Todo|Warning|Warnings)\s*:\s*$",
    re.M,
)
_PARAM = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_TYPING = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "dict": dict,
    "list": list,
    "tuple": tuple,
    "Any": Any,
    "None": type(None),
}
_GENERIC = {"List": List, "list": List, "Dict": Dict, "dict": Dict, "Tuple": Tuple, "tuple": Tuple}


class CheckoutError(ValueError):
    """The tau2 checkout is missing or does not hold what parity mode reads from it."""


@dataclass(frozen=True)
class Tau2Tool:
    """One tool as tau2 shows it: its OpenAI schema, and its place in tau2's tool list."""

    name: str
    schema: dict[str, Any]


def describe(docstring: str | None) -> tuple[str, dict[str, str]]:
    """A tool's description and its parameters' descriptions, read as tau2 reads a docstring.

    The description is the docstring's first line, then (after a blank line) the rest of the
    text before its first section; a parameter's description is its ``Args:`` entry, its
    continuation lines dedented.
    """
    text = inspect.cleandoc(docstring or "")
    first = _SECTION.search(text)
    head = text[: first.start()] if first else text
    short, _, rest = head.strip().partition("\n")
    description = short.strip() + ("\n\n" + rest.strip() if rest.strip() else "")
    params: dict[str, str] = {}
    for match in _SECTION.finditer(text):
        if match.group(1) not in ("Args", "Arguments", "Parameters", "Params"):
            continue
        following = _SECTION.search(text, match.end())
        body = inspect.cleandoc(text[match.end() : following.start() if following else len(text)])
        name, lines = None, []
        for line in body.splitlines() + [""]:
            entry = _PARAM.match(line) if line and not line[0].isspace() else None
            if entry or not line.strip():
                if name is not None:
                    params[name] = inspect.cleandoc("\n".join(lines))
                name, lines = (entry.group(1), [entry.group(3)]) if entry else (None, [])
            elif name is not None:
                lines.append(line)
    return description, params


class _TypeResolver:
    """Turns a type hint's AST into the Python type tau2's hint means, rebuilding the domain's
    enums and records from their class bodies (once each)."""

    def __init__(self, classes: dict[str, ast.ClassDef]) -> None:
        self.classes = classes
        self.built: dict[str, Any] = {}

    def resolve(self, node: ast.expr | None) -> Any:
        if node is None:
            return Any
        if isinstance(node, ast.Constant) and node.value is None:
            return type(None)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self.resolve(ast.parse(node.value, mode="eval").body)
        if isinstance(node, ast.Name):
            if node.id in _TYPING:
                return _TYPING[node.id]
            if node.id in self.classes:
                return self.build(node.id)
            raise CheckoutError(f"type {node.id!r} is not one parity mode can rebuild")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return Union[self.resolve(node.left), self.resolve(node.right)]  # noqa: UP007 (as tau2 writes it)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            inner = tuple(self.resolve(a) for a in args)
            origin = node.value.id
            if origin == "Optional":
                return Optional[inner[0]]  # noqa: UP045
            if origin == "Union":
                return Union[inner]  # noqa: UP007
            if origin in _GENERIC:
                return _GENERIC[origin][inner if len(inner) > 1 else inner[0]]
        raise CheckoutError(f"type hint {ast.unparse(node)!r} is not one parity mode can rebuild")

    def build(self, name: str) -> Any:
        if name not in self.built:
            node = self.classes[name]
            bases = {ast.unparse(b) for b in node.bases}
            if bases & {"Enum", "str, Enum"} or "Enum" in bases or any(b.endswith("Enum") for b in bases):
                members = {
                    t.targets[0].id: t.value.value
                    for t in node.body
                    if isinstance(t, ast.Assign)
                    and isinstance(t.targets[0], ast.Name)
                    and isinstance(t.value, ast.Constant)
                }
                self.built[name] = enum.Enum(name, members, type=str if "str" in bases else None)  # type: ignore[misc]
            else:
                self.built[name] = self._record(name, node, bases)
        return self.built[name]

    def _record(self, name: str, node: ast.ClassDef, bases: set[str]) -> type[BaseModel]:
        fields: dict[str, Any] = {}
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            fields[item.target.id] = (self.resolve(item.annotation), self._default(item.value))
        config = ConfigDict(extra="forbid") if "BaseModelNoExtra" in bases else ConfigDict()
        return create_model(name, __config__=config, __doc__=ast.get_docstring(node), **fields)  # type: ignore[call-overload]

    def _default(self, node: ast.expr | None) -> Any:
        if node is None:
            return ...
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "Field":
            default = self._value(node.args[0]) if node.args else ...
            keywords = {k.arg: self._value(k.value) for k in node.keywords if k.arg}
            if "default" in keywords:
                default = keywords.pop("default")
            return Field(default, **{k: v for k, v in keywords.items() if k == "description"})
        return self._value(node)

    def _value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.classes:
            return self.build(node.value.id)[node.attr]
        return ast.literal_eval(node)


def _class_defs(path: Path) -> dict[str, ast.ClassDef]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _is_tool(func: ast.FunctionDef) -> bool:
    for deco in func.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if ast.unparse(target) == "is_tool":
            return True
    return False


@lru_cache(maxsize=8)
def read_tools(checkout: str, domain: str, side: str) -> tuple[Tau2Tool, ...]:
    """The tools of one side of a domain, in tau2's order, as tau2 would show them.

    ``checkout`` is the tau2-bench folder (holding ``src/tau2``). Raises CheckoutError where the
    checkout lacks the domain's files or holds something parity mode cannot read.
    """
    folder = Path(checkout) / "src" / "tau2" / "domains" / domain
    where = _TOOLKITS.get(domain, {}).get(side)
    if where is None:
        return ()
    file_name, class_name = where
    if not (folder / file_name).is_file():
        raise CheckoutError(f"tau2 checkout {checkout}: no {folder / file_name}")
    classes: dict[str, ast.ClassDef] = {}
    for model_file in _MODEL_FILES:
        if (folder / model_file).is_file():
            classes.update(_class_defs(folder / model_file))
    toolkit = _class_defs(folder / file_name).get(class_name)
    if toolkit is None:
        raise CheckoutError(f"tau2 checkout {checkout}: no class {class_name} in {folder / file_name}")
    resolver = _TypeResolver(classes)
    tools = []
    for func in toolkit.body:
        if not (isinstance(func, ast.FunctionDef) and _is_tool(func)):
            continue
        tools.append(Tau2Tool(func.name, _schema(func, resolver)))
    return tuple(tools)


def _schema(func: ast.FunctionDef, resolver: _TypeResolver) -> dict[str, Any]:
    description, param_docs = describe(ast.get_docstring(func, clean=False))
    args = func.args.args[1:]  # self
    defaults = [None] * (len(args) - len(func.args.defaults)) + list(func.args.defaults)
    fields: dict[str, Any] = {}
    for arg, default_node in zip(args, defaults):
        default = ... if default_node is None else ast.literal_eval(default_node)
        if arg.arg in param_docs:
            default = Field(default, description=param_docs[arg.arg])
        fields[arg.arg] = (resolver.resolve(arg.annotation), default)
    parameters = create_model("parameters", **fields)  # type: ignore[call-overload]
    return {
        "type": "function",
        "function": {
            "name": func.name,
            "description": description or func.name,
            "parameters": parameters.model_json_schema(),
        },
    }


@dataclass(frozen=True, eq=False)
class Tau2DescribedSpec(ToolSpec):
    """A flatscore tool shown to the model with the schema tau2's checkout gives it."""

    tau2_schema: dict[str, Any] = field(default_factory=dict)

    def openai_schema(self) -> dict[str, Any]:
        return copy.deepcopy(self.tau2_schema)


def described_specs(specs: dict[str, ToolSpec], checkout: str, domain: str, side: str) -> dict[str, ToolSpec]:
    """``specs`` in tau2's order, each shown with tau2's description and parameter schema.

    Raises CheckoutError where the two tool sets differ: a tool tau2 shows that flatscore cannot
    run (or the reverse) would make the comparison meaningless.
    """
    tools = read_tools(str(checkout), domain, side)
    theirs, ours = [t.name for t in tools], set(specs)
    if set(theirs) != ours:
        raise CheckoutError(
            f"{domain} {side} tools differ from tau2 checkout {checkout}: only tau2 has {sorted(set(theirs) - ours)}, "
            f"only flatscore has {sorted(ours - set(theirs))}"
        )
    described: dict[str, ToolSpec] = {}
    for tool in tools:
        spec = specs[tool.name]
        base = {f.name: getattr(spec, f.name) for f in fields(ToolSpec)}
        base["description"] = tool.schema["function"]["description"]
        described[tool.name] = Tau2DescribedSpec(**base, tau2_schema=tool.schema)
    return described


def descriptions_digest(checkout: str, domain: str) -> str:
    """A digest of every schema the checkout gives the domain's tools (a cell's identity includes it)."""
    schemas = [t.schema for side in ("assistant", "user") for t in read_tools(str(checkout), domain, side)]
    return hashlib.sha256(json.dumps(schemas, sort_keys=True).encode()).hexdigest()
