// Registration hooks of the CPU op families (called by register_cpu_backend).
#pragma once

namespace lowbit::core::cpu {

void register_quant_ops();
void register_gemm_ops();
void register_optim_ops();
void register_sparse_ops();
void register_attention_ops();

}  // namespace lowbit::core::cpu
