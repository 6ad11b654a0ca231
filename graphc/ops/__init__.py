"""The op schema registry: one module per op family, one class per op kind.

The family modules (graphc.ops._families lists them) register their schemas
with the registry (graphc.ops.schema) when it is first read, loaded here
behind its lock: they still import code generation, hence numba, which
``import graphc`` must not load.  Once no family imports code generation,
this module can import them at once and drop the loader.
"""
from . import schema
from .schema import OpSchema, all_kinds, aliases, get_schema


def _load_families() -> None:
    from . import _families  # noqa: F401  (imports every family module)


schema.set_family_loader(_load_families)

__all__ = ["OpSchema", "all_kinds", "aliases", "get_schema"]
