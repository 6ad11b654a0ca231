"""Layout and property types, and logical tensors (data types: graphc.dtypes, re-exported here)."""
from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .dtypes import DataType, DTypeInfo, F4_E3M0_VALUES, f4_e3m0_decode, f4_e3m0_encode  # noqa: F401
from .errors import InvalidArguments, InvalidShape, short


ATTR_JSON_TYPES = ("f32", "s64", "string", "bool", "s64[]", "f32[]", "bool[]")


class LayoutType(str, enum.Enum):
    undef = "undef"
    any = "any"
    strided = "strided"
    opaque = "opaque"

    def __str__(self) -> str:
        return self.value


class PropertyType(str, enum.Enum):
    undef = "undef"
    variable = "variable"
    constant = "constant"
    host_scalar = "host_scalar"

    def __str__(self) -> str:
        return self.value


def _parse_enum(cls, value, what):
    if isinstance(value, cls):
        return value
    try:
        if not isinstance(value, str):   # (enum's own error quotes the whole value)
            raise TypeError
        return cls(value)
    except (ValueError, TypeError):
        raise InvalidArguments(f"unknown {what}", expected="one of " + ", ".join(e.value for e in cls),
                               found=short(value)) from None


def dense_strides(shape) -> tuple[int, ...]:
    """Row-major strides, in elements; -1 where a dim to the right is unknown."""
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        if acc != -1:
            acc = -1 if d < 0 else acc * max(d, 1)
    return tuple(reversed(strides))


INT64_MAX = 2 ** 63 - 1
#: ``LogicalTensor.ndims`` of a tensor whose rank is unknown (DNNL_GRAPH_UNKNOWN_NDIMS)
UNKNOWN_NDIMS = -1


def _as_int_tuple(value, what) -> tuple[int, ...]:
    """A tuple of int64 values (dims or strides)."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise InvalidShape(f"{what} must be a list of integers", found=short(value))
    value = list(value)
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise InvalidShape(f"{what} must be a list of integers", found=short(value))
        if not -INT64_MAX - 1 <= v <= INT64_MAX:
            raise InvalidShape(f"{what} must fit in int64", found=short(value))
    return tuple(int(v) for v in value)


@dataclass(frozen=True)
class LogicalTensor:
    """A typed tensor description: id, data type, shape, strides, layout, property.

    A dim of -1 is unknown until compile time.  ``strides`` default to dense
    row-major when the layout is strided.  ``shape=None`` (or -1) is an
    unknown rank (oneDNN's DNNL_GRAPH_UNKNOWN_NDIMS): ``ndims == -1``; an op
    output of unknown rank takes the rank and dims its op infers, and an op
    input of unknown rank takes them from its producer in the graph.

    The oneDNN accessors are there by their names: ``get_id``,
    ``get_data_type``, ``get_dims``, ``get_strides``, ``get_layout_type``,
    ``get_property_type``, ``get_mem_size``, ``is_equal``.
    """

    id: int
    dtype: DataType
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    layout_type: LayoutType = LayoutType.strided
    property_type: PropertyType = PropertyType.undef
    unknown_rank: bool = False

    def __init__(self, id: int, dtype: DataType | str, shape: Sequence[int] | int | None = None,
                 strides: Sequence[int] | None = None, layout_type: LayoutType | str = LayoutType.strided,
                 property_type: PropertyType | str = PropertyType.undef):
        if isinstance(id, bool) or not isinstance(id, (int, np.integer)) or not 0 <= id <= INT64_MAX:
            raise InvalidArguments("logical tensor id must be a non-negative integer that fits in int64",
                                   expected=f"0 to {INT64_MAX}", found=short(id))
        dtype = DataType.parse(dtype)
        unknown_rank = shape is None or (isinstance(shape, (int, np.integer)) and not isinstance(shape, bool)
                                         and shape == UNKNOWN_NDIMS)
        if unknown_rank:
            if strides not in (None, (), []):
                raise InvalidShape(f"logical tensor {id}: a tensor of unknown rank has no strides",
                                   found=short(strides))
            shape, strides = (), None
        shape = _as_int_tuple(shape, "shape")
        if any(d < -1 for d in shape):
            raise InvalidShape(f"logical tensor {id}: dims must be >= 0 or -1 (unknown)", found=list(shape))
        layout_type = _parse_enum(LayoutType, layout_type, "layout type")
        property_type = _parse_enum(PropertyType, property_type, "property type")
        if strides is not None:
            strides = _as_int_tuple(strides, "strides")
            if len(strides) == 0 and len(shape) > 0:
                strides = None  # oneDNN dumps use [] for 'not given'
        if strides is not None:
            if len(strides) != len(shape):
                raise InvalidShape(f"logical tensor {id}: strides and shape differ in rank",
                                   expected=len(shape), found=len(strides))
        elif layout_type in (LayoutType.strided, LayoutType.undef):
            strides = dense_strides(shape)
        object.__setattr__(self, "id", int(id))
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "layout_type", layout_type)
        object.__setattr__(self, "property_type", property_type)
        object.__setattr__(self, "unknown_rank", unknown_rank)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def ndims(self) -> int:
        """The rank, or -1 (UNKNOWN_NDIMS) when unknown."""
        return UNKNOWN_NDIMS if self.unknown_rank else len(self.shape)

    @property
    def is_complete(self) -> bool:
        """Every dim known (and the rank)."""
        return not self.unknown_rank and all(d >= 0 for d in self.shape)

    @property
    def nelems(self) -> int:
        if self.unknown_rank:
            return -1
        n = 1
        for d in self.shape:
            if d < 0:
                return -1
            n *= d
        return n

    @property
    def is_dense(self) -> bool:
        return self.strides is not None and _dense_equal(self.shape, self.strides)

    def with_shape(self, shape: Sequence[int], strides: Sequence[int] | None = None) -> "LogicalTensor":
        """The same tensor with a (more) resolved shape; dense strides unless given
        (none for layout any: graphc chooses them at compile)."""
        if strides is None and self.strides is not None and len(self.strides) == len(shape) and all(s >= 0 for s in self.strides) \
                and not _dense_equal(self.shape, self.strides):
            strides = self.strides  # keep user-given non-dense strides
        if self.layout_type == LayoutType.any and strides is None:
            return LogicalTensor(self.id, self.dtype, shape, None, LayoutType.any, self.property_type)
        return LogicalTensor(self.id, self.dtype, shape, strides,
                             LayoutType.strided if self.layout_type == LayoutType.any else self.layout_type,
                             self.property_type)

    # ------------------------------------------------- oneDNN's accessor names
    def get_id(self) -> int:
        return self.id

    def get_data_type(self) -> DataType:
        return self.dtype

    def get_dims(self) -> list[int]:
        """The dims (-1 where unknown); a tensor of unknown rank has none to give."""
        if self.unknown_rank:
            raise InvalidArguments(f"logical tensor {self.id} has an unknown rank: it has no dims yet",
                                   expected="a tensor of known rank", found="ndims -1")
        return list(self.shape)

    def get_strides(self) -> list[int]:
        """The strides in elements; a tensor with layout any or unknown rank has none."""
        if self.strides is None:
            raise InvalidArguments(f"logical tensor {self.id} has no strides", expected="a strided layout",
                                   found=f"layout {self.layout_type}" + (", unknown rank" if self.unknown_rank else ""))
        return list(self.strides)

    def get_layout_type(self) -> LayoutType:
        return self.layout_type

    def get_property_type(self) -> PropertyType:
        return self.property_type

    def get_mem_size(self) -> int:
        """Bytes a buffer for this tensor takes, from its first element to its
        last (its strides; dense for layout any), in graphc's storage types (s4
        and u4 take a byte per element).  Every dim must be known."""
        if not self.is_complete:
            raise InvalidArguments(f"logical tensor {self.id}: the memory size needs every dim",
                                   expected="known dims", found="unknown rank" if self.unknown_rank
                                   else list(self.shape))
        strides = self.strides if self.strides is not None and all(s >= 0 for s in self.strides) \
            else dense_strides(self.shape)
        return span(self.shape, strides) * self.dtype.itemsize

    def is_equal(self, other: "LogicalTensor") -> bool:
        """The same id, data type, rank, dims, strides, layout and property (oneDNN's is_equal)."""
        return isinstance(other, LogicalTensor) and self == other

    def __repr__(self) -> str:
        if self.unknown_rank:
            return f"LogicalTensor({self.id}, {self.dtype}, unknown rank, {self.layout_type}, {self.property_type})"
        s = "x".join(str(d) for d in self.shape) if self.shape else "scalar"
        extra = "" if self.is_dense else f" strides={list(self.strides) if self.strides else None}"
        return f"LogicalTensor({self.id}, {self.dtype}, {s}{extra}, {self.layout_type}, {self.property_type})"


#: The most bytes one tensor may span (the x86-64 user address space): a larger
#: tensor can never be allocated or passed, and its offsets may overflow int64.
MAX_TENSOR_BYTES = 2 ** 47


def span(shape, strides) -> int:
    """Elements from a tensor's first element to its last, inclusive (0 when empty);
    strides are non-negative."""
    if any(d == 0 for d in shape):
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(shape, strides))


def overlaps(shape, strides, max_work: int = 1 << 22) -> bool:
    """True when two distinct indices of ``shape`` reach the same element with
    non-negative ``strides`` (a stride of 0 on a dim > 1, [1, 1] for [2, 2],
    [11, 4, 1] for [2, 3, 4]).  Dims sorted by stride, each must step past the
    whole extent of the ones below it; layouts that interleave otherwise are
    enumerated when they have at most ``max_work`` elements, and count as
    overlapping beyond that."""
    dims = sorted((s, d) for d, s in zip(shape, strides) if d > 1)
    if not dims or any(d == 0 for d in shape):
        return False
    extent = 1
    nested = True
    for s, d in dims:
        if s < extent:
            nested = False
            break
        extent = s * (d - 1) + extent
    if nested:
        return False
    if any(s == 0 for s, _ in dims):
        return True
    n = 1
    for _, d in dims:
        n *= d
    if n > max_work:
        return True
    offs = np.zeros(1, dtype=np.int64)
    for s, d in dims:
        offs = (offs[:, None] + np.arange(d, dtype=np.int64)[None, :] * s).reshape(-1)
    return np.unique(offs).size != offs.size


def check_extent(lt: "LogicalTensor", where: str) -> None:
    """Raise InvalidShape unless ``lt`` (every dim known) can exist in memory:
    its element count fits in int64, each stride in bytes fits in int64 (numpy's
    strides are bytes in an int64: a larger one, even on a dim of size 1 that
    adds nothing to the span, cannot make an array) and its span is at most
    MAX_TENSOR_BYTES."""
    n = lt.nelems
    if n < 0:
        return
    if n > INT64_MAX:
        raise InvalidShape(f"{where}: tensor {lt.id} has more elements than int64 can count",
                           expected=f"at most {INT64_MAX} elements", found=f"shape {list(lt.shape)}")
    itemsize = lt.dtype.itemsize
    if lt.strides is not None and any(abs(s) * itemsize > INT64_MAX for s in lt.strides):
        raise InvalidShape(f"{where}: tensor {lt.id} has a stride too large to address in bytes",
                           expected=f"strides of at most {INT64_MAX // itemsize} elements of {lt.dtype} "
                                    f"({INT64_MAX} bytes)",
                           found=f"strides {list(lt.strides)} (shape {list(lt.shape)})")
    strides = lt.strides if lt.strides is not None and all(s >= 0 for s in lt.strides) \
        else dense_strides(lt.shape)
    nbytes = span(lt.shape, strides) * lt.dtype.itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise InvalidShape(f"{where}: tensor {lt.id} is too large to allocate or address",
                           expected=f"a span of at most {MAX_TENSOR_BYTES} bytes",
                           found=f"{nbytes} bytes (shape {list(lt.shape)}, strides {list(strides)}, {lt.dtype})")


def _dense_equal(shape, strides) -> bool:
    """True when strides are dense row-major for shape (size-1 dims may have any stride)."""
    acc = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d < 0:
            return False
        if d != 1 and s != acc:
            return False
        acc *= d
    return True
