#include <cuda_runtime.h>

#include "core/float_convert.h"
#include "core/tables.h"
#include "cuda/common/check.h"
#include "cuda/common/convert.cuh"
#include "cuda/optim/state_code.cuh"
#include "cuda/quant/code_search.cuh"
#include "cuda/quant/selftest.h"

namespace lowbit::cuda::selftest {
namespace {

constexpr int kThreads = 256;
constexpr int kGrid = 1024;
constexpr int kN = 16;  // inputs a thread checks per step, as one chunk

struct Counters {
  unsigned long long mismatches;
  unsigned int first_bad;
};

__device__ void report(Counters* c, uint32_t input) {
  if (atomicAdd(&c->mismatches, 1ull) == 0) c->first_bad = input;
}

__global__ void __launch_bounds__(kThreads) check_conversion_kernel(Conversion which, uint64_t count, Counters* c) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads * kN;
  for (uint64_t base = (static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x) * kN; base < count;
       base += stride) {
    if (which == Conversion::f16_to_f32) {
      core::Half h[kN];
      float v[kN];
      for (int i = 0; i < kN; ++i) h[i].bits = static_cast<uint16_t>(base + i);
      to_floats(h, v);
      for (int i = 0; i < kN; ++i) {
        const uint32_t ref = core::float_bits(core::f16_to_f32(h[i].bits));
        const bool hw_ok = is_nan_f16(h[i].bits) || core::float_bits(f16_to_f32_hw(h[i].bits)) == ref;
        if (core::float_bits(v[i]) != ref || !hw_ok) report(c, h[i].bits);
      }
    } else if (which == Conversion::e4m3_to_f32) {
      uint8_t q[kN];
      float v[kN];
      for (int i = 0; i < kN; ++i) q[i] = static_cast<uint8_t>(base + i);
      from_e4m3(q, v);
      for (int i = 0; i < kN; ++i) {
        if (core::float_bits(v[i]) != core::float_bits(core::e4m3_to_f32(q[i]))) report(c, q[i]);
      }
    } else {
      float v[kN];
      for (int i = 0; i < kN; ++i) v[i] = core::bits_float(static_cast<uint32_t>(base + i));
      if (which == Conversion::f32_to_f16) {
        core::Half y[kN];
        from_floats(v, y);
        for (int i = 0; i < kN; ++i) {
          const uint16_t ref = core::f32_to_f16(v[i]);
          if (y[i].bits != ref || (v[i] == v[i] && f32_to_f16_hw(v[i]) != ref)) report(c, core::float_bits(v[i]));
        }
      } else if (which == Conversion::f32_to_bf16) {
        core::BFloat16 y[kN];
        from_floats(v, y);
        for (int i = 0; i < kN; ++i) {
          const uint16_t ref = core::f32_to_bf16(v[i]);
          if (y[i].bits != ref || (v[i] == v[i] && f32_to_bf16_hw(v[i]) != ref)) report(c, core::float_bits(v[i]));
        }
      } else {
        uint8_t q[kN];
        to_e4m3_sat(v, q);
        for (int i = 0; i < kN; ++i) {
          const uint8_t ref = core::f32_to_e4m3(v[i], true);
          bool ok = q[i] == ref;
#if LOWBIT_CUDA_HAS_FP8_CVT
          if (v[i] == v[i]) ok = ok && static_cast<uint8_t>(f32x2_to_e4m3x2_hw(v[i], 0.0f) & 0xffu) == ref;
#endif
          if (!ok) report(c, core::float_bits(v[i]));
        }
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) check_code_search_kernel(const float* code, Counters* c) {
  __shared__ CodeSearch search;
  search.build_mid(code);
  __syncthreads();
  search.build_entries();
  __syncthreads();
  const uint64_t count = 1ull << 32;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads * kN;
  for (uint64_t base = (static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x) * kN; base < count;
       base += stride) {
    float y[kN];
    uint32_t codes[kN];
    for (int i = 0; i < kN; ++i) y[i] = core::bits_float(static_cast<uint32_t>(base + i));
    search.encode_n(y, codes);
    for (int i = 0; i < kN; ++i) {
      if (codes[i] != core::encode_by_midpoints<8>(y[i], search.mid)) report(c, core::float_bits(y[i]));
    }
  }
}

__global__ void __launch_bounds__(kThreads) check_state_codes_kernel(const float* code, Counters* c) {
  __shared__ optim::StateCodes table;
  table.build(code);
  const uint64_t count = 1ull << 32;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads * kN;
  for (uint64_t base = (static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x) * kN; base < count;
       base += stride) {
    float s[kN];
    uint32_t kept[kN], plain[kN];
    for (int i = 0; i < kN; ++i) s[i] = core::bits_float(static_cast<uint32_t>(base + i));
    table.encode(s, 1.0f, true, kept);
    table.encode(s, 1.0f, false, plain);
    for (int i = 0; i < kN; ++i) {
      const float y = s[i] * 1.0f;
      const uint32_t below = core::encode_by_midpoints<8>(y, table.mid);
      if (kept[i] != core::optim::state_code(s[i], y, below, table.code, table.mid, true) ||
          plain[i] != core::optim::state_code(s[i], y, below, table.code, table.mid, false)) {
        report(c, core::float_bits(s[i]));
      }
    }
  }
}

template <class Launch>
Result run_check(uint64_t count, Launch&& launch) {
  const char* op = "selftest";
  Counters* counters = nullptr;
  check(cudaMalloc(&counters, sizeof(Counters)), op, "cudaMalloc");
  Counters host{};
  cudaError_t e = cudaMemset(counters, 0, sizeof(Counters));
  if (e == cudaSuccess) {
    launch(counters);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(&host, counters, sizeof(Counters), cudaMemcpyDeviceToHost);
  cudaFree(counters);
  check(e, op, "check kernel");
  return Result{count, host.mismatches, host.first_bad};
}

// `kernel` over all 2^32 fp32 inputs with the 256-entry map `code` (host
// memory) copied to the device.
Result check_every_float_on_map(const float* code, void (*kernel)(const float*, Counters*)) {
  float* d_code = nullptr;
  check(cudaMalloc(&d_code, 256 * sizeof(float)), "selftest", "cudaMalloc");
  cudaError_t e = cudaMemcpy(d_code, code, 256 * sizeof(float), cudaMemcpyHostToDevice);
  Result r;
  if (e == cudaSuccess) {
    try {
      r = run_check(1ull << 32, [&](Counters* c) { kernel<<<kGrid, kThreads>>>(d_code, c); });
    } catch (...) {
      cudaFree(d_code);
      throw;
    }
  }
  cudaFree(d_code);
  check(e, "selftest", "cudaMemcpy");
  return r;
}

}  // namespace

Result check_conversion(Conversion which) {
  const uint64_t count = which == Conversion::f16_to_f32    ? (1ull << 16)
                         : which == Conversion::e4m3_to_f32 ? (1ull << 8)
                                                            : (1ull << 32);
  return run_check(count, [&](Counters* c) { check_conversion_kernel<<<kGrid, kThreads>>>(which, count, c); });
}

Result check_code_search(const float* code) { return check_every_float_on_map(code, check_code_search_kernel); }

Result check_state_codes(const float* code) { return check_every_float_on_map(code, check_state_codes_kernel); }

}  // namespace lowbit::cuda::selftest
