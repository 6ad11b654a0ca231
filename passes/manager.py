"""The pass manager: a pipeline of small passes over a finalized graph.

Each pass reads and updates a :class:`PassContext` and returns a list of
human-readable changes (shown by ``graphc partitions --passes``).  Passes do not
mutate the user's graph: they decide which ops are live, which are constant,
which fuse, and how ops group into partitions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class PassContext:
    graph: object
    policy: str
    can_lower: Callable[[object], bool]               # code generation's answer: does this build lower an op?
    live: set = field(default_factory=set)            # op ids that contribute to an output
    constant_ops: set = field(default_factory=set)    # op ids computable from constant tensors only
    matches: list = field(default_factory=list)       # passes.pattern.Match
    groups: list = field(default_factory=list)        # [(pattern name or "", [ops], FusionPlan or None)] in order
    log: list = field(default_factory=list)           # [(pass name, [changes])]


class Pass:
    name = "pass"

    def run(self, ctx: PassContext) -> list[str]:
        raise NotImplementedError


class PassManager:
    def __init__(self, passes: list[Pass]):
        self.passes = passes

    def run(self, ctx: PassContext) -> PassContext:
        for p in self.passes:
            changes = p.run(ctx) or []
            ctx.log.append((p.name, changes))
        return ctx
