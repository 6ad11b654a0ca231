"""The op schema registry: one module per op family, one class per op kind.

Importing this package imports every family module, whose schema classes
register themselves with the registry (graphc.ops.schema); ``import graphc``
does so.  The families import numpy and the core only, no code generation.
Python's import lock makes a thread that imports graphc while another does
wait for the whole registry.
"""
from . import (bias, binary, conv, distributed, eltwise, interpolate, matmul, misc, norm, pool,  # noqa: F401
               quant, reduce, seed, shuffle, softmax)
from .schema import OpSchema, all_kinds, aliases, get_schema

__all__ = ["OpSchema", "all_kinds", "aliases", "get_schema"]
