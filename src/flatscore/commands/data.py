"""``generate-domain``: write a seeded synthetic domain's data in tau2-bench's layout."""

from __future__ import annotations

import argparse
from pathlib import Path

from flatscore.commands.arguments import CLIError, positive_int
from flatscore.config_defaults import ANY_KEY, schema_choices, schema_default


def register(sub: argparse._SubParsersAction) -> None:
    gen = sub.add_parser("generate-domain", help="write a seeded synthetic domain in tau2-bench's layout")
    gen.add_argument("--domain", required=True, choices=["retail", "telecom"])
    gen.add_argument("--out", required=True)
    gen.add_argument("--seed", type=int, default=schema_default("domains", ANY_KEY, "seed"))
    gen.add_argument("--n-tasks", type=positive_int("--n-tasks"), default=schema_default("domains", ANY_KEY, "n_tasks"))
    gen.add_argument("--eval-fraction", type=float, default=0.3)
    gen.add_argument(
        "--ids",
        choices=schema_choices("domains", ANY_KEY, "ids"),
        default=schema_default("domains", ANY_KEY, "ids"),
        help="id shapes: tau2-bench's (10-digit item ids...) or 3-digit ones (one token each for the demo model)",
    )
    gen.add_argument(
        "--identities",
        choices=schema_choices("domains", ANY_KEY, "identities"),
        default=schema_default("domains", ANY_KEY, "identities"),
        help="customers' names and zips (retail only): from the generator's lists, or made up",
    )
    gen.add_argument(
        "--user-details",
        choices=schema_choices("domains", ANY_KEY, "user_details"),
        default=schema_default("domains", ANY_KEY, "user_details"),
        help="how each task tells the user their details and order id (retail only): prose, or as the call takes them",
    )
    gen.add_argument(
        "--task-kinds",
        default=None,
        help="comma-separated task kinds to draw (retail only; default: every kind); config/README.md lists them",
    )
    gen.set_defaults(func=cmd_generate_domain)


def cmd_generate_domain(args: argparse.Namespace) -> int:
    from flatscore.domains import domain_class

    cls = domain_class(args.domain)
    kinds = None if args.task_kinds is None else [k for k in args.task_kinds.split(",") if k]
    try:
        path = cls.generate(
            Path(args.out),
            seed=args.seed,
            n_tasks=args.n_tasks,
            eval_fraction=args.eval_fraction,
            ids=args.ids,
            task_kinds=kinds,
            identities=args.identities,
            user_details=args.user_details,
        )
    except ValueError as err:
        message = str(err)
        flags = (
            ("task_kinds:", "--task-kinds:"),
            ("identities:", "--identities:"),
            ("user_details:", "--user-details:"),
        )
        for field, flag in flags:
            if message.startswith(field):
                message = message.replace(field, flag, 1)
        raise CLIError(message) from None
    which = "every task kind" if kinds is None else f"task kinds {', '.join(kinds)}"
    print(
        f"wrote {args.domain} data ({args.n_tasks} tasks of {which}, seed {args.seed}, {args.ids} ids, "
        f"{args.identities} identities, details in {args.user_details}) to {path}"
    )
    return 0
