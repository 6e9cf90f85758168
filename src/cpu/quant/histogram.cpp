// histogram_scatter_add_2d on the CPU: every index checked first (an error
// adds nothing), then the values added in index order, one thread: the sums
// have one order, and a scatter with colliding indices gains little from threads.
#include <cstdint>

#include "core/check.h"
#include "core/registry.h"
#include "lowbit/ops/quant.h"

namespace lowbit::core::cpu {
namespace {

void require_in_range(const char* name, const int32_t* idx, int64_t n, int64_t extent, const char* dim) {
  for (int64_t i = 0; i < n; ++i) {
    LOWBIT_REQUIRE(idx[i] >= 0 && idx[i] < extent, ErrorCode::invalid_argument, HistogramScatterAdd2dArgs::kName,
                   ": ", name, "[", i, "] must be in [0, ", extent, ") (histogram's ", dim, ", got ", idx[i], ")");
  }
}

void histogram_scatter_add_2d(const HistogramScatterAdd2dArgs& a, void* /*workspace*/, Stream /*stream*/) {
  const int64_t n = a.source.numel(), rows = a.histogram.size(0), cols = a.histogram.size(1);
  const int32_t* i1 = a.index1.ptr<const int32_t>();
  const int32_t* i2 = a.index2.ptr<const int32_t>();
  require_in_range("index1", i1, n, rows, "maxdim1");
  require_in_range("index2", i2, n, cols, "maxdim2");
  float* h = a.histogram.ptr<float>();
  const float* src = a.source.ptr<const float>();
  for (int64_t i = 0; i < n; ++i) h[static_cast<int64_t>(i1[i]) * cols + i2[i]] += src[i];
}

}  // namespace

void register_histogram() {
  OpRegistry<HistogramScatterAdd2dArgs>::add({"cpu", DeviceType::cpu, 10, histogram_scatter_add_2d});
}

}  // namespace lowbit::core::cpu
