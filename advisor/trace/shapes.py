"""The operators whose input shapes, dtypes and concrete inputs a trace load keeps.

Decoding every operator's shapes would cost a fifth of the load time on big traces; these are
the few per step that the FLOP count, the dtype mix and the roofline read.
"""

# The matmul and convolution family the FLOP count and the dtype mix use.
SHAPE_OPS = frozenset(
    {
        "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
        "aten::einsum", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
        "aten::_convolution", "aten::convolution_backward", "aten::conv_transpose2d",
        "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        # the softmax between two matmuls: hand-written attention's only if its shape is the scores'
        "aten::softmax", "aten::_safe_softmax",
    }
)
# NOTE: the per-operator roofline (advisor.metrics.roofline) sizes these too: attention backward,
# old-trace cuDNN convolutions, elementwise/normalisation/softmax/reduction ops, and the
# collectives' message sizes (advisor.metrics.collectives).
ROOFLINE_SHAPE_OPS = frozenset(
    {
        "aten::_scaled_dot_product_flash_attention_backward", "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_cudnn_attention_backward",
        "aten::cudnn_convolution", "aten::cudnn_convolution_backward",
        "aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::mul", "aten::mul_", "aten::div", "aten::div_",
        "aten::relu", "aten::relu_", "aten::clamp_min", "aten::clamp_min_", "aten::threshold_backward",
        "aten::gelu", "aten::gelu_backward", "aten::silu", "aten::silu_backward", "aten::sigmoid", "aten::tanh",
        "aten::exp", "aten::sqrt", "aten::rsqrt", "aten::pow", "aten::neg", "aten::fill_", "aten::copy_",
        "aten::where", "aten::masked_fill_", "aten::native_dropout", "aten::addcmul_", "aten::addcdiv_", "aten::lerp_",
        "aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::native_batch_norm",
        "aten::native_batch_norm_backward", "aten::cudnn_batch_norm", "aten::cudnn_batch_norm_backward",
        "aten::native_group_norm", "aten::_softmax", "aten::_softmax_backward_data", "aten::_log_softmax",
        "aten::_log_softmax_backward_data", "aten::sum", "aten::mean", "aten::amax", "aten::norm",
        "nccl:all_reduce", "nccl:all_to_all", "nccl:all_gather", "nccl:reduce_scatter", "nccl:broadcast",
        "nccl:reduce", "nccl:_all_gather_base", "nccl:_reduce_scatter_base", "nccl:all_gather_into_tensor_coalesced",
        "nccl:reduce_scatter_tensor_coalesced", "nccl:send", "nccl:recv", "nccl:all_to_allv",
    }
)
SHAPE_OPS = SHAPE_OPS | ROOFLINE_SHAPE_OPS
