"""The ``flatscore`` command. Every Snakemake rule calls one of its subcommands.

Bad input ends with one line, ``flatscore: error: <what> (<expected>)``, and exit code 2;
nothing already written is touched before the input has been checked. The commands themselves
live in :mod:`flatscore.commands`, one module per group; this module only assembles them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from flatscore.commands import COMMAND_GROUPS
from flatscore.commands.arguments import CLIError


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="flatscore", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for group in COMMAND_GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CLIError as exc:
        print(f"flatscore: error: {exc}", file=sys.stderr)
        return 2
    except (PermissionError, NotADirectoryError, IsADirectoryError, FileExistsError) as exc:
        # an output that cannot be written: the path and the reason, not a traceback
        print(f"flatscore: error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"flatscore: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
