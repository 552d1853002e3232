"""Checks of a study config against the file system, before any job runs.

The schema says what a config may hold; it cannot say that a domain folder exists, that a
local model folder holds a model, or that the results folder can be written. Found inside a job,
such a problem arrives late (after Snakemake already removed that job's previous output) and
as a traceback; found here, it is one line naming the field, and nothing has been touched.
Nothing here creates a file: a dry run stays a dry run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from flatscore.config_defaults import ANY_KEY, schema_default
from flatscore.gguf_header import (
    CHAT_TEMPLATE_KEY,
    GGUFHeaderError,
    file_sha256,
    has_tool_template,
    metadata_string,
)

#: Files a tau2-bench domain folder must hold for flatscore to load it.
DOMAIN_FILES = ("tasks.json",)


def _looks_local(model_id: str) -> bool:
    """A Hugging Face id is ``org/name``; a local folder is absolute, relative with ./ or ../, or ~."""
    return model_id.startswith(("/", "./", "../", "~"))


def _writable(path: Path) -> bool:
    """Whether ``path`` can be written or created: its nearest existing ancestor is a writable folder."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)


def file_problems(config: Mapping[str, Any]) -> Iterator[str]:
    """Each problem as ``config: <field>: <what is wrong> (<what was expected>)``."""
    for name, spec in config.get("domains", {}).items():
        if spec.get("source") != "path":
            continue
        path = Path(os.path.expanduser(str(spec.get("path", ""))))
        if not path.is_dir():
            yield f"config: domains.{name}.path: {path} is not a folder (expected a tau2-bench domain data folder)"
            continue
        for file in DOMAIN_FILES:
            if not (path / file).is_file():
                yield f"config: domains.{name}.path: {path} has no {file} (expected a tau2-bench domain data folder)"
    for name, spec in config.get("models", {}).items():
        local = {"id": spec.get("id")} if spec.get("kind") == "hf" else {}
        local.update({f"quantized.{p}": v for p, v in (spec.get("quantized") or {}).items()})
        for field, model_id in local.items():
            if not model_id or not _looks_local(str(model_id)):
                continue
            folder = Path(os.path.expanduser(str(model_id)))
            if not (folder / "config.json").is_file():
                yield (
                    f"config: models.{name}.{field}: {folder} holds no config.json "
                    "(expected a Hugging Face model folder, or an id such as org/name)"
                )
        if spec.get("kind") == "hf" and spec.get("gguf"):
            yield from gguf_problems(name, spec)
    results = Path(os.path.expanduser(str(config.get("results", "results"))))
    if not _writable(results):
        yield f"config: results: {results} cannot be written (expected a folder this user may create or write)"


#: The domain keys only retail's synthetic generator has; their schema defaults are what every domain has.
RETAIL_ONLY = ("task_kinds", "identities", "user_details")


def domain_problems(config: Mapping[str, Any]) -> Iterator[str]:
    """A domain block's problems the schema cannot see: only retail's synthetic generator draws
    tasks by kind, makes up identities or writes the user's details as JSON (telecom's tasks come
    from its fault list, and tau2's data is what it is)."""
    for name, spec in (config.get("domains") or {}).items():
        spec = spec or {}
        for key in RETAIL_ONLY:
            usual = schema_default("domains", ANY_KEY, key)
            if spec.get(key, usual) == usual:
                continue
            if name != "retail":
                yield f"config: domains.{name}.{key}: only retail's generator has {key} (expected no {key} here)"
            elif spec.get("source") != "synthetic":
                yield (
                    f"config: domains.{name}.{key}: only synthetic data has {key} "
                    f"(expected source: synthetic, or no {key} with source: {spec.get('source')})"
                )


def gguf_problems(name: str, spec: Mapping[str, Any]) -> Iterator[str]:
    """A GGUF model the conversion would refuse, found before any job: the file is missing, is not
    the one ``gguf_sha256`` names, or its chat template renders no tools.

    The checksum is computed on every parse, not cached: 1-2 s for the 491 MB Qwen file, and a
    cache would be a file written by a dry run. The template is read from the header alone.
    """
    field = f"config: models.{name}.gguf"
    path = Path(os.path.expanduser(str(spec["gguf"])))
    if not path.is_file():
        yield f"{field}: {path} is not a file (expected a GGUF model file; the Qwen one: python scripts/assemble_qwen_gguf.py)"
        return
    expected = spec.get("gguf_sha256")
    if expected:
        actual = file_sha256(path)
        if actual != expected:
            yield f"{field}: {path} has sha256 {actual}, not gguf_sha256 {expected} (expected the file it names)"
            return
    try:
        template = metadata_string(path, CHAT_TEMPLATE_KEY)
    except (GGUFHeaderError, UnicodeDecodeError) as exc:
        yield f"{field}: {path} cannot be read as GGUF: {exc}"
        return
    if not has_tool_template(template):
        yield f"{field}: {path} has a chat template that renders no tools (expected a tool-calling instruct model)"


def _role_problems(models: Mapping[str, Any], user_model: str | None) -> Iterator[str]:
    """A model of ``role: user`` that is not the LLM user would be planned for nothing, and a study
    needs at least one agent to evaluate."""
    for name, spec in models.items():
        if (spec or {}).get("role") == "user" and name != user_model:
            yield (
                f"config: models.{name}.role: user, but user.model is {user_model or 'not set'} "
                "(expected role: agent, or user.kind: llm with user.model naming it)"
            )
    if models and all((spec or {}).get("role") == "user" for spec in models.values()):
        yield "config: models: every model has role user; at least one must be an agent (role: agent, the default)"


def user_problems(config: Mapping[str, Any]) -> Iterator[str]:
    """The ``user`` block's problems the schema cannot see, each as one line naming the field.

    An LLM user names a key of ``models`` (served at full precision by the workflow's serve job,
    so the study must serve: ``backend.serve``) or an already running server with its model name.
    """
    user = config.get("user") or {}
    kind = user.get("kind", "scripted")
    model, base_url = user.get("model"), user.get("base_url")
    models = config.get("models") or {}
    if kind != "llm":
        for key in ("model", "base_url", "served_model", "prompt"):
            if user.get(key):
                yield f"config: user.{key}: only an LLM user has one (expected user.kind: llm, or no user.{key})"
                return
        yield from _role_problems(models, None)
        return
    if model and base_url:
        yield "config: user.base_url: give user.model (served by the workflow) or user.base_url, not both"
    elif not model and not base_url:
        yield "config: user.model: kind llm needs a model (a key of models) or base_url with served_model"
    elif base_url and not user.get("served_model"):
        yield "config: user.served_model: required with user.base_url (the user model's name at that server)"
    elif model and user.get("served_model"):
        yield "config: user.served_model: only with user.base_url (user.model is served as models.<name>.served_model)"
    elif model and model not in models:
        yield f"config: user.model: '{model}' is not a key of models (known: {', '.join(models) or 'none'})"
    elif model and not (config.get("backend") or {}).get("serve"):
        yield "config: user.model: needs backend.serve (its server starts as the agents' do), or give user.base_url"
    yield from _role_problems(models, model)
    prompt = user.get("prompt")
    if prompt and not Path(os.path.expanduser(str(prompt))).is_file():
        yield f"config: user.prompt: {prompt} is not a file (expected the user's guidelines as text)"
