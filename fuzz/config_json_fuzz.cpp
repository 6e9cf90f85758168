// libFuzzer target: the input is a model folder's config.json, read as the
// checkpoint commands read it: the JSON bounds (read_json_text), its
// quantization_config (inspect, dequantize), torch_dtype (dequantize) and the
// rewrite that sets or drops quantization_config (quantize, dequantize).
// Each step must succeed or throw lowbit::Error (format_error); anything else
// (a crash, a sanitizer report, another exception) is a bug. A rewritten
// config must read back as the format written into it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "io/fs_util.h"
#include "io/pipeline.h"
#include "io/quant_config.h"
#include "lowbit/error.h"

namespace {

using namespace lowbit::io;
using namespace lowbit::io::detail;

const std::string kLabel = "fuzz/config.json";

void require(bool ok) {
  if (!ok) std::abort();
}

void expect_format_error(const lowbit::Error& e) { require(e.code() == lowbit::ErrorCode::format_error); }

// qc[key] is absent, null or the number `v`.
bool same_number(const nlohmann::json& qc, const char* key, int64_t v) {
  const auto it = qc.find(key);
  return it == qc.end() || it->is_null() || (it->is_number() && it->get<double>() == static_cast<double>(v));
}

// Writes `format`'s quantization_config into `text` as quantize does, and
// reads it back as inspect does.
void round_trip(const std::string& text, Format format, const LayoutParams& p) {
  const std::string qc = quantization_config(format, p, {"lm_head"}, "bfloat16").dump();
  const std::string out = rewrite_config(text, qc, kLabel);
  check_json_bounds(out, kLabel);  // never refused: the rewrite nests no deeper than its input
  const ReadConfig back = read_quantization_config(out, "", kLabel);
  require(back.present && back.format == format);
  if (format == Format::gptq) require(back.params.bits == p.bits && back.params.group_size == p.group_size);
  if (format == Format::fp8_block) require(back.params.blocksize == p.blocksize);
  if (format == Format::nf4) require(back.params.double_quant == p.double_quant);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    check_json_bounds(text, kLabel);
  } catch (const lowbit::Error& e) {
    expect_format_error(e);
    return 0;  // read_json_text refuses the file: nothing else sees it
  }
  try {
    const ReadConfig r = read_quantization_config(text, "", kLabel);
    if (r.present) require(nlohmann::json::accept(r.json));
    if (r.format == Format::gptq) {
      require(r.params.bits == 2 || r.params.bits == 4 || r.params.bits == 8);
      // What was read is what the file says, not a wrapped or narrowed integer.
      const auto qc = nlohmann::json::parse(r.json);
      require(same_number(qc, "bits", r.params.bits) && same_number(qc, "group_size", r.params.group_size));
    }
    if (r.format == Format::fp8_block) require(r.params.blocksize >= 0);
  } catch (const lowbit::Error& e) {
    expect_format_error(e);
  }
  if (const auto t = config_torch_dtype(text)) {
    require(*t == lowbit::DType::f32 || *t == lowbit::DType::f16 || *t == lowbit::DType::bf16);
  }
  try {
    const std::string dropped = rewrite_config(text, "", kLabel);
    const ReadConfig back = read_quantization_config(dropped, "", kLabel);
    require(!back.present);
    LayoutParams p;
    p.double_quant = true;
    round_trip(text, Format::nf4, p);
    round_trip(text, Format::int8, LayoutParams{});
    p.blocksize = 128;
    round_trip(text, Format::fp8_block, p);
    p.bits = 4;
    p.group_size = 32;
    round_trip(text, Format::gptq, p);
  } catch (const lowbit::Error& e) {
    expect_format_error(e);
  }
  return 0;
}
