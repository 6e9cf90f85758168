// matmul_4bit / gemv_4bit straight on bitsandbytes states: any K (blocks
// crossing rows), odd N*K, double quantization, bias; every implementation
// against the float64 oracle on dequantize_4bit's values.
#include "gemm/gemm_cases.h"

namespace lowbit::test {
namespace {

CloseCase<Matmul4bitArgs> bnb_case(const std::string& name, const Tensor& A, const Tensor& packed, const QuantState& st,
                                   const Tensor& bias) {
  const int64_t N = st.shape[0], K = st.shape[1];
  CloseCase<Matmul4bitArgs> c;
  c.name = name;
  std::vector<int64_t> shape;
  for (int d = 0; d + 1 < A.ndim(); ++d) shape.push_back(A.size(d));
  shape.push_back(N);
  c.output = {shape, A.dtype()};
  c.make = [A, packed, st, bias, N](Device device, const TensorRef& out, std::vector<Tensor>& keep) {
    auto on = [&](const Tensor& t) {
      if (!t.defined()) return TensorRef();
      keep.push_back(device.is_cpu() ? t : t.to(device));
      return keep.back().ref();
    };
    Matmul4bitArgs a;
    a.A = on(A);
    a.packed = on(packed);
    a.absmax = on(st.absmax);
    if (st.nested())
      a.nested = NestedAbsmax{on(st.state2->code), on(st.state2->absmax), on(st.offset), st.state2->blocksize};
    a.bias = on(bias);
    a.out = out;
    a.N = N;
    a.blocksize = st.blocksize;
    a.type = st.quant_type == "nf4" ? Quant4Type::nf4 : Quant4Type::fp4;
    return a;
  };
  const Tensor d = dequantize_4bit(packed, st, DType::f32);
  const std::vector<float> W(d.ptr<float>(), d.ptr<float>() + N * K);
  c.oracle = matmul_oracle(A, W, N, K, bias.defined() ? to_floats(bias) : std::vector<float>());
  const DType a_dtype = A.dtype(), out = A.dtype();
  c.tolerance = [a_dtype, out, K](DeviceType dev, const std::string& impl) {
    Tolerance t = matmul_tolerance(a_dtype, out, DType::f32, K, dev);
    // The CPU fast path on bf16 A multiplies weights rounded to bf16 (the few-rows kernel's table, the large-M
    // path's panels; docs/gemm.md).
    if (dev == DeviceType::cpu && impl == "cpu" && a_dtype == DType::bf16) t.terms += unit_roundoff(DType::bf16);
    return t;
  };
  return c;
}

TEST(Matmul4bit, EveryBackendOnStatesDirectly) {
  SCOPED_TRACE("impls: " + impl_names<Matmul4bitArgs>());
  struct Shape {
    int64_t N, K, bs;
  };
  const DType dtypes[] = {DType::f16, DType::bf16, DType::f32};
  int i = 0;
  for (const Shape s : {Shape{3, 7, 32}, Shape{17, 100, 64}, Shape{33, 256, 128}, Shape{5, 1000, 256}}) {
    for (Quant4Type type : {Quant4Type::nf4, Quant4Type::fp4}) {
      for (bool nested : {false, true}) {
        for (int64_t M : {1, 3, 17}) {
          auto [packed, st] = quantize_4bit(random_floats({s.N, s.K}, DType::f32), s.bs, type, nested);
          const DType dt = dtypes[i % 3];
          const Tensor bias = i % 2 ? random_floats({s.N}, dtypes[(i + 1) % 3]) : Tensor();
          const std::string name = "matmul_4bit " + st.quant_type + " N=" + std::to_string(s.N) +
                                   " K=" + std::to_string(s.K) + " bs=" + std::to_string(s.bs) +
                                   (nested ? " nested" : "") + " M=" + std::to_string(M) + " " +
                                   std::string(dtype_name(dt));
          run_on_all_backends_close(bnb_case(name, random_floats({M, s.K}, dt), packed, st, bias));
          ++i;
        }
      }
    }
  }
}

// Every blocksize bitsandbytes allows, with K fit for the CUDA fused kernel's
// 64- and 32-element spans and blocks crossing rows (K not a multiple of the
// blocksize, or blocks longer than a row), at M in one or several of its A
// tiles and past the CPU's large-M threshold; on CUDA every path (configs) runs each.
TEST(Matmul4bit, EveryBlocksizeOnEveryPath) {
  SCOPED_TRACE("impls: " + impl_names<Matmul4bitArgs>());
  struct Shape {
    int64_t N, K, bs;
  };
  const DType dtypes[] = {DType::f16, DType::bf16, DType::f32};
  int i = 0;
  for (const Shape s : {Shape{16, 64, 32}, Shape{20, 96, 64}, Shape{17, 192, 128}, Shape{33, 256, 256},
                        Shape{40, 512, 4096}, Shape{7, 2048, 1024}, Shape{3, 160, 2048}, Shape{9, 32, 512}}) {
    for (int64_t M : {1, 5, 16, 33, 70}) {  // 70: the CPU's large-M path on bf16 A
      const Quant4Type type = i % 2 ? Quant4Type::fp4 : Quant4Type::nf4;
      const bool nested = (i / 2) % 2 == 1;
      auto [packed, st] = quantize_4bit(random_floats({s.N, s.K}, DType::f32), s.bs, type, nested);
      const DType dt = dtypes[i % 3];
      const Tensor bias = i % 4 == 1 ? Tensor() : random_floats({s.N}, dtypes[(i / 3) % 3]);
      const std::string name = "matmul_4bit " + st.quant_type + " N=" + std::to_string(s.N) +
                               " K=" + std::to_string(s.K) + " bs=" + std::to_string(s.bs) + (nested ? " nested" : "") +
                               " M=" + std::to_string(M) + " " + std::string(dtype_name(dt)) +
                               (bias.defined() ? " bias " + std::string(dtype_name(bias.dtype())) : "");
      run_on_all_backends_close(bnb_case(name, random_floats({M, s.K}, dt), packed, st, bias));
      ++i;
    }
  }
}

// The CPU few-rows kernel for bf16 A (K whole 128-element chunks on
// AVX-512, 64-element steps on AVX2; blocks of 32, 64 or whole chunks,
// nested or not): row counts in one or several groups of 4.
TEST(Matmul4bit, Bf16FewRowsEveryBlocksize) {
  SCOPED_TRACE("impls: " + impl_names<Matmul4bitArgs>());
  int i = 0;
  for (const int64_t K : {128, 192, 384, 2048}) {
    for (const int64_t bs : {32, 64, 128, 256, 1024, 2048}) {
      if (K % bs != 0) continue;
      for (const int64_t M : {1, 2, 3, 4, 7, 16, 37, 64}) {
        const Quant4Type type = i % 2 ? Quant4Type::fp4 : Quant4Type::nf4;
        const bool nested = (i / 2) % 2 == 1;
        const int64_t N = 19 + i % 3;
        auto [packed, st] = quantize_4bit(random_floats({N, K}, DType::f32), bs, type, nested);
        const Tensor bias = i % 3 == 0 ? random_floats({N}, DType::f32) : Tensor();
        const std::string name = "matmul_4bit " + st.quant_type + " N=" + std::to_string(N) + " K=" +
                                 std::to_string(K) + " bs=" + std::to_string(bs) + (nested ? " nested" : "") +
                                 " M=" + std::to_string(M) + " bf16" + (bias.defined() ? " bias" : "");
        run_on_all_backends_close(bnb_case(name, random_floats({M, K}, DType::bf16), packed, st, bias));
        ++i;
      }
    }
  }
}

// The CPU few-rows kernel for fp32 A (fp16 A converted): up to 4 rows a call
// (in one or several groups on AVX2), every blocksize that divides K, K of
// one or several 64-element steps.
TEST(Matmul4bit, F32FewRowsEveryBlocksize) {
  SCOPED_TRACE("impls: " + impl_names<Matmul4bitArgs>());
  int i = 0;
  for (const int64_t K : {64, 192, 2048}) {
    for (const int64_t bs : {32, 64, 128, 256, 1024, 2048}) {
      if (K % bs != 0) continue;
      for (const int64_t M : {1, 2, 3, 4, 7, 30}) {
        const Quant4Type type = i % 2 ? Quant4Type::fp4 : Quant4Type::nf4;
        const bool nested = (i / 2) % 2 == 1;
        const DType dt = (i / 3) % 2 ? DType::f16 : DType::f32;
        const int64_t N = 19 + i % 3;
        auto [packed, st] = quantize_4bit(random_floats({N, K}, DType::f32), bs, type, nested);
        const Tensor bias = i % 3 == 0 ? random_floats({N}, DType::f32) : Tensor();
        const std::string name = "matmul_4bit " + st.quant_type + " N=" + std::to_string(N) +
                                 " K=" + std::to_string(K) + " bs=" + std::to_string(bs) + (nested ? " nested" : "") +
                                 " M=" + std::to_string(M) + " " + std::string(dtype_name(dt)) +
                                 (bias.defined() ? " bias" : "");
        run_on_all_backends_close(bnb_case(name, random_floats({M, K}, dt), packed, st, bias));
        ++i;
      }
    }
  }
}

TEST(Matmul4bit, ConvenienceCallsAndErrors) {
  auto [packed, st] = quantize_4bit(random_floats({6, 96}, DType::f16), 64, Quant4Type::nf4, true);
  const Tensor A = random_floats({1, 96}, DType::bf16);
  const Tensor out = gemv_4bit(A, packed, st);
  EXPECT_EQ(out.dtype(), DType::bf16);
  EXPECT_EQ(out.size(0), 1);
  EXPECT_EQ(out.size(1), 6);
  const Tensor d = dequantize_4bit(packed, st, DType::f32);
  const Oracle o = matmul_oracle(A, std::vector<float>(d.ptr<float>(), d.ptr<float>() + 6 * 96), 6, 96, {});
  expect_close(o, out, matmul_tolerance(DType::bf16, DType::bf16, DType::f32, 96, DeviceType::cpu), "gemv_4bit");
  expect_close(o, matmul_4bit(A, packed, st),
               matmul_tolerance(DType::bf16, DType::bf16, DType::f32, 96, DeviceType::cpu), "matmul_4bit");
  expect_error(
      [&] {
        gemv_4bit(random_floats({2, 96}, DType::f16), packed, st);
      },
      ErrorCode::invalid_argument, {"gemv_4bit: A must hold one row (got [2, 96]"});
  expect_error(
      [&] {
        matmul_4bit(random_floats({2, 95}, DType::f16), packed, st);
      },
      ErrorCode::invalid_argument, {"matmul_4bit: A's last dimension must equal the weight's K = 96 (got A [2, 95])"});
  QuantState bad = st;
  bad.quant_type = "int4";
  expect_error([&] { matmul_4bit(A, packed, bad); }, ErrorCode::invalid_argument,
               {"matmul_4bit: quant state quant_type must be nf4 or fp4 (got 'int4')"});
  Matmul4bitArgs a;
  a.A = A;
  a.packed = packed;
  a.absmax = st.absmax;  // u8 codes without their nested state
  a.out = Tensor::empty({1, 6}, DType::bf16);
  a.N = 6;
  expect_error([&] { check(a); }, ErrorCode::unsupported_dtype,
               {"matmul_4bit: absmax dtype must be float32, or uint8 with nested absmax (got uint8)"});
}

}  // namespace
}  // namespace lowbit::test
