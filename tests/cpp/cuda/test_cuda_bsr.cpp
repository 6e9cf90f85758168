// The CUDA bsr_dense_addmm against the CPU's on the same operands: every
// kernel (sm_90a's wgmma one and the mma.sync one at every block shape they
// take, blocks not square, ragged column panels; the generic one for fp32, odd block shapes,
// N not a multiple of 8 and unaligned views), broadcast batches and input,
// beta 0 with a NaN input, empty rows and matrices; int8 bit for bit; bad
// index arrays caught on the device (the row's outputs NaN, the others
// intact); a call captured in a CUDA graph.
#include <array>
#include <algorithm>
#include <tuple>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "core/check.h"
#include "harness/compare.h"
#include "harness/harness.h"
#include "lowbit/ops/sparse.h"
#include "sparse/random_bsr.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Device kGpu = Device::cuda(0);

struct Case {
  std::vector<int64_t> bsr_batch, dense_batch;
  int64_t M, K, N, BM, BK;
  double density;
  DType index;
  std::vector<int64_t> input_shape;  // none: no input
  double beta, alpha;
  int64_t offset = 0;  // elements the GPU's values and dense sit into their buffers
};

std::string name_of(const Case& c, DType dtype) {
  return "bsr_dense_addmm " + std::string(dtype_name(dtype)) + " M " + std::to_string(c.M) + " K " +
         std::to_string(c.K) + " N " + std::to_string(c.N) + " block " + std::to_string(c.BM) + "x" +
         std::to_string(c.BK) + " density " + std::to_string(c.density) + " beta " + std::to_string(c.beta) +
         " offset " + std::to_string(c.offset);
}

// The GPU's result against the CPU backend's (fp32 sums in block order): within the output's rounding and
// fp32 sums of the row's products, the magnitude taken from the same product of absolute values.
void check(const Case& c, DType dtype) {
  const std::string what = name_of(c, dtype);
  const RandomBsr a = random_bsr(c.bsr_batch, c.M, c.K, c.BM, c.BK, c.density, dtype, c.index);
  std::vector<int64_t> dshape = c.dense_batch;
  dshape.insert(dshape.end(), {c.K, c.N});
  const Tensor d = random_floats(dshape, dtype);
  Tensor input;
  if (!c.input_shape.empty()) {
    input = random_floats(c.input_shape, dtype);
    if (c.beta == 0.0) put_nan(input);  // beta 0 must not read it
  }
  const TensorRef in_ref = input.defined() ? input.ref() : TensorRef{};
  const Tensor want = bsr_dense_addmm(in_ref, a.ref(c.M, c.K), d.ref(), c.beta, c.alpha);
  const Tensor mag = bsr_dense_addmm(input.defined() ? abs_of(input).ref() : TensorRef{},
                                     BsrRef{a.crow.ref(), a.col.ref(), abs_of(a.values).ref(), c.M, c.K},
                                     abs_of(d).ref(), std::fabs(c.beta), std::fabs(c.alpha));
  const int64_t bytes = c.offset * dtype_bits(dtype) / 8;
  const DeviceView gv = device_view(a.values, bytes), gd = device_view(d, bytes);
  const Tensor gcrow = a.crow.to(kGpu), gcol = a.col.to(kGpu);
  const Tensor gin = input.defined() ? input.to(kGpu) : Tensor();
  const Tensor got = bsr_dense_addmm(gin.defined() ? gin.ref() : TensorRef{},
                                     BsrRef{gcrow.ref(), gcol.ref(), gv.ref, c.M, c.K}, gd.ref, c.beta, c.alpha);
  ASSERT_EQ(core::shape_str(got.ref()), core::shape_str(want.ref())) << what;
  const std::vector<float> w = to_floats(want.ref()), g = to_floats(got.ref()), m = to_floats(mag.ref());
  // Both sides sum in fp32 (the CPU's fast path, the GPU in its own order): (K + 8) units of fp32 each.
  const double u = unit_roundoff(dtype), terms = static_cast<double>(c.K + 8) * 0x1p-23;
  for (size_t i = 0; i < w.size(); ++i) {
    const double bound = 2.0 * u * std::fabs(w[i]) + terms * m[i] + 0x1p-24;
    ASSERT_LE(std::fabs(double{g[i]} - w[i]), bound) << what << " element " << i << ": got " << g[i] << ", cpu " << w[i];
  }
}

TEST(CudaBsr, DenseAddmmMatchesTheCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const std::vector<Case> cases = {
      // the tensor-core kernel: each block height, square and not, ragged panels of N
      {{}, {}, 256, 512, 200, 128, 128, 0.3, DType::i32, {}, 0.0, 1.0},
      {{}, {}, 192, 256, 136, 64, 64, 0.4, DType::i64, {}, 0.0, 1.0},
      {{}, {}, 96, 320, 264, 32, 32, 0.5, DType::i32, {}, 0.0, 1.0},
      {{}, {}, 80, 160, 8, 16, 16, 0.5, DType::i32, {}, 0.0, 1.0},
      {{}, {}, 128, 256, 128, 64, 16, 0.4, DType::i32, {}, 0.0, 1.0},
      {{}, {}, 64, 384, 72, 16, 64, 0.4, DType::i64, {}, 0.0, 1.0},
      {{}, {}, 256, 192, 48, 128, 32, 0.6, DType::i32, {}, 0.0, 1.0},
      // the sm_90a kernel's blocks (64 or 128 rows by a multiple of 64), square and not, batches that broadcast
      {{}, {}, 256, 256, 200, 128, 64, 0.4, DType::i32, {}, 0.0, 1.0},
      {{}, {}, 128, 512, 88, 64, 128, 0.3, DType::i64, {88}, 0.5, 1.5},
      {{2, 1}, {3}, 128, 192, 72, 64, 64, 0.5, DType::i32, {128, 1}, 1.0, -1.0},
      // alpha and beta, input broadcast as a bias, a column, a full matrix; beta 0 leaves a NaN input unread
      {{}, {}, 128, 128, 136, 32, 32, 0.5, DType::i32, {136}, 0.5, -2.0},
      {{}, {}, 128, 128, 64, 64, 64, 0.5, DType::i32, {128, 1}, 1.0, 1.0},
      {{}, {}, 64, 64, 40, 16, 16, 0.6, DType::i64, {64, 40}, 0.0, 1.0},
      {{}, {}, 64, 64, 40, 16, 16, 0.6, DType::i32, {64, 40}, 3.0, 0.0},
      // batches that broadcast; no stored block; no rows of dense to read
      {{2, 1}, {3}, 64, 96, 24, 32, 32, 0.5, DType::i32, {24}, 1.0, 1.0},
      {{}, {2}, 96, 64, 16, 32, 32, 0.0, DType::i32, {96, 1}, 2.0, 1.0},
      // the generic kernel: N not a multiple of 8, odd blocks, a view off 16-byte alignment
      {{}, {}, 64, 128, 37, 32, 32, 0.5, DType::i32, {}, 0.0, 1.0},
      {{}, {}, 96, 48, 24, 48, 16, 0.5, DType::i32, {}, 0.0, 1.0},
      {{}, {}, 40, 72, 20, 8, 24, 0.5, DType::i64, {20}, 1.0, 1.0},
      {{}, {}, 64, 128, 64, 32, 32, 0.5, DType::i32, {}, 0.0, 1.0, 1},
  };
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    for (const Case& c : cases) {
      check(c, dtype);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(CudaBsr, Int8ProductsEqualTheCpusBits) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  for (const auto& [M, K, N, BM, BK] : std::vector<std::array<int64_t, 5>>{{96, 128, 40, 32, 32}, {64, 96, 17, 16, 48}}) {
    RandomBsr a = random_bsr({2}, M, K, BM, BK, 0.5, DType::f32, DType::i32);
    const Tensor values = random_int8(std::vector<int64_t>(a.values.sizes().begin(), a.values.sizes().end()));
    const Tensor d = random_int8({K, N});
    Tensor input = Tensor::empty({N}, DType::i32);
    for (int64_t i = 0; i < N; ++i) input.ptr<int32_t>()[i] = static_cast<int32_t>(rng()());
    const BsrRef host{a.crow.ref(), a.col.ref(), values.ref(), M, K};
    const Tensor want = bsr_dense_addmm(input.ref(), host, d.ref(), 3.0, -70000.0);
    const Tensor gcrow = a.crow.to(kGpu), gcol = a.col.to(kGpu), gvalues = values.to(kGpu);
    const Tensor got = bsr_dense_addmm(input.to(kGpu).ref(), BsrRef{gcrow.ref(), gcol.ref(), gvalues.ref(), M, K},
                                       d.to(kGpu).ref(), 3.0, -70000.0);
    expect_same_bits(want.ref(), got.ref(), "int8 bsr_dense_addmm M " + std::to_string(M));
  }
}

// A row whose index arrays are wrong reads nothing and comes out NaN; the rows around it are right.
TEST(CudaBsr, BadIndicesMakeTheirRowNaN) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const int64_t N = 24;
  for (const auto& [B, dtype] : std::vector<std::pair<int64_t, DType>>{{16, DType::f16}, {16, DType::f32}, {64, DType::bf16}}) {
    const int64_t M = 4 * B, K = 4 * B;  // 4 block rows, 4 block columns
    for (int variant = 0; variant < 3; ++variant) {
      // Row 1 holds blocks 1..2; the variants break it: a column out of range, columns not ascending,
      // row pointers past nnz.
      std::vector<int32_t> crow = {0, 1, 3, 4, 5}, col = {0, 1, 3, 2, 0};
      if (variant == 0) col[2] = 4;
      if (variant == 1) col[2] = 1;
      if (variant == 2) crow[2] = 9;
      Tensor tc = Tensor::empty({5}, DType::i32), tl = Tensor::empty({5}, DType::i32);
      std::memcpy(tc.data(), crow.data(), sizeof(int32_t) * 5);
      std::memcpy(tl.data(), col.data(), sizeof(int32_t) * 5);
      const Tensor values = random_floats({5, B, B}, dtype), d = random_floats({K, N}, dtype);
      const Tensor got = bsr_dense_mm(BsrRef{tc.to(kGpu).ref(), tl.to(kGpu).ref(), values.to(kGpu).ref(), M, K},
                                      d.to(kGpu).ref());
      const std::vector<float> g = to_floats(got.ref());
      // The other rows against the CPU on a valid BSR that keeps them.
      std::vector<int32_t> good_col = col;
      good_col[1] = 1;
      good_col[2] = 3;
      std::vector<int32_t> good_crow = {0, 1, 3, 4, 5};
      std::memcpy(tc.data(), good_crow.data(), sizeof(int32_t) * 5);
      std::memcpy(tl.data(), good_col.data(), sizeof(int32_t) * 5);
      const std::vector<float> w = to_floats(bsr_dense_mm(BsrRef{tc.ref(), tl.ref(), values.ref(), M, K}, d.ref()).ref());
      const std::string what =
          std::string(dtype_name(dtype)) + " block " + std::to_string(B) + " variant " + std::to_string(variant);
      for (int64_t m = 0; m < M; ++m) {
        const int64_t row = m / B;
        for (int64_t n = 0; n < N; ++n) {
          const float x = g[static_cast<size_t>(m * N + n)];
          if (row == 1 || (variant == 2 && row == 2)) {
            ASSERT_TRUE(std::isnan(x)) << what << " [" << m << ", " << n << "]";
          } else {
            ASSERT_NEAR(x, w[static_cast<size_t>(m * N + n)], 0.02 * (std::fabs(w[static_cast<size_t>(m * N + n)]) + 1))
                << what << " [" << m << ", " << n << "]";
          }
        }
      }
    }
  }
}

TEST(CudaBsr, DenseMmCapturesInACudaGraph) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  const int64_t M = 128, K = 128, N = 64;
  const RandomBsr a = random_bsr({}, M, K, 64, 64, 0.5, DType::bf16, DType::i32);
  const Tensor d = random_floats({K, N}, DType::bf16);
  const Tensor want = bsr_dense_mm(a.ref(M, K), d.ref());
  const Tensor gcrow = a.crow.to(kGpu), gcol = a.col.to(kGpu), gv = a.values.to(kGpu), gd = d.to(kGpu);
  Tensor out = poisoned({M, N}, DType::bf16);
  cudaStream_t s;
  LOWBIT_ASSERT_CUDA(cudaStreamCreate(&s));
  cudaGraph_t graph;
  const BsrDenseAddmmArgs args{{}, BsrRef{gcrow.ref(), gcol.ref(), gv.ref(), M, K}, gd.ref(), 0.0, 1.0, out.ref()};
  check(args);
  ASSERT_EQ(workspace_size(args), 0u);
  run(args, nullptr, Stream{s});  // warm-up: the kernel loads outside the capture
  LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));
  LOWBIT_ASSERT_CUDA(cudaMemset(out.data(), 0xff, out.nbytes()));
  LOWBIT_ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  run(args, nullptr, Stream{s});
  LOWBIT_ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  LOWBIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  LOWBIT_ASSERT_CUDA(cudaGraphLaunch(exec, s));
  LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));
  const std::vector<float> w = to_floats(want.ref()), g = to_floats(out.ref());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(g[i], w[i], 0.02 * (std::fabs(w[i]) + 1)) << "element " << i;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
#endif
}

}  // namespace

namespace {

// Values of a float tensor within rel * |cpu| + terms * mag + abs of the CPU's (mag: each element's magnitude,
// none for 0); NaN where the CPU has NaN.
void expect_near_cpu(const Tensor& want, const Tensor& got, double rel, double terms, const Tensor* mag, double abs,
                     const std::string& what) {
  const std::vector<float> w = to_floats(want.ref()), g = to_floats(got.ref());
  const std::vector<float> m = mag != nullptr ? to_floats(mag->ref()) : std::vector<float>(w.size(), 0.0f);
  ASSERT_EQ(w.size(), g.size()) << what;
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i])) {
      ASSERT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    ASSERT_LE(std::fabs(double{g[i]} - w[i]), rel * std::fabs(w[i]) + terms * m[i] + abs)
        << what << " element " << i << ": got " << g[i] << ", cpu " << w[i];
  }
}

// The smallest normal number of a float dtype: below it the dtype's relative precision is gone.
double min_normal(DType d) { return d == DType::f16 ? 0x1p-14 : 0x1p-126; }

TEST(CudaBsr, SampledAddmmMatchesTheCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  struct S {
    std::vector<int64_t> in_batch, m1_batch, m2_batch;
    int64_t M, N, Kd, BM, BN;
    double density, beta, alpha;
    DType index;
  };
  const std::vector<S> cases = {
      {{}, {}, {}, 128, 128, 64, 64, 64, 0.4, 0.0, 0.125, DType::i32},
      {{}, {2}, {}, 96, 160, 40, 32, 32, 0.5, 0.5, -1.5, DType::i64},
      {{3}, {}, {3}, 80, 48, 100, 16, 48, 0.6, 1.0, 1.0, DType::i32},
      {{}, {}, {}, 256, 256, 24, 128, 128, 0.5, 0.0, 1.0, DType::i32},
      {{}, {}, {}, 40, 30, 9, 8, 10, 0.7, 2.0, 1.0, DType::i32},
      {{}, {}, {}, 64, 64, 16, 32, 32, 0.0, 0.0, 1.0, DType::i32},
  };
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    for (const S& c : cases) {
      RandomBsr in = random_bsr(c.in_batch, c.M, c.N, c.BM, c.BN, c.density, dtype, c.index);
      if (c.beta == 0.0 && in.values.ref().numel() > 0) put_nan(in.values);  // beta 0 must not read it
      std::vector<int64_t> s1 = c.m1_batch, s2 = c.m2_batch;
      s1.insert(s1.end(), {c.M, c.Kd});
      s2.insert(s2.end(), {c.Kd, c.N});
      const Tensor m1 = random_floats(s1, dtype), m2 = random_floats(s2, dtype);
      const Tensor want = sampled_addmm(in.ref(c.M, c.N), m1.ref(), m2.ref(), c.beta, c.alpha);
      const Tensor gc = in.crow.to(kGpu), gl = in.col.to(kGpu), gv = in.values.to(kGpu);
      const Tensor got = sampled_addmm(BsrRef{gc.ref(), gl.ref(), gv.ref(), c.M, c.N}, m1.to(kGpu).ref(),
                                       m2.to(kGpu).ref(), c.beta, c.alpha);
      // fp32 sums of Kd products: within (Kd + 8) units of fp32 of the element's magnitude (the same op on
      // absolute values), then the dtype's rounding.
      const Tensor mag = sampled_addmm(BsrRef{in.crow.ref(), in.col.ref(), abs_of(in.values).ref(), c.M, c.N},
                                       abs_of(m1).ref(), abs_of(m2).ref(), std::fabs(c.beta), std::fabs(c.alpha));
      expect_near_cpu(want, got, 2.0 * unit_roundoff(dtype), static_cast<double>(c.Kd + 8) * 0x1p-23, &mag,
                      min_normal(dtype), "sampled_addmm " + std::string(dtype_name(dtype)) + " M " +
                                             std::to_string(c.M) + " block " + std::to_string(c.BM) + "x" +
                                             std::to_string(c.BN));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(CudaBsr, SoftmaxMatchesTheCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    for (const auto& [batch, M, K, BM, BK, density] :
         std::vector<std::tuple<std::vector<int64_t>, int64_t, int64_t, int64_t, int64_t, double>>{
             {{3}, 64, 96, 16, 32, 0.4}, {{}, 256, 512, 64, 64, 0.3}, {{2}, 30, 45, 5, 9, 0.5}, {{}, 64, 64, 32, 32, 0.0}}) {
      const RandomBsr in = random_bsr(batch, M, K, BM, BK, density, dtype, DType::i64);
      const Tensor want = bsr_softmax(in.ref(M, K));
      const Tensor gc = in.crow.to(kGpu), gl = in.col.to(kGpu), gv = in.values.to(kGpu);
      const Tensor got = bsr_softmax(BsrRef{gc.ref(), gl.ref(), gv.ref(), M, K});
      // fp32 exponentials and sums: a few units of fp32 on top of the dtype's rounding, relative to each value
      // down to the dtype's smallest normal number.
      expect_near_cpu(want, got, 2.0 * unit_roundoff(dtype) + 1e-5, 0.0, nullptr, min_normal(dtype),
                      "bsr_softmax " + std::string(dtype_name(dtype)) + " M " + std::to_string(M));
      if (HasFatalFailure()) return;
    }
  }
}

// Bad index arrays make every value of their batch NaN (the other batch computed as usual).
TEST(CudaBsr, SampledAddmmAndSoftmaxMarkABadBatchNaN) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const int64_t M = 64, N = 64, Kd = 16, B = 16;
  for (int variant = 0; variant < 3; ++variant) {
    RandomBsr in = random_bsr({2}, M, N, B, B, 0.5, DType::f32, DType::i32);
    const int64_t nnz = in.values.ref().size(-3), rows = M / B;
    ASSERT_GT(nnz, 1);
    int32_t* crow1 = in.crow.ptr<int32_t>() + rows + 1;  // batch 1's
    int32_t* col1 = in.col.ptr<int32_t>() + nnz;
    if (variant == 0) col1[0] = 99;                                     // a column out of range
    if (variant == 1) crow1[rows] = static_cast<int32_t>(nnz + 3);      // row pointers past nnz
    if (variant == 2) std::swap(crow1[1], crow1[2]), crow1[2] = -1;     // a decreasing, negative pointer
    const Tensor gc = in.crow.to(kGpu), gl = in.col.to(kGpu), gv = in.values.to(kGpu);
    const BsrRef g{gc.ref(), gl.ref(), gv.ref(), M, N};
    const Tensor m1 = random_floats({M, Kd}, DType::f32), m2 = random_floats({Kd, N}, DType::f32);
    for (const Tensor& got : {sampled_addmm(g, m1.to(kGpu).ref(), m2.to(kGpu).ref(), 0.0, 1.0), bsr_softmax(g)}) {
      const std::vector<float> v = to_floats(got.ref());
      const size_t per_batch = v.size() / 2;
      for (size_t e = 0; e < per_batch; ++e) ASSERT_FALSE(std::isnan(v[e])) << "variant " << variant << " batch 0 " << e;
      for (size_t e = per_batch; e < v.size(); ++e) ASSERT_TRUE(std::isnan(v[e])) << "variant " << variant << " " << e;
    }
  }
}

}  // namespace
