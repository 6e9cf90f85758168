// The CPU span kernels that use hardware conversions (F16C) agree with the one
// software definition in src/core/float_convert.h.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/float_convert.h"
#include "cpu/quant/spans.h"

namespace lowbit::core::cpu {
namespace {

TEST(Spans, F16ToF32MatchesSoftwareOnEveryPattern) {
  std::vector<Half> in(65536);
  for (uint32_t i = 0; i < 65536; ++i) in[i] = Half{static_cast<uint16_t>(i)};
  std::vector<float> out(in.size());
  to_f32_span(in.data(), static_cast<int64_t>(in.size()), out.data());
  for (uint32_t i = 0; i < 65536; ++i) {
    const float want = f16_to_f32(static_cast<uint16_t>(i));
    if (want != want) {
      EXPECT_NE(out[i], out[i]) << "pattern " << i;  // NaN stays NaN (quieted)
    } else {
      EXPECT_EQ(float_bits(out[i]), float_bits(want)) << "pattern " << i;
    }
  }
}

TEST(Spans, F32ToF16MatchesSoftwareOnASweep) {
  std::vector<float> in;
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : {0u, 1u, 0x0fffu, 0x1000u, 0x1001u, 0x2000u, 0xffffu}) in.push_back(bits_float(hi << 16 | lo));
  }
  std::vector<Half> out(in.size());
  from_f32_span(in.data(), static_cast<int64_t>(in.size()), out.data());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i].bits, f32_to_f16(in[i])) << "input bits 0x" << std::hex << float_bits(in[i]);
  }
}

}  // namespace
}  // namespace lowbit::core::cpu
