"""The retail domain (tau2-bench's data format and tool semantics) and its synthetic generator."""

from .data_model import RetailDB
from .domain import RetailDomain
from .generator import generate
from .tools import RetailTools

__all__ = ["RetailDB", "RetailDomain", "RetailTools", "generate"]
