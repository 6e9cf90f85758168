// Mixed-precision matmul: low-bit weights times fp16/bf16 activations, with
// BitBLAS Matmul semantics (docs/gemm.md):
//
//   out[M, N] = A[M, K] · dequant(W)[N, K]ᵀ (+ bias[N])        layout "nt"
//
// Use: describe the op with a MatmulConfig, make a Matmul for a device, pack
// the weight once with transform_weight (integer values or codes [N, K] plus
// scale / zeros / bias) and call forward(A, packed) for any M. Checkpoints of
// GPTQ, AWQ and bitsandbytes import into the same unpacked form
// (QuantizedWeight) without passing through lossy floats. matmul_4bit runs
// directly on a bitsandbytes NF4/FP4 QuantState.
//
// The primitive ops follow the library's pattern (check / workspace_size /
// run over an Args struct, dispatched on the tensors' device).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lowbit/ops/kernel_config.h"
#include "lowbit/ops/quant.h"
#include "lowbit/quant_state.h"
#include "lowbit/tensor.h"

namespace lowbit {

// ------------------------------------------------------------------ formats

// Element formats of W (src/core/weight_format.h defines each once: bits,
// value range, code -> value). Integer kinds hold values: intN in
// [-2^(N-1), 2^(N-1) - 1], uintN in [0, 2^N - 1], int1 in {-1, +1}. Table kinds
// hold 4-bit codes: nf4 and fp4 (bitsandbytes) and fp4_e2m1 (OCP MX). fp8_e4m3
// holds E4M3FN bits; f16 / bf16 are unquantized weights.
enum class WeightType : uint8_t {
  int8,
  int4,
  int2,
  int1,
  uint8,
  uint4,
  uint2,
  uint1,
  nf4,
  fp4,
  fp4_e2m1,
  fp8_e4m3,
  f16,
  bf16,
};
inline constexpr int kNumWeightTypes = 14;

// How zero points enter dequantization (with_zeros), v = value of the code:
//   original:  w = (v - z) * s      z has the scale's dtype
//   rescale:   w = v * s - z        z has the scale's dtype
//   quantized: w = (v - zq) * s     zq an integer of W's type (GPTQ-style)
enum class ZerosMode : uint8_t { original, rescale, quantized };

// "int4", "nf4", "fp4_e2m1", "fp8_e4m3", "float16", ... (BitBLAS spelling).
std::string_view weight_type_name(WeightType t);
// Accepts weight_type_name spellings and "fp16", "bf16", "float8_e4m3fn", "e4m3".
bool parse_weight_type(std::string_view name, WeightType* out);
std::string_view zeros_mode_name(ZerosMode m);
bool parse_zeros_mode(std::string_view name, ZerosMode* out);

// ------------------------------------------------------------------- config

// BitBLAS MatmulConfig. M lists the batch sizes the op is prepared for
// (dynamic M): any M runs, with the kernel config of the smallest prepared
// value >= M (the largest when M exceeds them all).
struct MatmulConfig {
  std::vector<int64_t> M = {1, 16, 32, 64, 128, 256, 512, 1024};
  int64_t N = 0;
  int64_t K = 0;
  DType A_dtype = DType::f16;  // f16, bf16
  WeightType W_dtype = WeightType::f16;
  DType accum_dtype = DType::f32;  // f32; f16 allowed (a GPU speed option; the CPU accumulates in f32)
  DType out_dtype = DType::f16;    // f16, bf16, f32
  std::string layout = "nt";       // A row-major [M, K], W row-major [N, K]
  bool with_bias = false;
  int64_t group_size = -1;  // -1: one scale per row; else a multiple of 32 dividing K
  bool with_scaling = false;
  bool with_zeros = false;  // integer W types only; needs with_scaling
  ZerosMode zeros_mode = ZerosMode::original;

  int64_t groups() const { return group_size > 0 ? K / group_size : 1; }
  int64_t group_length() const { return group_size > 0 ? group_size : K; }
};

// Throws lowbit::Error naming "matmul", the field, the expectation and the value.
void check(const MatmulConfig& config);

// ------------------------------------------------------------ packed weight

// How a packed weight is laid out in memory. Each backend's kernels consume
// their layouts; Matmul packs into the layout its device runs fastest for the
// format (docs/gemm.md draws them). `rows` is the CPU's, and CUDA's for the
// formats `tiles` does not take: every row of W a little-endian bit stream of
// codes, element k in bits [k*b, k*b + b) of the row, rows padded to 16
// bytes. `tiles` is CUDA's for integer types of 1/2/4/8 bits and the 4-bit
// tables with no zeros or quantized zeros and groups of 2^i whole tiles: tiles of
// 16 rows x 256/bits columns, 512 bytes each, permuted into tensor-core
// fragment order (src/core/weight_format.h defines it).
enum class WeightLayout : uint8_t { rows, tiles };
std::string_view weight_layout_name(WeightLayout l);

// What a packed weight holds, besides its tensors.
struct WeightFormat {
  WeightLayout layout = WeightLayout::rows;
  WeightType type = WeightType::f16;
  int64_t N = 0;
  int64_t K = 0;
  int64_t group_size = -1;
  bool with_scaling = false;
  bool with_zeros = false;
  ZerosMode zeros_mode = ZerosMode::original;
  bool with_bias = false;

  int64_t groups() const { return group_size > 0 ? K / group_size : 1; }
  int64_t group_length() const { return group_size > 0 ? group_size : K; }
  bool operator==(const WeightFormat&) const = default;
};

// Views of a packed weight (what MatmulArgs carries). In the `rows` layout:
//   qweight  u8  [N, row_bytes]                 codes, see WeightLayout
//   scale    f32 [N, groups]                    with_scaling
//   zeros    f32 [N, groups]                    original / rescale
//            i32 [groups, ceil(N*bits/32)]      quantized: codes of W's type
//                                               packed along N, LSB first
//   bias     f32 [N]                            with_bias
//   perm     i32 [K]   optional: the kernel reads A[:, perm[k]] as column k
//                      (GPTQ act-order, made contiguous by the importer)
// In the `tiles` layout (Np = N rounded up to 16):
//   qweight  u8  [Np/16, ceil(K/(256/bits)) * 512]  tiles, see WeightLayout
//   scale    f16/bf16/f32 [groups, Np]      the given scales, transposed
//   zeros    u8  [groups, Np]                      quantized zeros: codes of W's type
//            (intN codes in offset binary in both qweight and zeros)
//   bias, perm as in `rows`
struct PackedWeightRef {
  WeightFormat format;
  TensorRef qweight;
  TensorRef scale;
  TensorRef zeros;
  TensorRef bias;
  TensorRef perm;
};

// An owning packed weight, made by Matmul::transform_weight.
struct PackedWeight {
  WeightFormat format;
  Tensor qweight, scale, zeros, bias, perm;

  PackedWeightRef ref() const { return {format, qweight.ref(), scale.ref(), zeros.ref(), bias.ref(), perm.ref()}; }
  Device device() const { return qweight.device(); }
};

// The unpacked form transform_weight takes, and importers return: integer
// values or codes, one per int8 / uint8 element (fp8: uint8 bits or
// float8_e4m3fn; f16 / bf16 weights: themselves), and their parameters.
struct QuantizedWeight {
  MatmulConfig config;  // W_dtype, N, K, group_size, scaling, zeros, bias
  Tensor weight;        // [N, K]
  Tensor scale;         // f16/bf16/f32 [N, groups] (with_scaling)
  Tensor zeros;         // [N, groups]: scale's dtype, or integers for quantized zeros
  Tensor bias;          // f16/bf16/f32 [N] (with_bias)
  Tensor perm;          // i32 [K] or undefined: A's column order (act-order)
};

// ---------------------------------------------------------------- primitive

// out = A[:, perm] · dequant(weight)ᵀ (+ bias), accumulated in fp32.
struct MatmulArgs {
  static constexpr const char* kName = "matmul";
  TensorRef A;             // f16/bf16 [..., K], contiguous
  PackedWeightRef weight;  // on A's device, in that backend's layout
  TensorRef out;           // f16/bf16/f32 [..., N], A's leading dims
  DType accum_dtype = DType::f32;
  int64_t prepared_m = 0;  // the prepared M chosen for A's rows (0: the rows themselves)
  KernelConfig config;     // empty: the backend's heuristic; else run this one (kernel_configs lists them)
};

// bitsandbytes matmul_4bit / gemv_4bit on a 4-bit QuantState's own storage:
// W [N, K] flattened row-major, two codes a byte (even element in the high
// nibble), absmax over blocks of the flattened W (blocks may cross rows).
// out = A · (table[code] * absmax[block])ᵀ (+ bias), accumulated in fp32;
// the CUDA paths round W (or its table values) once to A's dtype, as
// bitsandbytes does (docs/gemm.md). config: empty for the backend's heuristic,
// else one of kernel_configs (CUDA: "fused", "dequant_gemm" — dequantize +
// cuBLASLt — and "cuda_core").
struct Matmul4bitArgs {
  static constexpr const char* kName = "matmul_4bit";
  TensorRef A;       // f32/f16/bf16 [..., K], contiguous
  TensorRef packed;  // u8, (N*K + 1) / 2 elements
  TensorRef absmax;  // f32 [ceil(N*K / blocksize)], or u8 with `nested`
  NestedAbsmax nested;
  TensorRef bias;  // f32/f16/bf16 [N], optional
  TensorRef out;   // f32/f16/bf16 [..., N]
  int64_t N = 0;
  int64_t blocksize = 64;
  Quant4Type type = Quant4Type::nf4;
  KernelConfig config;
};

void check(const MatmulArgs& args);
size_t workspace_size(const MatmulArgs& args);
void run(const MatmulArgs& args, void* workspace = nullptr, Stream stream = {});
void check(const Matmul4bitArgs& args);
size_t workspace_size(const Matmul4bitArgs& args);
void run(const Matmul4bitArgs& args, void* workspace = nullptr, Stream stream = {});
// The kernel configs the backend of args' device can run for these arguments,
// best first: the first is the one its heuristic picks. Any of them may be
// set as args.config (a tuner times each); another config is an error.
std::vector<KernelConfig> kernel_configs(const MatmulArgs& args);
std::vector<KernelConfig> kernel_configs(const Matmul4bitArgs& args);

// ------------------------------------------------------------------- Matmul

struct MatmulPlans;  // the backend plans of a Matmul's calls (src/ops/gemm/matmul.cpp)

class Matmul {
 public:
  // Checks the config (throws lowbit::Error).
  explicit Matmul(MatmulConfig config, Device device = Device::cpu());

  const MatmulConfig& config() const { return config_; }
  Device device() const { return device_; }
  WeightLayout layout() const { return layout_; }

  // Packs once into this device's layout. weight [N, K]: int8/uint8 values
  // (codes for nf4/fp4/fp4_e2m1, bits for fp8_e4m3 or float8_e4m3fn, the
  // weight itself for f16/bf16); scale [N, groups]; zeros [N, groups] (the
  // scale's dtype, or int8/uint8/int32 values of W's type when quantized);
  // bias [N]; perm i32/i64 [K], a permutation of A's columns. Inputs may be on
  // any device. Values out of W's range are errors.
  PackedWeight transform_weight(const TensorRef& weight, const TensorRef& scale = {}, const TensorRef& zeros = {},
                                const TensorRef& bias = {}, const TensorRef& perm = {}) const;
  PackedWeight transform_weight(const QuantizedWeight& w) const;

  // out [..., N] of config().out_dtype; A [..., K] of config().A_dtype.
  Tensor forward(const TensorRef& A, const PackedWeight& W, Stream stream = {}) const;
  void forward(const TensorRef& A, const PackedWeight& W, const TensorRef& out, Stream stream = {}) const;
  Tensor operator()(const TensorRef& A, const PackedWeight& W, Stream stream = {}) const {
    return forward(A, W, stream);
  }

  // The explicit call for a caller that owns the workspace: run(args(...), ws, stream).
  MatmulArgs args(const TensorRef& A, const PackedWeightRef& W, const TensorRef& out) const;
  // The prepared M that serves m rows.
  int64_t prepared_m(int64_t m) const;

 private:
  MatmulConfig config_;
  Device device_;
  WeightLayout layout_;
  // Made on a call shape's first forward, then reused: forward is a lookup and
  // a launch. Copies of a Matmul share them.
  std::shared_ptr<MatmulPlans> plans_;
};

// The dequantized weight, fp32 [N, K] on the host, in the original column
// order (perm undone): exactly the values every backend multiplies by.
Tensor dequantize_weight(const PackedWeight& W);
// The unpacked form of a packed weight (integer weight/zeros as int8 or
// uint8, fp8 as uint8 bits; scale, zeros and bias as float32), on the host.
QuantizedWeight unpack_weight(const PackedWeight& W);

// ---------------------------------------------------------------- importers

// GPTQ (AutoGPTQ / GPTQModel): qweight i32 [K*bits/32, N] packed along K,
// element k in bits (k % (32/bits)) * bits; qzeros i32 [groups, N*bits/32]
// packed along N the same way; scales [groups, N]; g_idx i32 [K] (act-order:
// input channel k belongs to group g_idx[k]). bits 2, 4, 8.
struct GptqTensors {
  TensorRef qweight;
  TensorRef qzeros;
  TensorRef scales;
  TensorRef g_idx;  // optional
  TensorRef bias;   // optional [N]
};
struct GptqOptions {
  int bits = 4;
  int64_t group_size = 128;  // -1: one group over K
  // checkpoint_format "gptq" (v1) stores zero - 1; "gptq_v2" stores the zero.
  bool zero_plus_one = true;
  // quantized keeps the integer zeros; a v1 zero of 2^bits (stored all ones)
  // does not fit W's type and needs original (exact float zeros).
  ZerosMode zeros_mode = ZerosMode::quantized;
};
// W uintN with quantized (or original) zeros, scaling over groups. With a
// non-trivial g_idx, K is permuted so groups are contiguous (perm is set).
QuantizedWeight import_gptq(const GptqTensors& t, const GptqOptions& options = {});

// AWQ (AutoAWQ GEMM format): qweight i32 [K, N/8] packed along N, nibble i of
// word j holding column 8j + {0, 2, 4, 6, 1, 3, 5, 7}[i]; qzeros i32
// [groups, N/8] the same; scales [groups, N]; w = (q - z) * s. 4-bit.
struct AwqTensors {
  TensorRef qweight;
  TensorRef qzeros;
  TensorRef scales;
  TensorRef bias;  // optional [N]
};
QuantizedWeight import_awq(const AwqTensors& t, int64_t group_size = 128);

// bitsandbytes Linear4bit (docs/formats.md, "QuantState serialization"): packed u8 codes and a 4-bit QuantState
// of shape [N, K]; scale = absmax (restored from double quantization in fp32
// exactly as bitsandbytes does). The blocksize must divide K (a block may not
// cross rows); matmul_4bit runs on any state directly.
QuantizedWeight import_bnb_4bit(const TensorRef& packed, const QuantState& state, const TensorRef& bias = {});

// bitsandbytes matmul_4bit(A, packed, quant_state, bias): out [..., N] of A's dtype.
Tensor matmul_4bit(const TensorRef& A, const TensorRef& packed, const QuantState& state, const TensorRef& bias = {},
                   Stream stream = {});
// bitsandbytes gemv_4bit: matmul_4bit for an A holding one row.
Tensor gemv_4bit(const TensorRef& A, const TensorRef& packed, const QuantState& state, const TensorRef& bias = {},
                 Stream stream = {});

}  // namespace lowbit
