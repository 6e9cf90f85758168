// dequantize_4bit's Highway block decoder (src/cpu/quant/decode4_hwy.cpp)
// built for Arm (NEON), checked bit for bit against the scalar definition:
// table[code] * scale in fp32, and that rounded to bf16 as f32_to_bf16 does,
// special scales (NaN with payloads, ±Inf, 0, subnormal products) included,
// blocksizes 32 to 256 with a ragged last block. scripts/arm-check runs it
// under qemu; the exit status is the verdict.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/float_convert.h"
#include "cpu/quant/decode4_hwy.h"

// The kernels' sources call core::fail only for a bad LOWBIT_CPU_ISA; the rest of the library stays out.
namespace lowbit::core {
void fail(ErrorCode, const std::string& m) {
  std::fprintf(stderr, "%s\n", m.c_str());
  std::abort();
}
}  // namespace lowbit::core

using namespace lowbit::core;
namespace hwy_decode4 = lowbit::core::cpu::hwy_decode4;

int main() {
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(-1, 1);
  float table[16];
  for (float& v : table) v = u(g);
  int bad = 0, runs = 0;
  for (int64_t bs : {32, 64, 128, 256}) {
    for (int64_t count : {bs, 3 * bs, 4 * bs + 30, 5 * bs - 2}) {
      const int64_t blocks = (count + bs - 1) / bs;
      std::vector<uint8_t> packed((count + 1) / 2);
      for (auto& c : packed) c = static_cast<uint8_t>(g());
      std::vector<float> scales(blocks);
      for (auto& s : scales) s = u(g);
      const uint32_t nans[] = {0x7fc0ffffu, 0xffc12345u};
      float special[] = {std::nanf(""), 0, 0, -std::numeric_limits<float>::infinity(), 0.0f, 1e-39f, 1e-45f};
      std::memcpy(&special[1], &nans[0], 4);
      std::memcpy(&special[2], &nans[1], 4);
      for (int64_t b = 0; b < blocks; b += 2) scales[b] = special[(b / 2) % 7];
      std::vector<float> f(count);
      std::vector<BFloat16> h(count);
      hwy_decode4::blocks(packed.data(), count, bs, scales.data(), table, f.data());
      hwy_decode4::blocks(packed.data(), count, bs, scales.data(), table, h.data());
      for (int64_t k = 0; k < count; ++k) {
        const uint8_t byte = packed[k / 2];
        const float want = table[k % 2 ? byte & 0xfu : byte >> 4] * scales[k / bs];
        ++runs;
        if (float_bits(f[k]) != float_bits(want) || h[k].bits != f32_to_bf16(want)) {
          if (++bad < 10) {
            std::printf("bs=%ld count=%ld k=%ld: %08x %04x, want %08x %04x\n", static_cast<long>(bs),
                        static_cast<long>(count), static_cast<long>(k), float_bits(f[k]), h[k].bits, float_bits(want),
                        f32_to_bf16(want));
          }
        }
      }
    }
  }
  std::printf("%d of %d elements wrong\n", bad, runs);
  return bad != 0;
}
