// Calls that leave their config empty take the tuned-parameter database's
// entry for their op, device and key (ops::tuned_call): a listed config is
// forced, "default" and configs the backend does not list for the call are
// not, other keys and devices find nothing; on CUDA the tuned FP8 GEMM gives
// the same bits as the heuristic's pick with every sm_90a tile shape.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "../cuda/cuda_test_util.h"
#include "core/registry.h"
#include "harness/harness.h"
#include "lowbit/ops/fp8_gemm.h"
#include "lowbit/ops/gemm.h"
#include "lowbit/tune.h"
#include "ops/dispatch.h"

namespace lowbit::test {
namespace {

Tensor filled(std::initializer_list<int64_t> shape, DType dtype, uint8_t mask) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.data());
  uint32_t s = static_cast<uint32_t>(seed());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>((s = s * 1664525u + 1013904223u) >> 24) & mask;
  return t;
}

std::string entry(const char* op, Device d, const ops::TuneKey& k, const std::string& config) {
  std::string key;
  for (const std::string& w : k.key) key += w + " ";
  return std::string(op) + " | " + core::device_name(d) + " | " + k.version + " | " + key + "| " + config + "\n";
}

TEST(TunedCalls, TheDatabaseEntryOfTheCallIsUsed) {
  Tensor A = Tensor::empty({2, 128}, DType::f32);
  for (int64_t i = 0; i < A.numel(); ++i) A.ptr<float>()[i] = 0.01f * static_cast<float>(i % 17);
  const Tensor packed = filled({64 * 128 / 2}, DType::u8, 0xff);
  Tensor absmax = Tensor::empty({64 * 128 / 64}, DType::f32);
  for (int64_t i = 0; i < absmax.numel(); ++i) absmax.ptr<float>()[i] = 1.0f;
  Tensor out = Tensor::empty({2, 64}, DType::f32);
  Matmul4bitArgs a;
  a.A = A.ref();
  a.packed = packed.ref();
  a.absmax = absmax.ref();
  a.out = out.ref();
  a.N = 64;
  const Device cpu = Device::cpu();
  const auto& impl = core::OpRegistry<Matmul4bitArgs>::select(cpu);
  const std::vector<KernelConfig> listed = kernel_configs(a);
  ASSERT_GE(listed.size(), 2u);
  const ops::TuneKey k = ops::tune_key(a);
  EXPECT_EQ(k.version, "float32 nf4 64");
  EXPECT_EQ(k.key, (std::vector<std::string>{"2", "64", "128"}));

  const TuneDb forced = TuneDb::parse(entry("matmul_4bit", cpu, k, listed[1].name()), "test");
  const auto t = ops::tuned_call(a, cpu, impl, forced);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->config, listed[1]);
  Matmul4bitArgs given = a;  // a config the caller gives wins over the database
  given.config = listed[0];
  EXPECT_FALSE(ops::tuned_call(given, cpu, impl, forced).has_value());
  EXPECT_FALSE(ops::tuned_call(a, cpu, impl, TuneDb::parse(entry("matmul_4bit", cpu, k, "default"), "t")));
  EXPECT_FALSE(ops::tuned_call(a, cpu, impl, TuneDb::parse(entry("matmul_4bit", cpu, k, "cpu_m1_n1_k1"), "t")));
  ops::TuneKey other = k;
  other.key[0] = "3";
  EXPECT_FALSE(ops::tuned_call(a, cpu, impl, TuneDb::parse(entry("matmul_4bit", cpu, other, listed[1].name()), "t")));
  EXPECT_FALSE(ops::tuned_call(a, cpu, impl, TuneDb{}));
}

#if defined(LOWBIT_WITH_CUDA)
// The shipped database serves a GPU of a family it was measured on, and nothing on another.
TEST(TunedCalls, TheShippedEntriesServeTheirGpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const Device gpu = Device::cuda(0);
  const std::string name = core::device_name(gpu);
  const std::vector<std::string> key = {"128", "32768", "512"};
  const auto hit = tune_db().get_config("fp8_gemm", name, "bfloat16", key);
  EXPECT_FALSE(tune_db().get_config("fp8_gemm", "NVIDIA L4", "bfloat16", key));
  if (device_family(name) != "NVIDIA H200") GTEST_SKIP() << "no shipped fp8_gemm entries for " << name;
  ASSERT_TRUE(hit.has_value());
  const Tensor a = filled({128, 512}, DType::f8_e4m3, 0xef).to(gpu), b = filled({32768, 512}, DType::f8_e4m3, 0xef).to(gpu);
  const Tensor as = Tensor::empty({128, 4}, DType::f32, gpu), bs = Tensor::empty({256, 4}, DType::f32, gpu);
  const Tensor out = Tensor::empty({128, 32768}, DType::bf16, gpu);
  const Fp8GemmArgs args{a.ref(), as.ref(), b.ref(), bs.ref(), {}, out.ref(), {}};
  const auto t = ops::tuned_call(args, gpu, core::OpRegistry<Fp8GemmArgs>::select(gpu), tune_db());
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->config.name(), *hit);
}

TEST(TunedCalls, Fp8GemmTunedOnTheGpuGivesTheHeuristicsBits) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const Device gpu = Device::cuda(0);
  const int64_t M = 96, N = 384, K = 512;
  const Tensor a = filled({M, K}, DType::f8_e4m3, 0xef).to(gpu), b = filled({N, K}, DType::f8_e4m3, 0xef).to(gpu);
  Tensor as = Tensor::empty({M, K / 128}, DType::f32), bs = Tensor::empty({N / 128, K / 128}, DType::f32);
  for (int64_t i = 0; i < as.numel(); ++i) as.ptr<float>()[i] = 0.01f + 0.001f * static_cast<float>(i % 7);
  for (int64_t i = 0; i < bs.numel(); ++i) bs.ptr<float>()[i] = 0.02f + 0.001f * static_cast<float>(i % 5);
  const Tensor gas = as.to(gpu), gbs = bs.to(gpu);
  Tensor out1 = Tensor::empty({M, N}, DType::bf16, gpu), out2 = Tensor::empty({M, N}, DType::bf16, gpu);
  Fp8GemmArgs args{a.ref(), gas.ref(), b.ref(), gbs.ref(), {}, out1.ref(), {}};
  const std::vector<KernelConfig> listed = kernel_configs(args);
  const auto& impl = core::OpRegistry<Fp8GemmArgs>::select(gpu);
  for (const KernelConfig& c : listed) {
    SCOPED_TRACE(c.name());
    const TuneDb db = TuneDb::parse(entry("fp8_gemm", gpu, ops::tune_key(args), c.name()), "test");
    const auto t = ops::tuned_call(args, gpu, impl, db);
    ASSERT_TRUE(t.has_value());
    ASSERT_EQ(t->config, c);
    run(args);  // the heuristic's pick
    Fp8GemmArgs tuned = *t;
    tuned.out = out2.ref();
    run(tuned);
    // The sm_90a kernel's tile shapes sum in one order: the same bits. The tile kernels of the other GPUs
    // sum otherwise, and `lowbit tune` leaves such configs out (tests/cpp/io/test_cli.cpp).
    if (c.family.rfind("wgmma", 0) != 0) continue;
    const Tensor h1 = out1.to(Device::cpu()), h2 = out2.to(Device::cpu());
    EXPECT_EQ(std::memcmp(h1.data(), h2.data(), h1.nbytes()), 0);
  }
}
#endif

}  // namespace
}  // namespace lowbit::test
