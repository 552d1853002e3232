"""DB scoring: the state digest of a graded episode, per-record (cached) vs whole-database dump.

tau2's DB reward compares the digest of the episode's final database with the gold replay's.
The old digest dumped and hashed every record of the database for every graded episode; the
current one (``flatscore.domains.environment.state_digest``) hashes one digest per record and
caches the digests of records the episode never touched (they are shared with the pristine
database). Both are timed here on the same environments, after a gold replay of each task
(what scoring digests), interleaved, on the synthetic retail DB and, where ../shared/tau2 is
present, on tau2's retail DB (2.8 MB). Asserted on the way: the new digest tells apart exactly
the states the old one does (equal for the gold replay over a fully validated DB and over the
copy-on-access DB; different from the pristine DB after a write).

Goal (this project's own, not the issue's): >= 5x on tau2's DB, where the dump cost ~29-45 ms.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import domain as synthetic_domain  # noqa: E402

from flatscore.domains.environment import _sha256_of_plain, state_digest, to_plain  # noqa: E402

TAU2_RETAIL = Path(__file__).resolve().parents[2] / "shared" / "tau2" / "retail"
GOAL = 5.0


def _old_digest(env) -> str:  # type: ignore[no-untyped-def]
    """The previous scheme: one canonical JSON dump of the whole state."""
    user_db = env.user_toolkit.db if env.user_toolkit is not None else None
    return _sha256_of_plain(to_plain({"agent": env.agent_toolkit.db, "user": user_db}))


def _replayed(env, task):  # type: ignore[no-untyped-def]
    """``env`` after the task's set-up and its gold actions (what scoring digests)."""
    env.apply_initial_state(task.initial_state)
    for action in task.actions:
        try:
            env.invoke(action.requestor, action.name, action.arguments)
        except Exception:
            pass  # gold replays may hold failing actions; scoring replays them the same way
    return env


def measure(label: str, domain, n_tasks: int, reps: int) -> float:  # type: ignore[no-untyped-def]
    from flatscore.domains.environment import Environment
    from flatscore.domains.retail import RetailTools
    from flatscore.domains.retail.data_model import RetailDB

    tasks = [
        t
        for t in domain.tasks()
        if any(a.name.startswith(("cancel", "modify", "return", "exchange")) for a in t.actions)
    ][:n_tasks]
    assert tasks, f"{label}: no task with a write"
    envs = [_replayed(domain.fresh_environment(), t) for t in tasks]
    pristine = domain.fresh_environment().state_hash()
    changed = 0
    for task, env in zip(tasks, envs):  # same states told apart as by the full dump
        full = Environment("retail", RetailTools(RetailDB.model_validate(domain._plain_db)), None, domain.policy)
        assert env.state_hash() == _replayed(full, task).state_hash(), task.id
        assert (env.state_hash() == pristine) == (_old_digest(env) == _old_digest(domain.fresh_environment())), task.id
        changed += env.state_hash() != pristine
    assert changed > 0, f"{label}: no replay changed the DB"
    old_t, new_t = [], []
    for _ in range(reps):
        for env in envs:
            t0 = time.perf_counter()
            _old_digest(env)
            old_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            state_digest({"agent": env.agent_toolkit.db, "user": None})
            new_t.append(time.perf_counter() - t0)
    old_ms, new_ms = 1e3 * statistics.median(old_t), 1e3 * statistics.median(new_t)
    ratio = old_ms / new_ms
    print(
        f"{label}: {len(envs)} replayed tasks ({changed} changed the DB), digest per graded episode: "
        f"whole dump {old_ms:.2f} ms, per-record cached {new_ms:.2f} ms -> x{ratio:.1f}"
    )
    return ratio


def main() -> None:
    from flatscore.domains import load_domain

    ratios = {"synthetic": measure("synthetic retail DB", synthetic_domain("retail"), 20, 5)}
    if (TAU2_RETAIL / "db.json").is_file():
        ratios["tau2"] = measure("tau2 retail DB", load_domain("retail", TAU2_RETAIL), 10, 3)
    else:
        print(f"tau2's retail DB not found at {TAU2_RETAIL}: measuring the synthetic DB only")
    key = "tau2" if "tau2" in ratios else "synthetic"
    load1 = os.getloadavg()[0]
    verdict = "PASS" if ratios[key] >= GOAL else "MISS"
    print(f"RESULT state_digest ratio={ratios[key]:.1f} goal>={GOAL:.0f} {verdict} db={key} load1={load1:.1f}")


if __name__ == "__main__":
    main()
