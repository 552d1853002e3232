"""A server's guard: ends the server's process group when the process that started it dies.

:class:`~flatscore.backends.serve.ManagedServer` starts every server through this guard::

    python -m flatscore.backends.server_guard STARTER_PID -- COMMAND ...

Why: a server runs in a session of its own (so that stopping it ends vLLM's workers too), which
also means that nothing ends it when its starter is killed without a chance to clean up. That
is what Snakemake does to a service job whose group failed: it SIGKILLs the job's shell
(``flatscore serve``), and a vLLM server started from it went on holding its port, its memory
and, on a GPU, the card. The guard is the session's leader and the server its child, in the
same process group; it watches its own parent and, once that is gone (the guard is re-parented),
ends the group: SIGTERM, a grace period, SIGKILL.

Otherwise the guard is transparent: SIGTERM and SIGINT are passed on to the server, and the
guard exits as the server did (by the same signal, or with the same code), so a starter sees
the server's own exit status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Sequence

#: How often the guard looks at its parent and its server (seconds).
POLL_S = 0.5
#: How long the server has to end after SIGTERM before the group is killed (seconds).
GRACE_S = 10.0


def exit_like(code: int) -> None:
    """Exit the way a process with return code ``code`` did: killed by the same signal, or the code."""
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # these two cannot be handled at all
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1.0)  # the signal ends the process; this line is a guard against a blocked one
        code = 128 - code
    sys.exit(code)


def end_group(server: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """SIGTERM the server, wait up to ``grace_s``, then SIGKILL the whole process group (the
    guard included: the server's own children, which a SIGTERM may leave behind, go with it)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        server.terminate()
        server.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    os.killpg(os.getpgrp(), signal.SIGKILL)


def guard(starter_pid: int, command: Sequence[str], poll_s: float = POLL_S) -> None:
    """Run ``command`` and keep it only as long as ``starter_pid`` is this process's parent."""
    server = subprocess.Popen(list(command))

    def pass_on(signum: int, _frame: object) -> None:
        server.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, pass_on)
    while True:
        code = server.poll()
        if code is not None:
            exit_like(code)
        if os.getppid() != starter_pid:
            print(
                f"server guard: the process that started this server ({starter_pid}) is gone; ending the server",
                file=sys.stderr,
                flush=True,
            )
            end_group(server)
        time.sleep(poll_s)


def guarded_command(command: Sequence[str], starter_pid: int | None = None) -> list[str]:
    """``command`` run through the guard, watching ``starter_pid`` (default: this process)."""
    starter = os.getpid() if starter_pid is None else starter_pid
    return [sys.executable, "-m", "flatscore.backends.server_guard", str(starter), "--", *command]


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--" or not args[0].isdigit():
        sys.exit("usage: python -m flatscore.backends.server_guard STARTER_PID -- COMMAND ...")
    guard(int(args[0]), args[2:])


if __name__ == "__main__":
    main()
