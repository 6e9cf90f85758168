// The CUDA backend: its device services (memory: cuda/common/memory.cu) and the
// registration of every CUDA op ("cuda", priority 100, above the CPU's "cpu"
// 10 and "cpu-reference" 0).
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/registry.h"
#include "cuda/attention/ops.h"
#include "cuda/common/check.h"
#include "cuda/common/memory.h"
#include "cuda/gemm/ops.h"
#include "cuda/optim/ops.h"
#include "cuda/quant/ops.h"
#include "cuda/sparse/ops.h"

namespace lowbit::core {
namespace {

using cuda::check;

// 0 without a GPU or a driver: cudaGetDeviceCount then returns an error, which
// is cleared, never thrown.
int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

// lowbit::synchronize is called by device-independent code: without a GPU
// there is nothing to wait for.
void cuda_synchronize(Stream stream) {
  if (stream.handle == nullptr && cuda_device_count() == 0) return;
  check(cudaStreamSynchronize(cuda::to_cuda(stream)), "synchronize", "cudaStreamSynchronize");
}

// cudaGetDeviceProperties' name, read once per device.
std::string cuda_name(int index) {
  static std::mutex mutex;
  static std::vector<std::string> names;
  const std::lock_guard<std::mutex> lock(mutex);
  if (names.empty()) names.resize(static_cast<size_t>(std::max(cuda_device_count(), 0)));
  LOWBIT_REQUIRE(index >= 0 && static_cast<size_t>(index) < names.size(), ErrorCode::invalid_argument,
                 "device name: no cuda device ", index, " (", names.size(), " present)");
  std::string& n = names[static_cast<size_t>(index)];
  if (n.empty()) {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, index), "device name", "cudaGetDeviceProperties");
    n = prop.name;
  }
  return n;
}

template <class Args>
void add(void (*run)(const Args&, void*, Stream), size_t (*workspace)(const Args&) = nullptr,
         std::vector<KernelConfig> (*configs)(const Args&) = nullptr,
         typename OpImpl<Args>::PrepareFn prepare = nullptr) {
  OpRegistry<Args>::add(OpImpl<Args>{"cuda", DeviceType::cuda, 100, run, workspace, configs, prepare});
}

}  // namespace

void register_cuda_backend() {
  register_device_backend(DeviceType::cuda, DeviceBackend{cuda::allocate, cuda::copy, cuda_synchronize,
                                                          cuda_device_count, cuda::empty_cache, cuda::constant,
                                                          cuda::managed, cuda::prefetch, cuda_name});
  add<QuantizeBlockwiseArgs>(cuda::quantize_blockwise);
  add<DequantizeBlockwiseArgs>(cuda::dequantize_blockwise);
  add<QuantizeNoAbsmaxArgs>(cuda::quantize_no_absmax);
  add<DequantizeNoAbsmaxArgs>(cuda::dequantize_no_absmax);
  add<QuantizeTensorwiseArgs>(cuda::quantize_tensorwise, cuda::quantize_tensorwise_workspace);
  add<DequantizeTensorwiseArgs>(cuda::dequantize_tensorwise);
  add<Quantize4bitArgs>(cuda::quantize_4bit);
  add<Dequantize4bitArgs>(cuda::dequantize_4bit);
  add<AbsmaxCenterArgs>(cuda::absmax_center, cuda::absmax_center_workspace);
  add<ActQuantArgs>(cuda::act_quant);
  add<WeightQuantArgs>(cuda::weight_quant);
  add<WeightDequantArgs>(cuda::weight_dequant);
  add<Int8VectorwiseQuantArgs>(cuda::int8_vectorwise_quant);
  add<Int8VectorwiseDequantArgs>(cuda::int8_vectorwise_dequant);
  add<Int8ColwiseQuantArgs>(cuda::int8_colwise_quant);
  add<EstimateQuantilesArgs>(cuda::estimate_quantiles, cuda::estimate_quantiles_workspace);
  add<HistogramScatterAdd2dArgs>(cuda::histogram_scatter_add_2d);
  add<MatmulArgs>(cuda::matmul, cuda::matmul_workspace, cuda::matmul_configs, cuda::matmul_prepare);
  add<Matmul4bitArgs>(cuda::matmul_4bit, cuda::matmul_4bit_workspace, cuda::matmul_4bit_configs);
  add<Fp8GemmArgs>(cuda::fp8_gemm, nullptr, cuda::fp8_gemm_configs);
  add<Fp8GroupedGemmContiguousArgs>(cuda::fp8_grouped_gemm_contiguous, nullptr,
                                    cuda::fp8_grouped_gemm_contiguous_configs);
  add<Fp8GroupedGemmMaskedArgs>(cuda::fp8_grouped_gemm_masked, nullptr, cuda::fp8_grouped_gemm_masked_configs);
  add<Int8LinearMatmulArgs>(cuda::int8_linear_matmul, nullptr, cuda::int8_linear_matmul_configs);
  add<Int8ScaledMmArgs>(cuda::int8_scaled_mm, nullptr, cuda::int8_scaled_mm_configs);
  add<Int8MmDequantArgs>(cuda::int8_mm_dequant);
  add<Int8LinearOutliersArgs>(cuda::int8_linear_outliers, cuda::int8_linear_outliers_workspace);
  add<Int8LinearGradInputArgs>(cuda::int8_linear_grad_input);
  add<Int8LinearArgs>(cuda::int8_linear, cuda::int8_linear_workspace, cuda::int8_linear_configs);
  add<OptimizerUpdate32bitArgs>(cuda::optimizer_update_32bit, cuda::optimizer_update_32bit_workspace);
  add<OptimizerUpdate8bitArgs>(cuda::optimizer_update_8bit, cuda::optimizer_update_8bit_workspace);
  add<OptimizerUpdate8bitBlockwiseArgs>(cuda::optimizer_update_8bit_blockwise);
  add<OptimizerUpdate32bitMultiArgs>(cuda::optimizer_update_32bit_multi, cuda::optimizer_update_32bit_multi_workspace);
  add<OptimizerUpdate8bitBlockwiseMultiArgs>(cuda::optimizer_update_8bit_blockwise_multi);
  add<PercentileClippingArgs>(cuda::percentile_clipping, cuda::percentile_clipping_workspace);
  add<BsrDenseAddmmArgs>(cuda::bsr_dense_addmm);
  add<SampledAddmmArgs>(cuda::sampled_addmm, cuda::sampled_addmm_workspace);
  add<BsrSoftmaxArgs>(cuda::bsr_softmax, cuda::bsr_softmax_workspace);
  add<FlashAttentionArgs>(cuda::flash_attention, cuda::flash_attention_workspace);
  add<FlashAttentionKvcacheArgs>(cuda::flash_attention_kvcache, cuda::flash_attention_kvcache_workspace);
  add<FlashAttentionVarlenArgs>(cuda::flash_attention_varlen);
}

}  // namespace lowbit::core
