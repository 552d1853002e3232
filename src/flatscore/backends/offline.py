"""The environment every model server of a study starts in: no hub, no telemetry.

Weights come from local folders only (no model downloads at run time), and a server that
reached for the hub would hang or fail on a machine without network; both server kinds
(vLLM, ``transformers serve``) take these variables from here, so they cannot drift apart.
"""

from __future__ import annotations

#: Variables that keep Hugging Face libraries and vLLM off the network, and tokenizers quiet
#: in forked workers.
OFFLINE_ENV: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

__all__ = ["OFFLINE_ENV"]
