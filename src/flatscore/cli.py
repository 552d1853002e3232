"""The ``flatscore`` command. Every Snakemake rule calls one of its subcommands.

Bad input ends with one line, ``flatscore: error: <what> (<expected>)``, and exit code 2;
nothing already written is touched before the input has been checked.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence


class CLIError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def bounded_int(name: str, minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``, with an error naming the option."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: expected an integer >= {minimum}, got '{text}'") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name}: expected an integer >= {minimum}, got {value}")
        return value

    return parse


def positive_int(name: str) -> Callable[[str], int]:
    return bounded_int(name, 1)


def non_negative_int(name: str) -> Callable[[str], int]:
    return bounded_int(name, 0)


def _noise(text: str) -> dict[str, float]:
    """``invented_tool=0.2,tool_error=0.1`` -> dict."""
    rates: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"--noise: expected CHANNEL=RATE pairs, got '{part}'")
        try:
            rates[key.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--noise: rate of '{key}' must be a number, got '{value}'") from None
    return rates


# ----------------------------------------------------------------------------------------
def cmd_generate_domain(args: argparse.Namespace) -> int:
    from .domains import domain_class

    cls = domain_class(args.domain)
    path = cls.generate(Path(args.out), seed=args.seed, n_tasks=args.n_tasks, eval_fraction=args.eval_fraction)
    print(f"wrote {args.domain} data ({args.n_tasks} tasks, seed {args.seed}) to {path}")
    return 0


def _select_tasks(domain: Any, split: str | None, spec: str | None) -> list[Any]:
    tasks = domain.tasks(split)
    if spec:
        if spec.startswith("first:"):
            try:
                count = int(spec.split(":", 1)[1])
            except ValueError:
                raise CLIError(f"--tasks: expected 'first:N' or a comma list of task ids, got '{spec}'") from None
            tasks = tasks[:count]
        else:
            wanted = [t.strip() for t in spec.split(",") if t.strip()]
            known = {t.id: t for t in tasks}
            missing = [t for t in wanted if t not in known]
            if missing:
                raise CLIError(f"--tasks: unknown task id(s) {', '.join(missing[:5])} in {domain.name} split '{split}'")
            tasks = [known[t] for t in wanted]
    if not tasks:
        raise CLIError(f"--tasks/--split: no tasks selected in {domain.name} (split '{split}')")
    return tasks


def _make_agent(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The agent and the backends it needs (role -> backend)."""
    from .agents.expert import ExpertAgent, NoiseRates, NoisyExpertAgent

    if args.agent == "expert":
        return ExpertAgent(), {}
    if args.agent == "noisy":
        try:
            return NoisyExpertAgent(NoiseRates(**(args.noise or {}))), {}
        except TypeError as exc:
            raise CLIError(f"--noise: {exc}") from None
        except ValueError as exc:
            raise CLIError(str(exc)) from None
    from .agents.llm_factory import make_llm_agent

    return make_llm_agent(args)


def cmd_episodes(args: argparse.Namespace) -> int:
    from .domains import domain_class, load_domain
    from .engine.episode import EpisodeSettings

    out = Path(args.out)
    data_dir = Path(args.data) if args.data else out / "data"
    if not args.data and not data_dir.exists():
        domain_class(args.domain).generate(data_dir, seed=args.data_seed)
    domain = load_domain(args.domain, data_dir)
    tasks = _select_tasks(domain, args.split, args.tasks)
    settings = EpisodeSettings(
        max_errors=args.budget,
        max_steps=args.max_steps,
        repair=args.repair,
        count_malformed=not args.no_count_malformed,
        tau2_compat=args.tau2_compat,
    )
    out.mkdir(parents=True, exist_ok=True)
    with _served_model(args, out):
        return _run_episodes(args, out, data_dir, domain, tasks, settings)


def build_server(args: argparse.Namespace, log_dir: Path) -> Any:
    """The OpenAI-compatible server named by --serve, for args.model (not started yet)."""
    from .backends.serve import ManagedServer, transformers_serve_command, transformers_serve_env, vllm_command

    if args.serve == "vllm":
        command = vllm_command(
            args.model,
            gpu_memory_utilization=args.vllm_gpu_memory_utilization,
            max_model_len=args.vllm_max_model_len,
            tensor_parallel_size=args.vllm_tensor_parallel_size,
            served_model_name=args.served_model or args.model,
            extra_args=args.vllm_arg or [],
        )
        env = None
    else:
        command = transformers_serve_command(args.model)
        env = transformers_serve_env(log_dir / ".hf-cache")
    return ManagedServer(command, log_path=log_dir / "server.log", startup_timeout_s=args.serve_timeout, env=env)


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--serve",
        choices=["vllm", "transformers"],
        default=None,
        help="start the model's OpenAI-compatible server for this job (health-waited, always stopped)",
    )
    parser.add_argument("--serve-timeout", type=float, default=900.0, help="seconds to wait for the server's /health")
    parser.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--vllm-max-model-len", type=int, default=None)
    parser.add_argument("--vllm-tensor-parallel-size", type=int, default=1)
    parser.add_argument("--vllm-arg", action="append", help="extra argument for vllm serve (repeatable)")


def _served_model(args: argparse.Namespace, out: Path) -> Any:
    """With --serve, start the model's server for this job and always stop it; with
    --base-url-file, use the server a shared ``flatscore serve`` job announced there."""
    import contextlib

    if args.base_url_file:
        args.base_url = _await_announced_server(Path(args.base_url_file), args.serve_timeout)
    if not args.serve:
        return contextlib.nullcontext()
    if args.agent != "llm" or args.backend != "openai":
        raise CLIError("--serve: needs --agent llm --backend openai")
    server = build_server(args, out)
    args.base_url = server.base_url
    return server


def _await_announced_server(path: Path, timeout_s: float) -> str:
    """Wait until a ``flatscore serve`` job announces its server ready; return its URL."""
    import time

    deadline = time.monotonic() + timeout_s
    status = "missing"
    while time.monotonic() < deadline:
        try:
            announced = json.loads(path.read_text())
            status = announced.get("status", "ready")
        except (OSError, ValueError):
            announced, status = None, "missing"
        if announced and status == "ready":
            return announced["base_url"]
        if status == "failed":
            break
        time.sleep(1.0)
    raise CLIError(
        f"--base-url-file: the server announced in {path} is not ready (status: {status}) "
        f"after {timeout_s:.0f} s; see its log"
    )


def _run_episodes(
    args: argparse.Namespace, out: Path, data_dir: Path, domain: Any, tasks: list[Any], settings: Any
) -> int:
    from .agents.users import ScriptedUser
    from .engine.cell import cell_hash, code_version, data_digest, write_json_atomic
    from .engine.metrics import summarize
    from .engine.runner import run_cell
    from .engine.store import EpisodeStore

    agent, backends = _make_agent(args)
    identity = {
        "domain": args.domain,
        "data_digest": data_digest(data_dir),
        "split": args.split or "all",
        "tasks": [t.id for t in tasks],
        "budget": args.budget,
        "max_steps": args.max_steps,
        "repair": args.repair,
        "count_malformed": not args.no_count_malformed,
        "tau2_compat": args.tau2_compat,
        "trials": args.trials,
        "first_trial": args.first_trial,
        "seed": args.seed,
        "code_version": code_version(),
        **agent.describe(),
        **{k: v for b in backends.values() for k, v in b.describe().items()},
        "model": args.model_name or args.model or args.agent,
        "precision": args.precision,
        "model_manifest_sha": _manifest_sha(args.model),
    }
    chash = cell_hash(identity)
    cell_file = out / "cell.json"
    if cell_file.exists():
        previous = json.loads(cell_file.read_text())
        if previous.get("cell_hash") != chash:
            if not args.supersede:
                raise CLIError(
                    f"{out}: holds results of another cell (cell_hash {previous.get('cell_hash')}, this one {chash}); "
                    "use a new --out folder, or --supersede to move them aside"
                )
            _move_aside(out, str(previous.get("cell_hash")))
    cell = {
        **identity,
        "cell_hash": chash,
        "study": args.study,
        "n_tasks": len(tasks),
        "agent": args.agent,
        "backend": args.backend if args.agent == "llm" else "none",
    }
    cell.pop("tasks")
    cell["task_ids"] = [t.id for t in tasks]
    cell["identity"] = identity  # what cell_hash was computed from: integrity checks recompute it
    write_json_atomic(cell_file, cell)
    store = EpisodeStore(out / "episodes.jsonl")
    try:
        run_cell(
            domain,
            tasks,
            agent,
            ScriptedUser(),
            settings,
            args.trials,
            args.seed,
            store,
            first_trial=args.first_trial,
            backends=backends,
            max_in_flight=args.max_in_flight,
            cell_hash=chash,
            progress=not args.no_progress,
        )
    finally:
        for backend in backends.values():
            backend.close()
    from .analysis.summary import write_summary
    from .engine.integrity import seal_metrics

    write_summary(out)  # the aggregate reads it instead of re-parsing the trajectories (before metrics.json)
    records = list(store.records())
    metrics = seal_metrics(summarize(records, args.trials), chash, store.path)
    write_json_atomic(out / "metrics.json", metrics)
    _print_summary(cell, metrics)
    if args.tracking_uri or args.log_mlflow:
        _log(out, args)
    return 0


def _move_aside(out: Path, old_hash: str) -> None:
    """Keep a stale cell's files (never delete results) under ``.superseded/<old hash>/``."""
    target = out / ".superseded" / old_hash
    target.mkdir(parents=True, exist_ok=True)
    for name in ("cell.json", "episodes.jsonl", "episodes.summary.npz", "metrics.json", "tracking.json"):
        if (out / name).exists():
            (out / name).replace(target / name)
    print(f"moved the results of superseded cell {old_hash} to {target}")


def _manifest_sha(model_dir: str | None) -> str:
    if not model_dir:
        return ""
    path = Path(model_dir) / "flatscore_manifest.json"
    if not path.exists():
        return ""
    from .models.manifest import Manifest

    return Manifest.load(path).sha


def _log(out: Path, args: argparse.Namespace) -> None:
    from .tracking import try_log_cell

    run_id = try_log_cell(out, args.tracking_uri, args.experiment)
    print(
        f"MLflow: {'logged run ' + run_id if run_id else 'store unreachable; results kept on disk (run flatscore sync)'}"
    )


def _print_summary(cell: dict[str, Any], metrics: dict[str, float]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{cell['domain']} | {cell['model']} {cell['precision']} | K={cell['budget']}"
        f"{' | repair' if cell['repair'] else ''} | cell {cell['cell_hash']}"
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("episodes (scored / all)", f"{metrics['n_scored']} / {metrics['n_episodes']}"),
        ("success rate", f"{metrics['success_rate']:.3f}"),
    ]
    rows += [(k.replace("pass_hat_", "pass^"), f"{v:.3f}") for k, v in metrics.items() if k.startswith("pass_hat_")]
    rows += [(k.removeprefix("channel_"), str(int(v))) for k, v in metrics.items() if k.startswith("channel_") and v]
    rows += [
        (k.removeprefix("termination_"), str(int(v))) for k, v in metrics.items() if k.startswith("termination_") and v
    ]
    if metrics["n_unscored"]:
        rows.append(("unscored (infrastructure / dropped)", str(int(metrics["n_unscored"]))))
    for key, value in rows:
        table.add_row(key, value)
    Console(stderr=False).print(table)


# ----------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flatscore", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate-domain", help="write a seeded synthetic domain in tau2-bench's layout")
    gen.add_argument("--domain", required=True, choices=["retail", "telecom"])
    gen.add_argument("--out", required=True)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--n-tasks", type=positive_int("--n-tasks"), default=120)
    gen.add_argument("--eval-fraction", type=float, default=0.3)
    gen.set_defaults(func=cmd_generate_domain)

    ep = sub.add_parser("episodes", help="run one cell's episodes (resumable) and summarise them")
    ep.add_argument("--domain", required=True, choices=["retail", "telecom"])
    ep.add_argument("--data", help="domain data folder in tau2-bench's layout (default: generate synthetic data)")
    ep.add_argument("--data-seed", type=int, default=0, help="seed of the synthetic data when --data is not given")
    ep.add_argument("--split", default=None, help="task split from split_tasks.json (train/test); default all tasks")
    ep.add_argument("--tasks", default=None, help="'first:N' or comma-separated task ids")
    ep.add_argument("--agent", choices=["expert", "noisy", "llm"], default="expert")
    ep.add_argument(
        "--noise", type=_noise, default=None, help="noisy agent rates, e.g. invented_tool=0.2,tool_error=0.1"
    )
    ep.add_argument("--model", default=None, help="model folder (HF layout) or Hugging Face id for --agent llm")
    ep.add_argument("--model-name", default=None, help="name of the model in results (default: --model)")
    ep.add_argument("--precision", default="full", help="precision label of the model: full, int8, int4")
    ep.add_argument("--backend", choices=["transformers", "openai"], default="transformers")
    ep.add_argument("--base-url", default=None, help="OpenAI-compatible server URL for --backend openai")
    ep.add_argument("--served-model", default=None, help="model name at the server (default: --model)")
    add_server_arguments(ep)
    ep.add_argument(
        "--base-url-file", default=None, help="JSON announcement of a running server (from 'flatscore serve')"
    )
    ep.add_argument("--prompt", choices=["compact", "full"], default=None, help="agent prompt style (default by model)")
    ep.add_argument("--budget", type=positive_int("--budget"), default=10, help="error budget K (max_errors)")
    ep.add_argument("--max-steps", type=positive_int("--max-steps"), default=200)
    ep.add_argument("--repair", action="store_true", help="reflexive repair of hallucinated tool calls")
    ep.add_argument("--tau2-compat", action="store_true", help="reproduce tau2's handling of malformed calls")
    ep.add_argument("--no-count-malformed", action="store_true", help="malformed calls do not count toward K")
    ep.add_argument("--trials", type=positive_int("--trials"), default=1)
    ep.add_argument(
        "--first-trial",
        type=non_negative_int("--first-trial"),
        default=0,
        help="index of the first trial (trial shards of one cell run disjoint trial ranges)",
    )
    ep.add_argument("--seed", type=int, default=0)
    ep.add_argument(
        "--max-in-flight",
        type=positive_int("--max-in-flight"),
        default=1,
        help="episodes whose model calls are batched / kept in flight together",
    )
    ep.add_argument("--max-new-tokens", type=positive_int("--max-new-tokens"), default=256)
    ep.add_argument("--out", required=True, help="cell folder: cell.json, episodes.jsonl, metrics.json")
    ep.add_argument(
        "--supersede",
        action="store_true",
        help="if --out holds another cell's results (its config changed), move them aside and rerun",
    )
    ep.add_argument("--study", default="flatscore")
    ep.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (log the cell when done)")
    ep.add_argument("--log-mlflow", action="store_true", help="log to MLflow (default store if no --tracking-uri)")
    ep.add_argument("--experiment", default="flatscore")
    ep.add_argument("--no-progress", action="store_true")
    ep.set_defaults(func=cmd_episodes)

    for register in _EXTRA_COMMANDS:
        register(sub)
    return parser


#: Subcommand registrars of other modules (models, tracking, analysis, workflow helpers).
_EXTRA_COMMANDS: list[Callable[[Any], None]] = []


def main(argv: Sequence[str] | None = None) -> int:
    from .cli_extra import register_all

    register_all(_EXTRA_COMMANDS)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CLIError as exc:
        print(f"flatscore: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"flatscore: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
