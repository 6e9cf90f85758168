// The fuzz targets link the CPU backend for its allocator only: its op
// families register nothing here, so no kernel source is needed.
#include "cpu/register.h"

namespace lowbit::core::cpu {

void register_quant_ops() {}
void register_gemm_ops() {}
void register_optim_ops() {}
void register_sparse_ops() {}
void register_attention_ops() {}

}  // namespace lowbit::core::cpu
