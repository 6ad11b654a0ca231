"""The constant tensor cache (oneDNN's): outputs of partitions computed from
constant-property tensors only, kept after their first run within a capacity
per engine kind.  Compiled partitions reserve and release its bytes
(graphc.compiler.compiled_partition)."""
from __future__ import annotations

import os
import sys
import threading

import numpy as np

from ..errors import InvalidArguments, short

#: capacity meaning "no limit" (MB), as oneDNN's default when the cache is on
UNLIMITED_CAPACITY_MB = sys.maxsize >> 20


def _capacity_from_env() -> dict[str, int]:
    """ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY='cpu:1024[;gpu:2048]' (MB), read once."""
    out = {"cpu": 0}
    text = os.environ.get("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY", "")
    for item in text.split(";"):
        kind, sep, size = item.strip().partition(":")
        if sep and kind.strip() == "cpu" and size.strip().isdigit():
            out["cpu"] = int(size)
    return out


class ConstantTensorCache:
    """The process-wide constant tensor cache (oneDNN's): the outputs of a
    partition computed from constant-property tensors only are kept by its
    compiled partition after its first execution and reused by later ones, as
    long as the cache is on and its capacity (MB, per engine kind) holds them.
    Off by default, as in oneDNN; ``ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY``
    ('cpu:SIZE_MB') turns it on at import.  When full, new tensors are not
    cached (nothing cached is evicted); a compiled partition that goes away
    gives its bytes back."""

    def __init__(self):
        self._lock = threading.Lock()
        self._capacity = _capacity_from_env()
        self._flag = self._capacity["cpu"] > 0
        self.used_bytes = 0
        #: the user chose the cache's state (the environment variable, or a setter called)
        self.configured = "ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY" in os.environ

    def default_on(self) -> None:
        """Turn the cache on, unlimited, unless the user chose its state (graphc.torch
        does for inference, where parameters are constant tensors)."""
        with self._lock:
            if not self.configured:
                self._flag = True
                if self._capacity["cpu"] == 0:
                    self._capacity["cpu"] = UNLIMITED_CAPACITY_MB

    def enabled(self) -> bool:
        return self._flag and self._capacity["cpu"] > 0

    def set_flag(self, flag) -> None:
        if isinstance(flag, bool) or not isinstance(flag, (int, np.integer)) or flag not in (0, 1):
            raise InvalidArguments("the constant tensor cache flag must be 0 (off) or 1 (on)", found=short(flag))
        with self._lock:
            self.configured = True
            self._flag = bool(flag)
            if flag and self._capacity["cpu"] == 0:
                self._capacity["cpu"] = UNLIMITED_CAPACITY_MB

    def flag(self) -> int:
        return int(self.enabled())

    def set_capacity(self, engine_kind, size) -> None:
        _check_engine_kind(engine_kind)
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise InvalidArguments("the constant tensor cache capacity is a number of megabytes",
                                   expected="an integer >= 0", found=short(size))
        with self._lock:
            self.configured = True
            self._capacity[engine_kind] = int(size)
            self._flag = size > 0

    def capacity(self, engine_kind) -> int:
        _check_engine_kind(engine_kind)
        return self._capacity[engine_kind]

    def reserve(self, nbytes: int) -> bool:
        """Count ``nbytes`` as cached if the cache is on and they fit."""
        with self._lock:
            if not self.enabled() or self.used_bytes + nbytes > (self._capacity["cpu"] << 20):
                return False
            self.used_bytes += nbytes
            return True

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.used_bytes -= nbytes


def _check_engine_kind(kind) -> None:
    from ..graph import ENGINE_KINDS
    if kind not in ENGINE_KINDS:
        raise InvalidArguments("unsupported engine kind", expected=" or ".join(ENGINE_KINDS), found=short(kind))


CONSTANT_CACHE = ConstantTensorCache()


def set_constant_tensor_cache(flag: int) -> None:
    """Turn the constant tensor cache on (1) or off (0), as dnnl::graph::set_constant_tensor_cache."""
    CONSTANT_CACHE.set_flag(flag)


def get_constant_tensor_cache() -> int:
    """1 when the constant tensor cache is on, else 0."""
    return CONSTANT_CACHE.flag()


def set_constant_tensor_cache_capacity(engine_kind: str, size: int) -> None:
    """The cache's capacity for ``engine_kind`` ('cpu') in megabytes; 0 turns it off."""
    CONSTANT_CACHE.set_capacity(engine_kind, size)


def get_constant_tensor_cache_capacity(engine_kind: str) -> int:
    return CONSTANT_CACHE.capacity(engine_kind)
