// The tuned parameters shipped with lowbit (include/lowbit/tune.h gives the
// format): measured by `lowbit tune` on the GPUs named, copied here by hand
// from a user database. Empty until the first kernels with parameters are
// tuned on the GPU machine.
#pragma once

#include <string_view>

namespace lowbit::core {

inline constexpr std::string_view kShippedTuneDb = R"(# op | device | version | key | parameters
)";

}  // namespace lowbit::core
