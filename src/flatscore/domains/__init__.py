"""Domains by name. Imports are lazy so that a domain's dependencies load only when used."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

from .base import Domain, DomainDataError

_REGISTRY = {
    "retail": "flatscore.domains.retail:RetailDomain",
    "telecom": "flatscore.domains.telecom:TelecomDomain",
}

DOMAIN_NAMES = tuple(_REGISTRY)


def domain_class(name: str) -> type[Domain]:
    if name not in _REGISTRY:
        raise DomainDataError(f"unknown domain '{name}': expected one of {', '.join(DOMAIN_NAMES)}")
    module, attr = _REGISTRY[name].split(":")
    return getattr(import_module(module), attr)


def load_domain(name: str, data_dir: Path | str) -> Domain:
    return domain_class(name)(data_dir)


__all__ = ["DOMAIN_NAMES", "Domain", "DomainDataError", "domain_class", "load_domain"]
