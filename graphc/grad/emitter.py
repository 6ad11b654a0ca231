"""What a vector-Jacobian rule writes through: the :class:`Emitter`.

An op's rule (``vjp(self, op, em)`` on its schema class, in graphc/ops/) reads
the gradients reaching the op's outputs (``em.grad``), asks which inputs want
one (``em.wants``), emits oneDNN ops (``em.op`` and the helpers built on it)
and returns one gradient per input (None where it gives none).  The rules
never import this module: the driver (graphc.grad.driver) hands them an
Emitter.

Every op emitted is validated at once (its output shapes inferred), so a rule
sees the shapes of what it built.  Constants come from the tensors at hand:
zeros of a tensor's shape are ClampBackward with an empty interval (0 even
where the tensor is NaN or infinite), a value c is Clamp of those zeros to
[c, c]; in a fused kernel both are registers.
"""
from __future__ import annotations


from ..errors import InvalidShape, Unimplemented
from ..op import Op
from ..ops.schema import get_schema
from ..types import DataType, LogicalTensor


class Emitter:
    """Ops and tensors of a training graph under construction: new tensor ids
    from ``next_tensor``, new op ids from ``next_op``."""

    def __init__(self, next_tensor: int, next_op: int):
        self.next_tensor = next_tensor
        self.next_op = next_op
        self.ops: list[Op] = []                  # emitted, in order
        self.grads: dict[int, LogicalTensor] = {}    # tensor id -> its gradient so far
        self.active: set[int] = set()            # tensor ids that depend on a wrt tensor
        self.forward: dict[int, Op] = {}         # op id -> the training graph's copy of a forward op
        self.current: Op | None = None           # the forward op whose rule runs

    # ------------------------------------------------------------ rule queries
    def grad(self, t: LogicalTensor) -> LogicalTensor | None:
        """The gradient reaching forward tensor ``t`` (all of its readers summed),
        or None when none does."""
        return self.grads.get(t.id)

    def wants(self, t: LogicalTensor | None) -> bool:
        """Whether forward tensor ``t`` (an input of the op) needs a gradient."""
        return t is not None and t.id in self.active and is_float(t)

    def stat(self, op: Op, name: str, dtype, **attrs) -> LogicalTensor:
        """Output ``name`` of forward op ``op`` (its training-graph copy), which the
        backward reads (a norm's mean): when the copy lacks it, the copy is given
        ``attrs`` (keep_stats) and its missing outputs (of ``dtype`` but dst), and
        validated again."""
        fwd = self.forward[op.id]
        t = fwd.output(name)
        if t is None:
            names = [p.name for p in fwd.schema.outputs]
            fwd.raw_attrs.update(attrs)
            fwd.outputs = fwd.outputs + [self.tensor(fwd.inputs[0].dtype if n == "dst" else dtype, None)
                                         for n in names[len(fwd.outputs):]]
            fwd.validate()
            t = fwd.output(name)
        return t

    # ------------------------------------------------------------------ ops
    def tensor(self, dtype, shape) -> LogicalTensor:
        t = LogicalTensor(self.next_tensor, dtype, shape)
        self.next_tensor += 1
        return t

    def op(self, kind, inputs, outs=None, attrs=None) -> list[LogicalTensor]:
        """Emit op ``kind`` reading ``inputs`` (None entries dropped from the end);
        ``outs``: a dtype per output, or (dtype, shape) pairs, by default one
        output of input 0's dtype.  Returns its outputs, shapes inferred."""
        outs = [inputs[0].dtype] if outs is None else outs
        outputs = [self.tensor(*o) if isinstance(o, tuple) else self.tensor(o, None) for o in outs]
        op = Op(self.next_op, kind, [t for t in inputs if t is not None], outputs, dict(attrs or {}),
                name=self._name())
        self.next_op += 1
        op.validate()
        scalars = [i for i, t in enumerate(op.outputs) if t.unknown_rank]
        if scalars:   # (an inferred rank 0 leaves a tensor of unknown rank as it was)
            shapes = op.schema.infer(op)
            op.outputs = [LogicalTensor(t.id, t.dtype, ()) if i in scalars and shapes[i] == () else t
                          for i, t in enumerate(op.outputs)]
        for t in op.outputs:
            if not t.is_complete:
                raise InvalidShape("a backward op's output shape is not known", op=op, where=f"tensor {t.id}",
                                   expected="every dim of the forward graph known", found=repr(t))
        self.ops.append(op)
        return op.outputs

    def one(self, kind, inputs, attrs=None, dtype=None) -> LogicalTensor:
        """The one output of op ``kind`` (of ``dtype``, input 0's by default)."""
        return self.op(kind, inputs, [dtype or inputs[0].dtype], attrs)[0]

    def like(self, kind, inputs, op: Op, outs=None, **attrs) -> list[LogicalTensor]:
        """Op ``kind`` with the attributes of forward op ``op`` that ``kind``
        declares (a backward op repeats its forward's window, axis, format),
        updated by ``attrs``."""
        given = {a.name: op.attrs[a.name] for a in get_schema(kind).attrs if a.name in op.attrs}
        return self.op(kind, inputs, outs, dict(given, **attrs))

    def _name(self) -> str | None:
        op = self.current
        if op is None:
            return None
        return f"grad of op {op.id}" + (f" ({op.name})" if op.name else "")

    # -------------------------------------------------------------- helpers
    def cast(self, t: LogicalTensor, dtype) -> LogicalTensor:
        dtype = DataType.parse(dtype)
        return t if t.dtype == dtype else self.one("TypeCast", [t], dtype=dtype)

    def reshape(self, t: LogicalTensor, shape) -> LogicalTensor:
        shape = tuple(shape)
        if t.shape == shape:
            return t
        return self.one("StaticReshape", [t], {"shape": list(shape), "special_zero": False})

    def transpose(self, t: LogicalTensor, order) -> LogicalTensor:
        return self.one("StaticTranspose", [t], {"order": list(order)})

    def zeros_like(self, t: LogicalTensor) -> LogicalTensor:
        """Zeros of ``t``'s shape and dtype (whatever ``t`` holds)."""
        return self.one("ClampBackward", [t, t], {"min": 0.0, "max": 0.0, "use_dst": False})

    def full_like(self, t: LogicalTensor, value: float) -> LogicalTensor:
        return self.one("Clamp", [self.zeros_like(t)], {"min": value, "max": value})

    def neg(self, t: LogicalTensor) -> LogicalTensor:
        return self.one("Subtract", [self.zeros_like(t), t])

    def scale(self, t: LogicalTensor, value: float) -> LogicalTensor:
        """``t * value``."""
        if value == 1.0:
            return t
        if value == -1.0:
            return self.neg(t)
        return self.one("Multiply", [t, self.full_like(t, value)])

    def sum_to(self, g: LogicalTensor, shape) -> LogicalTensor:
        """``g`` summed over the dims broadcasting added to reach g's shape from
        ``shape`` (numpy rules): ReduceSum, then a reshape to ``shape``."""
        shape = tuple(shape)
        lead = g.ndim - len(shape)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1]
        if axes:   # (kept dims: a sum of every element stays of known rank)
            g = self.one("ReduceSum", [g], {"axes": axes, "keep_dims": True})
        return self.reshape(g, shape)

    def broadcast_to(self, t: LogicalTensor, like: LogicalTensor) -> LogicalTensor:
        """``t`` broadcast (numpy rules) to the shape of ``like``."""
        if t.shape == like.shape:
            return t
        return self.one("Add", [t, self.zeros_like(self.cast(like, t.dtype) if like.dtype != t.dtype else like)])

    def accumulate(self, t: LogicalTensor, g: LogicalTensor) -> None:
        """Add gradient ``g`` (cast to ``t``'s dtype) to what ``t`` has."""
        if g.shape != t.shape:
            raise Unimplemented("a rule gave a gradient of the wrong shape", op=self.current,
                                where=f"tensor {t.id}", expected=list(t.shape), found=list(g.shape))
        g = self.cast(g, t.dtype)
        old = self.grads.get(t.id)
        self.grads[t.id] = g if old is None else self.one("Add", [old, g])


#: the types gradients are taken in
GRAD_TYPES = (DataType.f32, DataType.bf16, DataType.f16)


def is_float(t: LogicalTensor) -> bool:
    """Whether ``t`` has a type gradients are taken in (f32, bf16, f16)."""
    return t.dtype in GRAD_TYPES


__all__ = ["Emitter", "is_float"]
