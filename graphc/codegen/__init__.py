"""Kernel generation: source for concrete shapes, strides and dtypes, compiled by Numba."""
