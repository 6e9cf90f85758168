// The safetensors header: dtype names and the validating parser.
//
// A file is: u64 little-endian N, N bytes of UTF-8 JSON (padded with spaces),
// then the data section. The JSON maps tensor names to {dtype, shape,
// data_offsets: [begin, end)} plus an optional "__metadata__" string map.
// The rules checked here are those of the safetensors reference reader
// (MAX_HEADER_SIZE, tensors covering the data section exactly), so a file
// accepted here loads there, and every rejection says what was wrong where.
//
// This file depends only on nlohmann-json and lowbit/error.h so the fuzzer
// (fuzz/) can build it alone.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/check.h"
#include "core/json_limits.h"
#include "lowbit/io.h"

namespace lowbit::io {
namespace {

using core::cat;

struct StDType {
  std::string_view name;
  int bits;
  std::optional<DType> lowbit;
};

// Every dtype of the safetensors format (0.6), with lowbit's equivalent.
constexpr StDType kDTypes[] = {
    {"BOOL", 8, std::nullopt},      {"F4", 4, std::nullopt},        {"F6_E2M3", 6, std::nullopt},
    {"F6_E3M2", 6, std::nullopt},   {"U8", 8, DType::u8},           {"I8", 8, DType::i8},
    {"F8_E5M2", 8, DType::f8_e5m2}, {"F8_E4M3", 8, DType::f8_e4m3}, {"F8_E8M0", 8, std::nullopt},
    {"I16", 16, std::nullopt},      {"U16", 16, std::nullopt},      {"F16", 16, DType::f16},
    {"BF16", 16, DType::bf16},      {"I32", 32, DType::i32},        {"U32", 32, std::nullopt},
    {"F32", 32, DType::f32},        {"C64", 64, std::nullopt},      {"F64", 64, std::nullopt},
    {"I64", 64, DType::i64},        {"U64", 64, std::nullopt},
};

const StDType* find_dtype(std::string_view name) {
  for (const StDType& d : kDTypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::string known_dtypes() {
  std::string s;
  for (const StDType& d : kDTypes) s += cat(s.empty() ? "" : ", ", d.name);
  return s;
}

// Every message starts with the file's name: a user with forty shards must
// know which one is broken.
class Problem {
 public:
  explicit Problem(std::string_view label) : label_(label) {}
  template <class... T>
  [[noreturn]] void operator()(T&&... parts) const {
    throw Error(ErrorCode::format_error, cat(label_, ": ", std::forward<T>(parts)...));
  }

 private:
  std::string_view label_;
};

std::string json_excerpt(const nlohmann::json& j) {
  std::string s = j.dump();
  if (s.size() > 60) {
    s.resize(57);
    s += "...";
  }
  return s;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
  return s + "]";
}

// The byte size of `numel` elements of `bits`, or false on overflow or a
// sub-byte tensor that does not end on a byte boundary.
bool byte_size(uint64_t numel, int bits, uint64_t* out) {
  uint64_t total_bits = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(bits), &total_bits)) return false;
  if (total_bits % 8 != 0) return false;
  *out = total_bits / 8;
  return true;
}

TensorInfo parse_entry(const Problem& problem, const std::string& name, const nlohmann::json& v, uint64_t data_size) {
  if (!v.is_object()) problem("tensor '", name, "' must be a JSON object (got ", json_excerpt(v), ")");
  for (const auto& [key, _] : v.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      problem("tensor '", name, "' has unexpected field '", key, "' (expected dtype, shape, data_offsets)");
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key)) problem("tensor '", name, "' has no '", key, "'");
  }
  TensorInfo t;
  t.name = name;
  const auto& dtype = v["dtype"];
  if (!dtype.is_string()) problem("tensor '", name, "': dtype must be a string (got ", json_excerpt(dtype), ")");
  t.dtype = dtype.get<std::string>();
  const StDType* d = find_dtype(t.dtype);
  if (d == nullptr) problem("tensor '", name, "': unknown dtype '", t.dtype, "' (known: ", known_dtypes(), ")");

  const auto& shape = v["shape"];
  if (!shape.is_array()) problem("tensor '", name, "': shape must be a list (got ", json_excerpt(shape), ")");
  uint64_t numel = 1;
  for (const auto& e : shape) {
    if (!e.is_number_unsigned() || e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      problem("tensor '", name, "': shape entries must be integers >= 0 (got ", json_excerpt(shape), ")");
    }
    t.shape.push_back(static_cast<int64_t>(e.get<uint64_t>()));
    if (__builtin_mul_overflow(numel, e.get<uint64_t>(), &numel)) {
      problem("tensor '", name, "': shape ", json_excerpt(shape), " overflows 64-bit element counts");
    }
  }
  uint64_t expected = 0;
  if (!byte_size(numel, d->bits, &expected)) {
    problem("tensor '", name, "': shape ", shape_text(t.shape), " of ", t.dtype,
            " does not fill a whole number of bytes (or overflows)");
  }

  const auto& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
    problem("tensor '", name, "': data_offsets must be [begin, end] with integers >= 0 (got ", json_excerpt(off), ")");
  }
  t.begin = off[0].get<uint64_t>();
  t.end = off[1].get<uint64_t>();
  if (t.end < t.begin) problem("tensor '", name, "': data_offsets [", t.begin, ", ", t.end, "] end before they begin");
  if (t.end - t.begin != expected) {
    problem("tensor '", name, "': ", t.dtype, " ", shape_text(t.shape), " needs ", expected,
            " bytes but data_offsets [", t.begin, ", ", t.end, "] span ", t.end - t.begin);
  }
  if (t.end > data_size) {
    problem("tensor '", name, "': data_offsets [", t.begin, ", ", t.end, "] end past the data section (", data_size,
            " bytes; is the file truncated?)");
  }
  return t;
}

std::map<std::string, std::string> parse_metadata(const Problem& problem, const nlohmann::json& v) {
  if (!v.is_object()) problem("__metadata__ must be a JSON object (got ", json_excerpt(v), ")");
  std::map<std::string, std::string> m;
  for (const auto& [k, value] : v.items()) {
    if (!value.is_string()) problem("__metadata__ '", k, "' must be a string (got ", json_excerpt(value), ")");
    m[k] = value.get<std::string>();
  }
  return m;
}

// Tensors sorted by offset must tile [0, data_size) exactly.
void check_coverage(const Problem& problem, std::vector<TensorInfo>& tensors, uint64_t data_size) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t cursor = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin < cursor) {
      problem("tensors '", prev->name, "' [", prev->begin, ", ", prev->end, ") and '", t.name, "' [", t.begin, ", ",
              t.end, ") overlap");
    }
    if (t.begin > cursor) {
      problem("bytes [", cursor, ", ", t.begin, ") of the data section belong to no tensor (before '", t.name, "')");
    }
    cursor = t.end;
    if (t.end > t.begin || prev == nullptr) prev = &t;
  }
  if (cursor != data_size) {
    problem("the data section holds ", data_size, " bytes but its tensors end at byte ", cursor,
            " (trailing bytes, or a header describing another file)");
  }
}

}  // namespace

int safetensors_dtype_bits(std::string_view name) {
  const StDType* d = find_dtype(name);
  return d ? d->bits : 0;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  const StDType* d = find_dtype(name);
  return d ? d->lowbit : std::nullopt;
}

std::string_view safetensors_dtype_name(DType dtype) {
  for (const StDType& d : kDTypes) {
    if (d.lowbit == dtype) return d.name;
  }
  throw Error(ErrorCode::unsupported_dtype,
              cat("safetensors: no safetensors dtype for lowbit ", dtype_name(dtype), " (store packed kinds as U8)"));
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size, std::string_view label) {
  const Problem problem(label);
  if (file_size == 0) problem("the file is empty (0 bytes); a safetensors file starts with an 8-byte header length");
  if (file_size < 8) problem("truncated: ", file_size, " bytes, fewer than the 8-byte header length field");
  if (bytes.size() < 8) {
    throw Error(ErrorCode::invalid_argument,
                cat(label, ": parse_safetensors_header needs the first 8 bytes (got ", bytes.size(), ")"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  if (n > kMaxHeaderBytes) {
    problem("header length ", n, " exceeds safetensors' limit of ", kMaxHeaderBytes,
            " bytes (a corrupted length, or not a safetensors file)");
  }
  if (n > file_size - 8) {
    problem("truncated: the header length field says ", n, " bytes but only ", file_size - 8, " bytes follow it");
  }
  if (bytes.size() < 8 + n) {
    throw Error(ErrorCode::invalid_argument,
                cat(label, ": parse_safetensors_header needs the ", 8 + n, " header bytes (got ", bytes.size(), ")"));
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  if (n < 2 || text[0] != '{') {
    problem("the header does not start with '{' (a corrupted length, or not a safetensors file)");
  }

  // Bounded before parsing: excerpts of a value are serialized by recursion.
  if (core::json_depth(text) > core::kMaxJsonDepth) {
    problem("the header nests JSON more than ", core::kMaxJsonDepth,
            " levels deep (a safetensors header nests 3; not a safetensors file)");
  }

  // nlohmann keeps the last of duplicated keys silently: a second entry for
  // a name would hide the first, so duplicates are caught while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  const nlohmann::json::parser_callback_t on_event = [&](int depth, nlohmann::json::parse_event_t event,
                                                         nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    problem("the header is not valid JSON (", e.what(), ")");
  }
  if (!duplicate.empty()) problem("the header names '", duplicate, "' more than once");
  if (!j.is_object()) problem("the header must be a JSON object (got ", j.type_name(), ")");

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  const uint64_t data_size = file_size - h.data_offset;
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__") {
      h.metadata = parse_metadata(problem, value);
    } else {
      h.tensors.push_back(parse_entry(problem, name, value, data_size));
    }
  }
  check_coverage(problem, h.tensors, data_size);
  return h;
}

}  // namespace lowbit::io
