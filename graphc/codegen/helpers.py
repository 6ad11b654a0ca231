"""The kernel helper functions: one declaration each.

A generated kernel's module calls numpy's and math's functions (the kernel IR's
own table, ``ir.FUNCS``) and the helpers declared here: graphc's compiled
functions (graphc.codegen.runtime, fastmath, smallfloat, blas) and numba's
get_thread_id.  A declaration (:func:`declare`) names the helper, gives its
result type (an IR type, or a rule from the argument expressions) and the line
that imports it into a kernel's module, and adds the name to the IR's table
(``ir.define``: the IR imports nothing from code generation; declarations flow
into it).  Several helpers may share one import line (:class:`Imports`); the
line says where a kernel's module holds it:

* ``HEADER``: every kernel module imports it (:data:`HEADER_IMPORTS`, in
  graphc.codegen.kernel.HEADER);
* ``TOP``: a module whose kernel calls one of its helpers has it at the top of
  its helpers, those lines sorted;
* ``IN_ORDER``: where a lowering first asks for it (:func:`use_helper`), or
  after the lines already there when the kernel only calls it, each after the
  lines of the helpers it ``needs``.

The kernel cache's version folder covers the modules these lines import from
(:func:`linked_modules`): their code is compiled into the cached kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import ir

HEADER, TOP, IN_ORDER = "header", "top", "in order"


@dataclass(frozen=True)
class Imports:
    """A line (or lines) of a kernel's module importing helpers from ``module``."""

    module: str
    text: str
    place: str = IN_ORDER

    @classmethod
    def one(cls, module: str, name: str, place: str = IN_ORDER) -> "Imports":
        """The line importing one helper, ``name``, from ``module``."""
        return cls(module, f"from {module} import {name}", place)


@dataclass(frozen=True)
class Helper:
    """A function kernels may call: its name, result type rule, import line and
    the helpers whose lines its own follows (those it calls)."""

    name: str
    result: Callable
    imports: Imports
    needs: tuple[str, ...] = ()


#: name -> declaration
HELPERS: dict[str, Helper] = {}


def declare(name: str, result, imports: Imports | str, needs: tuple[str, ...] = ()) -> Helper:
    """Declare helper ``name``: its result type (an IR type such as "f32", or a rule
    from the argument expressions), its import line (an :class:`Imports`, or the
    module it is imported from on a line of its own, IN_ORDER) and the helpers it
    needs.  Each name is declared once."""
    rule = result if callable(result) else (lambda dt: lambda args: dt)(result)
    line = imports if isinstance(imports, Imports) else Imports.one(imports, name)
    ir.define(name, rule)   # (refuses a name defined before)
    helper = HELPERS[name] = Helper(name, rule, line, tuple(needs))
    return helper


def linked_modules() -> tuple[str, ...]:
    """The graphc modules kernels import helpers from, sorted."""
    return tuple(sorted({h.imports.module for h in HELPERS.values() if h.imports.module.startswith("graphc.")}))


def use_helper(kb, name: str) -> None:
    """Bring helper ``name`` into kb's module once, after the helpers it needs
    (a HEADER helper is there already)."""
    h = HELPERS[name]
    if h.imports.place == HEADER:
        return
    for d in h.needs:
        use_helper(kb, d)
    if h.imports.text not in kb.helpers:
        kb.helpers.append(h.imports.text)


def use_helpers_called(kb, names) -> None:
    """Bring in the IN_ORDER helpers among ``names`` (functions kb's code calls)."""
    for n in sorted(names):
        h = HELPERS.get(n)
        if h is not None and h.imports.place == IN_ORDER:
            use_helper(kb, n)


def import_called(kb, names) -> None:
    """Bring in every helper among ``names`` (the functions kb's kernel calls):
    the IN_ORDER ones after kb's lines, the TOP ones' lines first."""
    use_helpers_called(kb, names)
    top = {HELPERS[n].imports.text for n in names if n in HELPERS and HELPERS[n].imports.place == TOP}
    for line in sorted(top, reverse=True):
        if line not in kb.helpers:
            kb.helpers.insert(0, line)


# -- the declarations ------------------------------------------------------------------
_RUNTIME = "graphc.codegen.runtime"
_FASTMATH = "graphc.codegen.fastmath"

#: the runtime helpers every kernel module imports
HEADER_IMPORTS = Imports(_RUNTIME, """\
from graphc.codegen.runtime import (bf16_to_f32, f32_to_bf16, f16_to_f32, f32_to_f16, f8e4m3_to_f32,
                                    f32_to_f8e4m3, f8e5m2_to_f32, f32_to_f8e5m2, sat_round,
                                    sigmoid, softplus, round_half_away, gelu_tanh_grad, mish_grad,
                                    f64_to_f32_odd)""", HEADER)
for _name, _dt in (("bf16_to_f32", "f32"), ("f16_to_f32", "f32"), ("f8e4m3_to_f32", "f32"), ("f8e5m2_to_f32", "f32"),
                   ("f32_to_bf16", "int"), ("f32_to_f16", "int"), ("f32_to_f8e4m3", "int"), ("f32_to_f8e5m2", "int"),
                   ("f64_to_f32_odd", "f32"), ("sat_round", "int"), ("sigmoid", "f64"), ("softplus", "f64"),
                   ("round_half_away", ir.same_as_first), ("gelu_tanh_grad", "f64"), ("mish_grad", "f64")):
    declare(_name, _dt, HEADER_IMPORTS)

declare("philox4x32_10", "arr:u64", _RUNTIME)   # Dropout's random words

_BITS = Imports(_RUNTIME, "from graphc.codegen.runtime import bits_to_f32, f32_to_bits", TOP)
declare("bits_to_f32", "f32", _BITS)
declare("f32_to_bits", "int", _BITS)

# graphc.codegen.smallfloat: e8m0 and the f4 formats
_SMALLFLOAT = Imports("graphc.codegen.smallfloat", (
    "from graphc.codegen.smallfloat import (e8m0_to_f32, f32_to_e8m0, f4e2m1_to_f32, f32_to_f4e2m1, "
    "f4e3m0_to_f32, f32_to_f4e3m0)"), TOP)
for _name, _dt in (("e8m0_to_f32", "f32"), ("f4e2m1_to_f32", "f32"), ("f4e3m0_to_f32", "f32"),
                   ("f32_to_e8m0", "int"), ("f32_to_f4e2m1", "int"), ("f32_to_f4e3m0", "int")):
    declare(_name, _dt, _SMALLFLOAT)

# graphc.codegen.blas (the import binds numba to the BLAS library and sets its thread limit once)
_BLAS_NAMES = ("gemm_f32", "gemm_bf16", "gemm_bf16_packed", "gemm_bf16_prepacked", "gemm_u8s8", "gemm_u8s8_packed",
               "pack_a_bf16", "pack_a_rows_bf16", "pack_b_bf16", "pack_b_u8s8", "row_sums_u8", "u8s8_begin", "u8s8_block", "bf16_begin",
               "bf16_block", "bf16_taps", "bf16_weight_taps", "u8s8_taps", "transpose_u16")
_BLAS = Imports("graphc.codegen.blas", "from graphc.codegen.blas import " + ", ".join(_BLAS_NAMES)
                + ", single_threaded_blas\nsingle_threaded_blas()", TOP)
for _name in _BLAS_NAMES:
    declare(_name, "int", _BLAS)

# B packed whole into the bf16 tile's panels (the attention kernel's K^T and V, once per head)
declare("pack_panels_bf16", "int", Imports.one("graphc.codegen.blas", "pack_panels_bf16", TOP))

declare("get_thread_id", "int", Imports.one("numba", "get_thread_id", TOP))

# graphc.codegen.fastmath: float32 transcendentals, keyed maxima, reassociating sums
for _name, _dt, _needs in (
        ("fma_f32", "f32", ()), ("expm1_poly_f32", "f32", ("fma_f32",)),
        ("exp_neg_f32", "f32", ("bits_to_f32", "expm1_poly_f32")),
        ("exp_le0_f32", "f32", ("exp_neg_f32",)), ("sigmoid_of_f32", "f32", ()), ("sigmoid_f32", "f32", ("exp_neg_f32", "sigmoid_of_f32")), ("fsum", "f64", ()),
        ("fsum32", "f64", ()), ("key_f32", "int", ("bits_to_f32",)), ("key_max_f32", "int", ("key_f32",)),
        ("f32_of_key", "f32", ("bits_to_f32",)), ("tanh_f32", "f32", ("exp_neg_f32",)),
        ("erfc_f32", "f32", ("exp_neg_f32",)), ("erf_f32", "f32", ("fma_f32",)),
        ("gelu_erf_f32", "f32", ("erf_f32",)), ("hidden_int", "int", ()),
        ("attn_exp_row", "f32", ("exp_le0_f32",)),
        ("exp_scaled_f32", "f32", ("bits_to_f32", "expm1_poly_f32")),
        ("exp_sub_f32", "f32", ("exp_scaled_f32",)), ("exp_f32", "f32", ("exp_scaled_f32",)),
        ("expm1_f32", "f32", ("bits_to_f32", "expm1_poly_f32")), ("log_f32", "f32", ("bits_to_f32", "fma_f32")),
        ("log1p_f32", "f32", ("log_f32",)), ("softplus_f32", "f32", ("exp_sub_f32", "log1p_f32")),
        ("sigmoid_sub_f32", "f32", ("exp_sub_f32", "sigmoid_of_f32")),
        ("mish_grad_f32", "f32", ("softplus_f32", "tanh_f32", "sigmoid_sub_f32"))):
    declare(_name, _dt, _FASTMATH, _needs)
