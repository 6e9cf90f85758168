// 64-bit indexing: an 8-bit and an NF4 round trip over 2^31 + 3 elements on
// the GPU, checked element by element against expectations that cost a table
// lookup each.
//
// Block b (4096 elements) holds the base block rotated by 7b and scaled by
// 2^k(b), k(b) = b % 9 - 4. Scaling by a power of two commutes with every
// rounding here (no subnormals), so element j of block b has the code of base
// element (j + 7b) % 4096, block b's absmax is 2^k(b) times the base's, and
// the decoded value comes from a [9 x 4096] table. A kernel that indexed with
// 32 bits past 2^31 would read or write the wrong block: wrong rotation, wrong
// scale, or a fault.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/float_convert.h"
#include "core/tables.h"
#include "cuda_test_util.h"
#include "lowbit/code_maps.h"
#include "lowbit/ops/quant.h"

namespace {

using namespace lowbit;

constexpr int64_t kBlock = 4096;
constexpr int64_t kN = (int64_t{1} << 31) + 3;
constexpr int64_t kBlocks = (kN + kBlock - 1) / kBlock;
constexpr int kScales = 9;

int scale_exp(int64_t b) { return static_cast<int>(b % kScales) - 4; }
int64_t base_index(int64_t i) { return ((i % kBlock) + 7 * (i / kBlock)) % kBlock; }

TEST(CudaLarge, RoundTripBeyond2Pow31Elements) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  size_t free_bytes = 0, total_bytes = 0;
#if defined(LOWBIT_WITH_CUDA)
  LOWBIT_ASSERT_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
#endif
  (void)total_bytes;
  const size_t need = static_cast<size_t>(kN) * (2 + 1 + 2) + (size_t{1} << 30);
  if (free_bytes < need)
    GTEST_SKIP() << "needs " << (need >> 30) << " GB of GPU memory, " << (free_bytes >> 30) << " free";

  // Base block: f16 magnitudes in [2^-8, 1] (so 2^-4 scaling stays normal in f16), random signs.
  std::mt19937 g(20261122);
  std::uniform_real_distribution<float> mag(-8.0f, 0.0f);
  std::vector<uint16_t> base(kBlock);
  for (auto& h : base) h = core::f32_to_f16(std::copysign(std::exp2(mag(g)), (g() & 1) ? 1.0f : -1.0f));
  base[1234] = core::f32_to_f16(1.0f);  // the base absmax, exactly

  // Expected codes of the base block from the CPU backend.
  const std::vector<float> code = create_dynamic_map();
  const Tensor code_host =
      Tensor::copy_of(TensorRef::contiguous(const_cast<float*>(code.data()), DType::f32, {256}), Device::cpu());
  const Tensor base_t = Tensor::copy_of(TensorRef::contiguous(base.data(), DType::f16, {kBlock}), Device::cpu());
  Tensor base_q = Tensor::empty({kBlock}, DType::u8), base_abs = Tensor::empty({1}, DType::f32);
  run(QuantizeBlockwiseArgs{base_t, code_host, base_q, base_abs, kBlock});
  Tensor base_q4 = Tensor::empty({kBlock / 2}, DType::u8);
  run(Quantize4bitArgs{base_t, base_q4, base_abs, kBlock, Quant4Type::nf4});
  const float base_absmax = base_abs.ptr<float>()[0];
  ASSERT_EQ(base_absmax, 1.0f);

  // The input.
  Tensor x = Tensor::empty({kN}, DType::f16);
  auto* xp = x.ptr<uint16_t>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < kN; ++i) {
    const float v = core::f16_to_f32(base[static_cast<size_t>(base_index(i))]);
    xp[i] = core::f32_to_f16(std::ldexp(v, scale_exp(i / kBlock)));
  }
  // The last block has 3 elements: its expectations come from the CPU backend.
  const int64_t tail0 = (kBlocks - 1) * kBlock, tail = kN - tail0;
  ASSERT_EQ(tail, 3);
  const TensorRef tail_in = TensorRef::contiguous(xp + tail0, DType::f16, {tail});
  Tensor tail_q = Tensor::empty({tail}, DType::u8), tail_abs = Tensor::empty({1}, DType::f32);
  run(QuantizeBlockwiseArgs{tail_in, code_host, tail_q, tail_abs, kBlock});
  Tensor tail_q4 = Tensor::empty({2}, DType::u8), tail_abs4 = Tensor::empty({1}, DType::f32);
  run(Quantize4bitArgs{tail_in, tail_q4, tail_abs4, kBlock, Quant4Type::nf4});

  // On the GPU: 8-bit and NF4 quantize, then dequantize both into one f16 buffer.
  const Device gpu = Device::cuda(0);
  const Tensor xd = x.to(gpu);
  x = Tensor();
  const Tensor code_d = code_host.to(gpu);
  Tensor q = Tensor::empty({kN}, DType::u8, gpu), absmax = Tensor::empty({kBlocks}, DType::f32, gpu);
  run(QuantizeBlockwiseArgs{xd, code_d, q, absmax, kBlock});
  Tensor q4 = Tensor::empty({(kN + 1) / 2}, DType::u8, gpu), absmax4 = Tensor::empty({kBlocks}, DType::f32, gpu);
  run(Quantize4bitArgs{xd, q4, absmax4, kBlock, Quant4Type::nf4});
  Tensor out = Tensor::empty({kN}, DType::f16, gpu);
  run(DequantizeBlockwiseArgs{q, code_d, absmax, {}, out, kBlock});
  synchronize(Stream{});

  // absmax of both.
  const Tensor ha = absmax.to(Device::cpu()), ha4 = absmax4.to(Device::cpu());
  int64_t bad_abs = 0;
  for (int64_t b = 0; b + 1 < kBlocks; ++b) {
    const float want = std::ldexp(base_absmax, scale_exp(b));
    bad_abs += ha.ptr<float>()[b] != want;
    bad_abs += ha4.ptr<float>()[b] != want;
  }
  EXPECT_EQ(bad_abs, 0);
  EXPECT_EQ(ha.ptr<float>()[kBlocks - 1], tail_abs.ptr<float>()[0]);
  EXPECT_EQ(ha4.ptr<float>()[kBlocks - 1], tail_abs4.ptr<float>()[0]);

  // 8-bit codes.
  {
    const Tensor hq = q.to(Device::cpu());
    const uint8_t* p = hq.ptr<uint8_t>();
    const uint8_t* want = base_q.ptr<uint8_t>();
    int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
    for (int64_t i = 0; i < tail0; ++i) bad += p[i] != want[base_index(i)];
    for (int64_t i = tail0; i < kN; ++i) bad += p[i] != tail_q.ptr<uint8_t>()[i - tail0];
    EXPECT_EQ(bad, 0) << "8-bit codes differing from the expectation";
  }
  // NF4 bytes; the odd tail leaves the last low nibble 0.
  {
    const Tensor hq4 = q4.to(Device::cpu());
    const uint8_t* p = hq4.ptr<uint8_t>();
    const uint8_t* want = base_q4.ptr<uint8_t>();
    auto nibble = [](const uint8_t* bytes, int64_t i) { return (i % 2 == 0) ? bytes[i / 2] >> 4 : bytes[i / 2] & 0xf; };
    int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
    for (int64_t i = 0; i < tail0; ++i) bad += nibble(p, i) != nibble(want, base_index(i));
    EXPECT_EQ(bad, 0) << "nf4 codes differing from the expectation";
    EXPECT_EQ(p[tail0 / 2], tail_q4.ptr<uint8_t>()[0]);
    EXPECT_EQ(p[tail0 / 2 + 1], tail_q4.ptr<uint8_t>()[1]);
    EXPECT_EQ(p[tail0 / 2 + 1] & 0xf, 0);
  }
  // 8-bit dequantize, then NF4 dequantize into the same buffer.
  std::vector<uint16_t> table(static_cast<size_t>(kScales * kBlock));
  auto check_out = [&](const char* what, const std::vector<float>& tail_values) {
    const Tensor ho = out.to(Device::cpu());
    const uint16_t* p = ho.ptr<uint16_t>();
    int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
    for (int64_t i = 0; i < tail0; ++i) {
      bad += p[i] != table[static_cast<size_t>((i / kBlock) % kScales * kBlock + base_index(i))];
    }
    for (int64_t i = tail0; i < kN; ++i) bad += p[i] != core::f32_to_f16(tail_values[static_cast<size_t>(i - tail0)]);
    EXPECT_EQ(bad, 0) << what << " outputs differing from the expectation";
  };
  for (int s = 0; s < kScales; ++s) {
    const float a = std::ldexp(base_absmax, s - 4);
    for (int64_t m = 0; m < kBlock; ++m) {
      table[static_cast<size_t>(s * kBlock + m)] = core::f32_to_f16(code[base_q.ptr<uint8_t>()[m]] * a);
    }
  }
  std::vector<float> tail_values;
  for (int64_t i = 0; i < tail; ++i) tail_values.push_back(code[tail_q.ptr<uint8_t>()[i]] * tail_abs.ptr<float>()[0]);
  check_out("8-bit dequantize", tail_values);

  run(Dequantize4bitArgs{q4, absmax4, {}, out, kBlock, Quant4Type::nf4});
  synchronize(Stream{});
  for (int s = 0; s < kScales; ++s) {
    const float a = std::ldexp(base_absmax, s - 4);
    for (int64_t m = 0; m < kBlock; ++m) {
      const uint8_t byte = base_q4.ptr<uint8_t>()[m / 2];
      table[static_cast<size_t>(s * kBlock + m)] =
          core::f32_to_f16(core::kNf4Table[m % 2 ? byte & 0xf : byte >> 4] * a);
    }
  }
  tail_values.clear();
  for (int64_t i = 0; i < tail; ++i) {
    const uint8_t byte = tail_q4.ptr<uint8_t>()[i / 2];
    tail_values.push_back(core::kNf4Table[i % 2 ? byte & 0xf : byte >> 4] * tail_abs4.ptr<float>()[0]);
  }
  check_out("nf4 dequantize", tail_values);
}

}  // namespace
