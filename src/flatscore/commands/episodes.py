"""``episodes`` and ``export-tau2``: run one cell's episodes, hand them to tau2-bench's evaluator."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from flatscore.commands.arguments import CLIError, noise_rates, non_negative_int, positive_int
from flatscore.commands.serving import add_server_arguments, checked_server, server_options
from flatscore.config_defaults import ANY_KEY, schema_choices, schema_default


def register(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser(
        "export-tau2", help="write a cell's episodes as tau2-bench's results JSON (for tau2's evaluator)"
    )
    ex.add_argument("cell", help="the cell folder (holding cell.json and episodes.jsonl)")
    ex.add_argument("--data", required=True, help="the domain data folder the cell ran on (its tasks go in the file)")
    ex.add_argument("--out", required=True, help="the results JSON to write")
    ex.set_defaults(func=cmd_export_tau2)

    ep = sub.add_parser("episodes", help="run one cell's episodes (resumable) and summarise them")
    ep.add_argument("--domain", required=True, choices=["retail", "telecom"])
    ep.add_argument("--data", help="domain data folder in tau2-bench's layout (default: generate synthetic data)")
    ep.add_argument(
        "--data-seed",
        type=int,
        default=schema_default("domains", ANY_KEY, "seed"),
        help="seed of the synthetic data when --data is not given",
    )
    ep.add_argument("--split", default=None, help="task split from split_tasks.json (train/test); default all tasks")
    ep.add_argument("--tasks", default=None, help="'first:N' or comma-separated task ids")
    ep.add_argument("--agent", choices=["expert", "noisy", "llm"], default="expert")
    ep.add_argument(
        "--noise", type=noise_rates, default=None, help="noisy agent rates, e.g. invented_tool=0.2,tool_error=0.1"
    )
    ep.add_argument("--model", default=None, help="model folder (HF layout) or Hugging Face id for --agent llm")
    ep.add_argument("--model-name", default=None, help="name of the model in results (default: --model)")
    ep.add_argument("--precision", default="full", help="precision label of the model: full, int8, int4, fp8")
    ep.add_argument("--backend", choices=["transformers", "openai"], default="transformers")
    ep.add_argument("--base-url", default=None, help="OpenAI-compatible server URL for --backend openai")
    ep.add_argument("--served-model", default=None, help="model name at the server (default: --model)")
    add_server_arguments(ep)
    ep.add_argument(
        "--base-url-file", default=None, help="JSON announcement of a running server (from 'flatscore serve')"
    )
    ep.add_argument("--prompt", choices=["compact", "full"], default=None, help="agent prompt style (default by model)")
    ep.add_argument("--budget", type=positive_int("--budget"), default=10, help="error budget K (max_errors)")
    ep.add_argument("--max-steps", type=positive_int("--max-steps"), default=schema_default("max_steps"))
    ep.add_argument("--repair", action="store_true", help="reflexive repair of hallucinated tool calls")
    ep.add_argument(
        "--tau2-compat", action="store_true", help="tau2 parity mode: results, errors and scores as tau2's own code"
    )
    ep.add_argument(
        "--tau2-checkout",
        default=schema_default("tau2_checkout") or None,
        help="tau2-bench checkout whose tool descriptions the model reads in parity mode",
    )
    ep.add_argument(
        "--judge-base-url",
        default=schema_default("nl_judge_base_url") or None,
        help="OpenAI-compatible server of the NL-assertion judge (default: NL assertions skipped)",
    )
    ep.add_argument("--judge-model", default=schema_default("nl_judge_model") or None, help="the judge's model name")
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
        "--temperature",
        type=float,
        default=schema_default("backend", "temperature"),
        help="agent sampling temperature; 0: greedy (then seeds change nothing an LLM agent says)",
    )
    ep.add_argument(
        "--replicate",
        type=non_negative_int("--replicate"),
        default=0,
        help="A/A noise floor: 0 is the cell itself, r > 0 reruns it with independent seeds (a new identity)",
    )
    ep.add_argument(
        "--max-in-flight",
        type=positive_int("--max-in-flight"),
        default=schema_default("backend", "max_in_flight"),
        help="episodes whose model calls are batched / kept in flight together",
    )
    ep.add_argument(
        "--max-new-tokens", type=positive_int("--max-new-tokens"), default=schema_default("backend", "max_new_tokens")
    )
    add_user_arguments(ep)
    ep.add_argument("--out", required=True, help="cell folder: cell.json, episodes.jsonl, metrics.json")
    ep.add_argument(
        "--supersede",
        action="store_true",
        help="if --out holds another cell's results (its config changed), move them aside and rerun",
    )
    ep.add_argument("--study", default="flatscore")
    ep.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (log the cell when done)")
    ep.add_argument("--log-mlflow", action="store_true", help="log to MLflow (default store if no --tracking-uri)")
    ep.add_argument("--experiment", default=schema_default("tracking", "experiment"))
    ep.add_argument("--no-progress", action="store_true")
    ep.set_defaults(func=cmd_episodes)


def add_user_arguments(ep: argparse.ArgumentParser) -> None:
    """The user simulator's options (config ``user``): one user for every arm of a study."""
    ep.add_argument(
        "--user",
        choices=schema_choices("user", "kind"),
        default=schema_default("user", "kind"),
        help="user simulator: scripted (the demo protocol) or llm (a model on an OpenAI-compatible server)",
    )
    ep.add_argument("--user-base-url", default=None, help="--user llm: the user model's server URL")
    ep.add_argument(
        "--user-base-url-file", default=None, help="--user llm: JSON announcement of the user model's server"
    )
    ep.add_argument("--user-model", default=None, help="--user llm: the user model's name at its server")
    ep.add_argument("--user-temperature", type=float, default=schema_default("user", "temperature"))
    ep.add_argument(
        "--user-max-new-tokens",
        type=positive_int("--user-max-new-tokens"),
        default=schema_default("user", "max_new_tokens"),
    )
    ep.add_argument("--user-prompt", default=None, help="--user llm: a file replacing the user's built-in guidelines")


def select_tasks(domain: Any, split: str | None, spec: str | None) -> list[Any]:
    """The tasks of ``split`` chosen by ``--tasks`` (``first:N`` or a comma list of ids)."""
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


def _noise_rates(args: argparse.Namespace) -> Any:
    """The noisy agent's rates, or a one-line error naming the unknown channel or the bad rate."""
    import dataclasses

    from flatscore.agents.expert import NoiseRates

    known = [f.name for f in dataclasses.fields(NoiseRates) if f.name != "extra"]
    unknown = sorted(set(args.noise or {}) - set(known))
    if unknown:
        raise CLIError(f"--noise: unknown channel {', '.join(map(repr, unknown))} (known: {', '.join(known)})")
    try:
        return NoiseRates(**(args.noise or {}))
    except ValueError as exc:
        raise CLIError(f"--noise: {exc}") from None


def check_episode_arguments(args: argparse.Namespace) -> None:
    """Every argument check that needs no data, before anything is written into ``--out``."""
    if args.noise and args.agent != "noisy":
        raise CLIError(f"--noise: only the noisy agent injects errors (--agent noisy), got --agent {args.agent}")
    if args.agent == "noisy":
        _noise_rates(args)
    if args.serve and (args.agent != "llm" or args.backend != "openai"):
        raise CLIError("--serve: needs --agent llm --backend openai")
    user_options = [o for o in ("user_base_url", "user_base_url_file", "user_model", "user_prompt") if getattr(args, o)]
    if args.user == "scripted" and user_options:
        raise CLIError(f"--{user_options[0].replace('_', '-')}: only the LLM user has a model (--user llm)")
    if args.user == "llm" and not (args.user_base_url or args.user_base_url_file):
        raise CLIError("--user llm: needs --user-base-url or --user-base-url-file (the user model's server)")
    if args.user == "llm" and not args.user_model:
        raise CLIError("--user llm: needs --user-model (the user model's name at its server)")


def _make_agent(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The agent the arguments name and the backends it needs (role -> backend)."""
    from flatscore.agents.expert import ExpertAgent, NoisyExpertAgent

    if args.agent == "expert":
        return ExpertAgent(), {}
    if args.agent == "noisy":
        return NoisyExpertAgent(_noise_rates(args)), {}
    from flatscore.models.llm_factory import LLMAgentSettings, make_llm_agent

    return make_llm_agent(
        LLMAgentSettings(
            model=args.model,
            backend=args.backend,
            prompt=args.prompt,
            base_url=args.base_url,
            served_model=args.served_model,
            max_in_flight=args.max_in_flight,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
        )
    )


def _served_model(args: argparse.Namespace, out: Path) -> Any:
    """With --serve, start the model's server for this job (always stopped after); with
    --base-url-file, use the server a shared ``flatscore serve`` job announced there."""
    from flatscore.backends.server_launch import ServerNotReadyError, announced_server

    args.server_settings = None  # what the server does to the agent's answers: part of the identity
    if args.base_url_file:
        try:
            announced = announced_server(Path(args.base_url_file), args.serve_timeout)
        except ServerNotReadyError as exc:
            raise CLIError(f"--base-url-file: {exc}") from None
        args.base_url = announced["base_url"]
        args.server_settings = announced.get("settings")
    if not args.serve:
        return contextlib.nullcontext()
    if args.agent != "llm" or args.backend != "openai":
        raise CLIError("--serve: needs --agent llm --backend openai")
    options = server_options(args)
    server = checked_server(args.model, options, out)
    args.base_url = server.base_url
    args.server_settings = options.describe()
    return server


def _make_user(args: argparse.Namespace) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The user simulator, its backends and its identity; a served user's announcement is read here."""
    from flatscore.backends.server_launch import ServerNotReadyError, announced_server
    from flatscore.models.user_factory import UserSettings, make_user

    base_url, server = args.user_base_url, {}
    if args.user == "llm" and args.user_base_url_file:
        try:
            announced = announced_server(Path(args.user_base_url_file), args.serve_timeout)
        except ServerNotReadyError as exc:
            raise CLIError(f"--user-base-url-file: {exc}") from None
        base_url, server = announced["base_url"], announced.get("settings") or {}
    settings = UserSettings(
        kind=args.user,
        base_url=base_url,
        model=args.user_model,
        temperature=args.user_temperature,
        max_new_tokens=args.user_max_new_tokens,
        prompt_file=args.user_prompt,
        server=server,
    )
    try:
        return make_user(settings)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def _server_kind(args: argparse.Namespace) -> str | None:
    """The kind of server the model is reached through: None in process, "external" for --base-url."""
    if args.backend != "openai":
        return None
    if args.serve:
        return str(args.serve)
    if args.base_url_file:
        try:
            return str(json.loads(Path(args.base_url_file).read_text(encoding="utf-8")).get("kind") or "shared")
        except (OSError, ValueError):
            return "shared"
    return "external"


def _arm(args: argparse.Namespace, backends: dict[str, Any]) -> dict[str, Any]:
    """The cell's ``arm_*`` fields (what the arm ran on); none for the scripted agents."""
    if args.agent != "llm":
        return {}
    from flatscore.models.arm import describe_arm

    loaded = [b.describe().get("dtype") for b in backends.values()]
    served = (getattr(args, "server_settings", None) or {}).get("server_dtype")  # a server flatscore started
    dtype = next((str(d) for d in loaded if d), None) or served
    return describe_arm(args.model, args.precision, args.backend, _server_kind(args), dtype)


def _manifest_sha(model_dir: str | None) -> str:
    """The model's manifest hash (part of the cell's identity), or "" for a model without one."""
    if not model_dir:
        return ""
    from flatscore.models.manifest import MANIFEST_NAME, Manifest

    path = Path(model_dir) / MANIFEST_NAME
    return Manifest.load(path).sha if path.exists() else ""


def cmd_episodes(args: argparse.Namespace) -> int:
    from flatscore.engine.writer_lock import writer_lock

    check_episode_arguments(args)  # a refused call leaves no folder, lock or data behind
    out = Path(args.out)
    with writer_lock(out):  # before the data or a server's files are written into the folder
        return _run_episodes(args, out)


def _run_episodes(args: argparse.Namespace, out: Path) -> int:
    """``episodes`` once the folder's writer lock is held (see :mod:`flatscore.engine.writer_lock`)."""
    from flatscore.domains import domain_class, load_domain
    from flatscore.engine.cell_run import CellSpec, run_cell_folder
    from flatscore.engine.episode import EpisodeSettings

    data_dir = Path(args.data) if args.data else out / "data"
    if not args.data and not data_dir.exists():
        domain_class(args.domain).generate(data_dir, seed=args.data_seed)
    domain = load_domain(args.domain, data_dir)
    tasks = select_tasks(domain, args.split, args.tasks)
    settings = EpisodeSettings(
        max_errors=args.budget,
        max_steps=args.max_steps,
        repair=args.repair,
        count_malformed=not args.no_count_malformed,
        tau2_compat=args.tau2_compat,
        tau2_checkout=args.tau2_checkout,
    )
    out.mkdir(parents=True, exist_ok=True)
    with _served_model(args, out):
        agent, backends = _make_agent(args)
        user, user_backends, user_identity = _make_user(args)
        spec = CellSpec(
            out=out,
            domain=domain,
            data_dir=data_dir,
            tasks=tasks,
            settings=settings,
            split=args.split,
            trials=args.trials,
            first_trial=args.first_trial,
            seed=args.seed,
            model_label=args.model_name or args.model or args.agent,
            precision=args.precision,
            model_manifest_sha=_manifest_sha(args.model),
            agent_kind=args.agent,
            backend_kind=args.backend if args.agent == "llm" else "none",
            study=args.study,
            max_in_flight=args.max_in_flight,
            judge=_judge(args),
            progress=not args.no_progress,
            supersede=args.supersede,
            replicate=args.replicate,
            server=args.server_settings,
            arm=_arm(args, backends),
            user=user,
            user_identity=user_identity,
        )
        result = run_cell_folder(
            spec,
            agent,
            {**backends, **user_backends},
            before_seal=_write_summary,
            on_superseded=_say_superseded,
            on_resume=_say_resumed,
        )
    _print_summary(result.cell, result.metrics)
    if args.tracking_uri or args.log_mlflow:
        _log(out, args)
    return 0


def _write_summary(out: Path) -> None:
    """The loader's summary of the finished episodes (the aggregate reads it instead of the JSONL)."""
    from flatscore.analysis.summary import write_summary

    write_summary(out)


def _say_superseded(old_hash: str, folder: Path) -> None:
    print(f"moved the results of superseded cell {old_hash} to {folder}")


def _say_resumed(line: str) -> None:
    """To stderr, so the line lands in the job's log beside any error."""
    print(line, file=sys.stderr, flush=True)


def _log(out: Path, args: argparse.Namespace) -> None:
    from flatscore.tracking import try_log_cell

    run_id = try_log_cell(out, args.tracking_uri, args.experiment)
    print(
        f"MLflow: {'logged run ' + run_id if run_id else 'store unreachable; results kept on disk (run flatscore sync)'}"
    )


def _print_summary(cell: dict[str, Any], metrics: dict[str, Any]) -> None:
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


def cmd_export_tau2(args: argparse.Namespace) -> int:
    from flatscore.domains import load_domain
    from flatscore.engine.cell_folder import CELL_FILE, read_json
    from flatscore.engine.tau2_export import export_tau2_results

    cell = Path(args.cell)
    domain = load_domain(read_json(cell / CELL_FILE)["domain"], args.data)
    count = export_tau2_results(cell, domain, Path(args.out))
    print(f"wrote {count} episodes of {cell} as tau2 results: {args.out}")
    return 0


def _judge(args: argparse.Namespace) -> Any:
    """The NL-assertion judge the arguments name, or None (NL assertions are then skipped)."""
    if not args.judge_base_url:
        return None
    if not args.judge_model:
        raise CLIError("--judge-base-url needs --judge-model (the judge's model name at that server)")
    from flatscore.agents.nl_judge import NLJudge
    from flatscore.backends.openai_backend import OpenAIBackend

    return NLJudge(OpenAIBackend(args.judge_base_url, args.judge_model, max_in_flight=1))
