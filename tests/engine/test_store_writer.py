"""Write-behind store writer: same bytes as synchronous appends, a hard bound on what is not
yet durable, errors surface, and a SIGKILL loses at most ``max_pending`` finished episodes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from flatscore.engine.records import EpisodeRecord
from flatscore.engine.store import EpisodeStore
from flatscore.engine.store_writer import StoreWriter


def _record(i: int) -> EpisodeRecord:
    return EpisodeRecord(
        task_id=f"t{i}",
        trial=0,
        seed=i,
        domain="retail",
        budget=4,
        repair=False,
        termination="agent_stop",
        reward=1.0,
        scored=True,
        reward_info={},
        errors_counted=0,
        channels={},
        error_events=[],
        agent_tool_calls=0,
        user_tool_calls=0,
        steps=1,
        messages=[{"role": "assistant", "content": "x" * i}],
    )


def test_same_bytes_as_synchronous_appends(tmp_path: Path) -> None:
    sync = EpisodeStore(tmp_path / "sync.jsonl")
    for i in range(50):
        assert sync.append(_record(i))
    store = EpisodeStore(tmp_path / "behind.jsonl")
    with StoreWriter(store, max_pending=8) as writer:
        for i in range(50):
            assert writer.append(_record(i))
        assert not writer.append(_record(3))  # already queued or stored: never twice
    assert (tmp_path / "behind.jsonl").read_bytes() == (tmp_path / "sync.jsonl").read_bytes()
    assert len(EpisodeStore(tmp_path / "behind.jsonl")) == 50


def test_pending_never_exceeds_the_bound_and_batches_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = EpisodeStore(tmp_path / "e.jsonl")
    gate = threading.Event()
    real = store.write_lines
    monkeypatch.setattr(store, "write_lines", lambda data: (gate.wait(), real(data)))
    writer = StoreWriter(store, max_pending=4)
    for i in range(4):
        writer.append(_record(i))
    blocked = threading.Thread(target=writer.append, args=(_record(4),))
    blocked.start()
    time.sleep(0.2)
    assert blocked.is_alive(), "a fifth pending episode must wait for the disk"
    assert writer._pending == 4
    gate.set()
    blocked.join(5)
    assert not blocked.is_alive()
    writer.close()
    assert len(list(EpisodeStore(tmp_path / "e.jsonl").records())) == 5
    assert writer.batches < 5  # the first write carried several episodes


def test_write_error_surfaces_and_keys_are_released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = EpisodeStore(tmp_path / "e.jsonl")

    def fail(data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "write_lines", fail)
    writer = StoreWriter(store, max_pending=2)
    writer.append(_record(0))
    with pytest.raises(RuntimeError, match="No space left"):
        writer.close()
    assert not store.has("t0", 0)


_CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_store_writer import _record
    from flatscore.engine.store import EpisodeStore
    from flatscore.engine.store_writer import StoreWriter
    store = EpisodeStore(sys.argv[1])
    real = store.write_lines
    def slow(data):
        time.sleep(0.05)  # a slow disk: the queue fills up to the bound
        real(data)
    store.write_lines = slow
    writer = StoreWriter(store, max_pending=int(sys.argv[2]))
    for i in range(10_000):
        writer.append(_record(i))
        print(i, flush=True)  # printed once the episode is handed over (finished, as far as the driver knows)
    """
)


def test_sigkill_loses_at_most_max_pending(tmp_path: Path) -> None:
    path, bound = tmp_path / "e.jsonl", 6
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path), str(bound)], stdout=subprocess.PIPE, text=True, env=env
    )
    handed = -1
    assert proc.stdout is not None
    for line in proc.stdout:
        handed = int(line)
        if handed >= 40:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    rest = proc.stdout.read().split()
    handed = int(rest[-1]) if rest else handed
    on_disk = len(EpisodeStore(path))  # opening also cuts a torn tail
    assert handed + 1 - on_disk <= bound, (handed, on_disk)
    keys = [r["task_id"] for r in EpisodeStore(path).records()]
    assert keys == [f"t{i}" for i in range(on_disk)]  # a prefix, in order, nothing twice


@pytest.mark.parametrize("name", ["retail", "telecom"])
def test_run_cell_write_behind_equals_synchronous(name: str, synthetic_dirs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The same cell written behind and written synchronously: same records, same order, rewards 1.0 for the expert."""
    from flatscore.agents.expert import ExpertAgent, NoiseRates, NoisyExpertAgent
    from flatscore.agents.users import ScriptedUser
    from flatscore.domains import load_domain
    from flatscore.engine.episode import EpisodeSettings
    from flatscore.engine.records import canonical_without_timing
    from flatscore.engine.runner import run_cell

    domain = load_domain(name, synthetic_dirs[name])
    tasks = domain.tasks()[:12]
    out = {}
    for mode, behind in (("sync", 0), ("behind", 3)):
        for agent_name, agent in (
            ("expert", ExpertAgent()),
            ("noisy", NoisyExpertAgent(NoiseRates(invented_tool=0.3))),
        ):
            store = EpisodeStore(tmp_path / f"{mode}_{agent_name}.jsonl")
            run_cell(
                domain,
                tasks,
                agent,
                ScriptedUser(),
                EpisodeSettings(max_errors=4),
                2,
                7,
                store,
                progress=False,
                write_behind=behind,
            )
            out[mode, agent_name] = [canonical_without_timing(r) for r in store.records()]
    for agent_name in ("expert", "noisy"):
        assert out["sync", agent_name] == out["behind", agent_name]
        assert len(out["sync", agent_name]) == 24
    assert all(r["reward"] == 1.0 for r in EpisodeStore(tmp_path / "behind_expert.jsonl").records())


def test_record_line_equals_dumping_asdict(synthetic_dirs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """to_json skips asdict's deep copy; the text must stay exactly what dumping to_dict() gave."""
    import json

    from flatscore.agents.expert import NoiseRates, NoisyExpertAgent
    from flatscore.agents.users import ScriptedUser
    from flatscore.domains import load_domain
    from flatscore.engine.episode import Episode, EpisodeSettings
    from flatscore.engine.runner import drive
    from flatscore.engine.scoring import Evaluator

    for name in ("retail", "telecom"):
        domain = load_domain(name, synthetic_dirs[name])
        agent = NoisyExpertAgent(NoiseRates(invented_tool=0.3, tool_error=0.2, malformed_call=0.1))
        evaluator = Evaluator(domain)
        records: list[EpisodeRecord] = []
        episodes = (
            Episode(domain, t, agent, ScriptedUser(), EpisodeSettings(max_errors=3), i, 0, evaluator)
            for i, t in enumerate(domain.tasks()[:10])
        )
        drive(episodes, None, records.append)
        assert any(r.error_events for r in records)
        for record in records:
            old = json.dumps(record.to_dict(), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
            assert record.to_json() == old
