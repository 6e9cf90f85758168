#include "core/registry.h"
#include "cpu/optim/impls.h"
#include "cpu/register.h"

namespace lowbit::core::cpu {

void register_optim_ops() {
  OpRegistry<OptimizerUpdate32bitArgs>::add({"cpu", DeviceType::cpu, 10, optimizer_update_32bit});
}

}  // namespace lowbit::core::cpu
