// OpenMP helper: run body(i) for i in [0, count), in parallel when the work
// (`elements` touched in all) is large enough to pay for the threads.
#pragma once

#include <cstdint>

namespace lowbit::core::cpu {

inline constexpr int64_t kParallelMinElements = int64_t{1} << 15;

template <class Body>
void parallel_for(int64_t count, int64_t elements, Body&& body) {
  if (elements < kParallelMinElements || count < 2) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) body(i);
}

}  // namespace lowbit::core::cpu
