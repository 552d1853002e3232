"""Fixtures shared by the backend tests: one torch thread, a cached tiny model, a fault server."""

from __future__ import annotations

import pytest

from flatscore.backends.testing import fake_server_command, tiny_model_cached, write_fake_server


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Tiny models gain nothing from threads; on a shared 2-core box they lose a lot (spinning)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return tiny_model_cached(tmp_path_factory.getbasetemp() / "models")


@pytest.fixture
def fake_server(tmp_path):
    """Factory: ``fake_server(mode, *extra_args) -> (command, request_log_path)``."""
    script = write_fake_server(tmp_path / "fake_openai_server.py")
    count = {"n": 0}

    def make(mode: str = "ok", *extra: str):
        count["n"] += 1
        log = tmp_path / f"requests{count['n']}.log"
        return fake_server_command(script, log, mode, *extra), log

    return make
