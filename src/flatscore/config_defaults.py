"""Defaults of the study config, read from its one home: ``workflow/schemas/config.schema.yaml``.

The workflow validates its config against that schema (``snakemake.utils.validate`` fills the
defaults in); the command line takes the defaults of its matching options from the same file,
so a default is written once and the two can never disagree. The package reaches the schema
through ``flatscore/config.schema.yaml``, a link to the workflow's file (a wheel carries a copy).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml

#: A path step meaning "any key of this map" (the schema's ``additionalProperties``).
ANY_KEY = "*"


@functools.cache
def config_schema() -> dict[str, Any]:
    """The study config's JSON schema, parsed once."""
    return yaml.safe_load(resources.files("flatscore").joinpath("config.schema.yaml").read_text(encoding="utf-8"))


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    """Follow a local ``$ref`` (``#/$defs/name``) to the definition it names, keeping the keys
    written beside it: ``quantization.int4`` narrows the shared scheme and gives its own default,
    and validation applies both, so the defaults read here must see both too (a property written
    beside the ``$ref`` overlays the definition's property of that name)."""
    while "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise ValueError(f"config schema: only local $ref is supported, got {ref!r}")
        target: Any = config_schema()
        for part in ref[2:].split("/"):
            target = target[part]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        merged = {**target, **siblings}
        if "properties" in target and "properties" in siblings:
            merged["properties"] = {
                name: {**target["properties"].get(name, {}), **siblings["properties"].get(name, {})}
                for name in {**target["properties"], **siblings["properties"]}
            }
        node = merged
    return node


def _schema_node(path: tuple[str, ...]) -> dict[str, Any]:
    """The schema's node for the config key at ``path``; KeyError naming the path where it has none."""
    node = _resolve(config_schema())
    for depth, step in enumerate(path):
        if step == ANY_KEY:
            child = node.get("additionalProperties")
        else:
            child = node.get("properties", {}).get(step)
        if not isinstance(child, dict):
            raise KeyError(f"config schema has no key {'.'.join(path[: depth + 1])}")
        node = _resolve(child)
    return node


def schema_default(*path: str) -> Any:
    """The default the schema gives the config key at ``path`` (``ANY_KEY`` for a map's entries).

    Raises KeyError naming the path where the schema has no such key or no default for it:
    a CLI option that claims a config default must have one there.
    """
    node = _schema_node(path)
    if "default" not in node:
        raise KeyError(f"config schema gives {'.'.join(path)} no default")
    return node["default"]


def schema_choices(*path: str) -> list[Any]:
    """The values the schema allows the config key at ``path`` (its ``enum``), for a CLI option's
    ``choices``: written once, like the default. KeyError naming the path where it has no enum."""
    node = _schema_node(path)
    if "enum" not in node:
        raise KeyError(f"config schema gives {'.'.join(path)} no enum")
    return list(node["enum"])
