#include "cpu/register.h"

#include "core/registry.h"
#include "cpu/optim/impls.h"

namespace lowbit::core::cpu {

void register_optim_ops() {
  OpRegistry<OptimizerUpdate32bitArgs>::add({"cpu", DeviceType::cpu, 10, optimizer_update_32bit});
  OpRegistry<OptimizerUpdate8bitArgs>::add({"cpu", DeviceType::cpu, 10, optimizer_update_8bit});
  OpRegistry<OptimizerUpdate8bitBlockwiseArgs>::add({"cpu", DeviceType::cpu, 10, optimizer_update_8bit_blockwise});
  OpRegistry<OptimizerUpdate32bitMultiArgs>::add({"cpu", DeviceType::cpu, 10, optimizer_update_32bit_multi});
  OpRegistry<OptimizerUpdate8bitBlockwiseMultiArgs>::add(
      {"cpu", DeviceType::cpu, 10, optimizer_update_8bit_blockwise_multi});
  OpRegistry<PercentileClippingArgs>::add({"cpu", DeviceType::cpu, 10, percentile_clipping});
}

}  // namespace lowbit::core::cpu
