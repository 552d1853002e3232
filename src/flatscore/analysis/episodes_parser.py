"""One home for parsing a cell's ``episodes.jsonl`` into columns: used by the loader and the summary.

Both :mod:`flatscore.analysis.load` (cells without a usable summary) and
:mod:`flatscore.analysis.summary` (writing that summary when a cell ends) must build exactly the
same arrays from the same file, so the parser and the per-cell dtype conversion live here and
both import them (before, the summary imported the loader's private parser and the loader the
summary: an import circle).

The parser is the aggregate's hot loop (a 1M-episode study is ~1.3 GB of JSONL): it splits the
file once, parses each line with orjson (:data:`~flatscore.engine.cell_folder.loads_line`) and
appends the dozen fields the analysis needs to column lists, without a per-line function call.
Bad lines follow the cell folder's one policy (:mod:`flatscore.engine.cell_folder`): a torn last
line and a complete line that is not a JSON object are refused naming the file and the line, as
:class:`CorruptRecordError` (a :class:`~flatscore.engine.cell_folder.CorruptEpisodeLine`), and so
is a record that lacks a field the analysis needs, and an episode identity, (task_id, trial),
found on a second line (it would be counted twice; checked on the keys' hashes with numpy after parsing).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from flatscore.engine.cell_folder import (
    DECODE_ERRORS,
    CorruptEpisodeLine,
    TornEpisodeLine,
    duplicate_message,
    loads_line,
    parse_episode_line,
    split_episode_lines,
)

EVENT_FIELDS = ("step", "channel", "side", "tool", "counted")
COUNT_DTYPE = "int16"
#: Per-episode numeric columns and the dtype each is loaded as (``ch_*`` are COUNT_DTYPE too).
EPISODE_DTYPES: dict[str, Any] = {
    "trial": np.int16,
    "seed": np.int64,
    "reward": np.float64,
    "scored": bool,
    "errors_counted": np.int16,
    "agent_tool_calls": np.int16,
    "user_tool_calls": np.int16,
    "steps": np.int16,
}
_EPISODE_FIELDS = (
    "task_id",
    "trial",
    "seed",
    "reward",
    "scored",
    "termination",
    "errors_counted",
    "agent_tool_calls",
    "user_tool_calls",
    "steps",
)


class CorruptRecordError(CorruptEpisodeLine):
    """A line of an ``episodes.jsonl`` (or a ``cell.json``) could not be parsed.

    A :class:`~flatscore.engine.cell_folder.CorruptEpisodeLine` (hence a ``ValueError``), so
    callers of either the loader or the cell folder's reader catch it; ``lineno`` is None where
    the problem is the whole file (missing, unreadable, a cell.json).
    """

    def __init__(self, path: Path, lineno: int | None, reason: str) -> None:
        self.path, self.lineno, self.reason = Path(path), lineno, reason
        where = f"{self.path}:{lineno}" if lineno is not None else str(self.path)
        ValueError.__init__(self, f"corrupt result record at {where}: {reason}")


def _bad_line(path: Path, lineno: int, line: bytes, exc: BaseException) -> CorruptRecordError:
    """The loader's error for a line the fast path could not take: the cell folder's reason where
    the line is not a JSON object, else the missing or mistyped field."""
    try:
        parse_episode_line(path, lineno, line)
    except CorruptEpisodeLine as corrupt:
        return CorruptRecordError(path, lineno, f"unparseable JSON line ({corrupt.reason})")
    if isinstance(exc, (KeyError, AttributeError)):
        return CorruptRecordError(path, lineno, f"record lacks field {exc}")
    return CorruptRecordError(path, lineno, f"unparseable JSON line ({exc})")


def _may_repeat(tasks: list, trials: list) -> bool:
    """True if some (task_id, trial) may occur twice: equal hashes (the exact check follows).

    Why hashes in numpy and not ``set(zip(...))``: the parse leaves millions of live objects, and
    100k new tuples trigger the cyclic GC over all of them (+20% parse time measured); ``hash``
    gives untracked ints, and sorting 100k int64 costs a few ms.
    """
    if len(tasks) < 2:
        return False
    keys = np.fromiter(map(hash, tasks), dtype=np.int64, count=len(tasks))
    keys = keys * np.int64(1_000_003) + np.asarray(trials, dtype=np.int64)  # wraps on overflow: fine for a hash
    keys.sort()
    return bool((keys[1:] == keys[:-1]).any())


def _duplicate_error(path: Path, lines: list[bytes], tasks: list, trials: list) -> CorruptRecordError | None:
    """The loader's error for an episode identity, (task_id, trial), found on two lines (None: a hash collision)."""
    linenos = [n for n, line in enumerate(lines, start=1) if line.strip()]  # row -> line number
    first: dict[tuple[Any, Any], int] = {}
    for row, key in enumerate(zip(tasks, trials)):
        earlier = first.setdefault(key, row)
        if earlier != row:
            return CorruptRecordError(path, linenos[row], duplicate_message(path, linenos[earlier], linenos[row], *key))
    return None


def parse_episodes(path: Path, channels: list[str]) -> tuple[dict[str, list], dict[str, list], dict[str, set]]:
    """Parse one JSONL file into column lists (episodes), event column lists and the values seen
    for budget/domain/repair (checked against cell.json by the loader).

    Channels beyond ``channels`` found in the file are kept: a second (rare) pass adds them.
    """
    path = Path(path)
    cols: dict[str, list] = {k: [] for k in _EPISODE_FIELDS}
    chan_lists: dict[str, list] = {c: [] for c in channels}
    ev: dict[str, list] = {"row": [], **{k: [] for k in EVENT_FIELDS}}
    seen: dict[str, set] = {"budget": set(), "domain": set(), "repair": set()}
    extra_channels: set[str] = set()
    try:
        lines = split_episode_lines(path, path.read_bytes())
    except TornEpisodeLine as exc:
        raise CorruptRecordError(path, exc.lineno, f"truncated last line ({exc.reason})") from exc
    except OSError as exc:
        raise CorruptRecordError(path, None, str(exc)) from exc
    c_task, c_trial, c_seed, c_rew, c_sc, c_term, c_err = (
        cols["task_id"],
        cols["trial"],
        cols["seed"],
        cols["reward"],
        cols["scored"],
        cols["termination"],
        cols["errors_counted"],
    )
    c_atc, c_utc, c_steps = cols["agent_tool_calls"], cols["user_tool_calls"], cols["steps"]
    ev_row, ev_step, ev_ch, ev_side, ev_tool, ev_cnt = (
        ev["row"],
        ev["step"],
        ev["channel"],
        ev["side"],
        ev["tool"],
        ev["counted"],
    )
    s_budget, s_domain, s_repair = seen["budget"], seen["domain"], seen["repair"]
    row = 0
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            try:
                rec = loads_line(line)
            except DECODE_ERRORS:  # orjson refuses NaN/Infinity that json.dumps writes: the one reader decides
                rec = parse_episode_line(path, lineno, line)
            c_task.append(rec["task_id"])
            c_trial.append(rec["trial"])
            c_seed.append(rec.get("seed", -1))
            c_rew.append(rec["reward"])
            c_sc.append(rec["scored"])
            c_term.append(rec["termination"])
            c_err.append(rec["errors_counted"])
            c_atc.append(rec.get("agent_tool_calls", 0))
            c_utc.append(rec.get("user_tool_calls", 0))
            c_steps.append(rec.get("steps", 0))
            ch = rec["channels"]
            for c in channels:
                chan_lists[c].append(ch.get(c, 0))
            if len(ch) != len(channels):
                extra_channels.update(k for k in ch if k not in chan_lists)
            for e in rec.get("error_events") or ():
                ev_row.append(row)
                ev_step.append(e.get("step", -1))
                ev_ch.append(e["channel"])
                ev_side.append(e.get("side", ""))
                ev_tool.append(e.get("tool", ""))
                ev_cnt.append(e.get("counted", True))
            s_budget.add(rec.get("budget"))
            s_domain.add(rec.get("domain"))
            s_repair.add(rec.get("repair"))
        except CorruptEpisodeLine as exc:
            raise CorruptRecordError(path, lineno, f"unparseable JSON line ({exc.reason})") from exc
        except (*DECODE_ERRORS, KeyError, AttributeError) as exc:
            raise _bad_line(path, lineno, line, exc) from exc
        row += 1
    if _may_repeat(c_task, c_trial):
        duplicate = _duplicate_error(path, lines, c_task, c_trial)
        if duplicate is not None:
            raise duplicate
    if extra_channels:  # channels beyond the known ones: second (rare) pass keeps them all
        return parse_episodes(path, channels + sorted(extra_channels))
    cols.update({f"ch_{c}": v for c, v in chan_lists.items()})
    return cols, ev, seen


def _objects(values: Iterable) -> np.ndarray:
    """A 1-D object array of ``values`` (never reshaped into 2-D, whatever the values are)."""
    values = list(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def cell_arrays(cols: dict[str, list], ev: dict[str, list]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One cell's parsed column lists as arrays in the dtypes of the frames.

    Converting per cell (not after concatenating every cell's lists) gives the same values,
    element by element, and lets a cell's summary (:mod:`flatscore.analysis.summary`) store
    exactly what the loader would build from its ``episodes.jsonl``. ``reward`` stays float64
    so sums stay exact; ``task_id`` and the event strings are ``str``-ed as they always were.
    """
    ep: dict[str, np.ndarray] = {
        "task_id": _objects(str(t) for t in cols["task_id"]),
        "termination": _objects(cols["termination"]),
    }
    for key, dtype in EPISODE_DTYPES.items():
        ep[key] = np.asarray(cols[key], dtype=dtype)
    for key, values in cols.items():
        if key.startswith("ch_"):
            ep[key] = np.asarray(values, dtype=COUNT_DTYPE)
    evd: dict[str, np.ndarray] = {
        "row": np.asarray(ev["row"], dtype=np.int64),
        "step": np.asarray(ev["step"], dtype=np.int16),
        "counted": np.asarray(ev["counted"], dtype=bool),
    }
    for key in ("channel", "side", "tool"):
        evd[key] = _objects(str(v) for v in ev[key])
    return ep, evd
