"""Distributed LayerNorm (ttnn.layer_norm_pre_all_gather / post_all_gather) and
the AllGather collective between them; ReduceScatter, AllGather's derivative.

Each of P ranks holds a [..., W] slice of the rows.  LayerNormPreAllGather gives
per row the local mean and M2 (sum of squared deviations from it); AllGather
concatenates the [..., 2] stats of all ranks into [..., 2P]; and
LayerNormPostAllGather merges them with Chan's parallel formula (stable where
the sum / sum of squares form cancels) and normalizes the local slice.

Their derivatives (graphc.grad): Post's gives the gradient of the gathered
stats, (mean_p, M2_p) of every shard; AllGather's is ReduceScatter, each rank
receiving the sum over the ranks of its own shard's part; Pre's turns that into
its slice's gradient.  Chained, they are the whole LayerNorm's gradient.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidArguments, InvalidDataType, InvalidGraphOp, RuntimeFault
from .common import F
from .schema import (Attr, DtypeTable, In, OpSchema, Out, bad_shape, dims_equal, non_negative, norm_axis,
                     same_dtype)


def _check_rows(op, port="src"):
    """src must be [..., W] with W > 0 (a row mean needs elements)."""
    t = op.input(port)
    if t.ndim == 0 or t.shape[-1] == 0:
        raise bad_shape(op, "rows must be non-empty: the shape must be [..., W] with W > 0", where=f"port '{port}'",
                        found=list(t.shape))


def merge_stats(stats: np.ndarray, width: int):
    """(mean, var) per row of all P*width elements, from gathered stats
    [..., 2P] = (mean_p, M2_p) pairs of P shards of ``width`` elements each."""
    means, m2 = stats[..., 0::2], stats[..., 1::2]
    shards = means.shape[-1]
    mean = means.mean(axis=-1)
    # Chan et al.: M2 = sum M2_p + sum n_p (mean_p - mean)^2, with n_p = width
    total_m2 = m2.sum(axis=-1) + width * ((means - mean[..., None]) ** 2).sum(axis=-1)
    return mean, total_m2 / (shards * width)


class LayerNormPreAllGather(OpSchema):
    kind = "LayerNormPreAllGather"
    family = "norm_distributed"
    doc = "Per-row local statistics for a distributed LayerNorm: stats [..., 2] = (mean, M2)."
    inputs = (In("src", doc="[..., W], this rank's slice of each row"),)
    outputs = (Out("stats", doc="[..., 2]: the local mean and sum of squared deviations from it; "
                                "f32, or src's type (ttnn's bf16 stats)"),)
    dtypes = DtypeTable(["src", "stats"], [(F, "f32"), ("bf16", "bf16"), ("f16", "f16")])

    def check(self, op):
        _check_rows(op)

    def infer(self, op):
        return [op.input("src").shape[:-1] + (2,)]

    def reference(self, op, x):
        mean = x.mean(axis=-1, keepdims=True)
        m2 = ((x - mean) ** 2).sum(axis=-1, keepdims=True)
        return (np.concatenate([mean, m2], axis=-1),)

    def vjp(self, op, em):
        """src's gradient from the stats': d_mean / W + 2 d_M2 (src - mean), in f32."""
        x, stats = op.inputs[0], op.outputs[0]
        g, dt = em.cast(em.grad(stats), "f32"), "f32"
        dmean, dm2, mean = (em.one("StaticSlice", [t], {"begin": [i], "end": [i + 1], "axes": [-1]})
                            for t, i in ((g, 0), (g, 1), (em.cast(stats, dt), 0)))
        centred = em.one("Subtract", [em.cast(x, dt), mean])
        return [em.one("Add", [em.scale(em.one("Multiply", [dm2, centred]), 2.0), em.scale(dmean, 1.0 / x.shape[-1])])]


class AllGather(OpSchema):
    kind = "AllGather"
    family = "collective"
    doc = "Concatenates src of every member of the group along axis, in rank order."
    inputs = (In("src"),)
    outputs = (Out("dst", doc="src's shape with dim axis multiplied by the group size"),)
    attrs = (Attr("axis", "s64", -1),)
    dtypes = same_dtype("src|dst", F + ",s32,s8,u8")
    #: the reference executor passes its communicator (mpi4py-like) to reference()
    needs_comm = True

    def axis(self, op) -> int:
        x = op.input("src")
        if x.ndim == 0:
            raise bad_shape(op, "src must have rank >= 1", where="port 'src'", found=[])
        return norm_axis(op, op.attr("axis"), x.ndim)

    def gathered_dim(self, op, axis) -> int:
        """The declared output dim along axis (-1 when unknown)."""
        y = op.output("dst")
        return y.shape[axis] if y.ndim == op.input("src").ndim else -1

    def check(self, op):
        axis = self.axis(op)
        n, m = op.input("src").shape[axis], self.gathered_dim(op, axis)
        if n != -1 and m != -1 and not (m == 0 if n == 0 else (m > 0 and m % n == 0)):
            raise bad_shape(op, "the output dim along axis must be a multiple of src's (times the group size)",
                            where="port 'dst'", expected=f"a positive multiple of {n} at dim {axis}", found=m)

    def infer(self, op):
        axis = self.axis(op)
        shape = list(op.input("src").shape)
        shape[axis] = self.gathered_dim(op, axis)
        return [tuple(shape)]

    def check_group(self, op, src, size: int) -> None:
        """dst's declared dim along axis must be src's times the group size."""
        n, declared = src.shape[self.axis(op)], self.gathered_dim(op, self.axis(op))
        if declared != -1 and declared != size * n:
            raise RuntimeFault("the output dim along axis disagrees with the group size", op=op, where="port 'dst'",
                               expected=f"{n} x {size} members = {size * n}", found=declared)

    def reference(self, op, src, comm=None):
        """On ``comm``, the group's communicator (mpi4py-like: ``Get_size``,
        ``allgather``), None for a group of one; the reference executor passes
        graphc's default (graphc.comm.default_comm) when given none."""
        self.check_group(op, src, 1 if comm is None else comm.Get_size())
        parts = [src] if comm is None else comm.allgather(src)
        return (np.concatenate(parts, axis=self.axis(op)),)

    def vjp(self, op, em):
        """ReduceScatter: the gathered gradients of every member summed, this
        member's block taken."""
        return [em.op("ReduceScatter", [em.grad(op.outputs[0])], [(op.inputs[0].dtype, op.inputs[0].shape)],
                      {"axis": op.attr("axis")})[0]]


class ReduceScatter(AllGather):
    """The sum over the members of the group of their src, cut along ``axis``
    into one block per member in rank order: member r gets block r.  AllGather's
    derivative (and AllGather is this one's)."""

    kind = "ReduceScatter"
    doc = "Sums src over the members of the group; member r gets block r of the sum along axis."
    outputs = (Out("dst", doc="src's shape with dim axis divided by the group size"),)
    dtypes = same_dtype("src|dst", F)

    def check(self, op):
        axis = self.axis(op)
        n, m = op.input("src").shape[axis], self.gathered_dim(op, axis)
        if n != -1 and m != -1 and not (n == 0 if m == 0 else (m > 0 and n % m == 0)):
            raise bad_shape(op, "src's dim along axis must be a multiple of the output's (the group size)",
                            where="port 'dst'", expected=f"a divisor of {n} at dim {axis}", found=m)

    def check_group(self, op, src, size: int) -> None:
        """src's dim along axis must be the declared dst dim times the group size."""
        n, declared = src.shape[self.axis(op)], self.gathered_dim(op, self.axis(op))
        if n % size or (declared != -1 and declared * size != n):
            raise RuntimeFault("src's dim along axis disagrees with the group size", op=op, where="port 'src'",
                               expected=f"{size} members x {declared if declared != -1 else 'a block'}", found=n)

    def reference(self, op, src, comm=None):
        """On ``comm`` (mpi4py-like: ``Get_rank``, ``Get_size``, ``allgather``),
        None for a group of one."""
        if comm is not None and not callable(getattr(comm, "Get_rank", None)):
            raise InvalidArguments("a reduce-scatter needs the member's rank", op=op,
                                   expected="a communicator with Get_rank", found=type(comm).__name__)
        rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
        self.check_group(op, src, size)
        total = src if comm is None else np.sum(comm.allgather(src), axis=0)
        axis, n = self.axis(op), src.shape[self.axis(op)] // size
        return (np.take(total, range(rank * n, (rank + 1) * n), axis=axis),)

    def vjp(self, op, em):
        """AllGather: every member's block of the gradient, concatenated."""
        return [em.op("AllGather", [em.grad(op.outputs[0])], [(op.inputs[0].dtype, op.inputs[0].shape)],
                      {"axis": op.attr("axis")})[0]]


class LayerNormPostAllGather(OpSchema):
    kind = "LayerNormPostAllGather"
    family = "norm_distributed"
    doc = "LayerNorm of this rank's slice with the mean and variance merged from all ranks' gathered stats."
    inputs = (In("src", doc="[..., W], this rank's slice of each row"),
              In("stats", doc="[..., 2P]: (mean_p, M2_p) of the P slices, in rank order"),
              In("gamma", optional=True, doc="[W]"), In("beta", optional=True, doc="[W]"))
    outputs = (Out("dst", doc="src's type, or the dtype attribute's"),)
    attrs = (Attr("epsilon", "f32", 1e-12, check=non_negative, check_doc="non-negative"),
             Attr("dtype", "string", None, choices=tuple(F.split(",")),
                  doc="the data type of dst (ttnn's dtype keyword); default: src's"))
    dtypes = DtypeTable(["src", "stats", "gamma|beta", "dst"],
                        [("f32", "f32,bf16,f16", "f32", F), ("bf16", "f32,bf16", "f32,bf16", F),
                         ("f16", "f32,f16", "f32,f16", F)])

    def check(self, op):
        _check_rows(op)
        src, dst = op.input("src"), op.output("dst")
        want = op.attr("dtype") or src.dtype.value
        if dst is not None and dst.dtype.value != want:
            raise InvalidDataType("dst must have the dtype attribute's type, or src's without it", op=op,
                                  where="port 'dst'", expected=want, found=str(dst.dtype))
        x, stats, gamma = op.input("src"), op.input("stats"), op.input("gamma")
        if gamma is not None and op.input("beta") is None:
            raise InvalidGraphOp("gamma and beta must be given both or neither", op=op, where="port 'beta'",
                                 expected="beta with gamma")
        lead = x.shape[:-1]
        if stats.ndim != x.ndim or not all(dims_equal(a, b) for a, b in zip(stats.shape[:-1], lead)):
            raise bad_shape(op, "stats must be [..., 2P] with src's leading dims", where="port 'stats'",
                            expected=list(lead) + ["2P"], found=list(stats.shape))
        w = stats.shape[-1]
        if w != -1 and (w == 0 or w % 2):
            raise bad_shape(op, "the stats width must be even: a (mean, M2) pair per shard", where="port 'stats'",
                            expected="a positive even last dim", found=w)
        for name in ("gamma", "beta"):
            t = op.input(name)
            if t is not None and (t.ndim != 1 or not dims_equal(t.shape[0], x.shape[-1])):
                raise bad_shape(op, f"{name} must be [W], W the last dim of src", where=f"port '{name}'",
                                expected=[x.shape[-1]], found=list(t.shape))

    def infer(self, op):
        return [op.input("src").shape]

    def input_range(self, op, index):
        if op.input_names[index] == "stats":
            return (0.25, 4.0)  # (mean, M2) pairs: M2 must be non-negative
        return None

    def reference(self, op, x, stats, gamma=None, beta=None):
        mean, var = merge_stats(stats, x.shape[-1])
        y = (x - mean[..., None]) / np.sqrt(var[..., None] + op.attr("epsilon"))
        if gamma is not None:
            y = y * gamma + beta
        return (y,)

    def vjp(self, op, em):
        """In f32: src's gradient with the stats held (diff_dst * gamma * rstd), the
        gradients of the merged mean and variance (the sums of diff_dst * gamma
        and of it times src - mean over this rank's slice), and through Chan's
        merge those of every shard's (mean_p, M2_p): d_mean / P + d_var * 2
        (mean_p - mean) / P and d_var / (P W); gamma's and beta's summed over the
        rows."""
        x, stats, gamma, beta = (op.input(n) for n in ("src", "stats", "gamma", "beta"))
        f32 = "f32"
        dy, xc = em.cast(em.grad(op.outputs[0]), f32), em.cast(x, f32)
        width, shards, lead = x.shape[-1], stats.shape[-1] // 2, x.shape[:-1]
        pairs = em.reshape(em.cast(stats, f32), lead + (shards, 2))
        means, m2 = (em.one("StaticSlice", [pairs], {"begin": [i], "end": [i + 1], "axes": [-1]}) for i in (0, 1))
        mean = em.one("ReduceMean", [means], {"axes": [-2], "keep_dims": True})          # [..., 1, 1]
        dev = em.one("Subtract", [means, mean])                                             # [..., P, 1]
        spread = em.one("ReduceSum", [em.one("Multiply", [dev, dev])], {"axes": [-2], "keep_dims": True})
        total = em.one("Add", [em.one("ReduceSum", [m2], {"axes": [-2], "keep_dims": True}), em.scale(spread, width)])
        var = em.reshape(em.scale(total, 1.0 / (shards * width)), lead + (1,))
        rstd = em.one("Reciprocal", [em.one("Sqrt", [em.one("Add", [var, em.full_like(var, op.attr("epsilon"))])])])
        centred = em.one("Subtract", [xc, em.reshape(mean, lead + (1,))])
        dyg = dy if gamma is None else em.one("Multiply", [dy, em.cast(gamma, f32)])
        dx = em.one("Multiply", [dyg, rstd])
        row_sum = lambda t: em.one("ReduceSum", [t], {"axes": [-1], "keep_dims": True})   # noqa: E731
        dmean = em.neg(em.one("Multiply", [row_sum(dyg), rstd]))                            # [..., 1]
        cube = em.one("Multiply", [rstd, em.one("Multiply", [rstd, rstd])])
        dvar = em.scale(em.one("Multiply", [row_sum(em.one("Multiply", [dyg, centred])), cube]), -0.5)
        dmean, dvar = (em.reshape(t, lead + (1, 1)) for t in (dmean, dvar))
        dmeans = em.one("Add", [em.scale(dmean, 1.0 / shards), em.one("Multiply", [dev, em.scale(dvar, 2.0 / shards)])])
        dm2 = em.broadcast_to(em.scale(dvar, 1.0 / (shards * width)), dmeans)
        dstats = em.reshape(em.one("Concat", [dmeans, dm2], {"axis": -1}), stats.shape)
        grads = [dx, dstats]
        if gamma is not None:
            xhat = em.one("Multiply", [centred, rstd])
            grads += [em.sum_to(em.one("Multiply", [dy, xhat]), gamma.shape) if em.wants(gamma) else None,
                      em.sum_to(dy, beta.shape) if em.wants(beta) else None]
        return grads
