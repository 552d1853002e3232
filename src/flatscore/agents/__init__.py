"""Agents (expert, noisy expert, LLM) and user simulators (scripted, LLM)."""
