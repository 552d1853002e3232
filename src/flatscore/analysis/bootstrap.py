"""Task-clustered bootstrap confidence intervals, computed in closed form.

Why not ``pg.compute_bootci``: it (``scipy.stats.bootstrap`` underneath) evaluates the statistic
on the n jackknife resamples for BCa; for task-clustered statistics that is an (n x n) @ (n x m)
product per call, ~0.2 s at 1,700 tasks and ~230 calls per study. Every statistic bootstrapped
here is a function of per-task column sums, so the same interval is computed in closed form:
the *same* resamples (the draws scipy makes for pingouin's seed, reproduced with numpy's public
API), the same bootstrap distribution, the same BCa formulas (Efron & Tibshirani 14.3/15.4, as
scipy writes them) and the same quantile; only the jackknife uses leave-one-out sums
(total - row) instead of re-summing n - 1 rows, which changes a_hat in the last bits at most.
Statistics other than the mean of one sample still go to ``pg.compute_bootci``.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import numpy as np
import pingouin as pg

DECIMALS = 12  # compute_bootci rounds to 2 decimals by default: keep the CI exact


def _draw_indices(seed: Any, n: int, n_boot: int) -> np.ndarray:
    """The (n_boot, n) task indices scipy.stats.bootstrap draws for ``random_state=seed``.

    scipy turns an int seed into ``np.random.RandomState(seed)`` and draws with its ``randint``
    (int64, high exclusive); a Generator draws with ``integers``; None means numpy's global
    RandomState (``np.random.randint``). The same calls through numpy's public API give the same
    draws, bit for bit, without scipy's private ``_lib._util`` helpers.
    """
    size = (n_boot, n)
    if seed is None or seed is np.random:
        return np.random.randint(0, n, size=size, dtype=np.int64)
    if isinstance(seed, (int, np.integer)):
        seed = np.random.RandomState(seed)
    if isinstance(seed, np.random.Generator):
        return seed.integers(0, n, size=size, dtype=np.int64)
    if isinstance(seed, np.random.RandomState):
        return seed.randint(0, n, size=size, dtype=np.int64)
    raise ValueError(f"{seed!r} cannot seed the bootstrap")


@functools.lru_cache(maxsize=4)
def _resamples(n: int, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (n_boot, n) resample indices scipy.stats.bootstrap draws for ``random_state=seed``
    and their counts per task (n_boot, n), as float. Cached (read-only): every arm of a study
    with the same number of tasks is resampled alike, as pingouin with one seed does."""
    idx = _draw_indices(seed, n, n_boot)
    w = np.zeros((n_boot, n))
    step = max(1, 2**18 // n)  # rows per bincount: keep the counted block in cache
    for r0 in range(0, n_boot, step):
        block = idx[r0 : r0 + step]
        rows = block.shape[0]
        w[r0 : r0 + rows] = np.bincount((block + (np.arange(rows) * n)[:, None]).ravel(), minlength=rows * n).reshape(
            rows, n
        )
    idx.setflags(write=False)
    w.setflags(write=False)
    return idx, w


def _boot_indices(n: int, n_boot: int, seed) -> np.ndarray:
    return _resamples(int(n), int(n_boot), seed)[0]


def _interval(
    theta_b: np.ndarray, theta_hat: np.ndarray, theta_jack: np.ndarray | None, confidence: float = 0.95
) -> np.ndarray:
    """scipy's BCa (``theta_jack`` given) or percentile interval per row; (2, q).

    ``theta_b`` (q, B) bootstrap distribution, ``theta_hat`` (q,), ``theta_jack`` (q, n).
    """
    from scipy import stats as sps
    from scipy.special import ndtr, ndtri

    alpha = (1 - confidence) / 2
    q = theta_b.shape[0]
    if theta_jack is None:
        interval = np.broadcast_to(np.array([alpha, 1 - alpha]), (q, 2))
    else:
        B = theta_b.shape[-1]
        th = theta_hat[:, None]
        pct = (np.count_nonzero(theta_b < th, axis=-1) + np.count_nonzero(theta_b <= th, axis=-1)) / (2 * B)
        z0 = ndtri(pct)
        n = float(theta_jack.shape[-1])
        U = (n - 1) * (theta_jack.mean(axis=-1, keepdims=True) - theta_jack)
        a_hat = 1 / 6 * (np.sum(U**3, axis=-1) / n**3) / (np.sum(U**2, axis=-1) / n**2) ** (3 / 2)
        z_alpha = float(ndtri(alpha))
        num1, num2 = z0 + z_alpha, z0 - z_alpha
        interval = np.stack([ndtr(z0 + num1 / (1 - a_hat * num1)), ndtr(z0 + num2 / (1 - a_hat * num2))], axis=-1)
    ci = sps.quantile(theta_b, interval, axis=-1)  # (q, 2)
    return np.round(np.asarray(ci, dtype=float).T, DECIMALS)


def _bootci(x, y=None, func="mean", paired=False, n_boot=2000, seed=0) -> tuple[float, float]:
    """Bootstrap CI (BCa, unrounded); percentile if BCa degenerates; point if no spread.

    ``func="mean"`` (what this module uses) is computed in closed form, equal to
    ``pg.compute_bootci(x, func="mean", method=..., seed=seed)``; anything else goes to pingouin.
    """
    x = np.asarray(x, dtype=float)
    if x.size < 2:
        return (math.nan, math.nan)
    if y is None and np.ptp(x) == 0:
        return (float(x[0]), float(x[0]))
    if y is not None:
        y = np.asarray(y, dtype=float)
        if np.ptp(x) == 0 and np.ptp(y) == 0:
            v = float(func(x, y)) if callable(func) else math.nan
            return (v, v)
    if y is None and func == "mean":
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            n = x.size
            theta_b = np.mean(x[_boot_indices(n, n_boot, seed)], axis=-1)[None, :]
            theta_hat = np.array([np.mean(x)])
            jack = ((x.sum() - x) / (n - 1))[None, :]
            for j in (jack, None):
                ci = _interval(theta_b, theta_hat, j)[:, 0]
                if np.all(np.isfinite(ci)):
                    return (float(ci[0]), float(ci[1]))
        return (math.nan, math.nan)
    for method in ("bca", "per"):
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                ci = pg.compute_bootci(
                    x, y=y, func=func, paired=paired, method=method, n_boot=n_boot, decimals=DECIMALS, seed=seed
                )
            except (ValueError, FloatingPointError, ZeroDivisionError):
                continue
        if np.all(np.isfinite(ci)):
            return (float(ci[0]), float(ci[1]))
    return (math.nan, math.nan)


def bootci_tasks(A: np.ndarray, stat, n_boot: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Task-clustered bootstrap CIs of several statistics at once.

    ``A`` is (n_tasks, m): per-task sums; ``stat(S, n)`` maps column sums ``S`` (rows, m) of a
    resample of ``n`` tasks to (rows, q) statistics. The task indices are resampled as
    ``pg.compute_bootci(np.arange(n_tasks), func=..., seed=seed)`` resamples them; each
    resample's column sums are one matrix product, so q statistics cost one bootstrap, and the
    BCa jackknife uses leave-one-out sums. BCa first; outputs where BCa degenerates (no spread)
    get the percentile interval.
    """
    A = np.asarray(A, dtype=float)
    nt = A.shape[0]
    point = np.asarray(stat(A.sum(0, keepdims=True), nt), dtype=float)[0]
    lo, hi = np.full(point.shape, math.nan), np.full(point.shape, math.nan)
    if nt < 2:
        return lo, hi
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        w = _resamples(int(nt), int(n_boot), seed)[1]
        theta_b = np.asarray(stat(w @ A, nt), dtype=float).T  # (q, B)
        total = np.ones((1, nt)) @ A
        theta_hat = np.asarray(stat(total, nt), dtype=float)[0]
        jack = np.asarray(stat(total - A, nt - 1), dtype=float).T  # (q, n)
        for j in (jack, None):
            todo = ~(np.isfinite(lo) & np.isfinite(hi))
            if not todo.any():
                break
            ci = _interval(theta_b[todo], theta_hat[todo], None if j is None else j[todo])
            lo[todo], hi[todo] = ci[0], ci[1]
    # an output with no spread at all across tasks: the interval is the point
    for j in np.flatnonzero(~np.isfinite(lo)):
        if np.isfinite(point[j]):
            colvals = stat(A, 1)[:, j]
            if np.all(colvals == colvals[0]) or np.all(np.isnan(colvals)):
                lo[j] = hi[j] = point[j]
    return lo, hi
