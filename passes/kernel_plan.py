"""What legality hands to code generation: the plan of a fused partition's
kernel (:class:`FusionPlan`), and why a set of ops may not fuse (:class:`Illegal`).
passes/legality.py makes plans; graphc/codegen/fusion.py and
graphc/lowering.py follow them and never refuse one."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FusionPlan:
    shape: str   # "eltwise", "anchor", "staged", "attention", "attention_rows", "views" or "conv_depthwise"
    anchors: list = field(default_factory=list)  # op ids of the non-pointwise ops, in order
    roles: dict = field(default_factory=dict)    # tensor id -> "register" | "written" | "scratch" | "view"
    prologue: set = field(default_factory=set)   # op ids (anchor shape)
    epilogue: set = field(default_factory=set)   # op ids (anchor shape)
    views_in: list = field(default_factory=list)   # view ops read as strides of an input (in order)
    views_out: list = field(default_factory=list)  # view ops a value is stored through (in order)
    #: why the kernel lowers one op after another (through scratch buffers) rather
    #: than fused; "" when fused.  Only legality sets it, and the pass log shows it.
    one_at_a_time: str = ""

    def describe(self) -> str:
        kept = sorted(t for t, r in self.roles.items() if r == "register")
        written = sorted(t for t, r in self.roles.items() if r == "written")
        scratch = sorted(t for t, r in self.roles.items() if r == "scratch")
        return (f"{self.shape} kernel; in registers: {kept or 'none'}; written: {written or 'none'}"
                + (f"; scratch: {scratch}" if scratch else "")
                + (f"; one op at a time: {self.one_at_a_time}" if self.one_at_a_time else ""))


class Illegal(Exception):
    """Why a set of ops cannot fuse (a reason for the pass log)."""


def bound_once(roles: dict, label: str, pattern: str):
    """The one op a ``pattern`` bound as ``label`` (``Match.roles``), or Illegal."""
    ops = roles.get(label, ())
    if len(ops) != 1:
        raise Illegal(f"the {pattern} pattern binds {len(ops)} ops as {label!r}, not one")
    return ops[0]


__all__ = ["FusionPlan", "Illegal", "bound_once"]
