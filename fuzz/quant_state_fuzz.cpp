// libFuzzer target: the input is the packed JSON of a bitsandbytes 4-bit
// QuantState ("<weight>.quant_state.bitsandbytes__nf4", the bytes a
// checkpoint stores), given to quant_state_from_dict with the tensors that
// come with it in a file. Their sizes follow what the input claims (shape,
// blocksize, nested_blocksize) so that parsing reaches the tensor checks.
// from_dict must throw lowbit::Error (format_error) or give a consistent
// state that serializes and reads back to itself, packed and unpacked;
// anything else (a crash, a sanitizer report, another exception) is a bug.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/json_limits.h"
#include "lowbit/error.h"
#include "lowbit/quant_state.h"

namespace {

using lowbit::DType;
using lowbit::QuantState;
using lowbit::QuantStateDict;
using lowbit::Tensor;

const std::string kWeight = "model.layers.0.mlp.down_proj.weight";
constexpr int64_t kMaxElements = int64_t{1} << 20;  // bigger claims get tensors of the wrong size

void require(bool ok) {
  if (!ok) std::abort();
}

Tensor filled(int64_t n, DType dtype) {
  Tensor t = Tensor::empty({n}, dtype);
  if (n > 0) std::memset(t.data(), 0x3c, t.nbytes());
  return t;
}

// What the input claims, read leniently: anything unreadable sizes the
// tensors for one block.
struct Claim {
  bool nested = false;
  bool fp4 = false;
  int64_t nblocks = 1;
  int64_t nested_blocks = 1;
};

int64_t int_field(const nlohmann::json& j, const char* key, int64_t fallback) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return fallback;
  const int64_t v = it->get<int64_t>();
  return v >= 1 && v <= 4096 ? v : fallback;
}

Claim claim_of(std::string text) {
  Claim c;
  if (lowbit::core::json_depth(text) > lowbit::core::kMaxJsonDepth) return c;
  // Python's NaN and Infinity (a nested_offset may be one) read as 1 here.
  for (const std::string_view word : {"NaN", "Infinity"}) {
    for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
      text.replace(at, word.size(), "1" + std::string(word.size() - 1, ' '));
    }
  }
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return c;
  c.nested = j.contains("nested_blocksize") || j.contains("nested_offset");
  c.fp4 = j.value("quant_type", nlohmann::json()) == "fp4";
  const auto shape = j.find("shape");
  int64_t numel = 1;
  if (shape != j.end() && shape->is_array()) {
    for (const auto& d : *shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxElements) return c;
      numel *= d.get<int64_t>();
      if (numel > kMaxElements) return c;
    }
  }
  const int64_t b = int_field(j, "blocksize", 64);
  c.nblocks = (numel + b - 1) / b;
  const int64_t nb = int_field(j, "nested_blocksize", 256);
  c.nested_blocks = (c.nblocks + nb - 1) / nb;
  return c;
}

bool same_float(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

float offset_of(const QuantState& s) { return s.offset.ptr<const float>()[0]; }

void require_same(const QuantState& a, const QuantState& b) {
  require(a.quant_type == b.quant_type && a.blocksize == b.blocksize && a.dtype == b.dtype && a.shape == b.shape);
  require(a.absmax.numel() == b.absmax.numel() && a.absmax.dtype() == b.absmax.dtype());
  require(a.nested() == b.nested());
  if (a.nested()) {
    require(a.state2->blocksize == b.state2->blocksize && a.state2->dtype == b.state2->dtype);
    require(a.state2->absmax.numel() == b.state2->absmax.numel());
    require(same_float(offset_of(a), offset_of(b)) || (std::isnan(offset_of(a)) && std::isnan(offset_of(b))));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const Claim c = claim_of(text);
  const std::string p = kWeight + ".";
  QuantStateDict d;
  Tensor blob = Tensor::empty({static_cast<int64_t>(size)}, DType::u8);
  if (size > 0) std::memcpy(blob.data(), data, size);
  d[p + "quant_state.bitsandbytes__" + (c.fp4 ? "fp4" : "nf4")] = blob;
  d[kWeight] = filled(1, DType::u8);  // the packed weight comes along in a file
  d[p + "absmax"] = filled(c.nblocks, c.nested ? DType::u8 : DType::f32);
  d[p + "quant_map"] = filled(16, DType::f32);
  if (c.nested) {
    d[p + "nested_absmax"] = filled(c.nested_blocks, DType::f32);
    d[p + "nested_quant_map"] = filled(256, DType::f32);
  }
  QuantState s;
  try {
    s = lowbit::quant_state_from_dict(d);
  } catch (const lowbit::Error& e) {
    require(e.code() == lowbit::ErrorCode::format_error);
    return 0;
  }
  require(s.quant_type == "nf4" || s.quant_type == "fp4");
  require(s.blocksize >= 32 && s.blocksize <= 4096 && std::has_single_bit(static_cast<uint64_t>(s.blocksize)));
  require(s.absmax.numel() == (s.numel() + s.blocksize - 1) / s.blocksize);
  require(s.code.numel() == 16 && s.code.dtype() == DType::f32);
  // A state read from a file must be written back as bitsandbytes would, and
  // read again to the same state.
  for (const bool packed : {true, false}) {
    const QuantState again = lowbit::quant_state_from_dict(lowbit::quant_state_as_dict(s, packed));
    require_same(s, again);
  }
  return 0;
}
