"""Imports every op family module so that their schemas register."""
from . import (bias, binary, conv, distributed, eltwise, interpolate, matmul, misc, norm, pool,  # noqa: F401
               quant, reduce, seed, shuffle, softmax)
