// Round trips: quantize_checkpoint then dequantize_checkpoint gives every
// weight back under its name, dtype and shape, within the format's error;
// what the files decode to equals what the ops give in memory; GPTQ codes
// match an independent RTN written here; inspect agrees with the writer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/float_convert.h"
#include "harness/harness.h"
#include "io/gptq.h"
#include "io/io_test_util.h"
#include "lowbit/io.h"
#include "lowbit/ops/fp8_gemm.h"
#include "lowbit/ops/quant.h"

namespace lowbit {
namespace {

using test::ScratchDir;

struct Case {
  const char* name;
  io::Format format;
  bool double_quant;
  bool symmetric;
  double max_relative_rmse;  // RMSE over the weights' RMS, for N(0, σ) weights
  double bits_lo, bits_hi;   // every stored bit per weight of a 128x128 bf16 weight
};

const Case kCases[] = {
    // codes, absmax, the 16-entry map and the JSON state (small weights pay
    // for the map and the state; large ones approach 4.5 and 4.127)
    {"nf4", io::Format::nf4, false, true, 0.12, 4.55, 4.6},
    {"nf4-dq", io::Format::nf4, true, true, 0.12, 4.6, 4.8},
    {"fp4", io::Format::fp4, false, true, 0.16, 4.55, 4.6},
    {"int8", io::Format::int8, false, true, 0.01, 8.24, 8.26},  // + SCB per row
    {"fp8-block", io::Format::fp8_block, false, true, 0.05, 8.0, 8.01},
    // + fp16 scale and 4-bit zero per 128, and g_idx (int32 per column)
    {"int4-sym", io::Format::gptq, false, true, 0.15, 4.40, 4.41},
    {"int4-asym", io::Format::gptq, false, false, 0.12, 4.40, 4.41},
};

double relative_rmse(const TensorRef& a, const TensorRef& b) {
  const auto x = test::floats_of(a), y = test::floats_of(b);
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (double{x[i]} - y[i]) * (double{x[i]} - y[i]);
    ref += double{x[i]} * x[i];
  }
  return std::sqrt(err / ref);
}

TEST(CheckpointRoundTrip, EveryFormatComesBackUnderItsNamesWithinItsError) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    ScratchDir dir;
    test::write_tiny_checkpoint(dir / "in", 2);
    const std::string before = test::fingerprint(dir / "in");
    io::QuantizeOptions o;
    o.format = c.format;
    o.double_quant = c.double_quant;
    o.symmetric = c.symmetric;
    const auto report = io::quantize_checkpoint(dir / "in", dir / "q", o);
    EXPECT_EQ(test::fingerprint(dir / "in"), before) << "the input is never modified";

    const auto summary = io::inspect_checkpoint(dir / "q");
    EXPECT_EQ(summary.problems, 0u) << summary.detected;
    EXPECT_EQ(summary.detected.rfind(std::string(io::format_name(c.format)), 0), 0u) << summary.detected;
    for (const auto& w : summary.weights) {
      if (w.name == "model.layers.0.self_attn.q_proj.weight") {
        EXPECT_GE(w.bits_per_weight, c.bits_lo) << w.detail;
        EXPECT_LE(w.bits_per_weight, c.bits_hi) << w.detail;
        EXPECT_EQ(w.shape, (std::vector<int64_t>{128, 128}));
      }
    }

    io::DequantizeOptions d;
    const auto back = io::dequantize_checkpoint(dir / "q", dir / "back", d);
    EXPECT_EQ(back.weights, 14u);
    const auto in = io::Checkpoint::open(dir / "in");
    const auto out = io::Checkpoint::open(dir / "back");
    EXPECT_EQ(in.names(), out.names());
    EXPECT_EQ(out.files().size(), 2u);
    EXPECT_EQ(out.config_text().find("quantization_config"), std::string::npos);
    for (const std::string& name : in.names()) {
      const io::TensorInfo& a = *in.find(name);
      const io::TensorInfo& b = *out.find(name);
      EXPECT_EQ(a.dtype, b.dtype) << name;
      EXPECT_EQ(a.shape, b.shape) << name;
      const auto ab = in.file_of(name)->bytes(name), bb = out.file_of(name)->bytes(name);
      const bool quantized = std::any_of(report.tensors.begin(), report.tensors.end(),
                                         [&](const io::TensorReport& t) { return t.name == name && t.quantized; });
      if (!quantized) {
        EXPECT_TRUE(ab.size() == bb.size() && std::memcmp(ab.data(), bb.data(), ab.size()) == 0) << name;
        continue;
      }
      const double rel = relative_rmse(in.file_of(name)->view(name), out.file_of(name)->view(name));
      EXPECT_LT(rel, c.max_relative_rmse) << name;
      EXPECT_GT(rel, 0.0) << name;
    }
    // The report measured the same error (in float32, before the bf16 store).
    for (const auto& t : report.tensors) {
      if (!t.quantized) continue;
      EXPECT_LT(t.rmse / t.weight_rms, c.max_relative_rmse) << t.name;
      EXPECT_GT(t.cosine, 0.98) << t.name;
    }
  }
}

TEST(CheckpointRoundTrip, FilesDecodeExactlyAsTheOpsInMemory) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  const std::string w = "model.layers.1.mlp.down_proj.weight";
  const auto in = io::Checkpoint::open(dir / "in");
  const TensorRef original = in.file_of(w)->view(w);
  for (bool dq : {false, true}) {
    SCOPED_TRACE(dq ? "double quant" : "plain absmax");
    io::QuantizeOptions o;
    o.double_quant = dq;
    o.measure_error = false;
    io::quantize_checkpoint(dir / "in", dir / "q", o);
    io::dequantize_checkpoint(dir / "q", dir / "back", {});
    const auto [packed, state] = quantize_4bit(original, 64, Quant4Type::nf4, dq);
    const Tensor expected = dequantize_4bit(packed, state, DType::bf16);
    const auto back = io::Checkpoint::open(dir / "back");
    const auto bytes = back.file_of(w)->bytes(w);
    ASSERT_EQ(bytes.size(), expected.nbytes());
    EXPECT_EQ(std::memcmp(bytes.data(), expected.data(), bytes.size()), 0);
    std::filesystem::remove_all(dir / "q");
    std::filesystem::remove_all(dir / "back");
  }
}

TEST(CheckpointRoundTrip, DequantizeDtypeCanBeChosen) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  io::QuantizeOptions o;
  o.format = io::Format::int8;
  io::quantize_checkpoint(dir / "in", dir / "q", o);
  io::DequantizeOptions d;
  d.dtype = DType::f32;
  io::dequantize_checkpoint(dir / "q", dir / "back", d);
  const auto back = io::Checkpoint::open(dir / "back");
  EXPECT_EQ(back.find("lm_head.weight")->dtype, "BF16") << "kept tensors stay as they are";
  EXPECT_EQ(back.find("model.layers.0.mlp.up_proj.weight")->dtype, "F32");
}

// A finite weight whose group scale fp16 cannot hold would come back as
// garbage (the scale saturates at 65504): refused, naming row and columns.
TEST(CheckpointRoundTrip, GptqRefusesAGroupWhoseScaleOverflowsFp16) {
  for (bool sym : {true, false}) {
    SCOPED_TRACE(sym ? "symmetric" : "asymmetric");
    Tensor w = test::random_floats({8, 32}, DType::f32, 0.05f);
    w.ptr<float>()[2 * 32 + 20] = 2.0e6f;  // row 2, second group of 16
    io::detail::GptqSpec spec;
    spec.group_size = 16;
    spec.symmetric = sym;
    test::expect_error([&] { io::detail::gptq_quantize_rtn(w, spec, "x.weight"); }, ErrorCode::invalid_argument,
                       {"'x.weight' row 2, columns 16..31", "exceed fp16's largest value", "--exclude"});
    w.ptr<float>()[2 * 32 + 20] = 4.0e5f;  // a scale below 65504 either way: quantized
    EXPECT_NO_THROW(io::detail::gptq_quantize_rtn(w, spec, "x.weight"));
  }
}

// GPTQ's find_params + round to nearest, written out independently.
TEST(CheckpointRoundTrip, GptqCodesMatchAnIndependentRtn) {
  for (bool sym : {true, false}) {
    SCOPED_TRACE(sym ? "symmetric" : "asymmetric");
    const int64_t N = 8, K = 32, g = 16;
    Tensor w = test::random_floats({N, K}, DType::f32, 0.05f);
    w.ptr<float>()[3] = 0.3f;  // an outlier stretching one group
    io::detail::GptqSpec spec;
    spec.group_size = g;
    spec.symmetric = sym;
    const auto t = io::detail::gptq_quantize_rtn(w, spec);
    const Tensor back = io::detail::gptq_dequantize(t.qweight, t.qzeros, t.scales, t.g_idx, spec, DType::f32);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t gi = 0; gi < K / g; ++gi) {
        const float* x = w.ptr<float>() + n * K + gi * g;
        float lo = 0, hi = 0;
        for (int64_t k = 0; k < g; ++k) lo = std::min(lo, x[k]), hi = std::max(hi, x[k]);
        if (sym) hi = std::max(-lo, hi), lo = lo < 0 ? -hi : lo;
        float s = core::f16_to_f32(core::f32_to_f16((hi - lo) / 15.0f));
        float z = sym ? 8.0f : std::nearbyint(-lo / s);
        if (!sym && z == 0.0f) z = 1.0f, s = core::f16_to_f32(core::f32_to_f16(hi / 14.0f));
        EXPECT_EQ(core::f16_to_f32(t.scales.ptr<uint16_t>()[gi * N + n]), s);
        for (int64_t k = 0; k < g; ++k) {
          const float q = std::clamp(std::nearbyint(x[k] / s) + z, 0.0f, 15.0f);
          const int64_t col = gi * g + k;
          const uint32_t stored =
              (static_cast<uint32_t>(t.qweight.ptr<int32_t>()[(col / 8) * N + n]) >> (4 * (col % 8))) & 15u;
          EXPECT_EQ(stored, static_cast<uint32_t>(q)) << "n " << n << " k " << col;
          EXPECT_EQ(back.ptr<float>()[n * K + col], (q - z) * s);
        }
      }
    }
  }
}

}  // namespace
}  // namespace lowbit

namespace lowbit {
namespace {

// Files from other GPTQ tools: 2 and 8 bits, v2 zeros, one group per row.
TEST(CheckpointRoundTrip, GptqBitWidthsAndZeroFormatsReadBack) {
  const Tensor w = test::random_floats({16, 64}, DType::f32, 0.05f);
  for (int bits : {2, 4, 8}) {
    for (bool v2 : {false, true}) {
      for (int64_t group : {int64_t{-1}, int64_t{32}}) {
        SCOPED_TRACE(testing::Message() << bits << " bits, v2 " << v2 << ", group " << group);
        io::detail::GptqSpec spec;
        spec.bits = bits;
        spec.v2_zeros = v2;
        spec.group_size = group;
        spec.symmetric = false;
        const auto t = io::detail::gptq_quantize_rtn(w, spec);
        EXPECT_EQ(t.qweight.size(0), 64 * bits / 32);
        EXPECT_EQ(t.qzeros.size(1), 16 * bits / 32);
        const Tensor back = io::detail::gptq_dequantize(t.qweight, t.qzeros, t.scales, t.g_idx, spec, DType::f32);
        // One step of the row's group bounds each error: half a step of
        // rounding, and up to half a step more at the range's ends, where
        // the rounded zero point shifts the grid (GPTQ's own behaviour). The
        // step is max/(maxq-1) where a zero point of 0 moved to 1.
        const int64_t g = group > 0 ? group : 64;
        const double maxq = (1 << bits) - 1;
        for (int64_t i = 0; i < w.numel(); ++i) {
          const float* x = w.ptr<float>() + i / g * g;
          float lo = 0, hi = 0;
          for (int64_t k = 0; k < g; ++k) lo = std::min(lo, x[k]), hi = std::max(hi, x[k]);
          const double step = 1.01 * std::max((hi - lo) / maxq, hi / (maxq - 1));
          EXPECT_LE(std::fabs(back.ptr<float>()[i] - w.ptr<float>()[i]), step) << i;
        }
      }
    }
  }
}

TEST(CheckpointRoundTrip, Fp8BlockCheckpointRunsAForwardPass) {
  // A DeepSeek-format layer as a serving stack reads it: the fp8 `weight` and
  // its `weight_scale_inv`, activations through act_quant, then fp8_gemm.
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  io::QuantizeOptions o;
  o.format = io::Format::fp8_block;
  o.measure_error = false;
  io::quantize_checkpoint(dir / "in", dir / "q", o);
  const std::string w = "model.layers.1.mlp.down_proj.weight";
  const auto in = io::Checkpoint::open(dir / "in");
  const auto q = io::Checkpoint::open(dir / "q");
  const Tensor weight = q.file_of(w)->load(w), scale = q.file_of(w)->load(w + "_scale_inv");
  ASSERT_EQ(weight.dtype(), DType::f8_e4m3);
  const std::vector<float> original = test::floats_of(in.file_of(w)->view(w));
  const int64_t N = weight.size(0), K = weight.size(1), M = 5;
  std::vector<float> x(static_cast<size_t>(M * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
  const Tensor xt = Tensor::copy_of(TensorRef::contiguous(x.data(), DType::f32, {M, K}), Device::cpu());
  const Fp8Quantized a = act_quant(xt);
  const Tensor out = fp8_gemm(a.values, a.scale, weight, scale, DType::f32);
  double err = 0.0, ref = 0.0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double exact = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        exact += static_cast<double>(x[static_cast<size_t>(m * K + k)]) * original[static_cast<size_t>(n * K + k)];
      }
      const double d = out.ptr<float>()[m * N + n] - exact;
      err += d * d;
      ref += exact * exact;
    }
  }
  EXPECT_LT(std::sqrt(err / ref), 0.06) << "fp8 rounding of both operands is a few percent";
}

}  // namespace
}  // namespace lowbit
