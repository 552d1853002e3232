"""One preallocated key/value buffer for a whole batch, written in place by prefill and decode.

Why: the batched decode used to spend most of its time moving the cache, not attending to it.
``DynamicLayer.update`` concatenates (a full copy per layer per step); building the left-padded
batch concatenated every row again; a grow-in-place copy of the batch followed; and every
finished row cut the batch with ``index_select`` (another full copy, plus page faults on the
freshly allocated tensors). Profiled at N=16 on the default demo model those copies were
~3x the cost of the attention itself.

Here the batch layout is fixed before any model call: row ``i`` is left-padded by ``pad[i]``
columns so that every row ends at the same column, which is where decode writes. Prefill of
row ``i`` (alone, batch of one) copies its cached prefix into place and the model writes the
new keys/values straight into the row (:class:`RowLayer` views). Decode steps write one column
for all rows (:class:`BatchLayer`). Finished rows stay in the batch (their tokens are ignored)
until at most half the rows are live; then the live rows are moved down in place
(:meth:`BatchKV.compact`), so no step allocates. The buffers are kept by the backend and
reused by the next batch (page faults once); padding columns are zeroed for every batch, so a
masked column is always a finite 0 and contributes exactly nothing (0 * finite = 0).
"""

from __future__ import annotations

from typing import Any


def _layer_classes():
    """The transformers cache-layer subclasses (imported lazily: transformers is heavy)."""
    from transformers.cache_utils import DynamicLayer

    class RowLayer(DynamicLayer):
        """Prefill of one row: columns ``[start, n)`` of row ``row`` are the past; new keys go at ``n``."""

        def __init__(self, kbuf: Any, vbuf: Any, row: int, start: int, n: int) -> None:
            super().__init__()
            self.is_initialized = True
            self.dtype, self.device = kbuf.dtype, kbuf.device
            self._k, self._v = kbuf[row : row + 1], vbuf[row : row + 1]
            self.start, self.n = start, n
            self.keys, self.values = self._k[:, :, start:n], self._v[:, :, start:n]

        def update(self, key_states, value_states, *args, **kwargs):
            t = key_states.shape[-2]
            self._k[:, :, self.n : self.n + t] = key_states
            self._v[:, :, self.n : self.n + t] = value_states
            self.n += t
            self.keys, self.values = self._k[:, :, self.start : self.n], self._v[:, :, self.start : self.n]
            return self.keys, self.values

    class BatchLayer(DynamicLayer):
        """Decode of rows ``[0, rows)``: columns ``[start, n)`` are the past; each step writes column ``n``."""

        def __init__(self, owner: BatchKV, layer: int) -> None:
            super().__init__()
            self.is_initialized = True
            self.owner, self.layer = owner, layer
            self.dtype, self.device = owner.k[layer].dtype, owner.k[layer].device
            self._views()

        def _views(self) -> None:
            o = self.owner
            self.keys = o.k[self.layer][: o.rows, :, o.start : o.n]
            self.values = o.v[self.layer][: o.rows, :, o.start : o.n]

        def update(self, key_states, value_states, *args, **kwargs):
            o, t = self.owner, key_states.shape[-2]
            end = o.n + t  # o.n moves once per forward, in BatchKV.advance
            o.k[self.layer][: o.rows, :, o.n : end] = key_states
            o.v[self.layer][: o.rows, :, o.n : end] = value_states
            self.keys = o.k[self.layer][: o.rows, :, o.start : end]
            self.values = o.v[self.layer][: o.rows, :, o.start : end]
            return self.keys, self.values

    return RowLayer, BatchLayer


_CLASSES: tuple[Any, Any] | None = None


def _classes():
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _layer_classes()
    return _CLASSES


class BatchKV:
    """Per-layer key/value buffers ``[rows, heads, capacity, dim]`` of one batch (see module doc)."""

    def __init__(self, k: list[Any], v: list[Any], rows: int, width: int) -> None:
        self.k, self.v = k, v
        self.rows = rows
        #: first column any live row uses (the smallest padding), and the filled width
        self.start = 0
        self.n = width

    @staticmethod
    def allocate(
        torch: Any,
        layers: int,
        rows: int,
        heads: int,
        dim: int,
        capacity: int,
        dtype: Any,
        device: Any,
        old: BatchKV | None = None,
    ) -> BatchKV:
        """Buffers for ``rows`` x ``capacity``; ``old``'s memory is reused when it is big enough."""
        if old is not None:
            k0 = old.k[0]
            if (
                len(old.k) == layers
                and k0.shape[0] >= rows
                and k0.shape[1] == heads
                and k0.shape[2] >= capacity
                and k0.shape[3] == dim
                and k0.dtype == dtype
                and str(k0.device) == str(device)
            ):
                return BatchKV(old.k, old.v, rows, 0)
        cap = -(-capacity // 256) * 256  # round up: the next batch likely fits
        shape = (rows, heads, cap, dim)
        k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        return BatchKV(k, v, rows, 0)

    def capacity(self) -> int:
        return self.k[0].shape[2]

    def place_row(self, row: int, pad: int, prefix: list[tuple[Any, Any]] | None) -> None:
        """Zero row ``row``'s padding and copy its cached prefix (per layer ``[1, h, n, d]``) after it."""
        for layer in range(len(self.k)):
            if pad:
                self.k[layer][row, :, :pad].zero_()
                self.v[layer][row, :, :pad].zero_()
            if prefix:
                pk, pv = prefix[layer]
                m = pk.shape[-2]
                self.k[layer][row, :, pad : pad + m] = pk[0]
                self.v[layer][row, :, pad : pad + m] = pv[0]

    def row_cache(self, config: Any, row: int, start: int, n: int):
        """A DynamicCache over row ``row`` (past = columns ``[start, n)``) for its prefill."""
        from transformers import DynamicCache

        row_layer, _ = _classes()
        cache = DynamicCache(config=config)
        cache.layers = [row_layer(k, v, row, start, n) for k, v in zip(self.k, self.v)]
        return cache

    def batch_cache(self, config: Any):
        """A DynamicCache over rows ``[0, rows)`` for the decode steps."""
        from transformers import DynamicCache

        _, batch_layer = _classes()
        cache = DynamicCache(config=config)
        cache.layers = [batch_layer(self, layer) for layer in range(len(self.k))]
        self._cache = cache
        return cache

    def advance(self, t: int = 1) -> None:
        """After a decode forward: its ``t`` columns are filled for every layer."""
        self.n += t
        cache = getattr(self, "_cache", None)
        if cache is not None:
            for layer in cache.layers:
                layer._views()

    def row_kv(self, row: int, start: int, end: int) -> list[tuple[Any, Any]]:
        """Contiguous copies of row ``row``'s columns ``[start, end)``, per layer ``[1, h, n, d]``."""
        return [
            (k[row : row + 1, :, start:end].clone(), v[row : row + 1, :, start:end].clone())
            for k, v in zip(self.k, self.v)
        ]

    def row_view(self, row: int, start: int, end: int) -> list[tuple[Any, Any]]:
        """Views (no copy) of row ``row``'s columns ``[start, end)``, per layer ``[1, h, n, d]``.

        Valid only while the batch's prefill runs: decode writes and compaction move rows.
        """
        return [(k[row : row + 1, :, start:end], v[row : row + 1, :, start:end]) for k, v in zip(self.k, self.v)]

    def compact(self, keep: list[int], start: int) -> None:
        """Move rows ``keep`` (ascending) to ``0..len(keep)-1`` in place; columns before ``start`` are dropped."""
        for dst, src in enumerate(keep):
            if dst != src:
                for k, v in zip(self.k, self.v):
                    k[dst, :, start : self.n] = k[src, :, start : self.n]
                    v[dst, :, start : self.n] = v[src, :, start : self.n]
        self.rows = len(keep)
        self.start = start
        cache = getattr(self, "_cache", None)
        if cache is not None:
            for layer in cache.layers:
                layer._views()


__all__ = ["BatchKV"]
