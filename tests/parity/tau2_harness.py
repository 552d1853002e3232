"""The differential harness: the same tool calls through tau2-bench's code and through flatscore's.

tau2 runs in its own process and venv (``tau2_driver.py``, Python 3.12); flatscore runs here.
A *case* is a task id and a sequence of calls; both sides start from the task's initial state,
answer every call, and grade the sequence as a finished conversation. :func:`compare` counts
agreement on result text (byte for byte), error flag, final agent DB, DB match with the gold
state, env assertions, ACTION checks and reward.

Where the pieces are (each missing one skips the tests, saying which):
tau2's source at ``../shared/tau2-bench``, its data at ``../shared/tau2``, and a venv with tau2
installed at ``$FLATSCORE_TAU2_VENV`` (default ``~/.cache/flatscore/tau2-venv``; ``.ci/run``
builds it where Python 3.12 is available).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TAU2_SOURCE = REPO.parent / "shared" / "tau2-bench"
TAU2_DATA = REPO.parent / "shared" / "tau2"
DRIVER = Path(__file__).with_name("tau2_driver.py")
#: tau2's file name for each file of flatscore's data folder (tasks_train.json is tau2's tasks.json)
_LAYOUT = {
    "retail": {"db.json": "db.json", "policy.md": "policy.md", "tasks_train.json": "tasks.json"},
    "telecom": {
        "db.toml": "db.toml",
        "user_db.toml": "user_db.toml",
        "main_policy.md": "main_policy.md",
        "tech_support_manual.md": "tech_support_manual.md",
        "tasks_train.json": "tasks.json",
    },
}


def tau2_venv() -> Path:
    return Path(os.environ.get("FLATSCORE_TAU2_VENV", Path.home() / ".cache" / "flatscore" / "tau2-venv"))


def missing_reason() -> str | None:
    """Why the differential tests cannot run here, or None where everything they need is present."""
    if not (TAU2_SOURCE / "src" / "tau2").is_dir():
        return f"tau2-bench source not found at {TAU2_SOURCE} (../shared/tau2-bench is absent on this machine)"
    if not (TAU2_DATA / "retail" / "tasks_train.json").exists():
        return f"tau2-bench data not found at {TAU2_DATA} (../shared/tau2 is absent on this machine)"
    python = tau2_venv() / "bin" / "python"
    if not python.exists():
        return (
            f"no tau2 venv at {tau2_venv()} (needs Python 3.12: build it with .ci/run, or point "
            "FLATSCORE_TAU2_VENV at a venv where `pip install -e ../shared/tau2-bench` was run)"
        )
    return None


def tau2_data_root(tmp: Path) -> Path:
    """A ``TAU2_DATA_DIR`` over ../shared/tau2: ``tau2/domains/<name>/`` with tau2's file names (links)."""
    for domain, files in _LAYOUT.items():
        folder = tmp / "tau2" / "domains" / domain
        folder.mkdir(parents=True, exist_ok=True)
        for ours, theirs in files.items():
            link = folder / theirs
            if not link.exists():
                link.symlink_to(TAU2_DATA / domain / ours)
    return tmp


def run_tau2(domain: str, cases: list[dict[str, Any]], data_root: Path, timeout: float = 900) -> list[dict[str, Any]]:
    """Every case answered and graded by tau2's own code; see :func:`run_tau2_full`."""
    return run_tau2_full(domain, cases, data_root, timeout)["answers"]


def run_tau2_full(domain: str, cases: list[dict[str, Any]], data_root: Path, timeout: float = 900) -> dict[str, Any]:
    """Every case answered and graded by tau2's own code (one subprocess for all cases).

    Refuses a tau2 venv whose pydantic differs from this one: pydantic's validation messages
    carry its version (an ``errors.pydantic.dev/<version>`` link), so the texts of a wrong
    argument differ by that link alone (.ci/run pins the venv's pydantic to the project's).
    """
    request = {"domain": domain, "tasks_file": str(TAU2_DATA / domain / "tasks_train.json"), "cases": cases}
    env = {
        **os.environ,
        "TAU2_DATA_DIR": str(data_root),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no network at import
    }
    done = subprocess.run(
        [str(tau2_venv() / "bin" / "python"), str(DRIVER)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tau2 driver failed ({done.returncode}): {done.stderr[-3000:]}")
    answer = json.loads(done.stdout)
    import pydantic

    if answer["pydantic"] != pydantic.VERSION:
        raise RuntimeError(
            f"tau2 venv has pydantic {answer['pydantic']}, flatscore's has {pydantic.VERSION}: pin it "
            f"(`{tau2_venv()}/bin/pip install pydantic=={pydantic.VERSION}`) so that error texts can match"
        )
    return answer


def regrade_with_tau2(domain: str, results_file: Path, data_root: Path, timeout: float = 900) -> list[dict[str, Any]]:
    """tau2 loads an exported results file with its own ``Results`` model and grades each simulation."""
    request = {"domain": domain, "regrade": str(results_file)}
    env = {**os.environ, "TAU2_DATA_DIR": str(data_root), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [str(tau2_venv() / "bin" / "python"), str(DRIVER)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tau2 regrade failed ({done.returncode}): {done.stderr[-3000:]}")
    return json.loads(done.stdout)["regraded"]


def run_flatscore(domain_name: str, cases: list[dict[str, Any]], parity: bool = True) -> list[dict[str, Any]]:
    """Every case answered and graded by flatscore (parity mode unless told otherwise)."""
    from flatscore.domains import load_domain
    from flatscore.domains.environment import to_plain
    from flatscore.domains.tau2_parity import answer_call
    from flatscore.engine.records import Termination
    from flatscore.engine.scoring import Evaluator

    domain = load_domain(domain_name, TAU2_DATA / domain_name)
    evaluator = Evaluator(domain, tau2_parity=parity)
    answers = []
    for case in cases:
        task = domain.task(case["task_id"])
        env = domain.environment_for(task)
        trajectory: list[dict[str, Any]] = []
        results = []
        for index, call in enumerate(case["calls"]):
            call_id = f"call_{index}"
            answer = answer_call(env, call["requestor"], call["name"], call["arguments"], tau2_parity=parity)
            tool_call = {"id": call_id, "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}
            trajectory.append({"role": call["requestor"], "content": None, "tool_calls": [tool_call]})
            trajectory.append(
                {"role": "tool", "tool_call_id": call_id, "content": answer.content, "error": answer.error}
            )
            results.append({"content": answer.content, "error": answer.error})
        agent_db = to_plain(env.agent_toolkit.db)
        agent_db.pop("phone_number_aliases", None)  # flatscore's own look-up index; tau2 stores no such field
        out: dict[str, Any] = {"results": results, "agent_db": _digest(agent_db)}
        if case.get("grade", True):
            info = evaluator.evaluate(task, env, trajectory, Termination.AGENT_STOP)
            out["reward"] = info["reward"]
            out["db_match"] = info.get("db_match")
            out["env_assertions"] = [c["met"] for c in info.get("env_assertions", [])]
            out["action_checks"] = list(info.get("actions_matched", []))
        answers.append(out)
    return answers


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


@dataclass
class Tally:
    """Agreement counts of one comparison, and the first disagreements (for the failure message)."""

    equal: dict[str, int] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)
    diffs: list[str] = field(default_factory=list)

    def count(self, what: str, same: bool, detail: str) -> None:
        self.total[what] = self.total.get(what, 0) + 1
        self.equal[what] = self.equal.get(what, 0) + int(same)
        if not same and len(self.diffs) < 40:
            self.diffs.append(f"[{what}] {detail}")

    def line(self) -> str:
        return ", ".join(f"{k} {self.equal[k]}/{self.total[k]}" for k in self.total)

    @property
    def perfect(self) -> bool:
        return all(self.equal[k] == self.total[k] for k in self.total)


def compare(cases: list[dict[str, Any]], theirs: list[dict[str, Any]], ours: list[dict[str, Any]]) -> Tally:
    tally = Tally()
    for case, t, o in zip(cases, theirs, ours, strict=True):
        where = case["task_id"]
        if "crash" in t:
            tally.count("case", False, f"{where}: tau2 crashed: {t['crash']}")
            continue
        for call, rt, ro in zip(case["calls"], t["results"], o["results"], strict=True):
            label = f"{where} {call['requestor']}:{call['name']}({json.dumps(call['arguments'])[:160]})"
            tally.count(
                "text",
                rt["content"] == ro["content"],
                f"{label}\n  tau2: {rt['content'][:300]}\n  ours: {ro['content'][:300]}",
            )
            tally.count("flag", rt["error"] == ro["error"], f"{label} tau2 {rt['error']} ours {ro['error']}")
        tally.count("agent_db", t["agent_db"] == o["agent_db"], f"{where}: final agent DB differs")
        if "reward" in t:
            for key in ("db_match", "env_assertions", "action_checks", "reward"):
                tally.count(key, t[key] == o.get(key), f"{where}: {key} tau2 {t[key]} ours {o.get(key)}")
    return tally


def gold_cases(domain_name: str, every: int = 1) -> list[dict[str, Any]]:
    """One case per train task (every ``every``-th task): its ground-truth actions, in order."""
    tasks = json.loads((TAU2_DATA / domain_name / "tasks_train.json").read_text())
    cases = []
    for task in tasks[::every]:
        actions = (task.get("evaluation_criteria") or {}).get("actions") or []
        calls = [
            {"requestor": a.get("requestor", "assistant"), "name": a["name"], "arguments": a.get("arguments", {})}
            for a in actions
        ]
        cases.append({"task_id": task["id"], "calls": calls})
    return cases


if __name__ == "__main__":  # a report: python tests/parity/tau2_harness.py [retail|telecom] [--default]
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent))
    from bad_calls import bad_call_cases

    reason = missing_reason()
    if reason:
        sys.exit(reason)
    parity = "--default" not in sys.argv
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or ["retail", "telecom"]
    with tempfile.TemporaryDirectory() as tmp:
        root = tau2_data_root(Path(tmp))
        for name in names:
            for kind, cases in (("gold", gold_cases(name)), ("bad", bad_call_cases(name))):
                tally = compare(cases, run_tau2(name, cases, root), run_flatscore(name, cases, parity))
                print(f"{name} {kind} ({sum(len(c['calls']) for c in cases)} calls): {tally.line()}")
                for diff in tally.diffs[:15]:
                    print("   ", diff)
