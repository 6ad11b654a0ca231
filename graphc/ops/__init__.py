"""The op schema registry: one module per op family, one class per op kind."""
from .schema import OpSchema, all_kinds, aliases, get_schema

__all__ = ["OpSchema", "all_kinds", "aliases", "get_schema"]
