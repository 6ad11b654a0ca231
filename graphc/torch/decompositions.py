"""The decompositions AOTAutograd applies before graphc sees a graph: torch's
core ATen set, minus the ops graphc takes whole (fused by its catalog, or with
a kernel of their own), which would otherwise be broken into primitives."""
from __future__ import annotations

import torch
from torch._decomp import core_aten_decompositions

aten = torch.ops.aten

#: kept whole: graphc maps them (graphc.torch.table) or fuses what they are made of
KEEP = (aten.native_layer_norm, aten.native_layer_norm_backward, aten._softmax, aten._softmax_backward_data,
        aten.gelu, aten.gelu_backward, aten.convolution, aten.convolution_backward, aten.native_batch_norm,
        aten.native_batch_norm_backward, aten._native_batch_norm_legit_no_training,
        aten._native_batch_norm_legit_functional, aten._scaled_dot_product_flash_attention_for_cpu,
        aten._scaled_dot_product_flash_attention_for_cpu_backward, aten.addmm, aten.mm, aten.bmm,
        aten.max_pool2d_with_indices, aten.avg_pool2d, aten.rsqrt, aten.threshold_backward,
        aten.embedding_dense_backward)


def decompositions() -> dict:
    """{ATen overload: decomposition} for AOTAutograd."""
    keep = set(KEEP)
    return {op: fn for op, fn in core_aten_decompositions().items()
            if getattr(op, "overloadpacket", op) not in keep}
