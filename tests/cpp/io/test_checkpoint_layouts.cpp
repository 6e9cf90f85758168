// Golden tests of what quantize_checkpoint writes for each format: exact key
// names, dtypes, shapes, the quant_state JSON bytes, the quantization_config
// each loader expects, side files, shards and their index.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/float_convert.h"
#include "harness/harness.h"
#include "io/io_test_util.h"
#include "lowbit/code_maps.h"
#include "lowbit/io.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::ScratchDir;

const std::string kQ = "model.layers.0.self_attn.q_proj";  // [128, 128]
const std::string kGate = "model.layers.1.mlp.gate_proj";  // [256, 128]
const std::string kDown = "model.layers.1.mlp.down_proj";  // [128, 256]

struct Quantized {
  ScratchDir dir;
  io::QuantizeReport report;
  io::Checkpoint out() const { return io::Checkpoint::open(dir / "out"); }
  json config() const { return json::parse(test::read_bytes(dir / "out" / "config.json")); }
};

std::unique_ptr<Quantized> quantize(io::QuantizeOptions o, int shards = 1) {
  auto q = std::make_unique<Quantized>();
  test::write_tiny_checkpoint(q->dir / "in", shards);
  q->report = io::quantize_checkpoint(q->dir / "in", q->dir / "out", o);
  return q;
}

io::QuantizeOptions opts(io::Format f) {
  io::QuantizeOptions o;
  o.format = f;
  return o;
}

void expect_key(const io::Checkpoint& c, const std::string& key, const std::string& dtype, std::vector<int64_t> shape) {
  const io::TensorInfo* t = c.find(key);
  ASSERT_NE(t, nullptr) << "missing key " << key;
  EXPECT_EQ(t->dtype, dtype) << key;
  EXPECT_EQ(t->shape, shape) << key;
}

// The names of quantized and kept weights are the same in every format.
void expect_kept_as_they_were(const io::Checkpoint& c) {
  expect_key(c, "model.embed_tokens.weight", "BF16", {96, 128});
  expect_key(c, "lm_head.weight", "BF16", {96, 128});
  expect_key(c, "model.norm.weight", "F32", {128});
  expect_key(c, "model.layers.0.self_attn.q_proj.bias", "BF16", {128});
  expect_key(c, "model.position_ids", "I64", {1, 16});
}

std::string blob_text(const io::Checkpoint& c, const std::string& key) {
  const auto bytes = c.file_of(key)->bytes(key);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

TEST(CheckpointLayouts, Nf4KeysDtypesShapesAndQuantState) {
  const auto q = quantize(opts(io::Format::nf4));
  const auto c = q->out();
  const std::string w = kQ + ".weight";
  expect_key(c, w, "U8", {128 * 128 / 2, 1});
  expect_key(c, w + ".absmax", "F32", {128 * 128 / 64});
  expect_key(c, w + ".quant_map", "F32", {16});
  expect_key(c, w + ".quant_state.bitsandbytes__nf4", "U8", {80});
  EXPECT_EQ(c.find(w + ".nested_absmax"), nullptr);
  EXPECT_EQ(blob_text(c, w + ".quant_state.bitsandbytes__nf4"),
            R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [128, 128]})");
  const auto table = get_4bit_type("nf4");
  const auto map = test::floats_of(c.file_of(w)->view(w + ".quant_map"));
  EXPECT_EQ(map, std::vector<float>(table.begin(), table.end()));
  expect_key(c, kGate + ".weight.absmax", "F32", {256 * 128 / 64});
  expect_kept_as_they_were(c);
  EXPECT_EQ(c.names().size(), 8u + 14 * 4) << "4 keys per quantized weight";
}

TEST(CheckpointLayouts, Fp4WithDoubleQuantAndBlocksize128) {
  io::QuantizeOptions o = opts(io::Format::fp4);
  o.double_quant = true;
  o.blocksize = 128;
  const auto q = quantize(o);
  const auto c = q->out();
  const std::string w = kGate + ".weight";
  const int64_t blocks = 256 * 128 / 128;
  expect_key(c, w, "U8", {256 * 128 / 2, 1});
  expect_key(c, w + ".absmax", "U8", {blocks});
  expect_key(c, w + ".quant_map", "F32", {16});
  expect_key(c, w + ".nested_absmax", "F32", {(blocks + 255) / 256});
  expect_key(c, w + ".nested_quant_map", "F32", {256});
  const std::string text = blob_text(c, w + ".quant_state.bitsandbytes__fp4");
  const std::string head = R"({"quant_type": "fp4", "blocksize": 128, "dtype": "bfloat16", "shape": [256, 128], )"
                           R"("nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": )";
  EXPECT_EQ(text.substr(0, head.size()), head);
  const json j = json::parse(text);
  EXPECT_TRUE(j["nested_offset"].is_number_float());
  const json qc = q->config()["quantization_config"];
  EXPECT_EQ(qc["bnb_4bit_quant_type"], "fp4");
  EXPECT_EQ(qc["bnb_4bit_use_double_quant"], true);
}

TEST(CheckpointLayouts, BitsandbytesConfigAsTransformersWritesIt) {
  const auto q = quantize(opts(io::Format::nf4));
  const json config = q->config();
  EXPECT_EQ(config["model_type"], "llama") << "the rest of config.json is kept";
  EXPECT_EQ(config["quantization_config"], json::parse(R"({
    "_load_in_4bit": true, "_load_in_8bit": false, "bnb_4bit_compute_dtype": "bfloat16",
    "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": false,
    "llm_int8_enable_fp32_cpu_offload": false, "llm_int8_has_fp16_weight": false,
    "llm_int8_skip_modules": ["lm_head", "model.embed_tokens"], "llm_int8_threshold": 6.0,
    "load_in_4bit": true, "load_in_8bit": false, "quant_method": "bitsandbytes"})"));
  const auto meta = q->out().files().front().metadata();
  EXPECT_EQ(meta.at("format"), "pt");
  EXPECT_EQ(json::parse(meta.at("quantization_config")), config["quantization_config"]);
}

TEST(CheckpointLayouts, Int8Linear8bitLtKeys) {
  const auto q = quantize(opts(io::Format::int8));
  const auto c = q->out();
  expect_key(c, kGate + ".weight", "I8", {256, 128});
  expect_key(c, kGate + ".SCB", "F32", {256});
  expect_key(c, kGate + ".weight_format", "U8", {});
  EXPECT_EQ(c.file_of(kGate + ".weight_format")->bytes(kGate + ".weight_format")[0], 0) << "0: row-major";
  EXPECT_EQ(c.find(kGate + ".weight.SCB"), nullptr) << "SCB hangs off the module, not the weight";
  expect_kept_as_they_were(c);
  const json qc = q->config()["quantization_config"];
  EXPECT_EQ(qc["load_in_8bit"], true);
  EXPECT_EQ(qc["load_in_4bit"], false);
  EXPECT_EQ(qc["quant_method"], "bitsandbytes");
  EXPECT_EQ(qc["llm_int8_skip_modules"], json::parse(R"(["lm_head", "model.embed_tokens"])"));
}

// What transformers' load_in_8bit computes from the same weight
// (Int8Params._quantize): the weight cast to fp16, SCB = row absmax,
// code = round-half-even(w16 * (127 * (1 / SCB))) — written out here, not
// through lowbit's code.
void expect_int8_as_transformers(const io::Checkpoint& in, const io::Checkpoint& out, const std::string& w) {
  const std::vector<float> x = test::floats_of(in.file_of(w)->view(w));
  const TensorRef codes = out.file_of(w)->view(w);
  const std::string scb_key = w.substr(0, w.size() - 7) + ".SCB";
  const TensorRef scb = out.file_of(scb_key)->view(scb_key);
  const int64_t N = codes.size(0), K = codes.size(1);
  int64_t code_mismatches = 0, scb_mismatches = 0;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> row(static_cast<size_t>(K));
    float absmax = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      row[static_cast<size_t>(k)] = core::f16_to_f32(core::f32_to_f16(x[static_cast<size_t>(n * K + k)]));
      absmax = std::max(absmax, std::fabs(row[static_cast<size_t>(k)]));
    }
    scb_mismatches += scb.ptr<const float>()[n] != absmax;
    const float factor = 127.0f * (1.0f / absmax);
    for (int64_t k = 0; k < K; ++k) {
      const auto want = static_cast<int8_t>(std::nearbyint(row[static_cast<size_t>(k)] * factor));
      code_mismatches += codes.ptr<const int8_t>()[n * K + k] != want;
    }
  }
  EXPECT_EQ(scb_mismatches, 0) << w << ": SCB rows differing from transformers' (of " << N << ")";
  EXPECT_EQ(code_mismatches, 0) << w << ": codes differing from transformers' (of " << N * K << ")";
}

TEST(CheckpointLayouts, Int8CodesAndScalesAsTransformersComputesThem) {
  // An fp32 checkpoint: transformers quantizes the fp16 cast of each weight,
  // so SCB is the fp16-rounded absmax and the codes follow the rounded values.
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in", 1, DType::f32);
  io::QuantizeOptions o = opts(io::Format::int8);
  io::quantize_checkpoint(dir / "in", dir / "out", o);
  const auto in = io::Checkpoint::open(dir / "in");
  const auto out = io::Checkpoint::open(dir / "out");
  for (const std::string& m : {kQ, kGate, kDown}) expect_int8_as_transformers(in, out, m + ".weight");

  // A row where 127 * (1 / absmax) (bitsandbytes) and 127 / absmax round to
  // different floats, with a value whose code then differs: found by search
  // over fp16 values, so the rule is checked whatever the random weights are.
  float absmax = 0.0f, value = 0.0f;
  for (uint16_t a = core::f32_to_f16(0.01f); a < core::f32_to_f16(0.1f) && value == 0.0f; ++a) {
    const float fa = core::f16_to_f32(a);
    if (127.0f / fa == 127.0f * (1.0f / fa)) continue;
    for (uint16_t v = 1; v < a; ++v) {
      const float fv = core::f16_to_f32(v);
      if (std::nearbyint(fv * (127.0f / fa)) != std::nearbyint(fv * (127.0f * (1.0f / fa)))) {
        absmax = fa, value = fv;
        break;
      }
    }
  }
  ASSERT_NE(value, 0.0f) << "no fp16 pair separates the two rules";
  ScratchDir crafted;
  fs::create_directories(crafted / "in");
  test::write_bytes(crafted / "in" / "config.json", R"({"model_type": "llama", "torch_dtype": "float16"})");
  Tensor w = Tensor::empty({2, 4}, DType::f16);
  const float vals[8] = {absmax, value, -value / 2, 0.0f, -absmax, value, 0.25f * absmax, absmax / 3};
  for (int i = 0; i < 8; ++i) w.ptr<uint16_t>()[i] = core::f32_to_f16(vals[i]);
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  io::save_safetensors(crafted / "in" / "model.safetensors", {{name, w.ref()}}, {{"format", "pt"}});
  io::quantize_checkpoint(crafted / "in", crafted / "out", o);
  expect_int8_as_transformers(io::Checkpoint::open(crafted / "in"), io::Checkpoint::open(crafted / "out"), name);
}

TEST(CheckpointLayouts, Fp8BlockDeepSeekKeysAndConfig) {
  const auto q = quantize(opts(io::Format::fp8_block));
  const auto c = q->out();
  expect_key(c, kQ + ".weight", "F8_E4M3", {128, 128});
  expect_key(c, kQ + ".weight_scale_inv", "F32", {1, 1});
  expect_key(c, kGate + ".weight_scale_inv", "F32", {2, 1});
  expect_key(c, kDown + ".weight_scale_inv", "F32", {1, 2});
  expect_kept_as_they_were(c);
  EXPECT_EQ(q->config()["quantization_config"], json::parse(R"({
    "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128],
    "modules_to_not_convert": ["lm_head", "model.embed_tokens"]})"));
}

TEST(CheckpointLayouts, GptqInt4KeysPackingAndConfig) {
  const auto q = quantize(opts(io::Format::gptq));
  const auto c = q->out();
  expect_key(c, kQ + ".qweight", "I32", {128 / 8, 128});
  expect_key(c, kQ + ".qzeros", "I32", {1, 128 / 8});
  expect_key(c, kQ + ".scales", "F16", {1, 128});
  expect_key(c, kQ + ".g_idx", "I32", {128});
  expect_key(c, kDown + ".qweight", "I32", {256 / 8, 128});
  expect_key(c, kDown + ".qzeros", "I32", {2, 16});
  expect_key(c, kDown + ".scales", "F16", {2, 128});
  EXPECT_EQ(c.find(kQ + ".weight"), nullptr);
  expect_key(c, kQ + ".bias", "BF16", {128});
  // Symmetric v1 zeros: 8 stored as 7 in every nibble.
  const TensorRef z = c.file_of(kDown + ".qzeros")->view(kDown + ".qzeros");
  for (int64_t i = 0; i < z.numel(); ++i) EXPECT_EQ(static_cast<uint32_t>(z.ptr<int32_t>()[i]), 0x77777777u);
  const TensorRef g = c.file_of(kDown + ".g_idx")->view(kDown + ".g_idx");
  for (int64_t k = 0; k < 256; ++k) EXPECT_EQ(g.ptr<int32_t>()[k], k / 128);
  const json qc = q->config()["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "gptq");
  EXPECT_EQ(qc["bits"], 4);
  EXPECT_EQ(qc["group_size"], 128);
  EXPECT_EQ(qc["sym"], true);
  EXPECT_EQ(qc["desc_act"], false);
  EXPECT_EQ(qc["checkpoint_format"], "gptq");
  EXPECT_EQ(qc["meta"]["method"], "rtn") << "say plainly that this is not Hessian-based GPTQ";
  const json autogptq = json::parse(test::read_bytes(q->dir / "out" / "quantize_config.json"));
  EXPECT_EQ(autogptq["bits"], 4);
  EXPECT_EQ(autogptq["group_size"], 128);
}

TEST(CheckpointLayouts, GptqAsymmetricGroup64) {
  io::QuantizeOptions o = opts(io::Format::gptq);
  o.symmetric = false;
  o.group_size = 64;
  const auto q = quantize(o);
  const auto c = q->out();
  expect_key(c, kDown + ".qzeros", "I32", {4, 16});
  expect_key(c, kDown + ".scales", "F16", {4, 128});
  const json qc = q->config()["quantization_config"];
  EXPECT_EQ(qc["sym"], false);
  EXPECT_EQ(qc["group_size"], 64);
  const auto s = io::inspect_checkpoint(q->dir / "out");
  EXPECT_EQ(s.detected, "gptq (int4, group 64, asymmetric)");
}

TEST(CheckpointLayouts, SideFilesAreCopiedAndOtherWeightFormatsSkipped) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  test::write_bytes(dir / "in" / "pytorch_model.bin", "unconverted weights");
  fs::create_directories(dir / "in" / ".cache");
  test::write_bytes(dir / "in" / ".cache" / "junk", "x");
  const auto r = io::quantize_checkpoint(dir / "in", dir / "out", opts(io::Format::nf4));
  EXPECT_EQ(r.copied_files, (std::vector<std::string>{"README.md", "extra/notes.txt", "tokenizer.json"}));
  EXPECT_EQ(r.skipped_files, std::vector<std::string>{"pytorch_model.bin"});
  EXPECT_TRUE(r.wrote_config);
  EXPECT_EQ(test::read_bytes(dir / "out" / "extra" / "notes.txt"), "side file in a subfolder\n");
  EXPECT_FALSE(fs::exists(dir / "out" / "pytorch_model.bin"));
  EXPECT_FALSE(fs::exists(dir / "out" / ".cache"));
}

TEST(CheckpointLayouts, ShardsKeepTheirNamesAndTheIndexMatches) {
  const auto q = quantize(opts(io::Format::nf4), 3);
  const json index = json::parse(test::read_bytes(q->dir / "out" / "model.safetensors.index.json"));
  const auto c = q->out();
  EXPECT_EQ(c.files().size(), 3u);
  uint64_t total = 0;
  for (const auto& f : c.files()) {
    for (const auto& t : f.tensors()) {
      total += t.nbytes();
      EXPECT_EQ(index["weight_map"][t.name], f.path().filename().string()) << t.name;
    }
  }
  EXPECT_EQ(index["weight_map"].size(), c.names().size());
  EXPECT_EQ(index["metadata"]["total_size"], total);
}

TEST(CheckpointLayouts, IncludeAndExcludePatterns) {
  io::QuantizeOptions o = opts(io::Format::int8);
  o.include = {"lm_head.*"};
  o.exclude = {"*.mlp.*", "*.nothing.*"};
  const auto q = quantize(o);
  const auto c = q->out();
  expect_key(c, "lm_head.weight", "I8", {96, 128});
  expect_key(c, kGate + ".weight", "BF16", {256, 128});
  expect_key(c, kQ + ".weight", "I8", {128, 128});
  EXPECT_EQ(q->report.unused_patterns, std::vector<std::string>{"*.nothing.*"});
  const json skip = q->config()["quantization_config"]["llm_int8_skip_modules"];
  EXPECT_NE(std::find(skip.begin(), skip.end(), kGate), skip.end()) << skip.dump();
  EXPECT_EQ(std::find(skip.begin(), skip.end(), "lm_head"), skip.end()) << skip.dump();
}

TEST(CheckpointLayouts, ASingleFileCarriesItsConfigInTheMetadata) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  fs::create_directories(dir / "out");
  const auto r = io::quantize_checkpoint(dir / "in" / "model.safetensors", dir / "out", opts(io::Format::fp8_block));
  EXPECT_EQ(r.output.filename(), "model.safetensors") << "a folder output takes the input's file name";
  EXPECT_FALSE(r.wrote_config);
  const auto s = io::inspect_checkpoint(dir / "out" / "model.safetensors");
  EXPECT_EQ(s.problems, 0u);
  EXPECT_EQ(json::parse(s.quantization_config)["quant_method"], "fp8");
}

}  // namespace
}  // namespace lowbit
