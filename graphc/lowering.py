"""Which partitions graphc can compile (filled in by the code generator)."""
from __future__ import annotations


def can_lower(partition) -> bool:
    return False
