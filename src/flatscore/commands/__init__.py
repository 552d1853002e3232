"""The ``flatscore`` command line, one module per command group.

Each module here only turns arguments into calls of the package's services (``engine.cell_run``,
``models``, ``backends.server_launch``, ``tracking``, ``analysis``) and prints what they return;
``flatscore.cli`` builds the parser from :data:`COMMAND_GROUPS`. Heavy libraries (torch, mlflow,
pingouin) are imported inside the commands, so ``flatscore --help`` stays fast.
"""

from __future__ import annotations

from flatscore.commands import data, episodes, models, serving, study, tracking

#: The command groups, in the order ``flatscore --help`` lists them.
COMMAND_GROUPS = (data, episodes, serving, models, tracking, study)
