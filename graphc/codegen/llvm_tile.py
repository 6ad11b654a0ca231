"""What graphc's own LLVM-IR GEMM tiles share (graphc.codegen.bf16_tile,
graphc.codegen.int8_tile): whether the host CPU has the instruction a tile
needs (and the user did not switch it off), and compiling a tile's IR once per
process for the host CPU, its functions bound to symbol names with llvmlite's
``add_symbol`` (kernels call them by name, never through an address baked into
their code, so they stay cacheable on disk)."""
from __future__ import annotations

import os

#: the execution engines holding the tiles' code, kept for the life of the
#: process (kernels call into it)
_engines: list = []


def host_has(feature: str, switch: str) -> bool:
    """The host CPU has ``feature`` (an LLVM feature name: ``avx512bf16``,
    ``avx512vnni``) and the environment variable ``switch`` is not ``0``."""
    if os.environ.get(switch, "1") == "0":
        return False
    from llvmlite import binding as llb
    try:
        return bool(llb.get_host_cpu_features().get(feature))
    except RuntimeError:
        return False


def bind_ir(ir_text: str, symbols) -> None:
    """Compile the LLVM IR module ``ir_text`` for the host CPU (optimised at -O3)
    and bind each function named in ``symbols`` to its symbol."""
    from llvmlite import binding as llb
    llb.initialize_native_target()
    llb.initialize_native_asmprinter()
    module = llb.parse_assembly(ir_text)
    module.verify()
    tm = llb.Target.from_default_triple().create_target_machine(
        cpu=llb.get_host_cpu_name(), features=llb.get_host_cpu_features().flatten(), opt=3)
    builder = llb.create_pass_builder(tm, llb.create_pipeline_tuning_options(3))
    builder.getModulePassManager().run(module, builder)
    engine = llb.create_mcjit_compiler(module, tm)
    engine.finalize_object()
    for name in symbols:
        llb.add_symbol(name, engine.get_function_address(name))
    _engines.append(engine)


__all__ = ["host_has", "bind_ir"]
