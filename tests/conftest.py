"""Shared fixtures: tau2-bench's reference data (skipped where absent) and synthetic domains."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TAU2 = REPO.parent / "shared" / "tau2"


def tau2_dir(domain: str) -> Path:
    """The real tau2-bench data of ``domain``; skips the test, saying why, where it is absent."""
    path = TAU2 / domain
    if not (path / "tasks_train.json").exists():
        pytest.skip(f"tau2-bench reference data not found at {path} (../shared/tau2 is absent on this machine)")
    return path


@pytest.fixture(scope="session")
def synthetic_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Seeded synthetic data of both domains, generated once per test session."""
    from flatscore.domains import domain_class

    root = tmp_path_factory.mktemp("synthetic")
    return {name: domain_class(name).generate(root / name, seed=7) for name in ("retail", "telecom")}


@pytest.fixture
def tau2_data():
    """``tau2_data(domain)``: the real tau2-bench data folder, or skip saying why (see tau2_dir)."""
    return tau2_dir
