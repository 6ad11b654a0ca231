"""The cost model of ``graphc bench --mode=P`` (graphc.compiler.cost, which
``CompiledGraph.profile`` shares)."""
from ..compiler.cost import *  # noqa: F401,F403
from ..compiler.cost import __all__  # noqa: F401
