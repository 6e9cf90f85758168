// Every check of the matmul front ends trips with a message naming the op,
// the argument, the expectation and the value received.
#include <cstring>

#include "gemm/gemm_cases.h"
#include "ops/gemm/common.h"

namespace lowbit::test {
namespace {

MatmulConfig int4_config() {
  MatmulConfig c;
  c.N = 4;
  c.K = 64;
  c.W_dtype = WeightType::int4;
  c.with_scaling = true;
  c.group_size = 32;
  return c;
}

void expect_config_error(const MatmulConfig& c, ErrorCode code, const std::vector<std::string>& parts) {
  expect_error([&] { check(c); }, code, parts);
  expect_error([&] { Matmul m(c); }, code, parts);
}

TEST(MatmulErrors, Config) {
  const ErrorCode bad = ErrorCode::invalid_argument, dtype = ErrorCode::unsupported_dtype;
  MatmulConfig c = int4_config();
  c.M = {};
  expect_config_error(c, bad, {"matmul: M", "at least one value"});
  c = int4_config(), c.M = {1, 0};
  expect_config_error(c, bad, {"matmul: every prepared M must be positive (got 0)"});
  c = int4_config(), c.N = 0;
  expect_config_error(c, bad, {"matmul: N must be positive (got 0)"});
  c = int4_config(), c.K = -3;
  expect_config_error(c, bad, {"matmul: K must be positive (got -3)"});
  // N * K past int64_t: refused before any count of the weight wraps.
  c = int4_config(), c.N = int64_t{1} << 40, c.K = int64_t{1} << 40;
  expect_config_error(c, bad, {"matmul: the weight [N, K] shape [1099511627776, 1099511627776]"});
  c = int4_config(), c.N = 128, c.K = (int64_t{1} << 62) + 128;
  expect_config_error(c, bad, {"matmul: the weight [N, K]"});
  c = int4_config(), c.A_dtype = DType::f32;
  expect_config_error(c, dtype, {"matmul: A_dtype must be one of float16, bfloat16, int8 (got float32)"});
  c = int4_config(), c.accum_dtype = DType::i32;
  expect_config_error(c, dtype, {"matmul: accum_dtype", "(got int32)"});
  c = int4_config(), c.out_dtype = DType::i8;
  expect_config_error(c, dtype, {"matmul: out_dtype", "float32", "(got int8)"});
  c = int4_config(), c.layout = "nn";
  expect_config_error(c, bad, {"matmul: layout must be \"nt\"", "got \"nn\""});
  c = int4_config(), c.group_size = 48;
  expect_config_error(c, bad, {"matmul: group_size must be -1 or a positive multiple of 32 (got 48)"});
  c = int4_config(), c.group_size = 128;
  expect_config_error(c, bad, {"matmul: group_size 128 must divide K (got K = 64)"});
  c = int4_config(), c.with_scaling = false;
  expect_config_error(c, bad, {"matmul: group_size 32 needs with_scaling"});
  c = int4_config(), c.group_size = -1, c.with_scaling = false, c.with_zeros = true;
  expect_config_error(c, bad, {"matmul: with_zeros needs with_scaling"});
  c = int4_config(), c.W_dtype = WeightType::nf4, c.with_zeros = true;
  expect_config_error(c, bad, {"matmul: with_zeros needs an integer W_dtype", "got nf4"});
  c = int4_config(), c.W_dtype = static_cast<WeightType>(99);
  expect_config_error(c, dtype, {"matmul: W_dtype must be a WeightType (got value 99)"});
}

TEST(MatmulErrors, TransformWeight) {
  const ErrorCode bad = ErrorCode::invalid_argument, dtype = ErrorCode::unsupported_dtype;
  const MatmulConfig c = int4_config();
  const Matmul m(c);
  const QuantizedWeight w = random_weight(c, DType::f16, false);
  expect_error(
      [&] {
        m.transform_weight(Tensor::empty({4, 63}, DType::i8), w.scale);
      },
      bad, {"transform_weight: weight must have shape [4, 64] (got [4, 63])"});
  expect_error(
      [&] {
        m.transform_weight(Tensor::empty({4, 64}, DType::f32), w.scale);
      },
      dtype, {"transform_weight: weight dtype must be one of int8, uint8 (got float32)"});
  Tensor big = Tensor::copy_of(w.weight, Device::cpu());
  big.ptr<int8_t>()[66] = 9;
  expect_error([&] { m.transform_weight(big, w.scale); }, bad,
               {"transform_weight: weight values of int4 must be in [-8, 7] (got 9 at [1, 2])"});
  expect_error([&] { m.transform_weight(w.weight); }, bad, {"transform_weight: scale is required (got none)"});
  expect_error(
      [&] {
        m.transform_weight(w.weight, Tensor::empty({4, 3}, DType::f16));
      },
      bad, {"transform_weight: scale must have shape [4, 2] (got [4, 3])"});
  expect_error([&] { m.transform_weight(w.weight, w.scale, w.scale); }, bad,
               {"transform_weight: zeros must be absent when with_zeros is false"});
  expect_error(
      [&] {
        m.transform_weight(w.weight, w.scale, {}, host_tensor({1, 2, 3, 4}));
      },
      bad, {"transform_weight: bias must be absent when with_bias is false"});
  Tensor perm = Tensor::empty({64}, DType::i32);
  for (int k = 0; k < 64; ++k) perm.ptr<int32_t>()[k] = k;
  perm.ptr<int32_t>()[5] = 3;
  expect_error([&] { m.transform_weight(w.weight, w.scale, {}, {}, perm); }, bad,
               {"transform_weight: perm must be a permutation of 0..63 (got 3 at [5], seen before)"});

  MatmulConfig c1 = c;
  c1.W_dtype = WeightType::int1;
  Tensor zero_value = Tensor::empty({4, 64}, DType::i8);
  std::memset(zero_value.data(), 0, 256);
  expect_error([&] { Matmul(c1).transform_weight(zero_value, w.scale); }, bad,
               {"weight values of int1 must be -1 or +1 (got 0 at [0, 0])"});
  MatmulConfig cn = c;
  cn.W_dtype = WeightType::nf4;
  Tensor code16 = Tensor::empty({4, 64}, DType::u8);
  std::memset(code16.data(), 16, 256);
  expect_error([&] { Matmul(cn).transform_weight(code16, w.scale); }, bad,
               {"weight codes of nf4 must be in [0, 15] (got 16 at [0, 0])"});
  MatmulConfig ch = c;
  ch.W_dtype = WeightType::f16;
  expect_error([&] { Matmul(ch).transform_weight(code16, w.scale); }, dtype,
               {"transform_weight: weight dtype must be float16 (got uint8)"});

  MatmulConfig cz = c;
  cz.W_dtype = WeightType::uint4;
  cz.with_zeros = true;
  cz.zeros_mode = ZerosMode::original;
  const QuantizedWeight wz = random_weight(cz, DType::f16, false);
  expect_error(
      [&] {
        Matmul(cz).transform_weight(wz.weight, wz.scale, Tensor::empty({4, 2}, DType::f32));
      },
      dtype, {"transform_weight: zeros (original) must have the scale's dtype float16 (got float32)"});
  cz.zeros_mode = ZerosMode::quantized;
  Tensor z16 = Tensor::empty({4, 2}, DType::u8);
  std::memset(z16.data(), 0, 8);
  z16.ptr<uint8_t>()[1] = 16;
  expect_error([&] { Matmul(cz).transform_weight(wz.weight, wz.scale, z16); }, bad,
               {"transform_weight: quantized zeros must be values of uint4 (got 16 at [0, 1])"});
}

TEST(MatmulErrors, Forward) {
  const ErrorCode bad = ErrorCode::invalid_argument, dtype = ErrorCode::unsupported_dtype;
  const MatmulConfig c = int4_config();
  const Matmul m(c);
  const QuantizedWeight w = random_weight(c, DType::f16, false);
  const PackedWeight p = m.transform_weight(w.weight, w.scale);
  const Tensor A = random_floats({2, 64}, DType::f16);
  expect_error(
      [&] {
        m.forward(random_floats({2, 64}, DType::bf16), p);
      },
      dtype, {"matmul: A dtype must be the config's A_dtype float16 (got bfloat16)"});
  expect_error(
      [&] {
        m.forward(random_floats({2, 63}, DType::f16), p);
      },
      bad, {"matmul: A's last dimension must equal K = 64 (got A [2, 63])"});
  expect_error(
      [&] {
        m.forward(A, p, Tensor::empty({2, 5}, DType::f16));
      },
      bad, {"matmul: out must have shape [2, 4] (A's leading dims, then N; got [2, 5])"});
  // A 0-d A into a caller's out: checked before the workspace is sized from A's shape.
  const Tensor scalar = Tensor::empty(Shape{}, DType::f16);
  expect_error([&] { m.forward(scalar, p, Tensor::empty({4}, DType::f16)); }, bad,
               {"matmul: A must have at least one dimension"});
  MatmulConfig other = c;
  other.W_dtype = WeightType::uint4;
  expect_error([&] { Matmul(other).forward(A, p); }, bad,
               {"matmul: the packed weight's W_dtype (int4) differs from the config's (uint4)"});

  // The primitive's own checks.
  Tensor out = Tensor::empty({2, 4}, DType::f16);
  MatmulArgs a = m.args(A, p.ref(), out);
  MatmulArgs e = a;
  e.A = random_floats({2, 64}, DType::f32);
  expect_error([&] { check(e); }, dtype, {"matmul: A dtype must be one of float16, bfloat16 (got float32)"});
  e = a, e.out = Tensor::empty({2, 4}, DType::i32);
  expect_error([&] { check(e); }, dtype, {"matmul: out dtype must be one of float32, float16, bfloat16 (got int32)"});
  // A view one byte into the packed rows: kernels load 16-byte words.
  Tensor shifted = Tensor::empty({4 * 32 + 16}, DType::u8);
  e = a, e.weight.qweight = TensorRef::contiguous(shifted.ptr<uint8_t>() + 1, DType::u8, {4, 32});
  expect_error([&] { check(e); }, bad, {"matmul: weight.qweight must be 16-byte aligned", "1 bytes past"});
  e = a, e.weight.qweight = TensorRef::contiguous(shifted.data(), DType::u8, {4, 16});
  expect_error([&] { check(e); }, bad, {"matmul: weight.qweight must have shape [4, 32] (got [4, 16])"});
  e = a, e.weight.scale = {};
  expect_error([&] { check(e); }, bad, {"matmul: weight.scale is required (got none)"});
  e = a, e.weight.format.group_size = 64;
  expect_error([&] { check(e); }, bad, {"matmul: weight.scale must have shape [4, 1] (got [4, 2])"});
  e = a, e.config = parse_kernel_config("wgmma_m128_n128_k128");
  const Tensor ws = Tensor::empty({static_cast<int64_t>(workspace_size(e))}, DType::u8);
  expect_error([&] { ops::run_impl(core::OpRegistry<MatmulArgs>::find("cpu"), e, ws.data(), {}); }, bad,
               {"matmul: config 'wgmma_m128_n128_k128' is not a cpu kernel config (the cpu backend runs "
                "cpu_m8_n16_k512, cpu_m32_n32_k256, cpu_m128_n64_k256)"});
  e = a, e.out = TensorRef::contiguous(out.data(), DType::f16, {2, 4}, Device::cuda(0));
  expect_error([&] { check(e); }, ErrorCode::device_mismatch, {"matmul: out must be on cpu like A (got cuda:0)"});
  expect_error([&] { run(a, nullptr); }, bad, {"matmul: workspace of", "bytes is required"});
}

// A weight packed in the CUDA tiles layout (host tensors): its own checks,
// and the CPU kernels' refusal of a layout they do not read.
TEST(MatmulErrors, TilesLayout) {
  const ErrorCode bad = ErrorCode::invalid_argument;
  const MatmulConfig c = [] {
    MatmulConfig k = int4_config();
    k.group_size = 64;
    return k;
  }();
  const QuantizedWeight w = random_weight(c, DType::f16, false);
  const PackedWeight p = ops::gemm::pack_weight(WeightLayout::tiles, c, w.weight, w.scale, {}, {}, {});
  const Tensor A = random_floats({2, 64}, DType::f16);
  Tensor out = Tensor::empty({2, 4}, DType::f16);
  MatmulArgs a;
  a.A = A.ref();
  a.weight = p.ref();
  a.out = out.ref();
  check(a);
  MatmulArgs e = a;
  e.weight.qweight = TensorRef::contiguous(p.qweight.data(), DType::u8, {1, 256});
  expect_error([&] { check(e); }, bad, {"matmul: weight.qweight must have shape [1, 512] (got [1, 256])"});
  e = a, e.weight.scale = TensorRef::contiguous(p.scale.data(), DType::f16, {4, 1});
  expect_error([&] { check(e); }, bad, {"matmul: weight.scale must have shape [1, 16] (got [4, 1])"});
  Tensor shifted = Tensor::empty({512 + 16}, DType::u8);
  e = a, e.weight.qweight = TensorRef::contiguous(shifted.ptr<uint8_t>() + 4, DType::u8, {1, 512});
  expect_error([&] { check(e); }, bad,
               {"matmul: weight.qweight must be 16-byte aligned in the tiles layout", "4 bytes"});
  e = a, e.weight.format.group_size = 32;
  expect_error([&] { check(e); }, bad, {"matmul: the tiles layout takes", "group_size 32"});
  e = a, e.weight.format.type = WeightType::fp8_e4m3;
  expect_error([&] { check(e); }, bad, {"matmul: the tiles layout takes", "fp8_e4m3"});
  const Tensor ws = Tensor::empty({1 << 16}, DType::u8);
  expect_error([&] { run(a, ws.data()); }, bad, {"matmul: the cpu kernels read the rows layout (got layout tiles)"});
}

#if !defined(LOWBIT_WITH_CUDA)
TEST(MatmulErrors, CudaWithoutTheBackend) {
  const MatmulConfig c = int4_config();
  const QuantizedWeight w = random_weight(c, DType::f16, false);
  expect_error([&] { Matmul(c, Device::cuda(0)).transform_weight(w.weight, w.scale); }, ErrorCode::no_backend,
               {"cuda", "without CUDA"});
}
#endif

}  // namespace
}  // namespace lowbit::test
