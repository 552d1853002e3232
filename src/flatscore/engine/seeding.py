"""Stable seeds: everything random in an episode is a function of (episode seed, turn, role).

This is what makes budget curves derivable: the episode run with budget 10 and the one run
with budget 2 see the same random numbers at every turn, so they are identical up to the
moment the smaller budget ends the episode.
"""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any parts, stable across processes and Python versions."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def episode_seed(base_seed: int, task_id: str, trial: int) -> int:
    return derive_seed("episode", base_seed, task_id, trial)


def turn_seed(episode: int, turn: int, role: str) -> int:
    return derive_seed("turn", episode, turn, role)


def replicate_seed(base_seed: int, replicate: int) -> int:
    """The base seed of an A/A replicate of a cell: ``base_seed`` itself for replicate 0.

    Replicate 0 is the cell as it always ran (its episodes keep their seeds, so existing results
    stay valid); replicate r > 0 reruns the same settings with seeds independent of it, which is
    what measuring run-to-run noise (the A/A noise floor) needs.
    """
    return base_seed if replicate == 0 else derive_seed("replicate", base_seed, replicate)
