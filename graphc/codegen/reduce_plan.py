"""The reduction planner's layout (see graphc.codegen.grouped): which dim of a
reduction's loop dims is the vector lane, which are the groups and which the
rows, and how a long lane is cut.

The main tensor's dims are *kept* (they index independent groups) or
*reduced*.  The dim with the smallest stride becomes the vector lane loop,
innermost everywhere; the other kept dims are the groups, the other reduced
dims the rows.  A kept lane longer than ``MAX_LANES`` is cut into tiles of
``LANE_TILE`` lanes, the tiles becoming groups (so that the scratch arrays stay
small); a reduced lane longer than that with no other reduced dim is split into
rows of a divisor of its length (so that f32 lanes sum it and threads can share
its rows)."""
from __future__ import annotations

import math
from dataclasses import dataclass

#: most chunks of work (each owns its scratch and partial results)
MAX_CHUNKS = 64
#: longest kept lane held whole in scratch arrays; longer ones are cut in tiles
MAX_LANES = 4096
#: lanes of a tile of a long kept lane
LANE_TILE = 1024


@dataclass
class VDim:
    """One loop dim: extent, stride in the main tensor (orders the loops), kept or reduced."""

    extent: int
    stride: int
    kept: bool


def tensor_vdims(ref, kept) -> list[VDim]:
    """The main tensor's own dims, those in ``kept`` kept."""
    return [VDim(d, s, i in kept) for i, (d, s) in enumerate(zip(ref.shape, ref.strides))]


def _divisor(n: int):
    """The lanes of the rows a long reduced lane of ``n`` splits into: a divisor of n
    in [MAX_LANES / 8, MAX_LANES], the largest giving at least 4 rows per chunk;
    None if n has none."""
    lo = MAX_LANES // 8
    for top in (min(MAX_LANES, n // (4 * MAX_CHUNKS)), MAX_LANES):
        f = next((f for f in range(top, lo - 1, -1) if n % f == 0), None)
        if f is not None:
            return f
    return None


@dataclass
class Plan:
    """How a Nest lays out its vdims (see the module doc): the lane (None: no live
    dim), a long lane split in two dims ((lane, factor, extent), the outer dim
    appended to vdims), the group and row dims, and the extents of the lane, the
    groups and the rows."""

    vdims: list
    lane: int | None
    split: tuple | None
    group_dims: list
    row_dims: list
    L: int
    G: int
    R: int

    @property
    def lane_kept(self) -> bool:
        return self.lane is None or self.vdims[self.lane].kept


def plan(vdims: list[VDim]) -> Plan:
    """The planner's layout of ``vdims``: the live dim of smallest stride the lane,
    a long kept lane cut into LANE_TILE tiles (a group dim), a long reduced lane
    alone into rows of a divisor of its length."""
    live = [i for i, d in enumerate(vdims) if d.extent != 1]
    order = sorted(live, key=lambda i: (-abs(vdims[i].stride), i))
    lane = order[-1] if order else None
    split = None
    if lane is not None:
        n, st = vdims[lane].extent, vdims[lane].stride
        if vdims[lane].kept and n > MAX_LANES and any(not vdims[i].kept for i in live):
            # a long kept lane: tiles of LANE_TILE lanes (the last one shorter), a group dim
            split = (lane, LANE_TILE, n)
        elif not vdims[lane].kept and n > MAX_LANES and all(vdims[i].kept for i in order[:-1]):
            # a long reduced lane alone: rows of f lanes (a divisor of n), which
            # f32 lanes sum and threads can share
            f = _divisor(n)
            if f is not None:
                split = (lane, f, n)
        if split is not None:
            f = split[1]
            vdims = list(vdims) + [VDim(-(-n // f), st * f, vdims[lane].kept)]
            vdims[lane] = VDim(f, st, vdims[lane].kept)
            order = sorted(order[:-1] + [len(vdims) - 1], key=lambda i: (-abs(vdims[i].stride), i)) + [lane]
    group_dims = [i for i in order[:-1] if vdims[i].kept]
    row_dims = [i for i in order[:-1] if not vdims[i].kept]
    return Plan(vdims, lane, split, group_dims, row_dims, vdims[lane].extent if order else 1,
                math.prod(vdims[i].extent for i in group_dims), math.prod(vdims[i].extent for i in row_dims))
