"""flatscore: what 4-bit quantization does to multi-turn LLM agents, measured per error channel."""

__version__ = "0.1.0"
