#include "cpu/quant/impls.h"
#include "cpu/register.h"

namespace lowbit::core::cpu {

void register_blockwise_fast();
void register_quant_fast_other();
void register_tensorwise();
void register_histogram();  // one implementation: the sequential sum is the reference

void register_quant_fast() {
  register_blockwise_fast();
  register_quant_fast_other();
  register_tensorwise();
}

void register_quant_ops() {
  register_quant_reference();
  register_quant_fast();
  register_histogram();
}

}  // namespace lowbit::core::cpu
