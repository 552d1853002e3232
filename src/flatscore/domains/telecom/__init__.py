"""Telecom (dual control): the agent works on the carrier's records, the user on their own phone.

Reads tau2-bench's telecom data (``db.toml``, ``user_db.toml``, ``main_policy.md`` +
``tech_support_manual.md``, ``tasks*.json``) or the same layout written by
:func:`~flatscore.domains.telecom.generator.generate` (``db.json``, ``user_db.json``, ``policy.md``).
"""

from .domain import TelecomDomain, compose_tau2_policy
from .environment import ScenarioError, TelecomEnvironment
from .tools import TelecomTools
from .user_tools import TelecomUserTools

__all__ = [
    "ScenarioError",
    "TelecomDomain",
    "TelecomEnvironment",
    "TelecomTools",
    "TelecomUserTools",
    "compose_tau2_policy",
]
