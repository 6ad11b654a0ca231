"""graphc's own parallel loops: how a kernel runs a loop on numba's threads
(graphc.codegen.outline writes such kernels).

A parallel loop of a kernel is a serial function of its own (the loop over
[start, stop) taking the names its body reads).  The kernel calls
:func:`launch` with that function, the loop's range and a tuple of the names:
the intrinsic compiles the function as a subroutine of the kernel (its array
arguments marked ``noalias`` for LLVM, as numba marks its parfor gufuncs';
optimized and turned into machine code once, within the kernel), and a C
function that numba's threading layer (parallel_for, as for a prange) calls
on each thread with its part of the iterations and the tuple, and that calls
the loop function.  numba's own prange lowering compiles each loop a second
time, as a gufunc, with its scheduling code: about as long again as the whole
serial kernel.

Kernels link what this module generates: the kernel cache's version folder is
keyed by this file's text.
"""
from __future__ import annotations

from llvmlite import ir as llvm_ir
from numba import types
from numba.core import cgutils
from numba.core import compiler
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import intrinsic
from numba.np.ufunc.parallel import _launch_threads

from .kernel import NUM_THREADS   # (numba's pool: get_num_threads() is at most this)
from .pipeline import KernelCompiler

# numba's thread pool, and the symbols of its threading layer the kernels link
# (numba_parallel_for, get_num_threads) registered for the JIT
_launch_threads()


def _dispatch_function(context, module, cres, tupty, members):
    """The C function numba's threading layer calls on each thread (as
    parallel_for's callback: args, dims, steps, data): for each of its rows of
    the schedule (args[0], dims[0] rows of (start, stop)), the loop function of
    ``cres`` on those iterations with the values of the tuple at ``data``."""
    name = f"graphc_parallel_{cres.fndesc.mangled_name}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    i8p = cgutils.voidptr_t
    intp = context.get_value_type(types.intp)
    i64 = llvm_ir.IntType(64)
    fnty = llvm_ir.FunctionType(llvm_ir.VoidType(), [i8p.as_pointer(), intp.as_pointer(), intp.as_pointer(), i8p])
    fn = llvm_ir.Function(module, fnty, name)
    fn.linkage = "internal"
    b = llvm_ir.IRBuilder(fn.append_basic_block("entry"))
    a_args, a_dims, _, a_data = fn.args
    rows = b.load(a_dims)
    sched = b.bitcast(b.load(a_args), i64.as_pointer())
    tup = b.load(b.bitcast(a_data, context.get_value_type(tupty).as_pointer()))
    values = [_borrowed(b, b.extract_value(tup, i), m) for i, m in enumerate(members)]
    callee = context.declare_function(module, cres.fndesc)
    with cgutils.for_range(b, rows) as r:
        at = b.mul(r.index, intp(2))
        lo = b.load(b.gep(sched, [at]))
        hi = b.load(b.gep(sched, [b.add(at, intp(1))]))
        # (a loop function raises nothing: its status is not looked at)
        context.call_conv.call_function(b, callee, types.none, (types.int64, types.int64) + members, [lo, hi] + values)
    b.ret_void()
    return fn


def _borrowed(b, value, typ):
    """An array of the tuple as the loop function receives it: its meminfo null,
    as numba's gufuncs pass the arrays of a prange (the kernel holds them until
    the loop has run).  Each incref and decref of the array in the loop function
    and in the helpers it calls is then a test of that null, not an atomic add
    on the one counter every thread's calls share: a loop calling an int8 tile
    helper 128 times per item ran no faster on two threads than on one."""
    if not isinstance(typ, types.Array):
        return value
    return b.insert_value(value, llvm_ir.Constant(value.type.elements[0], None), 0)


def _loop_function(context, builder, loop, members):
    """The loop function ``loop`` (a dispatcher whose Python function graphc
    wrote) compiled as a subroutine of the kernel being lowered (graphc's lean
    pipeline; its array arguments noalias, numpy's error model), linked into
    the kernel, its library optimized and made machine code only there.
    (numba's own _compile_subroutine_no_cache links the library in itself,
    which finalizes it before it could be told to skip both.)"""
    flags = compiler.Flags()
    flags.nrt = True
    flags.noalias = True
    flags.error_model = "numpy"
    flags.no_compile = True
    flags.no_cpython_wrapper = True
    flags.no_cfunc_wrapper = True
    impl = loop.dispatcher.py_func
    with global_compiler_lock:
        library = context.codegen().create_library(impl.__name__)
        _optimized_once(library)
        cres = KernelCompiler(context.typing_context, context, library, (types.int64, types.int64) + members,
                              types.none, flags, {}).compile_extra(impl)
        context.active_code_library.add_linking_library(cres.library)
    return cres


def _optimized_once(library) -> None:
    """Let the loop function's library, which only the kernel links, skip its
    own module optimization and machine code: numba would optimize and compile
    it alone, then again inside the kernel.  Its finalization then only links
    what it links (helpers) and checks its globals.  Left as numba has it when
    its internals are not as expected."""
    needed = ("_raise_if_finalized", "_linking_libraries", "_reload_init", "_final_module",
              "_finalize_dynamic_globals", "_verify_declare_only_symbols", "_finalized")
    if not all(hasattr(library, n) for n in needed):
        return

    def finalize():
        library._raise_if_finalized()
        seen = set()
        for lib in library._linking_libraries:
            if lib not in seen:
                seen.add(lib)
                library._reload_init.update(lib._reload_init)
                library._final_module.link_in(lib._get_module_for_linking(), preserve=True)
        library._final_module.verify()
        library._finalize_dynamic_globals()
        library._verify_declare_only_symbols()
        library._finalized = True

    library.finalize = finalize


@intrinsic
def launch(typingctx, loop, lo, hi, values):
    """Run ``loop(start, stop, *values)`` (a loop function: compiled serial, its
    iterations [start, stop) a part of [lo, hi)) on numba's threads, the
    iterations split evenly over them as numba schedules a prange (one part per
    thread, at most one iteration apart); returns 0 once all have run.  The
    values stay the caller's (arguments of this call) until then."""
    if not isinstance(loop, types.Dispatcher) or not isinstance(values, types.BaseTuple):
        return None
    members = tuple(types.unliteral(t) for t in values.types)
    tupty = types.Tuple(members)

    def codegen(context, builder, signature, args):
        _, lo_v, hi_v, vals = args
        lo_v = context.cast(builder, lo_v, signature.args[1], types.int64)
        hi_v = context.cast(builder, hi_v, signature.args[2], types.int64)
        if tuple(signature.args[3].types) != members:
            vals = context.cast(builder, vals, signature.args[3], tupty)
        cres = _loop_function(context, builder, loop, members)
        fn = _dispatch_function(context, builder.module, cres, tupty, members)

        i8p = cgutils.voidptr_t
        intp = context.get_value_type(types.intp)
        i64 = llvm_ir.IntType(64)
        data = cgutils.alloca_once_value(builder, vals)
        gnt = cgutils.get_or_insert_function(builder.module, llvm_ir.FunctionType(intp, []), "get_num_threads")
        nt = builder.call(gnt, [])
        most = intp(max(1, NUM_THREADS))
        nt = builder.select(builder.icmp_signed(">", nt, most), most, nt)
        nt = builder.select(builder.icmp_signed("<", nt, intp(1)), intp(1), nt)
        sched = cgutils.alloca_once(builder, i64, size=intp(2 * max(1, NUM_THREADS)))
        n = builder.sub(hi_v, lo_v)
        n = builder.select(builder.icmp_signed("<", n, i64(0)), i64(0), n)
        nt64 = builder.sext(nt, i64) if nt.type != i64 else nt
        with cgutils.for_range(builder, nt) as t:
            t64 = builder.sext(t.index, i64) if t.index.type != i64 else t.index
            start = builder.add(lo_v, builder.sdiv(builder.mul(t64, n), nt64))
            stop = builder.add(lo_v, builder.sdiv(builder.mul(builder.add(t64, i64(1)), n), nt64))
            at = builder.mul(t.index, intp(2))
            builder.store(start, builder.gep(sched, [at]))
            builder.store(stop, builder.gep(sched, [builder.add(at, intp(1))]))
        argv = cgutils.alloca_once(builder, i8p)
        builder.store(builder.bitcast(sched, i8p), argv)
        dims = cgutils.alloca_once(builder, intp)
        builder.store(nt, dims)
        steps = cgutils.alloca_once(builder, intp)
        builder.store(intp(16), steps)            # a row of the schedule: (start, stop) int64
        pfty = llvm_ir.FunctionType(llvm_ir.VoidType(), [i8p] * 5 + [intp] * 3)
        pf = cgutils.get_or_insert_function(builder.module, pfty, "numba_parallel_for")
        builder.call(pf, [builder.bitcast(fn, i8p), builder.bitcast(argv, i8p), builder.bitcast(dims, i8p),
                          builder.bitcast(steps, i8p), builder.bitcast(data, i8p),
                          intp(0), intp(1), nt])   # no inner dims; one array (the schedule) split by rows
        return context.get_constant(types.int64, 0)
    return types.int64(loop, lo, hi, values), codegen
