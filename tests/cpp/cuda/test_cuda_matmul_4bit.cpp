// matmul_4bit's CUDA paths beyond the shared sweeps (test_matmul_4bit.cpp):
// A, out and the packed codes as misaligned views (the fused kernel hands
// them to the CUDA-core kernel; cuBLASLt is asked for the alignment they
// have), an output dtype other than A's, a bias to convert, Llama-sized K,
// and capture in a CUDA graph (no allocation, no synchronization). Every
// path (config) against the float64 oracle with the CUDA tolerance.
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#if defined(LOWBIT_WITH_CUDA)
#include "cuda/gemm/ops.h"
#endif
#include "gemm/gemm_cases.h"
#include "harness/compare.h"
#include "harness/harness.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

#if defined(LOWBIT_WITH_CUDA)

// A flat buffer on the GPU whose view starts `offset` elements in.
struct DeviceView {
  Tensor buffer;
  TensorRef ref;
};
DeviceView device_view(std::vector<int64_t> shape, DType dtype, int64_t offset) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  DeviceView v;
  v.buffer = Tensor::empty({n + offset}, dtype, Device::cuda(0));
  v.ref = TensorRef::contiguous(static_cast<char*>(v.buffer.data()) + dtype_storage_bytes(dtype, offset), dtype,
                                Shape(shape.data(), shape.size()), Device::cuda(0));
  return v;
}

struct Case {
  int64_t N = 0, K = 0, blocksize = 64, M = 1;
  Quant4Type type = Quant4Type::nf4;
  bool nested = false;
  DType a_dtype = DType::f16, out_dtype = DType::f16;
  bool bias = false;
  DType bias_dtype = DType::f32;
  int64_t a_offset = 0, out_offset = 0, packed_offset = 0;  // elements (bytes for packed) off 16-byte alignment

  std::string name() const {
    return std::string(quant4_type_name()) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
           " bs=" + std::to_string(blocksize) + (nested ? " nested" : "") + " M=" + std::to_string(M) + " A " +
           std::string(dtype_name(a_dtype)) + " out " + std::string(dtype_name(out_dtype)) +
           (bias ? " bias " + std::string(dtype_name(bias_dtype)) : "") + " offsets " + std::to_string(a_offset) + "/" +
           std::to_string(out_offset) + "/" + std::to_string(packed_offset);
  }
  const char* quant4_type_name() const { return type == Quant4Type::nf4 ? "nf4" : "fp4"; }
};

// The inputs on the GPU, args for a config, and the oracle.
struct Prepared {
  Case c;
  Tensor A_host, bias_host;
  DeviceView A, packed, out;
  Tensor absmax, code2, absmax2, offset, bias;
  int64_t blocksize2 = 256;
  Oracle oracle;

  Matmul4bitArgs args(const KernelConfig& config = {}) const {
    Matmul4bitArgs a;
    a.A = A.ref;
    a.packed = packed.ref;
    a.absmax = absmax.ref();
    if (c.nested) a.nested = NestedAbsmax{code2.ref(), absmax2.ref(), offset.ref(), blocksize2};
    a.bias = bias.defined() ? bias.ref() : TensorRef();
    a.out = out.ref;
    a.N = c.N;
    a.blocksize = c.blocksize;
    a.type = c.type;
    a.config = config;
    return a;
  }
};

Prepared prepare(const Case& c) {
  Prepared p;
  p.c = c;
  auto [packed, st] = quantize_4bit(random_floats({c.N, c.K}, DType::f32), c.blocksize, c.type, c.nested);
  p.A_host = random_floats({c.M, c.K}, c.a_dtype, 0.5f);
  p.A = device_view({c.M, c.K}, c.a_dtype, c.a_offset);
  copy(p.A.ref, p.A_host.ref());
  p.packed = device_view({packed.numel()}, DType::u8, c.packed_offset);
  copy(p.packed.ref, packed.ref());
  p.out = device_view({c.M, c.N}, c.out_dtype, c.out_offset);
  p.absmax = st.absmax.to(Device::cuda(0));
  if (c.nested) {
    p.code2 = st.state2->code.to(Device::cuda(0));
    p.absmax2 = st.state2->absmax.to(Device::cuda(0));
    p.offset = st.offset.to(Device::cuda(0));
    p.blocksize2 = st.state2->blocksize;
  }
  if (c.bias) {
    p.bias_host = random_floats({c.N}, c.bias_dtype);
    p.bias = p.bias_host.to(Device::cuda(0));
  }
  const Tensor d = dequantize_4bit(packed, st, DType::f32);
  p.oracle = matmul_oracle(p.A_host, std::vector<float>(d.ptr<float>(), d.ptr<float>() + c.N * c.K), c.N, c.K,
                           c.bias ? to_floats(p.bias_host) : std::vector<float>());
  return p;
}

void expect_output(const Prepared& p, const std::string& what) {
  Tensor out = Tensor::empty({p.c.M, p.c.N}, p.c.out_dtype, Device::cuda(0));
  copy(out.ref(), p.out.ref);
  expect_close(p.oracle, out, matmul_tolerance(p.c.a_dtype, p.c.out_dtype, DType::f32, p.c.K, DeviceType::cuda), what);
}

void poison(const Prepared& p, cudaStream_t s) {
  ASSERT_EQ(cudaMemsetAsync(p.out.ref.data, 0xff, p.out.ref.nbytes(), s), cudaSuccess);
}

std::string label(const KernelConfig& c) { return c.empty() ? "heuristic" : c.name(); }

// The heuristic (the empty config), then every config listed for the inputs.
std::vector<KernelConfig> heuristic_and_configs(const Prepared& p) {
  std::vector<KernelConfig> all{KernelConfig{}};
  for (KernelConfig& k : kernel_configs(p.args())) all.push_back(std::move(k));
  return all;
}

// The heuristic, then every config, on the default stream.
void check_every_path(const Case& c) {
  const Prepared p = prepare(c);
  for (const KernelConfig& config : heuristic_and_configs(p)) {
    const Matmul4bitArgs a = p.args(config);
    check(a);
    const size_t bytes = workspace_size(a);
    Tensor ws = bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, Device::cuda(0)) : Tensor();
    poison(p, nullptr);
    run(a, ws.data(), Stream{});
    synchronize(Stream{});
    expect_output(p, c.name() + " config " + label(config));
  }
}

TEST(CudaMatmul4bit, MisalignedViews) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  Case c;
  c.N = 72;
  c.K = 256;
  for (int64_t M : {1, 16, 40}) {
    c.M = M;
    for (auto [a_off, out_off, p_off] : {std::tuple{1, 0, 0}, std::tuple{0, 1, 0}, std::tuple{0, 0, 1}}) {
      c.a_offset = a_off;
      c.out_offset = out_off;
      c.packed_offset = p_off;
      c.nested = !c.nested;
      c.a_dtype = c.out_dtype = c.a_dtype == DType::f16 ? DType::bf16 : DType::f16;
      check_every_path(c);
    }
  }
}

TEST(CudaMatmul4bit, OutputDtypesAndBias) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  // out fp32 from 16-bit A (cuBLASLt's fp32 output), out in the other 16-bit
  // dtype (no cuBLASLt pair: the CUDA-core kernel), fp32 A; the bias in every
  // dtype, converted to the output's when it differs.
  const std::tuple<DType, DType> pairs[] = {{DType::f16, DType::f32},
                                            {DType::bf16, DType::f32},
                                            {DType::f16, DType::bf16},
                                            {DType::f32, DType::f32},
                                            {DType::f32, DType::f16}};
  int i = 0;
  for (auto [a_dtype, out_dtype] : pairs) {
    for (DType bias_dtype : {DType::f32, DType::f16, DType::bf16}) {
      Case c;
      c.N = 50;
      c.K = 384;
      c.M = i % 2 ? 24 : 3;
      c.type = i % 2 ? Quant4Type::fp4 : Quant4Type::nf4;
      c.a_dtype = a_dtype;
      c.out_dtype = out_dtype;
      c.bias = true;
      c.bias_dtype = bias_dtype;
      check_every_path(c);
      ++i;
    }
  }
}

TEST(CudaMatmul4bit, LlamaSizedK) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  // K of Llama's down projection: many spans per warp; blocksize 64 nested (QLoRA's state).
  Case c;
  c.N = 40;
  c.K = 14336;
  c.nested = true;
  for (int64_t M : {1, 7, 16, 17}) {
    c.M = M;
    c.a_dtype = c.out_dtype = M % 2 ? DType::bf16 : DType::f16;
    check_every_path(c);
  }
}

// Captured in a CUDA graph (strict global mode: an allocation or a
// synchronization anywhere fails the capture) and replayed; `warm` runs the
// op once on this thread before capturing.
void check_captured(const KernelConfig& config, int64_t M, bool warm) {
  Case c;
  c.N = 96;
  c.K = 512;
  c.M = M;
  c.nested = true;
  c.bias = true;
  const Prepared p = prepare(c);
  const Matmul4bitArgs a = p.args(config);
  const size_t bytes = workspace_size(a);
  Tensor ws = bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, Device::cuda(0)) : Tensor();
  synchronize(Stream{});  // the operands' copies ran on the legacy stream, which the non-blocking one does not wait for
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  if (warm) {
    run(a, ws.data(), Stream{s});
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  std::string error;
  try {
    run(a, ws.data(), Stream{s});
  } catch (const Error& e) {
    error = e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess) << error;
  ASSERT_TRUE(error.empty()) << error;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  poison(p, s);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  expect_output(p, c.name() + " config " + label(config) + " replayed" + (warm ? "" : " (cold thread)"));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(CudaMatmul4bit, CapturedInAGraph) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  for (const char* config : {"", "fused", "dequant_gemm", "cuda_core"}) {
    for (int64_t M : {1, 40, 80}) check_captured(parse_kernel_config(config), M, true);
  }
  // The first call of a host thread makes cuBLASLt's handle and plan inside the capture.
  std::thread([] { check_captured(parse_kernel_config("dequant_gemm"), 40, false); }).join();
}

#endif  // LOWBIT_WITH_CUDA

}  // namespace
