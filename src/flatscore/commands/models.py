"""``demos``, ``train-demo``, ``quantize``, ``import-gguf``: the demo model's data and training,
quantization (AWQ, W8A8 presets), a GGUF file made a Hugging Face folder."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flatscore.commands.arguments import positive_int
from flatscore.config_defaults import ANY_KEY, schema_choices, schema_default
from flatscore.models.schemes import SCHEMES

#: Where the seeds of ``--augment-dbs`` databases start (kept in models.demo.demonstrations, whose
#: imports are too heavy for ``flatscore --help``; tests/models/test_demos_cli.py checks they agree).
AUGMENT_SEED0 = 10_001


def register(sub: argparse._SubParsersAction) -> None:
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
        default=schema_default("models", ANY_KEY, "augment_dbs"),
        help=f"also the --split conversations of N extra synthetic databases per domain (seeds "
        f"{AUGMENT_SEED0}...), as many tasks as the given data has: with fresh ids in every "
        "conversation, the demo model must copy them from the context instead of memorising them",
    )
    p.add_argument(
        "--augment-identities",
        choices=schema_choices("models", ANY_KEY, "augment_identities"),
        default=schema_default("models", ANY_KEY, "augment_identities"),
        help="the augmented retail databases' customer names and zips: from the generator's lists "
        "(pool) or made up (open), so that names are copied, not guessed",
    )
    p.add_argument(
        "--answer-form",
        choices=schema_choices("models", ANY_KEY, "answer_form"),
        default=schema_default("models", ANY_KEY, "answer_form"),
        help="how the expert says a value the task asks for: the value alone (plain) or as the tool "
        "result writes it, from its field's key on (quoted: '\"amount\":84.1')",
    )
    p.add_argument(
        "--slip-rate",
        type=float,
        default=schema_default("models", ANY_KEY, "slip_rate"),
        help="the augmented databases' experts slip before a call at this rate and recover "
        "(the slipped call is kept as context, not learnt): demonstrations of recovering from an error",
    )
    p.add_argument("--out", required=True, help="conversations .jsonl")
    p.set_defaults(func=cmd_demos)

    p = sub.add_parser("train-demo", help="train the demo tool-calling model from expert demonstrations")
    p.add_argument("--demos", required=True, help="conversations .jsonl from 'flatscore demos'")
    p.add_argument("--out", required=True, help="model folder (Hugging Face layout)")
    p.add_argument(
        "--size", choices=schema_choices("models", ANY_KEY, "size"), default=schema_default("models", ANY_KEY, "size")
    )
    p.add_argument("--seed", type=int, default=schema_default("models", ANY_KEY, "seed"))
    p.add_argument(
        "--steps",
        type=positive_int("--steps"),
        default=schema_default("models", ANY_KEY, "steps"),
        help="training steps (default: the size's); training always runs all of them",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=schema_default("models", ANY_KEY, "max_seconds"),
        help="a guard: fail, writing no model, if training takes longer (default: none)",
    )
    p.set_defaults(func=cmd_train_demo)

    p = sub.add_parser("quantize", help="quantize a model with llmcompressor (compressed-tensors output)")
    p.add_argument("--model", required=True, help="model folder or Hugging Face id")
    p.add_argument("--out", required=True)
    p.add_argument(
        "--scheme",
        choices=sorted(SCHEMES),
        default=schema_default("quantization", "int4", "scheme"),
        help="w4a16/w8a16: AWQ weight-only, calibrated; w8a8/fp8_dynamic: W8A8 presets, data-free",
    )
    p.add_argument(
        "--group-size",
        type=int,
        default=schema_default("quantization", "int4", "group_size"),
        help="group size of w4a16/w8a16 (the W8A8 presets scale per channel and ignore it)",
    )
    p.add_argument(
        "--calibration", default=None, help="conversations .jsonl for AWQ calibration (default: none; presets: unread)"
    )
    p.add_argument("--n-calibration", type=int, default=schema_default("quantization", "n_calibration"))
    p.set_defaults(func=cmd_quantize)

    p = sub.add_parser(
        "import-gguf", help="a GGUF model file as a Hugging Face folder (float weights, tokenizer, manifest)"
    )
    p.add_argument("--gguf", required=True, help="the GGUF file")
    p.add_argument("--out", required=True, help="model folder to write (Hugging Face layout)")
    p.add_argument(
        "--sha256", default=None, help="the file's expected sha256; a different file is refused (default: none)"
    )
    p.set_defaults(func=cmd_import_gguf)


def cmd_demos(args: argparse.Namespace) -> int:
    from flatscore.models.demo.demonstrations import build_demonstrations

    data_dirs: dict[str, str] = {}
    for spec in args.domain:
        name, _, data = spec.partition("=")
        if not data:
            raise ValueError(f"--domain: expected DOMAIN=DATA_DIR, got '{spec}'")
        data_dirs[name] = data
    if not 0.0 <= args.slip_rate <= 1.0:
        raise ValueError(f"--slip-rate: expected a probability in [0, 1], got {args.slip_rate}")
    rows = build_demonstrations(
        data_dirs,
        args.split,
        args.prompt,
        args.expert,
        args.augment_dbs,
        args.slip_rate,
        args.augment_identities,
        args.answer_form,
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {len(rows)} expert conversations to {out}")
    return 0


def cmd_train_demo(args: argparse.Namespace) -> int:
    from flatscore.models.demo.train import TrainingTimeLimit, load_conversations, train_demo_model

    conversations = load_conversations(args.demos)
    if not conversations:
        raise ValueError(f"--demos: {args.demos} holds no conversations")
    try:
        manifest = train_demo_model(
            conversations,
            args.out,
            size=args.size,
            seed=args.seed,
            steps=args.steps,
            max_seconds=args.max_seconds,
            log_every=25,
        )
    except TrainingTimeLimit as exc:
        print(f"flatscore: error: {exc}", file=sys.stderr)
        return 1
    info = manifest.to_dict()
    print(
        f"trained demo model ({args.size}) -> {args.out}: steps {info.get('steps')}, "
        f"final loss {info.get('final_loss')}, {info.get('seconds')} s"
    )
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    from flatscore.models.demo.train import load_conversations
    from flatscore.models.quantize import quantize_model

    calibration = load_conversations(args.calibration) if args.calibration and SCHEMES[args.scheme].calibrated else []
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
        f"quantized {args.model} ({args.scheme}, {info.get('method')}, group {info.get('group_size')}) -> {args.out}: "
        f"{info.get('size_bytes_before')} -> {info.get('size_bytes_after')} bytes in {info.get('seconds')} s"
    )
    return 0


def cmd_import_gguf(args: argparse.Namespace) -> int:
    """A refusal (missing file, other checksum, no tool template) is a ValueError: one line, exit 2."""
    from flatscore.models.gguf_import import import_gguf

    manifest = import_gguf(Path(args.gguf), Path(args.out), expected_sha256=args.sha256)
    print(
        f"imported {args.gguf} (sha256 {manifest.base_weights_sha256}) -> {args.out}: "
        f"{manifest.size_bytes_before} -> {manifest.size_bytes_after} bytes in {manifest.seconds} s"
    )
    return 0
