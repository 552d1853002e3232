"""Run one cell folder: identity, supersede, episodes, summary hook, sealed metrics.

A cell is (model, precision, domain, budget, repair, trials); its folder holds ``cell.json``
(the identity and its hash), ``episodes.jsonl`` and, once every episode is on disk,
``metrics.json`` sealed with the episodes' checksum (the file Snakemake waits for). Rerunning a
folder resumes after its last durable episode; a folder holding another cell's results is refused,
or with ``supersede`` moved aside under ``.superseded/<old hash>/`` (results are never deleted).

The command line and any Python caller use :func:`run_cell_folder` with an already built agent
and backends; what happens after (printing, MLflow) is the caller's business, so the engine does
not depend on tracking or analysis.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flatscore.agents.base import Agent, UserSimulator
from flatscore.agents.nl_judge import NLJudge
from flatscore.agents.users import ScriptedUser
from flatscore.atomic_write import write_json_atomic
from flatscore.backends.base import Backend
from flatscore.domains.base import Domain
from flatscore.domains.tasks import Task
from flatscore.domains.tau2_checkout import descriptions_digest
from flatscore.engine.cell import cell_hash, code_version, data_digest
from flatscore.engine.cell_folder import (
    CELL_FILE,
    EPISODES_FILE,
    MARKER_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    SUPERSEDED_DIR,
    read_json,
)
from flatscore.engine.episode import EpisodeSettings
from flatscore.engine.integrity import seal_metrics
from flatscore.engine.metrics import summarize
from flatscore.engine.runner import run_cell
from flatscore.engine.scoring import Evaluator
from flatscore.engine.seeding import replicate_seed
from flatscore.engine.store import EpisodeStore
from flatscore.engine.writer_lock import writer_lock

#: The files of a cell's results, moved aside together when the cell is superseded.
RESULT_FILES = (CELL_FILE, EPISODES_FILE, SUMMARY_FILE, METRICS_FILE, MARKER_FILE)


class CellConflictError(ValueError):
    """The folder holds results of another cell (its settings changed) and superseding was not asked."""


@dataclass(frozen=True)
class CellSpec:
    """What one cell runs: everything that enters its identity, and where/how it runs."""

    out: Path
    domain: Domain
    data_dir: Path
    tasks: Sequence[Task]
    settings: EpisodeSettings
    split: str | None
    trials: int
    first_trial: int
    seed: int
    model_label: str
    precision: str
    model_manifest_sha: str
    agent_kind: str
    backend_kind: str
    study: str
    max_in_flight: int = 1
    #: the NL-assertion judge (an LLM on an OpenAI-compatible server); None: NL assertions skipped
    judge: NLJudge | None = None
    progress: bool = True
    supersede: bool = False
    #: A/A noise floor: 0 is the cell itself; r > 0 reruns it with independent seeds (see replicate_seed)
    replicate: int = 0
    #: the model's server settings (kind, device, parser, dtype...); None: in process, or a server
    #: flatscore did not start (a --base-url it knows nothing of)
    server: dict[str, Any] | None = None
    #: what the arm ran on (``arm_*``: scheme, backend, dtype, compute note; models.arm.describe_arm):
    #: recorded in cell.json beside the identity, which already covers it (manifest sha, backend settings)
    arm: Mapping[str, Any] = field(default_factory=dict)
    #: the user simulator; None: the scripted user. Its model's backend is ``backends["user"]``.
    user: UserSimulator | None = None
    #: the user's part of the identity (``user_*`` keys; models.user_factory.make_user): empty for
    #: the scripted user, so every cell that ran before the user was a choice keeps its hash
    user_identity: Mapping[str, Any] = field(default_factory=dict)


#: The role whose backend serves the user simulator: described by ``user_identity``, never merged
#: into the agent's backend keys (its model and temperature would overwrite the agent's).
USER_ROLE = "user"


@dataclass(frozen=True)
class CellResult:
    cell: dict[str, Any]
    metrics: dict[str, Any]


def _descriptions_identity(spec: CellSpec) -> dict[str, str]:
    """Parity mode with a checkout: the tool texts read from it change what the model sees."""
    if not (spec.settings.tau2_compat and spec.settings.tau2_checkout):
        return {}
    return {"tau2_descriptions": descriptions_digest(spec.settings.tau2_checkout, spec.domain.name)}


def cell_identity(spec: CellSpec, agent: Agent, backends: dict[str, Backend]) -> dict[str, Any]:
    """Everything that can change the cell's results (its hash covers exactly this)."""
    return {
        "domain": spec.domain.name,
        "data_digest": data_digest(spec.data_dir),
        "split": spec.split or "all",
        "tasks": [t.id for t in spec.tasks],
        "budget": spec.settings.max_errors,
        "max_steps": spec.settings.max_steps,
        "repair": spec.settings.repair,
        "count_malformed": spec.settings.count_malformed,
        "tau2_compat": spec.settings.tau2_compat,
        **_descriptions_identity(spec),
        **(spec.judge.describe() if spec.judge is not None else {}),
        "trials": spec.trials,
        "first_trial": spec.first_trial,
        "seed": spec.seed,
        "code_version": code_version(),
        **agent.describe(),
        **{k: v for role, b in backends.items() if role != USER_ROLE for k, v in b.describe().items()},
        "model": spec.model_label,
        "precision": spec.precision,
        "model_manifest_sha": spec.model_manifest_sha,
        # only a replicate carries the key: every cell that ran before replicates existed keeps its hash
        **({"replicate": spec.replicate} if spec.replicate else {}),
        **(spec.server or {}),
        **spec.user_identity,
    }


def move_aside(out: Path, old_hash: str) -> Path:
    """Keep a stale cell's files (never delete results) under ``.superseded/<old hash>/``."""
    target = out / SUPERSEDED_DIR / old_hash
    target.mkdir(parents=True, exist_ok=True)
    for name in RESULT_FILES:
        if (out / name).exists():
            (out / name).replace(target / name)
    return target


def _claim_folder(spec: CellSpec, chash: str) -> tuple[str, Path] | None:
    """Refuse (or with ``supersede`` move aside) another cell's results: (its hash, where they went)."""
    cell_file = spec.out / CELL_FILE
    if not cell_file.exists():
        return None
    previous = str(read_json(cell_file).get("cell_hash"))
    if previous == chash:
        return None
    if not spec.supersede:
        raise CellConflictError(
            f"{spec.out}: holds results of another cell (cell_hash {previous}, this one {chash}); "
            "use a new --out folder, or --supersede to move them aside"
        )
    return previous, move_aside(spec.out, previous)


def run_cell_folder(
    spec: CellSpec,
    agent: Agent,
    backends: dict[str, Backend],
    *,
    before_seal: Callable[[Path], object] | None = None,
    on_superseded: Callable[[str, Path], None] | None = None,
    on_resume: Callable[[str], None] | None = None,
) -> CellResult:
    """Run (or resume) the cell in ``spec.out`` and seal its metrics; the backends are closed after.

    ``before_seal(out)`` runs once every episode is on disk and before ``metrics.json`` appears
    (the workflow's signal that the cell is done): the CLI writes the loader's summary there.
    ``on_superseded(old_hash, folder)`` is told where a superseded cell's results went.
    ``on_resume(line)`` is told, in one line, what a resume kept and cut (episodes already on
    disk, a torn tail); not called for a fresh cell.

    The folder's writer lock (:mod:`flatscore.engine.writer_lock`) is held from before anything
    in it changes until the metrics are sealed: a second writer gets
    :class:`~flatscore.engine.writer_lock.CellLockedError` at once.
    """
    with writer_lock(spec.out):
        return _run_locked(spec, agent, backends, before_seal, on_superseded, on_resume)


def _run_locked(
    spec: CellSpec,
    agent: Agent,
    backends: dict[str, Backend],
    before_seal: Callable[[Path], object] | None,
    on_superseded: Callable[[str, Path], None] | None,
    on_resume: Callable[[str], None] | None,
) -> CellResult:
    identity = cell_identity(spec, agent, backends)
    chash = cell_hash(identity)
    superseded = _claim_folder(spec, chash)
    if superseded is not None and on_superseded is not None:
        on_superseded(*superseded)
    cell = {
        **identity,
        "cell_hash": chash,
        "study": spec.study,
        "n_tasks": len(spec.tasks),
        "agent": spec.agent_kind,
        "backend": spec.backend_kind,
        **spec.arm,
    }
    cell.pop("tasks")
    cell["task_ids"] = [t.id for t in spec.tasks]
    cell["identity"] = identity  # what cell_hash was computed from: integrity checks recompute it
    write_json_atomic(spec.out / CELL_FILE, cell)
    store = EpisodeStore(spec.out / EPISODES_FILE)
    resumed = store.resume_message()
    if resumed is not None and on_resume is not None:
        on_resume(resumed)
    try:
        run_cell(
            spec.domain,
            list(spec.tasks),
            agent,
            spec.user if spec.user is not None else ScriptedUser(),
            spec.settings,
            spec.trials,
            replicate_seed(spec.seed, spec.replicate),
            store,
            first_trial=spec.first_trial,
            backends=backends,
            max_in_flight=spec.max_in_flight,
            evaluator=Evaluator(spec.domain, judge=spec.judge, tau2_parity=spec.settings.tau2_compat),
            cell_hash=chash,
            progress=spec.progress,
        )
    finally:
        for backend in backends.values():
            backend.close()
    if before_seal is not None:
        before_seal(spec.out)
    metrics = seal_metrics(summarize(list(store.records()), spec.trials), chash, store.path)
    write_json_atomic(spec.out / METRICS_FILE, metrics)
    return CellResult(cell, metrics)
