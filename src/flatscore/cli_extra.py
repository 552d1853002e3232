"""Subcommands beyond ``episodes``: demos, models, tracking, analysis. Imported by ``cli.main``.

Each registrar adds one subparser; each command imports its heavy modules (torch,
mlflow, pingouin) only when it runs, so ``flatscore --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

#: seeds of the extra synthetic databases behind ``flatscore demos --augment-dbs``: far from the
#: small seeds studies use for their eval data
AUGMENT_SEED0 = 10_001


def _demos(sub: Any) -> None:
    p = sub.add_parser("demos", help="expert demonstrations (agent-side conversations) for training the demo model")
    p.add_argument("--domain", action="append", required=True, help="domain=DATA_DIR, repeatable")
    p.add_argument("--split", default="train")
    p.add_argument("--prompt", choices=["compact", "full"], default="compact")
    p.add_argument(
        "--expert",
        choices=["diagnosing", "oracle"],
        default="diagnosing",
        help="diagnosing: telecom fixes follow the checks that show the fault (learnable); "
        "oracle: the ground-truth fixes straight away",
    )
    p.add_argument(
        "--augment-dbs",
        type=int,
        default=0,
        help=f"also the --split conversations of N extra synthetic databases per domain (seeds "
        f"{AUGMENT_SEED0}...), as many tasks as the given data has: with fresh ids in every "
        "conversation, the demo model must copy them from the context instead of memorising them",
    )
    p.add_argument("--out", required=True, help="conversations .jsonl")
    p.set_defaults(func=cmd_demos)


def _expert_conversations(domain: Any, split: str, expert_cls: Any, prompter: Any) -> list[dict[str, Any]]:
    """The successful expert episodes of ``domain``'s ``split``, as agent-side conversations."""
    from .agents.users import ScriptedUser
    from .engine.episode import Episode, EpisodeSettings
    from .engine.runner import drive
    from .engine.scoring import Evaluator

    evaluator = Evaluator(domain)
    episodes = [
        Episode(domain, task, expert_cls(), ScriptedUser(), EpisodeSettings(), seed=0, trial=0, evaluator=evaluator)
        for task in domain.tasks(split)
    ]
    finished: list[Any] = []
    drive(episodes, None, finished.append)
    rows = []
    for episode, record in zip(episodes, finished):
        if record.reward != 1.0:
            continue  # only successful demonstrations teach the model
        system = prompter.system_message(domain.name, episode.env.policy, episode._agent_tools, episode._user_tools)
        tools = [spec.openai_schema() for spec in episode._agent_tools.values()]
        rows.append(
            {
                "domain": domain.name,
                "task_id": record.task_id,
                "messages": [{"role": "system", "content": system}, *episode.agent_history],
                "tools": tools,
            }
        )
    return rows


def cmd_demos(args: argparse.Namespace) -> int:
    import tempfile

    from .agents.diagnosing_expert import DiagnosingExpertAgent
    from .agents.expert import ExpertAgent
    from .agents.llm import LLMAgent
    from .domains import domain_class, load_domain

    if args.augment_dbs < 0:
        raise ValueError(f"--augment-dbs: expected a count >= 0, got {args.augment_dbs}")
    prompter = LLMAgent(compact=args.prompt == "compact")
    expert = DiagnosingExpertAgent if args.expert == "diagnosing" else ExpertAgent
    rows: list[dict[str, Any]] = []
    for spec in args.domain:
        name, _, data = spec.partition("=")
        if not data:
            raise ValueError(f"--domain: expected DOMAIN=DATA_DIR, got '{spec}'")
        domain = load_domain(name, data)
        rows += _expert_conversations(domain, args.split, expert, prompter)
        n_tasks = len(domain.tasks())
        with tempfile.TemporaryDirectory(prefix="flatscore-augment-") as tmp:
            for i in range(args.augment_dbs):
                seed = AUGMENT_SEED0 + i
                path = domain_class(name).generate(Path(tmp) / f"{name}-{seed}", seed=seed, n_tasks=n_tasks)
                extra = _expert_conversations(load_domain(name, path), args.split, expert, prompter)
                rows += [{**row, "source": f"synthetic seed {seed}"} for row in extra]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {len(rows)} expert conversations to {out}")
    return 0


def _train_demo(sub: Any) -> None:
    p = sub.add_parser("train-demo", help="train the demo tool-calling model from expert demonstrations")
    p.add_argument("--demos", required=True, help="conversations .jsonl from 'flatscore demos'")
    p.add_argument("--out", required=True, help="model folder (Hugging Face layout)")
    p.add_argument("--size", choices=["tiny", "default"], default="default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--max-seconds", type=float, default=None)
    p.set_defaults(func=cmd_train_demo)


def cmd_train_demo(args: argparse.Namespace) -> int:
    from .models.demo.train import load_conversations, train_demo_model

    conversations = load_conversations(args.demos)
    if not conversations:
        raise ValueError(f"--demos: {args.demos} holds no conversations")
    manifest = train_demo_model(
        conversations, args.out, size=args.size, seed=args.seed, steps=args.steps, max_seconds=args.max_seconds
    )
    info = manifest.to_dict()
    print(
        f"trained demo model ({args.size}) -> {args.out}: steps {info.get('steps')}, "
        f"final loss {info.get('final_loss')}, {info.get('seconds')} s"
    )
    return 0


def _quantize(sub: Any) -> None:
    p = sub.add_parser("quantize", help="AWQ-quantize a model with llmcompressor (compressed-tensors output)")
    p.add_argument("--model", required=True, help="model folder or Hugging Face id")
    p.add_argument("--out", required=True)
    p.add_argument("--scheme", choices=["w4a16", "w8a16"], default="w4a16")
    p.add_argument("--group-size", type=int, default=32)
    p.add_argument("--calibration", default=None, help="conversations .jsonl for calibration (default: none)")
    p.add_argument("--n-calibration", type=int, default=64)
    p.set_defaults(func=cmd_quantize)


def cmd_quantize(args: argparse.Namespace) -> int:
    from .models.demo.train import load_conversations
    from .models.quantize import quantize_model

    calibration = load_conversations(args.calibration) if args.calibration else []
    manifest = quantize_model(
        args.model,
        args.out,
        scheme=args.scheme,
        group_size=args.group_size,
        calibration=calibration,
        n_samples=args.n_calibration,
    )
    info = manifest.to_dict()
    print(
        f"quantized {args.model} ({args.scheme}, group {args.group_size}) -> {args.out}: "
        f"{info.get('size_bytes_before')} -> {info.get('size_bytes_after')} bytes in {info.get('seconds')} s"
    )
    return 0


def _tracking(sub: Any) -> None:
    p = sub.add_parser("init-tracking", help="create the MLflow store once (before concurrent cells log into it)")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--results", default="results")
    p.add_argument("--marker", default=None, help="file to write when the store is ready")
    p.set_defaults(func=cmd_init_tracking)

    p = sub.add_parser("sync", help="log every cell not yet in MLflow (after the store was unreachable)")
    p.add_argument("--results", default="results")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--experiment", default="flatscore")
    p.add_argument("--marker", default=None, help="file to write with the counts")
    p.set_defaults(func=cmd_sync)

    p = sub.add_parser("ui", help="start the MLflow UI for the study's store on 127.0.0.1")
    p.add_argument("--results", default="results")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    p.set_defaults(func=cmd_ui)


def cmd_init_tracking(args: argparse.Namespace) -> int:
    from .tracking import ensure_store, resolve_tracking_uri

    uri = resolve_tracking_uri(args.tracking_uri, args.results)
    ensure_store(uri)
    if args.marker:
        Path(args.marker).parent.mkdir(parents=True, exist_ok=True)
        Path(args.marker).write_text(json.dumps({"tracking_uri": uri}) + "\n")
    print(f"MLflow store ready: {uri}")
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    from .tracking import sync_results

    counts = sync_results(args.results, args.tracking_uri, args.experiment)
    print(f"MLflow sync: {counts}")
    if args.marker:
        Path(args.marker).parent.mkdir(parents=True, exist_ok=True)
        Path(args.marker).write_text(json.dumps(counts, sort_keys=True) + "\n")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    import os

    from .tracking import resolve_tracking_uri, ui_command

    command = ui_command(resolve_tracking_uri(args.tracking_uri, args.results), host=args.host, port=args.port)
    print("starting:", " ".join(command))
    os.execvp(command[0], command)
    return 0  # pragma: no cover


def _aggregate(sub: Any) -> None:
    p = sub.add_parser("aggregate", help="statistics, budget curves, amplification, repair ablation, plots, summary")
    p.add_argument("--cells", nargs="+", required=True, help="cell folders (or their metrics.json files)")
    p.add_argument("--out", required=True)
    p.add_argument(
        "--config", default=None, help="study config (YAML or JSON file, or inline JSON) the cells must match"
    )
    p.add_argument("--equivalence-margin", type=float, default=0.075)
    p.add_argument("--power-gaps", type=float, nargs="*", default=[0.05, 0.10, 0.15])
    p.set_defaults(func=cmd_aggregate)


def cmd_aggregate(args: argparse.Namespace) -> int:
    from .analysis.report import aggregate
    from .engine.integrity import expected_from_config, verify_cells

    cells = [Path(c).parent if Path(c).name == "metrics.json" else Path(c) for c in args.cells]
    expected = None
    if args.config:
        import yaml

        text = args.config if args.config.lstrip().startswith("{") else Path(args.config).read_text()
        expected = expected_from_config(yaml.safe_load(text))
    verify_cells(cells, expected)
    out = Path(args.out)
    written = aggregate(cells, out, equivalence_margin=args.equivalence_margin, power_gaps=tuple(args.power_gaps))
    _collect_plots(out, written)
    print(f"aggregated {len(cells)} cells -> {args.out} ({len(written)} files)")
    return 0


PLOTS = {"budget_curves": "budget curves", "amplification": "channel amplification", "repair": "repair ablation"}


def _collect_plots(out: Path, written: dict[str, Any]) -> None:
    """Put every plot in ``plots/``; a plot the design cannot give becomes a labelled placeholder,
    so the workflow's outputs are the same for every design and the report says why one is empty."""
    import shutil

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    for name, title in PLOTS.items():
        source = written.get(f"plot_{name}")
        target = folder / f"{name}.png"
        if source and Path(source).exists():
            shutil.copyfile(source, target)
            continue
        fig, ax = plt.subplots(figsize=(5, 2))
        ax.axis("off")
        ax.text(0.5, 0.5, f"{title}: not computable for this design\n(see summary.md)", ha="center", va="center")
        fig.savefig(target, dpi=100)
        plt.close(fig)


def _report(sub: Any) -> None:
    p = sub.add_parser("report", help="the study's Markdown report page (summary, plots, where to browse runs)")
    p.add_argument("--aggregate", required=True, help="the aggregate folder")
    p.add_argument("--out", required=True, help="index.md to write")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    import os

    agg = Path(args.aggregate)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = (agg / "summary.md").read_text()
    plots = sorted((agg / "plots").glob("*.png"))
    lines = [summary.rstrip(), "", "## Plots", ""]
    for plot in plots:
        lines.append(f"![{plot.stem}]({os.path.relpath(plot, out.parent)})")
    tables = sorted(agg.glob("*.csv"))
    lines += ["", "## Tables", ""] + [f"- [{t.name}]({os.path.relpath(t, out.parent)})" for t in tables]
    lines += ["", "Browse every cell's run, metrics and trajectories with `flatscore ui` (MLflow UI on 127.0.0.1).", ""]
    out.write_text("\n".join(lines))
    print(f"wrote {out}")
    return 0


def _serve(sub: Any) -> None:
    from .cli import add_server_arguments

    p = sub.add_parser("serve", help="serve a model (vLLM or transformers serve) until stopped; announce its URL")
    p.add_argument("--model", required=True)
    p.add_argument("--served-model", default=None)
    p.add_argument("--announce", required=True, help="JSON file written once the server is healthy, removed at exit")
    add_server_arguments(p)
    p.set_defaults(func=cmd_serve, agent="llm", backend="openai")


def cmd_serve(args: argparse.Namespace) -> int:
    """Run a server for consumers (Snakemake service job): healthy -> announce -> wait for SIGTERM -> stop."""
    import signal
    import threading

    from .cli import build_server
    from .engine.cell import write_json_atomic

    if not args.serve:
        raise ValueError("--serve: expected vllm or transformers")
    announce = Path(args.announce)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = build_server(args, announce.parent)
    info = {"base_url": server.base_url, "model": args.served_model or args.model, "kind": args.serve}
    # Snakemake starts a service's consumers at once and expects its output right away: announce
    # the address first ("starting"); consumers wait until the announcement says "ready".
    write_json_atomic(announce, {**info, "status": "starting"})
    try:
        with server:
            write_json_atomic(announce, {**info, "status": "ready", "pid": server.pid})
            print(f"serving {args.model} at {server.base_url}", flush=True)
            while not stop.wait(1.0):
                if server.process is not None and server.process.poll() is not None:
                    raise RuntimeError(
                        f"the {args.serve} server exited (code {server.process.returncode}); see its log"
                    )
    except BaseException:
        write_json_atomic(announce, {**info, "status": "failed"})
        raise
    return 0


REGISTRARS: list[Callable[[Any], None]] = [_serve, _demos, _train_demo, _quantize, _tracking, _aggregate, _report]


def register_all(registry: list[Callable[[Any], None]]) -> None:
    """Fill ``registry`` once with the registrars of the optional subcommands."""
    if not registry:
        registry.extend(REGISTRARS)
