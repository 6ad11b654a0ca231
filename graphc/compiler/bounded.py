"""A bounded map of things compiled on demand: the partitions compiled at run,
per values of value inputs (executables.per_values) or per input shapes
(compiled_graph), each of which holds a kernel.  Kept at most as many as the
in-process kernel cache (``$GRAPHC_KERNEL_CACHE_SIZE``,
graphc.codegen.cache.kernel_cache_size), least recently used dropped first: a
dropped one compiles again when next asked for (its kernel from the on-disk
cache), and its kernel is freed once the kernel cache drops it too."""
from __future__ import annotations

import threading
from collections import OrderedDict



def kernel_cache_size() -> int:
    """As many as the in-process kernel cache keeps (imported at first use: numba)."""
    from ..codegen.cache import kernel_cache_size as size
    return size()


class BoundedCache:
    """{key: value made by ``make()``}, at most ``size()`` of them; thread-safe.
    Copied or pickled, it is empty (what it holds compiles again)."""

    def __init__(self, size=kernel_cache_size):
        self._size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.made = 0   # values made so far (dropped ones made again count again)

    def get(self, key, make):
        """The value of ``key``, made by ``make()`` (under the lock: once) if not held."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
                return value
            value = make()
            self.made += 1
            self._items[key] = value
            limit = max(0, self._size())
            while len(self._items) > limit:
                self._items.popitem(last=False)
            return value

    def items(self) -> list:
        """[(key, value)] held now, least recently used first."""
        with self._lock:
            return list(self._items.items())

    def __len__(self) -> int:
        return len(self._items)

    def __getstate__(self):
        return {"size": self._size}

    def __setstate__(self, state):
        self.__init__(state["size"])
