// KernelConfig by value: names print and parse back, malformed names are
// refused with the fault named, and every backend's listed configs run and
// name themselves (kernel_configs).
#include "gemm/gemm_cases.h"

namespace lowbit::test {
namespace {

TEST(KernelConfig, NamesRoundTrip) {
  for (const char* name : {"wgmma_m128_n128_k128", "stream_m16_n512", "mma_m64_n128_s4", "cpu_m8_n16_k512",
                           "dequant_gemm", "fused", "rows_m8_n128", "x2_m1_n2_k3_s4"}) {
    const KernelConfig c = parse_kernel_config(name);
    EXPECT_EQ(c.name(), name);
    EXPECT_FALSE(c.empty());
  }
  const KernelConfig c = parse_kernel_config("dequant_gemm");
  EXPECT_EQ(c.family, "dequant_gemm");
  EXPECT_EQ(c.block_m, 0);
  const KernelConfig w = parse_kernel_config("wgmma_m64_n256_k64");
  EXPECT_EQ(w, (KernelConfig{"wgmma", 64, 256, 64, 0}));
  EXPECT_TRUE(parse_kernel_config("").empty());
  EXPECT_EQ(KernelConfig{}.name(), "");
}

TEST(KernelConfig, MalformedNamesAreRefused) {
  const ErrorCode bad = ErrorCode::invalid_argument;
  expect_error([] { parse_kernel_config("m128_n64"); }, bad, {"parse_kernel_config: 'm128_n64' starts with a field"});
  expect_error([] { parse_kernel_config("wgmma__m64"); }, bad, {"'wgmma__m64' has an empty part"});
  expect_error([] { parse_kernel_config("Wgmma_m64"); }, bad, {"the family 'Wgmma' must be lowercase"});
  expect_error([] { parse_kernel_config("7"); }, bad, {"the family '7' must be", "a letter first"});
  expect_error([] { parse_kernel_config("wgmma_m64_big"); }, bad, {"'big' after the fields is not a field"});
  expect_error([] { parse_kernel_config("wgmma_n64_m64"); }, bad, {"in the order m, n, k, s"});
  expect_error([] { parse_kernel_config("wgmma_m64_m64"); }, bad, {"in the order m, n, k, s"});
  expect_error([] { parse_kernel_config("wgmma_m0"); }, bad, {"'m0' must hold a positive number"});
  expect_error([] { parse_kernel_config("wgmma_m99999999999"); }, bad, {"must hold a positive number below 2^31"});
  expect_error([] { parse_kernel_config("wgmma_"); }, bad, {"has an empty part"});
}

MatmulConfig nf4_config(int64_t m) {
  MatmulConfig c;
  c.W_dtype = WeightType::nf4;
  c.N = 48;
  c.K = 256;
  c.group_size = 64;
  c.with_scaling = true;
  c.M = {m};
  return c;
}

// Every listed config runs (against the heuristic's output, which the
// harness checks against the oracle) and is distinct; the heuristic's pick
// comes first; an unlisted config is an error naming the backend's configs.
TEST(KernelConfig, EveryBackendListsWhatItRuns) {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda(0));
  for (const Device device : devices) {
    for (int64_t m : {1, 16, 100}) {
      const MatmulConfig c = nf4_config(m);
      const QuantizedWeight w = random_weight(c, DType::f16, false);
      const Matmul mm(c, device);
      const PackedWeight W = mm.transform_weight(w);
      const Tensor A = random_floats({m, c.K}, DType::f16, 0.5f).to(device);
      Tensor out = Tensor::empty({m, c.N}, DType::f16, device);
      const std::vector<KernelConfig> configs = kernel_configs(mm.args(A, W.ref(), out));
      ASSERT_FALSE(configs.empty()) << device.str();
      for (size_t i = 0; i < configs.size(); ++i) {
        EXPECT_EQ(parse_kernel_config(configs[i].name()), configs[i]);
        for (size_t j = 0; j < i; ++j) EXPECT_NE(configs[i], configs[j]) << configs[i].name();
        MatmulArgs a = mm.args(A, W.ref(), out);
        a.config = configs[i];
        Tensor ws = Tensor::empty({static_cast<int64_t>(workspace_size(a))}, DType::u8, device);
        EXPECT_NO_THROW(run(a, ws.data(), Stream{})) << configs[i].name();
      }
      synchronize(Stream{});
      MatmulArgs a = mm.args(A, W.ref(), out);
      a.config = parse_kernel_config("nosuch_m8");
      expect_error(
          [&] {
            Tensor ws = Tensor::empty({static_cast<int64_t>(workspace_size(a))}, DType::u8, device);
            run(a, ws.data(), Stream{});
          },
          ErrorCode::invalid_argument, {"matmul: config 'nosuch_m8' is not a", configs.back().name()});
    }
  }
}

}  // namespace
}  // namespace lowbit::test
